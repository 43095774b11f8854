package main

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDefaultRun is the demo's promise with its default flags: naive retries
// duplicate, no retries misreport, idem's rows (the client and the queue) do
// neither, and the last line sums them.
func TestDefaultRun(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run(nil, &out, &errOut)
	t.Log("\n" + out.String())
	require.Empty(t, errOut.String())
	assert.Equal(t, 0, code, "exit code")

	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	last := lines[len(lines)-1]
	m := regexp.MustCompile(`^idem: intents=(\d+) applied=(\d+) duplicates=(\d+) lost=(\d+) misreported=(\d+) unknown=(\d+) resumed=(\d+) resent=(\d+)$`).FindStringSubmatch(last)
	require.NotNil(t, m, "last line %q", last)
	assert.Equal(t, "1000", m[1], "intents of both idem rows")
	assert.Equal(t, "0", m[3], "idem duplicates")
	assert.Equal(t, "0", m[4], "idem losses")
	assert.Equal(t, "0", m[5], "idem misreports")

	rows := tableRows(t, out.String())
	client, viaQueue := rows["idem"], rows["idem queue"]
	for i, want := range []int{
		client.intents + viaQueue.intents, client.applied + viaQueue.applied, client.duplicates + viaQueue.duplicates,
		client.lost + viaQueue.lost, client.misreported + viaQueue.misreported, client.unknown + viaQueue.unknown,
		client.resumed + viaQueue.resumed, client.resent + viaQueue.resent,
	} {
		assert.Equal(t, strconv.Itoa(want), m[i+1], "last line field %d is the sum of the idem rows", i+1)
	}
	assert.Zero(t, viaQueue.duplicates, "idem queue duplicates")
	assert.Zero(t, viaQueue.misreported, "idem queue misreports")
	assert.Greater(t, rows["naive retries"].duplicates, 0, "naive retries must show duplicates")
	assert.Greater(t, rows["no retries"].misreported, 0, "no retries must show misreports")
	assert.Equal(t, 0, rows["no retries"].duplicates)
	assert.Greater(t, rows["no retries"].lost, 0, "no retries must lose payments")
	for name, r := range rows {
		assert.Equal(t, name == "idem" || name == "idem queue", r.idiom, "%s: resumes and resends are shown for idem's rows only", name)
	}
}

// TestIdiom: with a server whose first answers are 429s, then 500s after
// the effect, payments certainly end NotApplied and Unknown; idem's rows act
// on them as README says (a new intent, Resume), and lose, duplicate and
// misreport nothing. The queue's attempts are bounded so that its records
// fail rather than wait. The server answers every request at once, so the
// attempt timeout is a minute, not the demo's 250 ms: on a busy machine a
// 429 answered after the timeout reads, rightly, as a doubt (Unknown, not
// NotApplied), and with -timeout 1ms no payment is sent again.
func TestIdiom(t *testing.T) {
	cfg, err := parseFlags([]string{"-n", "24", "-workers", "4", "-queue-attempts", "2", "-timeout", "1m",
		"-refuse", "0", "-drop", "0", "-close", "0", "-slow", "0", "-e503", "0", "-e500", "0", "-e429", "0"}, &bytes.Buffer{})
	require.NoError(t, err)
	cfg.roughStart = 4 * cfg.workers // every worker's first run meets only 429s, the next only 500s
	for _, k := range clientKinds() {
		if !k.idem {
			continue
		}
		r, err := scene(context.Background(), cfg, k)
		require.NoError(t, err)
		t.Logf("%s: %+v", k.name, r)
		assert.Greater(t, r.resent, 0, "%s: payments sent again after NotApplied", k.name)
		assert.Greater(t, r.resumed, 0, "%s: payments resumed after Unknown", k.name)
		assert.Equal(t, cfg.n, r.applied, "%s: payments applied once", k.name)
		assert.Zero(t, r.lost, "%s lost", k.name)
		assert.Zero(t, r.duplicates, "%s duplicates", k.name)
		assert.Zero(t, r.misreported, "%s misreports", k.name)
		assert.Zero(t, r.unknown, "%s unknown", k.name)
	}
}

// TestScenes checks each client's row on a smaller run with another seed.
func TestScenes(t *testing.T) {
	cfg, err := parseFlags([]string{"-n", "120", "-seed", "3", "-drop", "0.2"}, &bytes.Buffer{})
	require.NoError(t, err)
	got := map[string]row{}
	for _, k := range clientKinds() {
		r, err := scene(context.Background(), cfg, k)
		require.NoError(t, err)
		got[k.name] = r
		assert.Equal(t, 120, r.intents)
		assert.Equal(t, r.intents, r.applied+r.duplicates+r.lost, "%s: every payment is counted once", k.name)
	}
	for _, name := range []string{"idem", "idem queue"} {
		assert.Zero(t, got[name].duplicates, "%s duplicates", name)
		assert.Zero(t, got[name].misreported, "%s misreports", name)
		assert.Zero(t, got[name].lost, "%s lost", name)
		assert.Greater(t, got[name].applied, got["no retries"].applied, "%s gets more payments through than one attempt does", name)
	}
	assert.Greater(t, got["naive retries"].duplicates, 0)
	assert.Greater(t, got["no retries"].misreported, 0)
}

func TestBadFlags(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string // in the message: what was wrong
	}{
		{[]string{"-drop", "1.5"}, "-drop is 1.5"},
		{[]string{"-drop", "0.6", "-e503", "0.6"}, "fault rates add up to 1.32"},
		{[]string{"-refuse", "1"}, "-refuse is 1"},
		{[]string{"-n", "0"}, "-n is 0"},
		{[]string{"-workers", "0"}, "-workers is 0"},
		{[]string{"-queue-attempts", "-1"}, "-queue-attempts is -1"},
		{[]string{"-timeout", "0s"}, "-timeout is 0s"},
		{[]string{"-delay", "-1s"}, "-delay is -1s"},
		{[]string{"-nope"}, "-nope"},
	} {
		var out, errOut bytes.Buffer
		assert.Equal(t, 2, run(tt.args, &out, &errOut), "run(%q)", tt.args)
		assert.Contains(t, errOut.String(), tt.want, "run(%q) must say what was wrong", tt.args)
	}
}

// tableRows reads the printed table back.
func tableRows(t *testing.T, out string) map[string]row {
	t.Helper()
	rows := map[string]row{}
	re := regexp.MustCompile(`^\s*(no retries|naive retries|idem queue|idem)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+|-)\s+(\d+|-)\s+(\d+)\s*$`)
	for _, line := range strings.Split(out, "\n") {
		m := re.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		n := func(i int) int {
			if m[i] == "-" {
				return 0
			}
			v, err := strconv.Atoi(m[i])
			require.NoError(t, err)
			return v
		}
		idiom := m[8] != "-"
		require.Equal(t, idiom, m[9] != "-", "a row counts both resumes and resends, or neither: %q", line)
		rows[m[1]] = row{name: m[1], intents: n(2), applied: n(3), duplicates: n(4), lost: n(5), misreported: n(6), unknown: n(7),
			resumed: n(8), resent: n(9), sent: n(10), idiom: idiom}
	}
	require.Len(t, rows, len(clientKinds()), "table rows in:\n%s", out)
	return rows
}
