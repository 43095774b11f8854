package powercut

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// The FUSE side: the root directory and its files, each a thin door onto
// FS, which holds the state. The kernel is told to cache nothing it could
// keep across a cut: entries and attributes time out at once, and a file's
// pages are dropped at each open (no FOPEN_KEEP_CACHE), so that a queue
// reopened after a cut reads what the disk held.

// dirNode is the root directory.
type dirNode struct {
	gofs.Inode
	p *FS
}

var (
	_ gofs.NodeLookuper  = (*dirNode)(nil)
	_ gofs.NodeCreater   = (*dirNode)(nil)
	_ gofs.NodeUnlinker  = (*dirNode)(nil)
	_ gofs.NodeRenamer   = (*dirNode)(nil)
	_ gofs.NodeReaddirer = (*dirNode)(nil)
	_ gofs.NodeFsyncer   = (*dirNode)(nil)
	_ gofs.NodeGetattrer = (*dirNode)(nil)
)

func (d *dirNode) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = fuse.S_IFDIR | 0o755
	out.Nlink = 2
	return 0
}

func (d *dirNode) child(ctx context.Context, f *file, out *fuse.EntryOut) *gofs.Inode {
	n := &fileNode{p: d.p, f: f}
	n.attr(&out.Attr)
	return d.NewInode(ctx, n, gofs.StableAttr{Mode: fuse.S_IFREG, Ino: f.ino})
}

func (d *dirNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	f := d.p.lookup(name)
	if f == nil {
		return nil, syscall.ENOENT
	}
	return d.child(ctx, f, out), 0
}

func (d *dirNode) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	f, errno := d.p.create(name, flags&syscall.O_EXCL != 0)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	return d.child(ctx, f, out), nil, 0, 0
}

func (d *dirNode) Unlink(ctx context.Context, name string) syscall.Errno {
	return d.p.unlink(name)
}

func (d *dirNode) Rename(ctx context.Context, name string, newParent gofs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	if newParent.EmbeddedInode() != d.EmbeddedInode() || flags&gofs.RENAME_EXCHANGE != 0 {
		return syscall.ENOTSUP
	}
	return d.p.rename(name, newName, flags&renameNoReplace != 0)
}

func (d *dirNode) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	var entries []fuse.DirEntry
	for _, name := range d.p.list() {
		if f := d.p.lookup(name); f != nil {
			entries = append(entries, fuse.DirEntry{Name: name, Mode: fuse.S_IFREG, Ino: f.ino})
		}
	}
	return gofs.NewListDirStream(entries), 0
}

func (d *dirNode) Fsync(ctx context.Context, fh gofs.FileHandle, flags uint32) syscall.Errno {
	return d.p.syncDir()
}

// fileNode is a regular file.
type fileNode struct {
	gofs.Inode
	p *FS
	f *file
}

var (
	_ gofs.NodeOpener    = (*fileNode)(nil)
	_ gofs.NodeReader    = (*fileNode)(nil)
	_ gofs.NodeWriter    = (*fileNode)(nil)
	_ gofs.NodeFsyncer   = (*fileNode)(nil)
	_ gofs.NodeFlusher   = (*fileNode)(nil)
	_ gofs.NodeGetattrer = (*fileNode)(nil)
	_ gofs.NodeSetattrer = (*fileNode)(nil)
)

func (n *fileNode) attr(out *fuse.Attr) {
	out.Ino = n.f.ino
	out.Mode = fuse.S_IFREG | 0o600
	out.Nlink = 1
	out.Size = uint64(n.p.size(n.f))
	out.Blksize = 4096
	out.Blocks = (out.Size + 511) / 512
}

func (n *fileNode) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	if flags&syscall.O_TRUNC != 0 {
		if errno := n.p.truncate(n.f, 0); errno != 0 {
			return nil, 0, errno
		}
	}
	return nil, 0, 0
}

func (n *fileNode) Read(ctx context.Context, fh gofs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	return fuse.ReadResultData(n.p.read(n.f, dest, off)), 0
}

func (n *fileNode) Write(ctx context.Context, fh gofs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	if errno := n.p.write(n.f, data, off); errno != 0 {
		return 0, errno
	}
	return uint32(len(data)), 0
}

func (n *fileNode) Fsync(ctx context.Context, fh gofs.FileHandle, flags uint32) syscall.Errno {
	return n.p.sync(n.f)
}

func (n *fileNode) Flush(ctx context.Context, fh gofs.FileHandle) syscall.Errno {
	return 0
}

func (n *fileNode) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	n.attr(&out.Attr)
	return 0
}

func (n *fileNode) Setattr(ctx context.Context, fh gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if size, ok := in.GetSize(); ok {
		if errno := n.p.truncate(n.f, int64(size)); errno != 0 {
			return errno
		}
	}
	n.attr(&out.Attr)
	return 0
}

// Mount mounts an empty power-cut file system on dir, an empty directory,
// with the power on, served by this process. It needs /dev/fuse and the
// right to mount (root, or fusermount3 on the PATH). A process that maps a
// file of it, as bbolt does, must not serve it: use Start (see remote.go).
func Mount(dir string) (*FS, error) {
	p := newFS()
	zero := time.Duration(0)
	server, err := gofs.Mount(dir, &dirNode{p: p}, &gofs.Options{
		MountOptions: fuse.MountOptions{
			DirectMount:   true,
			FsName:        "powercut",
			Name:          "powercut",
			DisableXAttrs: true,
		},
		EntryTimeout:    &zero,
		AttrTimeout:     &zero,
		NegativeTimeout: &zero,
		UID:             uint32(os.Getuid()),
		GID:             uint32(os.Getgid()),
	})
	if err != nil {
		return nil, fmt.Errorf("powercut: mount %s: %w", dir, err)
	}
	p.server, p.dir = server, dir
	return p, nil
}

// renameNoReplace is RENAME_NOREPLACE of renameat2(2).
const renameNoReplace = 1
