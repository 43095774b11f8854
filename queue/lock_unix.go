//go:build unix && !solaris && !aix

package queue

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// tryLock opens the lock file name, creating it (mode 0600), and takes an
// exclusive flock on it without waiting: errHeld if another open file holds
// it, in this process or another.
func tryLock(name string, openFile func(string, int, os.FileMode) (*os.File, error)) (*os.File, error) {
	f, err := openFile(name, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	switch {
	case err == nil:
		return f, nil
	case errors.Is(err, syscall.EWOULDBLOCK):
		err = errHeld
	default:
		err = fmt.Errorf("lock %s: %w", name, err)
	}
	f.Close()
	return nil, err
}
