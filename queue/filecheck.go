package queue

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"os"
)

// bbolt's meta page, as written by go.etcd.io/bbolt 1.x in the machine's
// byte order: a 16-byte page header, then magic, version, page size, flags,
// the root bucket (root page, sequence), the freelist page, the page
// high-water mark, the transaction id, and an FNV-64a checksum of the fields
// before it.
const (
	boltMagic       = 0xED0CDAED
	boltVersion     = 2
	metaHeader      = 16
	metaChecksumEnd = metaHeader + 56 // the checksummed bytes end here
	metaSize        = metaChecksumEnd + 8
)

// checkSize refuses a file shorter than its own meta page says it is. bbolt
// maps the file and reads pages its meta names; a page past the end of a
// truncated file is a SIGBUS that no recover catches. A file with no valid
// meta is left to bbolt, which reports it.
func checkSize(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return nil // missing or unreadable: bolt.Open says which
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || fi.Size() == 0 {
		return nil
	}
	best, _, ok := currentMeta(f)
	if !ok {
		return nil
	}
	if need := int64(best.pages) * int64(best.pageSize); fi.Size() < need {
		return fmt.Errorf("%w: %s is %d bytes, its header needs %d: truncated", ErrDamaged, path, fi.Size(), need)
	}
	return nil
}

type boltMeta struct {
	pageSize uint32
	root     uint64 // the root bucket's page
	freelist uint64
	pages    uint64
	txid     uint64
}

// currentMeta reads the meta pages of f and returns the one bbolt would
// use: the valid one with the higher transaction id. ok is false when
// neither is valid.
func currentMeta(f *os.File) (best boltMeta, pageSize int64, ok bool) {
	var first [metaSize]byte
	if _, err := f.ReadAt(first[:], 0); err != nil {
		return boltMeta{}, 0, false
	}
	best, ok = readMeta(first[:])
	pageSize = int64(os.Getpagesize())
	if ok {
		pageSize = int64(best.pageSize)
	}
	var second [metaSize]byte
	if pageSize > 0 && pageSize <= 1<<16 {
		if _, err := f.ReadAt(second[:], pageSize); err == nil {
			if m, ok2 := readMeta(second[:]); ok2 && (!ok || m.txid > best.txid) {
				best, ok = m, true
			}
		}
	}
	return best, pageSize, ok
}

// readMeta parses and checks a meta page.
func readMeta(p []byte) (boltMeta, bool) {
	e := binary.NativeEndian
	m := p[metaHeader:]
	if e.Uint32(m) != boltMagic || e.Uint32(m[4:]) != boltVersion {
		return boltMeta{}, false
	}
	h := fnv.New64a()
	h.Write(p[metaHeader:metaChecksumEnd])
	if h.Sum64() != e.Uint64(p[metaChecksumEnd:]) {
		return boltMeta{}, false
	}
	return boltMeta{pageSize: e.Uint32(m[8:]), root: e.Uint64(m[16:]), freelist: e.Uint64(m[32:]), pages: e.Uint64(m[40:]), txid: e.Uint64(m[48:])}, true
}
