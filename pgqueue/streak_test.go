package pgqueue

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/queue"
)

// leaseHead takes lane and leases its head, as a drainer does.
func leaseHead(t *testing.T, st *store, lane string) *queue.Record {
	t.Helper()
	r := take(t, st, lane)
	r.State, r.NumAttempts, r.FirstSentAt = queue.InFlight, 1, st.now()
	require.NoError(t, st.Put(context.Background(), queue.Pending, r))
	return r
}

// done marks r settled as applied.
func done(st *store, r *queue.Record) {
	r.State, r.Outcome, r.SettledAt = queue.Done, idem.Applied, st.now()
}

// accept leases the record SettleLeaseNext offers.
func accept(n *queue.Record) bool {
	n.State, n.NumAttempts = queue.InFlight, n.NumAttempts+1
	return true
}

// state reads record id's state.
func state(t *testing.T, st *store, id queue.ID) queue.State {
	t.Helper()
	r, err := st.Get(context.Background(), id)
	require.NoError(t, err)
	return r.State
}

// TestSettleLeaseNext: the settle and the next record's lease land
// together, record after record, and the lease read ahead follows the
// lane's order.
func TestSettleLeaseNext(t *testing.T) {
	st := replica(t, testPool(t), Options{})
	ids := []queue.ID{enqueue(t, st, "acct-1"), enqueue(t, st, "acct-1"), enqueue(t, st, "acct-1")}
	r := leaseHead(t, st, "acct-1")
	for i, id := range ids[1:] {
		done(st, r)
		n, err := st.SettleLeaseNext(context.Background(), r, accept)
		require.NoError(t, err)
		require.NotNil(t, n, "record %d leased with the settle of %d", id, ids[i])
		assert.Equal(t, id, n.ID)
		assert.Equal(t, queue.Done, state(t, st, ids[i]))
		assert.Equal(t, queue.InFlight, state(t, st, id))
		r = n
	}
	done(st, r)
	n, err := st.SettleLeaseNext(context.Background(), r, accept)
	require.NoError(t, err)
	assert.Nil(t, n, "the lane has no record left")
	assert.Equal(t, queue.Done, state(t, st, ids[2]))
}

// TestSettleLeaseNextFenced: a worker whose lane was taken over settles
// nothing and leases nothing; and a next record changed since it was read
// ahead (resubmitted, here rewritten) is not leased, the settle lands alone.
func TestSettleLeaseNextFenced(t *testing.T) {
	pool := testPool(t)
	st, other := replica(t, pool, Options{}), replica(t, pool, Options{})
	first, second := enqueue(t, st, "acct-1"), enqueue(t, st, "acct-1")

	r := leaseHead(t, st, "acct-1")
	expire(t, pool)
	h := take(t, other, "acct-1")
	require.Equal(t, first, h.ID)
	done(st, r)
	n, err := st.SettleLeaseNext(context.Background(), r, accept)
	assert.ErrorIs(t, err, queue.ErrMovedOn, "the stale worker's settle")
	assert.Nil(t, n)
	assert.Equal(t, queue.InFlight, state(t, st, first), "the stale settle must not land")
	assert.Equal(t, queue.Pending, state(t, st, second), "the stale lease must not land")

	// other holds the lane, has read second ahead; second changes meanwhile.
	_, err = pool.Exec(context.Background(), "UPDATE idem_queue_records SET record = record WHERE id = $1", int64(second))
	require.NoError(t, err)
	h.State, h.NumAttempts = queue.InFlight, h.NumAttempts+1
	require.NoError(t, other.Put(context.Background(), queue.InFlight, h))
	done(other, h)
	n, err = other.SettleLeaseNext(context.Background(), h, accept)
	require.NoError(t, err)
	assert.Nil(t, n, "a record changed since it was read ahead is not leased")
	assert.Equal(t, queue.Done, state(t, st, first))
	assert.Equal(t, queue.Pending, state(t, st, second))
}

// nextAt reads when lane is next due, as the tables say: "infinity" for a
// parked lane, "owned" for one a replica holds.
func nextAt(t *testing.T, pool *pgxpool.Pool, lane string) string {
	t.Helper()
	var s string
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT CASE WHEN owner IS NOT NULL THEN 'owned'
		WHEN next_at = 'infinity' THEN 'infinity' ELSE 'due' END FROM idem_queue_lanes WHERE name = $1`, lane).Scan(&s))
	return s
}

// TestSettleGivesTheLaneBack: the settle of a lane's last record, as read,
// gives the lane back in the same statement: parked when nothing came
// since, due when a record did. The lane stays out of its store's TakeDue
// until SetNext, so that no other worker of the store takes it while the
// one that settled still holds it; another replica may take it at once.
func TestSettleGivesTheLaneBack(t *testing.T) {
	pool := testPool(t)
	st, other := replica(t, pool, Options{}), replica(t, pool, Options{})
	first := enqueue(t, st, "acct-1")

	r := leaseHead(t, st, "acct-1")
	done(st, r)
	n, err := st.SettleLeaseNext(context.Background(), r, accept)
	require.NoError(t, err)
	require.Nil(t, n)
	assert.Equal(t, queue.Done, state(t, st, first))
	assert.Equal(t, "infinity", nextAt(t, pool, "acct-1"), "the empty lane is parked by the settle")
	require.NoError(t, st.SetNext(context.Background(), "acct-1", time.Time{}))
	assert.Equal(t, "infinity", nextAt(t, pool, "acct-1"), "SetNext after the settle writes nothing")

	second := enqueue(t, st, "acct-1")
	r = leaseHead(t, st, "acct-1")
	require.Equal(t, second, r.ID)
	third := enqueue(t, other, "acct-1") // after the head's read: not read ahead
	done(st, r)
	n, err = st.SettleLeaseNext(context.Background(), r, accept)
	require.NoError(t, err)
	require.Nil(t, n)
	assert.Equal(t, "due", nextAt(t, pool, "acct-1"), "a record came after the read: the lane stays due")

	lane, ok, _, err := takeOne(st)
	require.NoError(t, err)
	assert.False(t, ok, "the store took %q, which its worker still holds", lane)
	assert.Equal(t, third, take(t, other, "acct-1").ID, "another replica takes the lane given back")
	require.NoError(t, st.SetNext(context.Background(), "acct-1", time.Time{}))
	assert.Equal(t, "owned", nextAt(t, pool, "acct-1"), "the first worker's SetNext must not free the other replica's lane")
}

// TestTakeDueSeveral: one TakeDue takes up to n due lanes, the first due
// first, each with its head read, and skips the lanes its store's workers
// hold.
func TestTakeDueSeveral(t *testing.T) {
	pool := testPool(t)
	st := replica(t, pool, Options{})
	ids := map[string]queue.ID{}
	for _, l := range []string{"a", "b", "c"} {
		ids[l] = enqueue(t, st, l)
	}
	_, err := pool.Exec(context.Background(), `UPDATE idem_queue_lanes SET next_at = now() - interval '1 minute' *
		CASE name WHEN 'c' THEN 3 WHEN 'a' THEN 2 ELSE 1 END`)
	require.NoError(t, err)

	lanes, _, err := st.TakeDue(context.Background(), time.Time{}, 2)
	require.NoError(t, err)
	assert.Equal(t, []string{"c", "a"}, lanes, "the first due first")
	lanes, _, err = st.TakeDue(context.Background(), time.Time{}, 5)
	require.NoError(t, err)
	assert.Equal(t, []string{"b"}, lanes)
	lanes, wait, err := st.TakeDue(context.Background(), time.Time{}, 5)
	require.NoError(t, err)
	assert.Empty(t, lanes)
	assert.Zero(t, wait)
	for l, id := range ids {
		r, _, err := st.Head(context.Background(), l)
		require.NoError(t, err)
		require.NotNil(t, r, "lane %s", l)
		assert.Equal(t, id, r.ID)
	}
}

// TestSettleHandsOverALane: the settle that gives a lane back takes the
// lane due first for the same worker, with its head read, out of every
// TakeDue until its SetNext; a settle that finds the lane taken over takes
// none.
func TestSettleHandsOverALane(t *testing.T) {
	pool := testPool(t)
	st, other := replica(t, pool, Options{}), replica(t, pool, Options{})
	first := enqueue(t, st, "a")
	second := enqueue(t, st, "b")

	r := leaseHead(t, st, "a")
	require.Equal(t, first, r.ID)
	done(st, r)
	n, err := st.SettleLeaseNext(context.Background(), r, accept)
	require.NoError(t, err)
	require.Nil(t, n)
	require.NoError(t, st.SetNext(context.Background(), "a", time.Time{}))
	lane, ok := st.HandedOver("a")
	require.True(t, ok, "a lane handed over")
	assert.Equal(t, "b", lane)
	_, ok = st.HandedOver("a")
	assert.False(t, ok, "handed over once")
	assert.Equal(t, "owned", nextAt(t, pool, "b"))
	_, took, _, err := takeOne(other)
	require.NoError(t, err)
	assert.False(t, took, "the lane handed over is not another replica's to take")
	h, _, err := st.Head(context.Background(), "b")
	require.NoError(t, err)
	require.NotNil(t, h)
	assert.Equal(t, second, h.ID)

	// Fenced: the lease ran out and another replica took b over.
	h.State, h.NumAttempts = queue.InFlight, 1
	require.NoError(t, st.Put(context.Background(), queue.Pending, h))
	enqueue(t, st, "c")
	expire(t, pool)
	require.Equal(t, "b", takeHead(t, other, "b").Intent.Lane())
	done(st, h)
	_, err = st.SettleLeaseNext(context.Background(), h, accept)
	assert.ErrorIs(t, err, queue.ErrMovedOn)
	require.NoError(t, st.SetNext(context.Background(), "b", time.Time{}))
	_, ok = st.HandedOver("b")
	assert.False(t, ok, "a settle that did not land takes no lane")
	assert.Equal(t, "due", nextAt(t, pool, "c"))
}
