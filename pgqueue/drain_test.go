package pgqueue_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/pgqueue"
	"github.com/idem-go/idem/queue"
)

// TestSteadyDrainStatements: a lane in a steady drain costs at most 1.5
// statements a record. One worker drains 200 records of one lane to a
// server that answers 201 at once; the statements its queue sent between
// the server's first request and its last, over the records settled
// between them, are the lane's cost.
func TestSteadyDrainStatements(t *testing.T) {
	const records = 200
	ctx := waitCtx(t)
	producer := migrated(t)
	var statements atomic.Int64
	// Closed after the queue's own cleanup, which releases its LISTEN connection.
	pool := countingPool(t, ctx, producer.Config().ConnString(), &statements)

	var (
		requests     atomic.Int64
		first, last  atomic.Int64
		lastReceived = make(chan struct{})
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		switch requests.Add(1) {
		case 1:
			first.Store(statements.Load())
		case records:
			last.Store(statements.Load())
			close(lastReceived)
		}
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()

	ids := make([]queue.ID, records)
	require.NoError(t, pgx.BeginFunc(ctx, producer, func(tx pgx.Tx) error {
		for i := range ids {
			in, err := idem.NewIntent("POST", fmt.Sprintf("%s/payments/%d", srv.URL, i), []byte("{}"), idem.WithLane("acct-1"))
			if err != nil {
				return err
			}
			if ids[i], err = pgqueue.EnqueueTx(ctx, tx, in); err != nil {
				return err
			}
		}
		return nil
	}))

	q := open(t, pool, pgqueue.Options{Options: queue.Options{Workers: 1, Policy: fast()}})
	run(t, q)
	select {
	case <-lastReceived:
	case <-ctx.Done():
		t.Fatalf("the server saw %d of %d requests", requests.Load(), records)
	}
	r, err := q.Wait(ctx, ids[records-1])
	require.NoError(t, err)
	require.Equal(t, queue.Done, r.State)

	perRecord := float64(last.Load()-first.Load()) / (records - 1)
	t.Logf("%.2f statements a record in a steady drain", perRecord)
	assert.LessOrEqual(t, perRecord, 1.5, "statements a record in a steady drain")
}
