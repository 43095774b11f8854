package queue

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"strings"

	bolt "go.etcd.io/bbolt"

	"github.com/idem-go/idem/internal/binenc"
)

// Damage comes in two kinds. A record whose bytes fail their checksum, in a
// file whose pages are sound, is quarantined (see quarantined): rewritten in
// place as a failed record. Damage to the structure, the pages that hold
// the records (a consistency check failing, keys out of order, a key that
// disagrees with its record's ID, a panic inside bbolt), is never written
// over: a write into a damaged page corrupts the tree further, and bbolt
// panics on what it finds. Open refuses such a file (ErrDamaged) unless it
// is opened ReadOnly, and Salvage copies what is readable into a fresh file.

// errWrongKey is wrapped by checkRecord's error for a record stored under a
// key other than its ID: the damage is in the page, not in the record.
var errWrongKey = errors.New("stored under another key")

// errPanicked is wrapped by the error of a write whose transaction
// panicked.
var errPanicked = errors.New("panicked")

// checkStructure walks the file at path (see walker) and returns an error
// wrapping ErrDamaged that names its structural problems, if it has any. A
// file with no valid meta page is left to bbolt, which reports it.
func checkStructure(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return nil // missing or unreadable: bolt.Open says which
	}
	defer f.Close()
	w, ok, err := newWalker(f)
	if err != nil || !ok {
		return nil
	}
	w.onRecord = func(k, v []byte, _ bool) {
		if len(k) != 8 {
			w.problem("records: key %x is not an ID", k)
			return
		}
		key := ID(binary.BigEndian.Uint64(k))
		if headerID(v) == key {
			return // the usual case, without a second CRC (the scan checks it)
		}
		if id, ok := storedID(v); ok && id != key {
			w.problem("records: key %x holds record %d", k, id)
		}
	}
	w.walk()
	return w.err(path)
}

// err returns the problems found, if any, as an error wrapping ErrDamaged.
func (w *walker) err(path string) error {
	if w.nIssues == 0 {
		return nil
	}
	more := ""
	if w.nIssues > len(w.issues) {
		more = fmt.Sprintf("; %d more", w.nIssues-len(w.issues))
	}
	return fmt.Errorf("%w: %s: its structure is damaged (%s%s); nothing is written to it: open it ReadOnly to read it, or Salvage it into a fresh file",
		ErrDamaged, path, strings.Join(w.issues, "; "), more)
}

// storedID returns the ID that data, a stored record, holds, if its
// checksum shows it intact.
func storedID(data []byte) (ID, bool) {
	body, err := binenc.Unseal(data)
	if err != nil || len(body) < laneOffset+1 || string(body[:len(recordMagic)]) != recordMagic {
		return 0, false
	}
	d := binenc.Decoder{B: body[laneOffset:]}
	d.String("lane")
	id := ID(d.Uvarint(math.MaxUint64, "ID"))
	return id, d.Err == nil
}

// headerID returns the ID in data's header, unchecked; 0 if there is none.
func headerID(data []byte) ID {
	if len(data) < laneOffset+1 {
		return 0
	}
	d := binenc.Decoder{B: data[laneOffset:]}
	d.String("lane")
	return ID(d.Uvarint(math.MaxUint64, "ID"))
}

// update runs fn in db.Update, bbolt's commit included, turning a panic
// into an error wrapping ErrDamaged and errPanicked. A panic that comes
// from fn itself is caught by safely and is fn's own. An error of bbolt's
// commit itself, once fn returned nil, that leaves the commit seen by
// readers is a *commitError; fn's own error, and a commit bbolt rolled back
// whole, are returned as they are.
func update(db *bolt.DB, fn func(*bolt.Tx) error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %s: commit %w: %v", ErrDamaged, db.Path(), errPanicked, p)
		}
	}()
	fnDone, txid := false, 0
	err = db.Update(func(tx *bolt.Tx) error {
		err := fn(tx)
		fnDone, txid = err == nil, tx.ID()
		return err
	})
	if err != nil && fnDone && shows(db, txid) {
		return &commitError{path: db.Path(), err: err}
	}
	return err
}

// shows says whether db's readers see commit txid. A commit that failed
// before its meta page was written (a page write or its sync: a full disk)
// is rolled back whole and is not seen; one whose meta page was written but
// not synced is, though the disk may not hold it.
func shows(db *bolt.DB, txid int) bool {
	seen := 0
	_ = db.View(func(tx *bolt.Tx) error { seen = tx.ID(); return nil })
	return seen >= txid
}

// commitError is the error of a bbolt commit that failed after its meta
// page was written (its write or fdatasync failed: EIO). Such a commit may
// be half on the disk while bbolt goes on reading it: a meta page written
// before a failed fdatasync is the newest bbolt sees, and the next commit
// would build on it. So, as PostgreSQL does on a failed fsync, the
// store takes it for damage (see boltStore.write): it writes and reads
// nothing more, and only a reopen, which reads what the file holds, goes
// on. It wraps ErrDamaged and the commit's error.
type commitError struct {
	path string
	err  error
}

func (e *commitError) Error() string {
	return fmt.Sprintf("%v: %s: a commit failed (%v): what is on disk is not known; close the queue and open it again",
		ErrDamaged, e.path, e.err)
}

func (e *commitError) Unwrap() []error { return []error{ErrDamaged, e.err} }
