package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"

	bolt "go.etcd.io/bbolt"
)

// Get returns record id, or ErrNotFound. ctx is checked before the read
// starts: a bbolt transaction cannot be interrupted.
func (st *boltStore) Get(ctx context.Context, id ID) (*Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return st.get(id)
}

// get is Get.
func (st *boltStore) get(id ID) (*Record, error) {
	var r *Record
	err := st.guard(func() error {
		return st.view(func(tx *bolt.Tx) error {
			b, err := open(tx)
			if err != nil {
				return err
			}
			r, _, err = b.get(id)
			return err
		})
	})
	if err == nil && r == nil {
		err = fmt.Errorf("%w: %d", ErrNotFound, id)
	}
	return r, err
}

// List is List once its arguments are checked.
func (st *boltStore) List(ctx context.Context, s State, after ID, limit int) ([]*Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []*Record
	err := st.guard(func() error {
		return st.view(func(tx *bolt.Tx) error {
			out = out[:0]
			b, err := open(tx)
			if err != nil {
				return err
			}
			c := b.records.Cursor()
			for k, v := c.Seek(idKey(after + 1)); k != nil && len(out) < limit; k, v = c.Next() {
				if s != 0 && (len(v) <= stateOffset || State(v[stateOffset]) != s) {
					continue // filtered on the state byte, without decoding
				}
				r, err := decodeRecord(v)
				if err != nil {
					return fmt.Errorf("%w: record %x: %v", ErrDamaged, k, err)
				}
				out = append(out, r)
			}
			return nil
		})
	})
	return out, err
}

// Stats counts the records in each state, from the index, and reads the
// oldest unsettled one's enqueue time.
func (st *boltStore) Stats(ctx context.Context) (StoreStats, error) {
	if err := ctx.Err(); err != nil {
		return StoreStats{}, err
	}
	st.mu.Lock()
	counts := make(map[State]int, 5)
	for _, s := range states() {
		counts[s] = st.idx.counts[s]
	}
	heads := make([]ID, 0, len(st.idx.lanes))
	for _, l := range st.idx.lanes {
		if id, ok := l.head(); ok {
			heads = append(heads, id)
		}
	}
	st.mu.Unlock()
	out := StoreStats{Counts: counts}
	if len(heads) == 0 {
		return out, nil
	}
	// IDs grow in enqueue order: the oldest record is the smallest head.
	r, err := st.get(slices.Min(heads))
	if errors.Is(err, ErrNotFound) {
		return out, nil // settled meanwhile
	}
	if err != nil {
		return StoreStats{}, err
	}
	out.OldestUnsettled = r.EnqueuedAt
	return out, nil
}
