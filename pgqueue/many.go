package pgqueue

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/queue"
)

// EnqueueManyTx queues ins within tx, the caller's transaction, as
// Producer.EnqueueManyTx does with the zero Producer: the records have no
// Trace.
func EnqueueManyTx(ctx context.Context, tx pgx.Tx, ins []*idem.Intent) ([]queue.ID, error) {
	return Producer{}.EnqueueManyTx(ctx, tx, ins)
}

// EnqueueManyTx queues ins within tx, the caller's transaction, as that
// many EnqueueTx calls in a row would, in one statement, and returns the
// records' IDs in the order of ins. An empty ins sends nothing. The records
// of one lane are placed in the order of ins, at commit, with at most two
// writes of the lane's row however many they are.
//
// Each intent is checked as EnqueueTx checks it before anything is sent:
// the first refused gives an error naming its index, wrapping EnqueueTx's
// (idem.ErrInvalidIntent, queue.ErrNeedsKey), and nothing is queued.
// Supplied keys are de-duplicated as by EnqueueTx, within ins too: an
// intent whose key a record holds, or an earlier intent of ins, gives that
// record's ID when it is the same operation, and queue.ErrKeyInUse, with
// nothing queued, when it is another. A key already held costs a second
// statement, the rest of the batch then being sent apart.
//
// The isolation levels' rules are EnqueueTx's. At READ COMMITTED a key
// committed by another transaction while the statement runs may be found
// after the rest of the batch is in tx, so that an ErrKeyInUse or any
// other error can leave part of ins queued in tx: roll tx back on error, as
// after any failed statement.
//
// With p.Tracer set, every record's Trace is what its Inject returns for
// ctx, called once, within the bounds of queue.BoundTrace.
func (p Producer) EnqueueManyTx(ctx context.Context, tx pgx.Tx, ins []*idem.Intent) ([]queue.ID, error) {
	if isNil(tx) {
		return nil, errNilTx("EnqueueManyTx")
	}
	if len(ins) == 0 {
		return nil, nil
	}
	b, err := p.newBatch(ctx, ins)
	if err != nil {
		return nil, err
	}
	if err := b.insert(ctx, tx); err != nil {
		if retryable(err) {
			return nil, fmt.Errorf("pgqueue: enqueue many: the transaction was aborted for another's sake: roll back and retry the whole transaction: %w", err)
		}
		return nil, tablesMissing(err)
	}
	ids := make([]queue.ID, len(ins))
	for i, s := range b.of {
		ids[i] = b.ids[s]
	}
	return ids, nil
}

// A batch is what EnqueueManyTx sends: one row for each intent but those
// repeating an earlier one's supplied key, which share its row.
type batch struct {
	ins     []*idem.Intent // one a row
	lanes   []string
	keys    []*string // nil for a generated key
	records [][]byte
	of      []int // the row of each intent of the call, in its order
	ids     []queue.ID
}

// newBatch checks every intent and encodes the rows.
func (p Producer) newBatch(ctx context.Context, ins []*idem.Intent) (*batch, error) {
	var trace map[string]string
	if p.Tracer != nil {
		trace = queue.BoundTrace(p.Tracer.Inject(ctx))
	}
	b := &batch{of: make([]int, len(ins))}
	byKey := map[string]int{} // a supplied key's row
	for i, in := range ins {
		r, err := queue.NewRecord(in, time.Time{}) // due at once; the database sets the enqueue time
		if err != nil {
			return nil, fmt.Errorf("pgqueue: enqueue many: intent %d: %w", i, err)
		}
		var key *string
		if in.KeySupplied() {
			k := in.Key()
			if s, ok := byKey[k]; ok {
				if !b.ins[s].SameOperation(in) {
					return nil, fmt.Errorf("pgqueue: enqueue many: intent %d: %w: an earlier intent of the batch holds its key for another operation", i, queue.ErrKeyInUse)
				}
				b.of[i] = s
				continue
			}
			byKey[k] = len(b.ins)
			key = &k
		}
		r.Trace = trace
		data, err := r.MarshalBinary()
		if err != nil {
			return nil, fmt.Errorf("pgqueue: enqueue many: intent %d: %w", i, err)
		}
		b.of[i] = len(b.ins)
		b.ins = append(b.ins, in)
		b.lanes = append(b.lanes, in.Lane())
		b.keys = append(b.keys, key)
		b.records = append(b.records, data)
	}
	b.ids = make([]queue.ID, len(b.ins))
	return b, nil
}

// insertMany inserts the rows of a batch, in their order, unless a row's
// supplied key is held by a record the statement sees: then it inserts
// nothing and returns the holders, by row (ord, from 1). It returns the
// inserted records' IDs and keys in the order inserted: a keyed row that
// ON CONFLICT skipped, its key committed by another transaction while the
// statement ran, is missing.
const insertMany = `WITH batch AS (
	SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[]) WITH ORDINALITY AS b (lane, key, record, ord)
), held AS (
	SELECT b.ord, r.id, r.enqueued_at, r.record FROM batch b JOIN idem_queue_records r ON r.key = b.key
), added AS (
	INSERT INTO idem_queue_records (lane, state, key, record)
	SELECT lane, 1, key, record FROM batch WHERE NOT EXISTS (SELECT FROM held) ORDER BY ord
	ON CONFLICT (key) WHERE key IS NOT NULL DO NOTHING
	RETURNING id, key
)
SELECT 0::bigint, id, key, NULL::timestamptz, NULL::bytea FROM added
UNION ALL
SELECT ord, id, NULL, enqueued_at, record FROM held`

// insert sends the rows without IDs until each has one: one statement,
// unless keys are held. Like insert of one record, it gives a held key's
// record for the same operation and ErrKeyInUse for another.
func (b *batch) insert(ctx context.Context, tx pgx.Tx) error {
	pending := make([]int, len(b.ins))
	for i := range pending {
		pending[i] = i
	}
	for range 5 { // each round settles held keys or inserts
		var err error
		if pending, err = b.round(ctx, tx, pending); err != nil || len(pending) == 0 {
			return err
		}
	}
	return fmt.Errorf("pgqueue: enqueue many: keys held and freed five times over")
}

// round sends the rows pending once, and returns those still without an ID.
func (b *batch) round(ctx context.Context, tx pgx.Tx, pending []int) ([]int, error) {
	lanes := make([]string, len(pending))
	keys := make([]*string, len(pending))
	records := make([][]byte, len(pending))
	for j, s := range pending {
		lanes[j], keys[j], records[j] = b.lanes[s], b.keys[s], b.records[s]
	}
	rows, err := tx.Query(ctx, insertMany, lanes, keys, records)
	if err != nil {
		return nil, err
	}
	type added struct {
		id  int64
		key *string
	}
	var (
		inserted []added
		held     = map[int]*queue.Record{} // by index into pending
	)
	var (
		ord, id  int64
		key      *string
		enqueued *time.Time
		data     []byte
	)
	_, err = pgx.ForEachRow(rows, []any{&ord, &id, &key, &enqueued, &data}, func() error {
		if ord == 0 {
			inserted = append(inserted, added{id, key})
			return nil
		}
		r, err := decode(id, *enqueued, data)
		if err != nil {
			return err
		}
		held[int(ord)-1] = r
		return nil
	})
	if err != nil {
		return nil, err
	}

	if len(held) > 0 { // nothing inserted; the rows whose keys are free go again
		var again []int
		for j, s := range pending {
			r, ok := held[j]
			if !ok {
				again = append(again, s)
				continue
			}
			id, err := queue.KeyHeld(r, b.ins[s])
			if err != nil {
				return nil, err
			}
			b.ids[s] = id
		}
		return again, nil
	}

	// The rows were inserted in their order, their IDs rising; a keyed one
	// may be missing, skipped, to go again.
	var again []int
	k, last := 0, int64(0)
	for _, s := range pending {
		got := k < len(inserted) && (inserted[k].key == nil) == (b.keys[s] == nil) &&
			(b.keys[s] == nil || *inserted[k].key == *b.keys[s])
		if !got {
			if b.keys[s] == nil {
				return nil, fmt.Errorf("pgqueue: enqueue many: the statement returned %d IDs for %d records", len(inserted), len(pending))
			}
			again = append(again, s)
			continue
		}
		if inserted[k].id <= last {
			return nil, fmt.Errorf("pgqueue: enqueue many: the statement returned IDs out of order")
		}
		last = inserted[k].id
		b.ids[s] = queue.ID(last)
		k++
	}
	if k != len(inserted) {
		return nil, fmt.Errorf("pgqueue: enqueue many: the statement returned %d IDs for %d records", len(inserted), len(pending))
	}
	return again, nil
}
