package queue

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
)

// newestMeta returns the offset in file, a queue file, of its meta page
// with the higher transaction ID, and that ID.
func newestMeta(t *testing.T, file []byte) (off int64, txid uint64) {
	t.Helper()
	first, ok := readMeta(file)
	require.True(t, ok, "meta page 0")
	second, ok := readMeta(file[first.pageSize:])
	require.True(t, ok, "meta page 1")
	if second.txid > first.txid {
		return int64(first.pageSize), second.txid
	}
	return 0, first.txid
}

// flipNewestMeta flips a bit of the root page id in the newest meta page of
// the file at path, as a bad sector would: bbolt then takes the other one.
func flipNewestMeta(t *testing.T, path string) {
	t.Helper()
	file, err := os.ReadFile(path)
	require.NoError(t, err)
	off, _ := newestMeta(t, file)
	file[off+metaHeader+16] ^= 0x04
	require.NoError(t, os.WriteFile(path, file, 0o600))
}

// TestMetaFlipLosesAcknowledgedCommit: a flipped bit in the newest meta page
// makes bbolt open the file as the commit before left it. The last commit,
// an Enqueue, a settle or a Discard, returned to its caller: Open refuses
// the file (ErrDamaged), naming the one commit lost, instead of losing the
// record, sending a record already done again, or bringing a discarded one
// back. It opens ReadOnly; Salvage accepts the loss (LostCommits 1), after
// which it opens as the commit before left it, and again after that.
func TestMetaFlipLosesAcknowledgedCommit(t *testing.T) {
	tests := []struct {
		name string
		last func(t *testing.T, q *Queue, clk *clock, id ID) // the last commit, on record id
		want State                                           // record id after the loss is accepted
	}{
		{"an enqueue", func(t *testing.T, q *Queue, _ *clock, _ ID) {
			_, err := q.Enqueue(context.Background(), post(t, url, 9, idem.WithKey("last")))
			require.NoError(t, err)
		}, Pending},
		{"a settle", func(t *testing.T, q *Queue, clk *clock, id ID) {
			r, err := q.Get(context.Background(), id)
			require.NoError(t, err)
			markLeased(r, clk.Now())
			require.NoError(t, q.st.Put(context.Background(), Pending, r))
			markSettled(r, Done, idem.Applied, "", nil, clk.Now())
			require.NoError(t, q.st.Put(context.Background(), InFlight, r))
		}, Pending},
		{"a discard", func(t *testing.T, q *Queue, _ *clock, id ID) {
			require.NoError(t, q.Discard(context.Background(), id))
		}, Pending},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newClock()
			path := filepath.Join(t.TempDir(), "q.db")
			q := reopen(t, path, Options{now: clk.Now})
			var ids []ID
			for i := range 3 {
				id, err := q.Enqueue(context.Background(), post(t, url, i, idem.WithKey(fmt.Sprint("key-", i))))
				require.NoError(t, err)
				ids = append(ids, id)
			}
			tt.last(t, q, clk, ids[1])
			require.NoError(t, q.Close())
			flipNewestMeta(t, path)

			_, err := Open(path, Options{now: clk.Now})
			require.ErrorIs(t, err, ErrDamaged, "the last commit was acknowledged")
			assert.Contains(t, err.Error(), "1 acknowledged commit lost")

			ro, err := Open(path, Options{ReadOnly: true})
			require.NoError(t, err, "it opens ReadOnly")
			require.NoError(t, ro.Close())

			rep, err := Salvage(path, Options{})
			require.NoError(t, err)
			assert.False(t, rep.Sound(), "%+v", rep)
			assert.Equal(t, 1, rep.LostCommits)
			require.NotEmpty(t, rep.Kept)

			q = reopen(t, path, Options{now: clk.Now})
			r, err := q.Get(context.Background(), ids[1])
			require.NoError(t, err)
			assert.Equal(t, tt.want, r.State, "as the commit before left it")
			require.NoError(t, q.Close())
			q = reopen(t, path, Options{now: clk.Now})
			require.NoError(t, q.Close())
		})
	}
}

// TestTornMetaIsNoAlarm: a power cut during a commit's meta page write
// leaves the file's pages of that commit, its meta page torn, and the lock
// file as the commit before left it: the commit never returned, so the
// queue's mark is behind it. bbolt opens the file as the commit before left
// it, which is all that was acknowledged: Open says nothing, and the
// record of the commit cut short is not there. The same file with the mark
// of that commit (it returned, and the meta page went bad later) is
// refused.
func TestTornMetaIsNoAlarm(t *testing.T) {
	for _, acked := range []bool{false, true} {
		t.Run(fmt.Sprintf("acknowledged %v", acked), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "q.db")
			q := reopen(t, path, Options{})
			ctx := context.Background()
			first, err := q.Enqueue(ctx, post(t, url, 1))
			require.NoError(t, err)
			lockBefore, err := os.ReadFile(path + lockSuffix)
			require.NoError(t, err)
			fileBefore, err := os.ReadFile(path)
			require.NoError(t, err)

			second, err := q.Enqueue(ctx, post(t, url, 2)) // the commit the power cut tears
			require.NoError(t, err)
			require.NoError(t, q.Close())
			file, err := os.ReadFile(path)
			require.NoError(t, err)
			off, _ := newestMeta(t, file)
			// The first half of the meta page reached the disk, the rest
			// is what the slot held before: the meta page of two commits
			// back.
			half := off + metaSize/2
			copy(file[half:off+metaSize], fileBefore[half:off+metaSize])
			require.NoError(t, os.WriteFile(path, file, 0o600))
			if !acked {
				require.NoError(t, os.WriteFile(path+lockSuffix, lockBefore, 0o600))
			}

			q, err = Open(path, Options{})
			if acked {
				require.ErrorIs(t, err, ErrDamaged)
				assert.Contains(t, err.Error(), "1 acknowledged commit lost")
				return
			}
			require.NoError(t, err, "a commit that never returned may vanish")
			defer q.Close()
			_, err = q.Get(ctx, first)
			assert.NoError(t, err, "the acknowledged record is there")
			_, err = q.Get(ctx, second)
			assert.ErrorIs(t, err, ErrNotFound, "the torn commit's record is not")
		})
	}
}

// TestCommitMarkNoFalseAlarm: files that start their transaction IDs again
// (a compaction's copy, a salvage's, a queue file removed beside its lock
// file) open without a word, as does a file reopened many times.
func TestCommitMarkNoFalseAlarm(t *testing.T) {
	tests := []struct {
		name string
		do   func(t *testing.T, path string)
	}{
		{"reopened", func(t *testing.T, path string) {
			for range 5 {
				q := reopen(t, path, Options{})
				_, err := q.Enqueue(context.Background(), post(t, url, 1))
				require.NoError(t, err)
				require.NoError(t, q.Close())
			}
		}},
		{"salvaged", func(t *testing.T, path string) {
			file, err := os.ReadFile(path)
			require.NoError(t, err)
			offs := keyOffsets(t, file)
			file[offs[ID(len(offs)/2)]+7] ^= 0x40
			require.NoError(t, os.WriteFile(path, file, 0o600))
			rep, err := Salvage(path, Options{})
			require.NoError(t, err)
			require.False(t, rep.Sound())
			assert.Zero(t, rep.LostCommits)
		}},
		{"removed", func(t *testing.T, path string) {
			require.NoError(t, os.Remove(path))
		}},
		{"compacted", func(t *testing.T, path string) {
			q := reopen(t, path, Options{})
			var ids []ID
			for i := range 160 {
				in, err := idem.NewIntent("POST", url, bytes.Repeat([]byte{byte(i)}, 40<<10))
				require.NoError(t, err)
				id, err := q.Enqueue(context.Background(), in)
				require.NoError(t, err)
				ids = append(ids, id)
			}
			for _, id := range ids {
				require.NoError(t, q.Discard(context.Background(), id))
			}
			require.NoError(t, q.Close())
			before, err := os.Stat(path)
			require.NoError(t, err)
			q = reopen(t, path, Options{})
			require.NoError(t, q.Close())
			after, err := os.Stat(path)
			require.NoError(t, err)
			require.Less(t, after.Size(), before.Size(), "compacted")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "q.db")
			fillQueue(t, path, 20)
			tt.do(t, path)
			q, err := Open(path, Options{LockTimeout: time.Second})
			require.NoError(t, err)
			require.NoError(t, q.Close())
		})
	}
}

// TestOpenSalvagesLostCommits: with Options.SalvageDamaged, Open accepts
// the loss itself, as a device with no operator must, and reports it.
func TestOpenSalvagesLostCommits(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.db")
	fillQueue(t, path, 3)
	flipNewestMeta(t, path)

	var reports []SalvageReport
	q := reopen(t, path, Options{SalvageDamaged: func(r SalvageReport) { reports = append(reports, r) }})
	require.Len(t, reports, 1)
	assert.Equal(t, 1, reports[0].LostCommits)
	c, err := q.Counts(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 2, c[Pending], "the records of the commits before")
}
