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

// Store keeps a Queue's records, their lanes and the schedule of due lanes.
// The Queue is written once over it: the drainer, the horizon, backoff and
// Retry-After, 401 handling, offline detection, events and waiters are the
// Queue's, whatever keeps the records. Open uses a store in one bbolt file;
// New takes any other, such as package pgqueue's, which keeps the records in
// PostgreSQL for several replicas at once.
//
// A store never calls back into the Queue: it returns what the Queue must
// report. Its methods are safe for concurrent use, and the Queue calls none
// of them with its own mutex held: a store may wait on its disk or its
// network without stopping Wait, Close, Enqueue or the admin calls of the
// callers it does not serve. A call under way is waited for, never
// abandoned: the store ends it, as pgqueue's per-operation timeouts do.
// What a store must keep is one test suite that every store runs.
type Store interface {
	// Now reads the clock that every time in a record is written by: the
	// local clock for a store of one process, the database's for a store
	// shared by several.
	Now() time.Time
	// Insert stores r, a new pending record, and returns its ID; a record
	// holding r's supplied key for the same operation gives that record's
	// ID instead, another operation ErrKeyInUse (KeyHeld gives both). Past
	// the store's limits it gives ErrQueueFull.
	Insert(r *Record) (ID, error)
	// Resubmit is Insert for the copy of record old, which it marks as
	// resubmitted (Record.ResubmittedAs) in the same commit;
	// ErrNotResubmittable if it was already.
	Resubmit(r *Record, old ID) (ID, error)
	// Get returns record id, or ErrNotFound.
	Get(id ID) (*Record, error)
	// List returns up to limit records in state s with IDs above after, in
	// ID order.
	List(s State, after ID, limit int) ([]*Record, error)
	// Counts counts the records in each state.
	Counts() (map[State]int, error)
	// Discard removes record id unless it is in flight (ErrInFlight).
	Discard(id ID) error
	// OldestUnsettled returns when the oldest unsettled record was
	// enqueued; the zero Time for none.
	OldestUnsettled() (time.Time, error)

	// TakeDue takes the lane whose head is due first for a worker of this
	// Queue (got), or says how long until one is due; wait is 0 when none
	// waits. A lane is taken by one worker at a time, in every process
	// sharing the store.
	TakeDue(now time.Time) (lane string, got bool, wait time.Duration, err error)
	// SetNext sets when the head of a lane a worker took is next due, and
	// gives the lane back to other processes; Release then gives it back to
	// this Queue's schedule.
	SetNext(lane string, next time.Time) error
	Release(lane string)
	// Hold keeps a lane out of the schedule until Wake, which also makes
	// every idle lane due at now; Rejudge makes every idle, unheld lane due.
	Hold(lane string) error
	Wake(now time.Time) error
	Rejudge(now time.Time) error
	// Wakeups, if not nil, receives when another process made work due:
	// an enqueue, a Wake. A store of one process returns nil.
	Wakeups() <-chan struct{}
	// Shared reports whether other processes may change the records: a
	// shared store's records may settle without this Queue's drainer, so
	// Wait reads them again now and then, and a read-only Queue may wait.
	Shared() bool
	// Settles, if not nil, receives the ID of each record another process
	// sharing the store settled, once that process's commit is done: for
	// Wait and Options.NotifyRemote. It is best effort: an ID that comes
	// while the feed is down or behind is lost, and Wait's polling covers
	// it. A store of one process returns nil.
	Settles() <-chan ID
	// Head returns the first unsettled record of a taken lane, in the
	// lane's order, and the damaged records it quarantined on the way, for
	// the Queue to report.
	Head(lane string) (*Record, []*Record, error)
	// Lease stores r, which the Queue has marked in flight for one attempt,
	// over its stored self, which must still be pending; Commit stores r
	// over its stored self, which must still be in state old. Both return
	// an error wrapping ErrMovedOn when the stored record changed
	// meanwhile (an operator's Discard, a takeover of the lane by another
	// process): the Queue drops what it holds and moves on.
	Lease(r *Record) error
	Commit(old State, r *Record) error
	// Mark and ResetMark read and replace the clock's high-water mark (see
	// Queue.ResetClock); a store on a shared server's clock keeps none:
	// Mark returns the zero Time.
	Mark() time.Time
	ResetMark(now time.Time) (time.Time, error)
	// TakeDamaged returns, once, the records found damaged when the store
	// was opened.
	TakeDamaged() []*Record
	// Sweep removes records settled Options.KeepSettled ago.
	Sweep(now time.Time) error
	// Location names where the records are kept, such as a file's path.
	Location() string
	// Close releases the store; the Queue calls it once, from Close.
	Close() error
}

// Shared is false: the file is locked to one Queue (see lockSuffix).
func (st *boltStore) Shared() bool { return false }

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

	// commits shares commits among concurrent writers (see group).
	commits group

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

	// broken is set, once, by a panic inside bbolt: the file is damaged and
	// nothing writes to it again (see write).
	broken atomic.Pointer[error]
}

// openBolt opens the file at path, whose lock file lf is locked, and
// prepares it (see recover); a file mostly of free space is compacted. A
// file whose structure is damaged is opened ReadOnly only (see
// checkStructure).
func openBolt(path string, o Options, lf *os.File) (*boltStore, error) {
	if !o.ReadOnly {
		removeCompactions(path)
		if err := checkStructure(path); err != nil {
			return nil, err
		}
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

// Close waits for the operations under way, then closes the file and lets
// go of its lock.
func (st *boltStore) Close() error {
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

// write runs fn in a write transaction: at once when no commit is under
// way, else in the next, shared with the writers that came meanwhile (see
// group). fn may run twice, so it must only touch the transaction and
// variables it sets afresh each time.
//
// A store broken by a panic inside bbolt (see broke) writes nothing more: a
// write panics or fails on damaged pages, or damages them further. A
// transaction that panicked breaks it.
func (st *boltStore) write(fn func(*bolt.Tx) error) error {
	if err := st.brokenErr(); err != nil {
		return err
	}
	err := st.commits.do(st.db, fn)
	if errors.Is(err, errPanicked) {
		if !errors.Is(err, ErrDamaged) {
			err = fmt.Errorf("%w: %s: %w", ErrDamaged, st.path, err)
		}
		return st.broke(err)
	}
	return err
}

// Location returns the file's path.
func (st *boltStore) Location() string { return st.path }

// TakeDamaged returns the records Open quarantined, once.
func (st *boltStore) TakeDamaged() []*Record {
	st.mu.Lock()
	defer st.mu.Unlock()
	d := st.damaged
	st.damaged = nil
	return d
}

// Mark returns the clock's high-water Mark.
func (st *boltStore) Mark() time.Time {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.hwm
}

// Now reads the local clock (Options' seam in tests).
func (st *boltStore) Now() time.Time { return st.opts.now() }

// Lease commits r in flight. The clock's mark moves on to the lease's time
// once the lease is committed, in the file in the same commit when it has
// moved far enough (see saveHWM).
func (st *boltStore) Lease(r *Record) error {
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
func (st *boltStore) ResetMark(now time.Time) (time.Time, error) {
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

// ErrMovedOn is returned by a Store's Lease and Commit when the stored record
// is no longer as its writer read it: an operator discarded it, or another
// process took its lane over after this one's lease ran out.
var ErrMovedOn = errors.New("queue: record changed meanwhile")

// Commit stores r over its stored self, which must still be in state old,
// and updates the index.
func (st *boltStore) Commit(old State, r *Record) error { return st.commitWith(old, r, nil) }

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
	SettleLeaseNext(r *Record, lease func(next *Record) bool) (*Record, error)
}

// SettleLeaseNext implements leaseNexter: a commit of r (see commitWith)
// that also leases the next record; the lease moves the clock's mark as
// Lease does, once committed.
func (st *boltStore) SettleLeaseNext(r *Record, lease func(*Record) bool) (*Record, error) {
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
