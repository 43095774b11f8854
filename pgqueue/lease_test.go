package pgqueue

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/queue"
)

// TestOneWorkerPerLaneInAReplica: the workers of one replica share its
// store. Worker A takes a lane and leases its head, then stalls past its
// lease. Worker B of the same replica must not take that lane (a second
// lease of it in the same store would be fenced by the same lane entry, and
// A's late settle would land over B's work), though it takes the others.
// Another replica takes the lane over; A's late settle, hold and schedule
// change nothing. Once A gives the lane back (Release), its replica may
// take it again.
func TestOneWorkerPerLaneInAReplica(t *testing.T) {
	pool := testPool(t)
	st, other := replica(t, pool, Options{}), replica(t, pool, Options{})
	id := enqueue(t, st, "acct-1")

	r := take(t, st, "acct-1") // worker A
	r.State, r.NumAttempts, r.FirstSentAt = queue.InFlight, 1, st.now()
	require.NoError(t, st.Put(context.Background(), queue.Pending, r))
	enqueue(t, st, "acct-2")
	expire(t, pool)

	lane, ok, _, err := takeOne(st) // worker B
	require.NoError(t, err)
	require.True(t, ok, "worker B finds no lane: acct-2 is due")
	assert.Equal(t, "acct-2", lane, "worker B took the lane worker A of its replica still holds")

	h := take(t, other, "acct-1")
	assert.Equal(t, id, h.ID)
	late := *r
	late.State, late.Outcome, late.SettledAt = queue.Done, idem.Applied, st.now()
	assert.ErrorIs(t, st.Put(context.Background(), queue.InFlight, &late), queue.ErrMovedOn, "worker A's late settle")
	require.NoError(t, st.Schedule(context.Background(), queue.HoldLane, "acct-1", time.Time{}))
	require.NoError(t, st.SetNext(context.Background(), "acct-1", st.now().Add(time.Hour)))

	stored, err := st.Get(context.Background(), id)
	require.NoError(t, err)
	assert.Equal(t, queue.InFlight, stored.State, "worker A's late settle must not land")
	var held, owned bool
	require.NoError(t, pool.QueryRow(context.Background(),
		"SELECT held, owner IS NOT NULL FROM idem_queue_lanes WHERE name = 'acct-1'").Scan(&held, &owned))
	assert.False(t, held, "worker A's late hold must not land")
	assert.True(t, owned, "worker A must not give back a lane it lost")

	settle(t, other, h)
	next := enqueue(t, other, "acct-1")
	assert.Equal(t, next, take(t, st, "acct-1").ID, "once worker A released the lane, its replica takes it again")
}
