package idem

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type hookKey struct{}

// hookLog records what the OnOperation, OnSend and OnAttempt hooks saw.
type hookLog struct {
	mu         sync.Mutex
	operations []string // method + " " + url
	ends       []string // outcome, then the error's Outcome or "nil"
	sends      []string // the context value each OnSend found
	attempts   []string // the context value each OnAttempt found, with AttemptInfo.N
}

func (h *hookLog) add(to *[]string, s string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	*to = append(*to, s)
}

// install sets the three hooks of c: OnOperation puts "op" in the context,
// OnSend the attempt's number after it ("op/1") and a Traceparent header.
func (h *hookLog) hooks() (
	func(context.Context, string, string) (context.Context, func(Outcome, error)),
	func(*http.Request) context.Context,
	func(context.Context, AttemptInfo),
) {
	var n int
	onOp := func(ctx context.Context, method, url string) (context.Context, func(Outcome, error)) {
		h.add(&h.operations, method+" "+url)
		return context.WithValue(ctx, hookKey{}, "op"), func(o Outcome, err error) {
			e := "nil"
			var ie *Error
			if errors.As(err, &ie) {
				e = ie.Outcome.String()
			}
			h.add(&h.ends, o.String()+" "+e)
		}
	}
	onSend := func(req *http.Request) context.Context {
		v, _ := req.Context().Value(hookKey{}).(string)
		h.add(&h.sends, v)
		n++
		req.Header.Set("Traceparent", "attempt-"+strconv.Itoa(n))
		return context.WithValue(req.Context(), hookKey{}, v+"/"+strconv.Itoa(n))
	}
	onAttempt := func(ctx context.Context, ai AttemptInfo) {
		v, _ := ctx.Value(hookKey{}).(string)
		h.add(&h.attempts, v+" n="+strconv.Itoa(ai.N))
	}
	return onOp, onSend, onAttempt
}

// TestClientHooks checks that OnOperation's context reaches every attempt,
// that OnSend's header goes out and its context reaches OnAttempt for that
// attempt, and that the operation's end is called once with its outcome.
func TestClientHooks(t *testing.T) {
	srv := newScripted(t, answer(503), answer(201))
	c, _ := testClient(t, nil)
	var h hookLog
	c.OnOperation, c.OnSend, c.OnAttempt = h.hooks()
	in := mustIntent(t, http.MethodPost, srv.URL+"/pay?api_key=secret", `{}`, WithKey("k-hooks"))
	res, err := c.Do(context.Background(), in)
	require.NoError(t, err)
	assert.Equal(t, Applied, res.Outcome)

	assert.Equal(t, []string{"POST " + srv.URL + "/pay"}, h.operations, "the URL without its query")
	assert.Equal(t, []string{"op", "op"}, h.sends, "each attempt's request carries the operation's context")
	assert.Equal(t, []string{"op/1 n=1", "op/2 n=2"}, h.attempts, "OnAttempt gets the context OnSend gave its attempt")
	assert.Equal(t, []string{"applied nil"}, h.ends)
	reqs := srv.Requests()
	require.Len(t, reqs, 2)
	for i, r := range reqs {
		assert.Equal(t, "attempt-"+strconv.Itoa(i+1), r.header.Get("Traceparent"))
		assert.Equal(t, "k-hooks", r.key)
	}
}

func TestClientHooksFailure(t *testing.T) {
	srv := newScripted(t, answer(500))
	c, _ := testClient(t, nil)
	var h hookLog
	c.OnOperation, c.OnSend, c.OnAttempt = h.hooks()
	_, err := c.Do(context.Background(), mustIntent(t, http.MethodPost, srv.URL, `{}`, WithoutKey())) // no key: not retried
	require.Error(t, err)
	assert.Equal(t, []string{"unknown unknown"}, h.ends, "end gets the outcome and the *Error Do returns")
	assert.Equal(t, []string{"op/1 n=1"}, h.attempts)
}

// TestOnSendKeepsTheKey checks that OnSend cannot change the key: the
// attempt stops with ErrInvalidRequest before anything is sent.
func TestOnSendKeepsTheKey(t *testing.T) {
	for name, edit := range map[string]func(http.Header){
		"changed": func(h http.Header) { h.Set("Idempotency-Key", "other") },
		"removed": func(h http.Header) { h.Del("Idempotency-Key") },
		"control": func(h http.Header) { h.Set("X-Bad", "a\x00b") },
	} {
		t.Run(name, func(t *testing.T) {
			srv := newScripted(t)
			c, _ := testClient(t, nil)
			c.OnSend = func(req *http.Request) context.Context { edit(req.Header); return nil }
			_, err := c.Do(context.Background(), mustIntent(t, http.MethodPost, srv.URL, `{}`, WithKey("k1")))
			require.ErrorIs(t, err, ErrInvalidRequest)
			assert.Contains(t, err.Error(), "OnSend")
			assert.Empty(t, srv.Requests(), "nothing sent")
		})
	}
}

// TestTransportHooks checks the hooks of a Transport: OnSend's header goes
// out and the caller's request is left as it was.
func TestTransportHooks(t *testing.T) {
	srv := newScripted(t, answer(503), answer(200))
	var h hookLog
	tr := &Transport{Base: httpClient(t, nil).Transport, clock: newFakeClock(), rand: func() float64 { return 0.5 }}
	tr.OnOperation, tr.OnSend, tr.OnAttempt = h.hooks()
	req, err := http.NewRequest(http.MethodGet, srv.URL+"/a?q=1", nil)
	require.NoError(t, err)
	req.Header.Set("X-Mine", "1")
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.Header{"X-Mine": {"1"}}, req.Header, "the caller's request is not changed")
	assert.Equal(t, []string{"GET " + srv.URL + "/a"}, h.operations)
	assert.Equal(t, []string{"op/1 n=1", "op/2 n=2"}, h.attempts)
	assert.Equal(t, []string{"applied nil"}, h.ends)
	reqs := srv.Requests()
	require.Len(t, reqs, 2)
	assert.Equal(t, "attempt-1", reqs[0].header.Get("Traceparent"))
	assert.Equal(t, "attempt-2", reqs[1].header.Get("Traceparent"))
}

// TestTryHooks checks that Try calls OnSend (not OnOperation: one attempt
// is no operation) and that Report gives OnAttempt the attempt's context
// and the caller's Step.N.
func TestTryHooks(t *testing.T) {
	srv := newScripted(t, answer(503))
	c, _ := testClient(t, nil)
	var h hookLog
	c.OnOperation, c.OnSend, c.OnAttempt = h.hooks()
	ctx := context.WithValue(context.Background(), hookKey{}, "drain")
	step, err := c.Try(ctx, mustIntent(t, http.MethodPut, srv.URL, `{}`), NoOutcome, 0)
	require.NoError(t, err)
	step.Response.Body.Close()
	step.N = 3
	step.Report(ActionRetry, 0)
	assert.Empty(t, h.operations)
	assert.Equal(t, []string{"drain"}, h.sends)
	assert.Equal(t, []string{"drain/1 n=3"}, h.attempts)
}
