package queue

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
)

// The commit mark. bbolt keeps two meta pages and writes each commit's over
// the older one; it opens a file by the valid one with the higher
// transaction ID. When the newer fails its checksum, bbolt opens the file
// as the commit before left it, and says nothing. After a power cut that
// tore the last commit's meta page that is right: the commit never
// returned, so nothing in it was acknowledged. After a commit that
// returned it is not: an Enqueue acknowledged vanishes, a record settled
// done is sent again, a discarded one comes back.
//
// The mark tells the two apart: the transaction ID of the last commit that
// returned, kept outside the file, in its lock file (see lockSuffix).
// After each commit, once bbolt has synced its pages and meta page and
// before any caller hears of it, the commit's ID is written there, with no
// sync of its own: a power cut leaves the mark behind the file, never
// ahead of it, since the file was synced first. Open refuses a file whose
// transaction ID is below the mark (ErrDamaged, naming the commits lost)
// until Salvage accepts the loss. The cost is a 16-byte write per commit,
// no fsync; Close syncs the mark once.
//
// A mark that does not read (none, torn, from another build) is no mark:
// the check is skipped, never failed. A mark behind the file is harmless.
// Every file that starts its transaction IDs again (a new queue file, a
// compaction's copy, a salvage's) starts with the mark reset, synced before
// the file takes the path, so a mark is never ahead of a file it was not
// written for.

// markMagic starts the mark; a CRC-32C of the magic and the ID ends it.
const markMagic = "iqcm"

const markSize = len(markMagic) + 8 + 4

var markTable = crc32.MakeTable(crc32.Castagnoli)

// readMark returns the mark in the lock file f; 0 when there is none.
func readMark(f *os.File) uint64 {
	if f == nil {
		return 0
	}
	var b [markSize]byte
	if _, err := f.ReadAt(b[:], 0); err != nil || string(b[:len(markMagic)]) != markMagic {
		return 0
	}
	body := b[:markSize-4]
	if crc32.Checksum(body, markTable) != binary.BigEndian.Uint32(b[markSize-4:]) {
		return 0
	}
	return binary.BigEndian.Uint64(body[len(markMagic):])
}

// writeMark writes txid, a commit that returned, as the mark in the lock
// file f, unsynced. A mark that could not be written stays behind, which is
// harmless, so its error is the caller's to ignore.
func writeMark(f *os.File, txid uint64) error {
	if f == nil {
		return nil
	}
	b := binary.BigEndian.AppendUint64(append(make([]byte, 0, markSize), markMagic...), txid)
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(b, markTable))
	_, err := f.WriteAt(b, 0)
	return err
}

// resetMark resets the mark in the lock file f for a file that starts its
// transaction IDs again, and syncs it: the file must not take the path
// before the mark is reset on disk.
func resetMark(f *os.File) error {
	if f == nil {
		return nil
	}
	if err := writeMark(f, 0); err != nil {
		return fmt.Errorf("queue: reset the commit mark: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("queue: reset the commit mark: %w", err)
	}
	return nil
}

// lostCommits returns how many commits that returned the file at txid
// lacks, by the mark in the lock file f.
func lostCommits(f *os.File, txid uint64) uint64 {
	if mark := readMark(f); mark > txid {
		return mark - txid
	}
	return 0
}

// lostError is Open's error for a file that lacks n commits that returned.
func lostError(path string, n, txid uint64) error {
	return fmt.Errorf("%w: %s: %d acknowledged commit%s lost: the file's last commit is %d, the queue acknowledged %d (its newest meta page is damaged, or the file is an older copy); nothing is written to it: open it ReadOnly to read it, or Salvage it to accept the loss",
		ErrDamaged, path, n, plural(n), txid, txid+n)
}

func plural(n uint64) string {
	if n == 1 {
		return ""
	}
	return "s"
}
