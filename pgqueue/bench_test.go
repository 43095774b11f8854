package pgqueue_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/pgqueue"
	"github.com/idem-go/idem/pgqueue/internal/pgtest"
	"github.com/idem-go/idem/queue"
)

// The benchmarks measure the PostgreSQL store beside what it is compared
// with, in the same run: a business transaction with and without its
// intent, and the drain rate of one and three replicas beside the bbolt
// queue. They run on the throwaway server (fsync off), so they compare
// rather than promise a production figure.

// BenchmarkBusinessTx: a business transaction writing one order row,
// three ways, interleaved so that the machine's noise falls on all alike:
// alone (plain-us), with one more round trip to the server, a SELECT 1
// (roundtrip-us), and with the order's payment intent queued by EnqueueTx
// (intent-us). It also reports the statements EnqueueTx sent per call
// (round-trips/op), counted by a tracer on the connection.
func BenchmarkBusinessTx(b *testing.B) {
	ctx := context.Background()
	var statements atomic.Int64
	pool := countingPool(b, ctx, pgtest.DB(b), &statements)
	require.NoError(b, pgqueue.Migrate(ctx, pool))
	_, err := pool.Exec(ctx, "CREATE TABLE orders (id text PRIMARY KEY, total int NOT NULL)")
	require.NoError(b, err)

	const plain, roundTrip, intent = 0, 1, 2
	var (
		n     int
		spent [3]time.Duration
		sent  int64
	)
	order := func(how int) {
		n++
		id := "order-" + strconv.Itoa(n)
		start := time.Now()
		tx, err := pool.Begin(ctx)
		require.NoError(b, err)
		_, err = tx.Exec(ctx, "INSERT INTO orders (id, total) VALUES ($1, $2)", id, n)
		require.NoError(b, err)
		switch how {
		case roundTrip:
			_, err = tx.Exec(ctx, "SELECT 1")
		case intent:
			var in *idem.Intent
			in, err = idem.NewIntent("POST", "http://127.0.0.1:1/payments", []byte(`{"order":"`+id+`"}`), idem.WithLane(id))
			require.NoError(b, err)
			before := statements.Load()
			_, err = pgqueue.EnqueueTx(ctx, tx, in)
			sent += statements.Load() - before
		}
		require.NoError(b, err)
		require.NoError(b, tx.Commit(ctx))
		spent[how] += time.Since(start)
	}
	for i := range 50 { // warm the pool's connections and their statement caches
		order(i % 3)
	}
	spent, sent = [3]time.Duration{}, 0
	i := 0
	for b.Loop() {
		for j := range 3 {
			order((i + j) % 3) // each kind takes each turn alike
		}
		i++
	}
	us := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(b.N) }
	b.ReportMetric(us(spent[plain]), "plain-us")
	b.ReportMetric(us(spent[roundTrip]), "roundtrip-us")
	b.ReportMetric(us(spent[intent]), "intent-us")
	b.ReportMetric(float64(sent)/float64(b.N), "round-trips/op")
}

// BenchmarkFleetDrain: b.N intents on 64 lanes queued beforehand, then drained
// to a server that answers 201 at once, by the bbolt queue and by one and
// three replicas of the PostgreSQL queue (8 workers each).
func BenchmarkFleetDrain(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	b.Cleanup(srv.Close)
	// options returns the queues' options, their settles reported on
	// the channel, which the drain counts.
	options := func(b *testing.B) (queue.Options, chan queue.State) {
		settled := make(chan queue.State, b.N+100)
		return queue.Options{Workers: 8, Policy: fleetPolicy(), Notify: func(ev queue.Event) {
			if ev.Kind == queue.EventSettled && !ev.Remote {
				settled <- ev.Record.State
			}
		}}, settled
	}
	intents := func(b *testing.B) []*idem.Intent {
		ins := make([]*idem.Intent, b.N)
		for i := range ins {
			in, err := idem.NewIntent("POST", srv.URL+"/payments", []byte("{}"), idem.WithLane(fmt.Sprint("lane-", i%64)))
			require.NoError(b, err)
			ins[i] = in
		}
		return ins
	}

	b.Run("bbolt", func(b *testing.B) {
		opts, settled := options(b)
		q, err := queue.Open(filepath.Join(b.TempDir(), "q.db"), opts)
		require.NoError(b, err)
		defer q.Close()
		drain(b, []*queue.Queue{q}, settled, intents(b))
	})
	for _, replicas := range []int{1, 3} {
		b.Run(fmt.Sprintf("postgres-%d", replicas), func(b *testing.B) {
			pool := benchPool(b)
			opts, settled := options(b)
			var qs []*queue.Queue
			for range replicas {
				rp, err := pgxpool.New(context.Background(), pool.Config().ConnString())
				require.NoError(b, err)
				q, err := pgqueue.New(context.Background(), rp, pgqueue.Options{Options: opts})
				require.NoError(b, err)
				defer rp.Close()
				defer q.Close()
				qs = append(qs, q)
			}
			drain(b, qs, settled, intents(b))
		})
	}
}

// drain enqueues ins through the first of the replicas qs, then times them
// draining ins to the len(ins)-th settle reported on settled, as their
// Notify sees them (a Wait per record would add a round trip per record,
// one after the other, to what is timed), and reports intents/s.
func drain(b *testing.B, qs []*queue.Queue, settled <-chan queue.State, ins []*idem.Intent) {
	ctx := context.Background()
	for _, in := range ins {
		_, err := qs[0].Enqueue(ctx, in)
		require.NoError(b, err)
	}
	b.ResetTimer()
	start := time.Now()
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, len(qs))
	for _, r := range qs {
		go func() { done <- r.Run(runCtx) }()
	}
	for range ins {
		select {
		case s := <-settled:
			require.Equal(b, queue.Done, s)
		case <-time.After(5 * time.Minute):
			b.Fatal("the records not all settled after 5 minutes")
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	cancel()
	for range qs {
		require.NoError(b, <-done)
	}
	counts, err := qs[0].Counts(ctx)
	require.NoError(b, err)
	require.Equal(b, len(ins), counts[queue.Done], "records done")
	b.ReportMetric(float64(len(ins))/elapsed.Seconds(), "intents/s")
}

// benchPool returns a pool on a fresh, migrated database.
func benchPool(b *testing.B) *pgxpool.Pool {
	b.Helper()
	pool, err := pgxpool.New(context.Background(), pgtest.DB(b))
	require.NoError(b, err)
	b.Cleanup(pool.Close)
	require.NoError(b, pgqueue.Migrate(context.Background(), pool))
	return pool
}
