package idem

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const ms = time.Millisecond

// TestDoTable runs every row of the decision table through real HTTP round
// trips on loopback and checks the trail, the waits and what the caller is
// told.
func TestDoTable(t *testing.T) {
	noKey := []IntentOption{WithoutKey()}
	bigBody := strings.Repeat("x", 10<<10)
	tests := []struct {
		name     string
		method   string
		opts     []IntentOption
		refuse   int
		steps    []step
		classes  []Class
		waits    []time.Duration
		outcome  Outcome
		err      error // nil: a Result
		replayed bool
		reason   string
	}{
		{name: "201 applied", method: "POST", steps: []step{answer(201)},
			classes: []Class{ClassApplied}, outcome: Applied},
		{name: "303 applied", method: "POST", steps: []step{answer(303)},
			classes: []Class{ClassApplied}, outcome: Applied},
		{name: "hang-up then replay", method: "POST", steps: []step{hangup, answer(201, "Idempotent-Replayed", "true")},
			classes: []Class{ClassAmbiguous, ClassApplied}, waits: []time.Duration{200 * ms}, outcome: Applied, replayed: true},
		{name: "replay header spelling", method: "POST", steps: []step{answer(503), answer(200, "X-Idempotent-Replayed", "true")},
			classes: []Class{ClassAmbiguous, ClassApplied}, waits: []time.Duration{200 * ms}, outcome: Applied, replayed: true},
		{name: "DELETE hang-up then 404 is already applied", method: "DELETE", steps: []step{hangup, answer(404)},
			classes: []Class{ClassAmbiguous, ClassAlreadyApplied}, waits: []time.Duration{200 * ms}, outcome: AlreadyApplied},
		{name: "DELETE 503 then 410 is already applied", method: "DELETE", opts: noKey, steps: []step{answer(503), answer(410)},
			classes: []Class{ClassAmbiguous, ClassAlreadyApplied}, waits: []time.Duration{200 * ms}, outcome: AlreadyApplied},
		{name: "DELETE 404 first is a rejection", method: "DELETE", steps: []step{answer(404)},
			classes: []Class{ClassRejected}, outcome: NotApplied},
		{name: "never sent twice then applied", method: "POST", refuse: 2, steps: []step{answer(201)},
			classes: []Class{ClassNeverSent, ClassNeverSent, ClassApplied}, waits: []time.Duration{200 * ms, 400 * ms}, outcome: Applied},
		{name: "never sent keyless POST is retried", method: "POST", opts: noKey, refuse: 1, steps: []step{answer(201)},
			classes: []Class{ClassNeverSent, ClassApplied}, waits: []time.Duration{200 * ms}, outcome: Applied},
		{name: "never sent exhausted", method: "POST", refuse: 10,
			classes: []Class{ClassNeverSent, ClassNeverSent, ClassNeverSent, ClassNeverSent}, waits: []time.Duration{200 * ms, 400 * ms, 800 * ms},
			outcome: NotApplied, err: ErrAttemptsExhausted, reason: "attempts exhausted (4 of 4)"},
		{name: "429 waits Retry-After", method: "POST", steps: []step{answer(429, "Retry-After", "2"), answer(201)},
			classes: []Class{ClassNotProcessed, ClassApplied}, waits: []time.Duration{2 * time.Second}, outcome: Applied},
		// The retry rule (delay.Next) is the queue's: the backoff follows the
		// attempt number, and a Retry-After is waited at least, never less
		// than the backoff.
		{name: "backoff after Retry-After counts the attempts", method: "POST", steps: []step{answer(429, "Retry-After", "1"), answer(503), answer(201)},
			classes: []Class{ClassNotProcessed, ClassAmbiguous, ClassApplied}, waits: []time.Duration{time.Second, 400 * ms}, outcome: Applied},
		{name: "Retry-After shorter than the backoff", method: "POST", steps: []step{answer(503), answer(429, "Retry-After", "0"), answer(201)},
			classes: []Class{ClassAmbiguous, ClassNotProcessed, ClassApplied}, waits: []time.Duration{200 * ms, 400 * ms}, outcome: Applied},
		{name: "408 retried", method: "GET", steps: []step{answer(408), answer(200)},
			classes: []Class{ClassNotProcessed, ClassApplied}, waits: []time.Duration{200 * ms}, outcome: Applied},
		{name: "425 retried", method: "PATCH", opts: noKey, steps: []step{answer(425), answer(200)},
			classes: []Class{ClassNotProcessed, ClassApplied}, waits: []time.Duration{200 * ms}, outcome: Applied},
		{name: "409 keyed is in flight", method: "POST", steps: []step{answer(409), answer(409), answer(201)},
			classes: []Class{ClassNotProcessed, ClassNotProcessed, ClassApplied}, waits: []time.Duration{200 * ms, 400 * ms}, outcome: Applied},
		{name: "409 keyless is a rejection", method: "POST", opts: noKey, steps: []step{answer(409)},
			classes: []Class{ClassRejected}, outcome: NotApplied},
		{name: "503 keyed retried", method: "POST", steps: []step{answer(503), answer(201)},
			classes: []Class{ClassAmbiguous, ClassApplied}, waits: []time.Duration{200 * ms}, outcome: Applied},
		{name: "500 keyless PUT retried", method: "PUT", opts: noKey, steps: []step{answer(500), answer(200)},
			classes: []Class{ClassAmbiguous, ClassApplied}, waits: []time.Duration{200 * ms}, outcome: Applied},
		{name: "502 QUERY retried", method: "QUERY", steps: []step{answer(502), answer(200)},
			classes: []Class{ClassAmbiguous, ClassApplied}, waits: []time.Duration{200 * ms}, outcome: Applied},
		{name: "504 with large body drained", method: "GET", steps: []step{{status: 504, body: bigBody}, answer(200)},
			classes: []Class{ClassAmbiguous, ClassApplied}, waits: []time.Duration{200 * ms}, outcome: Applied},
		{name: "keyless POST hang-up is not retried", method: "POST", opts: noKey, steps: []step{hangup},
			classes: []Class{ClassAmbiguous}, outcome: Unknown, err: ErrNoKey, reason: "outcome unknown, not retried: POST without key"},
		{name: "keyless PATCH 503 is not retried", method: "PATCH", opts: noKey, steps: []step{answer(503)},
			classes: []Class{ClassAmbiguous}, outcome: Unknown, err: ErrNoKey, reason: "not retried: PATCH without key"},
		{name: "422 keyed", method: "POST", steps: []step{answer(422)},
			classes: []Class{ClassKeyReused}, outcome: NotApplied, err: ErrKeyReused},
		{name: "422 after ambiguous", method: "POST", steps: []step{hangup, answer(422)},
			classes: []Class{ClassAmbiguous, ClassKeyReused}, waits: []time.Duration{200 * ms}, outcome: Unknown, err: ErrKeyReused},
		{name: "422 keyless is a rejection", method: "POST", opts: noKey, steps: []step{answer(422)},
			classes: []Class{ClassRejected}, outcome: NotApplied},
		{name: "400 rejected", method: "POST", steps: []step{answer(400)},
			classes: []Class{ClassRejected}, outcome: NotApplied},
		{name: "307 without Location rejected", method: "POST", steps: []step{answer(307)},
			classes: []Class{ClassRejected}, outcome: NotApplied},
		{name: "401 after ambiguous is unknown", method: "POST", steps: []step{answer(503), answer(401)},
			classes: []Class{ClassAmbiguous, ClassRejected}, waits: []time.Duration{200 * ms}, outcome: Unknown, err: ErrOutcomeUnknown, reason: "rejected (401)"},
		{name: "412 after ambiguous is flagged", method: "PUT", steps: []step{answer(503), answer(412)},
			classes: []Class{ClassAmbiguous, ClassRejected}, waits: []time.Duration{200 * ms}, outcome: Unknown, err: ErrOutcomeUnknown, reason: "may be the write that moved"},
		{name: "503 exhausted", method: "POST", steps: []step{answer(503), answer(503), answer(503), answer(503)},
			classes: []Class{ClassAmbiguous, ClassAmbiguous, ClassAmbiguous, ClassAmbiguous}, waits: []time.Duration{200 * ms, 400 * ms, 800 * ms},
			outcome: Unknown, err: ErrAttemptsExhausted},
		{name: "Stripe-Should-Retry false", method: "POST", steps: []step{answer(503, "Stripe-Should-Retry", "false")},
			classes: []Class{ClassAmbiguous}, outcome: Unknown, err: ErrServerSaidStop},
		{name: "Stripe-Should-Retry true on 400", method: "POST", steps: []step{answer(400, "Stripe-Should-Retry", "true"), answer(201)},
			classes: []Class{ClassRejected, ClassApplied}, waits: []time.Duration{200 * ms}, outcome: Applied},
		{name: "Retry-After over the cap", method: "POST", steps: []step{answer(429, "Retry-After", "3600")},
			classes: []Class{ClassNotProcessed}, outcome: NotApplied, err: ErrRetryAfterTooLong, reason: "server asked to wait 1h0m0s"},
		{name: "malformed Retry-After ignored", method: "POST", steps: []step{answer(503, "Retry-After", "soon"), answer(201)},
			classes: []Class{ClassAmbiguous, ClassApplied}, waits: []time.Duration{200 * ms}, outcome: Applied},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newScripted(t, tt.steps...)
			dialer := &refusingDialer{}
			dialer.left.Store(int32(tt.refuse))
			c, clk := testClient(t, httpClient(t, dialer.DialContext))
			in := mustIntent(t, tt.method, srv.URL+"/r", "payload", tt.opts...)

			res, err := c.Do(context.Background(), in)

			var atts []Attempt
			if tt.err == nil {
				require.NoError(t, err)
				require.NotNil(t, res)
				defer res.Response.Body.Close()
				assert.Equal(t, tt.outcome, res.Outcome)
				assert.Equal(t, tt.replayed, res.Replayed)
				assert.Equal(t, tt.steps[len(tt.steps)-1].statusOr200(), res.Response.StatusCode)
				atts = res.Attempts
			} else {
				require.Error(t, err)
				assert.Nil(t, res)
				assert.ErrorIs(t, err, tt.err)
				e := asError(t, err)
				assert.Equal(t, tt.outcome, e.Outcome)
				if tt.outcome == Unknown {
					assert.ErrorIs(t, err, ErrOutcomeUnknown)
				} else {
					assert.ErrorIs(t, err, ErrNotApplied)
				}
				assert.Contains(t, err.Error(), tt.reason)
				atts = e.Attempts
			}
			assert.Equal(t, tt.classes, classes(atts), "classes")
			waits := clk.Sleeps()
			if len(tt.waits) == 0 {
				assert.Empty(t, waits)
			} else {
				assert.Equal(t, tt.waits, waits, "waits")
			}
			for i, a := range atts {
				if i < len(waits) {
					assert.Equal(t, waits[i], a.Wait, "attempt %d Wait", i)
				}
			}
			assert.Equal(t, time.Duration(0), atts[len(atts)-1].Wait, "the last attempt has no wait")
			// Every request that reached the server was the same operation.
			for _, r := range srv.Requests() {
				assert.Equal(t, in.Key(), r.key, "key")
				assert.Equal(t, "payload", r.body, "body")
				assert.Equal(t, tt.method, r.method)
			}
		})
	}
}

func (s step) statusOr200() int {
	if s.status == 0 {
		return 200
	}
	return s.status
}

func TestDoDeletePolicy(t *testing.T) {
	for _, tt := range []struct {
		name    string
		policy  DeletePolicy
		outcome Outcome
		class   Class
	}{
		{"always", DeleteAlways, AlreadyApplied, ClassAlreadyApplied},
		{"after-doubt", DeleteAfterDoubt, NotApplied, ClassRejected},
		{"never", DeleteNever, NotApplied, ClassRejected},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := newScripted(t, answer(404))
			c, _ := testClient(t, nil)
			c.DeletePolicy = tt.policy
			res, err := c.Do(context.Background(), mustIntent(t, "DELETE", srv.URL+"/r/1", ""))
			require.NoError(t, err)
			res.Response.Body.Close()
			assert.Equal(t, tt.outcome, res.Outcome)
			assert.Equal(t, []Class{tt.class}, classes(res.Attempts))
		})
	}
}

func TestDoSameKeyBodyAndFreshCredentials(t *testing.T) {
	srv := newScripted(t, answer(503), answer(429), answer(409), answer(201))
	var calls atomic.Int32
	c, _ := testClient(t, nil)
	c.Policy.MaxAttempts = 5
	c.Authorize = func(ctx context.Context, req *http.Request) error {
		n := calls.Add(1)
		req.Header.Set("Authorization", fmt.Sprintf("Bearer token-%d", n))
		return nil
	}
	in := mustIntent(t, "POST", srv.URL+"/pay", `{"amount":100}`, WithHeader("Content-Type", "application/json"))
	res, err := c.Do(context.Background(), in)
	require.NoError(t, err)
	res.Response.Body.Close()

	reqs := srv.Requests()
	require.Len(t, reqs, 4)
	for i, r := range reqs {
		assert.Equal(t, in.Key(), r.key, "request %d key", i)
		assert.Equal(t, `{"amount":100}`, r.body, "request %d body", i)
		assert.Equal(t, "application/json", r.header.Get("Content-Type"))
		assert.Equal(t, fmt.Sprintf("Bearer token-%d", i+1), r.auth, "request %d must carry fresh credentials", i)
	}
	assert.Nil(t, in.Header().Values("Authorization"), "credentials must not be stored in the intent")
}

// TestDoCountsNetHTTPResends shows net/http resending a keyed request by
// itself: a reused connection that closes without an answer is retried on a
// new one within the same attempt. Wire.Conns reports it.
func TestDoCountsNetHTTPResends(t *testing.T) {
	srv := newScripted(t, answer(503), hangup, answer(201))
	c, _ := testClient(t, nil)
	in := mustIntent(t, "POST", srv.URL, "x")
	res, err := c.Do(context.Background(), in)
	require.NoError(t, err)
	res.Response.Body.Close()
	require.Len(t, res.Attempts, 2)
	assert.Equal(t, 2, res.Attempts[1].Wire.Conns, "the second attempt went out on two connections")
	assert.Len(t, srv.Requests(), 3)
	for _, r := range srv.Requests() {
		assert.Equal(t, in.Key(), r.key)
	}
}

func TestDoKeyHeaderOptions(t *testing.T) {
	tests := []struct {
		name   string
		header string
		sf     bool
		want   func(key string) (string, string)
	}{
		{"default", "", false, func(k string) (string, string) { return "Idempotency-Key", k }},
		{"sf-string", "", true, func(k string) (string, string) { return "Idempotency-Key", `"` + k + `"` }},
		{"custom header", "X-Request-Token", false, func(k string) (string, string) { return "X-Request-Token", k }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newScripted(t, answer(201))
			c, _ := testClient(t, nil)
			c.KeyHeader, c.KeySFString = tt.header, tt.sf
			in := mustIntent(t, "POST", srv.URL, "x")
			res, err := c.Do(context.Background(), in)
			require.NoError(t, err)
			res.Response.Body.Close()
			name, value := tt.want(in.Key())
			assert.Equal(t, value, srv.Requests()[0].header.Get(name))
		})
	}
	t.Run("safe methods carry no key", func(t *testing.T) {
		srv := newScripted(t, answer(200))
		c, _ := testClient(t, nil)
		res, err := c.Do(context.Background(), mustIntent(t, "GET", srv.URL, ""))
		require.NoError(t, err)
		res.Response.Body.Close()
		assert.Empty(t, srv.Requests()[0].header.Values("Idempotency-Key"))
	})
}

func TestDoReusesConnection(t *testing.T) {
	big := strings.Repeat("e", 16<<10)
	srv := newScripted(t, step{status: 503, body: big}, step{status: 429, body: big}, answer(201))
	c, _ := testClient(t, nil)
	res, err := c.Do(context.Background(), mustIntent(t, "POST", srv.URL, "x"))
	require.NoError(t, err)
	res.Response.Body.Close()
	assert.Len(t, res.Attempts, 3)
	assert.Equal(t, int32(1), srv.conns.Load(), "drained intermediate bodies keep the connection")
	for _, a := range res.Attempts {
		assert.Equal(t, 1, a.Wire.Conns)
		assert.True(t, a.Wire.WroteHeaders && a.Wire.WroteRequest && a.Wire.GotResponse, "wire facts %+v", a.Wire)
	}
}

func TestDoFinalBodyReachesCaller(t *testing.T) {
	srv := newScripted(t, answer(503), step{status: 201, body: `{"id":"pay_1"}`})
	c, _ := testClient(t, nil)
	c.Policy.AttemptTimeout = 5 * time.Second // the body must outlive Do's attempt context
	res, err := c.Do(context.Background(), mustIntent(t, "POST", srv.URL, "x"))
	require.NoError(t, err)
	b, err := io.ReadAll(res.Response.Body)
	require.NoError(t, err)
	require.NoError(t, res.Response.Body.Close())
	assert.Equal(t, `{"id":"pay_1"}`, string(b))
}

func TestDoWireFactsNeverSent(t *testing.T) {
	c, _ := testClient(t, httpClient(t, (&refusingDialer{}).DialContextAlways))
	in := mustIntent(t, "POST", "http://127.0.0.1:1/x", "x")
	_, err := c.Do(context.Background(), in)
	e := asError(t, err)
	for _, a := range e.Attempts {
		assert.Equal(t, Wire{}, a.Wire)
		assert.True(t, errors.Is(a.Err, syscall.ECONNREFUSED), "attempt error %v", a.Err)
	}
	assert.True(t, errors.Is(err, syscall.ECONNREFUSED), "the last transport error is reachable from the *Error")
	var op *net.OpError
	assert.True(t, errors.As(err, &op))
}

func (r *refusingDialer) DialContextAlways(ctx context.Context, network, addr string) (net.Conn, error) {
	return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
}

// TestDoTrailShowsFirstSend: when the operation first may have reached the
// server, the start of a key's retention, is the trail's to tell.
func TestDoTrailShowsFirstSend(t *testing.T) {
	srv := newScripted(t, hangup, answer(201))
	c, clk := testClient(t, nil)
	start := clk.Now()
	in := mustIntent(t, "POST", srv.URL, "x")
	res, err := c.Do(context.Background(), in)
	require.NoError(t, err)
	res.Response.Body.Close()
	require.Len(t, res.Attempts, 2)
	first := res.Attempts[0]
	assert.True(t, first.Wire.WroteHeaders, "the hung-up attempt went out")
	assert.True(t, start.Equal(first.Start), "first attempt started %v, want %v", first.Start, start)
}

func TestDoBudget(t *testing.T) {
	srv := newScripted(t, answer(503), answer(503), answer(503), answer(503))
	c, _ := testClient(t, nil)
	c.Budget = NewBudget(1) // one retry
	_, err := c.Do(context.Background(), mustIntent(t, "POST", srv.URL, "x"))
	require.ErrorIs(t, err, ErrBudgetExhausted)
	assert.ErrorIs(t, err, ErrOutcomeUnknown)
	assert.Len(t, asError(t, err).Attempts, 2)
	assert.Equal(t, 0, c.Budget.left())
	assert.Len(t, srv.Requests(), 2)
}

func TestDoDefaultBudgetSharedAndRefilled(t *testing.T) {
	srv := newScripted(t, answer(503), answer(201), answer(200))
	c, _ := testClient(t, nil)
	res, err := c.Do(context.Background(), mustIntent(t, "POST", srv.URL, "x"))
	require.NoError(t, err)
	res.Response.Body.Close()
	assert.Equal(t, DefaultBudgetTokens, c.budget.or(c.Budget).left(), "an answer puts back what a retry took")
	assert.Same(t, c.budget.or(c.Budget), c.budget.or(c.Budget))
}

func TestDoContext(t *testing.T) {
	t.Run("already canceled", func(t *testing.T) {
		srv := newScripted(t)
		c, _ := testClient(t, nil)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := c.Do(ctx, mustIntent(t, "POST", srv.URL, "x"))
		assert.ErrorIs(t, err, context.Canceled)
		assert.ErrorIs(t, err, ErrNotApplied)
		assert.Empty(t, srv.Requests())
	})
	t.Run("deadline before next attempt", func(t *testing.T) {
		srv := newScripted(t, answer(503), answer(503), answer(503))
		c, clk := testClient(t, nil)
		clk.now = time.Now()
		ctx, cancel := context.WithDeadline(context.Background(), clk.now.Add(500*ms))
		defer cancel()
		_, err := c.Do(ctx, mustIntent(t, "POST", srv.URL, "x"))
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.ErrorIs(t, err, ErrOutcomeUnknown)
		assert.Equal(t, []time.Duration{200 * ms}, clk.Sleeps(), "the 400ms wait would pass the deadline")
	})
	t.Run("canceled while waiting", func(t *testing.T) {
		srv := newScripted(t, answer(503), answer(201))
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		c := &Client{HTTPClient: httpClient(t, nil), clock: cancelingClock{cancel}}
		_, err := c.Do(ctx, mustIntent(t, "POST", srv.URL, "x"))
		assert.ErrorIs(t, err, context.Canceled)
		assert.ErrorIs(t, err, ErrOutcomeUnknown)
		assert.Contains(t, err.Error(), "while waiting to retry")
		assert.Len(t, srv.Requests(), 1)
	})
	t.Run("max elapsed", func(t *testing.T) {
		srv := newScripted(t, answer(503), answer(503), answer(503))
		c, clk := testClient(t, nil)
		c.Policy.MaxElapsed = 500 * ms
		_, err := c.Do(context.Background(), mustIntent(t, "POST", srv.URL, "x"))
		assert.ErrorIs(t, err, ErrAttemptsExhausted)
		assert.Contains(t, err.Error(), "max elapsed time 500ms")
		assert.Equal(t, []time.Duration{200 * ms}, clk.Sleeps())
	})
}

// cancelingClock cancels the context as a retry wait begins.
type cancelingClock struct{ cancel context.CancelFunc }

func (cancelingClock) Now() time.Time { return time.Now() }

func (cancelingClock) Since(t time.Time) time.Duration { return time.Since(t) }

func (cancelingClock) AfterFunc(d time.Duration, f func()) stopper { return time.AfterFunc(d, f) }

func (c cancelingClock) Sleep(ctx context.Context, d time.Duration) error {
	c.cancel()
	<-ctx.Done()
	return ctx.Err()
}

// TestDoAttemptTimeout: an attempt the server holds past the attempt timeout
// is ambiguous, and retried. The test fires the timer once the server has
// the request, so the headers are out however slow the machine is.
func TestDoAttemptTimeout(t *testing.T) {
	srv := newScripted(t, step{status: 200, delay: time.Hour}, answer(200))
	c, clk := testClient(t, nil)
	c.Policy.AttemptTimeout = time.Hour // fired below
	in := mustIntent(t, "PUT", srv.URL+"/res/1", "v1")
	done := goDo(c, in)
	require.Eventually(t, func() bool { return len(srv.Requests()) == 1 }, 10*time.Second, ms, "the server never got the request")
	clk.fireTimers()
	got := recv(t, done, "the answer")
	require.NoError(t, got.err)
	res := got.res
	res.Response.Body.Close()
	require.Len(t, res.Attempts, 2)
	assert.Equal(t, ClassAmbiguous, res.Attempts[0].Class)
	assert.ErrorIs(t, res.Attempts[0].Err, context.DeadlineExceeded)
	assert.True(t, res.Attempts[0].Wire.WroteHeaders)
}

func TestDoAuthorizeError(t *testing.T) {
	srv := newScripted(t)
	c, _ := testClient(t, nil)
	boom := errors.New("token service down")
	c.Authorize = func(context.Context, *http.Request) error { return boom }
	_, err := c.Do(context.Background(), mustIntent(t, "POST", srv.URL, "x"))
	assert.ErrorIs(t, err, boom)
	assert.ErrorIs(t, err, ErrNotApplied)
	assert.Contains(t, err.Error(), "authorize: token service down")
	assert.Empty(t, srv.Requests())
}

func TestDoBadInput(t *testing.T) {
	c := &Client{}
	_, err := c.Do(context.Background(), nil)
	assert.ErrorIs(t, err, ErrInvalidIntent)
	in := mustIntent(t, "GET", "http://127.0.0.1:1/", "")
	//lint:ignore SA1012 testing the nil-context guard
	_, err = c.Do(nil, in) //nolint:staticcheck
	assert.ErrorContains(t, err, "nil context")
	c.Policy.MaxAttempts = -2
	_, err = c.Do(context.Background(), in)
	assert.ErrorIs(t, err, ErrInvalidPolicy)
	assert.ErrorContains(t, err, "MaxAttempts is negative")
}

func TestDoZeroClient(t *testing.T) {
	srv := newScripted(t, answer(201))
	var c Client
	res, err := c.Do(context.Background(), mustIntent(t, "POST", srv.URL, "x"))
	require.NoError(t, err)
	res.Response.Body.Close()
	assert.Equal(t, Applied, res.Outcome)
}

func TestDoConcurrent(t *testing.T) {
	srv := newScripted(t)
	c, _ := testClient(t, nil)
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Go(func() {
			res, err := c.Do(context.Background(), mustIntent(t, "POST", srv.URL, itoa(i)))
			if assert.NoError(t, err) {
				res.Response.Body.Close()
			}
		})
	}
	wg.Wait()
	assert.Len(t, srv.Requests(), 32)
}

func TestErrorMessage(t *testing.T) {
	e := &Error{Method: "POST", URL: "http://h/pay", Outcome: Unknown, Reason: "not retried: POST without key",
		Attempts: []Attempt{{Class: ClassAmbiguous, Err: io.ErrUnexpectedEOF}}, Err: ErrNoKey}
	assert.Equal(t, "idem: POST http://h/pay: outcome unknown, not retried: POST without key (1 attempt; last: ambiguous: unexpected EOF)", e.Error())
	assert.ErrorIs(t, e, io.ErrUnexpectedEOF)
	e2 := &Error{Method: "GET", URL: "u", Outcome: NotApplied, Attempts: []Attempt{{Class: ClassRejected, Status: 400}, {Class: ClassNotProcessed, Status: 429}}}
	assert.Equal(t, "idem: GET u: outcome not_applied (2 attempts; last: not_processed: 429 Too Many Requests)", e2.Error())
	assert.Equal(t, "idem: GET u: outcome not_applied (0 attempts)", (&Error{Method: "GET", URL: "u", Outcome: NotApplied}).Error())
}

// TestDoAttemptTimeoutSparesTheBody: the attempt timeout bounds the wait for
// headers; a caller still reading a large final body after it is not cut off.
func TestDoAttemptTimeoutSparesTheBody(t *testing.T) {
	big := strings.Repeat("x", 1<<20)
	srv := newScripted(t, step{status: 201, body: big})
	c, clk := testClient(t, nil)
	c.Policy.AttemptTimeout = time.Hour
	res, err := c.Do(context.Background(), mustIntent(t, "POST", srv.URL, "x"))
	require.NoError(t, err)
	defer res.Response.Body.Close()
	require.Equal(t, 1, clk.fireTimers(), "the attempt's timer, past its timeout")
	b, err := io.ReadAll(res.Response.Body)
	require.NoError(t, err)
	assert.Len(t, b, len(big))
}

// TestDoAgainAfterAmbiguous: an Intent keeps no history, but its Client
// remembers the keys it left in doubt (DoubtWindow), so a second Do judges
// its answers as Resume, given the first run's error, does: after an attempt
// in doubt a refusal no longer proves the operation was not applied, and a
// DELETE's 404 is the earlier delete. With the memory off, a second Do is a
// run of its own.
func TestDoAgainAfterAmbiguous(t *testing.T) {
	const off = -1 // DoubtWindow: remember nothing
	tests := []struct {
		name    string
		method  string
		again   step
		resume  bool
		window  time.Duration
		outcome Outcome
	}{
		{"Do: a 400 leaves the first run in doubt", "POST", answer(400), false, 0, Unknown},
		{"Do, memory off: a 400 refuses this run", "POST", answer(400), false, off, NotApplied},
		{"Resume: a 400 leaves the first run in doubt", "POST", answer(400), true, 0, Unknown},
		{"Resume, memory off: a 400 leaves the first run in doubt", "POST", answer(400), true, off, Unknown},
		{"Resume: a keyed 409 is in doubt anyway", "POST", answer(409, "Retry-After", "3600"), true, 0, Unknown},
		{"Do: a DELETE's 404 is the first run's delete", "DELETE", answer(404), false, 0, AlreadyApplied},
		{"Do, memory off: a DELETE's 404 is a refusal", "DELETE", answer(404), false, off, NotApplied},
		{"Resume: a DELETE's 404 is the first run's delete", "DELETE", answer(404), true, 0, AlreadyApplied},
		{"Resume: a replay settles it", "POST", answer(201, "Idempotent-Replayed", "true"), true, 0, Applied},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newScripted(t, hangup, tt.again)
			c, _ := testClient(t, nil)
			c.Policy.MaxAttempts, c.DoubtWindow = 1, tt.window
			in := mustIntent(t, tt.method, srv.URL+"/r/1", "x")
			_, first := c.Do(context.Background(), in)
			require.ErrorIs(t, first, ErrOutcomeUnknown)

			var res *Result
			var err error
			if tt.resume {
				res, err = c.Resume(context.Background(), in, first)
			} else {
				res, err = c.Do(context.Background(), in)
			}
			got := NoOutcome
			if err != nil {
				got = asError(t, err).Outcome
			} else {
				res.Response.Body.Close()
				got = res.Outcome
			}
			assert.Equal(t, tt.outcome, got)
			reqs := srv.Requests()
			require.Len(t, reqs, 2)
			assert.Equal(t, reqs[0].header.Get("Idempotency-Key"), reqs[1].header.Get("Idempotency-Key"), "one key for both runs")
		})
	}
	t.Run("Resume after a NotApplied run is Do", func(t *testing.T) {
		srv := newScripted(t, answer(400))
		c, _ := testClient(t, nil)
		prior := &Error{Outcome: NotApplied}
		res, err := c.Resume(context.Background(), mustIntent(t, "POST", srv.URL, "x"), prior)
		require.NoError(t, err)
		res.Response.Body.Close()
		assert.Equal(t, NotApplied, res.Outcome)
	})
}
