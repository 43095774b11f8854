package pgqueue_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/idemtest"
	"github.com/idem-go/idem/pgqueue"
	"github.com/idem-go/idem/pgqueue/internal/pgtest"
	"github.com/idem-go/idem/queue"
)

// An order and its payment commit together: EnqueueTx queues the payment
// in the order's transaction, and any replica's drainer sends it once the
// transaction commits. An order rolled back queues nothing.
//
// The example needs a PostgreSQL server named by DATABASE_URL, so go test
// compiles it without running it; TestExample runs it on a throwaway
// server.
func Example() {
	ctx := context.Background()

	// The payment API, on loopback.
	api := idemtest.New(idemtest.Options{RequireKey: true})
	if err := api.Start(); err != nil {
		panic(err)
	}
	defer api.Close()

	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	if err := pgqueue.Migrate(ctx, pool); err != nil { // every replica may: each version is applied once
		panic(err)
	}
	if _, err := pool.Exec(ctx, "CREATE TABLE IF NOT EXISTS orders (id text PRIMARY KEY, amount int NOT NULL)"); err != nil {
		panic(err)
	}

	q, err := pgqueue.New(ctx, pool, pgqueue.Options{})
	if err != nil {
		panic(err)
	}
	defer q.Close()
	go q.Run(ctx)

	// placeOrder stores the order and queues its payment in one
	// transaction: both commit, or neither does.
	placeOrder := func(orderID, customer string, amount int) (queue.ID, error) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return 0, err
		}
		defer tx.Rollback(ctx) // after Commit, does nothing
		if _, err := tx.Exec(ctx, "INSERT INTO orders (id, amount) VALUES ($1, $2)", orderID, amount); err != nil {
			return 0, err
		}
		in, err := idem.NewIntent("POST", api.URL()+"/payments", fmt.Appendf(nil, `{"amount":%d}`, amount),
			idem.WithKey(orderID), idem.WithLane(customer)) // a customer's payments in order
		if err != nil {
			return 0, err
		}
		id, err := pgqueue.EnqueueTx(ctx, tx, in)
		if err != nil {
			return 0, err
		}
		return id, tx.Commit(ctx) // the drainer is woken at commit
	}

	id, err := placeOrder("order-42", "customer-7", 100)
	if err != nil {
		panic(err)
	}
	rec, err := q.Wait(ctx, id)
	if err != nil {
		panic(err)
	}
	fmt.Println(rec.State, rec.Outcome, rec.Result.Status)

	// The same order again: its INSERT fails, the transaction rolls back,
	// and no second payment is queued.
	if _, err := placeOrder("order-42", "customer-7", 100); err == nil {
		panic("a second order-42 was stored")
	}
	var records int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM idem_queue_records").Scan(&records); err != nil {
		panic(err)
	}
	fmt.Println("records:", records, "payments made:", api.EffectsForKey("order-42"))
}

// TestExample runs Example against a fresh database and checks what it
// prints: an Example that needs a server cannot carry an Output comment.
func TestExample(t *testing.T) {
	t.Setenv("DATABASE_URL", pgtest.DB(t))
	r, w, err := os.Pipe()
	require.NoError(t, err)
	stdout := os.Stdout
	os.Stdout = w
	t.Cleanup(func() { os.Stdout = stdout })
	done := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(r)
		done <- b
	}()

	Example()
	os.Stdout = stdout
	require.NoError(t, w.Close())
	assert.Equal(t, "done applied 201\nrecords: 1 payments made: 1\n", string(<-done))
}
