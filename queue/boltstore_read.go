package queue

import (
	"errors"
	"fmt"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Get returns record id, or ErrNotFound.
func (st *boltStore) Get(id ID) (*Record, error) {
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
func (st *boltStore) List(s State, after ID, limit int) ([]*Record, error) {
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

// Counts returns how many records are in each state.
func (st *boltStore) Counts() (map[State]int, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	out := make(map[State]int, 5)
	for _, s := range states() {
		out[s] = st.idx.counts[s]
	}
	return out, nil
}

// OldestUnsettled returns when the oldest unsettled record was enqueued; the
// zero Time when there is none.
func (st *boltStore) OldestUnsettled() (time.Time, error) {
	st.mu.Lock()
	heads := make([]ID, 0, len(st.idx.lanes))
	for _, l := range st.idx.lanes {
		if id, ok := l.head(); ok {
			heads = append(heads, id)
		}
	}
	st.mu.Unlock()
	if len(heads) == 0 {
		return time.Time{}, nil
	}
	// IDs grow in enqueue order: the oldest record is the smallest head.
	r, err := st.Get(slices.Min(heads))
	if errors.Is(err, ErrNotFound) {
		return time.Time{}, nil // settled meanwhile
	}
	if err != nil {
		return time.Time{}, err
	}
	return r.EnqueuedAt, nil
}
