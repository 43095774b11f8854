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

// TestWriteCallerContext: an Enqueue or a Discard whose statement waits on
// a lock another transaction holds on the records' table returns its
// context's error when that context ends, not when the store's own bound on
// a statement runs out: the caller's context reaches the SQL, and the write
// it cancelled is not stored.
func TestWriteCallerContext(t *testing.T) {
	calls := []struct {
		name  string
		call  func(context.Context, *queue.Queue, queue.ID) error
		after int // records in the table once the call gave up
	}{
		{"Enqueue", func(ctx context.Context, q *queue.Queue, _ queue.ID) error {
			_, err := q.Enqueue(ctx, post(t, "http://127.0.0.1:1/x", idem.WithKey("ctx-2")))
			return err
		}, 1},
		{"Discard", func(ctx context.Context, q *queue.Queue, id queue.ID) error { return q.Discard(ctx, id) }, 1},
	}
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			pool := migrated(t)
			q := open(t, pool, pgqueue.Options{Options: queue.Options{Policy: fast()}})
			bg := context.Background()
			id, err := q.Enqueue(bg, post(t, "http://127.0.0.1:1/x", idem.WithKey("ctx-1")))
			require.NoError(t, err)
			locker, err := pool.Begin(bg)
			require.NoError(t, err)
			defer locker.Rollback(bg) //nolint:errcheck // let go below, or at the test's end
			// Writes to the table wait; reads go on.
			_, err = locker.Exec(bg, "LOCK TABLE idem_queue_records IN EXCLUSIVE MODE")
			require.NoError(t, err)

			ctx, cancel := context.WithTimeout(bg, 200*time.Millisecond)
			defer cancel()
			done := make(chan error, 1)
			start := time.Now()
			go func() { done <- c.call(ctx, q, id) }()
			select {
			case err := <-done:
				took := time.Since(start)
				t.Logf("%s returned after %v: %v", c.name, took, err)
				assert.ErrorIs(t, err, context.DeadlineExceeded, "%s: got %v, want the context's error", c.name, err)
				assert.Less(t, took, 5*time.Second, "%s returned after %v, want soon after its 200 ms context ended", c.name, took)
			case <-time.After(10 * time.Second):
				t.Fatalf("%s with a 200 ms context still waits on the locked table after 10 s", c.name)
			}
			require.NoError(t, locker.Rollback(bg))
			var n int
			require.NoError(t, pool.QueryRow(bg, "SELECT count(*) FROM idem_queue_records").Scan(&n))
			assert.Equal(t, c.after, n, "records once %s gave up: got %d, want %d", c.name, n, c.after)
		})
	}
}
