package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/methods"
	"github.com/idem-go/idem/redact"
)

// Enqueue stores in durably and returns its ID: when it returns nil, the
// intent is in the file (an fsync'd commit) and will be sent, after a crash
// too, with its key. Concurrent callers share commits; a lone caller commits
// at once.
//
// Enqueue refuses a POST or PATCH without a key (ErrNeedsKey) and an intent
// that would take the queue past its limits (ErrQueueFull). Enqueuing an
// intent whose key is queued already returns the existing record's ID when it
// is the same operation (method, URL and body), so a producer that crashed
// before learning the result can simply enqueue again; another operation
// under that key gives ErrKeyInUse. This holds for keys given with
// idem.WithKey: a generated key is new by construction, so two Enqueue calls
// with one generated-key Intent queue it twice (the server still applies it
// once).
//
// Enqueue returns ctx's error without writing if ctx has ended; a write
// under way is not abandoned when ctx ends, since a store's Insert takes no
// context: the record may be stored all the same.
func (q *Queue) Enqueue(ctx context.Context, in *idem.Intent) (ID, error) {
	if q.opts.ReadOnly {
		return 0, ErrReadOnly
	}
	return q.enqueue(ctx, in, 0)
}

// enqueue is Enqueue, and Resubmit's copy of record resubmitOf when that is
// not 0.
func (q *Queue) enqueue(ctx context.Context, in *idem.Intent, resubmitOf ID) (ID, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	r, err := NewRecord(in, q.st.Now())
	if err != nil {
		return 0, err
	}
	insert := q.st.Insert
	if resubmitOf != 0 {
		insert = func(r *Record) (ID, error) { return q.st.Resubmit(r, resubmitOf) }
	}
	id, err := insert(r)
	if err != nil {
		return 0, err
	}
	q.poke()
	return id, nil
}

// NewRecord returns the pending record that enqueuing in at now stores, due
// at once. It refuses a nil intent (idem.ErrInvalidIntent) and a POST or
// PATCH without a key (ErrNeedsKey), as Enqueue does. A Store's own enqueue,
// such as pgqueue's in the caller's transaction, starts from it.
func NewRecord(in *idem.Intent, now time.Time) (*Record, error) {
	if in == nil {
		return nil, fmt.Errorf("%w: nil intent", idem.ErrInvalidIntent)
	}
	if in.Key() == "" && !methods.Idempotent(in.Method()) {
		return nil, fmt.Errorf("%w: %s %s", ErrNeedsKey, in.Method(), redact.RawURL(in.URL()))
	}
	data, err := in.MarshalBinary()
	if err != nil {
		return nil, err
	}
	return &Record{Intent: in, State: Pending, NextAttempt: now, EnqueuedAt: now, intentBytes: data}, nil
}

// Insert stores r, a new pending record, and returns its ID; a record
// holding r's supplied key for the same operation gives that record's ID
// instead.
func (st *boltStore) Insert(r *Record) (ID, error) { return st.insertWith(r, nil) }

// Resubmit is insert for the copy of record old, which it marks in the same
// transaction. The transaction checks old again: of two Resubmit calls at
// once, or one after a crash, only one queues a copy.
func (st *boltStore) Resubmit(r *Record, old ID) (ID, error) {
	return st.insertWith(r, func(b buckets, newID ID) error {
		o, _, err := b.get(old)
		if err != nil || o == nil {
			return err // discarded meanwhile: the new record stands alone
		}
		if err := resubmittable(o); err != nil {
			return err
		}
		o.ResubmittedAs = newID
		_, _, _, err = b.replace(o, o.State)
		return err
	})
}

// insertWith is insert; also, if not nil, runs in the transaction that
// stores r, given its ID: an error from it stores nothing and is returned as
// is.
func (st *boltStore) insertWith(r *Record, also func(b buckets, id ID) error) (ID, error) {
	in, data, now := r.Intent, r.intentBytes, r.EnqueuedAt
	if id, err := st.queued(in); err != nil || id != 0 {
		return id, err // a producer enqueuing again after a crash: no write needed
	}
	if err := st.reserve(len(data)); err != nil {
		return 0, err
	}
	var (
		id      ID
		size    int
		existed bool
	)
	err := st.guard(func() error {
		return st.write(func(tx *bolt.Tx) error {
			id, size, existed = 0, 0, false
			b, err := open(tx)
			if err != nil {
				return err
			}
			if prior, err := st.sameKey(b, in); err != nil || prior != 0 {
				id, existed = prior, prior != 0
				return err
			}
			seq, err := b.records.NextSequence()
			if err != nil {
				return err
			}
			r.ID = ID(seq)
			id = r.ID
			if size, err = b.insert(r); err != nil || also == nil {
				return err
			}
			return also(b, id)
		})
	})
	st.mu.Lock()
	st.idx.reservedItems--
	st.idx.reservedBytes -= int64(len(data))
	if err == nil && !existed {
		l := st.idx.added(id, in.Lane(), size)
		if len(l.ids) == 1 && !l.busy && !l.held {
			l.nextAt = now
			st.ready.push(l)
		}
	}
	st.mu.Unlock()
	if err != nil {
		if !errors.Is(err, ErrClosed) && !errors.Is(err, ErrKeyInUse) && !errors.Is(err, ErrDamaged) && !errors.Is(err, ErrNotResubmittable) {
			err = fmt.Errorf("queue: enqueue: not stored: %w", err) // a write failed: disk full, I/O error
		}
		return 0, err
	}
	return id, nil
}

// reserve promises room for one record of size bytes, or says why there is
// none. The caller gives it back once its commit is done.
func (st *boltStore) reserve(size int) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	x := &st.idx
	if items := x.unsettled() + x.reservedItems; items+1 > st.opts.MaxItems {
		return fmt.Errorf("%w: %d unsettled records, limit %d", ErrQueueFull, items, st.opts.MaxItems)
	}
	if used := x.active + x.reservedBytes; used+int64(size) > st.opts.MaxBytes {
		return fmt.Errorf("%w: %d bytes used, %d more would pass the limit of %d", ErrQueueFull, used, size, st.opts.MaxBytes)
	}
	x.reservedItems++
	x.reservedBytes += int64(size)
	return nil
}

// queued looks in's key up without a write transaction.
func (st *boltStore) queued(in *idem.Intent) (ID, error) {
	if !in.KeySupplied() {
		return 0, nil
	}
	var id ID
	err := st.guard(func() error {
		return st.view(func(tx *bolt.Tx) error {
			b, err := open(tx)
			if err != nil {
				return err
			}
			id, err = st.sameKey(b, in)
			return err
		})
	})
	return id, err
}

// sameKey returns the ID of the record holding in's key, if it holds the
// same operation; ErrKeyInUse if another.
func (st *boltStore) sameKey(b buckets, in *idem.Intent) (ID, error) {
	if !in.KeySupplied() {
		return 0, nil
	}
	id := ID(getUint(b.keys, []byte(in.Key())))
	if id == 0 {
		return 0, nil
	}
	r, _, err := b.get(id)
	if err != nil || r == nil {
		return 0, err
	}
	return KeyHeld(r, in)
}

// KeyHeld is what a Store's Insert returns for in when holder already holds
// in's supplied key: holder's ID if holder is the same operation (the same
// method, URL and body), ErrKeyInUse if it is another or is damaged (its
// Intent nil). Every store answers through it, so that a key means the same
// thing whatever keeps the records.
//
// The error names holder by its ID, never by the key or the URL's query,
// which may be secrets.
func KeyHeld(holder *Record, in *idem.Intent) (ID, error) {
	o := holder.Intent
	if o == nil {
		return 0, fmt.Errorf("%w: record %d, found damaged, holds its key; Discard it to free the key", ErrKeyInUse, holder.ID)
	}
	if !o.SameOperation(in) {
		return 0, fmt.Errorf("%w: record %d holds its key, for %s %s", ErrKeyInUse, holder.ID, o.Method(), redact.RawURL(o.URL()))
	}
	return holder.ID, nil
}
