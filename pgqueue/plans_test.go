package pgqueue_test

import (
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/pgqueue"
	"github.com/idem-go/idem/queue"
)

// TestDrainKeepsGenericPlans: the statements of a drain keep PostgreSQL's
// generic plan after the five custom plans it makes first, instead of
// planning anew on every call, which took the statement that settles a
// lane's last record and takes the next lane longer than it ran (0.53 ms
// of planning, 0.27 ms of execution). A queue on a pool of two connections (one its LISTEN holds)
// drains 60 lanes of one record and 3 lanes of 20; then that connection's
// prepared statements (pg_prepared_statements) show how often each was
// planned.
func TestDrainKeepsGenericPlans(t *testing.T) {
	ctx := waitCtx(t)
	producer := migrated(t)
	cfg, err := pgxpool.ParseConfig(producer.Config().ConnString())
	require.NoError(t, err)
	cfg.MaxConns = 2 // one the queue holds to LISTEN, one for its statements
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close) // after the queue's own cleanup

	srv := newPaths(t)
	var ids []queue.ID
	require.NoError(t, pgx.BeginFunc(ctx, producer, func(tx pgx.Tx) error {
		for i := range 120 {
			lane := fmt.Sprint("one-", i)
			if i >= 60 {
				lane = fmt.Sprint("hot-", i%3)
			}
			id, err := pgqueue.EnqueueTx(ctx, tx, post(t, srv.URL+"/pay", idem.WithLane(lane)))
			if err != nil {
				return err
			}
			ids = append(ids, id)
		}
		return nil
	}))
	q := open(t, pool, pgqueue.Options{Options: queue.Options{Workers: 4, Policy: fast()}})
	run(t, q)
	for _, id := range ids {
		r, err := q.Wait(ctx, id)
		require.NoError(t, err)
		require.Equal(t, queue.Done, r.State)
	}

	rows, err := pool.Query(ctx, `SELECT left(regexp_replace(statement, '\s+', ' ', 'g'), 90), generic_plans, custom_plans
		FROM pg_prepared_statements WHERE statement LIKE '%idem_queue_%'`)
	require.NoError(t, err)
	var generic int64
	for rows.Next() {
		var (
			stmt           string
			gen, customary int64
		)
		require.NoError(t, rows.Scan(&stmt, &gen, &customary))
		t.Logf("generic %d, custom %d: %s", gen, customary, stmt)
		assert.LessOrEqual(t, customary, int64(5), "custom plans of %s", stmt)
		generic += gen
	}
	require.NoError(t, rows.Err())
	assert.Greater(t, generic, int64(100), "generic plans in all: the drain's statements ran")
}
