package queue

import (
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBadInputDiskFullTmpfs is TestBadInputDiskFull on a disk that fills:
// a 1 MiB tmpfs, when this process may mount one (Linux, privileged).
func TestBadInputDiskFullTmpfs(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("cannot mount a tmpfs here (%v); TestBadInputDiskFull covers a full disk", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	path := filepath.Join(dir, "q.db")
	q, err := Open(path, Options{})
	require.NoError(t, err)
	enqueued, err := biEnqueueUntilFull(q, nil)
	require.Error(t, err, "a full disk must fail Enqueue")
	assert.ErrorIs(t, err, syscall.ENOSPC)
	t.Logf("after %d records: %v", len(enqueued), err)
	require.NotEmpty(t, enqueued)
	require.NoError(t, q.Close())
	biCheckKept(t, path, enqueued) // on the full disk still
}
