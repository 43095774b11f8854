package queue

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// The file's layout. Every change to a record updates its indexes and the
// counters in the same transaction.
var (
	// bucketRecords maps ID (8 bytes, big-endian) to the encoded record.
	bucketRecords = []byte("records")
	// bucketActive maps laneKey(lane)+ID to the state byte of every
	// pending or in-flight record: a lane's head is its first key.
	bucketActive = []byte("active")
	// bucketSettled maps SettledAt (8 bytes) + ID to nothing, in the
	// order retention removes them.
	bucketSettled = []byte("settled")
	// bucketKeys maps an idempotency key to its record's ID.
	bucketKeys = []byte("keys")
	// bucketMeta holds the schema version, the clock's high-water mark and
	// the counters.
	bucketMeta = []byte("meta")
)

var (
	metaSchema = []byte("schema")
	metaHWM    = []byte("hwm")
	metaBytes  = []byte("bytes") // encoded size of unsettled records
)

// schemaVersion is the layout version; Open refuses others.
const schemaVersion = 1

func metaCount(s State) []byte { return []byte{'n', byte(s)} }

func idKey(id ID) []byte { return binary.BigEndian.AppendUint64(make([]byte, 0, 8), uint64(id)) }

// laneKey is the prefix of a lane's keys in bucketActive: its length, then
// its bytes, so that no lane's prefix is another's.
func laneKey(lane string) []byte {
	b := binary.AppendUvarint(make([]byte, 0, len(lane)+10), uint64(len(lane)))
	return append(b, lane...)
}

func activeKey(lane string, id ID) []byte {
	return binary.BigEndian.AppendUint64(laneKey(lane), uint64(id))
}

// splitActiveKey returns the lane and ID of a bucketActive key.
func splitActiveKey(k []byte) (string, ID, error) {
	n, w := binary.Uvarint(k)
	if w <= 0 || uint64(len(k)-w) != n+8 {
		return "", 0, fmt.Errorf("%w: bad index key %x", ErrDamaged, k)
	}
	return string(k[w : w+int(n)]), ID(binary.BigEndian.Uint64(k[w+int(n):])), nil
}

func settledKey(at time.Time, id ID) []byte {
	b := binary.BigEndian.AppendUint64(make([]byte, 0, 16), uint64(nanos(at)))
	return binary.BigEndian.AppendUint64(b, uint64(id))
}

// buckets are the open buckets of one transaction.
type buckets struct {
	records, active, settled, keys, meta *bolt.Bucket
}

// open returns the buckets of tx, creating them in a write transaction.
func open(tx *bolt.Tx) (buckets, error) {
	var b buckets
	ptrs := [...]struct {
		dst  **bolt.Bucket
		name []byte
	}{{&b.records, bucketRecords}, {&b.active, bucketActive}, {&b.settled, bucketSettled}, {&b.keys, bucketKeys}, {&b.meta, bucketMeta}}
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

func addUint(bk *bolt.Bucket, k []byte, delta int64) error {
	v := int64(getUint(bk, k)) + delta
	if v < 0 {
		v = 0
	}
	return putUint(bk, k, uint64(v))
}

// get reads and decodes record id; nil when there is none.
func (b buckets) get(id ID) (*Record, []byte, error) {
	data := b.records.Get(idKey(id))
	if data == nil {
		return nil, nil, nil
	}
	r, err := decodeRecord(data)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: record %d: %v", ErrDamaged, id, err)
	}
	if r.ID != id {
		return nil, nil, fmt.Errorf("%w: record %d holds ID %d", ErrDamaged, id, r.ID)
	}
	return r, data, nil
}

// insert stores a new record and indexes it.
func (b buckets) insert(r *Record) (int, error) {
	data, err := r.encode()
	if err != nil {
		return 0, err
	}
	if err := b.records.Put(idKey(r.ID), data); err != nil {
		return 0, err
	}
	if err := b.active.Put(activeKey(r.Intent.Lane(), r.ID), []byte{byte(r.State)}); err != nil {
		return 0, err
	}
	if k := r.Intent.Key(); k != "" {
		if err := b.keys.Put([]byte(k), idKey(r.ID)); err != nil {
			return 0, err
		}
	}
	if err := addUint(b.meta, metaCount(r.State), 1); err != nil {
		return 0, err
	}
	return len(data), addUint(b.meta, metaBytes, int64(len(data)))
}

// update stores r, which was old (as stored, oldLen bytes), and moves it
// between the indexes as its state requires.
func (b buckets) update(old State, oldLen int, r *Record) error {
	data, err := r.encode()
	if err != nil {
		return err
	}
	if err := b.records.Put(idKey(r.ID), data); err != nil {
		return err
	}
	ak := activeKey(r.Intent.Lane(), r.ID)
	switch {
	case r.State.Settled() && !old.Settled():
		if err := b.active.Delete(ak); err != nil {
			return err
		}
		if err := b.settled.Put(settledKey(r.SettledAt, r.ID), nil); err != nil {
			return err
		}
		if err := addUint(b.meta, metaBytes, -int64(oldLen)); err != nil {
			return err
		}
	case !r.State.Settled():
		if err := b.active.Put(ak, []byte{byte(r.State)}); err != nil {
			return err
		}
		if err := addUint(b.meta, metaBytes, int64(len(data)-oldLen)); err != nil {
			return err
		}
	}
	if old != r.State {
		if err := addUint(b.meta, metaCount(old), -1); err != nil {
			return err
		}
		return addUint(b.meta, metaCount(r.State), 1)
	}
	return nil
}

// remove deletes r, stored as dataLen bytes, and its index entries.
func (b buckets) remove(r *Record, dataLen int) error {
	if err := b.records.Delete(idKey(r.ID)); err != nil {
		return err
	}
	if r.State.Settled() {
		if err := b.settled.Delete(settledKey(r.SettledAt, r.ID)); err != nil {
			return err
		}
	} else {
		if err := b.active.Delete(activeKey(r.Intent.Lane(), r.ID)); err != nil {
			return err
		}
		if err := addUint(b.meta, metaBytes, -int64(dataLen)); err != nil {
			return err
		}
	}
	if k := r.Intent.Key(); k != "" {
		if v := b.keys.Get([]byte(k)); bytes.Equal(v, idKey(r.ID)) {
			if err := b.keys.Delete([]byte(k)); err != nil {
				return err
			}
		}
	}
	return addUint(b.meta, metaCount(r.State), -1)
}

// head returns the first record of lane, or nil when the lane is empty.
func (b buckets) head(lane string) (*Record, []byte, error) {
	prefix := laneKey(lane)
	k, _ := b.active.Cursor().Seek(prefix)
	if k == nil || !bytes.HasPrefix(k, prefix) {
		return nil, nil, nil
	}
	_, id, err := splitActiveKey(k)
	if err != nil {
		return nil, nil, err
	}
	r, data, err := b.get(id)
	if err == nil && r == nil {
		err = fmt.Errorf("%w: index names record %d, which is missing", ErrDamaged, id)
	}
	return r, data, err
}

// recover prepares a freshly opened file: it checks the schema, returns
// records left in flight to pending, loads the lanes and the clock's
// high-water mark, and removes settled records past their retention. A panic
// inside bbolt, which a damaged page can cause, becomes ErrDamaged; the
// transaction then never commits, so the file is left as it was.
func (q *Queue) recover() (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %s: %v", ErrDamaged, q.path, p)
		}
	}()
	err = q.db.Update(func(tx *bolt.Tx) error {
		b, err := open(tx)
		if err != nil {
			return err
		}
		switch v := getUint(b.meta, metaSchema); v {
		case 0:
			if err := putUint(b.meta, metaSchema, schemaVersion); err != nil {
				return err
			}
		case schemaVersion:
		default:
			return fmt.Errorf("%w: %s has layout version %d, this build reads %d", ErrDamaged, q.path, v, schemaVersion)
		}
		q.hwm = fromNanos(int64(getUint(b.meta, metaHWM)))
		return q.loadLanes(b)
	})
	if err != nil {
		return err
	}
	_, err = q.sweep(q.opts.now())
	return err
}

// loadLanes counts each lane's records and returns in-flight ones to
// pending.
func (q *Queue) loadLanes(b buckets) error {
	var stale []ID
	c := b.active.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		name, id, err := splitActiveKey(k)
		if err != nil {
			return err
		}
		if len(v) == 1 && State(v[0]) == InFlight {
			stale = append(stale, id)
		}
		l := q.lanes[name]
		if l == nil {
			l = &lane{name: name, index: -1}
			q.lanes[name] = l
		}
		l.count++
	}
	for _, id := range stale {
		r, data, err := b.get(id)
		if err != nil {
			return err
		}
		if r == nil {
			return fmt.Errorf("%w: index names record %d, which is missing", ErrDamaged, id)
		}
		// The attempt may have reached the server and nobody saw its end:
		// keep FirstSentAt and count it as ambiguous.
		r.State, r.Ambiguous, r.leaseSetFirstSent = Pending, true, false
		if err := b.update(InFlight, len(data), r); err != nil {
			return err
		}
	}
	now := q.opts.now()
	for _, l := range q.lanes {
		l.nextAt = now
		q.ready.push(l)
	}
	return nil
}
