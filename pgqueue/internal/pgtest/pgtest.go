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
// The throwaway server is package pgserver's: a Unix socket only, in a
// directory under os.TempDir, durability traded for speed (fsync=off). On
// Linux it is stopped even when the test binary dies without running Main's
// cleanup; its directory is then left behind.
package pgtest

import (
	"context"
	"crypto/rand"
	"errors"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idem-go/idem/pgqueue/pgserver"
)

// envServer names the variable holding a connection string to an existing
// server; when set, nothing is started.
const envServer = "IDEM_TEST_PG"

// adminTimeout bounds creating and dropping a database.
const adminTimeout = 30 * time.Second

// The server is per process, not per test, because starting one costs most
// of a second; these are the only package-level variables.
var (
	mainRan atomic.Bool // whether Main runs the tests, so that someone stops the server
	shared  struct {
		once sync.Once
		conn string           // the server's connection string, on its postgres database
		srv  *pgserver.Server // nil when IDEM_TEST_PG names the server
		err  error
	}
)

// Main runs the tests, then stops the server DB started and removes its
// files, and exits with the tests' code. Call it from TestMain.
func Main(m *testing.M) {
	mainRan.Store(true)
	code := m.Run()
	if shared.srv != nil {
		shared.srv.Stop()
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
		shared.srv, shared.err = pgserver.Start()
		if shared.err == nil {
			shared.conn = shared.srv.ConnString()
			stopOnSignal(shared.srv)
		}
	})
	switch {
	case (errors.Is(shared.err, pgserver.ErrNoBinaries) || errors.Is(shared.err, errors.ErrUnsupported)) && os.Getenv("CI") != "true":
		t.Skipf("%v, or set %s to a server's connection string", shared.err, envServer)
	case shared.err != nil:
		t.Fatal(shared.err)
	}
	return shared.conn
}

// stopOnSignal stops s when the test binary is interrupted (Ctrl-C reaches
// it, not the server in its own process group), then dies of the signal.
// A signal ignored from the start, as in a shell's background job, stays so.
func stopOnSignal(s *pgserver.Server) {
	c := make(chan os.Signal, 1)
	for _, sig := range []os.Signal{os.Interrupt, syscall.SIGTERM} {
		if !signal.Ignored(sig) {
			signal.Notify(c, sig)
		}
	}
	go func() {
		sig := <-c
		s.Stop()
		signal.Reset(sig)
		self, err := os.FindProcess(os.Getpid())
		if err == nil {
			err = self.Signal(sig)
		}
		if err != nil {
			os.Exit(2) // no signal to die of (Windows sends none to itself)
		}
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
