package pgqueue

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/pgqueue/internal/pgtest"
	"github.com/idem-go/idem/queue"
)

// The tests here drive the store as a Queue would, to reach the orders of
// events between replicas that a whole queue makes only by chance.

// testPool returns a pool on a fresh, migrated database.
func testPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), pgtest.DB(t))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	require.NoError(t, Migrate(context.Background(), pool))
	return pool
}

// replica returns a store on pool without a listener, as one replica's.
func replica(t *testing.T, pool *pgxpool.Pool, opts Options) *store {
	t.Helper()
	st, err := open(context.Background(), pool, opts)
	require.NoError(t, err)
	close(st.done)
	t.Cleanup(func() { st.Close() })
	return st
}

// enqueue inserts a POST on lane and returns its ID.
func enqueue(t *testing.T, st *store, lane string) queue.ID {
	t.Helper()
	in, err := idem.NewIntent("POST", "http://127.0.0.1:1/pay", []byte("{}"), idem.WithLane(lane))
	require.NoError(t, err)
	r, err := queue.NewRecord(in, st.now())
	require.NoError(t, err)
	id, err := st.Insert(context.Background(), r)
	require.NoError(t, err)
	return id
}

// takeHead takes the due lane, which must be lane, and returns its head:
// nil for an empty lane.
func takeHead(t *testing.T, st *store, lane string) *queue.Record {
	t.Helper()
	got, ok, _, err := takeOne(st)
	require.NoError(t, err)
	require.True(t, ok, "no lane due")
	require.Equal(t, lane, got)
	r, _, err := st.Head(context.Background(), lane)
	require.NoError(t, err)
	return r
}

// take takes lane and returns its head, failing the test if it has none.
func take(t *testing.T, st *store, lane string) *queue.Record {
	t.Helper()
	r := takeHead(t, st, lane)
	require.NotNil(t, r, "lane %q has no head", lane)
	return r
}

// settle settles r as applied and gives its lane back, due at once.
func settle(t *testing.T, st *store, r *queue.Record) {
	t.Helper()
	old := r.State
	r.State, r.Outcome, r.SettledAt = queue.Done, idem.Applied, st.now()
	require.NoError(t, st.Put(context.Background(), old, r))
	require.NoError(t, st.SetNext(context.Background(), r.Intent.Lane(), time.Time{}))
}

// park takes lane, finds it empty and gives it back, as a drainer does.
func park(t *testing.T, st *store, lane string) {
	t.Helper()
	require.Nil(t, takeHead(t, st, lane))
	require.NoError(t, st.SetNext(context.Background(), lane, time.Time{}))
}

// expire ends every lease now, as the death of their holder would once
// their time ran out.
func expire(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	_, err := pool.Exec(context.Background(),
		"UPDATE idem_queue_lanes SET lease_until = now() - interval '1 second' WHERE owner IS NOT NULL")
	require.NoError(t, err)
}

// TestTakeoverFencesTheStaleOwner: a replica whose lease ran out while its
// attempt was under way finds, when its answer comes, that the lane was
// taken over; its settle, its schedule and its hold change nothing, and
// the new owner sees the record as the stale one left it, in flight.
func TestTakeoverFencesTheStaleOwner(t *testing.T) {
	pool := testPool(t)
	a, b := replica(t, pool, Options{}), replica(t, pool, Options{})
	id := enqueue(t, a, "acct-1")

	r := take(t, a, "acct-1")
	r.State, r.NumAttempts, r.FirstSentAt = queue.InFlight, 1, a.now()
	require.NoError(t, a.Put(context.Background(), queue.Pending, r))

	_, ok, _, err := takeOne(b)
	require.NoError(t, err)
	assert.False(t, ok, "a live lease must keep the lane from another replica")

	expire(t, pool)
	h := take(t, b, "acct-1")
	assert.Equal(t, id, h.ID)
	assert.Equal(t, queue.InFlight, h.State, "the new owner must know an attempt may have been sent")
	assert.Equal(t, 1, h.NumAttempts)

	late := *r
	late.State, late.Outcome, late.SettledAt = queue.Done, idem.Applied, a.now()
	assert.ErrorIs(t, a.Put(context.Background(), queue.InFlight, &late), queue.ErrMovedOn)
	require.NoError(t, a.Schedule(context.Background(), queue.HoldLane, "acct-1", time.Time{}))
	require.NoError(t, a.SetNext(context.Background(), "acct-1", a.now().Add(time.Hour)))

	stored, err := b.Get(context.Background(), id)
	require.NoError(t, err)
	assert.Equal(t, queue.InFlight, stored.State, "a stale owner's settle must not land")
	var held bool
	var owner *string
	require.NoError(t, pool.QueryRow(context.Background(),
		"SELECT held, owner::text FROM idem_queue_lanes WHERE name = 'acct-1'").Scan(&held, &owner))
	assert.False(t, held, "a stale owner's hold must not land")
	require.NotNil(t, owner, "a stale owner must not give back a lane it lost")

	done := *h
	done.State, done.Outcome, done.SettledAt = queue.Done, idem.Applied, b.now()
	require.NoError(t, b.Put(context.Background(), queue.InFlight, &done))
	stored, err = a.Get(context.Background(), id)
	require.NoError(t, err)
	assert.Equal(t, queue.Done, stored.State)
}

// TestOneInFlightPerLane: the database itself refuses a second record of a
// lane in flight, whatever a store's bug or a hand-run UPDATE tries.
func TestOneInFlightPerLane(t *testing.T) {
	pool := testPool(t)
	st := replica(t, pool, Options{})
	enqueue(t, st, "acct-1")
	enqueue(t, st, "acct-1")
	_, err := pool.Exec(context.Background(), "UPDATE idem_queue_records SET state = 2")
	assert.ErrorContains(t, err, "idem_queue_records_in_flight")
}

// TestEmptyLaneParksAndRevives: a lane found empty is parked, out of every
// replica's look for due lanes, and the next commit into it makes it due
// again.
func TestEmptyLaneParksAndRevives(t *testing.T) {
	pool := testPool(t)
	st := replica(t, pool, Options{})
	enqueue(t, st, "acct-1")
	settle(t, st, take(t, st, "acct-1"))
	park(t, st, "acct-1")

	got, ok, wait, err := takeOne(st)
	require.NoError(t, err)
	require.False(t, ok, "took %q", got)
	assert.Zero(t, wait, "a parked lane is not due at any time")
	var parked bool
	require.NoError(t, pool.QueryRow(context.Background(),
		"SELECT next_at = 'infinity' FROM idem_queue_lanes WHERE name = 'acct-1'").Scan(&parked))
	assert.True(t, parked)

	id := enqueue(t, st, "acct-1")
	assert.Equal(t, id, take(t, st, "acct-1").ID)
}

// TestRecordDuringTheEmptyLook: a record committed after Head found the
// lane empty and before SetNext keeps the lane due: SetNext parks a lane
// only if its last position has not moved.
func TestRecordDuringTheEmptyLook(t *testing.T) {
	pool := testPool(t)
	st := replica(t, pool, Options{})
	enqueue(t, st, "acct-1")
	settle(t, st, take(t, st, "acct-1"))

	require.Nil(t, takeHead(t, st, "acct-1"))
	id := enqueue(t, replica(t, pool, Options{}), "acct-1") // another replica's producer
	require.NoError(t, st.SetNext(context.Background(), "acct-1", time.Time{}))

	assert.Equal(t, id, take(t, st, "acct-1").ID, "the record enqueued meanwhile must not be left behind a parked lane")
}

// TestSweep removes settled records past KeepSettled and the lanes they
// leave empty, and nothing else.
func TestSweep(t *testing.T) {
	pool := testPool(t)
	st := replica(t, pool, Options{Options: queue.Options{KeepSettled: time.Hour}})
	old := enqueue(t, st, "acct-1")
	settle(t, st, take(t, st, "acct-1"))
	park(t, st, "acct-1")
	recent := enqueue(t, st, "acct-2")

	_, err := pool.Exec(context.Background(),
		"UPDATE idem_queue_records SET settled_at = now() - interval '2 hours' WHERE id = $1", int64(old))
	require.NoError(t, err)
	require.NoError(t, st.Sweep(context.Background(), time.Time{}))

	_, err = st.Get(context.Background(), old)
	assert.ErrorIs(t, err, queue.ErrNotFound)
	_, err = st.Get(context.Background(), recent)
	assert.NoError(t, err)
	var lanes []string
	rows, err := pool.Query(context.Background(), "SELECT name FROM idem_queue_lanes ORDER BY name")
	require.NoError(t, err)
	for rows.Next() {
		var n string
		require.NoError(t, rows.Scan(&n))
		lanes = append(lanes, n)
	}
	require.NoError(t, rows.Err())
	assert.Equal(t, []string{"acct-2"}, lanes)
}

// TestDamagedHeadQuarantined: a head whose stored bytes fail their checksum
// is stored failed and damaged, with its intact intent, and returned for
// the Queue to report, and the lane goes on to the next record; a record of
// a newer version than this build reads is left as it is, for a newer
// replica, and Head says why.
func TestDamagedHeadQuarantined(t *testing.T) {
	pool := testPool(t)
	st := replica(t, pool, Options{})
	ctx := context.Background()
	damaged := enqueue(t, st, "acct")
	next := enqueue(t, st, "acct")
	_, err := pool.Exec(ctx, `UPDATE idem_queue_records SET record = set_byte(record, length(record) - 1, get_byte(record, length(record) - 1) # 255)
		WHERE id = $1`, int64(damaged)) // the checksum's last byte
	require.NoError(t, err)

	lane, ok, _, err := takeOne(st)
	require.NoError(t, err)
	require.True(t, ok)
	h, quarantined, err := st.Head(context.Background(), lane)
	require.NoError(t, err)
	require.NotNil(t, h)
	assert.Equal(t, next, h.ID, "the lane moves on")
	require.Len(t, quarantined, 1)
	assert.Equal(t, damaged, quarantined[0].ID)
	stored, err := st.Get(context.Background(), damaged)
	require.NoError(t, err)
	assert.True(t, stored.Damaged)
	assert.Equal(t, queue.Failed, stored.State)
	assert.Equal(t, idem.Unknown, stored.Outcome)
	require.NotNil(t, stored.Intent, "the intent's own checksum holds: it is kept")
	assert.Equal(t, "acct", stored.Intent.Lane())
	settle(t, st, h)
	require.NoError(t, st.SetNext(context.Background(), lane, time.Time{}))
	park(t, st, "acct")

	newer := enqueue(t, st, "upgraded")
	_, err = pool.Exec(ctx, `UPDATE idem_queue_records SET record = set_byte(record, 2, 9) WHERE id = $1`, int64(newer))
	require.NoError(t, err)
	var before []byte
	require.NoError(t, pool.QueryRow(ctx, "SELECT record FROM idem_queue_records WHERE id = $1", int64(newer)).Scan(&before))
	lane, ok, _, err = takeOne(st)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "upgraded", lane)
	_, quarantined, err = st.Head(context.Background(), lane)
	require.ErrorIs(t, err, queue.ErrNewerVersion)
	assert.Empty(t, quarantined)
	var after []byte
	var state int16
	require.NoError(t, pool.QueryRow(ctx, "SELECT record, state FROM idem_queue_records WHERE id = $1", int64(newer)).Scan(&after, &state))
	assert.Equal(t, before, after, "a newer record is left for a newer replica")
	assert.EqualValues(t, queue.Pending, state)
}

// takeOne takes one due lane of st, as a Queue with one free worker does:
// the lane and whether one was taken, or how long until one is due.
func takeOne(st queue.Store) (string, bool, time.Duration, error) {
	lanes, wait, err := st.TakeDue(context.Background(), time.Time{}, 1)
	if err != nil || len(lanes) == 0 {
		return "", false, wait, err
	}
	return lanes[0], true, 0, nil
}
