// Package powercut is a file system for tests that can lose power at any
// point: every write not yet synced is kept in memory only, and a cut drops
// it, as a device that loses power drops what its disk had not yet written.
// A test starts it (Start: FUSE through go-fuse, served by a child process),
// opens the queue in it, arms a cut at the n-th change, and reopens the queue
// after the cut to check what came back.
//
// Killing a process cannot show this: the kernel keeps what the process
// wrote in its page cache and writes it out later, so every write that
// returned survives. A power cut keeps only what an fsync made durable, and
// of what was being written when the power went, a part of a page.
//
// The model is of one flat directory on a journaling file system (ext4 as
// commonly mounted):
//   - A file's writes and truncations reach the disk at its fsync or
//     fdatasync. Until then they are pending; a cut lands a chosen share of
//     them, in any combination, and may tear the last one written: a prefix
//     of it, cut at a random byte, lands.
//   - Creating, renaming and removing a name reach the disk at an fsync of
//     the directory. An fsync of a file also makes the names it has durable
//     (ext4 commits a new file's entry with it), not its old names' removal.
//   - Reads see what the running system wrote, pending or not.
//
// The package is the idem repository's test harness and is not published.
package powercut

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// FS is the state of a mounted power-cut file system: its files, what of
// them is on the disk, and whether the power is on. Its methods are safe for
// concurrent use.
type FS struct {
	mu      sync.Mutex
	nextIno uint64
	// names is the directory as the running system sees it; durable as it
	// is on the disk.
	names, durable map[string]*file
	seq            uint64 // orders the pending changes of all files
	changes        int64  // changes made since the mount
	// armed counts down the changes left before the power goes; 0 means
	// not armed.
	armed int64
	off   bool
	offc  chan struct{}
	cuts  int

	server *fuse.Server
	dir    string
	// onOff, if set, is told when the power goes off, with the number of
	// cuts made before: it runs on a goroutine of its own.
	onOff func(cuts int)
}

// file is one inode: its contents as the running system sees them, as the
// disk holds them, and the changes between the two.
type file struct {
	ino     uint64
	data    []byte
	disk    []byte
	pending []change
}

// change is a write (data at off) or, with truncate set, a truncation to
// size, not yet synced.
type change struct {
	seq      uint64
	off      int64
	data     []byte
	truncate bool
	size     int64
}

// errPowerOff is what a change made while the power is off fails with:
// EIO, as a disk that is gone gives.
var errPowerOff = syscall.EIO

// newFS returns an empty file system with the power on.
func newFS() *FS {
	return &FS{
		nextIno: 2, // 1 is the root's
		names:   map[string]*file{},
		durable: map[string]*file{},
		offc:    make(chan struct{}),
	}
}

// Dir is the directory the file system is mounted on.
func (p *FS) Dir() string { return p.dir }

// Changes is how many changes (writes, truncations, syncs, creations,
// renames and removals) were made since the mount: the points at which a
// cut can be armed.
func (p *FS) Changes() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.changes
}

// Cuts is how many cuts were made since the mount.
func (p *FS) Cuts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cuts
}

// Arm makes the power go off at the n-th change from now (n >= 1): that
// change and every one after it fails with EIO until Cut, and Off is
// closed. Arm(0) disarms.
func (p *FS) Arm(n int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed = max(n, 0)
}

// Off returns a channel closed when the power goes off, by Arm or PowerOff.
func (p *FS) Off() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.offc
}

// IsOff reports whether the power is off.
func (p *FS) IsOff() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.off
}

// PowerOff makes the power go off now: every change from now on fails with
// EIO until Cut.
func (p *FS) PowerOff() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.powerOffLocked()
}

func (p *FS) powerOffLocked() {
	if !p.off {
		p.off = true
		close(p.offc)
		if p.onOff != nil {
			go p.onOff(p.cuts)
		}
	}
}

// Plan says what of the pending changes a cut lands on the disk.
type Plan struct {
	// Land is the chance, from 0 to 1, that each pending change reaches the
	// disk before the power goes, each drawn on its own: a disk writes its
	// queue in any order. 0 drops every change not synced.
	Land float64
	// Tear makes the last change written, if it would not land whole, land
	// in part: its first bytes, up to a random one.
	Tear bool
	// Rand draws the choices; nil uses a random source.
	Rand *rand.Rand
}

// CutReport says what a cut did.
type CutReport struct {
	// Pending is how many changes were not synced; Landed how many of them
	// reached the disk whole; Torn whether one reached it in part.
	Pending, Landed int
	Torn            bool
	// Names is how many names were created, renamed or removed since the
	// directory was last synced and are undone.
	Names int
}

// String describes the cut for a test's log.
func (r CutReport) String() string {
	return fmt.Sprintf("%d of %d pending changes landed, torn %v, %d names undone", r.Landed, r.Pending, r.Torn, r.Names)
}

// Cut cuts the power, if it is not off yet, and brings it back: every file
// holds what the disk held, its synced contents and the pending changes plan
// lands, and the directory its synced names. The queue must be closed (by
// its Close, which fails to write anything with the power off) before Cut:
// the contents change under any file still open.
func (p *FS) Cut(plan Plan) CutReport {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.powerOffLocked()
	r := plan.Rand
	if r == nil {
		r = newRand(0)
	}
	var rep CutReport
	// The last change written, of all files, is the one a tear can hit.
	var last *file
	var lastSeq uint64
	files := map[*file]bool{}
	for _, f := range p.names {
		files[f] = true
	}
	for _, f := range p.durable {
		files[f] = true
	}
	for f := range files {
		if n := len(f.pending); n > 0 && f.pending[n-1].seq > lastSeq {
			last, lastSeq = f, f.pending[n-1].seq
		}
	}
	// Draw in inode order so that one seed gives one outcome.
	for _, f := range slices.SortedFunc(maps.Keys(files), func(a, b *file) int { return int(a.ino) - int(b.ino) }) {
		data := f.disk
		for i, c := range f.pending {
			rep.Pending++
			switch {
			case r.Float64() < plan.Land:
				rep.Landed++
				data = c.apply(data, len(c.data))
			case plan.Tear && f == last && i == len(f.pending)-1 && !c.truncate && len(c.data) > 1:
				rep.Torn = true
				data = c.apply(data, 1+r.IntN(len(c.data)-1))
			}
		}
		f.disk = data
		f.data = slices.Clone(data)
		f.pending = nil
	}
	for name, f := range p.names {
		if p.durable[name] != f {
			rep.Names++
		}
	}
	for name := range p.durable {
		if p.names[name] == nil {
			rep.Names++
		}
	}
	p.names = maps.Clone(p.durable)
	p.off = false
	p.offc = make(chan struct{})
	p.armed = 0
	p.cuts++
	return rep
}

// apply returns data with the change made, of a write only its first n
// bytes.
func (c change) apply(data []byte, n int) []byte {
	if c.truncate {
		return resize(data, c.size)
	}
	end := c.off + int64(n)
	if end > int64(len(data)) {
		data = resize(data, end)
	}
	copy(data[c.off:end], c.data[:n])
	return data
}

// resize returns data cut or zero-extended to size, in a new array when it
// grows past its capacity.
func resize(data []byte, size int64) []byte {
	if size <= int64(len(data)) {
		return data[:size:size]
	}
	grown := make([]byte, size)
	copy(grown, data)
	return grown
}

// step counts a change and reports whether it may be made: not with the
// power off, nor when it is the one an armed cut falls on. Called with mu
// held.
func (p *FS) step() syscall.Errno {
	if p.off {
		return errPowerOff
	}
	if p.armed > 0 {
		p.armed--
		if p.armed == 0 {
			p.powerOffLocked()
			return errPowerOff
		}
	}
	p.changes++
	return 0
}

// write writes data at off into f, pending.
func (p *FS) write(f *file, data []byte, off int64) syscall.Errno {
	p.mu.Lock()
	defer p.mu.Unlock()
	if errno := p.step(); errno != 0 {
		return errno
	}
	p.seq++
	c := change{seq: p.seq, off: off, data: slices.Clone(data)}
	// The running system's copy is never shared with the disk's.
	f.data = c.apply(slices.Clip(f.data), len(c.data))
	f.pending = append(f.pending, c)
	return 0
}

// truncate sets f's size, pending.
func (p *FS) truncate(f *file, size int64) syscall.Errno {
	p.mu.Lock()
	defer p.mu.Unlock()
	if int64(len(f.data)) == size {
		return 0
	}
	if errno := p.step(); errno != 0 {
		return errno
	}
	p.seq++
	c := change{seq: p.seq, truncate: true, size: size}
	f.data = c.apply(slices.Clip(f.data), 0)
	f.pending = append(f.pending, c)
	return 0
}

// sync makes f's pending changes durable, and the names it has.
func (p *FS) sync(f *file) syscall.Errno {
	p.mu.Lock()
	defer p.mu.Unlock()
	if errno := p.step(); errno != 0 {
		return errno
	}
	f.disk = slices.Clone(f.data)
	f.pending = nil
	for name, g := range p.names {
		if g == f {
			p.durable[name] = f
		}
	}
	return 0
}

// syncDir makes the directory's names durable.
func (p *FS) syncDir() syscall.Errno {
	p.mu.Lock()
	defer p.mu.Unlock()
	if errno := p.step(); errno != 0 {
		return errno
	}
	p.durable = maps.Clone(p.names)
	return 0
}

// create adds an empty file named name.
func (p *FS) create(name string, excl bool) (*file, syscall.Errno) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if f := p.names[name]; f != nil {
		if excl {
			return nil, syscall.EEXIST
		}
		return f, 0
	}
	if errno := p.step(); errno != 0 {
		return nil, errno
	}
	f := &file{ino: p.nextIno}
	p.nextIno++
	p.names[name] = f
	return f, 0
}

// unlink removes name.
func (p *FS) unlink(name string) syscall.Errno {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.names[name] == nil {
		return syscall.ENOENT
	}
	if errno := p.step(); errno != 0 {
		return errno
	}
	delete(p.names, name)
	return 0
}

// rename moves name to newName, replacing it unless noReplace.
func (p *FS) rename(name, newName string, noReplace bool) syscall.Errno {
	p.mu.Lock()
	defer p.mu.Unlock()
	f := p.names[name]
	if f == nil {
		return syscall.ENOENT
	}
	if noReplace && p.names[newName] != nil {
		return syscall.EEXIST
	}
	if errno := p.step(); errno != 0 {
		return errno
	}
	delete(p.names, name)
	p.names[newName] = f
	return 0
}

// lookup returns the file named name, nil if none.
func (p *FS) lookup(name string) *file {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.names[name]
}

// list returns the directory's names, sorted.
func (p *FS) list() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Sorted(maps.Keys(p.names))
}

// read copies what the running system sees of f at off into dest.
func (p *FS) read(f *file, dest []byte, off int64) []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	if off >= int64(len(f.data)) {
		return nil
	}
	n := copy(dest, f.data[off:])
	return dest[:n]
}

// size returns f's size as the running system sees it.
func (p *FS) size(f *file) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return int64(len(f.data))
}

// Unmount unmounts the file system.
func (p *FS) Unmount() error {
	if p.server == nil {
		return errors.New("powercut: not mounted")
	}
	return p.server.Unmount()
}

// newRand returns a source seeded by seed, or by chance when seed is 0.
func newRand(seed uint64) *rand.Rand {
	if seed == 0 {
		seed = rand.Uint64()
	}
	return rand.New(rand.NewPCG(seed, 0))
}
