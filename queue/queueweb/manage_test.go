package queueweb_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/queue"
	"github.com/idem-go/idem/queue/queueweb"
)

// TestResubmitUnknownNeedsForce: the resubmit route asks the queue, which
// refuses a record whose outcome is unknown: 409, with the code
// CodeOutcomeUnknown and the way to force it; with force=true, 200.
func TestResubmitUnknownNeedsForce(t *testing.T) {
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusBadGateway) // may have been applied
	}))
	t.Cleanup(app.Close)
	q, err := queue.Open(filepath.Join(t.TempDir(), "q.db"), queue.Options{MaxAttempts: 1})
	require.NoError(t, err)
	t.Cleanup(func() { q.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	in, err := idem.NewIntent("POST", app.URL+"/pay", []byte("x"))
	require.NoError(t, err)
	id, err := q.Enqueue(ctx, in)
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- q.Run(runCtx) }()
	r, err := q.Wait(ctx, id)
	require.NoError(t, err)
	stop()
	require.NoError(t, <-ran)
	require.Equal(t, idem.Unknown, r.Outcome)

	srv := httptest.NewServer(queueweb.Handler(q, queueweb.Options{Writes: true}))
	t.Cleanup(srv.Close)
	post := func(path string) (int, map[string]any) {
		t.Helper()
		res, err := srv.Client().Post(srv.URL+path, "", nil)
		require.NoError(t, err)
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		var v map[string]any
		require.NoError(t, json.Unmarshal(body, &v), string(body))
		return res.StatusCode, v
	}

	status, v := post("/api/records/" + id.String() + "/resubmit")
	assert.Equal(t, http.StatusConflict, status)
	assert.Equal(t, queueweb.CodeOutcomeUnknown, v["code"])
	assert.Contains(t, v["error"], "outcome unknown")
	assert.Contains(t, v["error"], "force=true")
	c, err := q.Counts(ctx)
	require.NoError(t, err)
	assert.Zero(t, c[queue.Pending], "refused: nothing queued")

	status, v = post("/api/records/" + id.String() + "/resubmit?force=true")
	require.Equal(t, http.StatusOK, status, v)
	assert.NotContains(t, v, "code")
	r, err = q.Get(ctx, id)
	require.NoError(t, err)
	assert.EqualValues(t, r.ResubmittedAs, v["as"])
}
