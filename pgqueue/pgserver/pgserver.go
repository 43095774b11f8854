// Package pgserver starts a throwaway PostgreSQL server, for tests and
// demos that need a real one and must not ask for it to be installed and
// configured: a fresh cluster in a temporary directory, listening on a Unix
// socket only, trading durability for speed (fsync=off), removed by Stop.
//
// It uses the server binaries of the machine (Debian's postgresql package
// puts them in /usr/lib/postgresql/*/bin). The server refuses to run as
// root, so a root process runs it as the postgres user, or nobody. On Linux
// the server stops when the process that started it dies. It runs on Unix
// only: on Windows, Start returns an error wrapping errors.ErrUnsupported.
package pgserver

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

const (
	startTimeout = 30 * time.Second
	stopTimeout  = 10 * time.Second
)

// ErrNoBinaries is returned by Start when PostgreSQL's server binaries are
// not on this machine.
var ErrNoBinaries = errors.New("pgserver: no PostgreSQL: install it (initdb on PATH or in /usr/lib/postgresql/*/bin)")

// Server is a throwaway PostgreSQL cluster in a temporary directory: the
// data, the socket and the log.
type Server struct {
	dir     string
	conn    string
	cmd     *exec.Cmd
	exited  chan struct{} // closed when cmd has exited
	stopped sync.Once     // Main and a signal may both stop
}

// Start makes a cluster and starts its server, ready for connections as
// the superuser postgres. Call Stop when done. On Windows it returns an
// error that wraps errors.ErrUnsupported.
func Start() (*Server, error) {
	if err := supported(); err != nil {
		return nil, err
	}
	bin, ok := binaries()
	if !ok {
		return nil, ErrNoBinaries
	}
	as, err := runAs()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "idem-pg-*")
	if err != nil {
		return nil, fmt.Errorf("pgserver: %w", err)
	}
	s := &Server{dir: dir, conn: connString(dir)}
	if err := s.start(bin, as); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// port is fixed rather than defaulted, so that PGPORT in the environment
// cannot make the server and its clients disagree on the socket's name.
const port = "5432"

func connString(dir string) string {
	q := url.Values{"host": {dir}, "port": {port}, "user": {"postgres"}, "sslmode": {"disable"}}
	return "postgres:///postgres?" + q.Encode()
}

func (s *Server) start(bin string, as *account) error {
	if as != nil {
		if err := os.Chown(s.dir, int(as.uid), int(as.gid)); err != nil {
			return fmt.Errorf("pgserver: %w", err)
		}
	}
	if err := os.Chmod(s.dir, 0o700); err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	data := filepath.Join(s.dir, "data")
	initdb := s.command(bin, "initdb", as, "-D", data, "-A", "trust", "-U", "postgres",
		"-E", "UTF8", "--no-locale", "--no-sync", "--no-instructions")
	if out, err := initdb.CombinedOutput(); err != nil {
		return fmt.Errorf("pgserver: initdb: %v\n%s", err, out)
	}
	log, err := os.Create(filepath.Join(s.dir, "postgres.log"))
	if err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	defer log.Close() // the server has its own descriptor
	s.cmd = s.command(bin, "postgres", as, "-D", data, "-k", s.dir, "-p", port,
		"-c", "listen_addresses=", "-c", "fsync=off", "-c", "synchronous_commit=off",
		"-c", "full_page_writes=off", "-c", "max_connections=200", "-c", "shared_buffers=128MB")
	s.cmd.Stdout, s.cmd.Stderr = log, log
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("pgserver: postgres: %w", err)
	}
	s.exited = make(chan struct{})
	go func() {
		_ = s.cmd.Wait()
		close(s.exited)
	}()
	return s.waitReady()
}

// command runs bin/name as as (sysProcAttr says how).
func (s *Server) command(bin, name string, as *account, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(bin, name), args...)
	cmd.Dir = s.dir // the caller's may be closed to as's user
	cmd.SysProcAttr = sysProcAttr(as)
	return cmd
}

// waitReady returns once the server accepts connections.
func (s *Server) waitReady() error {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	for {
		c, err := pgx.Connect(ctx, s.conn)
		if err == nil {
			return c.Close(ctx)
		}
		select {
		case <-s.exited:
			return fmt.Errorf("pgserver: postgres exited: %v\n%s", s.cmd.ProcessState, s.log())
		case <-ctx.Done():
			return fmt.Errorf("pgserver: postgres not accepting connections after %v: %v\n%s", startTimeout, err, s.log())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (s *Server) log() []byte {
	b, _ := os.ReadFile(filepath.Join(s.dir, "postgres.log"))
	return b
}

// ConnString returns a connection string for the server's postgres
// database, in the URL form pgx.ParseConfig accepts.
func (s *Server) ConnString() string { return s.conn }

// Stop shuts the server down fast (SIGINT ends the sessions and skips
// waiting for clients), kills its process group if that hangs, and removes
// its files.
func (s *Server) Stop() {
	s.stopped.Do(func() {
		if s.exited != nil {
			_ = s.cmd.Process.Signal(os.Interrupt)
			select {
			case <-s.exited:
			case <-time.After(stopTimeout):
				_ = killGroup(s.cmd.Process)
				<-s.exited
			}
		}
		_ = os.RemoveAll(s.dir)
	})
}

// binaries returns the directory holding initdb and postgres: the newest
// version's under /usr/lib/postgresql, as Debian installs them, or else
// initdb's on PATH.
func binaries() (string, bool) {
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	version := func(initdb string) int {
		v, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(initdb))))
		return v
	}
	if len(found) > 0 {
		newest := slices.MaxFunc(found, func(a, b string) int { return version(a) - version(b) })
		return filepath.Dir(newest), true
	}
	initdb, err := exec.LookPath("initdb")
	if err != nil {
		return "", false
	}
	// A link on PATH points to where postgres lives beside it.
	if real, err := filepath.EvalSymlinks(initdb); err == nil {
		initdb = real
	}
	return filepath.Dir(initdb), true
}

// account is a user to run the server as.
type account struct{ uid, gid uint32 }

// runAs returns whom to run the server as: nil for ourselves, but the
// server refuses to run as root, so root runs it as postgres, or as nobody
// where there is no such user.
func runAs() (*account, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		u, err = user.Lookup("nobody")
	}
	if err != nil {
		return nil, fmt.Errorf("pgserver: running as root and no postgres or nobody user to run the server as: %w", err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("pgserver: user %s: %w", u.Username, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("pgserver: user %s: %w", u.Username, err)
	}
	return &account{uid: uint32(uid), gid: uint32(gid)}, nil
}
