package main

import (
	"crypto/sha256"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
)

// dirState is what a directory holds: each entry's name and, for a file,
// a checksum of its bytes.
func dirState(t *testing.T, dir string) map[string][32]byte {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	out := map[string][32]byte{}
	for _, e := range entries {
		var sum [32]byte
		if e.Type().IsRegular() {
			data, err := os.ReadFile(filepath.Join(dir, e.Name()))
			require.NoError(t, err)
			sum = sha256.Sum256(data)
		}
		out[e.Name()] = sum
	}
	return out
}

// foreignBolt writes a bbolt database that is not a queue: it has a bucket
// of its own and none of the queue's.
func foreignBolt(t *testing.T, path string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("settings"))
		if err != nil {
			return err
		}
		return b.Put([]byte("theme"), []byte("dark"))
	}))
	require.NoError(t, db.Close())
}

// TestNotAQueueFile: every command given a path that is missing, an empty
// file, a text file or a bbolt database that is not a queue fails with a
// message naming the path and what is wrong, and leaves the directory as it
// was: the file byte for byte, no file created (not the path, not a lock
// file beside it).
func TestNotAQueueFile(t *testing.T) {
	files := []struct {
		name  string
		write func(t *testing.T, path string) // nil: the path does not exist
		msg   string
	}{
		{"missing", nil, ": no such queue file"},
		{"empty", func(t *testing.T, path string) {
			require.NoError(t, os.WriteFile(path, nil, 0o600))
		}, " is empty, not a queue file"},
		{"text", func(t *testing.T, path string) {
			require.NoError(t, os.WriteFile(path, []byte(strings.Repeat("not a queue\n", 1000)), 0o600))
		}, " is not a queue file: not a bbolt database"},
		{"zeros", func(t *testing.T, path string) {
			require.NoError(t, os.WriteFile(path, make([]byte, 16384), 0o600))
		}, " is not a queue file: not a bbolt database"},
		{"other bbolt", foreignBolt, ` is a bbolt database but not an idem queue: it has no "records" bucket`},
	}
	commands := [][]string{
		{"ls"}, {"ls", "--json"}, {"show", "1"}, {"stats"},
		{"discard", "1"}, {"resubmit", "1"}, {"reset-clock"}, {"drain", "--timeout", "1s"},
	}
	for _, f := range files {
		for _, args := range commands {
			t.Run(f.name+"/"+strings.Join(args, " "), func(t *testing.T) {
				dir := t.TempDir()
				path := filepath.Join(dir, "q.db")
				if f.write != nil {
					f.write(t, path)
				}
				before := dirState(t, dir)

				r := idemq(t, nil, append([]string{"--file", path}, args...)...)
				assert.Equal(t, exitError, r.code, "exit code; stderr:\n%s", r.stderr)
				assert.Equal(t, "idemq: "+path+f.msg+"\n", r.stderr)
				assert.Empty(t, r.stdout)
				assert.Equal(t, before, dirState(t, dir), "the directory changed")
			})
		}
	}
}

// TestQueueFileStillOpens: the checks let a queue file through, one a
// crash left with its lock file gone included, for reading and writing.
func TestQueueFileStillOpens(t *testing.T) {
	file, ids := queueFile(t, intent(t, secretURL, "a"), intent(t, secretURL, "b"))
	require.NoError(t, os.Remove(file+".lock"))
	ok(t, file, "ls")
	r := ok(t, file, "discard", ids[0].String())
	assert.Equal(t, "discarded 1 (pending)\n", r.stdout)
	assert.Equal(t, ids[1:], idsOf(listed(t, ok(t, file, "ls", "--json"))))
}
