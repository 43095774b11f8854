package queue_test

import (
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
