package pgqueue_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/pgqueue"
	"github.com/idem-go/idem/queue"
)

// TestEnqueueTxIsolationLevels: at each isolation level a producer's
// transaction writes its order and enqueues its payment, while another
// producer commits, after the first one's snapshot, either the same
// payment under the same key or another payment of the same lane. At READ
// COMMITTED both commit as they are: the duplicate gives the other's record.
// At REPEATABLE READ and SERIALIZABLE PostgreSQL aborts the first with a
// serialization failure (SQLSTATE 40001), the duplicate at EnqueueTx, whose
// error says to retry, the lane at COMMIT (the lane's row changed since the
// snapshot); the caller's retry of the whole transaction then commits. A
// plain enqueue commits at every level.
func TestEnqueueTxIsolationLevels(t *testing.T) {
	cases := []struct {
		level pgx.TxIsoLevel
		abort bool // whether a concurrent commit aborts the transaction
	}{
		{pgx.ReadCommitted, false},
		{pgx.RepeatableRead, true},
		{pgx.Serializable, true},
	}
	for _, c := range cases {
		t.Run(string(c.level), func(t *testing.T) {
			pool := migrated(t)
			businessTable(t, pool)
			p := producer{t: t, pool: pool, level: c.level}
			const url = "http://127.0.0.1:1/payments"

			_, err := p.order("o-plain", post(t, url+"/o-plain"), nil)
			require.NoError(t, err, "a plain enqueue at %s", c.level)

			in := post(t, url+"/o-dup", idem.WithKey("order-o-dup"))
			var first queue.ID
			id, err := p.order("o-dup", in, func() { first = p.elsewhere(in) })
			if c.abort {
				assert.Equal(t, "40001", sqlState(err), "EnqueueTx of a key committed since the snapshot at %s: %v", c.level, err)
				assert.ErrorContains(t, err, "retry the whole transaction")
				id, err = p.order("o-dup", in, nil)
			}
			require.NoError(t, err)
			assert.Equal(t, first, id, "the same payment under its key is the other producer's record")

			lane := idem.WithLane("acct-1")
			id, err = p.order("o-lane", post(t, url+"/o-lane", lane), func() { p.elsewhere(post(t, url+"/other", lane)) })
			if c.abort {
				assert.Equal(t, "40001", sqlState(err), "COMMIT into a lane changed since the snapshot at %s: %v", c.level, err)
				id, err = p.order("o-lane", post(t, url+"/o-lane", lane), nil)
			}
			require.NoError(t, err)
			assert.NotZero(t, id)

			assert.Equal(t, 3, countRows(t, pool, "SELECT count(*) FROM orders"), "each order once")
			assert.Equal(t, 4, countRows(t, pool, "SELECT count(*) FROM idem_queue_records"), "each payment once")
		})
	}
}

// producer writes orders with their payments in transactions at level.
type producer struct {
	t     *testing.T
	pool  *pgxpool.Pool
	level pgx.TxIsoLevel
}

// order writes order id and enqueues in, in one transaction at p's level;
// meanwhile, if not nil, runs after the transaction's snapshot and before
// EnqueueTx.
func (p producer) order(id string, in *idem.Intent, meanwhile func()) (queue.ID, error) {
	ctx := context.Background()
	var qid queue.ID
	err := pgx.BeginTxFunc(ctx, p.pool, pgx.TxOptions{IsoLevel: p.level}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO orders VALUES ($1, 1)", id); err != nil { // takes the snapshot
			return err
		}
		if meanwhile != nil {
			meanwhile()
		}
		var err error
		qid, err = pgqueue.EnqueueTx(ctx, tx, in)
		return err
	})
	return qid, err
}

// elsewhere enqueues in and commits, as another producer, and returns its
// record's ID.
func (p producer) elsewhere(in *idem.Intent) queue.ID {
	var id queue.ID
	require.NoError(p.t, pgx.BeginFunc(context.Background(), p.pool, func(tx pgx.Tx) error {
		var err error
		id, err = pgqueue.EnqueueTx(context.Background(), tx, in)
		return err
	}))
	return id
}

// sqlState returns err's SQLSTATE, or what err is if it has none.
func sqlState(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return fmt.Sprint(err)
}
