package queue_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/queue"
)

// TestKeyHeld: a record holding a supplied key answers for the same
// operation with its ID, and for any other with ErrKeyInUse naming the
// record, never the key or the URL's query.
func TestKeyHeld(t *testing.T) {
	const (
		key = "order-8213-secret-key"
		url = "https://pay.example/charges?token=s3cret"
	)
	intent := func(method, url, body string) *idem.Intent {
		in, err := idem.NewIntent(method, url, []byte(body), idem.WithKey(key))
		require.NoError(t, err)
		return in
	}
	holder := &queue.Record{ID: 7, Intent: intent("POST", url, "amount=5")}

	tests := []struct {
		name    string
		holder  *queue.Record
		in      *idem.Intent
		wantID  queue.ID
		wantErr string // "" for none
	}{
		{"same operation", holder, intent("POST", url, "amount=5"), 7, ""},
		{"other body", holder, intent("POST", url, "amount=6"), 0,
			"queue: key already queued for another operation: record 7 holds its key, for POST https://pay.example/charges"},
		{"other method", holder, intent("PUT", url, "amount=5"), 0,
			"queue: key already queued for another operation: record 7 holds its key, for POST https://pay.example/charges"},
		{"other URL", holder, intent("POST", "https://pay.example/refunds", "amount=5"), 0,
			"queue: key already queued for another operation: record 7 holds its key, for POST https://pay.example/charges"},
		{"damaged holder", &queue.Record{ID: 9}, intent("POST", url, "amount=5"), 0,
			"queue: key already queued for another operation: record 9, found damaged, holds its key; Discard it to free the key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := queue.KeyHeld(tt.holder, tt.in)
			assert.Equal(t, tt.wantID, got, "KeyHeld ID = %v, want %v", got, tt.wantID)
			if tt.wantErr == "" {
				assert.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, queue.ErrKeyInUse)
			assert.Equal(t, tt.wantErr, err.Error())
			assert.NotContains(t, err.Error(), key)
			assert.NotContains(t, err.Error(), "s3cret")
		})
	}
}

// TestKeyHeldComparesBodiesInPlace: the check of a key that comes again
// copies neither body, and tells another body from the same one.
func TestKeyHeldComparesBodiesInPlace(t *testing.T) {
	body := bytes.Repeat([]byte("x"), 1<<20)
	intent := func(b []byte) *idem.Intent {
		in, err := idem.NewIntent("POST", "http://127.0.0.1:1/payments", b, idem.WithKey("order-1"))
		require.NoError(t, err)
		return in
	}
	holder := &queue.Record{ID: 7, Intent: intent(body)}
	same := intent(body)
	allocs := testing.AllocsPerRun(10, func() {
		if id, err := queue.KeyHeld(holder, same); err != nil || id != 7 {
			t.Errorf("KeyHeld = %v, %v; want 7, nil", id, err)
		}
	})
	assert.Zero(t, allocs, "allocations to compare the same operation")

	other := append(bytes.Clone(body[:len(body)-1]), 'y')
	_, err := queue.KeyHeld(holder, intent(other))
	assert.ErrorIs(t, err, queue.ErrKeyInUse, "another body under the key")
}
