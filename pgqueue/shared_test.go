package pgqueue

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestStoreShared: replicas and producers share the tables, so a Queue over
// the store polls a record Wait waits for and a read-only Queue may wait.
func TestStoreShared(t *testing.T) {
	assert.True(t, (&store{}).Info().Shared, "a PostgreSQL store is shared")
}
