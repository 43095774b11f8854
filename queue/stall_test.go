package queue

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// stallStore is the bbolt store with one method that blocks, each time it
// is called, until the test closes release: a store stalled on its disk or
// its network. With honour set the stall also ends with the call's context,
// as a store that hands ctx to its network does; without, it ends only on
// release, as a bbolt transaction stalled on its disk does. entered
// receives the method's name as a call blocks. Every call's context is
// kept in seen, by method.
type stallStore struct {
	Store
	method  string
	honour  bool
	entered chan string
	release chan struct{}
	once    sync.Once

	mu   sync.Mutex
	seen map[string][]context.Context
}

// stall records ctx for method m and, if m stalls, blocks until release is
// closed or, with honour, ctx ends: then it returns ctx's error.
func (s *stallStore) stall(ctx context.Context, m string) error {
	s.mu.Lock()
	s.seen[m] = append(s.seen[m], ctx)
	s.mu.Unlock()
	if m != s.method {
		return nil
	}
	select {
	case s.entered <- m:
	default:
	}
	done := ctx.Done()
	if !s.honour {
		done = nil
	}
	select {
	case <-s.release:
		return nil
	case <-done:
		return ctx.Err()
	}
}

// contexts returns the contexts method m was called with.
func (s *stallStore) contexts(m string) []context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]context.Context(nil), s.seen[m]...)
}

// unstall lets every stalled call go on; it may be called more than once.
func (s *stallStore) unstall() { s.once.Do(func() { close(s.release) }) }

func (s *stallStore) TakeDue(ctx context.Context, now time.Time, n int) ([]string, time.Duration, error) {
	if err := s.stall(ctx, "TakeDue"); err != nil {
		return nil, 0, err
	}
	return s.Store.TakeDue(ctx, now, n)
}

// Schedule stalls as "Wake" for WakeLanes, "Rejudge" for RejudgeLanes.
func (s *stallStore) Schedule(ctx context.Context, op LaneOp, lane string, now time.Time) error {
	name := map[LaneOp]string{HoldLane: "Hold", WakeLanes: "Wake", RejudgeLanes: "Rejudge"}[op]
	if err := s.stall(ctx, name); err != nil {
		return err
	}
	return s.Store.Schedule(ctx, op, lane, now)
}

func (s *stallStore) Get(ctx context.Context, id ID) (*Record, error) {
	if err := s.stall(ctx, "Get"); err != nil {
		return nil, err
	}
	return s.Store.Get(ctx, id)
}

func (s *stallStore) List(ctx context.Context, st State, after ID, limit int) ([]*Record, error) {
	if err := s.stall(ctx, "List"); err != nil {
		return nil, err
	}
	return s.Store.List(ctx, st, after, limit)
}

func (s *stallStore) Stats(ctx context.Context) (StoreStats, error) {
	if err := s.stall(ctx, "Stats"); err != nil {
		return StoreStats{}, err
	}
	return s.Store.Stats(ctx)
}

func (s *stallStore) Insert(ctx context.Context, r *Record) (ID, error) {
	if err := s.stall(ctx, "Insert"); err != nil {
		return 0, err
	}
	return s.Store.Insert(ctx, r)
}

func (s *stallStore) Resubmit(ctx context.Context, r *Record, old ID, rule func(*Record) error) (ID, error) {
	if err := s.stall(ctx, "Resubmit"); err != nil {
		return 0, err
	}
	return s.Store.Resubmit(ctx, r, old, rule)
}

func (s *stallStore) Discard(ctx context.Context, id ID) error {
	if err := s.stall(ctx, "Discard"); err != nil {
		return err
	}
	return s.Store.Discard(ctx, id)
}

func (s *stallStore) ResetMark(ctx context.Context, now time.Time) (time.Time, error) {
	if err := s.stall(ctx, "ResetMark"); err != nil {
		return time.Time{}, err
	}
	return s.Store.ResetMark(ctx, now)
}

// newStalling returns a Queue over a bbolt store whose method stalls, with
// one pending record, and the store. The stall ends at cleanup at the
// latest, before the Queue closes.
func newStalling(t *testing.T, method string) (*Queue, *stallStore, ID) {
	t.Helper()
	opts := Options{idle: 5 * time.Millisecond, rand: func() float64 { return 0.5 }}
	o, err := opts.withDefaults()
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "q.db")
	lf, err := lock(path, o)
	require.NoError(t, err)
	bs, err := openBolt(path, o, lf)
	require.NoError(t, err)
	now, _ := bs.Clock()
	r, err := NewRecord(post(t, url, 1), now)
	require.NoError(t, err)
	id, err := bs.Insert(context.Background(), r)
	require.NoError(t, err)
	st := &stallStore{Store: bs, method: method, entered: make(chan string, 1), release: make(chan struct{}), seen: map[string][]context.Context{}}
	q, err := New(st, opts)
	require.NoError(t, err)
	t.Cleanup(func() { st.unstall(); q.Close() })
	return q, st, id
}

// stallIn makes a call of st's stalling method and returns once it is
// stalled: Run for TakeDue, Wake for Wake, ResetClock for Rejudge.
func stallIn(t *testing.T, q *Queue, st *stallStore) {
	t.Helper()
	switch st.method {
	case "TakeDue":
		run(t, q)
		t.Cleanup(st.unstall) // before run's cleanup waits for Run
	case "Wake":
		go q.Wake()
	case "Rejudge":
		go q.ResetClock(context.Background())
	}
	select {
	case <-st.entered:
	case <-time.After(stallLimit):
		t.Fatalf("%s never called", st.method)
	}
}

// stallLimit is how long within waits: a call blocked behind the stalled
// store never returns (the store stalls until the test ends), so the limit
// decides nothing but how soon a blocked call is reported, and is far above
// what a call that does not wait for the store takes on a busy machine.
const stallLimit = 10 * time.Second

// within runs fn and fails the test unless it returns within stallLimit,
// which a call blocked behind the stalled store does not.
func within(t *testing.T, what string, fn func()) time.Duration {
	t.Helper()
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
		took := time.Since(start)
		t.Logf("%s returned after %v", what, took)
		return took
	case <-time.After(stallLimit):
		t.Fatalf("%s: still blocked after %v, behind a store call another caller is stalled in", what, stallLimit)
		return 0
	}
}

// stallMethods are the store calls the Queue once made with its mutex held.
var stallMethods = []string{"TakeDue", "Wake", "Rejudge"}

// TestStalledStoreWait: Wait honours its context while another call is
// stalled in the store.
func TestStalledStoreWait(t *testing.T) {
	for _, m := range stallMethods {
		t.Run(m, func(t *testing.T) {
			q, st, id := newStalling(t, m)
			stallIn(t, q, st)
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			var err error
			within(t, "Wait with a 50 ms context", func() { _, err = q.Wait(ctx, id) })
			assert.ErrorIs(t, err, context.DeadlineExceeded, "Wait: got %v, want the context's error", err)
		})
	}
	t.Run("Get", func(t *testing.T) { // Wait's own read stalls
		q, st, id := newStalling(t, "Get")
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		var err error
		within(t, "Wait with a 50 ms context", func() { _, err = q.Wait(ctx, id) })
		assert.ErrorIs(t, err, context.DeadlineExceeded, "Wait: got %v, want the context's error", err)
		st.unstall()
	})
}

// TestStalledStoreCalls: Enqueue and the admin calls go on while another
// call is stalled in the store, which none of them need.
func TestStalledStoreCalls(t *testing.T) {
	in := post(t, url, 2)
	calls := []struct {
		name string
		skip string // the call that stalls itself on this method
		call func(*Queue, ID) error
	}{
		{"Enqueue", "", func(q *Queue, _ ID) error { _, err := q.Enqueue(context.Background(), in); return err }},
		{"Get", "", func(q *Queue, id ID) error { _, err := q.Get(context.Background(), id); return err }},
		{"List", "", func(q *Queue, _ ID) error { _, err := q.List(context.Background(), Pending, 0, 10); return err }},
		{"Counts", "", func(q *Queue, _ ID) error { _, err := q.Counts(context.Background()); return err }},
		{"OldestPending", "", func(q *Queue, _ ID) error { _, err := q.OldestPending(context.Background()); return err }},
		{"Discard", "TakeDue", func(q *Queue, id ID) error { return q.Discard(context.Background(), id) }}, // Run may hold it in flight
		{"Wake", "Wake", func(q *Queue, _ ID) error { q.Wake(); return nil }},
		{"ResetClock", "Rejudge", func(q *Queue, _ ID) error { return q.ResetClock(context.Background()) }},
	}
	for _, m := range stallMethods {
		for _, c := range calls {
			if c.skip == m {
				continue
			}
			t.Run(m+"/"+c.name, func(t *testing.T) {
				q, st, id := newStalling(t, m)
				stallIn(t, q, st)
				var err error
				within(t, c.name, func() { err = c.call(q, id) })
				assert.NoError(t, err, "%s: got %v, want nil", c.name, err)
			})
		}
	}
}

// TestStalledStoreClose: Close, while the drainer is stalled in the store,
// stops Run at once (a second Run is refused, Wait returns on its context)
// and waits for the stalled call only, which it documents; once the store
// answers, Close returns.
func TestStalledStoreClose(t *testing.T) {
	q, st, id := newStalling(t, "TakeDue")
	stallIn(t, q, st)
	closed := make(chan error, 1)
	go func() { closed <- q.Close() }()
	require.Eventually(t, q.isClosing, stallLimit, time.Millisecond, "Close never began: blocked behind the stalled store call")
	var err error
	within(t, "a second Run", func() { err = q.Run(context.Background()) })
	assert.ErrorIs(t, err, ErrClosed, "Run during Close: got %v, want ErrClosed", err)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	within(t, "Wait during Close", func() { _, err = q.Wait(ctx, id) })
	assert.ErrorIs(t, err, context.DeadlineExceeded, "Wait during Close: got %v", err)
	select {
	case err := <-closed:
		t.Fatalf("Close returned %v while the drainer was still in the store", err)
	default:
	}
	st.unstall()
	within(t, "Close once the store answered", func() { err = <-closed })
	assert.NoError(t, err, "Close: got %v, want nil", err)
}

// TestStalledInsertEnqueue: an Enqueue whose context has ended returns its
// error without reaching the store, even one whose Insert stalls.
func TestStalledInsertEnqueue(t *testing.T) {
	q, st, _ := newStalling(t, "Insert")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var err error
	within(t, "Enqueue with an ended context", func() { _, err = q.Enqueue(ctx, post(t, url, 3)) })
	assert.ErrorIs(t, err, context.Canceled, "Enqueue: got %v, want the context's error", err)
	st.unstall()
}

// ctxKey marks the contexts a test's calls are given, to find them in the
// store.
type ctxKey struct{}

// ctxCalls are the calls a caller makes with a context, the store method
// each reaches, and what each does.
var ctxCalls = []struct {
	name, method string
	call         func(*testing.T, context.Context, *Queue, ID) error
}{
	{"Enqueue", "Insert", func(t *testing.T, ctx context.Context, q *Queue, _ ID) error {
		_, err := q.Enqueue(ctx, post(t, url, 7))
		return err
	}},
	{"Get", "Get", func(t *testing.T, ctx context.Context, q *Queue, id ID) error { _, err := q.Get(ctx, id); return err }},
	{"List", "List", func(t *testing.T, ctx context.Context, q *Queue, _ ID) error {
		_, err := q.List(ctx, Pending, 0, 10)
		return err
	}},
	{"Counts", "Stats", func(t *testing.T, ctx context.Context, q *Queue, _ ID) error { _, err := q.Counts(ctx); return err }},
	{"OldestPending", "Stats", func(t *testing.T, ctx context.Context, q *Queue, _ ID) error {
		_, err := q.OldestPending(ctx)
		return err
	}},
	{"Discard", "Discard", func(t *testing.T, ctx context.Context, q *Queue, id ID) error { return q.Discard(ctx, id) }},
	{"Resubmit", "Get", func(t *testing.T, ctx context.Context, q *Queue, id ID) error {
		_, err := q.Resubmit(ctx, id)
		return err
	}},
	{"ResetClock", "ResetMark", func(t *testing.T, ctx context.Context, q *Queue, _ ID) error { return q.ResetClock(ctx) }},
}

// TestStoreGetsCallerContext: each call's context is the one its store
// method is given.
func TestStoreGetsCallerContext(t *testing.T) {
	for _, c := range ctxCalls {
		t.Run(c.name, func(t *testing.T) {
			q, st, id := newStalling(t, "")
			ctx := context.WithValue(context.Background(), ctxKey{}, c.name)
			c.call(t, ctx, q, id) //nolint:errcheck // Resubmit refuses a pending record, after its Get
			got := st.contexts(c.method)
			require.NotEmpty(t, got, "%s never called %s", c.name, c.method)
			for _, sctx := range got {
				assert.Equal(t, c.name, sctx.Value(ctxKey{}), "%s: %s was given another context than the caller's", c.name, c.method)
			}
		})
	}
}

// TestStalledStoreContext: each call returns its context's error once the
// context ends, while its store method stalls: at once when the store gives
// up on the context (as pgqueue does), and for a read also when the store
// cannot (a bbolt transaction stalled on its disk), since a read may be
// abandoned.
func TestStalledStoreContext(t *testing.T) {
	reads := map[string]bool{"Get": true, "List": true, "Counts": true, "OldestPending": true, "Resubmit": true}
	for _, honour := range []bool{true, false} {
		for _, c := range ctxCalls {
			if !honour && !reads[c.name] {
				continue // a write under way is not abandoned
			}
			t.Run(fmt.Sprintf("%s/honour=%v", c.name, honour), func(t *testing.T) {
				q, st, id := newStalling(t, c.method)
				st.honour = honour
				ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
				defer cancel()
				var err error
				within(t, c.name+" with a 50 ms context", func() { err = c.call(t, ctx, q, id) })
				assert.ErrorIs(t, err, context.DeadlineExceeded, "%s: got %v, want the context's error", c.name, err)
				select {
				case <-st.entered:
				default:
					t.Errorf("%s returned without reaching the stalled %s", c.name, c.method)
				}
			})
		}
	}
}

// TestStalledStoreFigures measures, with IDEM_STALL_FIGURES set, how long
// Wait with a 50 ms context and Close take while a store call stalls for
// 2 s: the figures of the closing note, not a proof (the stall ends on a
// timer).
func TestStalledStoreFigures(t *testing.T) {
	if os.Getenv("IDEM_STALL_FIGURES") == "" {
		t.Skip("set IDEM_STALL_FIGURES=1 to measure")
	}
	for _, m := range stallMethods {
		q, st, id := newStalling(t, m)
		stallIn(t, q, st)
		time.AfterFunc(2*time.Second, st.unstall)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		start := time.Now()
		_, err := q.Wait(ctx, id)
		cancel()
		t.Logf("%s stalled 2 s: Wait with a 50 ms context returned after %v (%v)", m, time.Since(start).Round(time.Millisecond), err)
	}
	q, st, _ := newStalling(t, "TakeDue")
	stallIn(t, q, st)
	time.AfterFunc(2*time.Second, st.unstall)
	start := time.Now()
	err := q.Close()
	t.Logf("TakeDue stalled 2 s: Close returned after %v (%v)", time.Since(start).Round(time.Millisecond), err)
}
