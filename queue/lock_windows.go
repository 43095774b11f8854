//go:build windows

package queue

import (
	"errors"
	"io/fs"
	"os"
	"syscall"
)

// errorSharingViolation is Windows' ERROR_SHARING_VIOLATION, which package
// syscall does not name.
const errorSharingViolation syscall.Errno = 32

// tryLock opens the lock file name, creating it, with no sharing: while the
// handle is open, every other open of the file fails, which is the lock.
// errHeld if another handle holds it. openFile cannot ask for no sharing, so
// it is not used.
func tryLock(name string, _ func(string, int, os.FileMode) (*os.File, error)) (*os.File, error) {
	p, err := syscall.UTF16PtrFromString(name)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	h, err := syscall.CreateFile(p, syscall.GENERIC_READ|syscall.GENERIC_WRITE, 0, nil,
		syscall.OPEN_ALWAYS, syscall.FILE_ATTRIBUTE_NORMAL, 0)
	switch {
	case err == nil:
		return os.NewFile(uintptr(h), name), nil
	case errors.Is(err, errorSharingViolation):
		return nil, errHeld
	}
	return nil, &fs.PathError{Op: "open", Path: name, Err: err}
}
