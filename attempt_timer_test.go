package idem

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tieTransport answers its first request just as the attempt timeout
// cancels it, with a body that, like net/http's, cannot be read once the
// request's context is done; later requests it answers at once.
type tieTransport struct{ calls atomic.Int32 }

func (tt *tieTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
	body := io.ReadCloser(io.NopCloser(strings.NewReader("created")))
	if tt.calls.Add(1) == 1 {
		<-req.Context().Done() // the headers arrive as the timer fires
		body = ctxBody{req.Context(), body}
	}
	return &http.Response{StatusCode: 201, Header: http.Header{}, Body: body, Request: req}, nil
}

type ctxBody struct {
	ctx context.Context
	io.ReadCloser
}

func (b ctxBody) Read(p []byte) (int, error) {
	if err := b.ctx.Err(); err != nil {
		return 0, err
	}
	return b.ReadCloser.Read(p)
}

// TestAttemptTimeoutTie: headers that arrive as the attempt timeout fires
// come with a body the timeout has already cut off. Such an attempt timed
// out (it is in doubt, and resent under its key), rather than a success
// whose body the caller cannot read.
func TestAttemptTimeoutTie(t *testing.T) {
	tr := &tieTransport{}
	c, _ := testClient(t, &http.Client{Transport: tr})
	c.Policy.AttemptTimeout = 100 * ms // the first attempt waits it out; the second must not
	res, err := c.Do(context.Background(), mustIntent(t, "POST", "http://127.0.0.1:1/pay", "x", WithKey("k-1")))
	require.NoError(t, err)
	defer res.Response.Body.Close()
	b, err := io.ReadAll(res.Response.Body)
	require.NoError(t, err, "the body of the answer Do returned reads whole")
	assert.Equal(t, "created", string(b))
	require.Len(t, res.Attempts, 2)
	assert.ErrorIs(t, res.Attempts[0].Err, context.DeadlineExceeded, "the first attempt timed out")
	assert.Equal(t, int32(2), tr.calls.Load())
}
