package queue

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
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

// TestQueueFailsOwnCredentialHeader: a record whose intent carries a header
// its Client names in CredentialHeaders (which NewIntent cannot know) fails
// at its first attempt, NotApplied, and nothing is sent.
func TestQueueFailsOwnCredentialHeader(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	t.Cleanup(srv.Close)
	q, _ := openTest(t, fast(&idem.Client{CredentialHeaders: []string{"X-Shop-Token"}}))
	id, err := q.Enqueue(waitCtx(t), post(t, srv.URL, 1, idem.WithHeader("x-shop-token", "s3cret")))
	require.NoError(t, err)
	run(t, q)
	r, err := q.Wait(waitCtx(t), id)
	require.NoError(t, err)
	assert.Equal(t, Failed, r.State)
	assert.Equal(t, idem.NotApplied, r.Outcome)
	assert.Contains(t, r.LastError, "X-Shop-Token")
	assert.NotContains(t, r.LastError, "s3cret")
	assert.Zero(t, hits.Load(), "nothing was sent")
}
