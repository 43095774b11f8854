package queue

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
)

func groupDB(t *testing.T) *bolt.DB {
	db, err := bolt.Open(filepath.Join(t.TempDir(), "g.db"), 0o600, nil)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucket([]byte("b"))
		return err
	}))
	return db
}

// TestGroupSharesCommits: concurrent writers each get their write
// committed, in fewer commits than writes.
func TestGroupSharesCommits(t *testing.T) {
	db := groupDB(t)
	var (
		g       group
		mu      sync.Mutex
		commits = map[int]bool{} // the IDs of the transactions that wrote
		wg      sync.WaitGroup
	)
	const writers, each = 32, 20
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				err := g.do(db, func(tx *bolt.Tx) error {
					mu.Lock()
					commits[int(tx.ID())] = true
					mu.Unlock()
					return tx.Bucket([]byte("b")).Put(fmt.Appendf(nil, "%d-%d", w, i), []byte("v"))
				})
				assert.NoError(t, err)
			}
		})
	}
	wg.Wait()
	require.NoError(t, db.View(func(tx *bolt.Tx) error {
		assert.Equal(t, writers*each, tx.Bucket([]byte("b")).Stats().KeyN, "every write committed")
		return nil
	}))
	assert.Less(t, len(commits), writers*each, "writers that came together shared commits")
	assert.False(t, g.busy, "no commit left under way")
	assert.Empty(t, g.queued)
}

// TestGroupIsolatesFailures: a writer whose fn fails or panics gets its
// own error and writes nothing; the writers it shared a commit with are
// committed.
func TestGroupIsolatesFailures(t *testing.T) {
	db := groupDB(t)
	var g group
	errBad := errors.New("bad write")
	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make([]error, 30)
	for i := range errs {
		wg.Go(func() {
			<-start
			errs[i] = g.do(db, func(tx *bolt.Tx) error {
				if err := tx.Bucket([]byte("b")).Put(fmt.Appendf(nil, "%d", i), []byte("v")); err != nil {
					return err
				}
				switch i % 10 {
				case 3:
					return errBad
				case 7:
					panic("broken writer")
				}
				return nil
			})
		})
	}
	close(start)
	wg.Wait()
	require.NoError(t, db.View(func(tx *bolt.Tx) error {
		for i, err := range errs {
			got := tx.Bucket([]byte("b")).Get(fmt.Appendf(nil, "%d", i))
			switch i % 10 {
			case 3:
				assert.ErrorIs(t, err, errBad)
				assert.Nil(t, got, "writer %d failed: nothing of it committed", i)
			case 7:
				assert.ErrorContains(t, err, "broken writer")
				assert.Nil(t, got, "writer %d panicked: nothing of it committed", i)
			default:
				assert.NoError(t, err)
				assert.NotNil(t, got, "writer %d committed", i)
			}
		}
		return nil
	}))
}
