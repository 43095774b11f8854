//go:build unix

package pgserver

import (
	"os"
	"syscall"
)

// supported reports whether Start can run a server here: on Unix, yes.
func supported() error { return nil }

// sysProcAttr runs a command as as (nil: as this process), in its own
// process group so that Ctrl-C reaches the caller, which stops the server,
// and not the server mid-use; on Linux, interrupted (a fast shutdown) if the
// caller dies (dieWithParent).
func sysProcAttr(as *account) *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{Setpgid: true}
	if as != nil {
		// Groups left empty: the server drops root's supplementary groups too.
		attr.Credential = &syscall.Credential{Uid: as.uid, Gid: as.gid}
	}
	dieWithParent(attr)
	return attr
}

// killGroup kills p's process group, the server and its children.
func killGroup(p *os.Process) error {
	return syscall.Kill(-p.Pid, syscall.SIGKILL)
}
