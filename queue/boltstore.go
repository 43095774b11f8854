package queue

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/idem-go/idem/internal/binenc"
)

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

	// broken is set, once, by a panic inside bbolt or a commit that failed:
	// nothing writes to the file again (see write).
	broken atomic.Pointer[error]

	// bbolt shows a commit to readers once its meta page is written, before
	// its fdatasync returns, which may fail. So a read that finds a commit
	// newer than durable waits for it (see view). durable is the transaction
	// ID of the last commit whose sync returned, read without a lock on
	// every read; it moves under syncMu, and synced is signalled when it
	// moves or the store breaks.
	syncMu  sync.Mutex
	synced  sync.Cond
	durable atomic.Uint64
}

// openBolt opens the file at path, whose lock file lf is locked, and
// prepares it (see recover); a file mostly of free space is compacted. A
// file whose structure is damaged is opened ReadOnly only (see
// checkStructure).
func openBolt(path string, o Options, lf *os.File) (*boltStore, error) {
	if !o.ReadOnly {
		removeLeftovers(path)
		if err := checkStructure(path); err != nil {
			return nil, err
		}
		if fi, err := os.Stat(path); err != nil || fi.Size() == 0 {
			// A new file: a mark left by one removed is not its own.
			if err := resetMark(lf); err != nil {
				return nil, err
			}
		}
	}
	db, err := openDB(path, o)
	if err != nil {
		return nil, err
	}
	st := &boltStore{lock: lf, path: path, opts: o}
	st.synced.L = &st.syncMu
	st.adopt(db)
	st.commits.committed = st.marked
	if !o.ReadOnly {
		if err := st.checkMark(); err != nil {
			db.Close()
			return nil, err
		}
	}
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

// Close waits for the operations under way, then closes the file and lets
// go of its lock, having synced the commit mark (see writeMark).
func (st *boltStore) Close() error {
	st.life.Lock()
	defer st.life.Unlock()
	st.closed = true
	err := st.db.Close()
	if !st.opts.ReadOnly {
		_ = st.lock.Sync() // a mark left behind is harmless
	}
	st.lock.Close() // after the file: the next opener may have it
	return err
}

// marked notes txid, a commit that succeeded, as durable, and writes it as
// the commit mark.
func (st *boltStore) marked(txid uint64) {
	st.madeDurable(txid)
	_ = writeMark(st.lock, txid) // a mark left behind is harmless
}

// adopt makes db, as opened, the store's file: what it holds is what the
// disk holds.
func (st *boltStore) adopt(db *bolt.DB) {
	var txid int
	_ = db.View(func(tx *bolt.Tx) error { txid = tx.ID(); return nil })
	st.db = db
	st.madeDurable(uint64(txid))
}

// madeDurable sets durable to txid (a compaction starts the IDs again) and
// wakes the reads waiting for it.
func (st *boltStore) madeDurable(txid uint64) {
	st.syncMu.Lock()
	st.durable.Store(txid)
	st.syncMu.Unlock()
	st.synced.Broadcast()
}

// awaitDurable waits until commit txid is durable or the store is broken.
func (st *boltStore) awaitDurable(txid uint64) {
	st.syncMu.Lock()
	defer st.syncMu.Unlock()
	for st.durable.Load() < txid && st.brokenErr() == nil {
		st.synced.Wait()
	}
}

// checkMark refuses a file that lacks commits that returned (see
// writeMark), before anything writes to it.
func (st *boltStore) checkMark() error {
	var txid uint64
	if err := st.view(func(tx *bolt.Tx) error { txid = uint64(tx.ID()); return nil }); err != nil {
		return err
	}
	if n := lostCommits(st.lock, txid); n > 0 {
		return lostError(st.path, n, txid)
	}
	return nil
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
// transaction that panicked breaks it, and so does a commit that failed
// (see commitError); an error of fn's own only rolls its part back.
func (st *boltStore) write(fn func(*bolt.Tx) error) error {
	if err := st.brokenErr(); err != nil {
		return err
	}
	err := st.commits.do(st.db, fn)
	if ce := (*commitError)(nil); errors.As(err, &ce) {
		return st.broke(err)
	}
	if errors.Is(err, errPanicked) {
		if !errors.Is(err, ErrDamaged) {
			err = fmt.Errorf("%w: %s: %w", ErrDamaged, st.path, err)
		}
		return st.broke(err)
	}
	return err
}

// view runs fn in a read transaction. A panic inside bbolt, or a fault
// reading its mapping, becomes ErrDamaged and breaks the store.
//
// fn reads only commits whose sync returned: a read that finds one still
// syncing waits for it, and a store broken by a failed commit reads
// nothing, since bbolt may show that commit, which the disk may not hold.
func (st *boltStore) view(fn func(*bolt.Tx) error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			err = st.broke(fmt.Errorf("%w: %s: reading panicked: %v", ErrDamaged, st.path, p))
		}
	}()
	for {
		broken := st.brokenErr()
		if ce := (*commitError)(nil); errors.As(broken, &ce) {
			return broken
		}
		var syncing uint64
		err = st.db.View(func(tx *bolt.Tx) error {
			// A store broken otherwise commits nothing more: it reads what
			// it has.
			if id := uint64(tx.ID()); broken == nil && id > st.durable.Load() {
				syncing = id
				return nil
			}
			return fn(tx)
		})
		if syncing == 0 {
			return err
		}
		st.awaitDurable(syncing)
	}
}

// broke marks the store broken by cause, an error wrapping ErrDamaged:
// nothing writes to its file again. It returns the first cause.
func (st *boltStore) broke(cause error) error {
	if st.broken.CompareAndSwap(nil, &cause) {
		st.syncMu.Lock() // a read about to wait sees broken, or is woken
		st.syncMu.Unlock()
		st.synced.Broadcast()
	}
	return *st.broken.Load()
}

// brokenErr returns why the store is broken, or nil.
func (st *boltStore) brokenErr() error {
	if p := st.broken.Load(); p != nil {
		return *p
	}
	return nil
}

// Clock reads the local clock (Options' seam in tests) and its high-water
// mark.
func (st *boltStore) Clock() (now, mark time.Time) {
	now = st.opts.now()
	st.mu.Lock()
	defer st.mu.Unlock()
	return now, st.hwm
}

// Info describes the file: its path, shared with no other process (it is
// locked to one Queue, see lockSuffix), and the records Open quarantined.
func (st *boltStore) Info() StoreInfo {
	st.mu.Lock()
	defer st.mu.Unlock()
	return StoreInfo{Location: st.path, Damaged: st.damaged}
}

// recover prepares a freshly opened file: it checks the layout, rebuilds the
// index by one scan of the records, quarantines damaged records, returns
// records left in flight by a crash to pending, and removes settled records
// past their retention. A panic inside bbolt, which a damaged page can cause,
// becomes ErrDamaged; the transaction then never commits, so the file is left
// as it was.
func (st *boltStore) recover() (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %s: %v", ErrDamaged, st.path, p)
		}
	}()
	now := st.opts.now()
	txn := st.db.Update
	if st.opts.ReadOnly {
		txn = st.db.View
	}
	var txid int
	err = txn(func(tx *bolt.Tx) error {
		txid = tx.ID()
		st.idx = index{lanes: map[string]*lane{}}
		b, err := open(tx)
		if err != nil {
			return err
		}
		switch v := getUint(b.meta, metaSchema); v {
		case 0:
			if b.records.Stats().KeyN > 0 {
				return fmt.Errorf("%w: %s has records but no layout version", ErrDamaged, st.path)
			}
			if st.opts.ReadOnly {
				break
			}
			if err := putUint(b.meta, metaSchema, schemaVersion); err != nil {
				return err
			}
		case schemaVersion:
		default:
			return fmt.Errorf("%w: %s has layout version %d, this build reads %d", ErrDamaged, st.path, v, schemaVersion)
		}
		st.hwm = binenc.FromNanos(int64(getUint(b.meta, metaHWM)))
		return st.scan(b, now)
	})
	if err != nil {
		return err
	}
	if st.opts.ReadOnly {
		return nil
	}
	st.marked(uint64(txid))
	for _, l := range st.idx.lanes {
		l.nextAt = now
		st.ready.push(l)
	}
	_, err = st.sweep(now)
	return err
}

// scan rebuilds the index from the records, checking each (checkRecord).
// A record that fails is quarantined (see quarantined): settled as failed,
// which takes it out of its lane, and kept in st.damaged for Run to
// report. In-flight records return to pending (see orphaned). The gone
// ranges are checked against the records (see traceGone).
func (st *boltStore) scan(b buckets, now time.Time) error {
	var (
		stale, damaged []*Record
		kept           gaps
	)
	st.damaged = nil
	c := b.records.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if len(k) != 8 {
			return fmt.Errorf("%w: bad record key %x", ErrDamaged, k)
		}
		id := ID(binary.BigEndian.Uint64(k))
		kept.next(id)
		s, settledAt, laneName, err := checkRecord(v, id)
		var r *Record
		if err == nil && s == InFlight {
			r, err = decodeRecord(v) // to return it to pending
		}
		switch {
		case errors.Is(err, errWrongKey) && !st.opts.ReadOnly:
			// The page is damaged, not the record: a write there would
			// damage the tree (Open's checkStructure finds this first).
			return fmt.Errorf("%w: %s: record key %d: %v", ErrDamaged, st.path, id, err)
		case err != nil:
			damaged = append(damaged, quarantined(id, v, err, now))
			continue
		}
		st.idx.counts[s]++
		if s.Settled() {
			st.idx.settled = append(st.idx.settled, settledEntry{settledAt, id})
			continue
		}
		st.idx.active += int64(len(v))
		l := st.idx.lane(laneName)
		l.ids = append(l.ids, id) // the cursor goes in ID order
		if r != nil {
			stale = append(stale, r)
		}
	}
	if st.opts.ReadOnly { // shown as stored: damaged records stay out of the index
		return nil
	}
	if err := b.traceGone(&kept); err != nil {
		return err
	}
	// Written after the scan: a cursor does not survive writes to its
	// bucket.
	for _, r := range damaged {
		if _, err := b.put(r); err != nil {
			return err
		}
		st.idx.counts[r.State]++
		st.idx.settled = append(st.idx.settled, settledEntry{binenc.Nanos(r.SettledAt), r.ID})
	}
	st.damaged = damaged
	slices.SortFunc(st.idx.settled, cmpSettled)
	for _, r := range stale {
		orphaned(r)
		oldSize, newSize, _, err := b.replace(r, InFlight)
		if err != nil {
			return err
		}
		st.idx.moved(r, InFlight, oldSize, newSize)
	}
	return nil
}
