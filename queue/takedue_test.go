package queue

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
)

// takeLog is a store that records what each TakeDue asked for and got.
type takeLog struct {
	Store
	mu    sync.Mutex
	calls [][2]int // n, lanes taken
}

func (s *takeLog) TakeDue(ctx context.Context, now time.Time, n int) ([]string, time.Duration, error) {
	lanes, wait, err := s.Store.TakeDue(ctx, now, n)
	s.mu.Lock()
	s.calls = append(s.calls, [2]int{n, len(lanes)})
	s.mu.Unlock()
	return lanes, wait, err
}

// wrappedQueue returns a queue of workers on a bbolt store in a temporary
// folder, wrapped by wrap, closed when the test ends.
func wrappedQueue(t *testing.T, workers int, wrap func(Store) Store) *Queue {
	t.Helper()
	opts := Options{idle: 5 * time.Millisecond, rand: func() float64 { return 0.5 }, Workers: workers, Client: &idem.Client{}}
	o, err := opts.withDefaults()
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "q.db")
	lf, err := lock(path, o)
	require.NoError(t, err)
	bs, err := openBolt(path, o, lf)
	require.NoError(t, err)
	q, err := New(wrap(bs), opts)
	require.NoError(t, err)
	t.Cleanup(func() { q.Close() })
	return q
}

// drainLanes queues one POST to url/lane in each lane, in order, runs q
// and waits until each is done.
func drainLanes(t *testing.T, q *Queue, url string, lanes ...string) {
	t.Helper()
	ctx := waitCtx(t)
	var ids []ID
	for i, l := range lanes {
		id, err := q.Enqueue(ctx, post(t, url+"/"+l, i, idem.WithLane(l)))
		require.NoError(t, err)
		ids = append(ids, id)
	}
	run(t, q)
	for _, id := range ids {
		r, err := q.Wait(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, Done, r.State)
	}
}

// TestDispatchTakesSeveralLanes: with four workers free and four lanes due,
// one TakeDue takes the four, so that a store on a network pays one round
// trip for them, not four.
func TestDispatchTakesSeveralLanes(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(201) }))
	t.Cleanup(srv.Close)
	st := &takeLog{}
	q := wrappedQueue(t, 4, func(bs Store) Store { st.Store = bs; return st })
	drainLanes(t, q, srv.URL, "a", "b", "c", "d")
	st.mu.Lock()
	defer st.mu.Unlock()
	require.NotEmpty(t, st.calls)
	assert.Equal(t, [2]int{4, 4}, st.calls[0], "the first TakeDue: asked for the 4 free workers, took the 4 due lanes")
}

// TestBoltTakeDueSeveral: the bbolt store takes up to n due lanes, the
// first due first, and says how long until the next when none is due.
func TestBoltTakeDueSeveral(t *testing.T) {
	q, _ := openTest(t, Options{Client: &idem.Client{}})
	ctx := waitCtx(t)
	for i, l := range []string{"a", "b", "c"} {
		_, err := q.Enqueue(ctx, post(t, url, i, idem.WithLane(l)))
		require.NoError(t, err)
	}
	now := time.Now().Add(time.Second)
	lanes, _, err := q.st.TakeDue(ctx, now, 2)
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "b"}, lanes)
	lanes, _, err = q.st.TakeDue(ctx, now, 2)
	require.NoError(t, err)
	assert.Equal(t, []string{"c"}, lanes)
	require.NoError(t, q.st.SetNext(ctx, "a", now.Add(time.Minute)))
	lanes, wait, err := q.st.TakeDue(ctx, now, 2)
	require.NoError(t, err)
	assert.Empty(t, lanes)
	assert.Equal(t, time.Minute, wait, "until lane a is due")
}

// handoffStore hands the worker that gave lane "a" back the lane due next,
// taken in SetNext, as package pgqueue's store takes it with the settle.
type handoffStore struct {
	Store
	mu     sync.Mutex
	handed map[string]string
}

func (s *handoffStore) SetNext(ctx context.Context, lane string, next time.Time) error {
	if err := s.Store.SetNext(ctx, lane, next); err != nil {
		return err
	}
	if lane != "a" {
		return nil
	}
	lanes, _, err := s.Store.TakeDue(ctx, time.Now(), 1)
	if err != nil || len(lanes) == 0 {
		return err
	}
	s.mu.Lock()
	s.handed[lane] = lanes[0]
	s.mu.Unlock()
	return nil
}

func (s *handoffStore) HandedOver(lane string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.handed[lane]
	delete(s.handed, lane)
	return l, ok
}

// TestWorkerTakesTheLaneHandedOver: a worker goes on with the lane its
// store handed over with the last one's return, as with one TakeDue gave
// it; a lane handed over and left would never drain.
func TestWorkerTakesTheLaneHandedOver(t *testing.T) {
	var mu sync.Mutex
	var sent []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		sent = append(sent, r.URL.Path)
		mu.Unlock()
		w.WriteHeader(201)
	}))
	t.Cleanup(srv.Close)
	var st *handoffStore
	q := wrappedQueue(t, 1, func(bs Store) Store {
		st = &handoffStore{Store: &takeLog{Store: bs}, handed: map[string]string{}}
		return st
	})
	drainLanes(t, q, srv.URL, "a", "b")
	mu.Lock()
	assert.Equal(t, []string{"/a", "/b"}, sent)
	mu.Unlock()
	tl := st.Store.(*takeLog)
	tl.mu.Lock()
	defer tl.mu.Unlock()
	assert.Equal(t, [2]int{1, 1}, tl.calls[0], "the dispatcher took a")
	assert.Equal(t, [2]int{1, 1}, tl.calls[1], "the store took b for the worker")
	for _, c := range tl.calls[2:] {
		assert.Zero(t, c[1], "no lane left for the dispatcher to take")
	}
}
