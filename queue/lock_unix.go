//go:build unix && !solaris && !aix

package queue

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// tryLock opens the lock file name, creating it (mode 0600), and takes an
// exclusive flock on it, or a shared one, without waiting: errHeld if
// another open file holds it, in this process or another, in a mode that
// excludes this one.
func tryLock(name string, openFile func(string, int, os.FileMode) (*os.File, error), shared bool) (*os.File, error) {
	flag, how := os.O_RDWR|os.O_CREATE, syscall.LOCK_EX
	if shared {
		flag, how = os.O_RDONLY|os.O_CREATE, syscall.LOCK_SH
	}
	f, err := openFile(name, flag, 0o600)
	if err != nil {
		return nil, err
	}
	for {
		err = syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
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
