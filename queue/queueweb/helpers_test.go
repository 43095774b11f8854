package queueweb_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/queue"
	"github.com/idem-go/idem/queue/queueweb"
)

// secretURL's query must never show.
const secretQuery = "?token=s3cret"

// filled is a queue in several states, served by queueweb.
type filled struct {
	q                                 *queue.Queue
	srv                               *httptest.Server // the handler
	done, failed, pending, other, odd queue.ID
	key                               string // the generated key of pending, which must not show whole
}

// fill opens a bbolt queue and fills it: one record done and one failed
// (settled by a loopback server), then three pending, never sent, in the
// payments lane, the default lane and a lane of control characters. It
// serves the queue with opts.
func fill(t *testing.T, opts queueweb.Options) *filled {
	t.Helper()
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/bad") {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(app.Close)
	q, err := queue.Open(filepath.Join(t.TempDir(), "q.db"), queue.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { q.Close() })
	ctx := context.Background()
	f := &filled{q: q}
	enqueue := func(url string, opts ...idem.IntentOption) queue.ID {
		in, err := idem.NewIntent("POST", url, []byte(`{"amount":100}`), opts...)
		require.NoError(t, err)
		id, err := q.Enqueue(ctx, in)
		require.NoError(t, err)
		if f.key == "" && in.Key() != "" && strings.Contains(url, "/later") {
			f.key = in.Key()
		}
		return id
	}
	f.done = enqueue(app.URL+"/pay"+secretQuery, idem.WithLane("payments"))
	f.failed = enqueue(app.URL+"/bad"+secretQuery, idem.WithLane("refunds"))

	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- q.Run(runCtx) }()
	for _, id := range []queue.ID{f.done, f.failed} {
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		_, err := q.Wait(wctx, id)
		cancel()
		require.NoError(t, err, "record %d did not settle", id)
	}
	stop()
	require.NoError(t, <-ran)

	f.pending = enqueue("http://127.0.0.1:1/later"+secretQuery, idem.WithLane("payments"), idem.WithHeader("X-Source", "till-4"))
	f.other = enqueue("http://127.0.0.1:1/later"+secretQuery, idem.WithKey("order-42"))
	f.odd = enqueue("http://127.0.0.1:1/later"+secretQuery, idem.WithLane("evil\x1b[2J\u202elane"))
	f.srv = httptest.NewServer(queueweb.Handler(q, opts))
	t.Cleanup(f.srv.Close)
	return f
}

// call does method path on the handler and returns the status and body.
func (f *filled) call(t *testing.T, method, path string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, f.srv.URL+path, nil)
	require.NoError(t, err)
	res, err := f.srv.Client().Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, string(body), res.Header
}

// getJSON GETs path, requires 200, and decodes the answer into v.
func (f *filled) getJSON(t *testing.T, path string, v any) string {
	t.Helper()
	status, body, _ := f.call(t, http.MethodGet, path)
	require.Equal(t, http.StatusOK, status, "GET %s: %s", path, body)
	require.NoError(t, json.Unmarshal([]byte(body), v), "GET %s: %s", path, body)
	return body
}

// redactTimes replaces the JSON times in s, which change each run, with
// "TIME".
func redactTimes(s string) string {
	return timeRE.ReplaceAllString(s, `"TIME"`)
}

var timeRE = regexp.MustCompile(`"\d{4}-\d\d-\d\dT[^"]*"`)
