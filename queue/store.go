package queue

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idem-go/idem/internal/binenc"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// store keeps a Queue's records, their lanes and the schedule of due lanes:
// the drainer, horizon, backoff, events and waiters are the Queue's, written
// once over it. A store never calls back into the Queue: it returns what the
// Queue must report. Its methods are safe for concurrent use; the Queue
// calls takeDue, wake and rejudge with its own mutex held.
type store interface {
	// insert stores r, a new pending record, and returns its ID; a record
	// holding r's supplied key for the same operation gives that record's
	// ID instead, another operation ErrKeyInUse.
	insert(r *Record) (ID, error)
	// resubmit is insert for the copy of record old, which it marks as
	// resubmitted in the same commit; ErrNotResubmittable if it was already.
	resubmit(r *Record, old ID) (ID, error)
	get(id ID) (*Record, error)
	list(s State, after ID, limit int) ([]*Record, error)
	counts() map[State]int
	// discard removes record id unless it is in flight (ErrInFlight).
	discard(id ID) error
	// oldestUnsettled returns when the oldest unsettled record was
	// enqueued; the zero Time for none.
	oldestUnsettled() (time.Time, error)

	// takeDue takes the lane whose head is due first for a worker (got), or
	// says how long until one is due (ok false: none waits).
	takeDue(now time.Time) (name string, got bool, wait time.Duration, ok bool)
	// setNext sets when the head of a lane a worker holds is next due;
	// release gives the lane back to the schedule.
	setNext(name string, next time.Time)
	release(name string)
	// hold keeps a lane out of the schedule until wake, which also makes
	// every idle lane due at now; rejudge makes every idle, unheld lane due.
	hold(name string)
	wake(now time.Time)
	rejudge(now time.Time)
	// head returns the first unsettled record of a lane, and the damaged
	// records it quarantined on the way, for the Queue to report.
	head(name string) (*Record, []*Record, error)
	// lease commits r in flight for one attempt (see boltStore.lease);
	// commit stores r over its stored self, which must still be in state
	// old, or returns errMovedOn.
	lease(r *Record, now time.Time) error
	commit(old State, r *Record) error
	// mark and resetMark read and replace the clock's high-water mark.
	mark() time.Time
	resetMark(now time.Time) (time.Time, error)
	// takeDamaged returns, once, the records found damaged when the store
	// was opened.
	takeDamaged() []*Record
	// guardedSweep removes records settled Options.KeepSettled ago.
	guardedSweep(now time.Time) error
	// location names where the records are kept, such as a file's path.
	location() string
	close() error
}

// boltStore keeps a Queue's records in one bbolt file: the records, their
// supplied keys, the clock's high-water mark, and in memory the index and
// lane schedule that spare each commit the pages they would cost on disk
// (see index). The drainer, events and waiters are the Queue's; the store
// never calls back into the Queue, it returns what the Queue must report.
type boltStore struct {
	db   *bolt.DB
	lock *os.File // the lock file, locked until close (see lockSuffix)
	path string
	opts Options

	// writers counts write transactions under way: a lone writer commits at
	// once with Update, concurrent ones share commits with Batch.
	writers atomic.Int32

	// life is held for reading by every operation on the file and for
	// writing by close, so that close waits for them; closed is set under
	// it.
	life   sync.RWMutex
	closed bool

	mu      sync.Mutex // guards the fields below, and the lanes' fields
	idx     index
	ready   laneHeap
	hwm     time.Time // the latest wall time seen, persisted at each lease
	damaged []*Record // quarantined by Open, for Run to report
}

// openBolt opens the file at path, whose lock file lf is locked, and
// prepares it (see recover); a file mostly of free space is compacted.
func openBolt(path string, o Options, lf *os.File) (*boltStore, error) {
	if !o.ReadOnly {
		removeCompactions(path)
	}
	db, err := openDB(path, o)
	if err != nil {
		return nil, err
	}
	st := &boltStore{db: db, lock: lf, path: path, opts: o}
	if err := st.recover(); err != nil {
		db.Close()
		return nil, err
	}
	if o.ReadOnly {
		return st, nil
	}
	if err := st.maybeCompact(); err != nil {
		st.db.Close()
		return nil, err
	}
	return st, nil
}

// close waits for the operations under way, then closes the file and lets
// go of its lock.
func (st *boltStore) close() error {
	st.life.Lock()
	defer st.life.Unlock()
	st.closed = true
	err := st.db.Close()
	st.lock.Close() // after the file: the next opener may have it
	return err
}

// guard runs fn unless the store is closed, and keeps close waiting until fn
// returns.
func (st *boltStore) guard(fn func() error) error {
	st.life.RLock()
	defer st.life.RUnlock()
	if st.closed {
		return ErrClosed
	}
	err := fn()
	if errors.Is(err, berrors.ErrDatabaseNotOpen) {
		return ErrClosed
	}
	return err
}

// write runs fn in a write transaction: at once when it is the only writer,
// sharing a commit with concurrent writers otherwise. fn may run twice, as
// with bolt.DB.Batch, so it must only touch the transaction and variables it
// sets afresh each time.
func (st *boltStore) write(fn func(*bolt.Tx) error) error {
	n := st.writers.Add(1)
	defer st.writers.Add(-1)
	if n > 1 {
		return st.db.Batch(fn)
	}
	return st.db.Update(fn)
}

// location returns the file's path.
func (st *boltStore) location() string { return st.path }

// takeDamaged returns the records Open quarantined, once.
func (st *boltStore) takeDamaged() []*Record {
	st.mu.Lock()
	defer st.mu.Unlock()
	d := st.damaged
	st.damaged = nil
	return d
}

// mark returns the clock's high-water mark.
func (st *boltStore) mark() time.Time {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.hwm
}

// lease marks r in flight and counts the attempt, setting FirstSentAt if
// unset, before anything is sent: a crash after the send leaves the record
// marked as possibly sent, which is the safe side. The clock's mark moves on
// to now, in the same commit when it has moved far enough (see saveHWM).
func (st *boltStore) lease(r *Record, now time.Time) error {
	r.State = InFlight
	r.NumAttempts++
	r.LastAttemptAt = now
	r.leaseSetFirstSent = r.FirstSentAt.IsZero()
	if r.leaseSetFirstSent {
		r.FirstSentAt = now
	}
	st.mu.Lock()
	st.hwm = advanceMark(st.hwm, now)
	st.mu.Unlock()
	return st.commitWith(Pending, r, st.saveHWM)
}

// resetMark sets the clock's mark to now, in the file too, and returns the
// mark it replaced.
func (st *boltStore) resetMark(now time.Time) (time.Time, error) {
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

// saveHWM persists the clock's high-water mark when it has moved on by
// hwmStep, or by half of ClockTolerance if that is less: a coarse mark is
// enough against a clock that is wrong by more than ClockTolerance, and it
// keeps most leases to one page. It reads the mark inside the transaction,
// so that a commit never stores a mark ResetClock replaced meanwhile.
func (st *boltStore) saveHWM(b buckets) error {
	st.mu.Lock()
	hwm := st.hwm
	st.mu.Unlock()
	if hwm.Sub(binenc.FromNanos(int64(getUint(b.meta, metaHWM)))) < min(hwmStep, st.opts.ClockTolerance/2) {
		return nil
	}
	return putUint(b.meta, metaHWM, uint64(binenc.Nanos(hwm)))
}

// hwmStep is how far the clock moves before its high-water mark is saved.
const hwmStep = time.Minute

// errMovedOn is returned by commit when the stored record is no longer in
// the state its writer read, as after an operator's Discard.
var errMovedOn = errors.New("queue: record changed meanwhile")

// commit stores r over its stored self, which must still be in state old,
// and updates the index.
func (st *boltStore) commit(old State, r *Record) error { return st.commitWith(old, r, nil) }

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
				return fmt.Errorf("%w: record %d", errMovedOn, r.ID)
			}
			if also != nil {
				return also(b)
			}
			return nil
		})
	})
	if errors.Is(err, errMovedOn) {
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

func openDB(path string, o Options) (db *bolt.DB, err error) {
	fi, statErr := os.Stat(path)
	existed := statErr == nil && fi.Size() > 0
	if err := checkSize(path); err != nil {
		return nil, err
	}
	// A damaged page read through bbolt's mapping faults; make that a panic
	// this function can turn into an error.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			db, err = nil, fmt.Errorf("%w: %s: %v", ErrDamaged, path, p)
		}
	}()
	db, err = bolt.Open(path, 0o600, &bolt.Options{Timeout: o.LockTimeout, OpenFile: o.openFile, ReadOnly: o.ReadOnly})
	var pathErr *fs.PathError
	switch {
	case err == nil:
		db.MaxBatchDelay = batchDelay
		return db, nil
	case errors.Is(err, berrors.ErrTimeout):
		return nil, fmt.Errorf("%w: %s (waited %v)", ErrLocked, path, o.LockTimeout)
	case errors.As(err, &pathErr):
		return nil, fmt.Errorf("queue: %w", err)
	case existed:
		// bbolt read the file and did not like it: wrong format, bad meta
		// pages, truncation.
		return nil, fmt.Errorf("%w: %s is not a readable queue file: %v", ErrDamaged, path, err)
	}
	return nil, fmt.Errorf("queue: open %s: %w", path, err)
}

// batchDelay is how long a shared commit waits for company. Producers that
// arrive while a commit runs gather behind it anyway, so a short delay only
// bounds the wait of a batch that stays small.
const batchDelay = time.Millisecond
