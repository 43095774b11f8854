package queue

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
)

// acceptedRecord is an intent's body and the ID Enqueue returned for it.
type acceptedRecord struct {
	id   ID
	body []byte
}

// fillMostlyFree leaves at path a queue file that Open compacts: over
// compactMinSize, most of it free pages, one record kept, whose ID and body
// it returns.
func fillMostlyFree(t *testing.T, path string) (ID, []byte) {
	t.Helper()
	q, err := Open(path, Options{})
	require.NoError(t, err)
	ctx := context.Background()
	var ids []ID
	var body []byte
	for i := range 8 {
		body = make([]byte, 1<<20)
		body[0] = byte(i)
		in, err := idem.NewIntent("POST", url, body)
		require.NoError(t, err)
		id, err := q.Enqueue(ctx, in)
		require.NoError(t, err)
		ids = append(ids, id)
	}
	for _, id := range ids[:len(ids)-1] {
		require.NoError(t, q.Discard(context.Background(), id))
	}
	require.NoError(t, q.Close())
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Greater(t, fi.Size(), int64(compactMinSize), "the file must be large enough to compact")
	return ids[len(ids)-1], body
}

// compactTemps lists the compaction files beside path.
func compactTemps(t *testing.T, path string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Dir(path))
	require.NoError(t, err)
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), filepath.Base(path)+compactSuffix) {
			out = append(out, e.Name())
		}
	}
	return out
}

// TestOpenersRaceCompaction: openers on one file, each opening, enqueuing
// and closing in a loop, while the first Open compacts the file. Open's
// compaction closes the database and renames a copy over it; an opener that
// got the old file meanwhile would write to a file no longer at the path, or
// rename its own copy over the new one. Every Enqueue that returned an ID
// must be in the file afterwards.
//
// To make the race certain, the first compaction waits, through the
// openFile seam, until another opener has opened the queue's files.
func TestOpenersRaceCompaction(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.db")
	keptID, keptBody := fillMostlyFree(t, path)

	const openers, rounds = 4, 5
	var (
		arrivals = make(chan int, 1024) // i, each time opener i opens a queue file
		compacts atomic.Int32
		mu       sync.Mutex // guards accepted
		accepted []acceptedRecord
		wg       sync.WaitGroup
	)
	seam := func(i int) func(string, int, os.FileMode) (*os.File, error) {
		return func(name string, flag int, perm os.FileMode) (*os.File, error) {
			if strings.HasPrefix(filepath.Base(name), filepath.Base(path)+compactSuffix) && compacts.Add(1) == 1 {
				waitOther(t, arrivals, i) // the first compaction
			}
			f, err := os.OpenFile(name, flag, perm)
			if err == nil && strings.HasPrefix(name, path) && !strings.Contains(name, compactSuffix) {
				select {
				case arrivals <- i:
				default: // full: the first compaction is long past
				}
			}
			return f, err
		}
	}
	for i := range openers {
		wg.Go(func() {
			opts := Options{LockTimeout: 20 * time.Second, openFile: seam(i)}
			for n := range rounds {
				q, err := Open(path, opts)
				if !assert.NoError(t, err, "opener %d, round %d", i, n) {
					return
				}
				body := fmt.Appendf(nil, "opener %d round %d", i, n)
				in, err := idem.NewIntent("POST", url, body)
				if !assert.NoError(t, err) {
					q.Close()
					return
				}
				id, err := q.Enqueue(context.Background(), in)
				if assert.NoError(t, err, "opener %d, round %d", i, n) {
					mu.Lock()
					accepted = append(accepted, acceptedRecord{id, body})
					mu.Unlock()
				}
				assert.NoError(t, q.Close(), "opener %d, round %d", i, n)
			}
		})
	}
	wg.Wait()
	require.GreaterOrEqual(t, compacts.Load(), int32(1), "an Open must have compacted the file")

	q, err := Open(path, Options{})
	require.NoError(t, err)
	defer q.Close()
	seen := map[ID]bool{}
	for _, a := range accepted {
		assert.False(t, seen[a.id], "ID %d was given to two records", a.id)
		seen[a.id] = true
		r, err := q.Get(context.Background(), a.id)
		if assert.NoError(t, err, "record %d (%s), accepted, is gone", a.id, a.body) {
			assert.Equal(t, string(a.body), string(r.Intent.Body()), "record %d holds another intent", a.id)
		}
	}
	r, err := q.Get(context.Background(), keptID)
	if assert.NoError(t, err) {
		assert.Equal(t, keptBody, r.Intent.Body())
	}
	c, err := q.Counts(context.Background())
	require.NoError(t, err)
	assert.Equal(t, len(accepted)+1, c[Pending], "no record appeared or vanished")
	assert.Empty(t, compactTemps(t, path), "no compaction file is left")
}

// waitOther waits until an opener other than i has opened the queue's
// files, as arrivals tells.
func waitOther(t *testing.T, arrivals <-chan int, i int) {
	limit := time.After(signalWait)
	for {
		select {
		case j := <-arrivals:
			if j != i {
				return
			}
		case <-limit:
			t.Errorf("opener %d compacted, and no other opener came", i)
			return
		}
	}
}

// TestOpenLockFile: Open locks a lock file beside the queue file, private
// to its owner, which a second Open waits on and Close lets go; it stays.
func TestOpenLockFile(t *testing.T) {
	q, path := openTest(t, Options{})
	fi, err := os.Stat(path + lockSuffix)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	_, err = Open(path, Options{LockTimeout: 20 * time.Millisecond})
	require.ErrorIs(t, err, ErrLocked)
	assert.Contains(t, err.Error(), path)

	// Each try at the lock opens the lock file anew: a second open of it
	// means the first try found the lock held, and Open waits.
	tries := make(chan struct{}, 1000)
	seam := func(name string, flag int, perm os.FileMode) (*os.File, error) {
		if name == path+lockSuffix {
			select {
			case tries <- struct{}{}:
			default:
			}
		}
		return os.OpenFile(name, flag, perm)
	}
	opened := make(chan error, 1)
	go func() {
		q2, err := Open(path, Options{LockTimeout: 5 * time.Second, openFile: seam})
		if err == nil {
			err = q2.Close()
		}
		opened <- err
	}()
	for range 2 {
		select {
		case <-tries:
		case <-time.After(5 * time.Second):
			t.Fatal("the second Open did not try the lock twice")
		}
	}
	require.NoError(t, q.Close())
	select {
	case err := <-opened:
		assert.NoError(t, err, "Close lets the lock go")
	case <-time.After(5 * time.Second):
		t.Fatal("the second Open did not get the lock")
	}
	_, err = os.Stat(path + lockSuffix)
	assert.NoError(t, err, "the lock file stays: removing it would let two openers lock two files")
}

// TestOpenRemovesCompactionLeftovers: compaction files a crash left are
// removed by the next Open, which holds the lock every compaction runs
// under; other files beside the queue are left alone.
func TestOpenRemovesCompactionLeftovers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.db")
	for _, name := range []string{path + compactSuffix, path + compactSuffix + "-123", path + ".other"} {
		require.NoError(t, os.WriteFile(name, []byte("x"), 0o600))
	}
	reopen(t, path, Options{})
	assert.Empty(t, compactTemps(t, path))
	_, err := os.Stat(path + ".other")
	assert.NoError(t, err)
}

// TestOpenRemovesSalvageLeftovers: a salvage's fresh file that a crash or
// a power cut left before it took the path (found by the power-cut test,
// queue/powercut) is removed by the next Open, as a compaction's is:
// Salvage runs under the lock too. The damaged file a salvage keeps is the
// operator's and stays.
func TestOpenRemovesSalvageLeftovers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.db")
	left := path + salvageSuffix + "-123"
	kept := path + keptSuffix + "20260101T000000Z"
	for _, name := range []string{left, kept} {
		require.NoError(t, os.WriteFile(name, []byte("x"), 0o600))
	}
	reopen(t, path, Options{})
	_, err := os.Stat(left)
	assert.ErrorIs(t, err, os.ErrNotExist, "the salvage's leftover")
	_, err = os.Stat(kept)
	assert.NoError(t, err, "the damaged file kept")
}
