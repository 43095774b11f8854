package main

import (
	"context"
	"crypto/rand"
	"errors"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/pgqueue"
	"github.com/idem-go/idem/pgqueue/pgserver"
	"github.com/idem-go/idem/queue"
)

// The tests' PostgreSQL: the server IDEM_TEST_PG names, or a throwaway one
// (package pgserver) started on first use and stopped by TestMain. Each
// test gets a database of its own.
var pg struct {
	once sync.Once
	conn string
	srv  *pgserver.Server
	err  error
}

// stopPG stops the throwaway server, if one was started.
func stopPG() {
	if pg.srv != nil {
		pg.srv.Stop()
	}
}

// pgDB returns the DSN of a fresh, empty database, dropped when t ends.
// Without PostgreSQL it skips t, or fails it when CI=true.
func pgDB(t *testing.T) string {
	t.Helper()
	pg.once.Do(func() {
		if conn := os.Getenv("IDEM_TEST_PG"); conn != "" {
			pg.conn = conn
			return
		}
		pg.srv, pg.err = pgserver.Start()
		if pg.err == nil {
			pg.conn = pg.srv.ConnString()
		}
	})
	switch {
	case errors.Is(pg.err, pgserver.ErrNoBinaries) && os.Getenv("CI") != "true":
		t.Skipf("%v, or set IDEM_TEST_PG", pg.err)
	case pg.err != nil:
		t.Fatal(pg.err)
	}
	name := "idemq_test_" + strings.ToLower(rand.Text())
	require.NoError(t, pgExec(pg.conn, "CREATE DATABASE "+name))
	t.Cleanup(func() {
		if err := pgExec(pg.conn, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database: %v", err)
		}
	})
	return withDatabase(t, pg.conn, name)
}

func pgExec(conn, sql string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, conn)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	_, err = c.Exec(ctx, sql)
	return err
}

// withDatabase returns conn naming database name instead of its own.
func withDatabase(t *testing.T, conn, name string) string {
	if !isURLDSN(conn) {
		return conn + " dbname=" + name
	}
	u, err := url.Parse(conn)
	require.NoError(t, err)
	u.Path, u.RawPath = "/"+name, ""
	return u.String()
}

// pgQueueOf migrates a fresh database, enqueues ins there as queueFile
// does in a file, and returns the DSN and the records' IDs.
func pgQueueOf(t *testing.T, ins ...*idem.Intent) (string, []queue.ID) {
	t.Helper()
	dsn := pgDB(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dsn)
	require.NoError(t, err)
	defer pool.Close()
	require.NoError(t, pgqueue.Migrate(ctx, pool))
	q, err := pgqueue.New(ctx, pool, pgqueue.Options{NoListen: true})
	require.NoError(t, err)
	var ids []queue.ID
	for _, in := range ins {
		id, err := q.Enqueue(ctx, in)
		require.NoError(t, err)
		ids = append(ids, id)
	}
	require.NoError(t, q.Close())
	return dsn, ids
}
