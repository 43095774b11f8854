// Command fleet runs an order service's payments through one queue in
// PostgreSQL, drained by three replicas, one of which is killed part way.
//
// Each order row and its payment intent commit in one transaction
// (pgqueue.EnqueueTx): an order exists if and only if its payment is queued.
// Three replica processes (this program, started again) drain the queue
// against a server that follows the idempotency protocol and injects
// faults. When the server has received a few payments, it holds one
// replica's request, that replica is killed with SIGKILL, and the request
// then takes effect, its answer lost with the process. The other replicas
// take the dead one's lanes over when its lease ends and send what it left
// in flight again, with the same key. Then the server is asked how many
// times each payment took effect.
//
//	cd examples/fleet && go run .
//
// It starts a throwaway PostgreSQL server (package pgserver: the machine's
// PostgreSQL binaries, run as the postgres user when started as root), or
// uses the one named by $IDEM_PG. It exits 1 unless every payment took
// effect exactly once.
package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/idemtest"
	"github.com/idem-go/idem/pgqueue"
	"github.com/idem-go/idem/pgqueue/pgserver"
	"github.com/idem-go/idem/queue"
)

// A replica is this program started with its database in envReplica and
// its name in envName.
const (
	envReplica = "FLEET_REPLICA_DB"
	envName    = "FLEET_REPLICA_NAME"
)

const (
	orders    = 40
	customers = 5
	replicas  = 3
	// killAt is the request, counted at the server, whose replica is
	// killed while the server holds it.
	killAt = 12
	// The attempt timeout and lease margin are short so that the dead
	// replica's lanes are taken over within seconds.
	attemptTimeout = time.Second
	leaseMargin    = time.Second
	limit          = time.Minute
)

func main() {
	if conn := os.Getenv(envReplica); conn != "" {
		os.Exit(replica(conn, os.Getenv(envName), os.Stderr))
	}
	os.Exit(run(os.Stdout, os.Stderr))
}

// policy is every replica's.
func policy() idem.Policy {
	return idem.Policy{BaseDelay: 10 * time.Millisecond, MaxDelay: 200 * time.Millisecond, AttemptTimeout: attemptTimeout}
}

// replica drains the queue until it is killed.
func replica(conn, name string, stderr io.Writer) int {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, conn)
	if err != nil {
		fmt.Fprintln(stderr, "fleet: replica:", err)
		return 1
	}
	hc := &http.Client{Transport: named{name: name}}
	q, err := pgqueue.New(ctx, pool, pgqueue.Options{
		Options:     queue.Options{Client: &idem.Client{HTTPClient: hc}, Policy: policy(), Workers: 2},
		LeaseMargin: leaseMargin,
	})
	if err != nil {
		fmt.Fprintln(stderr, "fleet: replica:", err)
		return 1
	}
	if err := q.Run(ctx); err != nil {
		fmt.Fprintln(stderr, "fleet: replica:", err)
		return 1
	}
	return 0
}

// named sends each request with its replica's name, for the scene's
// bookkeeping; the server does not need it.
type named struct{ name string }

func (n named) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-Replica", n.name)
	return http.DefaultTransport.RoundTrip(r)
}

// run plays the scene and prints its table.
func run(stdout, stderr io.Writer) int {
	fail := func(err error) int {
		fmt.Fprintln(stderr, "fleet:", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()

	conn := os.Getenv("IDEM_PG")
	if conn == "" {
		srv, err := pgserver.Start()
		if err != nil {
			return fail(err)
		}
		defer srv.Stop()
		conn = srv.ConnString()
	}
	pool, err := pgxpool.New(ctx, conn)
	if err != nil {
		return fail(err)
	}
	defer pool.Close()
	if err := setUp(ctx, pool); err != nil {
		return fail(err)
	}

	srv := idemtest.New(idemtest.Options{
		RequireKey: true,
		Faults: idemtest.RandomFaults(7, map[idemtest.Fault]float64{
			idemtest.FaultCommitThenDrop: 0.1, idemtest.Fault503: 0.1, idemtest.Fault500AfterEffect: 0.05,
		}),
	})
	defer srv.Close()
	fl := &fleet{conn: conn, procs: map[string]*exec.Cmd{}, attempts: map[string]int{}}
	url, stop, err := serve(srv.Handler(), fl)
	if err != nil {
		return fail(err)
	}
	defer stop()

	placed, err := placeOrders(ctx, pool, url)
	if err != nil {
		return fail(err)
	}
	for i := range replicas {
		if err := fl.start(fmt.Sprintf("replica-%d", i+1)); err != nil {
			return fail(err)
		}
	}
	defer fl.stopAll()

	q, err := pgqueue.New(ctx, pool, pgqueue.Options{Options: queue.Options{ReadOnly: true}})
	if err != nil {
		return fail(err)
	}
	defer q.Close()
	for _, o := range placed {
		r, err := q.Wait(ctx, o.id)
		if err != nil {
			return fail(fmt.Errorf("waiting for the payment of %s: %w", o.order, err))
		}
		o.state = r.State
	}
	return report(stdout, srv, fl, placed)
}

// setUp makes the queue's tables and the service's own.
func setUp(ctx context.Context, pool *pgxpool.Pool) error {
	if err := pgqueue.Migrate(ctx, pool); err != nil {
		return err
	}
	_, err := pool.Exec(ctx, `CREATE TABLE orders (
		id text PRIMARY KEY, customer text NOT NULL, total int NOT NULL, payment bigint NOT NULL)`)
	return err
}

// order is one placed order and what became of its payment.
type order struct {
	order, customer string
	key             string
	id              queue.ID
	state           queue.State
}

// placeOrders commits each order with its payment intent, one transaction
// each; a customer's payments form a lane, sent in order.
func placeOrders(ctx context.Context, pool *pgxpool.Pool, url string) ([]*order, error) {
	var placed []*order
	for i := range orders {
		o := &order{order: fmt.Sprintf("order-%02d", i+1), customer: fmt.Sprintf("customer-%d", i%customers+1)}
		in, err := idem.NewIntent("POST", url+"/payments", fmt.Appendf(nil, `{"order":%q,"amount":%d}`, o.order, 100+i),
			idem.WithLane(o.customer), idem.WithHeader("Content-Type", "application/json"))
		if err != nil {
			return nil, err
		}
		o.key = in.Key()
		tx, err := pool.Begin(ctx)
		if err != nil {
			return nil, err
		}
		if o.id, err = pgqueue.EnqueueTx(ctx, tx, in); err != nil {
			tx.Rollback(ctx) //nolint:errcheck // the error above is the one to report
			return nil, err
		}
		if _, err := tx.Exec(ctx, "INSERT INTO orders VALUES ($1, $2, $3, $4)", o.order, o.customer, 100+i, int64(o.id)); err != nil {
			tx.Rollback(ctx) //nolint:errcheck // the error above is the one to report
			return nil, err
		}
		if err := tx.Commit(ctx); err != nil {
			return nil, err
		}
		placed = append(placed, o)
	}
	return placed, nil
}

// fleet runs the replica processes and keeps the scene's counts.
type fleet struct {
	conn string

	mu       sync.Mutex
	procs    map[string]*exec.Cmd
	attempts map[string]int // requests the server received, per replica
	requests int
	killed   string
}

func (f *fleet) start(name string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), envReplica+"="+f.conn, envName+"="+name)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	f.mu.Lock()
	f.procs[name] = cmd
	f.mu.Unlock()
	return nil
}

// arrived counts a request from replica name, and kills that replica with
// SIGKILL if the request is the killAt-th: the request goes on only once
// the replica is dead, so its answer is lost.
func (f *fleet) arrived(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests++
	f.attempts[name]++
	if f.requests < killAt || f.killed != "" {
		return
	}
	cmd, ok := f.procs[name]
	if !ok {
		return
	}
	f.killed = name
	delete(f.procs, name)
	cmd.Process.Kill() //nolint:errcheck // it is dead or dying either way
	cmd.Wait()         //nolint:errcheck // killed: the error says so
}

func (f *fleet) stopAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, cmd := range f.procs {
		cmd.Process.Kill() //nolint:errcheck // the scene is over
		cmd.Wait()         //nolint:errcheck // killed: the error says so
	}
	f.procs = nil
}

// serve serves h on loopback, telling f of each request first.
func serve(h http.Handler, f *fleet) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.arrived(r.Header.Get("X-Replica"))
		h.ServeHTTP(w, r)
	}), ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(ln) //nolint:errcheck // ErrServerClosed after stop
	return "http://" + ln.Addr().String(), func() { hs.Close() }, nil
}

// report prints the table and the verdict, and returns the exit code.
func report(w io.Writer, srv *idemtest.Server, f *fleet, placed []*order) int {
	type row struct{ orders, done, effects, duplicates, lost int }
	rows := map[string]*row{}
	var total row
	for _, o := range placed {
		r := rows[o.customer]
		if r == nil {
			r = &row{}
			rows[o.customer] = r
		}
		e := srv.EffectsForKey(o.key)
		for _, x := range []*row{r, &total} {
			x.orders++
			x.effects += e
			if o.state == queue.Done {
				x.done++
			}
			if e > 1 {
				x.duplicates += e - 1
			}
			if e == 0 {
				x.lost++
			}
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "lane (customer)\torders\tpayments done\ttaken effect\tduplicates\tlost\t")
	for i := range customers {
		name := fmt.Sprintf("customer-%d", i+1)
		r := rows[name]
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t\n", name, r.orders, r.done, r.effects, r.duplicates, r.lost)
	}
	fmt.Fprintf(tw, "total\t%d\t%d\t%d\t%d\t%d\t\n", total.orders, total.done, total.effects, total.duplicates, total.lost)
	tw.Flush()

	f.mu.Lock()
	var sent []string
	for i := range replicas {
		name := fmt.Sprintf("replica-%d", i+1)
		note := ""
		if name == f.killed {
			note = " (killed with SIGKILL while the server held its request)"
		}
		sent = append(sent, fmt.Sprintf("%s %d%s", name, f.attempts[name], note))
	}
	killed := f.killed
	f.mu.Unlock()
	fmt.Fprintf(w, "\nrequests per replica: %s\n", strings.Join(sent, ", "))

	if killed == "" {
		fmt.Fprintln(w, "FAIL: no replica was killed: the scene did not happen")
		return 1
	}
	if total.duplicates > 0 || total.lost > 0 || total.done != total.orders {
		fmt.Fprintf(w, "FAIL: %d orders, %d payments done, %d duplicated effects, %d lost\n",
			total.orders, total.done, total.duplicates, total.lost)
		return 1
	}
	fmt.Fprintf(w, "exactly-once: %d orders, each payment taken effect once, 0 duplicates, 0 lost; %s killed mid-attempt, its lanes taken over\n",
		total.orders, killed)
	return 0
}
