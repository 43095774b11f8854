package queue

import (
	"errors"
	"fmt"
	"os"
	"time"
)

// lockSuffix names the lock file beside the queue file. Open holds an
// exclusive lock on it for the queue's whole life. bbolt's own lock is on
// the queue file itself and is let go while Open compacts: the copy is
// renamed over the file and opened again, and an opener that waited on the
// old file's lock would get that file, no longer at the path, and write
// there. The lock file is never renamed nor removed, so every opener locks
// the same file; removing it while a queue is open would let a second one in.
const lockSuffix = ".lock"

// lockPoll is how often Open tries a lock another opener holds.
const lockPoll = 5 * time.Millisecond

// errHeld is returned by tryLock while another opener holds the lock.
var errHeld = errors.New("lock held")

// lock takes the lock file of the queue file at path, shared for a
// read-only Queue and exclusive otherwise, waiting up to
// o.LockTimeout for another opener to let it go. Closing the file returned
// lets the lock go. The wait is timed by the real clock: Options.now is the
// records' clock, which a test may stop.
func lock(path string, o Options) (*os.File, error) {
	openFile := o.openFile
	if openFile == nil {
		openFile = os.OpenFile
	}
	deadline := time.Now().Add(o.LockTimeout)
	for {
		f, err := tryLock(path+lockSuffix, openFile, o.ReadOnly)
		switch {
		case err == nil:
			return f, nil
		case !errors.Is(err, errHeld):
			return nil, fmt.Errorf("queue: %w", err)
		case time.Now().After(deadline):
			return nil, fmt.Errorf("%w: %s (waited %v)", ErrLocked, path, o.LockTimeout)
		}
		time.Sleep(lockPoll)
	}
}
