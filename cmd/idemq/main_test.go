package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/queue"
)

// binary is the idemq the tests run, built once by TestMain.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "idemq-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "idemq")
	if out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	stopPG()
	os.RemoveAll(dir)
	os.Exit(code)
}

// result is what one run of the binary did.
type result struct {
	stdout, stderr string
	code           int
	took           time.Duration
}

// idemq runs the binary with args and env added to the environment. It
// fails the test if the binary does not end within 20 seconds.
func idemq(t *testing.T, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String(), took: time.Since(start)}
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("idemq %v did not end within 20s; stderr:\n%s", args, r.stderr)
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("idemq %v: %v", args, err)
	}
	return r
}

// ok runs idemq on file and requires exit code 0.
func ok(t *testing.T, file string, args ...string) result {
	t.Helper()
	r := idemq(t, nil, append([]string{"--file", file}, args...)...)
	require.Equal(t, 0, r.code, "idemq %v: exit code; stderr:\n%s", args, r.stderr)
	return r
}

// secretURL is a URL with a secret in its query, which no output may show.
const secretURL = "http://127.0.0.1:1/pay?token=s3cret"

// intent returns a POST of body to url with opts.
func intent(t *testing.T, url, body string, opts ...idem.IntentOption) *idem.Intent {
	t.Helper()
	in, err := idem.NewIntent("POST", url, []byte(body), opts...)
	require.NoError(t, err)
	return in
}

// queueFile writes a queue file holding ins, closed for idemq to open, and
// returns its path and the records' IDs.
func queueFile(t *testing.T, ins ...*idem.Intent) (string, []queue.ID) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "q.db")
	q, err := queue.Open(path, queue.Options{})
	require.NoError(t, err)
	var ids []queue.ID
	for _, in := range ins {
		id, err := q.Enqueue(context.Background(), in)
		require.NoError(t, err)
		ids = append(ids, id)
	}
	require.NoError(t, q.Close())
	return path, ids
}

// noSecret checks that r shows neither secret nor the URL's query.
func noSecret(t *testing.T, r result, secrets ...string) {
	t.Helper()
	for _, s := range append(secrets, "s3cret", "token=") {
		assert.NotContains(t, r.stdout, s, "stdout shows a secret")
		assert.NotContains(t, r.stderr, s, "stderr shows a secret")
	}
}

func TestHelpListsCommands(t *testing.T) {
	r := idemq(t, nil, "-h")
	require.Equal(t, 0, r.code, r.stderr)
	for _, c := range []string{"ls", "show", "stats", "discard", "resubmit", "reset-clock", "drain", "salvage", "migrate"} {
		assert.Regexp(t, `(?m)^\s+`+c+`\s`, r.stdout, "idemq -h does not list %s", c)
	}
	assert.Contains(t, r.stdout, "--dsn", "the help names the DSN flag")
}

func TestUsageErrors(t *testing.T) {
	file, _ := queueFile(t, intent(t, secretURL, "a"))
	tests := []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"no file", []string{"ls"}, exitUsage, "no queue file"},
		{"unknown command", []string{"-f", file, "frobnicate"}, exitUsage, `unknown command "frobnicate"`},
		{"unknown flag", []string{"-f", file, "ls", "--colour"}, exitUsage, "unknown flag: --colour"},
		{"bad state", []string{"-f", file, "ls", "--state", "lost"}, exitUsage, `--state "lost"`},
		{"bad ID", []string{"-f", file, "show", "x1"}, exitUsage, `"x1" is not a record ID`},
		{"no ID", []string{"-f", file, "show"}, exitUsage, "takes one record ID"},
		{"extra argument", []string{"-f", file, "stats", "now"}, exitUsage, "takes no arguments"},
		{"a DSN as a file", []string{"-f", "postgres://u:hunter2@db/q", "ls"}, exitUsage, "postgres://u:xxxxx@db/q: --file takes a bbolt queue file; pass a PostgreSQL DSN with --dsn"},
		{"a file and a DSN", []string{"-f", file, "--dsn", "postgres://db/q", "ls"}, exitUsage, "both a queue file"},
		{"migrate a file", []string{"-f", file, "migrate"}, exitUsage, "a queue file needs no migration"},
		{"missing file", []string{"-f", file + ".typo", "ls"}, exitError, "no such queue file"},
		{"no such record", []string{"-f", file, "show", "99"}, exitError, "no such record"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := idemq(t, []string{"IDEMQ_FILE=", "IDEMQ_DSN="}, tt.args...)
			assert.Equal(t, tt.code, r.code, "exit code; stderr:\n%s", r.stderr)
			assert.True(t, strings.HasPrefix(r.stderr, "idemq: "), "stderr %q does not start with idemq: ", r.stderr)
			assert.Contains(t, r.stderr, tt.msg)
			assert.Empty(t, r.stdout)
		})
	}
	_, err := os.Stat(file + ".typo")
	assert.ErrorIs(t, err, os.ErrNotExist, "idemq created the file it was misnamed")
}

func TestFileFromEnvironment(t *testing.T) {
	file, _ := queueFile(t, intent(t, secretURL, "a"))
	r := idemq(t, []string{"IDEMQ_FILE=" + file}, "stats")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "pending:")
}

// TestLockedFile: a file another Queue holds, here one in the test's
// process, is refused quickly with a message naming it, for every command.
func TestLockedFile(t *testing.T) {
	file, _ := queueFile(t, intent(t, secretURL, "a"))
	q, err := queue.Open(file, queue.Options{})
	require.NoError(t, err)
	defer q.Close()
	for _, args := range [][]string{{"ls"}, {"show", "1"}, {"drain"}} {
		t.Run(args[0], func(t *testing.T) {
			r := idemq(t, nil, append([]string{"--file", file, "--lock-timeout", "300ms"}, args...)...)
			assert.Equal(t, exitError, r.code)
			assert.Less(t, r.took, 5*time.Second, "a held file must not make idemq hang")
			assert.Contains(t, r.stderr, "idemq: "+file+" is held by another process")
			assert.Contains(t, r.stderr, "300ms")
		})
	}
}

// TestReadCommandsAreReadOnly: ls, show and stats open the file read-only:
// the file is left byte for byte as it was, and they run beside another
// reader of the same file.
func TestReadCommandsAreReadOnly(t *testing.T) {
	file, _ := queueFile(t, intent(t, secretURL, "a"), intent(t, secretURL, "b"))
	before, err := os.ReadFile(file)
	require.NoError(t, err)
	reader, err := queue.Open(file, queue.Options{ReadOnly: true})
	require.NoError(t, err)
	defer reader.Close()
	for _, args := range [][]string{{"ls"}, {"show", "1"}, {"stats"}} {
		ok(t, file, args...)
	}
	after, err := os.ReadFile(file)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(before, after), "a read command changed the file")
	r := idemq(t, nil, "--file", file, "--lock-timeout", "200ms", "discard", "1")
	assert.Equal(t, exitError, r.code, "a command that writes waits for the reader")
}
