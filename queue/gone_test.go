package queue

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
)

// TestMarkGone: removing records one at a time, in any order, leaves the
// gone ranges merged.
func TestMarkGone(t *testing.T) {
	tests := []struct {
		name    string
		removed []ID
		want    []idRange
	}{
		{"one", []ID{5}, []idRange{{5, 5}}},
		{"apart", []ID{5, 9}, []idRange{{5, 5}, {9, 9}}},
		{"after", []ID{5, 6}, []idRange{{5, 6}}},
		{"before", []ID{6, 5}, []idRange{{5, 6}}},
		{"between", []ID{4, 6, 5}, []idRange{{4, 6}}},
		{"into a run", []ID{1, 2, 3, 7, 8, 5, 4, 6}, []idRange{{1, 8}}},
		{"twice", []ID{5, 6, 5, 6}, []idRange{{5, 6}}},
		{"the first ID", []ID{2, 1}, []idRange{{1, 2}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db, err := bolt.Open(filepath.Join(t.TempDir(), "q.db"), 0o600, nil)
			require.NoError(t, err)
			defer db.Close()
			var got []idRange
			require.NoError(t, db.Update(func(tx *bolt.Tx) error {
				b, err := open(tx)
				require.NoError(t, err)
				require.NoError(t, putUint(b.meta, metaHWM, 1)) // a neighbour that is no range
				for _, id := range tt.removed {
					require.NoError(t, b.markGone(id))
				}
				got = b.goneRanges()
				return nil
			}))
			assert.Equal(t, tt.want, got, "removed %v", tt.removed)
		})
	}
}

// goneOf reads the gone ranges and the records' IDs and sequence of the
// file at path.
func goneOf(t *testing.T, path string) (gone []idRange, ids []ID, seq uint64) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	require.NoError(t, err)
	defer db.Close()
	require.NoError(t, db.View(func(tx *bolt.Tx) error {
		b, err := open(tx)
		require.NoError(t, err)
		gone, seq = b.goneRanges(), b.records.Sequence()
		return b.records.ForEach(func(k, _ []byte) error {
			ids = append(ids, ID(binary.BigEndian.Uint64(k)))
			return nil
		})
	}))
	return gone, ids, seq
}

// complement is what the gone ranges must be: every ID up to seq that ids,
// sorted, does not hold.
func complement(ids []ID, seq uint64) []idRange {
	var g gaps
	for _, id := range ids {
		g.next(id)
	}
	return g.upTo(seq)
}

// TestGoneFollowsRemovals: after discards, sweeps and reopens, the gone
// ranges are exactly the IDs issued that the file no longer holds; Open
// rewrites ranges that disagree (an older build removes records without
// them), and a salvaged file has them too.
func TestGoneFollowsRemovals(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.db")
	h := buildHistory(t, path, 120)
	gone, ids, seq := goneOf(t, path)
	assert.Equal(t, uint64(120), seq)
	require.Len(t, ids, len(h.truth))
	assert.Equal(t, complement(ids, seq), gone)
	var want []ID
	for id := range h.gone {
		want = append(want, id)
	}
	slices.Sort(want)
	var got []ID
	for _, r := range gone {
		for id := r.first; id <= r.last; id++ {
			got = append(got, id)
		}
	}
	assert.Equal(t, want, got, "the records discarded or swept, and no other")

	// As an older build leaves them: removals without a trace.
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	require.NoError(t, err)
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		b, err := open(tx)
		require.NoError(t, err)
		require.NoError(t, b.meta.Delete(goneKey(gone[1].first)))
		return b.records.Delete(idKey(ids[len(ids)-1]))
	}))
	require.NoError(t, db.Close())
	q := reopen(t, path, Options{KeepSettled: 1000 * time.Hour})
	require.NoError(t, q.Close())
	gone, ids, seq = goneOf(t, path)
	assert.Equal(t, complement(ids, seq), gone, "Open rewrote them")

	// Salvage writes them, and the sequence, into the fresh file.
	file, err := os.ReadFile(path)
	require.NoError(t, err)
	file[keyOffsets(t, file)[ids[0]]+7] ^= 0x40
	require.NoError(t, os.WriteFile(path, file, 0o600))
	rep, err := Salvage(path, Options{})
	require.NoError(t, err)
	require.False(t, rep.Sound())
	gone2, ids2, seq2 := goneOf(t, path)
	assert.Equal(t, ids, ids2)
	assert.Equal(t, seq, seq2)
	assert.Equal(t, gone, gone2)
}

// TestSalvageIssuesNoIDTwice: a salvaged file goes on with the IDs of the
// damaged one. It used to start again at 1, and the next Enqueue wrote
// over record 1.
func TestSalvageIssuesNoIDTwice(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.db")
	file, stored := fillQueue(t, path, 50)
	damaged := bytes.Clone(file)
	damaged[keyOffsets(t, file)[20]+7] ^= 0x40
	require.NoError(t, os.WriteFile(path, damaged, 0o600))
	rep, err := Salvage(path, Options{})
	require.NoError(t, err)
	require.Equal(t, 50, rep.Recovered)

	q := reopen(t, path, Options{})
	id, err := q.Enqueue(context.Background(), post(t, url, 99))
	require.NoError(t, err)
	assert.Equal(t, ID(51), id, "the next ID")
	require.NoError(t, q.Close())
	got := storedRecords(t, path)
	assert.Equal(t, 51, len(got), "records in the file")
	assert.True(t, bytes.Equal(stored[1], got[1]), "record 1 as it was")
}
