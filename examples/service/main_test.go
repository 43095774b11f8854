package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestResumedPhaseChargesOnce: the service crashes between charge and
// record; the caller's retry resumes the order and the charge is replayed,
// not repeated.
func TestResumedPhaseChargesOnce(t *testing.T) {
	var out bytes.Buffer
	sum, err := run(&out)
	require.NoError(t, err, out.String())
	t.Log("\n" + out.String())
	assert.True(t, sum.crashed, "the first request must have crashed after charging")
	assert.Equal(t, 1, sum.charges, "charged exactly once")
	assert.Equal(t, 1, sum.orders)
	assert.Equal(t, 1, sum.chargeReplays, "the resumed charge was answered from the payment API's store")
	assert.Contains(t, out.String(), "shop: applied")
}
