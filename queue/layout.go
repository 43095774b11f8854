package queue

import (
	"bytes"
	"encoding/binary"
	"fmt"

	bolt "go.etcd.io/bbolt"
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
	// bucketMeta holds the layout version, the clock's high-water mark and
	// the gone ranges (see markGone).
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

// remove deletes r and its key, and leaves the trace of a removed record
// (see markGone). A damaged record without intent leaves its key's entry,
// if it had one, pointing nowhere, which sameKey takes as free.
func (b buckets) remove(r *Record) error {
	if err := b.records.Delete(idKey(r.ID)); err != nil {
		return err
	}
	if err := b.markGone(r.ID); err != nil {
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
