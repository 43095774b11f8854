package pgqueue_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/pgqueue"
	"github.com/idem-go/idem/queue"
)

// TestRollingUpgrade: a replica of this build is sending the head of a
// lane when a replica of the next build migrates the tables. From the
// migration's commit on, the old replica takes no lane and reports
// ErrTablesNewer as an EventError; it still finishes the attempt it had
// begun and still enqueues; the new replica sends the rest in lane order.
func TestRollingUpgrade(t *testing.T) {
	pool := migrated(t)
	ctx := waitCtx(t)
	var (
		mu      sync.Mutex
		sent    []string // "replica path"
		arrived = make(chan struct{})
		release = make(chan struct{})
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/acct/blocker" && r.Header.Get("X-Replica") == "old" {
			close(arrived)
			<-release
		}
		mu.Lock()
		sent = append(sent, r.Header.Get("X-Replica")+" "+r.URL.Path)
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(srv.Close)
	refused := make(chan error, 1)
	replica := func(name string, known int) *queue.Queue {
		hc := &http.Client{Transport: tagged{id: name}}
		q, err := pgqueue.NewKnowing(ctx, pool, pgqueue.Options{Options: queue.Options{
			Policy: fast(), Workers: 2, Client: &idem.Client{HTTPClient: hc},
			Notify: func(e queue.Event) {
				if e.Kind == queue.EventError && errors.Is(e.Err, pgqueue.ErrTablesNewer) && name == "old" {
					select {
					case refused <- e.Err:
					default:
					}
				}
			},
		}}, known)
		require.NoError(t, err)
		t.Cleanup(func() { q.Close() })
		run(t, q)
		return q
	}
	old := replica("old", pgqueue.LatestVersion())
	blocker, err := old.Enqueue(ctx, post(t, srv.URL+"/acct/blocker", idem.WithLane("acct")))
	require.NoError(t, err)
	select {
	case <-arrived:
	case <-ctx.Done():
		t.Fatal("the old replica did not send the blocker")
	}

	require.NoError(t, pgqueue.MigrateNext(ctx, pool, "ALTER TABLE idem_queue_lanes ADD COLUMN next_build_only integer"))
	first, second := crossCommit(t, pool, srv.URL, "acct")
	after, err := old.Enqueue(ctx, post(t, srv.URL+"/acct/after", idem.WithLane("acct")))
	require.NoError(t, err, "the old replica still enqueues")
	other, err := old.Enqueue(ctx, post(t, srv.URL+"/other/x", idem.WithLane("other")))
	require.NoError(t, err)
	close(release)
	r, err := old.Wait(ctx, blocker)
	require.NoError(t, err)
	assert.Equal(t, queue.Done, r.State, "the attempt begun before the migration ends")
	select {
	case err := <-refused:
		t.Logf("the old replica reports: %v", err)
	case <-ctx.Done():
		t.Fatal("the old replica reported no ErrTablesNewer")
	}

	next := replica("new", pgqueue.LatestVersion()+1)
	for _, id := range []queue.ID{first, second, after, other} {
		r, err := next.Wait(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, queue.Done, r.State)
	}
	mu.Lock()
	defer mu.Unlock()
	assert.ElementsMatch(t, []string{"old /acct/blocker", "new /acct/first-committed", "new /acct/first-enqueued",
		"new /acct/after", "new /other/x"}, sent, "who sent what")
	var acct []string
	for _, s := range sent {
		if s != "new /other/x" {
			acct = append(acct, s)
		}
	}
	assert.Equal(t, []string{"old /acct/blocker", "new /acct/first-committed", "new /acct/first-enqueued", "new /acct/after"},
		acct, "lane order")
}
