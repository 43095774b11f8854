//go:build !unix

package pgserver

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"syscall"
)

// supported reports whether Start can run a server here: not off Unix,
// where the server's user, its process group and its Unix socket are not
// set up as Start sets them up.
func supported() error {
	return fmt.Errorf("pgserver: no throwaway server on %s (Unix only): %w", runtime.GOOS, errors.ErrUnsupported)
}

// sysProcAttr is never used: Start refuses first.
func sysProcAttr(*account) *syscall.SysProcAttr { return nil }

// killGroup kills p; never used, as Start refuses first.
func killGroup(p *os.Process) error { return p.Kill() }
