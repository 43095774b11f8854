package pgqueue_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
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

// BenchmarkBusinessTx: one order row per transaction, alone and with its
// payment intent queued by EnqueueTx. ns/op of with-intent over plain is
// what EnqueueTx adds to the caller's transaction.
func BenchmarkBusinessTx(b *testing.B) {
	ctx := context.Background()
	pool := benchPool(b)
	_, err := pool.Exec(ctx, "CREATE TABLE orders (id text PRIMARY KEY, total int NOT NULL)")
	require.NoError(b, err)
	var n int
	order := func(b *testing.B, withIntent bool) {
		n++
		id := "order-" + strconv.Itoa(n)
		tx, err := pool.Begin(ctx)
		require.NoError(b, err)
		_, err = tx.Exec(ctx, "INSERT INTO orders (id, total) VALUES ($1, $2)", id, n)
		require.NoError(b, err)
		if withIntent {
			in, err := idem.NewIntent("POST", "http://127.0.0.1:1/payments", []byte(`{"order":"`+id+`"}`), idem.WithLane(id))
			require.NoError(b, err)
			_, err = pgqueue.EnqueueTx(ctx, tx, in)
			require.NoError(b, err)
		}
		require.NoError(b, tx.Commit(ctx))
	}
	for _, with := range []bool{false, true} {
		name := "plain"
		if with {
			name = "with-intent"
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				order(b, with)
			}
		})
	}
}

// BenchmarkDrain: b.N intents on 64 lanes queued beforehand, then drained
// to a server that answers 201 at once, by the bbolt queue and by one and
// three replicas of the PostgreSQL queue (8 workers each).
func BenchmarkDrain(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	b.Cleanup(srv.Close)
	opts := queue.Options{Workers: 8, Policy: fleetPolicy()}
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
		q, err := queue.Open(filepath.Join(b.TempDir(), "q.db"), opts)
		require.NoError(b, err)
		defer q.Close()
		drain(b, []*queue.Queue{q}, q, intents(b))
	})
	for _, replicas := range []int{1, 3} {
		b.Run(fmt.Sprintf("postgres-%d", replicas), func(b *testing.B) {
			pool := benchPool(b)
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
			drain(b, qs, qs[0], intents(b))
		})
	}
}

// drain enqueues ins through q, then times the replicas qs draining them,
// and reports intents/s.
func drain(b *testing.B, qs []*queue.Queue, q *queue.Queue, ins []*idem.Intent) {
	ctx := context.Background()
	ids := make([]queue.ID, len(ins))
	for i, in := range ins {
		var err error
		ids[i], err = q.Enqueue(ctx, in)
		require.NoError(b, err)
	}
	b.ResetTimer()
	start := time.Now()
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, len(qs))
	for _, r := range qs {
		go func() { done <- r.Run(runCtx) }()
	}
	for _, id := range ids {
		r, err := q.Wait(ctx, id)
		require.NoError(b, err)
		require.Equal(b, queue.Done, r.State)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	cancel()
	for range qs {
		require.NoError(b, <-done)
	}
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
