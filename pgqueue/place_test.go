package pgqueue_test

import (
	"context"
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

// enqueueIn queues a POST on lane in tx and returns its ID.
func enqueueIn(t *testing.T, tx pgx.Tx, lane string) queue.ID {
	t.Helper()
	in, err := idem.NewIntent("POST", "http://127.0.0.1:1/"+lane, []byte("{}"), idem.WithLane(lane))
	require.NoError(t, err)
	id, err := pgqueue.EnqueueTx(context.Background(), tx, in)
	require.NoError(t, err)
	return id
}

// laneOrder lists the unsettled records of lane, head first.
func laneOrder(t *testing.T, pool *pgxpool.Pool, lane string) []queue.ID {
	t.Helper()
	rows, err := pool.Query(context.Background(),
		"SELECT id FROM idem_queue_records WHERE lane = $1 AND state <= 2 ORDER BY coalesce(pos, id)", lane)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	out := make([]queue.ID, len(ids))
	for i, id := range ids {
		out[i] = queue.ID(id)
	}
	return out
}

// TestLaneWritesATransaction: a transaction that queues many records in
// a lane writes the lane's row at most twice at commit (once for its first
// record, once for all the others), not once a record: each write of the
// row in one transaction is a new version of it that the next has to step
// over, so a write a record made the commit quadratic in the records
// (16,000 in one lane: seconds, holding the lane's lock). The lanes it
// placed records in are due again.
func TestLaneWritesATransaction(t *testing.T) {
	pool := migrated(t)
	ctx := waitCtx(t)
	lanes := []string{"bulk", "few", "one"}
	want := map[string][]queue.ID{}
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { // the lanes exist before
		for _, l := range lanes {
			want[l] = append(want[l], enqueueIn(t, tx, l))
		}
		return nil
	}))
	_, err := pool.Exec(ctx, "UPDATE idem_queue_lanes SET next_at = 'infinity'") // parked, as if drained
	require.NoError(t, err)

	const n = 200
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // committed below
	// The counts include earlier transactions' not yet handed to the
	// server's statistics, which happens only between transactions.
	lanesWritten := func() int {
		var n int
		require.NoError(t, tx.QueryRow(ctx, `SELECT n_tup_ins + n_tup_upd FROM pg_stat_xact_user_tables
			WHERE relname = 'idem_queue_lanes'`).Scan(&n))
		return n
	}
	before := lanesWritten()
	for i := range n {
		want["bulk"] = append(want["bulk"], enqueueIn(t, tx, "bulk"))
		if i%50 == 0 {
			want["few"] = append(want["few"], enqueueIn(t, tx, "few"))
		}
	}
	want["one"] = append(want["one"], enqueueIn(t, tx, "one"))
	_, err = tx.Exec(ctx, "SET CONSTRAINTS ALL IMMEDIATE") // the commit's placing, now, to count its writes
	require.NoError(t, err)
	writes := lanesWritten() - before
	require.NoError(t, tx.Commit(ctx))

	assert.Equal(t, 2+2+1, writes, "writes of the lanes' rows for %d, %d and 1 records", n, n/50)
	for _, l := range lanes {
		assert.Equal(t, want[l], laneOrder(t, pool, l), "lane %s", l)
	}
	assert.Zero(t, countRows(t, pool, "SELECT count(*) FROM idem_queue_lanes WHERE next_at = 'infinity'"),
		"parked lanes the commit placed records in are due again")
}

// TestLaneOrderOfTransactions: records a transaction queues in a lane are
// placed together, in the order it queued them, after those of every
// transaction that committed before, whatever the IDs say; also when the
// transaction places some early (SET CONSTRAINTS ... IMMEDIATE) and queues
// more, and when some were queued in a savepoint, released or rolled back.
func TestLaneOrderOfTransactions(t *testing.T) {
	type (
		step  func(t *testing.T, a, b pgx.Tx) (queue.ID, string) // a record queued and its name, or none
		tcase struct {
			name  string
			steps []step
			want  []string
		}
	)
	in := func(name string, which int) step {
		return func(t *testing.T, a, b pgx.Tx) (queue.ID, string) {
			return enqueueIn(t, []pgx.Tx{a, b}[which], "L"), name
		}
	}
	exec := func(sql string) step {
		return func(t *testing.T, a, _ pgx.Tx) (queue.ID, string) {
			_, err := a.Exec(context.Background(), sql)
			require.NoError(t, err)
			return 0, ""
		}
	}
	commit := func(which int) step {
		return func(t *testing.T, a, b pgx.Tx) (queue.ID, string) {
			require.NoError(t, []pgx.Tx{a, b}[which].Commit(context.Background()))
			return 0, ""
		}
	}
	const a, b = 0, 1
	cases := []tcase{{
		name:  "a later transaction commits first",
		steps: []step{in("a1", a), in("a2", a), in("b1", b), in("a3", a), in("b2", b), commit(b), commit(a)},
		want:  []string{"b1", "b2", "a1", "a2", "a3"},
	}, {
		name: "placed early, then more",
		steps: []step{in("a1", a), in("b1", b), in("a2", a), exec("SET CONSTRAINTS ALL IMMEDIATE"),
			exec("SET CONSTRAINTS ALL DEFERRED"), in("a3", a), commit(a), commit(b)},
		want: []string{"a1", "a2", "a3", "b1"},
	}, {
		name: "savepoints",
		steps: []step{in("a1", a), exec("SAVEPOINT s"), in("gone", a), exec("ROLLBACK TO SAVEPOINT s"),
			exec("SAVEPOINT t"), in("a2", a), exec("RELEASE SAVEPOINT t"), in("b1", b), in("a3", a), commit(b), commit(a)},
		want: []string{"b1", "a1", "a2", "a3"},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pool := migrated(t)
			ctx := waitCtx(t)
			var txs [2]pgx.Tx
			for i := range txs {
				tx, err := pool.Begin(ctx)
				require.NoError(t, err)
				defer tx.Rollback(ctx) //nolint:errcheck // committed by the steps
				txs[i] = tx
			}
			names := map[queue.ID]string{}
			for _, s := range c.steps {
				if id, name := s(t, txs[a], txs[b]); name != "" {
					names[id] = name
				}
			}
			var got []string
			for _, id := range laneOrder(t, pool, "L") {
				got = append(got, names[id])
			}
			assert.Equal(t, c.want, got, fmt.Sprintf("lane order, IDs %v", names))
		})
	}
}
