package main

import (
	"context"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// noEnv clears the variables that name a queue.
var noEnv = []string{"IDEMQ_FILE=", "IDEMQ_DSN="}

func TestRedactDSN(t *testing.T) {
	tests := []struct{ dsn, want string }{
		{"postgres://u:hunter2@db:5432/q?sslmode=disable", "postgres://u:xxxxx@db:5432/q?sslmode=disable"},
		{"postgresql://u@db/q?password=hunter2", "postgresql://u@db/q?password=xxxxx"},
		{"postgres://db/q", "postgres://db/q"},
		{"host=db user=u password=hunter2 dbname=q", "host=db user=u password=xxxxx dbname=q"},
		{"host=db password = 'hun ter2' dbname=q", "host=db password = xxxxx dbname=q"},
		{"host=db dbname=q", "host=db dbname=q"},
		{"postgres://u:hunter2@db:bad/q", "(a DSN that does not parse as a URL)"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, redactDSN(tt.dsn), "redactDSN(%q)", tt.dsn)
	}
}

// withPassword returns dsn with user postgres and password pw in its user
// info: the throwaway server trusts its socket and never asks for it.
func withPassword(t *testing.T, dsn, pw string) string {
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	u.User = url.UserPassword("postgres", pw)
	return u.String()
}

// TestDSNPasswordNeverPrinted: the password shows in neither output, nor
// progress lines, nor errors.
func TestDSNPasswordNeverPrinted(t *testing.T) {
	dsn, _ := pgQueueOf(t, intent(t, secretURL, "a"))
	dsn = withPassword(t, dsn, "hunter2")
	for _, args := range [][]string{{"stats"}, {"stats", "--json"}, {"drain", "--timeout", "200ms", "--progress", "plain"}, {"migrate", "--check"}} {
		r := idemq(t, noEnv, append([]string{"--dsn", dsn}, args...)...)
		assert.Contains(t, r.stdout+r.stderr, "postgres:xxxxx@", "idemq %v names the queue", args)
		noSecret(t, r, "hunter2")
	}
	bad := strings.Replace(dsn, "/idemq_test_", "/no_such_", 1)
	r := idemq(t, noEnv, "--dsn", bad, "ls")
	assert.Equal(t, exitError, r.code)
	assert.Contains(t, r.stderr, "idemq: postgres://postgres:xxxxx@/no_such_")
	noSecret(t, r, "hunter2")
	r = idemq(t, noEnv, "--dsn", "host=/nowhere password=hunter2 dbname=q", "ls")
	assert.Equal(t, exitError, r.code)
	assert.Contains(t, r.stderr, "password=xxxxx")
	noSecret(t, r, "hunter2")
}

func TestDSNFromEnvironment(t *testing.T) {
	dsn, _ := pgQueueOf(t, intent(t, secretURL, "a"))
	r := idemq(t, []string{"IDEMQ_FILE=", "IDEMQ_DSN=" + dsn}, "stats")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "pending:         1")
	r = idemq(t, []string{"IDEMQ_FILE=/some/q.db", "IDEMQ_DSN=" + dsn}, "stats")
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.stderr, "idemq: both a queue file (--file or IDEMQ_FILE) and a DSN (--dsn or IDEMQ_DSN): give one")
}

// tablesDump returns the queue's tables as text, leases and all.
func tablesDump(t *testing.T, dsn string) string {
	ctx := context.Background()
	c, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer c.Close(ctx)
	var out string
	require.NoError(t, c.QueryRow(ctx, `SELECT
		(SELECT coalesce(string_agg(l::text, E'\n' ORDER BY name), '') FROM idem_queue_lanes l) || E'\n' ||
		(SELECT coalesce(string_agg(r::text, E'\n' ORDER BY id), '') FROM idem_queue_records r)`).Scan(&out))
	return out
}

// TestPostgresReadCommandsChangeNothing: ls, show and stats leave the
// tables as they were: no lease taken, no record moved.
func TestPostgresReadCommandsChangeNothing(t *testing.T) {
	dsn, _ := pgQueueOf(t, intent(t, secretURL, "a"), intent(t, secretURL, "b"))
	before := tablesDump(t, dsn)
	for _, args := range [][]string{{"ls"}, {"show", "1"}, {"stats"}, {"reset-clock"}} {
		r := idemq(t, noEnv, append([]string{"--dsn", dsn}, args...)...)
		require.Equal(t, exitOK, r.code, "idemq %v: %s", args, r.stderr)
	}
	assert.Equal(t, before, tablesDump(t, dsn))
}

func TestPostgresOnlyAndFileOnly(t *testing.T) {
	dsn, _ := pgQueueOf(t, intent(t, secretURL, "a"))
	r := idemq(t, noEnv, "--dsn", dsn, "salvage")
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.stderr, "idemq: salvage repairs a damaged bbolt queue file; a PostgreSQL queue (--dsn) has no file to salvage")
	r = idemq(t, noEnv, "--dsn", dsn, "reset-clock")
	assert.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, "no clock mark to reset: a PostgreSQL queue keeps none, its clock is the database server's\n", r.stdout)
}

func TestMigrate(t *testing.T) {
	dsn := pgDB(t)
	known, err := knownVersion()
	require.NoError(t, err)
	require.Greater(t, known, 1)
	src := redactDSN(dsn)

	r := idemq(t, noEnv, "--dsn", dsn, "ls")
	assert.Equal(t, exitError, r.code, "no tables yet")
	assert.Contains(t, r.stderr, "call Migrate first")
	assert.Contains(t, r.stderr, "(idemq migrate brings the tables from version 0 to "+itoa(known)+")")

	r = idemq(t, noEnv, "--dsn", dsn, "migrate", "--check")
	assert.Equal(t, exitError, r.code)
	assert.Equal(t, "tables:  "+src+"\nversion: 0 (this idemq knows up to "+itoa(known)+")\n"+itoa(known)+" migrations pending: run idemq migrate\n", r.stdout)
	assert.Equal(t, "idemq: migrations pending\n", r.stderr)

	r = idemq(t, noEnv, "--dsn", dsn, "migrate")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, "tables:  "+src+"\nversion: 0 (this idemq knows up to "+itoa(known)+")\nmigrated: version 0 -> "+itoa(known)+"\n", r.stdout)

	for _, args := range [][]string{{"migrate"}, {"migrate", "--check"}} {
		r = idemq(t, noEnv, append([]string{"--dsn", dsn}, args...)...)
		assert.Equal(t, exitOK, r.code, r.stderr)
		assert.Equal(t, "tables:  "+src+"\nversion: "+itoa(known)+" (this idemq knows up to "+itoa(known)+")\nup to date\n", r.stdout, "idemq %v", args)
	}
	r = idemq(t, noEnv, "--dsn", dsn, "stats")
	assert.Equal(t, exitOK, r.code, "the migrated tables serve: %s", r.stderr)

	require.NoError(t, pgExec(dsn, "INSERT INTO idem_queue_migrations (version) VALUES ("+itoa(known+1)+")"))
	for _, args := range [][]string{{"migrate"}, {"migrate", "--check"}} {
		r = idemq(t, noEnv, append([]string{"--dsn", dsn}, args...)...)
		assert.Equal(t, exitError, r.code)
		assert.Contains(t, r.stderr, "idemq: pgqueue: the queue's tables are newer than this build: the tables are at version "+itoa(known+1)+", this idemq knows up to "+itoa(known)+": upgrade idemq", "idemq %v", args)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
