package queue

import (
	"bytes"
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

// The file's layout is three buckets. An enqueue writes one record (and a
// supplied key), an attempt rewrites it twice: every extra page a commit
// dirties lengthens its fsync, so indexes live in memory, rebuilt by one scan
// at Open (see index).
var (
	// bucketRecords maps ID (8 bytes, big-endian) to the encoded record.
	bucketRecords = []byte("records")
	// bucketKeys maps a supplied idempotency key to its record's ID. A
	// generated key is new by construction and needs no entry.
	bucketKeys = []byte("keys")
	// bucketMeta holds the layout version and the clock's high-water mark.
	bucketMeta = []byte("meta")
)

var (
	metaSchema = []byte("schema")
	metaHWM    = []byte("hwm")
)

// recordsFill is the records bucket's bbolt FillPercent.
const recordsFill = 0.9

// schemaVersion is the layout version; Open refuses others.
const schemaVersion = 1

func idKey(id ID) []byte { return binary.BigEndian.AppendUint64(make([]byte, 0, 8), uint64(id)) }

// buckets are the open buckets of one transaction.
type buckets struct {
	records, keys, meta *bolt.Bucket
}

// open returns the buckets of tx, creating them in a write transaction.
func open(tx *bolt.Tx) (buckets, error) {
	var b buckets
	ptrs := [...]struct {
		dst  **bolt.Bucket
		name []byte
	}{{&b.records, bucketRecords}, {&b.keys, bucketKeys}, {&b.meta, bucketMeta}}

	for _, p := range ptrs {
		if tx.Writable() {
			bk, err := tx.CreateBucketIfNotExists(p.name)
			if err != nil {
				return b, err
			}
			*p.dst = bk
			continue
		}
		if *p.dst = tx.Bucket(p.name); *p.dst == nil {
			return b, fmt.Errorf("%w: bucket %q missing", ErrDamaged, p.name)
		}
	}
	if tx.Writable() {
		// IDs only grow, so new records land on the last page: fill pages
		// up instead of bbolt's half, which would double the file.
		b.records.FillPercent = recordsFill
	}
	return b, nil
}

func getUint(bk *bolt.Bucket, k []byte) uint64 {
	v := bk.Get(k)
	if len(v) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(v)
}

func putUint(bk *bolt.Bucket, k []byte, v uint64) error {
	return bk.Put(k, binary.BigEndian.AppendUint64(make([]byte, 0, 8), v))
}

// get reads and decodes record id; nil when there is none. It also returns
// the record's stored size.
func (b buckets) get(id ID) (*Record, int, error) {
	data := b.records.Get(idKey(id))
	if data == nil {
		return nil, 0, nil
	}
	r, err := decodeRecord(data)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: record %d: %v", ErrDamaged, id, err)
	}
	if r.ID != id {
		return nil, 0, fmt.Errorf("%w: record %d holds ID %d", ErrDamaged, id, r.ID)
	}
	return r, len(data), nil
}

// put stores r and returns its size.
func (b buckets) put(r *Record) (int, error) {
	data, err := r.encode()
	if err != nil {
		return 0, err
	}
	return len(data), b.records.Put(idKey(r.ID), data)
}

// insert stores a new record, and its key if supplied.
func (b buckets) insert(r *Record) (int, error) {
	n, err := b.put(r)
	if err != nil {
		return 0, err
	}
	if r.Intent.KeySupplied() {
		err = b.keys.Put([]byte(r.Intent.Key()), idKey(r.ID))
	}
	return n, err
}

// replace stores r over its stored self only if that is still in state
// want: a record discarded or settled meanwhile is not brought back. It
// returns the old and new sizes; ok is false when the record moved on.
func (b buckets) replace(r *Record, want State) (oldSize, newSize int, ok bool, err error) {
	cur := b.records.Get(idKey(r.ID))
	if cur == nil || len(cur) <= stateOffset || State(cur[stateOffset]) != want {
		return 0, 0, false, nil
	}
	oldSize = len(cur)
	newSize, err = b.put(r)
	return oldSize, newSize, err == nil, err
}

// remove deletes r and its key. A damaged record without intent leaves its
// key's entry, if it had one, pointing nowhere, which sameKey takes as free.
func (b buckets) remove(r *Record) error {
	if err := b.records.Delete(idKey(r.ID)); err != nil {
		return err
	}
	if r.Intent == nil {
		return nil
	}
	if k := r.Intent.Key(); r.Intent.KeySupplied() {
		if v := b.keys.Get([]byte(k)); bytes.Equal(v, idKey(r.ID)) {
			return b.keys.Delete([]byte(k))
		}
	}
	return nil
}

// index is what the queue knows of its file in memory: counts, sizes and
// orders that would cost a page per commit on disk. Open builds it by one
// scan; every commit updates it after it succeeds. Queue.mu guards it.
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
// at a time would shift the whole order, under Queue.mu, for each.
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
func (q *Queue) recover() (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %s: %v", ErrDamaged, q.path, p)
		}
	}()
	now := q.opts.now()
	txn := q.db.Update
	if q.opts.ReadOnly {
		txn = q.db.View
	}
	err = txn(func(tx *bolt.Tx) error {
		q.idx = index{lanes: map[string]*lane{}}
		b, err := open(tx)
		if err != nil {
			return err
		}
		switch v := getUint(b.meta, metaSchema); v {
		case 0:
			if b.records.Stats().KeyN > 0 {
				return fmt.Errorf("%w: %s has records but no layout version", ErrDamaged, q.path)
			}
			if q.opts.ReadOnly {
				break
			}
			if err := putUint(b.meta, metaSchema, schemaVersion); err != nil {
				return err
			}
		case schemaVersion:
		default:
			return fmt.Errorf("%w: %s has layout version %d, this build reads %d", ErrDamaged, q.path, v, schemaVersion)
		}
		q.hwm = binenc.FromNanos(int64(getUint(b.meta, metaHWM)))
		return q.scan(b, now)
	})
	if err != nil {
		return err
	}
	if q.opts.ReadOnly {
		return nil
	}
	for _, l := range q.idx.lanes {
		l.nextAt = now
		q.ready.push(l)
	}
	_, err = q.sweep(now)
	return err
}

// scan rebuilds the index from the records, checking each (checkRecord).
// A record that fails is quarantined (see quarantined): settled as failed,
// which takes it out of its lane, and kept in q.damaged for Run to
// report. In-flight records return to pending (see orphaned).
func (q *Queue) scan(b buckets, now time.Time) error {
	var stale, damaged []*Record
	q.damaged = nil
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
		if err != nil {
			damaged = append(damaged, quarantined(id, v, err, now))
			continue
		}
		q.idx.counts[s]++
		if s.Settled() {
			q.idx.settled = append(q.idx.settled, settledEntry{settledAt, id})
			continue
		}
		q.idx.active += int64(len(v))
		l := q.idx.lane(laneName)
		l.ids = append(l.ids, id) // the cursor goes in ID order
		if r != nil {
			stale = append(stale, r)
		}
	}
	if q.opts.ReadOnly { // shown as stored: damaged records stay out of the index
		return nil
	}
	// Written after the scan: a cursor does not survive writes to its
	// bucket.
	for _, r := range damaged {
		if _, err := b.put(r); err != nil {
			return err
		}
		q.idx.counts[r.State]++
		q.idx.settled = append(q.idx.settled, settledEntry{binenc.Nanos(r.SettledAt), r.ID})
	}
	q.damaged = damaged
	slices.SortFunc(q.idx.settled, cmpSettled)
	for _, r := range stale {
		orphaned(r)
		oldSize, newSize, _, err := b.replace(r, InFlight)
		if err != nil {
			return err
		}
		q.idx.moved(r, InFlight, oldSize, newSize)
	}
	return nil
}

// saveHWM persists the clock's high-water mark when it has moved on by
// hwmStep, or by half of ClockTolerance if that is less: a coarse mark is
// enough against a clock that is wrong by more than ClockTolerance, and it
// keeps most leases to one page. It reads the mark inside the transaction,
// so that a commit never stores a mark ResetClock replaced meanwhile.
func (q *Queue) saveHWM(b buckets) error {
	q.mu.Lock()
	hwm := q.hwm
	q.mu.Unlock()
	if hwm.Sub(binenc.FromNanos(int64(getUint(b.meta, metaHWM)))) < min(hwmStep, q.opts.ClockTolerance/2) {
		return nil
	}
	return putUint(b.meta, metaHWM, uint64(binenc.Nanos(hwm)))
}

// hwmStep is how far the clock moves before its high-water mark is saved.
const hwmStep = time.Minute

// orphaned returns r, left in flight with nobody to see its attempt end (a
// crash, a failed result commit), to pending: the attempt may have reached
// the server, so r keeps FirstSentAt and counts as ambiguous.
func orphaned(r *Record) {
	r.State, r.Ambiguous, r.leaseSetFirstSent = Pending, true, false
}

// errMovedOn is returned by commit when the stored record is no longer in
// the state its writer read, as after an operator's Discard.
var errMovedOn = errors.New("queue: record changed meanwhile")

// commit stores r over its stored self, which must still be in state old,
// runs also in the same transaction, and updates the index.
func (q *Queue) commit(old State, r *Record, also func(buckets) error) error {
	var oldSize, newSize int
	err := q.guard(func() error {
		return q.write(func(tx *bolt.Tx) error {
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
		q.forget(r.lane(), r.ID)
	}
	if err != nil {
		return err
	}
	q.mu.Lock()
	q.idx.moved(r, old, oldSize, newSize)
	q.mu.Unlock()
	return nil
}
