package queue

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
)

// TestSettleLeaseNextMarkWaitsForTheCommit: the clock's mark moves with a
// lease only once the lease is committed. Here the commit that settles the
// first record of a lane and leases the second fails (its file is closed
// under it), so the lease never happened and the mark stays where it was.
func TestSettleLeaseNextMarkWaitsForTheCommit(t *testing.T) {
	clk := newClock()
	path := filepath.Join(t.TempDir(), "q.db")
	var file *os.File
	q := reopen(t, path, Options{now: clk.Now, openFile: func(name string, flag int, perm os.FileMode) (*os.File, error) {
		f, err := os.OpenFile(name, flag, perm)
		if name == path {
			file = f
		}
		return f, err
	}})
	require.NotNil(t, file, "the seam opened the queue file")
	ctx := waitCtx(t)
	first, err := q.Enqueue(ctx, post(t, url, 1, idem.WithLane("acct")))
	require.NoError(t, err)
	_, err = q.Enqueue(ctx, post(t, url, 2, idem.WithLane("acct")))
	require.NoError(t, err)

	st := q.st.(*boltStore)
	r, err := st.Get(context.Background(), first)
	require.NoError(t, err)
	markLeased(r, clk.Now())
	require.NoError(t, st.Put(context.Background(), Pending, r))
	before := markOf(st)
	require.Equal(t, clk.Now(), before, "the first lease moved the mark")

	markSettled(r, Done, idem.Applied, "", nil, clk.Now())
	leasedAt := clk.Now().Add(time.Minute)
	next, err := st.SettleLeaseNext(context.Background(), r, func(n *Record) bool {
		markLeased(n, leasedAt)
		require.NoError(t, file.Close()) // the commit that follows fails
		return true
	})
	require.Error(t, err, "the commit failed")
	assert.Nil(t, next)
	assert.Equal(t, before, markOf(st), "Mark() = %v after a rolled-back lease at %v, want %v", markOf(st), leasedAt, before)
}

// TestLeaseMarkWaitsForTheCommit: a lease that does not commit (its record
// is no longer pending) leaves the clock's mark where it was.
func TestLeaseMarkWaitsForTheCommit(t *testing.T) {
	clk := newClock()
	q, _ := openTest(t, Options{now: clk.Now})
	id, err := q.Enqueue(waitCtx(t), post(t, url, 1))
	require.NoError(t, err)
	st := q.st.(*boltStore)
	r, err := st.Get(context.Background(), id)
	require.NoError(t, err)
	markLeased(r, clk.Now())
	require.NoError(t, st.Put(context.Background(), Pending, r))
	before := markOf(st)

	again := *r
	markLeased(&again, clk.Now().Add(time.Minute))
	require.ErrorIs(t, st.Put(context.Background(), Pending, &again), ErrMovedOn, "the record is in flight, not pending")
	assert.Equal(t, before, markOf(st), "Mark() = %v after a lease that failed, want %v", markOf(st), before)
}

// markOf returns st's clock mark.
func markOf(st Store) time.Time {
	_, mark := st.Clock()
	return mark
}
