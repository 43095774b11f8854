package pgqueue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-go/idem/queue"
)

// store keeps a queue's records in PostgreSQL for every replica that opens
// it (see queue.Store). A replica takes a lane by writing its lease token
// into the lane's row; every write it makes under that lane locks the row
// and checks the token in the same statement, so a replica whose lease ran
// out and whose lane was taken over changes nothing (queue.ErrMovedOn).
type store struct {
	pool *pgxpool.Pool
	// location names the database and table (queue.StoreInfo.Location).
	location string
	opts     Options
	lease    time.Duration // how long a taken lane stays this replica's
	known    int           // the newest version of the tables this build knows
	wake     chan struct{} // LISTEN's wake-ups; never ready without LISTEN
	// settles carries the IDs of records other replicas settled, as
	// LISTEN hears them; never ready without LISTEN.
	settles chan queue.ID
	// self names this replica in the settle notifications it sends, so
	// that it skips its own.
	self string

	// skew is the database clock's lead over the local one, in
	// nanoseconds, as last measured (see measure).
	skew atomic.Int64

	ctx    context.Context // ended by close: stops the listener
	cancel context.CancelFunc
	done   chan struct{} // closed when the listener is gone

	mu sync.Mutex // guards owned, handoff and closed
	// owned holds the lanes this store's workers took, from TakeDue to
	// SetNext: one lease per lane, so the lane's entry is its lease's.
	owned map[string]taken
	// handoff maps a lane given back with its last settle to the lane
	// taken for the same worker in that statement (see HandedOver).
	handoff map[string]string
	closed  bool
}

var _ queue.Store = (*store)(nil)

// taken is what a replica knows of a lane it took.
type taken struct {
	token uuid.UUID
	tail  int64 // the lane's last position as Head saw it
	empty bool  // Head found no unsettled record
	// ahead is the lane's record after the one being worked on, as last
	// read, for SettleLeaseNext to lease; nil if none was read.
	ahead *ahead
	// read is the lane's head as TakeDue read it, for Head's first call.
	read *headRow
	// gone says the lane was given back to the tables with its last
	// settle (see settleRelease): SetNext has nothing to write.
	gone bool
}

// ahead is a lane's record read ahead of its turn: the one after the
// record follows, as the row stood at xmin, its version; id 0 when none
// followed it as read.
type ahead struct {
	follows  int64
	id       int64
	enqueued time.Time
	data     []byte
	xmin     string
}

// opTimeout bounds a statement whose context has no deadline: the
// drainer's own calls (the queue gives them Run's context without its
// cancellation, see queue.Store), and a caller's that sets none. A caller's
// deadline replaces it, longer or shorter: the caller's context is the
// bound.
const opTimeout = 30 * time.Second

// op returns the context of one statement of a call given ctx: ctx, bounded
// by opTimeout if it has no deadline, and ended also when the store closes.
func (st *store) op(ctx context.Context) (context.Context, context.CancelFunc) {
	var cancel context.CancelFunc
	if _, ok := ctx.Deadline(); ok {
		ctx, cancel = context.WithCancel(ctx)
	} else {
		ctx, cancel = context.WithTimeout(ctx, opTimeout)
	}
	stop := context.AfterFunc(st.ctx, cancel)
	return ctx, func() {
		stop()
		cancel()
	}
}

// Clock reads the database's clock: the local clock moved by the lead the
// database's had at the last measure, so that the horizon, FirstSentAt and
// every schedule are judged by one clock for all replicas. It keeps no mark:
// the database's clock is the one clock, and no replica's reading is kept to
// judge another's by.
func (st *store) Clock() (now, mark time.Time) {
	return time.Now().Add(time.Duration(st.skew.Load())), time.Time{}
}

// now is Clock's now.
func (st *store) now() time.Time {
	now, _ := st.Clock()
	return now
}

// measure sets skew from a reading db of the database's clock taken between
// sent and got on the local one.
func (st *store) measure(sent, got, db time.Time) {
	mid := sent.Add(got.Sub(sent) / 2)
	st.skew.Store(int64(db.Sub(mid)))
}

// measureNow reads the database's clock once.
func (st *store) measureNow(ctx context.Context) error {
	sent := time.Now()
	var db time.Time
	if err := st.pool.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&db); err != nil {
		return err
	}
	st.measure(sent, time.Now(), db)
	return nil
}

// retryable reports a transaction PostgreSQL aborted to let another go on:
// a serialization failure or a deadlock. Running it again is right.
func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01")
}

// retry runs fn until it ends other than by a retryable abort, at most five
// times, or until ctx ends.
func retry(ctx context.Context, fn func() error) error {
	var err error
	for i := range 5 {
		if err = fn(); !retryable(err) {
			return err
		}
		t := time.NewTimer(time.Duration(i+1) * 5 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
	return err
}

// exec runs one statement, for a call given ctx, with retries and returns
// the rows it touched.
func (st *store) exec(ctx context.Context, sql string, args ...any) (int64, error) {
	var n int64
	err := retry(ctx, func() error {
		octx, cancel := st.op(ctx)
		defer cancel()
		tag, err := st.pool.Exec(octx, sql, args...)
		n = tag.RowsAffected()
		return err
	})
	return n, st.wrap(ctx, err)
}

// wrap gives the error of a call given ctx: one wrapping ctx's error when
// ctx ended (the statement was given up for it), queue.ErrClosed when the
// store closed under it, the database's otherwise.
func (st *store) wrap(ctx context.Context, err error) error {
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return fmt.Errorf("pgqueue: %w: %w", ctx.Err(), err)
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("%w: %v", queue.ErrClosed, err)
	}
	return fmt.Errorf("pgqueue: %w", err)
}

// scanRecord reads a row of (id, enqueued_at, record). The columns own the
// ID and enqueue time: the database gives both.
func scanRecord(row pgx.Row) (*queue.Record, error) {
	var (
		id       int64
		enqueued time.Time
		data     []byte
	)
	if err := row.Scan(&id, &enqueued, &data); err != nil {
		return nil, err
	}
	return decode(id, enqueued, data)
}

func decode(id int64, enqueued time.Time, data []byte) (*queue.Record, error) {
	r := new(queue.Record)
	if err := r.UnmarshalBinary(data); err != nil {
		return nil, fmt.Errorf("record %d: %w", id, err)
	}
	r.ID, r.EnqueuedAt = queue.ID(id), enqueued
	return r, nil
}

const recordColumns = "id, enqueued_at, record"

// Get returns record id.
func (st *store) Get(ctx context.Context, id queue.ID) (*queue.Record, error) {
	octx, cancel := st.op(ctx)
	defer cancel()
	r, err := scanRecord(st.pool.QueryRow(octx, "SELECT "+recordColumns+" FROM idem_queue_records WHERE id = $1", int64(id)))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: %d", queue.ErrNotFound, id)
	}
	return r, st.wrap(ctx, err)
}

// List returns up to limit records in state s (every state for 0) after
// ID after, in ID order.
func (st *store) List(ctx context.Context, s queue.State, after queue.ID, limit int) ([]*queue.Record, error) {
	octx, cancel := st.op(ctx)
	defer cancel()
	rows, err := st.pool.Query(octx, "SELECT "+recordColumns+` FROM idem_queue_records
		WHERE ($1 = 0 OR state = $1) AND id > $2 ORDER BY id LIMIT $3`, int16(s), int64(after), limit)
	if err != nil {
		return nil, st.wrap(ctx, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*queue.Record, error) { return scanRecord(row) })
	return out, st.wrap(ctx, err)
}

// Stats counts the records in each state and reads the oldest unsettled
// one's enqueue time, in one statement.
func (st *store) Stats(ctx context.Context) (queue.StoreStats, error) {
	octx, cancel := st.op(ctx)
	defer cancel()
	rows, err := st.pool.Query(octx, `SELECT state, count(*), min(enqueued_at) FILTER (WHERE state <= 2)
		FROM idem_queue_records GROUP BY state`)
	if err != nil {
		return queue.StoreStats{}, st.wrap(ctx, err)
	}
	out := queue.StoreStats{Counts: map[queue.State]int{}}
	var (
		s      int16
		n      int
		oldest *time.Time
	)
	_, err = pgx.ForEachRow(rows, []any{&s, &n, &oldest}, func() error {
		out.Counts[queue.State(s)] = n
		if oldest != nil && (out.OldestUnsettled.IsZero() || oldest.Before(out.OldestUnsettled)) {
			out.OldestUnsettled = *oldest
		}
		return nil
	})
	if err != nil {
		return queue.StoreStats{}, st.wrap(ctx, err)
	}
	return out, nil
}

// Discard removes record id unless it is in flight.
func (st *store) Discard(ctx context.Context, id queue.ID) error {
	octx, cancel := st.op(ctx)
	defer cancel()
	var state *int16
	err := st.pool.QueryRow(octx, `WITH d AS (DELETE FROM idem_queue_records WHERE id = $1 AND state <> 2 RETURNING id)
		SELECT CASE WHEN EXISTS (SELECT 1 FROM d) THEN 0 ELSE (SELECT state FROM idem_queue_records WHERE id = $1) END`,
		int64(id)).Scan(&state)
	switch {
	case err != nil:
		return st.wrap(ctx, err)
	case state == nil:
		return fmt.Errorf("%w: %d", queue.ErrNotFound, id)
	case *state == int16(queue.InFlight):
		return fmt.Errorf("%w: %d", queue.ErrInFlight, id)
	}
	return nil
}

// ResetMark does nothing: there is no mark (see Clock).
func (st *store) ResetMark(context.Context, time.Time) (time.Time, error) { return time.Time{}, nil }

// Info describes the store: the database and table, shared by the replicas
// and producers, with the wake-ups and settles LISTEN hears (none with
// Options.NoListen). It has no damaged records to give: a damaged record is
// found when read.
func (st *store) Info() queue.StoreInfo {
	i := queue.StoreInfo{
		Location: st.location,
		Shared:   true,
		Wakeups:  st.wake,
	}
	if !st.opts.NoListen {
		i.Settles = st.settles
	}
	return i
}

// Close stops the listener; the pool is the caller's and stays open.
func (st *store) Close() error {
	st.mu.Lock()
	if st.closed {
		st.mu.Unlock()
		return queue.ErrClosed
	}
	st.closed = true
	st.mu.Unlock()
	st.cancel()
	<-st.done
	return nil
}
