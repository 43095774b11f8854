package queue

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
)

// TestEnqueueErrorsRedact: Enqueue's errors name the operation without the
// URL's query, user info or the intent's key, which may be secrets; they
// still say which record and endpoint are meant.
func TestEnqueueErrorsRedact(t *testing.T) {
	const (
		secretURL = "https://h/p?token=s3cret#frag"
		key       = "key-k3y-secret"
	)
	q, _ := openTest(t, Options{})
	ctx := context.Background()
	queued, err := idem.NewIntent("POST", secretURL, []byte("a"), idem.WithKey(key))
	require.NoError(t, err)
	queuedID, err := q.Enqueue(ctx, queued)
	require.NoError(t, err)

	keyless, err := idem.NewIntent("POST", secretURL, []byte("x"), idem.WithoutKey())
	require.NoError(t, err)
	other, err := idem.NewIntent("POST", secretURL, []byte("b"), idem.WithKey(key))
	require.NoError(t, err)

	tests := []struct {
		name string
		in   *idem.Intent
		want error
		msg  []string
	}{
		{"POST without key", keyless, ErrNeedsKey, []string{"queue: not idempotent and no key: POST https://h/p"}},
		{"key of another operation", other, ErrKeyInUse, []string{
			"queue: key already queued for another operation: ",
			"record " + queuedID.String(), "POST https://h/p",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := q.Enqueue(ctx, tt.in)
			require.ErrorIs(t, err, tt.want)
			got := err.Error()
			for _, secret := range []string{"s3cret", "token", "frag", key} {
				assert.NotContains(t, got, secret, "Enqueue error %q shows a secret", got)
			}
			for _, m := range tt.msg {
				assert.Contains(t, got, m)
			}
		})
	}
}
