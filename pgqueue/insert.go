package pgqueue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/queue"
)

// querier runs a statement: a pool, a connection or a transaction.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// A Producer queues intents in the caller's transactions (EnqueueTx), as
// the code that makes a business change does. Its zero value serves and is
// what the package function EnqueueTx uses. A Producer is safe for
// concurrent use if its Tracer is.
type Producer struct {
	// Tracer, if not nil, gives each record its Trace: what its Inject
	// returns for the context EnqueueTx is called with (see queue.Tracer),
	// so that the drain of the record, by any replica whose
	// queue.Options.Tracer is set, is linked to the code that enqueued it.
	// Nil stores none.
	Tracer queue.Tracer
}

// EnqueueTx queues in within tx, the caller's transaction, as
// Producer.EnqueueTx does with the zero Producer: the record has no Trace.
func EnqueueTx(ctx context.Context, tx pgx.Tx, in *idem.Intent) (queue.ID, error) {
	return Producer{}.EnqueueTx(ctx, tx, in)
}

// EnqueueTx queues in within tx, the caller's transaction, and returns the
// record's ID: the intent is queued if and only if tx commits, together
// with whatever else tx writes (a transactional outbox). It adds one
// statement to tx. Any replica's Queue from New drains it; the wake-up goes
// out at commit, and none on rollback.
//
// It refuses what Enqueue refuses: a nil intent, a POST or PATCH without a
// key (queue.ErrNeedsKey), and a supplied key already queued for another
// operation (queue.ErrKeyInUse); the same operation under the same key gives
// the record that holds it. The queue's tables must exist (Migrate;
// ErrTablesMissing otherwise), and tx must not be nil.
//
// Every isolation level serves. At READ COMMITTED (PostgreSQL's default) a
// concurrent commit under the same key gives that commit's record, and one
// into the same lane is waited for; neither aborts tx. At REPEATABLE READ and
// SERIALIZABLE, PostgreSQL aborts tx with a serialization failure
// (SQLSTATE 40001, a *pgconn.PgError) when another transaction committed,
// after tx's snapshot, a record under the same supplied key (EnqueueTx
// returns it, saying to retry), or a record of the same lane, or when a
// replica wrote that lane's row meanwhile, taking it, renewing its lease
// or giving it back (tx's COMMIT returns it). The caller rolls back and
// retries the whole transaction, as with any transaction at those levels;
// the retry gives the same operation the record that now holds its key.
//
// With p.Tracer set, the record's Trace is what its Inject returns for ctx,
// within the bounds of queue.BoundTrace.
func (p Producer) EnqueueTx(ctx context.Context, tx pgx.Tx, in *idem.Intent) (queue.ID, error) {
	if isNil(tx) {
		return 0, errNilTx("EnqueueTx")
	}
	r, err := queue.NewRecord(in, time.Time{}) // due at once; the database sets the enqueue time
	if err != nil {
		return 0, err
	}
	if p.Tracer != nil {
		r.Trace = queue.BoundTrace(p.Tracer.Inject(ctx))
	}
	id, err := insert(ctx, tx, r)
	if retryable(err) {
		return 0, fmt.Errorf("pgqueue: enqueue: the transaction was aborted for another's sake: roll back and retry the whole transaction: %w", err)
	}
	return id, tablesMissing(err)
}

// errNilTx is the error of fn, an enqueue given a nil transaction.
func errNilTx(fn string) error {
	return fmt.Errorf("pgqueue: %s: nil transaction: pass the transaction the intents are to commit with (pool.Begin)", fn)
}

// Insert stores r in a transaction of its own, under ctx.
func (st *store) Insert(ctx context.Context, r *queue.Record) (queue.ID, error) {
	var id queue.ID
	err := retry(ctx, func() error {
		octx, cancel := st.op(ctx)
		defer cancel()
		var err error
		id, err = insert(octx, st.pool, r)
		return err
	})
	return id, st.wrapKeep(ctx, err)
}

// Resubmit stores r, a copy of record old, in a transaction that locks old
// first (FOR UPDATE), judges it by rule and marks it resubmitted: a settle
// of old by any replica, or another Resubmit, waits for that transaction
// or is waited for, so that rule sees old as it is when the copy commits.
// A refusal of rule is returned as it is.
func (st *store) Resubmit(ctx context.Context, r *queue.Record, old queue.ID, rule func(*queue.Record) error) (queue.ID, error) {
	var (
		id      queue.ID
		refused error
	)
	judge := func(o *queue.Record) error {
		refused = rule(o)
		return refused
	}
	err := retry(ctx, func() error {
		octx, cancel := st.op(ctx)
		defer cancel()
		var err error
		refused = nil
		id, err = resubmit(octx, st.pool, r, old, judge)
		return err
	})
	if refused != nil {
		return 0, refused
	}
	return id, st.wrapKeep(ctx, err)
}

// resubmit is Resubmit's transaction.
func resubmit(ctx context.Context, db Beginner, r *queue.Record, old queue.ID, rule func(*queue.Record) error) (queue.ID, error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit it does nothing
	o, err := scanRecord(tx.QueryRow(ctx, "SELECT "+recordColumns+" FROM idem_queue_records WHERE id = $1 FOR UPDATE", int64(old)))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return 0, fmt.Errorf("%w: %d", queue.ErrNotFound, old)
	case err != nil:
		return 0, err
	}
	if err := rule(o); err != nil {
		return 0, err
	}
	id, err := insert(ctx, tx, r)
	if err != nil {
		return 0, err
	}
	o.ResubmittedAs = id
	data, err := o.MarshalBinary()
	if err != nil {
		return 0, err
	}
	if _, err := tx.Exec(ctx, "UPDATE idem_queue_records SET record = $2 WHERE id = $1", int64(old), data); err != nil {
		return 0, err
	}
	return id, tx.Commit(ctx)
}

// insert stores r, pending, and returns its ID; a supplied key already
// held gives the holder's ID for the same operation, ErrKeyInUse for
// another. The deferred trigger idem_queue_place gives r its place in its
// lane and sends the wake-up when the transaction commits.
func insert(ctx context.Context, db querier, r *queue.Record) (queue.ID, error) {
	in := r.Intent
	data, err := r.MarshalBinary()
	if err != nil {
		return 0, err
	}
	var key *string
	if in.KeySupplied() {
		k := in.Key()
		key = &k
	}
	for range 3 { // a holder discarded between the two statements: again
		var id int64
		err := db.QueryRow(ctx, `INSERT INTO idem_queue_records (lane, state, key, record) VALUES ($1, 1, $2, $3)
			ON CONFLICT (key) WHERE key IS NOT NULL DO NOTHING RETURNING id`, in.Lane(), key, data).Scan(&id)
		if err == nil {
			r.ID = queue.ID(id)
			return r.ID, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return 0, err
		}
		holder, err := scanRecord(db.QueryRow(ctx, "SELECT "+recordColumns+" FROM idem_queue_records WHERE key = $1", key))
		if errors.Is(err, pgx.ErrNoRows) {
			continue
		}
		if err != nil {
			return 0, err
		}
		return queue.KeyHeld(holder, in)
	}
	return 0, fmt.Errorf("pgqueue: enqueue: key held and freed three times over")
}

// wrapKeep is wrap for errors the queue hands its caller as they are.
func (st *store) wrapKeep(ctx context.Context, err error) error {
	for _, e := range []error{queue.ErrKeyInUse, queue.ErrNotFound, queue.ErrDamaged} {
		if errors.Is(err, e) {
			return err
		}
	}
	return st.wrap(ctx, err)
}
