package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/binenc"
)

// Insert stores r, a new pending record, and returns its ID; a record
// holding r's supplied key for the same operation gives that record's ID
// instead. ctx is checked before the write starts: a bbolt transaction
// cannot be interrupted.
func (st *boltStore) Insert(ctx context.Context, r *Record) (ID, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	return st.insertWith(r, nil)
}

// Resubmit is Insert for r, the copy of record old, which the same
// transaction judges by rule and marks: bbolt's one writer at a time keeps
// old from a settle, or another Resubmit, until it commits.
func (st *boltStore) Resubmit(ctx context.Context, r *Record, old ID, rule func(*Record) error) (ID, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	return st.insertWith(r, func(b buckets, newID ID) error {
		o, _, err := b.get(old)
		switch {
		case err != nil:
			return err
		case o == nil:
			return fmt.Errorf("%w: %d", ErrNotFound, old)
		}
		if err := rule(o); err != nil {
			return refusal{err}
		}
		o.ResubmittedAs = newID
		_, _, _, err = b.replace(o, o.State)
		return err
	})
}

// refusal is a rule's error, which Resubmit returns as it is.
type refusal struct{ err error }

func (r refusal) Error() string { return r.err.Error() }
func (r refusal) Unwrap() error { return r.err }

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
	var rf refusal
	switch {
	case errors.As(err, &rf):
		return 0, rf.err
	case err != nil:
		if !errors.Is(err, ErrClosed) && !errors.Is(err, ErrKeyInUse) && !errors.Is(err, ErrDamaged) && !errors.Is(err, ErrNotFound) {
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

// Put stores r over its stored self, which must still be in state old, and
// updates the index; a lease (see lease) moves the clock's mark too. ctx is
// checked before the write starts.
func (st *boltStore) Put(ctx context.Context, old State, r *Record) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if old == Pending && r.State == InFlight {
		return st.lease(r)
	}
	return st.commitWith(old, r, nil)
}

// commitWith is commit, with also run in the same transaction.
func (st *boltStore) commitWith(old State, r *Record, also func(buckets) error) error {
	var oldSize, newSize int
	err := st.guard(func() error {
		return st.write(func(tx *bolt.Tx) error {
			b, err := open(tx)
			if err != nil {
				return err
			}
			var ok bool
			oldSize, newSize, ok, err = b.replace(r, old)
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("%w: record %d", ErrMovedOn, r.ID)
			}
			if also != nil {
				return also(b)
			}
			return nil
		})
	})
	if errors.Is(err, ErrMovedOn) {
		st.forget(r.lane(), r.ID)
	}
	if err != nil {
		return err
	}
	st.mu.Lock()
	st.idx.moved(r, old, oldSize, newSize)
	st.mu.Unlock()
	return nil
}

// lease commits r in flight. The clock's mark moves on to the lease's time
// once the lease is committed, in the file in the same commit when it has
// moved far enough (see saveHWM).
func (st *boltStore) lease(r *Record) error {
	err := st.commitWith(Pending, r, func(b buckets) error { return st.saveHWM(b, r.LastAttemptAt) })
	if err != nil {
		return err
	}
	st.moveMark(r.LastAttemptAt)
	return nil
}

// moveMark moves the clock's mark on to t, the time of a committed lease.
func (st *boltStore) moveMark(t time.Time) {
	st.mu.Lock()
	st.hwm = advanceMark(st.hwm, t)
	st.mu.Unlock()
}

// ResetMark sets the clock's mark to now, in the file too, and returns the
// mark it replaced.
func (st *boltStore) ResetMark(ctx context.Context, now time.Time) (time.Time, error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, err
	}
	st.mu.Lock()
	old := st.hwm
	st.hwm = now
	st.mu.Unlock()
	err := st.guard(func() error {
		return st.write(func(tx *bolt.Tx) error {
			b, err := open(tx)
			if err != nil {
				return err
			}
			return putUint(b.meta, metaHWM, uint64(binenc.Nanos(now)))
		})
	})
	if err != nil {
		st.mu.Lock()
		if st.hwm.Equal(now) { // not moved on meanwhile: as it was
			st.hwm = old
		}
		st.mu.Unlock()
	}
	return old, err
}

// saveHWM persists the clock's high-water mark, moved on to leasedAt, when
// it has moved on by hwmStep, or by half of ClockTolerance if that is less:
// a coarse mark is enough against a clock that is wrong by more than
// ClockTolerance, and it keeps most leases to one page. It reads the mark
// inside the transaction, so that a commit never stores a mark ResetClock
// replaced meanwhile; the mark in memory moves only after the commit
// (moveMark), since the transaction may still roll back.
func (st *boltStore) saveHWM(b buckets, leasedAt time.Time) error {
	st.mu.Lock()
	hwm := advanceMark(st.hwm, leasedAt)
	st.mu.Unlock()
	if hwm.Sub(binenc.FromNanos(int64(getUint(b.meta, metaHWM)))) < min(hwmStep, st.opts.ClockTolerance/2) {
		return nil
	}
	return putUint(b.meta, metaHWM, uint64(binenc.Nanos(hwm)))
}

// hwmStep is how far the clock moves before its high-water mark is saved.
const hwmStep = time.Minute

// leaseNexter is a store that settles a leased record and leases the next
// record of its lane in the same commit: a lane then costs one commit a
// record instead of two (see Queue.settleDone). The bbolt store is one.
type leaseNexter interface {
	// SettleLeaseNext commits r, settled, over its stored self, which
	// must be in flight (else ErrMovedOn), and, in the same commit, the
	// record that follows r in its lane, if lease accepts it: lease is
	// given that record, pending, marks it leased and says so; it may run
	// more than once and must not block. It returns the leased record, or
	// nil.
	SettleLeaseNext(ctx context.Context, r *Record, lease func(next *Record) bool) (*Record, error)
}

// SettleLeaseNext implements leaseNexter: a commit of r (see commitWith)
// that also leases the next record; the lease moves the clock's mark as
// Put's does, once committed. ctx is checked before the write starts.
func (st *boltStore) SettleLeaseNext(ctx context.Context, r *Record, lease func(*Record) bool) (*Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	st.mu.Lock()
	var nextID ID
	if l := st.idx.lanes[r.lane()]; l != nil && len(l.ids) > 1 && l.ids[0] == r.ID {
		nextID = l.ids[1]
	}
	st.mu.Unlock()
	var (
		next             *Record
		oldSize, newSize int
	)
	err := st.commitWith(InFlight, r, func(b buckets) error {
		next = nil // this may run twice
		if nextID == 0 {
			return nil
		}
		n, _, err := b.get(nextID)
		if err != nil || n == nil || n.State != Pending || !lease(n) {
			return nil // a damaged or changed record is Head's to handle, on the usual path
		}
		var ok bool
		if oldSize, newSize, ok, err = b.replace(n, Pending); err != nil || !ok {
			return err
		}
		next = n
		return st.saveHWM(b, n.LastAttemptAt)
	})
	if err != nil || next == nil {
		return nil, err
	}
	st.moveMark(next.LastAttemptAt)
	st.mu.Lock()
	st.idx.moved(next, Pending, oldSize, newSize)
	st.mu.Unlock()
	return next, nil
}

// Discard removes record id unless it is in flight. ctx is checked before
// the write starts.
func (st *boltStore) Discard(ctx context.Context, id ID) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var (
		r    *Record
		size int
	)
	err := st.guard(func() error {
		return st.write(func(tx *bolt.Tx) error {
			b, err := open(tx)
			if err != nil {
				return err
			}
			r, size, err = b.get(id)
			if err != nil {
				return err
			}
			if r == nil {
				return fmt.Errorf("%w: %d", ErrNotFound, id)
			}
			if r.State == InFlight {
				return fmt.Errorf("%w: %d", ErrInFlight, id)
			}
			return b.remove(r)
		})
	})
	if err != nil {
		return err
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.idx.removed(r, size)
	if l := st.idx.lanes[r.lane()]; l != nil && len(l.ids) == 0 && !l.busy {
		st.ready.remove(l)
		delete(st.idx.lanes, l.name)
	}
	return nil
}

// quarantineHead quarantines record id, the head of the lane called name,
// if it does not decode, and returns it for the caller to report. It returns
// nil when there was nothing to quarantine: the record is gone or decodes.
func (st *boltStore) quarantineHead(name string, id ID) (*Record, error) {
	var (
		r    *Record
		old  State
		size int
	)
	err := st.guard(func() error {
		return st.write(func(tx *bolt.Tx) error {
			r = nil
			b, err := open(tx)
			if err != nil {
				return err
			}
			v := b.records.Get(idKey(id))
			if v == nil {
				return nil
			}
			dr, err := decodeRecord(v)
			switch {
			case err == nil && dr.ID == id:
				return nil
			case err == nil:
				// The key disagrees with an intact record: the page is
				// damaged, and a write there would damage the tree.
				return st.broke(fmt.Errorf("%w: %s: record key %d holds record %d", ErrDamaged, st.path, id, dr.ID))
			}
			// The index counts the record under its last committed state,
			// which its state byte still holds unless that is the damage.
			old, size = Pending, len(v)
			if len(v) > stateOffset && State(v[stateOffset]) == InFlight {
				old = InFlight
			}
			r = quarantined(id, v, err, st.opts.now())
			_, err = b.put(r)
			return err
		})
	})
	if err != nil || r == nil {
		return nil, err
	}
	st.mu.Lock()
	st.idx.moved(r, old, size, 0)
	if l := st.idx.lanes[name]; l != nil {
		l.drop(id) // r.lane() is not name when the intent was lost
	}
	st.mu.Unlock()
	return r, nil
}
