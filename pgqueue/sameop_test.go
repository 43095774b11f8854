package pgqueue

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/queue"
)

// TestSameOperationComparesBodiesInPlace: the check of a key that comes
// again copies neither body, and tells another body from the same one.
func TestSameOperationComparesBodiesInPlace(t *testing.T) {
	body := bytes.Repeat([]byte("x"), 1<<20)
	intent := func(b []byte) *idem.Intent {
		in, err := idem.NewIntent("POST", "http://127.0.0.1:1/payments", b, idem.WithKey("order-1"))
		require.NoError(t, err)
		return in
	}
	holder := &queue.Record{ID: 7, Intent: intent(body)}
	same := intent(body)
	allocs := testing.AllocsPerRun(10, func() {
		id, err := sameOperation(holder, same)
		if err != nil || id != 7 {
			t.Errorf("sameOperation = %v, %v; want 7, nil", id, err)
		}
	})
	assert.Zero(t, allocs, "allocations to compare the same operation")

	other := append(bytes.Clone(body[:len(body)-1]), 'y')
	_, err := sameOperation(holder, intent(other))
	assert.ErrorIs(t, err, queue.ErrKeyInUse, "another body under the key")
}
