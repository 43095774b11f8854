package queue

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/idemtest"
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

// txID reads the ID of q's file's last commit.
func txID(t *testing.T, q *Queue) int {
	t.Helper()
	var id int
	require.NoError(t, q.st.(*boltStore).db.View(func(tx *bolt.Tx) error {
		id = tx.ID()
		return nil
	}))
	return id
}

// TestLaneDrainsOneCommitARecord: a lane whose records succeed one after
// another settles each and leases the next in one commit, and still gives
// the lane back every maxStreak records: 2n commits would mean the settle
// and the lease went apart. The server sees the lane in order.
func TestLaneDrainsOneCommitARecord(t *testing.T) {
	s := startServer(t, idemtest.Options{RequireKey: true})
	var ev events
	opts := fast(clientFor(s))
	opts.Notify = ev.notify
	q, _ := openTest(t, opts)
	ctx := waitCtx(t)
	const n = 3 * maxStreak
	ids := make([]ID, n)
	for i := range n {
		id, err := q.Enqueue(ctx, post(t, s.URL()+"/payments", i, idem.WithLane("acct")))
		require.NoError(t, err)
		ids[i] = id
	}
	before := txID(t, q)
	run(t, q)
	for _, id := range ids {
		r, err := q.Wait(ctx, id)
		require.NoError(t, err)
		require.Equal(t, Done, r.State)
	}
	commits := txID(t, q) - before
	// One commit a record, plus the lease that starts each streak.
	assert.LessOrEqual(t, commits, n+n/(maxStreak-1)+1, "commits for %d records of one lane", n)
	assert.Equal(t, n, ev.count(EventSettled))
	assert.Equal(t, n, s.TotalEffects(), "each record applied once")
}

// TestLaneStreakKeepsTheHorizon: the record leased in its predecessor's
// settle commit is judged as on the usual path: one past MaxAge by then is
// not sent but expires.
func TestLaneStreakKeepsTheHorizon(t *testing.T) {
	clk := newClock()
	clk.Set(time.Now())
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		requests.Add(1)
		clk.Add(2 * time.Hour) // the first attempt takes the second record past its max age
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(srv.Close)
	opts := fast(&idem.Client{})
	opts.now, opts.MaxAge = clk.Now, time.Hour
	q, _ := openTest(t, opts)
	ctx := waitCtx(t)
	first, err := q.Enqueue(ctx, post(t, srv.URL, 1, idem.WithLane("acct")))
	require.NoError(t, err)
	second, err := q.Enqueue(ctx, post(t, srv.URL, 2, idem.WithLane("acct")))
	require.NoError(t, err)
	run(t, q)
	r, err := q.Wait(ctx, first)
	require.NoError(t, err)
	assert.Equal(t, Done, r.State)
	r, err = q.Wait(ctx, second)
	require.NoError(t, err)
	assert.Equal(t, Expired, r.State, r.Reason)
	assert.Contains(t, r.Reason, "max age")
	assert.EqualValues(t, 1, requests.Load(), "the expired record was never sent")
}
