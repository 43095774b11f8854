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

// tryLock opens the lock file name, creating it, with no sharing, or
// sharing reads only when shared: while the handle is open, every open of
// the file that asks for more fails, which is the lock. errHeld if another
// handle holds it. openFile cannot ask for a sharing mode, so it is not used.
func tryLock(name string, _ func(string, int, os.FileMode) (*os.File, error), shared bool) (*os.File, error) {
	p, err := syscall.UTF16PtrFromString(name)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	access, share := uint32(syscall.GENERIC_READ|syscall.GENERIC_WRITE), uint32(0)
	if shared {
		access, share = syscall.GENERIC_READ, syscall.FILE_SHARE_READ
	}
	h, err := syscall.CreateFile(p, access, share, nil,
		syscall.OPEN_ALWAYS, syscall.FILE_ATTRIBUTE_NORMAL, 0)
	switch {
	case err == nil:
		return os.NewFile(uintptr(h), name), nil
	case errors.Is(err, errorSharingViolation):
		return nil, errHeld
	}
	return nil, &fs.PathError{Op: "open", Path: name, Err: err}
}
