//go:build unix

package queue

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
)

// The disk-full tests need a file size limit (Unix's RLIMIT_FSIZE) or a
// mount (Linux's), which Windows has neither of.

const (
	diskFullChildEnv = "IDEM_QUEUE_DISKFULL_CHILD"
	diskFullPathEnv  = "IDEM_QUEUE_DISKFULL_PATH"
)

// TestBadInputDiskFull fills the disk under a queue. Enqueue must fail with
// an error, not a panic nor a silent success, and every record it accepted
// before must be in the file, intact.
//
// A child process's file size limit (RLIMIT_FSIZE, with SIGXFSZ ignored)
// makes the file's growth fail with EFBIG, as a full disk fails it with
// ENOSPC; on any Unix, and without privileges. On Linux,
// TestBadInputDiskFullTmpfs fills a real (tmpfs) disk as well.
func TestBadInputDiskFull(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.db")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestBadInputDiskFullChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), diskFullChildEnv+"=1", diskFullPathEnv+"="+path)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "the child failed:\n%s", out)

	enqueued := map[ID]*idem.Intent{}
	var failure, closed string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "enqueued "):
			f := strings.Fields(line)
			require.Len(t, f, 3, "line %q", line)
			n, err := strconv.ParseUint(f[1], 10, 64)
			require.NoError(t, err)
			i, err := strconv.Atoi(f[2])
			require.NoError(t, err)
			enqueued[ID(n)] = biDiskIntent(t, i)
		case strings.HasPrefix(line, "enqueue failed: "):
			failure = strings.TrimPrefix(line, "enqueue failed: ")
		case strings.HasPrefix(line, "closed: "):
			closed = strings.TrimPrefix(line, "closed: ")
		}
	}
	require.NotEmpty(t, failure, "Enqueue never failed under the file size limit:\n%s", out)
	assert.Contains(t, failure, "file too large", "the error says why")
	assert.Contains(t, failure, path, "the error names the file")
	require.NotEmpty(t, enqueued, "the child enqueued nothing:\n%s", out)
	t.Logf("after %d records: %s; Close: %s", len(enqueued), failure, closed)
	biCheckKept(t, path, enqueued)
}

// TestBadInputDiskFullChild is the child process of TestBadInputDiskFull;
// run by itself it does nothing.
func TestBadInputDiskFullChild(t *testing.T) {
	path := os.Getenv(diskFullPathEnv)
	if os.Getenv(diskFullChildEnv) != "1" || path == "" {
		return
	}
	signal.Ignore(syscall.SIGXFSZ)
	q, err := Open(path, Options{})
	require.NoError(t, err)
	fi, err := os.Stat(path)
	require.NoError(t, err)
	limit := uint64(fi.Size()) + 256<<10
	require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_FSIZE, &syscall.Rlimit{Cur: limit, Max: limit}))
	_, err = biEnqueueUntilFull(q, func(id ID, i int) { fmt.Printf("enqueued %d %d\n", id, i) })
	if err != nil {
		fmt.Printf("enqueue failed: %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
	}
	fmt.Printf("closed: %v\n", q.Close())
}

// biEnqueueUntilFull enqueues 4 KiB intents until Enqueue fails, or 2000
// succeed, and returns those accepted and the error.
func biEnqueueUntilFull(q *Queue, report func(ID, int)) (map[ID]*idem.Intent, error) {
	out := map[ID]*idem.Intent{}
	for i := range 2000 {
		in, err := biDiskIntentErr(i)
		if err != nil {
			return out, err
		}
		id, err := q.Enqueue(context.Background(), in)
		if err != nil {
			return out, err
		}
		out[id] = in
		if report != nil {
			report(id, i)
		}
	}
	return out, nil
}

// biDiskIntent is intent i of the disk-full tests; its key and body follow
// from i, so the parent can check what the child enqueued.
func biDiskIntent(t *testing.T, i int) *idem.Intent {
	t.Helper()
	in, err := biDiskIntentErr(i)
	require.NoError(t, err)
	return in
}

func biDiskIntentErr(i int) (*idem.Intent, error) {
	body := bytes.Repeat([]byte(fmt.Sprintf("payment %06d;", i)), 4096/16)
	return idem.NewIntent("POST", url, body, idem.WithKey(fmt.Sprintf("disk-full-%d", i)))
}
