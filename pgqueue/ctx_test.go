package pgqueue_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/pgqueue"
	"github.com/idem-go/idem/queue"
)

// TestEnqueueCallerContext: an Enqueue whose insert waits on a lock another
// transaction holds on the records' table returns its context's error when
// that context ends, not when the store's own bound on a statement runs
// out: the caller's context reaches the SQL.
func TestEnqueueCallerContext(t *testing.T) {
	pool := migrated(t)
	q := open(t, pool, pgqueue.Options{Options: queue.Options{Policy: fast()}})
	bg := context.Background()
	locker, err := pool.Begin(bg)
	require.NoError(t, err)
	defer locker.Rollback(bg)                                                   //nolint:errcheck // the lock is let go at the test's end
	_, err = locker.Exec(bg, "LOCK TABLE idem_queue_records IN EXCLUSIVE MODE") // writes wait; reads go on
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(bg, 200*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := q.Enqueue(ctx, post(t, "http://127.0.0.1:1/x", idem.WithKey("ctx-1")))
		done <- err
	}()
	select {
	case err := <-done:
		took := time.Since(start)
		t.Logf("Enqueue returned after %v: %v", took, err)
		assert.ErrorIs(t, err, context.DeadlineExceeded, "Enqueue: got %v, want the context's error", err)
		assert.Less(t, took, 5*time.Second, "Enqueue returned after %v, want soon after its 200 ms context ended", took)
	case <-time.After(10 * time.Second):
		t.Fatal("Enqueue with a 200 ms context still waits on the locked table after 10 s")
	}
	require.NoError(t, locker.Rollback(bg))
	var n int
	require.NoError(t, pool.QueryRow(bg, "SELECT count(*) FROM idem_queue_records").Scan(&n))
	assert.Equal(t, 0, n, "records stored by the abandoned Enqueue: got %d, want 0", n)
}
