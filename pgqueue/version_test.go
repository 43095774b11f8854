package pgqueue

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNewerTablesStopTheLease: once the tables are of a version newer than
// a replica knows, the statements that take a lane and read a lane's head
// refuse (ErrTablesNewer), also for a lane the replica took before the
// migration (the head read with the take, before it, is the lane's as the
// old version orders it); the lane it gives back is another replica's to
// take.
func TestNewerTablesStopTheLease(t *testing.T) {
	ctx := context.Background()
	pool := testPool(t)
	old := replica(t, pool, Options{})
	enqueue(t, old, "a")
	enqueue(t, old, "b")
	lane, ok, _, err := takeOne(old)
	require.NoError(t, err)
	require.True(t, ok)
	_, _, err = old.Head(context.Background(), lane)
	require.NoError(t, err, "the head read with the take")

	steps := must(migrationSteps())
	require.NoError(t, migrate(ctx, pool, append(steps, step{version: len(steps) + 1, name: "next.sql",
		sql: "ALTER TABLE idem_queue_lanes ADD COLUMN next_build_only integer"})))
	_, _, err = old.Head(context.Background(), lane)
	assert.ErrorIs(t, err, ErrTablesNewer, "Head of a lane taken before the migration")
	_, ok, _, err = takeOne(old)
	assert.ErrorIs(t, err, ErrTablesNewer, "TakeDue")
	assert.False(t, ok)
	require.NoError(t, old.SetNext(context.Background(), lane, time.Time{}))
	_, err = open(ctx, pool, Options{})
	assert.ErrorIs(t, err, ErrTablesNewer, "open")

	st, err := openKnowing(ctx, pool, Options{}, len(steps)+1)
	require.NoError(t, err)
	close(st.done)
	t.Cleanup(func() { st.Close() })
	var took []string
	for range 2 {
		l, ok, _, err := takeOne(st)
		require.NoError(t, err)
		require.True(t, ok, "a lane due")
		took = append(took, l)
	}
	assert.ElementsMatch(t, []string{"a", "b"}, took)
}
