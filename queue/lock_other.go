//go:build (!unix || solaris || aix) && !windows

package queue

import "os"

// tryLock opens the lock file name, creating it. On this system Open knows
// of no file lock that is held by an open file (Solaris and AIX have
// fcntl's, held by the process and dropped when any of its files on the
// lock closes): only bbolt's own lock guards the queue file, which Open's
// compaction lets go for a moment.
func tryLock(name string, openFile func(string, int, os.FileMode) (*os.File, error), shared bool) (*os.File, error) {
	if shared {
		return openFile(name, os.O_RDONLY|os.O_CREATE, 0o600)
	}
	return openFile(name, os.O_RDWR|os.O_CREATE, 0o600)
}
