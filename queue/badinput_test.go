package queue

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
)

// biFill opens a queue at path, enqueues n intents and closes it, returning
// the intents by ID.
func biFill(t *testing.T, path string, n int) map[ID]*idem.Intent {
	t.Helper()
	q, err := Open(path, Options{})
	require.NoError(t, err)
	out := make(map[ID]*idem.Intent, n)
	for i := range n {
		in := post(t, url, i)
		id, err := q.Enqueue(context.Background(), in)
		require.NoError(t, err)
		out[id] = in
	}
	require.NoError(t, q.Close())
	return out
}

// biCheckKept opens path and checks that every intent of want is there,
// pending, with its key and body.
func biCheckKept(t *testing.T, path string, want map[ID]*idem.Intent) {
	t.Helper()
	q, err := Open(path, Options{})
	require.NoError(t, err, "the queue must open again once the problem is gone")
	defer q.Close()
	for id, in := range want {
		r, err := q.Get(context.Background(), id)
		if !assert.NoError(t, err, "record %d was lost", id) {
			continue
		}
		assert.Equal(t, Pending, r.State)
		assert.Equal(t, in.Key(), r.Intent.Key(), "record %d", id)
		assert.Equal(t, in.Body(), r.Intent.Body(), "record %d", id)
	}
	counts, err := q.Counts(context.Background())
	require.NoError(t, err)
	assert.Equal(t, len(want), counts[Pending], "no record appeared or vanished")
}

// privileged reports whether this process ignores file permissions (root,
// or CAP_DAC_OVERRIDE): it can read a file of mode 000.
func privileged(t *testing.T) bool {
	t.Helper()
	f := filepath.Join(t.TempDir(), "probe")
	require.NoError(t, os.WriteFile(f, []byte("x"), 0))
	_, err := os.ReadFile(f)
	return err == nil
}

// TestBadInputOpen opens queue files that cannot be used: each Open fails
// with a queue: error naming the path and the problem, and a file that
// held records still holds them, unwritten, once the problem is gone.
func TestBadInputOpen(t *testing.T) {
	priv := privileged(t)
	tests := []struct {
		name string
		// setup breaks the queue at path, which holds records when filled;
		// it returns the path and Options to open with and a function that
		// repairs the damage (nil when there is nothing to repair).
		setup  func(t *testing.T, path string) (string, Options, func())
		filled bool
		want   error // nil: no sentinel, a path error
		msg    []string
		same   bool // the file's bytes must be unchanged
	}{
		{
			name:   "unreadable file",
			filled: true,
			setup: func(t *testing.T, path string) (string, Options, func()) {
				if !priv {
					require.NoError(t, os.Chmod(path, 0))
					return path, Options{}, func() { require.NoError(t, os.Chmod(path, 0o600)) }
				}
				// Permissions do not bind this process: put a directory
				// where the file was, which no one can open as a file.
				t.Log("running privileged: mode 000 is not enforced, a directory stands in for the file")
				aside := path + ".aside"
				require.NoError(t, os.Rename(path, aside))
				require.NoError(t, os.Mkdir(path, 0o700))
				return path, Options{}, func() {
					require.NoError(t, os.Remove(path))
					require.NoError(t, os.Rename(aside, path))
				}
			},
			msg: []string{"queue: open "},
		},
		{
			name: "not a bbolt file",
			setup: func(t *testing.T, path string) (string, Options, func()) {
				require.NoError(t, os.WriteFile(path, bytes.Repeat([]byte("not a queue, just text\n"), 400), 0o600))
				return path, Options{}, nil
			},
			want: ErrDamaged, msg: []string{"queue: file damaged: ", "is not a readable queue file", "invalid database"}, same: true,
		},
		{
			name:   "truncated inside the meta pages",
			filled: true,
			setup: func(t *testing.T, path string) (string, Options, func()) {
				require.NoError(t, os.Truncate(path, 4096+100))
				return path, Options{}, nil
			},
			want: ErrDamaged, msg: []string{"queue: file damaged: ", "truncated"}, same: true,
		},
		{
			name:   "empty meta page",
			filled: true,
			setup: func(t *testing.T, path string) (string, Options, func()) {
				f, err := os.OpenFile(path, os.O_WRONLY, 0)
				require.NoError(t, err)
				_, err = f.WriteAt(make([]byte, 8192), 0)
				require.NoError(t, err)
				require.NoError(t, f.Close())
				return path, Options{}, nil
			},
			want: ErrDamaged, msg: []string{"queue: file damaged: "}, same: true,
		},
		{
			name: "read-only directory",
			setup: func(t *testing.T, path string) (string, Options, func()) {
				dir := filepath.Dir(path)
				if !priv {
					require.NoError(t, os.Chmod(dir, 0o500))
					return path, Options{}, func() { require.NoError(t, os.Chmod(dir, 0o700)) }
				}
				// Directory permissions do not bind this process: fail the
				// file's creation as the kernel would in a read-only
				// directory.
				t.Log("running privileged: a 0500 directory is not enforced, the open seam returns EACCES")
				return path, Options{openFile: func(name string, flag int, perm os.FileMode) (*os.File, error) {
					if _, err := os.Stat(name); errors.Is(err, fs.ErrNotExist) && flag&os.O_CREATE != 0 {
						return nil, &fs.PathError{Op: "open", Path: name, Err: syscall.EACCES}
					}
					return os.OpenFile(name, flag, perm)
				}}, nil
			},
			msg: []string{"queue: open ", "permission denied"},
		},
		{
			name: "parent is a file",
			setup: func(t *testing.T, path string) (string, Options, func()) {
				parent := filepath.Join(filepath.Dir(path), "file")
				require.NoError(t, os.WriteFile(parent, []byte("x"), 0o600))
				return filepath.Join(parent, "q.db"), Options{}, nil
			},
			msg: []string{"queue: open ", "not a directory"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "q.db")
			var kept map[ID]*idem.Intent
			if tt.filled {
				kept = biFill(t, path, 5)
			}
			path, opts, repair := tt.setup(t, path)
			before, _ := os.ReadFile(path)
			opts.LockTimeout = 100 * time.Millisecond

			q, err := Open(path, opts)
			if q != nil {
				q.Close()
			}
			require.Error(t, err)
			t.Logf("Open: %v", err)
			if tt.want != nil {
				assert.ErrorIs(t, err, tt.want)
			}
			assert.True(t, strings.HasPrefix(err.Error(), "queue: "), "message %q lacks the queue: prefix", err)
			assert.Contains(t, err.Error(), path, "the message names the file")
			for _, m := range tt.msg {
				assert.Contains(t, err.Error(), m)
			}
			if tt.same {
				after, rerr := os.ReadFile(path)
				require.NoError(t, rerr)
				assert.Equal(t, before, after, "a file Open refused must not be written")
			}
			_, err = os.Stat(path + compactSuffix)
			assert.True(t, errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR), "no stray compaction file")
			if repair != nil {
				repair()
			}
			if kept != nil && !tt.same {
				biCheckKept(t, path, kept)
			}
		})
	}
}

// TestBadInputEnqueue gives Enqueue intents it must refuse: each error
// names the problem, and the records already queued are kept.
func TestBadInputEnqueue(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.db")
	kept := biFill(t, path, 2)
	q, err := Open(path, Options{MaxItems: 3})
	require.NoError(t, err)
	ctx := context.Background()

	keyless, err := idem.NewIntent("PATCH", url, []byte("x"), idem.WithoutKey())
	require.NoError(t, err)
	first, err := idem.NewIntent("POST", url, []byte("a"), idem.WithKey("order-1"))
	require.NoError(t, err)
	other, err := idem.NewIntent("POST", url, []byte("b"), idem.WithKey("order-1"))
	require.NoError(t, err)
	third, err := idem.NewIntent("POST", url, []byte("c"))
	require.NoError(t, err)
	firstID, err := q.Enqueue(ctx, first)
	require.NoError(t, err)
	cancelled, cancel := context.WithCancel(ctx)
	cancel()

	tests := []struct {
		name string
		ctx  context.Context
		in   *idem.Intent
		want error
		msg  string
	}{
		{"nil intent", ctx, nil, idem.ErrInvalidIntent, "idem: invalid intent: nil intent"},
		{"PATCH without key", ctx, keyless, ErrNeedsKey, "queue: not idempotent and no key: PATCH " + url},
		{"key of another operation", ctx, other, ErrKeyInUse, "queue: key already queued for another operation: record " + firstID.String() + " holds its key, for POST " + url},
		{"full", ctx, third, ErrQueueFull, "queue: full: 3 unsettled records, limit 3"},
		{"context ended", cancelled, third, context.Canceled, "context canceled"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, err := q.Enqueue(tt.ctx, tt.in)
			require.Error(t, err)
			assert.Zero(t, id)
			assert.ErrorIs(t, err, tt.want)
			assert.Contains(t, err.Error(), tt.msg)
		})
	}
	require.NoError(t, q.Close())
	kept[firstID] = first
	biCheckKept(t, path, kept)
}

// Instructions for the child process of TestBadInputDiskFull.
// TestBadInputNoSecretInFile drains intents through a Client whose
// Authorize adds a fresh bearer token to every attempt, through retries and
// a 401, and checks that no token ever reaches the queue file, which is
// private to its owner.
func TestBadInputNoSecretInFile(t *testing.T) {
	prefix := make([]byte, 16)
	_, err := rand.Read(prefix)
	require.NoError(t, err)
	secret := "tok-" + hex.EncodeToString(prefix)

	var mu sync.Mutex // guards issued, seen, calls
	var issued, seen []string
	calls := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization"))
		key := r.Header.Get("Idempotency-Key")
		calls[key]++
		n := calls[key]
		mu.Unlock()
		switch n {
		case 1:
			w.WriteHeader(http.StatusServiceUnavailable) // ambiguous: retried
		case 2:
			w.WriteHeader(http.StatusUnauthorized) // one more attempt with a fresh token
		default:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, `{"id":%q}`, key)
		}
	}))
	defer srv.Close()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	defer tr.CloseIdleConnections()
	client := &idem.Client{
		HTTPClient: &http.Client{Transport: tr},
		Authorize: func(ctx context.Context, req *http.Request) error {
			mu.Lock()
			tok := fmt.Sprintf("%s-%d", secret, len(issued))
			issued = append(issued, tok)
			mu.Unlock()
			req.Header.Set("Authorization", "Bearer "+tok)
			return nil
		},
	}

	path := filepath.Join(t.TempDir(), "q.db")
	q, err := Open(path, Options{Client: client, Policy: idem.Policy{BaseDelay: time.Millisecond, MaxDelay: 2 * time.Millisecond}, idle: 5 * time.Millisecond})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- q.Run(ctx) }()
	var ids []ID
	for i := range 3 {
		in, err := idem.NewIntent("POST", srv.URL, []byte(fmt.Sprintf(`{"payment":%d}`, i)), idem.WithHeader("Content-Type", "application/json"))
		require.NoError(t, err)
		id, err := q.Enqueue(ctx, in)
		require.NoError(t, err)
		ids = append(ids, id)
	}
	for _, id := range ids {
		r, err := q.Wait(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, Done, r.State)
		assert.Equal(t, 3, r.NumAttempts)
	}
	require.NoError(t, q.Close())
	require.NoError(t, <-done)

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, seen, 9, "three attempts for each of three intents")
	for i, auth := range seen {
		assert.True(t, strings.HasPrefix(auth, "Bearer "+secret), "attempt %d carried %q", i, auth)
	}
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.False(t, bytes.Contains(raw, []byte(secret)), "a bearer token reached the queue file")
	assert.False(t, bytes.Contains(raw, []byte("Bearer")), "an Authorization value reached the queue file")
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
}
