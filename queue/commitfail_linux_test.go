package queue

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
)

// TestCommitFailureBeforeMetaKeepsStore fails a commit of bbolt's own
// before its meta page: the file's descriptor is swapped, under bbolt, for
// one that cannot write, as a full disk refuses pages. bbolt rolls the
// commit back whole, so the Enqueue is not acknowledged, no read shows it,
// and the store is not taken for damaged: reads go on, and a reopen shows
// the same. (queue/powercut fails the meta page's fdatasync, which does
// break the store.)
func TestCommitFailureBeforeMetaKeepsStore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.db")
	var dbFile *os.File
	opts := Options{openFile: func(name string, flag int, perm os.FileMode) (*os.File, error) {
		f, err := os.OpenFile(name, flag, perm)
		if err == nil && name == path {
			dbFile = f
		}
		return f, err
	}}
	q := reopen(t, path, opts)
	ctx := context.Background()
	kept, err := q.Enqueue(ctx, post(t, url, 1, idem.WithKey("k-1")))
	require.NoError(t, err)
	require.NotNil(t, dbFile)

	ro, err := os.Open(path)
	require.NoError(t, err)
	defer ro.Close()
	require.NoError(t, syscall.Dup3(int(ro.Fd()), int(dbFile.Fd()), syscall.O_CLOEXEC))

	_, err = q.Enqueue(ctx, post(t, url, 2, idem.WithKey("k-2")))
	require.Error(t, err, "a commit that failed must not be acknowledged")
	assert.ErrorIs(t, err, syscall.EBADF, "the error says why")
	assert.NotErrorIs(t, err, ErrDamaged, "a commit rolled back whole is no damage")

	_, err = q.Get(ctx, kept)
	assert.NoError(t, err, "Get after a commit rolled back")
	keys := func() []string {
		got, err := q.List(ctx, 0, 0, 10)
		require.NoError(t, err)
		var keys []string
		for _, r := range got {
			keys = append(keys, r.Intent.Key())
		}
		return keys
	}
	assert.Equal(t, []string{"k-1"}, keys(), "List after a commit rolled back")
	require.NoError(t, q.Close())

	q = reopen(t, path, Options{})
	assert.Equal(t, []string{"k-1"}, keys(), "after the reopen")
	_, err = q.Enqueue(ctx, post(t, url, 4, idem.WithKey("k-4")))
	assert.NoError(t, err, "Enqueue after the reopen")
}

// TestRefusalsDoNotBreakStore: an error that is not bbolt's commit failing
// (the transaction's own, a limit, a cancelled ctx) stores nothing and
// leaves the store working.
func TestRefusalsDoNotBreakStore(t *testing.T) {
	q, _ := openTest(t, Options{MaxItems: 2})
	ctx := context.Background()
	_, err := q.Enqueue(ctx, post(t, url, 1, idem.WithKey("k-1")))
	require.NoError(t, err)
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	for _, tc := range []struct {
		name string
		call func() error
		want error
	}{
		{"key in use", func() error { _, err := q.Enqueue(ctx, post(t, url, 9, idem.WithKey("k-1"))); return err }, ErrKeyInUse},
		{"cancelled", func() error { _, err := q.Enqueue(cancelled, post(t, url, 2, idem.WithKey("k-2"))); return err }, context.Canceled},
		{"not found", func() error { return q.Discard(ctx, 99) }, ErrNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			require.ErrorIs(t, err, tc.want)
			assert.False(t, errors.Is(err, ErrDamaged), "%v wraps ErrDamaged", err)
		})
	}
	_, err = q.Enqueue(ctx, post(t, url, 3, idem.WithKey("k-3")))
	require.NoError(t, err)
	_, err = q.Enqueue(ctx, post(t, url, 4, idem.WithKey("k-4")))
	assert.ErrorIs(t, err, ErrQueueFull)
	assert.False(t, errors.Is(err, ErrDamaged), "%v wraps ErrDamaged", err)
	n, err := q.Counts(ctx)
	require.NoError(t, err)
	assert.Equal(t, 2, n[Pending], "the store still reads and wrote what it was given")
}
