package pgqueue_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/idemtest"
	"github.com/idem-go/idem/pgqueue"
	"github.com/idem-go/idem/queue"
)

// The fleet tests drain one queue with several replicas against the
// project's test server, which follows the idempotency protocol and
// injects faults, and check what the server saw: each intent applied once,
// no two records of a lane at the server at once, each lane's records
// first arriving in the order they were committed.

const (
	fleetLanes   = 6
	fleetPerLane = 8
)

// fleetPolicy keeps attempts short, so that a dead replica's lease ends
// within seconds: AttemptTimeout plus fleetMargin.
func fleetPolicy() idem.Policy {
	return idem.Policy{BaseDelay: 5 * time.Millisecond, MaxDelay: 50 * time.Millisecond, AttemptTimeout: time.Second}
}

const fleetMargin = 500 * time.Millisecond

// laneWatch stands in front of the test server's handler and notes, per
// lane, which records are inside the handler and the order in which the
// lane's records first arrived. Requests name their lane and their place
// in it in the X-Lane and X-Seq headers their intents carry.
type laneWatch struct {
	next http.Handler
	// hold, if not nil, is called with each request before it goes on; it
	// may block it.
	hold func(r *http.Request)

	mu       sync.Mutex
	inside   map[string]map[int]int // lane → seq → requests in the handler
	first    map[string][]int       // lane → seqs in first-arrival order
	overlaps []string
}

func newLaneWatch(next http.Handler) *laneWatch {
	return &laneWatch{next: next, inside: map[string]map[int]int{}, first: map[string][]int{}}
}

func (w *laneWatch) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	lane := r.Header.Get("X-Lane")
	seq, _ := strconv.Atoi(r.Header.Get("X-Seq"))
	w.mu.Lock()
	in := w.inside[lane]
	if in == nil {
		in = map[int]int{}
		w.inside[lane] = in
	}
	for other, n := range in {
		if other != seq && n > 0 {
			w.overlaps = append(w.overlaps, fmt.Sprintf("lane %s: record %d arrived while %d was inside", lane, seq, other))
		}
	}
	if _, seen := in[seq]; !seen {
		w.first[lane] = append(w.first[lane], seq)
	}
	in[seq]++
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		in[seq]--
		w.mu.Unlock()
	}()
	if w.hold != nil {
		w.hold(r)
	}
	w.next.ServeHTTP(rw, r)
}

// check asserts that no lane had two records at the server at once and
// that each lane's records first arrived in their order.
func (w *laneWatch) check(t *testing.T) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if n := len(w.overlaps); n > 0 {
		t.Errorf("two records of a lane in flight at once, %d times; the first: %q", n, w.overlaps[:min(n, 3)])
	}
	want := make([]int, fleetPerLane)
	for i := range want {
		want[i] = i
	}
	for l := range fleetLanes {
		lane := fmt.Sprintf("lane-%d", l)
		assert.Equal(t, want, w.first[lane], "%s: the order its records first reached the server", lane)
	}
}

// fleetServer starts the test server, with faults of every kind an attempt
// can meet, behind a laneWatch, on loopback.
func fleetServer(t *testing.T) (*idemtest.Server, *laneWatch, string) {
	srv := idemtest.New(idemtest.Options{
		RequireKey: true,
		Delay:      100 * time.Millisecond,
		Faults: idemtest.RandomFaults(12, map[idemtest.Fault]float64{
			idemtest.FaultCloseBeforeRead: 0.08,
			idemtest.FaultCommitThenDrop:  0.12,
			idemtest.FaultDelay:           0.05,
			idemtest.Fault503:             0.08,
			idemtest.Fault500AfterEffect:  0.08,
		}),
	})
	w := newLaneWatch(srv.Handler())
	hs := httptest.NewServer(w)
	t.Cleanup(hs.Close)
	return srv, w, hs.URL
}

// fleetIntents makes the intents: fleetPerLane payments on each of
// fleetLanes lanes, each naming its lane and place.
func fleetIntents(t *testing.T, url string) []*idem.Intent {
	var ins []*idem.Intent
	for i := range fleetPerLane {
		for l := range fleetLanes {
			lane := fmt.Sprintf("lane-%d", l)
			in, err := idem.NewIntent("POST", url+"/payments", fmt.Appendf(nil, `{"lane":%q,"seq":%d}`, lane, i),
				idem.WithLane(lane), idem.WithHeader("X-Lane", lane), idem.WithHeader("X-Seq", strconv.Itoa(i)))
			require.NoError(t, err)
			ins = append(ins, in)
		}
	}
	return ins
}

// enqueueAll commits each intent with a business row, in one transaction
// each, and returns their records' IDs.
func enqueueAll(t *testing.T, pool *pgxpool.Pool, ins []*idem.Intent) []queue.ID {
	ctx := context.Background()
	ids := make([]queue.ID, len(ins))
	for i, in := range ins {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, "INSERT INTO orders (id, total) VALUES ($1, $2)", in.Key(), i)
		require.NoError(t, err)
		ids[i], err = pgqueue.EnqueueTx(ctx, tx, in)
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
	}
	return ids
}

// checkApplied asserts that every record was applied and every intent
// applied once at the server.
func checkApplied(t *testing.T, q *queue.Queue, srv *idemtest.Server, ins []*idem.Intent, ids []queue.ID) {
	ctx := waitCtx(t)
	for i, id := range ids {
		r, err := q.Wait(ctx, id)
		require.NoError(t, err, "record %v", id)
		assert.Equal(t, queue.Done, r.State, "record %v: %s", id, r.Reason)
		assert.Equal(t, 1, srv.EffectsForKey(ins[i].Key()), "record %v: effects at the server", id)
	}
	assert.Equal(t, len(ins), srv.TotalEffects())
}

// TestFleet: three replicas, each with its own pool, drain one queue while
// a producer commits into it; one replica stops part way.
func TestFleet(t *testing.T) {
	pool := migrated(t)
	businessTable(t, pool)
	srv, watch, url := fleetServer(t)
	ins := fleetIntents(t, url)

	stops := make([]context.CancelFunc, 3)
	for i := range stops {
		rp, err := pgxpool.New(context.Background(), pool.Config().ConnString())
		require.NoError(t, err)
		t.Cleanup(rp.Close)
		q := open(t, rp, pgqueue.Options{Options: queue.Options{Policy: fleetPolicy(), Workers: 3}, LeaseMargin: fleetMargin})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- q.Run(ctx) }()
		stops[i] = func() {
			cancel()
			assert.NoError(t, <-done)
		}
	}
	half := len(ins) / 2
	ids := enqueueAll(t, pool, ins[:half])
	stops[0]()
	ids = append(ids, enqueueAll(t, pool, ins[half:])...)

	checkApplied(t, open(t, pool, pgqueue.Options{Options: queue.Options{ReadOnly: true}}), srv, ins, ids)
	for _, stop := range stops[1:] {
		stop()
	}
	watch.check(t)
}

// Environment of a replica process started by TestFleetKill.
const (
	envReplicaDB = "IDEM_FLEET_REPLICA_DB"
	envReplicaID = "IDEM_FLEET_REPLICA_ID"
)

// TestFleetReplica is the replica process TestFleetKill starts, by running
// this test binary again; run on its own it has nothing to do.
func TestFleetReplica(t *testing.T) {
	conn := os.Getenv(envReplicaDB)
	if conn == "" {
		t.Skip("a replica process of TestFleetKill")
	}
	pool, err := pgxpool.New(context.Background(), conn)
	require.NoError(t, err)
	hc := &http.Client{Transport: tagged{id: os.Getenv(envReplicaID)}}
	q, err := pgqueue.New(context.Background(), pool, pgqueue.Options{
		Options:     queue.Options{Policy: fleetPolicy(), Workers: 3, Client: &idem.Client{HTTPClient: hc}},
		LeaseMargin: fleetMargin,
	})
	require.NoError(t, err)
	require.NoError(t, q.Run(context.Background())) // until killed
}

// tagged sends each request with the replica's ID in X-Replica.
type tagged struct{ id string }

func (tg tagged) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-Replica", tg.id)
	return http.DefaultTransport.RoundTrip(r)
}

// replicas runs replica processes of this test binary.
type replicas struct {
	t    *testing.T
	conn string
	mu   sync.Mutex
	next int
	live map[string]*replicaProc
}

type replicaProc struct {
	cmd    *exec.Cmd
	out    bytes.Buffer
	exited chan struct{}
}

func (rs *replicas) start() {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	id := strconv.Itoa(rs.next)
	rs.next++
	p := &replicaProc{exited: make(chan struct{})}
	p.cmd = exec.Command(os.Args[0], "-test.run=^TestFleetReplica$", "-test.v")
	p.cmd.Env = append(os.Environ(), envReplicaDB+"="+rs.conn, envReplicaID+"="+id)
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	if err := p.cmd.Start(); err != nil { // called from the server's goroutine too: no FailNow
		rs.t.Errorf("starting replica %s: %v", id, err)
		return
	}
	go func() {
		p.cmd.Wait() //nolint:errcheck // a killed replica's exit is expected
		close(p.exited)
	}()
	rs.live[id] = p
}

// kill kills replica id with SIGKILL and waits for it to be gone; false
// if it is not one of the live ones.
func (rs *replicas) kill(id string) bool {
	rs.mu.Lock()
	p, ok := rs.live[id]
	delete(rs.live, id)
	rs.mu.Unlock()
	if !ok {
		return false
	}
	if err := p.cmd.Process.Kill(); err != nil {
		rs.t.Errorf("killing replica %s: %v", id, err)
	}
	<-p.exited
	return true
}

// stop kills every live replica; a replica that exited on its own by then
// failed, and its output says why.
func (rs *replicas) stop() {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for id, p := range rs.live {
		select {
		case <-p.exited:
			rs.t.Errorf("replica %s exited on its own:\n%s", id, p.out.String())
		default:
			p.cmd.Process.Kill() //nolint:errcheck // ends the test's replicas
			<-p.exited
		}
	}
	rs.live = nil
}

// TestFleetKill: three replica processes drain one queue; three times a
// replica is killed with SIGKILL while the server holds one of its
// attempts, which the server then carries out. Another replica takes the
// lane over once the dead one's lease ends and sends the record again with
// its key: the server answers from what it stored, and nothing is applied
// twice, or out of its lane's order.
func TestFleetKill(t *testing.T) {
	pool := migrated(t)
	businessTable(t, pool)
	srv, watch, url := fleetServer(t)
	ins := fleetIntents(t, url)
	ids := enqueueAll(t, pool, ins)

	rs := &replicas{t: t, conn: pool.Config().ConnString(), live: map[string]*replicaProc{}}
	var (
		mu       sync.Mutex
		requests int
		kills    int
	)
	killAt := map[int]bool{6: true, 18: true, 30: true}
	watch.hold = func(r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		requests++
		if killAt[requests] && rs.kill(r.Header.Get("X-Replica")) {
			kills++
			rs.start()
		}
	}
	for range 3 {
		rs.start()
	}
	t.Cleanup(rs.stop)

	checkApplied(t, open(t, pool, pgqueue.Options{Options: queue.Options{ReadOnly: true}}), srv, ins, ids)
	mu.Lock()
	assert.Equal(t, 3, kills, "replicas killed mid-attempt")
	mu.Unlock()
	watch.check(t)
	rs.stop()
}
