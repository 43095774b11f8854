package pgqueue

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// sweepBatch bounds the rows one sweep statement removes, so that a sweep
// after a long pause does not hold locks on a large part of the table.
const sweepBatch = 10_000

// Sweep removes records settled Options.KeepSettled ago, and lanes left
// empty.
func (st *store) Sweep(ctx context.Context, _ time.Time) error {
	keep := st.opts.KeepSettled
	if keep <= 0 {
		keep = 7 * 24 * time.Hour // queue.DefaultKeepSettled
	}
	for {
		n, err := st.exec(ctx, `DELETE FROM idem_queue_records WHERE id IN (
			SELECT id FROM idem_queue_records WHERE settled_at < now() - $1 * interval '1 microsecond' LIMIT $2)`,
			keep.Microseconds(), sweepBatch)
		if err != nil {
			return err
		}
		if n < sweepBatch {
			break
		}
	}
	return retry(ctx, func() error {
		octx, cancel := st.op(ctx)
		defer cancel()
		return st.wrap(ctx, st.dropEmptyLanes(octx))
	})
}

// dropEmptyLanes removes lanes parked empty. It locks them first, then
// looks for records in a second statement, which sees every commit made
// before it: a producer whose commit placed a record in one of them has
// either committed by then, and the lane stays, or waits for the lock and,
// finding the row gone, makes it anew.
func (st *store) dropEmptyLanes(ctx context.Context) error {
	tx, err := st.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit it does nothing
	rows, err := tx.Query(ctx, `SELECT name FROM idem_queue_lanes
		WHERE next_at = 'infinity' AND owner IS NULL ORDER BY name LIMIT $1 FOR UPDATE SKIP LOCKED`, sweepBatch)
	if err != nil {
		return err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	if len(names) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, `DELETE FROM idem_queue_lanes l WHERE name = ANY($1)
		AND NOT EXISTS (SELECT 1 FROM idem_queue_records r WHERE r.lane = l.name AND r.state <= 2)`, names); err != nil {
		return err
	}
	return tx.Commit(ctx)
}
