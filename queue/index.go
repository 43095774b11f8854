package queue

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/idem-go/idem/internal/binenc"
)

// index is what the queue knows of its file in memory: counts, sizes and
// orders that would cost a page per commit on disk. Open builds it by one
// scan; every commit updates it after it succeeds. The store's mutex guards it.
type index struct {
	counts  [Expired + 1]int
	active  int64 // encoded bytes of unsettled records
	lanes   map[string]*lane
	settled []settledEntry // by settle time, for removal after KeepSettled
	// reserved holds room promised to enqueues whose commit is under way.
	reservedItems int
	reservedBytes int64
}

type settledEntry struct {
	at int64 // SettledAt, in nanoseconds
	id ID
}

func (x *index) unsettled() int { return x.counts[Pending] + x.counts[InFlight] }

// lane returns the lane called name, creating it.
func (x *index) lane(name string) *lane {
	l := x.lanes[name]
	if l == nil {
		l = &lane{name: name, index: -1}
		x.lanes[name] = l
	}
	return l
}

// added notes a new pending record.
func (x *index) added(id ID, lane string, size int) *lane {
	x.counts[Pending]++
	x.active += int64(size)
	l := x.lane(lane)
	l.add(id)
	return l
}

// moved notes that record r went from state old (oldSize bytes) to its
// current state (newSize bytes).
func (x *index) moved(r *Record, old State, oldSize, newSize int) {
	x.counts[old]--
	x.counts[r.State]++
	switch {
	case r.State.Settled() && !old.Settled():
		x.active -= int64(oldSize)
		if l := x.lanes[r.lane()]; l != nil {
			l.drop(r.ID)
		}
		x.addSettled(settledEntry{binenc.Nanos(r.SettledAt), r.ID})
	case !r.State.Settled():
		x.active += int64(newSize - oldSize)
	}
}

// removed notes that record r (size bytes) was deleted.
func (x *index) removed(r *Record, size int) {
	x.counts[r.State]--
	if r.State.Settled() {
		e := settledEntry{binenc.Nanos(r.SettledAt), r.ID}
		if i, ok := slices.BinarySearchFunc(x.settled, e, cmpSettled); ok {
			x.settled = slices.Delete(x.settled, i, i+1)
		}
		return
	}
	x.active -= int64(size)
	if l := x.lanes[r.lane()]; l != nil {
		l.drop(r.ID)
	}
}

func (x *index) addSettled(e settledEntry) {
	i, _ := slices.BinarySearchFunc(x.settled, e, cmpSettled)
	x.settled = slices.Insert(x.settled, i, e)
}

// dropSettled removes the entries of due, sorted, from the settled order in
// one pass. A sweep takes the oldest entries, at the front: deleting them one
// at a time would shift the whole order, under the store's mutex, for each.
func (x *index) dropSettled(due []settledEntry) {
	if len(due) == 0 {
		return
	}
	s := x.settled
	end, found := slices.BinarySearchFunc(s, due[len(due)-1], cmpSettled)
	if found {
		end++
	}
	head := slices.DeleteFunc(s[:end], func(e settledEntry) bool {
		_, ok := slices.BinarySearchFunc(due, e, cmpSettled)
		return ok
	})
	x.settled = append(head, s[end:]...)
}

func cmpSettled(a, b settledEntry) int {
	return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.id, b.id))
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
	err = txn(func(tx *bolt.Tx) error {
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
// report. In-flight records return to pending (see orphaned).
func (st *boltStore) scan(b buckets, now time.Time) error {
	var stale, damaged []*Record
	st.damaged = nil
	c := b.records.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if len(k) != 8 {
			return fmt.Errorf("%w: bad record key %x", ErrDamaged, k)
		}
		id := ID(binary.BigEndian.Uint64(k))
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

// orphaned returns r, left in flight with nobody to see its attempt end (a
// crash, a failed result commit), to pending: the attempt may have reached
// the server, so r keeps FirstSentAt and counts as in doubt.
func orphaned(r *Record) {
	r.State, r.InDoubt, r.leaseSetFirstSent = Pending, true, false
}
