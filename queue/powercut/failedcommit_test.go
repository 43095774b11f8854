package powercut

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/queue"
)

// TestFailedCommitIsNotAcknowledged fails each change of an Enqueue's
// commit in turn with EIO (Arm), its fdatasyncs among them: after the meta
// page's write the failed sync leaves that page where bbolt reads it. The
// Enqueue must fail, wrapping ErrDamaged; every later call must too, List
// included, rather than show a commit the disk does not hold; and after the
// cut a reopen shows what the disk holds: the records acknowledged before,
// not the failed one.
func TestFailedCommitIsNotAcknowledged(t *testing.T) {
	p := mountT(t)
	path := filepath.Join(p.Dir(), "q.db")
	opts := queue.Options{LockTimeout: 10e9}
	ctx := context.Background()
	serial, damaged := 0, 0
	enqueue := func(q *queue.Queue) (string, error) {
		serial++
		key := fmt.Sprintf("k-%d", serial)
		in, err := idem.NewIntent("POST", "https://api.example/pay", fmt.Appendf(nil, "serial=%d", serial), idem.WithKey(key))
		require.NoError(t, err)
		_, err = q.Enqueue(ctx, in)
		return key, err
	}
	keys := func(q *queue.Queue) ([]string, error) {
		recs, err := q.List(ctx, 0, 0, 1000)
		var out []string
		for _, r := range recs {
			out = append(out, r.Intent.Key())
		}
		return out, err
	}

	q, err := queue.Open(path, opts)
	require.NoError(t, err)
	var acked []string
	// span measures the changes an Enqueue makes: two in a row, the second
	// counted, so that the next one, of the same size, makes as many.
	span := func() int64 {
		var n int64
		for range 2 {
			before := p.Changes()
			key, err := enqueue(q)
			require.NoError(t, err)
			acked = append(acked, key)
			n = p.Changes() - before
		}
		return n
	}
	// The last change of an Enqueue is the commit mark's, after the commit
	// returned; the one before it the fdatasync of the meta page.
	for back := int64(1); back <= 5; back++ {
		t.Run(fmt.Sprintf("change %d from the end", back+1), func(t *testing.T) {
			n := span()
			require.Greater(t, n, back+1, "an Enqueue writes and syncs")
			p.Arm(n - back)
			_, err := enqueue(q)
			require.Error(t, err, "Enqueue acknowledged a commit that failed")
			t.Logf("change %d of %d: %v", n-back, n, err)
			require.True(t, p.IsOff())
			if errors.Is(err, queue.ErrDamaged) {
				damaged++
				assert.ErrorContains(t, err, "a commit failed")
				_, err = keys(q)
				assert.ErrorIs(t, err, queue.ErrDamaged, "List after a failed commit")
				_, err = enqueue(q)
				assert.ErrorIs(t, err, queue.ErrDamaged, "Enqueue after a failed commit")
			} else {
				// bbolt rolled it back whole: no read shows it.
				got, err := keys(q)
				require.NoError(t, err, "List after a commit rolled back")
				assert.Equal(t, acked, got, "List after a commit rolled back")
			}
			_ = q.Close() // with the power off
			p.Cut(Plan{})

			q, err = queue.Open(path, opts)
			require.NoError(t, err, "Open after the cut")
			got, err := keys(q)
			require.NoError(t, err)
			assert.Equal(t, acked, got, "the disk holds what was acknowledged")
		})
	}
	require.NoError(t, q.Close())
	// The meta page's fdatasync failing leaves that page where bbolt reads
	// it: that one at least must break the store.
	assert.Positive(t, damaged, "no failed commit broke the store")
}
