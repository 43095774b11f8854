package queue

import (
	"context"
	"crypto/sha256"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
)

// TestReadOnly: a read-only Queue reads what is stored and changes nothing:
// not the file, not a record a crash left in flight; every call that would
// write says ErrReadOnly.
func TestReadOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.db")
	q := reopen(t, path, Options{})
	ctx := context.Background()
	var ids []ID
	for i := range 3 {
		id, err := q.Enqueue(ctx, post(t, url, i, idem.WithLane("a")))
		require.NoError(t, err)
		ids = append(ids, id)
	}
	r, err := q.Get(context.Background(), ids[0])
	require.NoError(t, err)
	r.State, r.NumAttempts = InFlight, 1 // as a crash mid-attempt leaves it
	require.NoError(t, q.st.Put(context.Background(), Pending, r))
	require.NoError(t, q.Close())
	before := fileSum(t, path)

	ro, err := Open(path, Options{ReadOnly: true, LockTimeout: 50 * time.Millisecond})
	require.NoError(t, err)
	ro2, err := Open(path, Options{ReadOnly: true, LockTimeout: 50 * time.Millisecond})
	require.NoError(t, err, "read-only Queues share a file")
	require.NoError(t, ro2.Close())

	got, err := ro.Get(context.Background(), ids[0])
	require.NoError(t, err)
	assert.Equal(t, InFlight, got.State, "shown as stored, not recovered")
	counts, err := ro.Counts(context.Background())
	require.NoError(t, err)
	assert.Equal(t, map[State]int{Pending: 2, InFlight: 1, Done: 0, Failed: 0, Expired: 0}, counts)
	list, err := ro.List(context.Background(), Pending, 0, 10)
	require.NoError(t, err)
	assert.Len(t, list, 2)

	_, err = ro.Enqueue(ctx, post(t, url, 9))
	assert.ErrorIs(t, err, ErrReadOnly, "Enqueue")
	assert.ErrorIs(t, ro.Run(ctx), ErrReadOnly, "Run")
	_, err = ro.Wait(ctx, ids[1])
	assert.ErrorIs(t, err, ErrReadOnly, "Wait")
	assert.ErrorIs(t, ro.Discard(context.Background(), ids[1]), ErrReadOnly, "Discard")
	_, err = ro.Resubmit(ctx, ids[1])
	assert.ErrorIs(t, err, ErrReadOnly, "Resubmit")
	_, err = ro.ForceResubmit(ctx, ids[1])
	assert.ErrorIs(t, err, ErrReadOnly, "ForceResubmit")
	assert.ErrorIs(t, ro.ResetClock(ctx), ErrReadOnly, "ResetClock")

	_, err = Open(path, Options{LockTimeout: 50 * time.Millisecond})
	assert.ErrorIs(t, err, ErrLocked, "no writer while a reader holds the file")
	require.NoError(t, ro.Close())
	assert.Equal(t, before, fileSum(t, path), "the file is unchanged")

	w := reopen(t, path, Options{LockTimeout: 50 * time.Millisecond})
	_, err = Open(path, Options{ReadOnly: true, LockTimeout: 50 * time.Millisecond})
	assert.ErrorIs(t, err, ErrLocked, "no reader while a writer holds the file")
	got, err = w.Get(context.Background(), ids[0])
	require.NoError(t, err)
	assert.Equal(t, Pending, got.State, "a writer recovers it")
}

// TestReadOnlyMissingFile: read-only never creates a file.
func TestReadOnlyMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "none.db")
	_, err := Open(path, Options{ReadOnly: true})
	require.ErrorIs(t, err, os.ErrNotExist)
	assert.Contains(t, err.Error(), "queue: read-only")
	_, statErr := os.Stat(path)
	assert.ErrorIs(t, statErr, os.ErrNotExist)
}

func fileSum(t *testing.T, path string) [sha256.Size]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return sha256.Sum256(b)
}
