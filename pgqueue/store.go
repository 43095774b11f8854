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
	pool  *pgxpool.Pool
	opts  Options
	lease time.Duration // how long a taken lane stays this replica's
	known int           // the newest version of the tables this build knows
	wake  chan struct{} // LISTEN's wake-ups; never ready without LISTEN
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

	mu sync.Mutex // guards owned and closed
	// owned holds the lanes this store's workers took, from TakeDue to
	// Release: one lease per lane, so the lane's entry is its lease's.
	owned  map[string]taken
	closed bool
}

// taken is what a replica knows of a lane it took.
type taken struct {
	token uuid.UUID
	tail  int64 // the lane's last position as Head saw it
	empty bool  // Head found no unsettled record
}

// opTimeout bounds each statement a store runs for the queue.
const opTimeout = 30 * time.Second

// op returns a context for one statement.
func (st *store) op() (context.Context, context.CancelFunc) {
	return context.WithTimeout(st.ctx, opTimeout)
}

// Now reads the database's clock: the local clock moved by the lead the
// database's had at the last measure, so that the horizon, FirstSentAt and
// every schedule are judged by one clock for all replicas.
func (st *store) Now() time.Time { return time.Now().Add(time.Duration(st.skew.Load())) }

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
// times.
func retry(fn func() error) error {
	var err error
	for i := range 5 {
		if err = fn(); !retryable(err) {
			return err
		}
		time.Sleep(time.Duration(i+1) * 5 * time.Millisecond)
	}
	return err
}

// exec runs one statement with retries and returns the rows it touched.
func (st *store) exec(sql string, args ...any) (int64, error) {
	var n int64
	err := retry(func() error {
		ctx, cancel := st.op()
		defer cancel()
		tag, err := st.pool.Exec(ctx, sql, args...)
		n = tag.RowsAffected()
		return err
	})
	return n, wrap(err)
}

// wrap makes a closed store's errors queue.ErrClosed.
func wrap(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) {
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
func (st *store) Get(id queue.ID) (*queue.Record, error) {
	ctx, cancel := st.op()
	defer cancel()
	r, err := scanRecord(st.pool.QueryRow(ctx, "SELECT "+recordColumns+" FROM idem_queue_records WHERE id = $1", int64(id)))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: %d", queue.ErrNotFound, id)
	}
	return r, wrap(err)
}

// List returns up to limit records in state s (every state for 0) after
// ID after, in ID order.
func (st *store) List(s queue.State, after queue.ID, limit int) ([]*queue.Record, error) {
	ctx, cancel := st.op()
	defer cancel()
	rows, err := st.pool.Query(ctx, "SELECT "+recordColumns+` FROM idem_queue_records
		WHERE ($1 = 0 OR state = $1) AND id > $2 ORDER BY id LIMIT $3`, int16(s), int64(after), limit)
	if err != nil {
		return nil, wrap(err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*queue.Record, error) { return scanRecord(row) })
	return out, wrap(err)
}

// Counts counts the records in each state.
func (st *store) Counts() (map[queue.State]int, error) {
	ctx, cancel := st.op()
	defer cancel()
	rows, err := st.pool.Query(ctx, "SELECT state, count(*) FROM idem_queue_records GROUP BY state")
	if err != nil {
		return nil, wrap(err)
	}
	out := map[queue.State]int{queue.Pending: 0, queue.InFlight: 0, queue.Done: 0, queue.Failed: 0, queue.Expired: 0}
	var (
		s int16
		n int
	)
	_, err = pgx.ForEachRow(rows, []any{&s, &n}, func() error {
		out[queue.State(s)] = n
		return nil
	})
	return out, wrap(err)
}

// OldestUnsettled returns when the oldest unsettled record was enqueued.
func (st *store) OldestUnsettled() (time.Time, error) {
	ctx, cancel := st.op()
	defer cancel()
	var t *time.Time
	err := st.pool.QueryRow(ctx, "SELECT min(enqueued_at) FROM idem_queue_records WHERE state <= 2").Scan(&t)
	if err != nil || t == nil {
		return time.Time{}, wrap(err)
	}
	return *t, nil
}

// Discard removes record id unless it is in flight.
func (st *store) Discard(id queue.ID) error {
	ctx, cancel := st.op()
	defer cancel()
	var state *int16
	err := st.pool.QueryRow(ctx, `WITH d AS (DELETE FROM idem_queue_records WHERE id = $1 AND state <> 2 RETURNING id)
		SELECT CASE WHEN EXISTS (SELECT 1 FROM d) THEN 0 ELSE (SELECT state FROM idem_queue_records WHERE id = $1) END`,
		int64(id)).Scan(&state)
	switch {
	case err != nil:
		return wrap(err)
	case state == nil:
		return fmt.Errorf("%w: %d", queue.ErrNotFound, id)
	case *state == int16(queue.InFlight):
		return fmt.Errorf("%w: %d", queue.ErrInFlight, id)
	}
	return nil
}

// Mark returns the zero Time: the database's clock is the one clock, and
// no replica's reading is kept to judge another's by.
func (st *store) Mark() time.Time { return time.Time{} }

// ResetMark does nothing: there is no mark (see Mark).
func (st *store) ResetMark(time.Time) (time.Time, error) { return time.Time{}, nil }

// TakeDamaged returns nothing: a damaged record is found when read.
func (st *store) TakeDamaged() []*queue.Record { return nil }

// Location names the database and table.
func (st *store) Location() string {
	c := st.pool.Config().ConnConfig
	return fmt.Sprintf("postgres://%s/%s (idem_queue_records)", c.Host, c.Database)
}

// Wakeups receives the wake-ups other replicas and producers send.
func (st *store) Wakeups() <-chan struct{} { return st.wake }

// Shared is true: replicas and producers share the table.
func (st *store) Shared() bool { return true }

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
