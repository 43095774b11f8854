package queueweb_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem/queue"
	"github.com/idem-go/idem/queue/queueweb"
)

// listing is GET /api/records' answer.
type listing struct {
	Records []queueweb.Record `json:"records"`
	Next    queue.ID          `json:"next"`
}

func ids(rs []queueweb.Record) []queue.ID {
	out := []queue.ID{}
	for _, r := range rs {
		out = append(out, r.ID)
	}
	return out
}

func TestStats(t *testing.T) {
	f := fill(t, queueweb.Options{})
	var st queueweb.Stats
	f.getJSON(t, "/api/stats", &st)
	assert.Equal(t, map[string]int{"pending": 3, "in_flight": 0, "done": 1, "failed": 1, "expired": 0}, st.Counts)
	assert.Equal(t, 5, st.Total)
	assert.Greater(t, st.OldestPending, 0.0)
	assert.Equal(t, "24h0m0s", st.Horizon.Retention)
	assert.Equal(t, "1h0m0s", st.Horizon.Within)
	assert.Equal(t, []queue.ID{}, st.Horizon.AtRisk, "records never sent have no horizon")

	f.getJSON(t, "/api/stats?within=90m", &st)
	assert.Equal(t, "1h30m0s", st.Horizon.Within)
	f.getJSON(t, "/api/stats?within=0s", &st)
	assert.Equal(t, "0s", st.Horizon.Within, "none, not the default")
}

func TestList(t *testing.T) {
	f := fill(t, queueweb.Options{})
	all := []queue.ID{f.done, f.failed, f.pending, f.other, f.odd}
	tests := []struct {
		query string
		want  []queue.ID
		next  queue.ID
	}{
		{"", all, 0},
		{"?state=pending", []queue.ID{f.pending, f.other, f.odd}, 0},
		{"?state=done,failed", []queue.ID{f.done, f.failed}, 0},
		{"?state=expired", []queue.ID{}, 0},
		{"?lane=payments", []queue.ID{f.done, f.pending}, 0},
		{"?lane=", []queue.ID{f.other}, 0},
		{"?state=pending&lane=payments", []queue.ID{f.pending}, 0},
		{"?limit=2", []queue.ID{f.done, f.failed}, f.failed},
		{"?after=2&limit=2", []queue.ID{f.pending, f.other}, f.other},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			var got listing
			body := f.getJSON(t, "/api/records"+tt.query, &got)
			assert.Equal(t, tt.want, ids(got.Records), "GET /api/records%s", tt.query)
			assert.Equal(t, tt.next, got.Next, "GET /api/records%s: next", tt.query)
			assert.NotContains(t, body, "s3cret")
		})
	}
}

// TestRecordRedacted: one record as idemq shows it: no query, no body, a
// key prefix only, header names only, control characters escaped.
func TestRecordRedacted(t *testing.T) {
	f := fill(t, queueweb.Options{})
	var r queueweb.Record
	body := f.getJSON(t, "/api/records/"+f.pending.String(), &r)
	assert.Equal(t, f.pending, r.ID)
	assert.Equal(t, "pending", r.State)
	assert.Nil(t, r.Outcome, "null until the record settles")
	assert.Equal(t, "payments", r.Lane)
	assert.Equal(t, "http://127.0.0.1:1/later", r.URL)
	assert.Equal(t, f.key[:8]+"…", r.Key)
	assert.Equal(t, "generated", r.KeySource)
	assert.Equal(t, []string{"X-Source"}, r.Headers)
	assert.Equal(t, 14, r.BodyBytes)
	for _, secret := range []string{"s3cret", "token", "amount", "till-4", f.key[:9]} {
		assert.NotContains(t, body, secret)
	}

	var short queueweb.Record
	f.getJSON(t, "/api/records/"+f.other.String(), &short)
	assert.Equal(t, "", short.Key, "a short key is hidden")
	assert.Equal(t, "supplied", short.KeySource)

	body = f.getJSON(t, "/api/records/"+f.odd.String(), &r)
	assert.Equal(t, "evil\x1b[2J\u202elane", r.Lane, "the JSON decodes to the lane")
	for _, raw := range []string{"\x1b", "\u202e"} {
		assert.NotContains(t, body, raw, "the answer holds a control character raw")
	}
	assert.Contains(t, body, `evil\u001b[2J\u202elane`)

	f.getJSON(t, "/api/records/"+f.done.String(), &r)
	require.NotNil(t, r.Outcome)
	assert.Equal(t, "applied", *r.Outcome)
	assert.Equal(t, "done", r.State)
	require.NotNil(t, r.Result)
	assert.Equal(t, 200, r.Result.Status)
}

func TestErrors(t *testing.T) {
	f := fill(t, queueweb.Options{})
	tests := []struct {
		method, path string
		status       int
		msg          string
	}{
		{"GET", "/api/records/99", 404, "no such record"},
		{"GET", "/api/records/x1", 400, `"x1" is not a record ID`},
		{"GET", "/api/records?state=lost", 400, `state "lost"`},
		{"GET", "/api/records?limit=0", 400, "limit 0"},
		{"GET", "/api/records?after=-1", 400, `after "-1"`},
		{"GET", "/api/stats?within=soon", 400, `within "soon"`},
		{"GET", "/api/nothing", 404, "no such API route"},
		{"POST", "/api/stats", 405, "use GET"},
		{"GET", "/api/reset-clock", 405, "use POST"},
		{"POST", "/api/reset-clock", 403, "writes are turned off"},
		{"POST", "/api/records/1/discard", 403, "writes are turned off"},
		{"POST", "/api/records/4/resubmit", 403, "writes are turned off"},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			status, body, hd := f.call(t, tt.method, tt.path)
			assert.Equal(t, tt.status, status, body)
			assert.Equal(t, "application/json; charset=utf-8", hd.Get("Content-Type"))
			var e struct{ Error string }
			require.NoError(t, json.Unmarshal([]byte(body), &e), body)
			assert.Contains(t, e.Error, tt.msg)
		})
	}
	var st queueweb.Stats
	f.getJSON(t, "/api/stats", &st)
	assert.Equal(t, 5, st.Total, "a refused write changed nothing")
}

func TestWrites(t *testing.T) {
	f := fill(t, queueweb.Options{Writes: true})
	status, body, _ := f.call(t, "POST", "/api/records/"+f.other.String()+"/discard")
	require.Equal(t, 200, status, body)
	assert.JSONEq(t, `{"discarded": `+f.other.String()+`, "state": "pending"}`, body)
	status, body, _ = f.call(t, "GET", "/api/records/"+f.other.String())
	assert.Equal(t, 404, status, body)

	status, body, _ = f.call(t, "POST", "/api/records/"+f.pending.String()+"/resubmit")
	assert.Equal(t, 409, status, "a pending record is not resubmittable: %s", body)
	assert.Contains(t, body, "cannot be resubmitted")

	status, body, _ = f.call(t, "POST", "/api/records/"+f.failed.String()+"/resubmit")
	require.Equal(t, 200, status, body)
	var res struct{ Resubmitted, As queue.ID }
	require.NoError(t, json.Unmarshal([]byte(body), &res))
	assert.Equal(t, f.failed, res.Resubmitted)
	assert.Greater(t, res.As, f.odd)
	var r queueweb.Record
	f.getJSON(t, "/api/records/"+f.failed.String(), &r)
	assert.Equal(t, res.As, r.ResubmittedAs)

	status, body, _ = f.call(t, "POST", "/api/reset-clock")
	assert.Equal(t, 200, status, body)
	assert.JSONEq(t, `{"reset": true}`, body)
}

// TestCrossOriginWrite: a browser's cross-site POST is refused even with
// writes on: the page's buttons are the application's own origin.
func TestCrossOriginWrite(t *testing.T) {
	f := fill(t, queueweb.Options{Writes: true})
	req, err := http.NewRequest("POST", f.srv.URL+"/api/records/"+f.other.String()+"/discard", nil)
	require.NoError(t, err)
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	res, err := f.srv.Client().Do(req)
	require.NoError(t, err)
	res.Body.Close()
	assert.Equal(t, http.StatusForbidden, res.StatusCode)
	var r queueweb.Record
	f.getJSON(t, "/api/records/"+f.other.String(), &r)
}

func TestPage(t *testing.T) {
	f := fill(t, queueweb.Options{})
	for _, path := range []string{"/", "/queueweb.js", "/queueweb.css"} {
		status, body, hd := f.call(t, "GET", path)
		require.Equal(t, 200, status, path)
		assert.Contains(t, hd.Get("Content-Security-Policy"), "script-src 'self'", path)
		assert.NotContains(t, body, "http://", "%s loads nothing from elsewhere", path)
		assert.NotContains(t, body, "https://", "%s loads nothing from elsewhere", path)
		if strings.HasSuffix(path, ".js") {
			assert.NotContains(t, body, "innerHTML", "data is written as text")
		}
	}
	status, _, _ := f.call(t, "GET", "/nothing")
	assert.Equal(t, 404, status)
}
