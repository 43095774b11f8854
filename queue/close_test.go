package queue

import (
	"context"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
)

// TestCloseFromNotify: a Notify that calls Close must not wait for itself.
// Close returns, Run stops, and the queue ends closed with the settled
// record recorded.
func TestCloseFromNotify(t *testing.T) {
	srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request, body string, seen int) { w.WriteHeader(http.StatusCreated) })
	q, path, closed := openClosingFromNotify(t)
	ctx := waitCtx(t)
	id, err := q.Enqueue(ctx, post(t, srv.URL, 1))
	require.NoError(t, err)
	stopped := make(chan error, 1)
	go func() { stopped <- q.Run(ctx) }()

	awaitClosedFromNotify(t, closed, stopped)
	done := make(chan error, 1)
	go func() { done <- q.Close() }()
	select {
	case err := <-done:
		assert.ErrorIs(t, err, ErrClosed, "a later Close waits for the first to end, then says it is closed")
	case <-time.After(5 * time.Second):
		t.Fatal("a later Close did not return")
	}
	_, err = q.Get(context.Background(), id)
	assert.ErrorIs(t, err, ErrClosed, "the queue ends closed")

	q = reopen(t, path, Options{}) // the file was let go
	r, err := q.Get(context.Background(), id)
	require.NoError(t, err)
	assert.Equal(t, Done, r.State, "the settlement Notify reported is in the file")
}

// TestCloseFromNotifyDuringAttempts: a Notify that calls Close while other
// lanes' attempts are under way returns; those attempts are ended and still
// recorded, none left in flight.
func TestCloseFromNotifyDuringAttempts(t *testing.T) {
	arrived := make(chan struct{}, 2)
	srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request, body string, seen int) {
		if body != `{"payment":"p-0"}` {
			arrived <- struct{}{}
			<-r.Context().Done() // held until Close ends the attempt
			return
		}
		for range 2 { // the other lanes' attempts are under way first
			select {
			case <-arrived:
			case <-time.After(5 * time.Second):
			}
		}
		w.WriteHeader(http.StatusCreated)
	})
	q, path, closed := openClosingFromNotify(t)
	ctx := waitCtx(t)
	var ids []ID
	for i, lane := range []string{"a", "b", "c"} {
		id, err := q.Enqueue(ctx, post(t, srv.URL, i, idem.WithLane(lane)))
		require.NoError(t, err)
		ids = append(ids, id)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- q.Run(ctx) }()
	awaitClosedFromNotify(t, closed, stopped)
	assert.ErrorIs(t, q.Close(), ErrClosed)

	q = reopen(t, path, Options{})
	c, err := q.Counts(context.Background())
	require.NoError(t, err)
	assert.Zero(t, c[InFlight], "the ended attempts were recorded")
	assert.Equal(t, 1, c[Done])
	for _, id := range ids[1:] {
		r, err := q.Get(context.Background(), id)
		require.NoError(t, err)
		assert.Equal(t, Pending, r.State, "record %d", id)
		assert.True(t, r.InDoubt, "record %d: its attempt was sent and ended unanswered", id)
	}
}

// openClosingFromNotify opens a queue whose Notify calls Close on the first
// EventSettled and sends Close's result on closed.
func openClosingFromNotify(t *testing.T) (q *Queue, path string, closed chan error) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "q.db")
	var once sync.Once
	closed = make(chan error, 1)
	opts := Options{Client: &idem.Client{}, idle: 5 * time.Millisecond, Notify: func(e Event) {
		if e.Kind == EventSettled {
			once.Do(func() { closed <- q.Close() })
		}
	}}
	q, err := Open(path, opts)
	require.NoError(t, err)
	return q, path, closed
}

// awaitClosedFromNotify waits for a Close called from Notify to return nil
// and for Run to stop, failing the test if either hangs.
func awaitClosedFromNotify(t *testing.T, closed, stopped <-chan error) {
	t.Helper()
	select {
	case err := <-closed:
		assert.NoError(t, err, "Close from Notify starts the shutdown")
	case <-time.After(5 * time.Second):
		t.Fatal("Close called from Notify did not return")
	}
	select {
	case err := <-stopped:
		assert.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not stop after Close from Notify")
	}
}
