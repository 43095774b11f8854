package pgqueue_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem/pgqueue"
	"github.com/idem-go/idem/pgqueue/internal/pgtest"
	"github.com/idem-go/idem/queue"
	"github.com/idem-go/idem/queue/queuetest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// unmigrated returns a pool on a fresh database.
func unmigrated(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), pgtest.DB(t))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// migrated returns a pool on a fresh database with the queue's tables.
func migrated(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool := unmigrated(t)
	require.NoError(t, pgqueue.Migrate(context.Background(), pool))
	return pool
}

// open returns a queue on pool, closed when the test ends.
func open(t *testing.T, pool *pgxpool.Pool, opts pgqueue.Options) *queue.Queue {
	t.Helper()
	q, err := pgqueue.New(context.Background(), pool, opts)
	require.NoError(t, err)
	t.Cleanup(func() { q.Close() })
	return q
}

// TestContract runs the behaviour every store must give a Queue against
// the PostgreSQL store.
func TestContract(t *testing.T) {
	queuetest.Run(t, func(t *testing.T, opts queue.Options) *queue.Queue {
		return open(t, migrated(t), pgqueue.Options{Options: opts})
	})
}
