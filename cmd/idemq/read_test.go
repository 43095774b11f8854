package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/queue"
)

// listed parses ls --json output.
func listed(t *testing.T, r result) []recordView {
	t.Helper()
	var out []recordView
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out), "ls --json wrote %q", r.stdout)
	return out
}

func idsOf(vs []recordView) []queue.ID {
	ids := []queue.ID{}
	for _, v := range vs {
		ids = append(ids, v.ID)
	}
	return ids
}

func TestLsTable(t *testing.T) {
	file, ids := queueFile(t,
		intent(t, secretURL, "a", idem.WithLane("payments")),
		intent(t, secretURL, "b"),
	)
	r := ok(t, file, "ls")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 3, "a header and a line per record:\n%s", r.stdout)
	assert.Regexp(t, `^ID\s+STATE\s+OUTCOME\s+LANE\s+AGE\s+ATTEMPTS\s+REQUEST\s+LAST$`, lines[0])
	assert.Regexp(t, `^`+ids[0].String()+`\s+pending\s+-\s+payments\s+\d+s\s+0\s+POST http://127.0.0.1:1/pay\s+-$`, lines[1])
	assert.Regexp(t, `^`+ids[1].String()+`\s+pending\s+-\s+-\s+`, lines[2], "the default lane shows as -")
	noSecret(t, r)
}

func TestLsJSONAndFilters(t *testing.T) {
	file, ids := queueFile(t,
		intent(t, secretURL, "a", idem.WithLane("payments")),
		intent(t, secretURL, "b", idem.WithLane("refunds")),
		intent(t, secretURL, "c"),
	)
	tests := []struct {
		name string
		args []string
		want []queue.ID
	}{
		{"all", nil, ids},
		{"pending", []string{"--state", "pending"}, ids},
		{"two states", []string{"--state", "failed,pending"}, ids},
		{"done", []string{"--state", "done"}, nil},
		{"lane", []string{"--lane", "refunds"}, ids[1:2]},
		{"default lane", []string{"--lane", ""}, ids[2:]},
		{"older than an hour", []string{"--older-than", "1h"}, nil},
		{"older than nothing", []string{"--older-than", "0s"}, ids},
		{"limit", []string{"--limit", "2"}, ids[:2]},
		{"lane and limit", []string{"--lane", "payments", "--limit", "1"}, ids[:1]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ok(t, file, append([]string{"ls", "--json"}, tt.args...)...)
			got := idsOf(listed(t, r))
			want := append([]queue.ID{}, tt.want...)
			assert.Equal(t, want, got, "ls --json %v", tt.args)
			noSecret(t, r)
		})
	}

	v := listed(t, ok(t, file, "ls", "--json", "--limit", "1"))[0]
	assert.Equal(t, "pending", v.State)
	assert.Nil(t, v.Outcome, "null until the record settles")
	assert.Equal(t, "payments", v.Lane)
	assert.Equal(t, "POST", v.Method)
	assert.Equal(t, "http://127.0.0.1:1/pay", v.URL)
	assert.Equal(t, 1, v.BodyBytes)
	assert.NotNil(t, v.EnqueuedAt)
	assert.Nil(t, v.FirstSentAt)
}

func TestShowRedacts(t *testing.T) {
	generated := intent(t, secretURL, `{"amount":100}`, idem.WithLane("payments"), idem.WithHeader("X-Request-Source", "till-4"))
	supplied := intent(t, "https://api.example/refund?sig=abc#frag", "x", idem.WithKey("order-42"))
	file, ids := queueFile(t, generated, supplied)
	key := generated.Key()

	t.Run("text", func(t *testing.T) {
		r := ok(t, file, "show", ids[0].String())
		for _, want := range []string{
			"id:", "state:        pending", "outcome:      -", "lane:         payments",
			"request:      POST http://127.0.0.1:1/pay",
			"key:          " + key[:8] + "… (generated)",
			"headers:      X-Request-Source",
			"body:         14 bytes (not shown)",
			"attempts:     0",
			"first sent:   -",
		} {
			assert.Contains(t, r.stdout, want)
		}
		noSecret(t, r, key, key[:9], `"amount"`)
	})
	t.Run("json", func(t *testing.T) {
		r := ok(t, file, "show", "--json", ids[0].String())
		var v recordView
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &v))
		assert.Equal(t, ids[0], v.ID)
		assert.Equal(t, "http://127.0.0.1:1/pay", v.URL)
		assert.Equal(t, key[:8]+"…", v.Key)
		assert.Equal(t, "generated", v.KeySource)
		assert.Equal(t, []string{"X-Request-Source"}, v.Headers)
		noSecret(t, r, key, key[:9], `"amount"`)
	})
	t.Run("short supplied key and fragment", func(t *testing.T) {
		r := ok(t, file, "show", ids[1].String())
		assert.Contains(t, r.stdout, "request:      POST https://api.example/refund\n")
		assert.Contains(t, r.stdout, "key:          hidden (supplied)")
		noSecret(t, r, "order-42", "sig=", "frag")
	})
}

func TestStats(t *testing.T) {
	file, _ := queueFile(t,
		intent(t, secretURL, "a", idem.WithLane("payments")),
		intent(t, secretURL, "b"),
	)
	r := ok(t, file, "stats")
	for _, want := range []string{"pending:", "in_flight:", "done:", "failed:", "expired:", "total:", "oldest pending:", "horizon at risk: 0 within 1h0m0s (retention 24h0m0s, margin 1h0m0s)"} {
		assert.Contains(t, r.stdout, want)
	}
	assert.Regexp(t, `(?m)^pending:\s+2$`, r.stdout)
	assert.Regexp(t, `(?m)^total:\s+2$`, r.stdout)

	var v statsView
	require.NoError(t, json.Unmarshal([]byte(ok(t, file, "stats", "--json").stdout), &v))
	assert.Equal(t, map[string]int{"pending": 2, "in_flight": 0, "done": 0, "failed": 0, "expired": 0}, v.Counts)
	assert.Equal(t, 2, v.Total)
	assert.Greater(t, v.OldestPending, 0.0)
	assert.Empty(t, v.Horizon.AtRisk, "records never sent have no horizon")
}
