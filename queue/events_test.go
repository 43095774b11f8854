package queue

import (
	"context"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
)

// created answers every request 201.
func created(w http.ResponseWriter, _ *http.Request, _ string, _ int) {
	w.WriteHeader(http.StatusCreated)
}

// received fails the test unless ch yields within 10 s: a deadlock detector,
// not a clock the test relies on.
func received[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not return", what)
		panic("unreachable")
	}
}

// TestNotifyMayCallAnything: a Notify that calls Wait, List and Close on the
// queue it reports completes; Close returns nil, the queue ends closed and
// the record is in the file.
func TestNotifyMayCallAnything(t *testing.T) {
	srv := newRecorder(t, created)
	path := filepath.Join(t.TempDir(), "q.db")
	type calls struct {
		waited *Record
		listed []*Record
		closed error
	}
	got := make(chan calls, 1)
	var q *Queue
	var once sync.Once
	opts := Options{Client: &idem.Client{}, idle: 5 * time.Millisecond, Notify: func(e Event) {
		if e.Kind != EventSettled {
			return
		}
		once.Do(func() {
			var c calls
			c.waited, _ = q.Wait(context.Background(), e.Record.ID)
			c.listed, _ = q.List(context.Background(), Done, 0, 10)
			c.closed = q.Close()
			got <- c
		})
	}}
	q, err := Open(path, opts)
	require.NoError(t, err)
	ctx := waitCtx(t)
	id, err := q.Enqueue(ctx, post(t, srv.URL, 1))
	require.NoError(t, err)
	stopped := make(chan error, 1)
	go func() { stopped <- q.Run(ctx) }()

	c := received(t, got, "Notify calling Wait, List and Close")
	require.NotNil(t, c.waited, "Wait inside Notify")
	assert.Equal(t, Done, c.waited.State, "Wait inside Notify: got %v, want done", c.waited.State)
	assert.Len(t, c.listed, 1, "List inside Notify")
	assert.NoError(t, c.closed, "Close inside Notify")
	assert.NoError(t, received(t, stopped, "Run"), "Run stops")
	assert.ErrorIs(t, q.Close(), ErrClosed, "a later Close")

	q = reopen(t, path, Options{}) // the file was let go
	r, err := q.Get(context.Background(), id)
	require.NoError(t, err)
	assert.Equal(t, Done, r.State)
}

// heldNotify opens a queue whose Notify records the events in ev, and holds
// its first call until release is closed.
func heldNotify(t *testing.T) (q *Queue, ev *events, release chan struct{}) {
	ev, release = &events{}, make(chan struct{})
	var once sync.Once
	q, _ = openTest(t, Options{Client: &idem.Client{}, Notify: func(e Event) {
		once.Do(func() { <-release })
		ev.notify(e)
	}})
	return q, ev, release
}

// TestSlowNotifyHoldsNothingBack: while Notify is held on the first event,
// the drainer settles every record; once Notify goes on, every settle is
// delivered, in order, none dropped, before Close returns.
func TestSlowNotifyHoldsNothingBack(t *testing.T) {
	const n = 20
	srv := newRecorder(t, created)
	q, ev, release := heldNotify(t)
	ctx := waitCtx(t)
	var ids []ID
	for i := range n {
		id, err := q.Enqueue(ctx, post(t, srv.URL, i)) // one lane: settled in ID order
		require.NoError(t, err)
		ids = append(ids, id)
	}
	run(t, q)
	free := sync.OnceFunc(func() { close(release) })
	t.Cleanup(free) // before Run's and Close's cleanups, should the test fail
	require.Eventually(t, func() bool {
		c, err := q.Counts(context.Background())
		return err == nil && c[Done] == n
	}, 10*time.Second, time.Millisecond, "the drainer settles every record while Notify is held")

	free()
	require.NoError(t, q.Close())
	var settled []ID
	ev.mu.Lock()
	for _, e := range ev.got {
		if e.Kind == EventSettled {
			settled = append(settled, e.Record.ID)
		}
	}
	ev.mu.Unlock()
	assert.Equal(t, ids, settled, "every settle delivered, in order, before Close returned")
}

// TestCloseDeliversEveryEvent: Close called from another queue's Notify,
// while this queue's Notify is held on an event, returns only once the file
// is closed and the events behind the held one are delivered: nothing takes
// the caller for this queue's Notify.
func TestCloseDeliversEveryEvent(t *testing.T) {
	srv := newRecorder(t, created)
	ctx := waitCtx(t)

	held, release := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { close(release) })
	var first atomic.Bool
	var ev2 events
	path2 := filepath.Join(t.TempDir(), "q2.db")
	q2, err := Open(path2, Options{Client: &idem.Client{}, idle: 5 * time.Millisecond, Notify: func(e Event) {
		if first.CompareAndSwap(false, true) {
			close(held)
			<-release
			return
		}
		ev2.notify(e)
	}})
	require.NoError(t, err)
	for i, lane := range []string{"a", "b"} {
		_, err := q2.Enqueue(ctx, post(t, srv.URL, i, idem.WithLane(lane)))
		require.NoError(t, err)
	}
	go q2.Run(ctx)
	<-held
	require.Eventually(t, func() bool {
		c, err := q2.Counts(context.Background())
		return err == nil && c[Done] == 2
	}, 10*time.Second, time.Millisecond, "both records settle")

	type result struct {
		err      error
		reopened error
		settles  int
	}
	got := make(chan result, 1)
	var once1 sync.Once
	q1, _ := openTest(t, Options{Client: &idem.Client{}, Notify: func(e Event) {
		if e.Kind != EventSettled {
			return
		}
		once1.Do(func() {
			var r result
			r.err = q2.Close()
			r.settles = ev2.count(EventSettled)
			q, err := Open(path2, Options{LockTimeout: 10 * time.Millisecond})
			if err == nil {
				q.Close()
			}
			r.reopened = err
			got <- r
		})
	}})
	_, err = q1.Enqueue(ctx, post(t, srv.URL, 9))
	require.NoError(t, err)
	run(t, q1)

	r := received(t, got, "q2.Close from q1's Notify")
	assert.NoError(t, r.err, "Close")
	assert.NoError(t, r.reopened, "the file is closed when Close returns")
	assert.Equal(t, 1, r.settles, "got %d settles delivered, want 1: the one behind the held call", r.settles)
}

// TestRunReturnsAfterItsEvents: Run returns only once Notify has returned
// for the events its drainers sent, however far behind Notify is.
func TestRunReturnsAfterItsEvents(t *testing.T) {
	const n = 50
	srv := newRecorder(t, created)
	q, ev, release := heldNotify(t)
	ctx := waitCtx(t)
	for i := range n {
		_, err := q.Enqueue(ctx, post(t, srv.URL, i))
		require.NoError(t, err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- q.Run(runCtx) }()
	free := sync.OnceFunc(func() { close(release) })
	t.Cleanup(free)
	require.Eventually(t, func() bool {
		c, err := q.Counts(context.Background())
		return err == nil && c[Done] == n
	}, 10*time.Second, time.Millisecond)

	cancel()
	free()
	require.NoError(t, received(t, ran, "Run"))
	assert.Equal(t, n, ev.count(EventSettled), "every settle delivered when Run returns")
}
