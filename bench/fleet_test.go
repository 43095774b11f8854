package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/bench/internal/latproxy"
	"github.com/idem-go/idem/pgqueue"
	"github.com/idem-go/idem/pgqueue/pgserver"
	"github.com/idem-go/idem/queue"
)

// The fleet benchmarks put a network's latency between the queues and
// their database and between the queues and the HTTP server (latproxy),
// and run River beside pgqueue on the same server, database and proxies.

// latency is one setting of the proxies: round trips to the database and
// to the API. Zero means no proxy at all.
type latency struct {
	name     string
	db, api  time.Duration // round trips
	smokeRun bool          // also in smoke mode
}

var latencies = []latency{
	{"none", 0, 0, true},
	{"db1ms-api5ms", time.Millisecond, 5 * time.Millisecond, false},
	{"db2ms-api20ms", 2 * time.Millisecond, 20 * time.Millisecond, false},
}

const (
	fleetLanes   = 200
	fleetWorkers = 8
)

// pgServer is the throwaway PostgreSQL server of this process, started on
// first use and stopped by TestMain.
var pgServer struct {
	once sync.Once
	srv  *pgserver.Server
	err  error
}

func stopPG() {
	if pgServer.srv != nil {
		pgServer.srv.Stop()
	}
}

// newDB creates an empty database on the throwaway server and returns its
// connection string, or skips b without PostgreSQL's binaries.
func newDB(b *testing.B) string {
	b.Helper()
	pgServer.once.Do(func() { pgServer.srv, pgServer.err = pgserver.Start() })
	if errors.Is(pgServer.err, pgserver.ErrNoBinaries) {
		b.Skip(pgServer.err)
	}
	if pgServer.err != nil {
		b.Fatal(pgServer.err)
	}
	admin := pgServer.srv.ConnString()
	name := "bench_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	ctx := context.Background()
	c, err := pgx.Connect(ctx, admin)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		b.Fatal(err)
	}
	u, err := url.Parse(admin)
	if err != nil {
		b.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}

// socket returns the Unix socket path of conn's server.
func socket(b *testing.B, conn string) string {
	cfg, err := pgx.ParseConfig(conn)
	if err != nil {
		b.Fatal(err)
	}
	return filepath.Join(cfg.Host, ".s.PGSQL."+strconv.Itoa(int(cfg.Port)))
}

// fleetEnv is one latency setting's world: the database, the API server
// and the proxies in front of them.
type fleetEnv struct {
	conn   string          // the database
	dbAddr string          // the database's proxy, "" for none
	url    string          // what the queues POST to, through the API's proxy if any
	tr     *http.Transport // the clients' transport
}

func newFleetEnv(b *testing.B, l latency) *fleetEnv {
	b.Helper()
	e := &fleetEnv{conn: newDB(b), tr: newTransport(nil)}
	b.Cleanup(e.tr.CloseIdleConnections)
	srv := httptest.NewServer(okHandler())
	b.Cleanup(srv.Close)
	e.url = srv.URL + "/payments"
	if l.api > 0 {
		p, err := latproxy.Start(l.api/2, latproxy.To("tcp", srv.Listener.Addr().String()))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { p.Close() })
		e.url = "http://" + p.Addr() + "/payments"
	}
	if l.db > 0 {
		p, err := latproxy.Start(l.db/2, latproxy.To("unix", socket(b, e.conn)))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { p.Close() })
		e.dbAddr = p.Addr()
	}
	ctx := context.Background()
	pool := e.pool(b)
	if err := pgqueue.Migrate(ctx, pool); err != nil {
		b.Fatal(err)
	}
	m, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		b.Fatal(err)
	}
	return e
}

// pool returns a new pool on the database, through its proxy if any.
func (e *fleetEnv) pool(b *testing.B) *pgxpool.Pool {
	b.Helper()
	cfg, err := pgxpool.ParseConfig(e.conn)
	if err != nil {
		b.Fatal(err)
	}
	if e.dbAddr != "" {
		var d net.Dialer
		cfg.ConnConfig.DialFunc = func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, "tcp", e.dbAddr)
		}
	}
	cfg.MaxConns = 2 * fleetWorkers
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(p.Close)
	return p
}

// paymentArgs is River's job: the POST a queued intent makes.
type paymentArgs struct {
	URL  string `json:"url"`
	Lane string `json:"lane"`
}

func (paymentArgs) Kind() string { return "payment" }

// paymentWorker POSTs a job's payment as the queue's drain does, with an
// Idempotency-Key as idem sends.
type paymentWorker struct {
	river.WorkerDefaults[paymentArgs]
	client *http.Client
}

func (w *paymentWorker) Work(ctx context.Context, job *river.Job[paymentArgs]) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, job.Args.URL, strings.NewReader(`{"lane":"`+job.Args.Lane+`"}`))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "river-"+strconv.FormatInt(job.ID, 10))
	resp, err := w.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

// riverClient returns a River client on pool working payments with
// fleetWorkers workers. FetchCooldown is River's least (1 ms): its default
// (100 ms) would hold 8 workers near 80 jobs/s.
func (e *fleetEnv) riverClient(b *testing.B, pool *pgxpool.Pool) *river.Client[pgx.Tx] {
	b.Helper()
	workers := river.NewWorkers()
	river.AddWorker(workers, &paymentWorker{client: &http.Client{Transport: e.tr}})
	c, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:        map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: fleetWorkers}},
		Workers:       workers,
		FetchCooldown: river.FetchCooldownMin,
		Logger:        nil,
	})
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// BenchmarkFleetLatency: b.N intents queued beforehand, then drained to the
// test server, at each latency setting: the bbolt queue (only the API's
// latency applies), one and three PostgreSQL replicas (three pgqueue.New
// queues on pools of their own, in this one process), on 200 lanes (hot
// lanes) and with a lane per intent, and River (one and three clients)
// working the same POSTs as jobs, which have no lane order. 8 workers a
// replica. Reports intents/s.
func BenchmarkFleetLatency(b *testing.B) {
	for _, l := range latencies {
		if smoke() && !l.smokeRun {
			continue
		}
		b.Run("latency="+l.name, func(b *testing.B) {
			for _, impl := range []struct {
				name     string
				replicas int
				lanes    int // 0: one per intent
			}{
				{"bbolt/lanes=200", 0, fleetLanes},
				{"postgres/replicas=1/lanes=200", 1, fleetLanes},
				{"postgres/replicas=3/lanes=200", 3, fleetLanes},
				{"postgres/replicas=1/lanes=each", 1, 0},
				{"postgres/replicas=3/lanes=each", 3, 0},
				{"river/replicas=1", 1, 0},
				{"river/replicas=3", 3, 0},
			} {
				b.Run("impl="+impl.name, func(b *testing.B) {
					e := newFleetEnv(b, l)
					lane := func(i int) string {
						if impl.lanes == 0 {
							return "lane-" + strconv.Itoa(i)
						}
						return "lane-" + strconv.Itoa(i%impl.lanes)
					}
					switch {
					case strings.HasPrefix(impl.name, "river"):
						e.riverDrain(b, impl.replicas, lane)
					case impl.replicas == 0:
						e.queueDrain(b, nil, lane)
					default:
						e.queueDrain(b, make([]struct{}, impl.replicas), lane)
					}
				})
			}
		})
	}
}

// queueDrain enqueues b.N intents then times their drain: by the bbolt
// queue when replicas is nil, else by one PostgreSQL replica per element.
// The drain ends at the b.N-th settle reported by the replicas' Notify,
// as River's side ends at its b.N-th completion event: a Wait per record
// would add a database round trip per record, made one after the other
// from one goroutine, to what is timed. That every record is done is
// checked after the timer stops.
func (e *fleetEnv) queueDrain(b *testing.B, replicas []struct{}, lane func(int) string) {
	ctx := context.Background()
	settled := make(chan queue.State, b.N+100)
	opts := queue.Options{
		Workers: fleetWorkers,
		Client:  &idem.Client{HTTPClient: &http.Client{Transport: e.tr}},
		Policy:  idem.Policy{BaseDelay: 5 * time.Millisecond, MaxDelay: 50 * time.Millisecond, AttemptTimeout: 5 * time.Second},
		Notify: func(ev queue.Event) {
			if ev.Kind == queue.EventSettled && !ev.Remote {
				settled <- ev.Record.State
			}
		},
	}
	var qs []*queue.Queue
	if replicas == nil {
		q := openQueue(b, filepath.Join(b.TempDir(), "q.db"), opts)
		defer q.Close()
		qs = append(qs, q)
	}
	for range replicas {
		q, err := pgqueue.New(ctx, e.pool(b), pgqueue.Options{Options: opts})
		if err != nil {
			b.Fatal(err)
		}
		defer q.Close()
		qs = append(qs, q)
	}
	e.enqueue(b, qs[0], replicas != nil, lane)
	b.ResetTimer()
	start := time.Now()
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, len(qs))
	for _, q := range qs {
		go func() { done <- q.Run(runCtx) }()
	}
	for range b.N {
		select {
		case s := <-settled:
			if s != queue.Done {
				b.Fatalf("a record settled %v, want done", s)
			}
		case <-time.After(5 * time.Minute):
			b.Fatal("the queue's records not all settled after 5 minutes")
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	cancel()
	for range qs {
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
	counts, err := qs[0].Counts(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if counts[queue.Done] != b.N {
		b.Fatalf("%d records done, want %d (%v)", counts[queue.Done], b.N, counts)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "intents/s")
}

// enqueue queues b.N intents, intent i in lane(i): by q's Enqueue, or, for
// the PostgreSQL replicas (pg), by EnqueueManyTx a thousand at a time, as
// River's side inserts its jobs, so that the set-up does not take a round
// trip through the proxy per intent.
func (e *fleetEnv) enqueue(b *testing.B, q *queue.Queue, pg bool, lane func(int) string) {
	ctx := context.Background()
	if !pg {
		for i := range b.N {
			if _, err := q.Enqueue(ctx, newIntent(b, e.url, lane(i))); err != nil {
				b.Fatal(err)
			}
		}
		return
	}
	pool := e.pool(b)
	for from := 0; from < b.N; from += 1000 {
		ins := make([]*idem.Intent, 0, 1000)
		for i := from; i < min(from+1000, b.N); i++ {
			ins = append(ins, newIntent(b, e.url, lane(i)))
		}
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := pgqueue.EnqueueManyTx(ctx, tx, ins)
			return err
		}); err != nil {
			b.Fatal(err)
		}
	}
}

// riverDrain inserts b.N jobs then times clients River clients working
// them, to each job's completion event.
func (e *fleetEnv) riverDrain(b *testing.B, clients int, lane func(int) string) {
	ctx := context.Background()
	var cs []*river.Client[pgx.Tx]
	for range clients {
		cs = append(cs, e.riverClient(b, e.pool(b)))
	}
	params := make([]river.InsertManyParams, b.N)
	for i := range params {
		params[i] = river.InsertManyParams{Args: paymentArgs{URL: e.url, Lane: lane(i)}}
	}
	for len(params) > 0 {
		n := min(len(params), 1000)
		if _, err := cs[0].InsertMany(ctx, params[:n]); err != nil {
			b.Fatal(err)
		}
		params = params[n:]
	}
	type sub struct {
		events <-chan *river.Event
		cancel func()
	}
	var subs []sub
	for _, c := range cs {
		ev, cancel := c.SubscribeConfig(&river.SubscribeConfig{ChanSize: b.N + 100, Kinds: []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed}})
		subs = append(subs, sub{ev, cancel})
	}
	b.ResetTimer()
	start := time.Now()
	for _, c := range cs {
		if err := c.Start(ctx); err != nil {
			b.Fatal(err)
		}
	}
	merged := make(chan *river.Event, b.N+100)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for _, s := range subs {
		wg.Go(func() {
			for {
				select {
				case ev, ok := <-s.events:
					if !ok {
						return
					}
					merged <- ev
				case <-stop:
					return
				}
			}
		})
	}
	for range b.N {
		select {
		case ev := <-merged:
			if ev.Kind != river.EventKindJobCompleted {
				b.Fatalf("job %d: %s, want completed", ev.Job.ID, ev.Kind)
			}
		case <-time.After(5 * time.Minute):
			b.Fatal("River's jobs not all completed after 5 minutes")
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	close(stop)
	wg.Wait()
	for i, c := range cs {
		subs[i].cancel()
		stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_ = c.Stop(stopCtx)
		cancel()
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "intents/s")
}

// BenchmarkFleetTx: a one-row business transaction at each latency setting,
// interleaved so that the machine's noise falls on all alike: alone
// (plain-us), with its payment queued by pgqueue.EnqueueTx (enqueue-us), and
// with the payment inserted as River's job by InsertTx (river-us). Then a
// batch in one transaction: pgqueue queues batch intents by one
// EnqueueManyTx, River by one InsertManyTx (enqueue-batch-ms,
// river-batch-ms). Times are means per transaction; select1-us is a SELECT 1's round trip, through the proxy as
// the rest.
func BenchmarkFleetTx(b *testing.B) {
	batch := 1000
	if smoke() {
		batch = 20
	}
	for _, l := range latencies {
		if smoke() && !l.smokeRun {
			continue
		}
		b.Run("latency="+l.name, func(b *testing.B) {
			e := newFleetEnv(b, l)
			ctx := context.Background()
			pool := e.pool(b)
			rc := e.riverClient(b, pool) // inserts only: never started
			if _, err := pool.Exec(ctx, "CREATE TABLE orders (id text PRIMARY KEY, total int NOT NULL)"); err != nil {
				b.Fatal(err)
			}
			const plain, enqueue, insert, enqueueMany, insertMany = 0, 1, 2, 3, 4
			var (
				n     int
				spent [5]time.Duration
			)
			order := func(how int) {
				rows := 1
				if how >= enqueueMany {
					rows = batch
				}
				start := time.Now()
				tx, err := pool.Begin(ctx)
				if err != nil {
					b.Fatal(err)
				}
				defer tx.Rollback(ctx)
				n++
				id := "order-" + strconv.Itoa(n)
				if _, err := tx.Exec(ctx, "INSERT INTO orders (id, total) VALUES ($1, $2)", id, n); err != nil {
					b.Fatal(err)
				}
				switch how {
				case enqueue:
					if _, err := pgqueue.EnqueueTx(ctx, tx, newIntent(b, e.url, id)); err != nil {
						b.Fatal(err)
					}
				case enqueueMany:
					ins := make([]*idem.Intent, rows)
					for i := range ins {
						ins[i] = newIntent(b, e.url, id+"-"+strconv.Itoa(i))
					}
					if _, err := pgqueue.EnqueueManyTx(ctx, tx, ins); err != nil {
						b.Fatal(err)
					}
				case insert:
					if _, err := rc.InsertTx(ctx, tx, paymentArgs{URL: e.url, Lane: id}, nil); err != nil {
						b.Fatal(err)
					}
				case insertMany:
					params := make([]river.InsertManyParams, rows)
					for i := range params {
						params[i] = river.InsertManyParams{Args: paymentArgs{URL: e.url, Lane: id + "-" + strconv.Itoa(i)}}
					}
					if _, err := rc.InsertManyTx(ctx, tx, params); err != nil {
						b.Fatal(err)
					}
				}
				if err := tx.Commit(ctx); err != nil {
					b.Fatal(err)
				}
				spent[how] += time.Since(start)
			}
			for i := range 30 { // warm the connections and their statement caches
				order(i % 3)
			}
			order(enqueueMany)
			order(insertMany)
			spent = [5]time.Duration{}
			i := 0
			b.ResetTimer()
			for range b.N {
				for j := range 3 {
					order((i + j) % 3)
				}
				if i%10 == 0 { // a batch every tenth round: each is batch rows
					order(enqueueMany + i/10%2)
					order(enqueueMany + (i/10+1)%2)
				}
				i++
			}
			b.StopTimer()
			// What a round trip to the database took through the proxy:
			// timers on a loaded machine fire late, so the proxy's delay
			// is a floor.
			var rtt time.Duration
			for range 20 {
				start := time.Now()
				if _, err := pool.Exec(ctx, "SELECT 1"); err != nil {
					b.Fatal(err)
				}
				rtt += time.Since(start)
			}
			b.ReportMetric(float64(rtt.Microseconds())/20, "select1-us")
			us := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(b.N) }
			batches := float64((b.N + 9) / 10)
			b.ReportMetric(us(spent[plain]), "plain-us")
			b.ReportMetric(us(spent[enqueue]), "enqueue-us")
			b.ReportMetric(us(spent[insert]), "river-us")
			b.ReportMetric(float64(spent[enqueueMany].Microseconds())/1000/batches, "enqueue-batch-ms")
			b.ReportMetric(float64(spent[insertMany].Microseconds())/1000/batches, "river-batch-ms")
		})
	}
}
