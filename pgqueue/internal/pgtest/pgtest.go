// Package pgtest gives each test a fresh PostgreSQL database, as t.TempDir
// gives a fresh directory: on the server named by IDEM_TEST_PG, or else on a
// throwaway server that the test binary starts once and stops at exit.
//
// A package using it runs its tests through Main:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
// Without IDEM_TEST_PG and without PostgreSQL's binaries, DB skips the test,
// or fails it when CI=true, so that CI cannot pass by skipping.
//
// The throwaway server listens on a Unix socket only, in a directory under
// os.TempDir, and trades durability for speed (fsync=off). It runs on Linux,
// where it is stopped even when the test binary dies without running Main's
// cleanup; its directory is then left behind.
package pgtest

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// envServer names the variable holding a connection string to an existing
// server; when set, nothing is started.
const envServer = "IDEM_TEST_PG"

const (
	startTimeout = 30 * time.Second
	stopTimeout  = 10 * time.Second
	adminTimeout = 30 * time.Second
)

// errNoBinaries is returned when neither IDEM_TEST_PG nor initdb is there.
var errNoBinaries = errors.New("pgtest: no PostgreSQL: set " + envServer +
	" to a server's connection string, or install PostgreSQL (initdb on PATH or in /usr/lib/postgresql/*/bin)")

// The server is per process, not per test, because starting one costs most
// of a second; these are the only package-level variables.
var (
	mainRan atomic.Bool // whether Main runs the tests, so that someone stops the server
	shared  struct {
		once sync.Once
		conn string  // the server's connection string, on its postgres database
		srv  *server // nil when IDEM_TEST_PG names the server
		err  error
	}
)

// Main runs the tests, then stops the server DB started and removes its
// files, and exits with the tests' code. Call it from TestMain.
func Main(m *testing.M) {
	mainRan.Store(true)
	code := m.Run()
	if shared.srv != nil {
		shared.srv.stop()
	}
	os.Exit(code)
}

// DB creates an empty database for t and returns a connection string for it,
// which pgx.ParseConfig accepts. The database is dropped when t ends, even
// with connections still open. Safe for parallel tests.
func DB(t testing.TB) string {
	t.Helper()
	if !mainRan.Load() {
		t.Fatal("pgtest: DB needs the package's TestMain to call pgtest.Main, which stops the server")
	}
	admin := serverConn(t)
	name := "idem_test_" + strings.ToLower(rand.Text())
	conn, err := withDatabase(admin, name)
	if err != nil {
		t.Fatalf("pgtest: %s: %v", envServer, err)
	}
	if err := run(admin, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	t.Cleanup(func() {
		if err := run(admin, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("pgtest: drop database: %v", err)
		}
	})
	return conn
}

// serverConn returns the connection string of the server, starting it on first
// use, or ends t when there is none.
func serverConn(t testing.TB) string {
	t.Helper()
	shared.once.Do(func() {
		if conn := os.Getenv(envServer); conn != "" {
			shared.conn = conn
			return
		}
		shared.srv, shared.err = start()
		if shared.err == nil {
			shared.conn = shared.srv.conn
			stopOnSignal(shared.srv)
		}
	})
	switch {
	case errors.Is(shared.err, errNoBinaries) && os.Getenv("CI") != "true":
		t.Skip(shared.err)
	case shared.err != nil:
		t.Fatal(shared.err)
	}
	return shared.conn
}

// stopOnSignal stops s when the test binary is interrupted (Ctrl-C reaches
// it, not the server in its own process group), then dies of the signal.
// A signal ignored from the start, as in a shell's background job, stays so.
func stopOnSignal(s *server) {
	c := make(chan os.Signal, 1)
	for _, sig := range []os.Signal{os.Interrupt, syscall.SIGTERM} {
		if !signal.Ignored(sig) {
			signal.Notify(c, sig)
		}
	}
	go func() {
		sig := <-c
		s.stop()
		signal.Reset(sig)
		_ = syscall.Kill(os.Getpid(), sig.(syscall.Signal))
	}()
}

// run runs one statement on a connection of its own: CREATE and DROP
// DATABASE cannot run in a transaction, and a shared connection would need
// guarding.
func run(conn, sql string) error {
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	c, err := pgx.Connect(ctx, conn)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	_, err = c.Exec(ctx, sql)
	return err
}

// withDatabase returns conn, in URL or keyword/value form, naming database
// name instead of its own.
func withDatabase(conn, name string) (string, error) {
	if !strings.HasPrefix(conn, "postgres://") && !strings.HasPrefix(conn, "postgresql://") {
		return conn + " dbname=" + name, nil // a later keyword wins
	}
	u, err := url.Parse(conn)
	if err != nil {
		return "", err
	}
	u.Path, u.RawPath = "/"+name, ""
	return u.String(), nil
}

// server is a throwaway PostgreSQL cluster in dir: the data in dir/data,
// the socket and the log beside it.
type server struct {
	dir     string
	conn    string
	cmd     *exec.Cmd
	exited  chan struct{} // closed when cmd has exited
	stopped sync.Once     // Main and a signal may both stop
}

// start makes a cluster and starts its server.
func start() (*server, error) {
	bin, ok := binaries()
	if !ok {
		return nil, errNoBinaries
	}
	cred, err := runAs()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "idem-pg-*")
	if err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	s := &server{dir: dir, conn: connString(dir)}
	if err := s.start(bin, cred); err != nil {
		s.stop()
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

func (s *server) start(bin string, cred *syscall.Credential) error {
	if cred != nil {
		if err := os.Chown(s.dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return fmt.Errorf("pgtest: %w", err)
		}
	}
	if err := os.Chmod(s.dir, 0o700); err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	data := filepath.Join(s.dir, "data")
	initdb := s.command(bin, "initdb", cred, "-D", data, "-A", "trust", "-U", "postgres",
		"-E", "UTF8", "--no-locale", "--no-sync", "--no-instructions")
	if out, err := initdb.CombinedOutput(); err != nil {
		return fmt.Errorf("pgtest: initdb: %v\n%s", err, out)
	}
	log, err := os.Create(filepath.Join(s.dir, "postgres.log"))
	if err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	defer log.Close() // the server has its own descriptor
	s.cmd = s.command(bin, "postgres", cred, "-D", data, "-k", s.dir, "-p", port,
		"-c", "listen_addresses=", "-c", "fsync=off", "-c", "synchronous_commit=off",
		"-c", "full_page_writes=off", "-c", "max_connections=200", "-c", "shared_buffers=128MB")
	s.cmd.Stdout, s.cmd.Stderr = log, log
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("pgtest: postgres: %w", err)
	}
	s.exited = make(chan struct{})
	go func() {
		_ = s.cmd.Wait()
		close(s.exited)
	}()
	return s.waitReady()
}

// command runs bin/name as cred, in its own process group so that Ctrl-C
// reaches the test binary, which stops the server, and not the server
// mid-test; and interrupted (a fast shutdown) if the test binary dies.
func (s *server) command(bin, name string, cred *syscall.Credential, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(bin, name), args...)
	cmd.Dir = s.dir // the caller's may be closed to cred's user
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: syscall.SIGINT}
	return cmd
}

// waitReady returns once the server accepts connections.
func (s *server) waitReady() error {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	for {
		c, err := pgx.Connect(ctx, s.conn)
		if err == nil {
			return c.Close(ctx)
		}
		select {
		case <-s.exited:
			return fmt.Errorf("pgtest: postgres exited: %v\n%s", s.cmd.ProcessState, s.log())
		case <-ctx.Done():
			return fmt.Errorf("pgtest: postgres not accepting connections after %v: %v\n%s", startTimeout, err, s.log())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (s *server) log() []byte {
	b, _ := os.ReadFile(filepath.Join(s.dir, "postgres.log"))
	return b
}

// stop shuts the server down fast (SIGINT ends the sessions and skips
// waiting for clients), kills its process group if that hangs, and removes
// its files.
func (s *server) stop() {
	s.stopped.Do(func() {
		if s.exited != nil {
			_ = s.cmd.Process.Signal(os.Interrupt)
			select {
			case <-s.exited:
			case <-time.After(stopTimeout):
				_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
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

// runAs returns whom to run the server as: nil for ourselves, but the
// server refuses to run as root, so root runs it as postgres, or as nobody
// where there is no such user.
func runAs() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		u, err = user.Lookup("nobody")
	}
	if err != nil {
		return nil, fmt.Errorf("pgtest: running as root and no postgres or nobody user to run the server as: %w", err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("pgtest: user %s: %w", u.Username, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("pgtest: user %s: %w", u.Username, err)
	}
	// Groups left empty: the server drops root's supplementary groups too.
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}
