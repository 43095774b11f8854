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
	perRecord := drainStatements(t, 1, func(int) string { return "acct-1" })
	t.Logf("%.2f statements a record in a steady drain", perRecord)
	assert.LessOrEqual(t, perRecord, 1.5, "statements a record in a steady drain")
}

// TestOneRecordLanesStatements: lanes of one record each, as a queue whose
// every intent has a lane of its own, cost at most 2.2 statements a
// record: the lease, and the settle that gives the lane back and takes the
// next lane with its head for the same worker. Taking one lane a
// statement, reading its head in another and giving it back in a fifth
// cost 5; a TakeDue of several lanes with their heads, the lease and the
// settle that gave the lane back, 2.4.
func TestOneRecordLanesStatements(t *testing.T) {
	perRecord := drainStatements(t, 8, func(i int) string { return fmt.Sprintf("acct-%d", i) })
	t.Logf("%.2f statements a record, a lane a record", perRecord)
	assert.LessOrEqual(t, perRecord, 2.2, "statements a record, a lane a record")
}

// drainStatements has a queue of workers drain 200 records, record i in
// lane(i), enqueued in one transaction, to a server that answers 201 at
// once, and returns the statements its queue sent between the server's
// first request and its last, over the records settled between them.
func drainStatements(t *testing.T, workers int, lane func(i int) string) float64 {
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
			in, err := idem.NewIntent("POST", fmt.Sprintf("%s/payments/%d", srv.URL, i), []byte("{}"), idem.WithLane(lane(i)))
			if err != nil {
				return err
			}
			if ids[i], err = pgqueue.EnqueueTx(ctx, tx, in); err != nil {
				return err
			}
		}
		return nil
	}))

	q := open(t, pool, pgqueue.Options{Options: queue.Options{Workers: workers, Policy: fast()}})
	run(t, q)
	select {
	case <-lastReceived:
	case <-ctx.Done():
		t.Fatalf("the server saw %d of %d requests", requests.Load(), records)
	}
	for _, id := range ids {
		r, err := q.Wait(ctx, id)
		require.NoError(t, err)
		require.Equal(t, queue.Done, r.State)
	}
	return float64(last.Load()-first.Load()) / (records - 1)
}
