package pgqueue_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/pgqueue"
	"github.com/idem-go/idem/queue"
	"github.com/idem-go/idem/queue/queueweb"
)

// TestQueueWeb: queueweb's handler shows a PostgreSQL queue as it shows a
// bbolt one: the counts, a list filtered by state and lane, one record
// redacted.
func TestQueueWeb(t *testing.T) {
	ctx := context.Background()
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(app.Close)
	q := open(t, migrated(t), pgqueue.Options{})
	enqueue := func(url string, opts ...idem.IntentOption) queue.ID {
		in, err := idem.NewIntent("POST", url, []byte(`{"amount":100}`), opts...)
		require.NoError(t, err)
		id, err := q.Enqueue(ctx, in)
		require.NoError(t, err)
		return id
	}
	done := enqueue(app.URL+"/pay?token=s3cret", idem.WithLane("payments"))
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- q.Run(runCtx) }()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	_, err := q.Wait(wctx, done)
	cancel()
	require.NoError(t, err)
	stop()
	require.NoError(t, <-ran)
	payments := enqueue("http://127.0.0.1:1/later?token=s3cret", idem.WithLane("payments"))
	other := enqueue("http://127.0.0.1:1/later?token=s3cret")

	srv := httptest.NewServer(queueweb.Handler(q, queueweb.Options{}))
	t.Cleanup(srv.Close)
	get := func(path string, v any) string {
		t.Helper()
		res, err := srv.Client().Get(srv.URL + path)
		require.NoError(t, err)
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.StatusCode, "GET %s: %s", path, body)
		require.NoError(t, json.Unmarshal(body, v), "GET %s: %s", path, body)
		assert.NotContains(t, string(body), "s3cret")
		assert.NotContains(t, string(body), "amount")
		return string(body)
	}

	var st queueweb.Stats
	get("/api/stats", &st)
	assert.Equal(t, map[string]int{"pending": 2, "in_flight": 0, "done": 1, "failed": 0, "expired": 0}, st.Counts)
	assert.Equal(t, 3, st.Total)
	assert.Equal(t, []queue.ID{}, st.Horizon.AtRisk)

	tests := []struct {
		query string
		want  []queue.ID
	}{
		{"", []queue.ID{done, payments, other}},
		{"?state=pending", []queue.ID{payments, other}},
		{"?state=done", []queue.ID{done}},
		{"?lane=payments", []queue.ID{done, payments}},
		{"?state=pending&lane=", []queue.ID{other}},
		{"?limit=1", []queue.ID{done}},
	}
	for _, tt := range tests {
		var got struct{ Records []queueweb.Record }
		get("/api/records"+tt.query, &got)
		ids := []queue.ID{}
		for _, r := range got.Records {
			ids = append(ids, r.ID)
		}
		assert.Equal(t, tt.want, ids, "GET /api/records%s", tt.query)
	}

	var r queueweb.Record
	get("/api/records/"+done.String(), &r)
	assert.Equal(t, "done", r.State)
	require.NotNil(t, r.Outcome)
	assert.Equal(t, "applied", *r.Outcome)
	assert.Equal(t, app.URL+"/pay", r.URL)
	assert.Len(t, r.Key, len("01234567…"))

	res, err := srv.Client().Post(srv.URL+"/api/records/"+other.String()+"/discard", "", nil)
	require.NoError(t, err)
	res.Body.Close()
	assert.Equal(t, http.StatusForbidden, res.StatusCode, "writes are off")
}
