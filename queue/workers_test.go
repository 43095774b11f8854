package queue

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/idem-go/idem"
)

// heldAPI answers every request 201, but only once the test releases it:
// until then the requests pile up, and it counts how many are under way at
// once.
type heldAPI struct {
	arrived chan struct{} // one value per request that reached the handler
	release chan struct{} // closed: every request, held or to come, is answered

	mu   sync.Mutex // guards now and most
	now  int        // requests under way
	most int        // the most under way at once

	releaseOnce sync.Once
}

func newHeldAPI(t *testing.T) (*heldAPI, string) {
	a := &heldAPI{arrived: make(chan struct{}, 1024), release: make(chan struct{})}
	srv := httptest.NewServer(a)
	t.Cleanup(srv.Close)
	t.Cleanup(a.let) // before srv.Close: held requests end first
	return a, srv.URL + "/payments"
}

func (a *heldAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	a.now++
	a.most = max(a.most, a.now)
	a.mu.Unlock()
	a.arrived <- struct{}{}
	select {
	case <-a.release:
	case <-r.Context().Done():
	}
	a.mu.Lock()
	a.now--
	a.mu.Unlock()
	w.WriteHeader(http.StatusCreated)
}

// let answers every request from now on.
func (a *heldAPI) let() { a.releaseOnce.Do(func() { close(a.release) }) }

func (a *heldAPI) mostAtOnce() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.most
}

// TestWorkersFollowDueLanes: with a record due in each of lanes lanes
// before Run starts, the drainer's first pass sends the head of every due
// lane at once, up to Options.Workers: the API sees that many requests
// under way together, and never more, while the drain goes on.
func TestWorkersFollowDueLanes(t *testing.T) {
	for _, c := range []struct {
		name    string
		workers int // Options.Workers
		lanes   int
		want    int // requests under way at once
	}{
		{"default options, 64 lanes", 0, 64, 64},
		{"default options, 3 lanes", 0, 3, 3},
		{"bound of 8, 64 lanes", 8, 64, 8},
	} {
		t.Run(c.name, func(t *testing.T) {
			api, target := newHeldAPI(t)
			clk := newClock()
			q, _ := openTest(t, Options{now: clk.Now, Client: &idem.Client{}, Workers: c.workers})
			q.sig.init()
			ctx := waitCtx(t)
			ids := make([]ID, c.lanes)
			for i := range ids {
				id, err := q.Enqueue(ctx, post(t, target, i, idem.WithLane(fmt.Sprint("lane-", i))))
				require.NoError(t, err)
				ids[i] = id
			}
			run(t, q)

			// The drainer takes every lane it will while the API holds
			// them: the first pass that starts nothing says how many
			// workers it has left.
			p := next(t, &q.sig.idle, func(idlePass) bool { return true })
			started := q.opts.Workers - p.free
			require.Equal(t, c.want, started, "workers started for %d due lanes with Workers %d", c.lanes, c.workers)
			for range started { // each worker started reaches the API
				select {
				case <-api.arrived:
				case <-ctx.Done():
					t.Fatalf("fewer than %d requests reached the API", started)
				}
			}
			assert.Equal(t, c.want, api.mostAtOnce(), "requests under way at once")

			api.let()
			for _, id := range ids {
				r, err := q.Wait(ctx, id)
				require.NoError(t, err)
				require.Equal(t, Done, r.State)
			}
			assert.Equal(t, c.want, api.mostAtOnce(), "requests under way at once, the drain over")
		})
	}
}

// TestDefaultClientKeepsAConnectionAWorker: a Queue's own Client (Options
// Client nil) keeps an idle connection to the API for each worker, so 64
// lanes drained at once by 64 workers reuse their connections instead of
// closing all but two after each attempt (http.DefaultTransport's
// MaxIdleConnsPerHost) and dialling again. The bound, 3 connections a lane for 10 records a lane,
// is far above the few a race between a dial and a connection coming back
// adds, and far below the one a record the old client needed.
func TestDefaultClientKeepsAConnectionAWorker(t *testing.T) {
	const lanes, perLane = 64, 10
	var mu sync.Mutex // guards conns
	conns := 0
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			mu.Lock()
			conns++
			mu.Unlock()
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	q, _ := openTest(t, Options{Workers: lanes})
	names := make([]string, lanes*perLane)
	for i := range names {
		names[i] = fmt.Sprint("lane-", i%lanes)
	}
	drainLanes(t, q, srv.URL, names...)
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d connections for %d records in %d lanes", conns, lanes*perLane, lanes)
	assert.LessOrEqual(t, conns, 3*lanes, "connections the API saw for %d records in %d lanes", lanes*perLane, lanes)
}

// TestSettlesShareCommits: the settles of records that different workers
// sent go through the file's group commit (see group), as enqueues do: with
// a commit under way, eight workers' settles wait together and the next
// commit carries them all.
func TestSettlesShareCommits(t *testing.T) {
	const lanes = 8
	api, target := newHeldAPI(t)
	q, _ := openTest(t, Options{Client: &idem.Client{}})
	st := q.st.(*boltStore)
	ctx := waitCtx(t)
	ids := make([]ID, lanes)
	for i := range ids {
		id, err := q.Enqueue(ctx, post(t, target, i, idem.WithLane(fmt.Sprint("lane-", i))))
		require.NoError(t, err)
		ids[i] = id
	}
	run(t, q)
	for range lanes { // every record sent, its answer held
		select {
		case <-api.arrived:
		case <-ctx.Done():
			t.Fatal("fewer requests reached the API than lanes")
		}
	}

	// A commit under way, held open, keeps the settles waiting.
	inside, unblock, held := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		held <- st.commits.do(st.db, func(*bolt.Tx) error {
			close(inside)
			<-unblock
			return nil
		})
	}()
	<-inside
	before := lastCommit(t, q)
	api.let()
	require.Eventually(t, func() bool { // each worker's settle waits for the next commit
		st.commits.mu.Lock()
		defer st.commits.mu.Unlock()
		return len(st.commits.queued) == lanes
	}, signalWait, time.Millisecond)
	close(unblock)
	require.NoError(t, <-held)
	for _, id := range ids {
		r, err := q.Wait(ctx, id)
		require.NoError(t, err)
		require.Equal(t, Done, r.State)
	}
	assert.Equal(t, 2, lastCommit(t, q)-before, "commits: the one held open, then one for the %d settles", lanes)
}
