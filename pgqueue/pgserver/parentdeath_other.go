//go:build unix && !linux

package pgserver

import "syscall"

// dieWithParent does nothing: only Linux can signal a process when its
// parent dies (Pdeathsig). A server whose caller died without Stop runs
// until it is stopped by hand.
func dieWithParent(*syscall.SysProcAttr) {}
