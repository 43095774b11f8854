package pgserver

import "syscall"

// dieWithParent has Linux interrupt the command when the caller dies.
func dieWithParent(attr *syscall.SysProcAttr) { attr.Pdeathsig = syscall.SIGINT }
