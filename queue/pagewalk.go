package queue

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"os"
)

// A page walk reads a queue file as bbolt lays it out, without bbolt: every
// read is bounds-checked, so a damaged page is a problem to report, never a
// panic nor a fault. Open walks the file to judge its structure before
// anything writes to it; Salvage walks it to recover its records. The walk
// follows the tree from the meta page bbolt would use, so pages bbolt freed,
// which may hold older versions of records, are never read as records: a
// page the tree reaches that the free list holds too is read as a page
// outside the tree (see tree), whose records Salvage weighs against the
// tree's and the file's trace of removed records (see markGone).

// bbolt's page layout (go.etcd.io/bbolt 1.x, machine byte order): a 16-byte
// header (id, flags, count, overflow), then 16-byte elements.
const (
	pageHeader    = 16
	elemSize      = 16
	branchPage    = 0x01
	leafPage      = 0x02
	freelistPage  = 0x10
	bucketElem    = 0x01 // a leaf element that is a bucket
	bucketHeader  = 16   // a bucket's value: root page id, sequence
	maxWalkIssues = 20   // problems kept for the report; the count goes on
)

// walker walks one file.
type walker struct {
	f        io.ReaderAt
	size     int64
	meta     boltMeta
	seen     map[uint64]bool
	free     map[uint64]bool // nil unless the free list was read whole
	issues   []string        // structural problems, the first maxWalkIssues
	nIssues  int
	buckets  map[string]*bucketWalk               // the buckets found
	onRecord func(key, value []byte, inTree bool) // each element of the records bucket
	onMeta   func(key, value []byte)              // each element of the meta bucket

	// Where the walk is: in which bucket (nil in the root), in which key
	// range of it, and whether under a page the free list holds too.
	in     *bucketWalk
	lo, hi []byte
	onFree bool
}

// bucketWalk is what the walk found of one bucket.
type bucketWalk struct {
	name   []byte
	seq    uint64 // the bucket's sequence
	issues int    // problems found in its pages
	// unsure holds the key ranges of its pages where a problem was found:
	// records there may be missing from the tree, or older than they read.
	unsure []keyRange
}

// keyRange is a range of keys, lo included, hi not; nil is unbounded.
type keyRange struct{ lo, hi []byte }

// isUnsure reports whether key lies in a range the walk could not vouch
// for.
func (b *bucketWalk) isUnsure(key []byte) bool {
	for _, r := range b.unsure {
		if (r.lo == nil || bytes.Compare(key, r.lo) >= 0) && (r.hi == nil || bytes.Compare(key, r.hi) < 0) {
			return true
		}
	}
	return false
}

// unsureAt reports whether key, in the bucket called name, lies where the
// walk could not vouch for the tree: in a range with a problem, or
// anywhere in a bucket it did not find.
func (w *walker) unsureAt(name, key []byte) bool {
	b := w.buckets[string(name)]
	return b == nil || b.isUnsure(key)
}

// whole reports whether the walk found the bucket called name without a
// problem in its pages.
func (w *walker) whole(name []byte) bool {
	b := w.buckets[string(name)]
	return b != nil && b.issues == 0
}

// problem notes a structural problem, in the bucket and key range the
// walk is in.
func (w *walker) problem(format string, args ...any) {
	w.nIssues++
	if len(w.issues) < maxWalkIssues {
		w.issues = append(w.issues, fmt.Sprintf(format, args...))
	}
	if b := w.in; b != nil {
		b.issues++
		if n := len(b.unsure); n == 0 || !bytes.Equal(b.unsure[n-1].lo, w.lo) || !bytes.Equal(b.unsure[n-1].hi, w.hi) {
			b.unsure = append(b.unsure, keyRange{w.lo, w.hi})
		}
	}
}

// newWalker reads the meta pages of f and picks the one bbolt would: the
// valid one with the higher transaction id. ok is false when neither is
// valid: the file is not one bbolt would open.
func newWalker(f *os.File) (*walker, bool, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, false, err
	}
	w := &walker{f: f, size: fi.Size(), seen: map[uint64]bool{}, buckets: map[string]*bucketWalk{}}
	best, _, ok := currentMeta(f)
	w.meta = best
	if ok && (best.pageSize < 512 || best.pageSize > 1<<16) {
		return w, false, nil
	}
	return w, ok, nil
}

// page reads page id and its overflow; nil, after noting the problem, when
// it cannot.
func (w *walker) page(id uint64) []byte {
	ps := int64(w.meta.pageSize)
	if id < 2 || id >= w.meta.pages || int64(id)*ps >= w.size {
		w.problem("page %d: out of range (%d pages)", id, w.meta.pages)
		return nil
	}
	head := make([]byte, ps)
	if _, err := w.f.ReadAt(head, int64(id)*ps); err != nil {
		w.problem("page %d: %v", id, err)
		return nil
	}
	// A damaged header field is noted and read past: the elements may
	// still be whole.
	if got := binary.NativeEndian.Uint64(head); got != id {
		w.problem("page %d: holds id %d", id, got)
	}
	overflow := uint64(binary.NativeEndian.Uint32(head[12:]))
	if overflow == 0 {
		return head
	}
	if id+overflow >= w.meta.pages || int64(id+overflow+1)*ps > w.size {
		w.problem("page %d: overflow %d past the end", id, overflow)
		return head
	}
	all := make([]byte, int64(overflow+1)*ps)
	if _, err := w.f.ReadAt(all, int64(id)*ps); err != nil {
		w.problem("page %d: %v", id, err)
		return nil
	}
	return all
}

// walk walks the whole tree: the root bucket and the buckets in it. It
// reads the free list first, to know the pages the tree must not reach.
func (w *walker) walk() {
	w.seen[0], w.seen[1] = true, true
	w.freelist()
	w.tree(w.meta.root, nil, nil, func(k, v []byte, flags uint32) {
		if flags&bucketElem == 0 {
			w.problem("root: key %q is not a bucket", k)
			return
		}
		var visit func(k, v []byte)
		switch {
		case bytes.Equal(k, bucketRecords):
			visit = func(k, v []byte) {
				if w.onRecord != nil {
					w.onRecord(k, v, !w.onFree)
				}
			}
		case bytes.Equal(k, bucketMeta):
			visit = w.onMeta
		case bytes.Equal(k, bucketKeys):
		default:
			w.problem("root: unknown bucket %q", k)
			return
		}
		w.bucket(k, v, visit)
	})
	w.unaccounted()
}

// bucket walks the bucket called name whose value is v, calling visit, if
// not nil, for each of its elements.
func (w *walker) bucket(name, v []byte, visit func(k, v []byte)) {
	if len(v) < bucketHeader {
		w.problem("bucket %q: header of %d bytes", name, len(v))
		return
	}
	b := w.buckets[string(name)] // found twice only in a damaged page, whose keys are out of order
	if b == nil {
		b = &bucketWalk{name: name}
		w.buckets[string(name)] = b
	}
	b.seq = max(b.seq, binary.NativeEndian.Uint64(v[8:]))
	in, lo, hi := w.in, w.lo, w.hi
	w.in, w.lo, w.hi = b, nil, nil
	defer func() { w.in, w.lo, w.hi = in, lo, hi }()
	if w.onFree {
		// Found on a page the free list holds too: the whole bucket is in
		// doubt.
		w.problem("bucket %q: found on a free page", name)
	}
	leaf := func(k, val []byte, flags uint32) {
		if flags&bucketElem != 0 {
			w.problem("bucket %q: nested bucket %q", name, k)
			return
		}
		if visit != nil {
			visit(k, val)
		}
	}
	if root := binary.NativeEndian.Uint64(v); root != 0 {
		w.tree(root, nil, nil, leaf)
		return
	}
	w.elements(v[bucketHeader:], 0, nil, nil, leaf) // inline
}

// tree walks the subtree at page id, whose keys must lie in [lo, hi) (nil:
// unbounded), calling leaf for each leaf element.
//
// A page the free list holds too is read, but as a page outside the tree
// (w.onFree): either the free list is damaged and the page is the tree's,
// or a branch is and the page holds what a commit freed, older copies of
// records. Which, the pages cannot tell; Salvage weighs each record found
// there against its other copies. The root page is the one exception: the
// meta page that names it has a checksum. Below such a page the walk goes
// on into free pages only: a page in use is left for the branch of the
// tree that holds it, or, if none does, for orphans.
func (w *walker) tree(id uint64, lo, hi []byte, leaf func(k, v []byte, flags uint32)) {
	if w.onFree && !w.free[id] {
		return
	}
	outerLo, outerHi, onFree := w.lo, w.hi, w.onFree
	w.lo, w.hi = lo, hi
	defer func() { w.lo, w.hi, w.onFree = outerLo, outerHi, onFree }()
	if w.seen[id] {
		w.problem("page %d: reached twice", id)
		return
	}
	w.seen[id] = true
	if w.free[id] {
		w.problem("page %d: free and in use", id)
		w.onFree = w.onFree || id != w.meta.root
	}
	p := w.page(id)
	if p == nil {
		return
	}
	for i := uint64(1); i < uint64(len(p))/uint64(w.meta.pageSize); i++ { // the overflow read
		w.seen[id+i] = true
	}
	w.elements(p, id, lo, hi, leaf)
}

// elements walks the elements of page p (id 0 for an inline page).
func (w *walker) elements(p []byte, id uint64, lo, hi []byte, leaf func(k, v []byte, flags uint32)) {
	if len(p) < pageHeader {
		w.problem("inline page of %d bytes", len(p))
		return
	}
	flags := binary.NativeEndian.Uint16(p[8:])
	count := int(binary.NativeEndian.Uint16(p[10:]))
	if flags != branchPage && flags != leafPage {
		w.problem("page %d: flags %#x, want a branch or leaf page", id, flags)
		if flags &= branchPage | leafPage; flags != branchPage && flags != leafPage {
			return // no telling which
		}
	}
	if pageHeader+count*elemSize > len(p) {
		w.problem("page %d: %d elements do not fit", id, count)
		count = (len(p) - pageHeader) / elemSize
	}
	prev := lo
	for i := range count {
		at := pageHeader + i*elemSize
		e := p[at : at+elemSize]
		var key, val []byte
		var ok bool
		if flags == branchPage {
			key, ok = slice(p, at+int(binary.NativeEndian.Uint32(e)), int(binary.NativeEndian.Uint32(e[4:])))
		} else {
			pos, ks, vs := int(binary.NativeEndian.Uint32(e[4:])), int(binary.NativeEndian.Uint32(e[8:])), int(binary.NativeEndian.Uint32(e[12:]))
			key, ok = slice(p, at+pos, ks)
			if ok {
				val, ok = slice(p, at+pos+ks, vs)
			}
		}
		if !ok {
			w.problem("page %d: element %d past the page's end", id, i)
			continue
		}
		switch {
		case i > 0 && bytes.Compare(key, prev) <= 0, i == 0 && lo != nil && bytes.Compare(key, lo) < 0:
			w.problem("page %d: key %x out of order after %x", id, key, prev)
		case hi != nil && bytes.Compare(key, hi) >= 0:
			w.problem("page %d: key %x not below its parent's bound %x", id, key, hi)
		}
		prev = key
		if flags == leafPage {
			leaf(key, val, binary.NativeEndian.Uint32(e))
			continue
		}
		var next []byte
		if i+1 < count {
			at := pageHeader + (i+1)*elemSize
			next, _ = slice(p, at+int(binary.NativeEndian.Uint32(p[at:])), int(binary.NativeEndian.Uint32(p[at+4:])))
		} else {
			next = hi
		}
		w.tree(binary.NativeEndian.Uint64(e[8:]), key, next, leaf)
	}
}

// orphans calls leaf for each element of the leaf pages neither in the tree
// nor free: a damaged page id in a branch loses its child from the tree,
// and here it is found again, as may a page that a damaged free list
// entry lost, which holds older copies. Free pages are never read, so it
// reads nothing unless the free list was read whole.
func (w *walker) orphans(leaf func(k, v []byte)) {
	if w.free == nil {
		return
	}
	w.in, w.lo, w.hi = nil, nil, nil
	for id := uint64(2); id < w.meta.pages; id++ {
		if w.seen[id] || w.free[id] {
			continue
		}
		ps := int64(w.meta.pageSize)
		p := make([]byte, ps)
		if _, err := w.f.ReadAt(p, int64(id)*ps); err != nil {
			return
		}
		if binary.NativeEndian.Uint16(p[8:]) != leafPage {
			continue
		}
		w.seen[id] = true
		w.elements(p, id, nil, nil, func(k, v []byte, flags uint32) {
			if flags == 0 {
				leaf(k, v)
			}
		})
	}
}

// slice returns p[at:at+n] if it is inside p.
func slice(p []byte, at, n int) ([]byte, bool) {
	if at < 0 || n < 0 || at > len(p) || n > len(p)-at {
		return nil, false
	}
	return p[at : at+n], true
}

// freelist reads the free list, before the tree is walked: the tree must
// reach none of its pages (see tree).
func (w *walker) freelist() {
	if w.meta.freelist == ^uint64(0) { // not synced: bbolt rebuilds it
		return
	}
	p := w.page(w.meta.freelist)
	if p == nil {
		return
	}
	if flags := binary.NativeEndian.Uint16(p[8:]); flags != freelistPage {
		w.problem("freelist page %d: flags %#x", w.meta.freelist, flags)
		return
	}
	w.seen[w.meta.freelist] = true
	for i := uint64(1); i <= uint64(binary.NativeEndian.Uint32(p[12:])); i++ {
		w.seen[w.meta.freelist+i] = true
	}
	n, ids := int(binary.NativeEndian.Uint16(p[10:])), p[pageHeader:]
	if n == 0xFFFF { // the count is the first element
		if len(ids) < 8 {
			w.problem("freelist page %d: cut short", w.meta.freelist)
			return
		}
		n, ids = int(binary.NativeEndian.Uint64(ids)), ids[8:]
	}
	if n < 0 || n > len(ids)/8 {
		w.problem("freelist page %d: %d ids do not fit", w.meta.freelist, n)
		return
	}
	free := make(map[uint64]bool, n)
	for i := range n {
		id := binary.NativeEndian.Uint64(ids[i*8:])
		switch {
		case free[id]:
			w.problem("page %d: freed twice", id)
		case w.seen[id]:
			w.problem("page %d: free and in use", id)
		case id < 2 || id >= w.meta.pages:
			w.problem("page %d: freed, out of range", id)
		}
		free[id] = true
	}
	w.free = free
}

// unaccounted checks, after the walk, that every page is in the tree or
// free: a page neither is lost.
func (w *walker) unaccounted() {
	for id := uint64(2); id < w.meta.pages && w.nIssues == 0 && w.free != nil; id++ {
		if !w.seen[id] && !w.free[id] {
			w.problem("page %d: neither in use nor free", id)
		}
	}
}
