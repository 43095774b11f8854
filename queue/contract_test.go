package queue_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem/queue"
	"github.com/idem-go/idem/queue/queuetest"
)

// TestContract runs the behaviour every store must give a Queue against the
// bbolt store.
func TestContract(t *testing.T) {
	queuetest.Run(t, func(t *testing.T, opts queue.Options) *queue.Queue {
		q, err := queue.Open(filepath.Join(t.TempDir(), "q.db"), opts)
		require.NoError(t, err)
		t.Cleanup(func() { q.Close() })
		return q
	})
}
