//go:build (unix && !solaris && !aix) || windows

package queue

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lockModeName names a tryLock mode in messages.
func lockModeName(shared bool) string {
	if shared {
		return "shared"
	}
	return "exclusive"
}

// TestTryLockModes is the contract every platform's tryLock keeps (flock on
// Unix, sharing modes on Windows): readers share the lock, a writer
// excludes everyone, even another file of this process, and closing the
// holder's file lets the lock go. It runs on every platform that has a
// lock, so that lock_windows.go is held to what lock_unix.go does.
func TestTryLockModes(t *testing.T) {
	tests := []struct {
		held, try bool // shared?
		wantHeld  bool
	}{
		{held: false, try: false, wantHeld: true},
		{held: false, try: true, wantHeld: true},
		{held: true, try: false, wantHeld: true},
		{held: true, try: true, wantHeld: false},
	}
	for _, tt := range tests {
		name := lockModeName(tt.held) + " then " + lockModeName(tt.try)
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "q.db"+lockSuffix)
			holder, err := tryLock(path, os.OpenFile, tt.held)
			require.NoError(t, err, "the first lock, on a new file")

			second, err := tryLock(path, os.OpenFile, tt.try)
			if gotHeld := errors.Is(err, errHeld); gotHeld != tt.wantHeld {
				t.Errorf("tryLock(%s) while %s is held: err = %v, want held %v", lockModeName(tt.try), lockModeName(tt.held), err, tt.wantHeld)
			}
			if err == nil {
				require.NoError(t, second.Close())
			}

			require.NoError(t, holder.Close())
			again, err := tryLock(path, os.OpenFile, tt.try)
			require.NoError(t, err, "closing the holder's file lets the lock go")
			require.NoError(t, again.Close())
		})
	}
}

// TestLockWaitsThenGivesUp: lock, the loop shared by every platform, tries
// until LockTimeout and then says ErrLocked naming the file; an error other
// than a held lock ends it at once, and is not ErrLocked.
func TestLockWaitsThenGivesUp(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.db")
	holder, err := lock(path, Options{})
	require.NoError(t, err)
	defer holder.Close()

	start := time.Now()
	_, err = lock(path, Options{LockTimeout: 3 * lockPoll})
	require.ErrorIs(t, err, ErrLocked)
	assert.Contains(t, err.Error(), path, "the error names the queue file")
	assert.GreaterOrEqual(t, time.Since(start), 3*lockPoll, "lock waited LockTimeout")
	_, err = lock(path, Options{ReadOnly: true, LockTimeout: 3 * lockPoll})
	require.ErrorIs(t, err, ErrLocked, "a reader waits on a writer too")

	missing := filepath.Join(t.TempDir(), "no-such-dir", "q.db")
	_, err = lock(missing, Options{LockTimeout: time.Minute})
	require.Error(t, err)
	assert.NotErrorIs(t, err, ErrLocked, "a lock file that cannot be made is no held lock")
	assert.ErrorIs(t, err, os.ErrNotExist)
	assert.Contains(t, err.Error(), "queue: ")
}
