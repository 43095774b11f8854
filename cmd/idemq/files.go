package main

import (
	byteorder "encoding/binary" // "binary" is the tests' built idemq
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// idemq acts on queue files only, and leaves any other file as it was,
// byte for byte, creating none beside it: queue.Open creates a missing
// file, bbolt writes its first pages into an empty one, a writable Open
// adds the queue's buckets to any bbolt database, and every Open creates
// the lock file beside the path. checkFile refuses such a path before
// queue.Open sees it.

// bbolt's meta page, the first two pages of its file: a 16-byte page
// header, then the magic number and the format version, in the machine's
// byte order (see queue/filecheck.go).
const (
	boltMagic      = 0xED0CDAED
	boltVersion    = 2
	boltMetaOffset = 16
)

// queueBuckets are the buckets every queue file has (queue/layout.go):
// Open creates them in one transaction.
var queueBuckets = []string{"records", "keys", "meta"}

// checkFile returns an error naming a.file and what is wrong when it is
// not a queue file: missing, not a regular file, empty, not a bbolt
// database, or one without the queue's buckets. A bbolt file that bbolt
// cannot read is let through: queue.Open reports the damage.
func (a *app) checkFile() error {
	if err := a.checkPath(); err != nil {
		return err
	}
	isBolt, err := hasBoltMeta(a.file)
	if err != nil {
		return err
	}
	if !isBolt {
		return fmt.Errorf("%s is not a queue file: not a bbolt database", a.file)
	}
	return a.checkBuckets()
}

// checkPath returns an error naming a.file when it is missing, not a
// regular file, or empty: no queue file, damaged or sound.
func (a *app) checkPath() error {
	fi, err := os.Stat(a.file)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("%s: no such queue file", a.file)
	case err != nil:
		return err
	case fi.IsDir():
		return fmt.Errorf("%s is a directory, not a queue file", a.file)
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%s is not a regular file, not a queue file", a.file)
	case fi.Size() == 0:
		return fmt.Errorf("%s is empty, not a queue file", a.file)
	}
	return nil
}

// hasBoltMeta reports whether either of the file's meta pages starts with
// bbolt's magic number and version. The second is looked for at the page
// sizes bbolt uses, for a file whose first page is damaged.
func hasBoltMeta(path string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	for _, off := range []int64{0, int64(os.Getpagesize()), 4096, 8192, 16384, 32768, 65536} {
		var m [8]byte
		if n, err := f.ReadAt(m[:], off+boltMetaOffset); n < len(m) {
			if err != nil && !errors.Is(err, io.EOF) {
				return false, err
			}
			continue // the file ends before
		}
		e := byteorder.NativeEndian
		if e.Uint32(m[:]) == boltMagic && e.Uint32(m[4:]) == boltVersion {
			return true, nil
		}
	}
	return false, nil
}

// checkBuckets opens a.file read-only with bbolt itself, which creates and
// writes nothing, and refuses a database without the queue's buckets. It
// waits --lock-timeout for a process that writes the file, as queue.Open
// would.
func (a *app) checkBuckets() (err error) {
	// A damaged page read through bbolt's mapping faults: leave it to
	// queue.Open, which checks the file's size first and names the damage.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if recover() != nil {
			err = nil
		}
	}()
	db, err := bolt.Open(a.file, 0o600, &bolt.Options{ReadOnly: true, Timeout: a.lockTimeout})
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		return a.heldError()
	case err != nil:
		return nil // damaged: queue.Open says how
	}
	defer db.Close()
	return db.View(func(tx *bolt.Tx) error {
		for _, name := range queueBuckets {
			if tx.Bucket([]byte(name)) == nil {
				return fmt.Errorf("%s is a bbolt database but not an idem queue: it has no %q bucket", a.file, name)
			}
		}
		return nil
	})
}

// heldError says that another process holds a.file.
func (a *app) heldError() error {
	return fmt.Errorf("%s is held by another process (the application, or another idemq); gave up after %v: stop it, or try again when it is done", a.file, a.lockTimeout)
}
