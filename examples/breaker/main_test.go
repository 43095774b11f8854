package main

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/queue"
)

func TestRun(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(t.Context(), &out))
	got := out.String()
	for _, want := range []string{
		"pay-1  unknown: 3 × ambiguous (503 Service Unavailable), 1 × never_sent (circuit breaker is open)\n",
		"pay-2  not_applied: 4 × never_sent (circuit breaker is open)\n",
		"pay-3  queued: pending, last attempt never_sent (circuit breaker is open), in doubt false, first sent never\n",
		"pay-3  queued: done, applied\n",
		"pay-1  applied (201 Created)\n",
		"pay-2  applied (201 Created)\n",
		"server: 3 payments applied, each once\n",
	} {
		assert.Contains(t, got, want)
	}
}

// fixture is a failing shop behind a client whose transport is the breaker
// cb over the limiter lim.
type fixture struct {
	shop   *shop
	url    string
	cb     *gobreaker.CircuitBreaker[*http.Response]
	hc     *http.Client
	client *idem.Client
}

func newFixture(t *testing.T, open time.Duration, lim *rate.Limiter) *fixture {
	t.Helper()
	s := newShop()
	s.failing.Store(true)
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	cb := newBreaker(2, open, nil)
	hc := &http.Client{Transport: newTransport(cb, lim, srv.Client().Transport)}
	return &fixture{
		shop: s, url: srv.URL + "/payments", cb: cb, hc: hc,
		client: &idem.Client{
			HTTPClient: hc,
			Policy:     idem.Policy{MaxAttempts: 3, BaseDelay: time.Millisecond, MaxDelay: 2 * time.Millisecond},
		},
	}
}

// trip opens the breaker with two keyless requests the failing shop answers
// 503.
func (f *fixture) trip(t *testing.T) {
	t.Helper()
	for range 2 {
		resp, err := f.hc.Post(f.url, "text/plain", strings.NewReader("x"))
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	}
	require.Equal(t, gobreaker.StateOpen, f.cb.State())
}

func (f *fixture) payment(t *testing.T) (*idem.Intent, string) {
	t.Helper()
	in, err := newPayment(f.url, "p")
	require.NoError(t, err)
	return in, in.Key()
}

// noLimit is a limiter that never waits.
func noLimit() *rate.Limiter { return rate.NewLimiter(rate.Inf, 1) }

// TestOpenBreakerIsNeverSent: a keyed POST that only an open breaker
// answered ends NotApplied, every attempt never sent, with the breaker's
// error, and nothing reached the server.
func TestOpenBreakerIsNeverSent(t *testing.T) {
	f := newFixture(t, time.Hour, noLimit())
	f.trip(t)
	before := f.shop.arrived("*")
	in, key := f.payment(t)

	res, err := f.client.Do(t.Context(), in)
	require.Nil(t, res)
	var ie *idem.Error
	require.ErrorAs(t, err, &ie)
	assert.Equal(t, idem.NotApplied, ie.Outcome, "outcome")
	assert.ErrorIs(t, err, idem.ErrNotApplied)
	assert.ErrorIs(t, err, idem.ErrAttemptsExhausted)
	assert.ErrorIs(t, err, gobreaker.ErrOpenState)
	assert.NotErrorIs(t, err, idem.ErrOutcomeUnknown)
	require.Len(t, ie.Attempts, 3, "a never-sent attempt is retried")
	for i, a := range ie.Attempts {
		assert.Equal(t, idem.ClassNeverSent, a.Class, "attempt %d class", i+1)
		assert.Equal(t, idem.Wire{}, a.Wire, "attempt %d wire", i+1)
	}
	assert.Equal(t, before, f.shop.arrived("*"), "requests at the server")
	assert.Zero(t, f.shop.arrived(key), "requests under the key")
}

// TestHalfOpenBreakerLetsOneThrough: once the breaker half-opens, the
// intent's next attempt reaches the recovered server and closes it.
func TestHalfOpenBreakerLetsOneThrough(t *testing.T) {
	f := newFixture(t, 20*time.Millisecond, noLimit())
	f.trip(t)
	f.shop.failing.Store(false)
	require.Eventually(t, func() bool { return f.cb.State() == gobreaker.StateHalfOpen }, 5*time.Second, 5*time.Millisecond)
	in, key := f.payment(t)

	res, err := f.client.Do(t.Context(), in)
	require.NoError(t, err)
	res.Response.Body.Close()
	assert.Equal(t, idem.Applied, res.Outcome)
	assert.Equal(t, gobreaker.StateClosed, f.cb.State())
	assert.Equal(t, 1, f.shop.appliedFor(key))
}

// TestRateLimitRefusalIsNeverSent: a limiter that cannot grant a token
// before the deadline refuses before anything is sent, and the breaker
// above it does not count the refusal.
func TestRateLimitRefusalIsNeverSent(t *testing.T) {
	lim := rate.NewLimiter(rate.Every(time.Hour), 1)
	f := newFixture(t, time.Hour, lim)
	f.shop.failing.Store(false)
	first, _ := f.payment(t)
	res, err := f.client.Do(t.Context(), first) // takes the one token
	require.NoError(t, err)
	res.Response.Body.Close()
	require.Equal(t, idem.Applied, res.Outcome)
	before := f.shop.arrived("*")

	in, key := f.payment(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	res, err = f.client.Do(ctx, in)
	require.Nil(t, res)
	var ie *idem.Error
	require.ErrorAs(t, err, &ie)
	assert.Equal(t, idem.NotApplied, ie.Outcome, "outcome")
	assert.ErrorIs(t, err, errRateLimited)
	require.NotEmpty(t, ie.Attempts)
	for i, a := range ie.Attempts {
		assert.Equal(t, idem.ClassNeverSent, a.Class, "attempt %d class", i+1)
		assert.Equal(t, idem.Wire{}, a.Wire, "attempt %d wire", i+1)
	}
	assert.Equal(t, before, f.shop.arrived("*"), "requests at the server")
	assert.Zero(t, f.shop.arrived(key), "requests under the key")
	assert.Equal(t, gobreaker.StateClosed, f.cb.State())
	assert.Zero(t, f.cb.Counts().TotalFailures, "limiter refusals counted as failures")
}

// TestRateLimitWaits: a limiter that can grant a token within the deadline
// delays the attempt rather than refusing it.
func TestRateLimitWaits(t *testing.T) {
	lim := rate.NewLimiter(rate.Every(20*time.Millisecond), 1)
	f := newFixture(t, time.Hour, lim)
	f.shop.failing.Store(false)
	for i := range 3 {
		in, _ := f.payment(t)
		res, err := f.client.Do(t.Context(), in)
		require.NoError(t, err, "payment %d", i)
		res.Response.Body.Close()
		assert.Equal(t, idem.Applied, res.Outcome, "payment %d", i)
		require.Len(t, res.Attempts, 1, "payment %d", i)
	}
}

// TestQueueWaitsOutOpenBreaker: a record the open breaker refused stays
// pending, not in doubt, its key's retention not started, while the drainer
// treats the refusals as an offline network; once the breaker half-opens
// it is applied, once.
func TestQueueWaitsOutOpenBreaker(t *testing.T) {
	f := newFixture(t, time.Second, noLimit())
	events := make(chan queue.Event, 64)
	q, err := queue.Open(filepath.Join(t.TempDir(), "q.db"), queue.Options{
		Client: f.client,
		Policy: idem.Policy{BaseDelay: time.Millisecond, MaxDelay: 2 * time.Millisecond, AttemptTimeout: 5 * time.Second},
		Notify: func(e queue.Event) {
			select {
			case events <- e:
			default:
			}
		},
	})
	require.NoError(t, err)
	defer q.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	go q.Run(ctx)

	// The breaker's open time runs from here: the record must meet it open.
	f.trip(t)
	f.shop.failing.Store(false) // recovered, but the breaker does not know yet
	in, key := f.payment(t)
	id, err := q.Enqueue(ctx, in)
	require.NoError(t, err)
	waitEvent(t, ctx, events, queue.EventOffline)

	// Offline, the drainer sends nothing for a second, or until Wake.
	var rec *queue.Record
	require.Eventually(t, func() bool {
		rec, err = q.Get(ctx, id)
		require.NoError(t, err)
		return rec.State == queue.Pending
	}, 5*time.Second, time.Millisecond)
	assert.Equal(t, idem.ClassNeverSent, rec.LastClass, "last class")
	assert.Contains(t, rec.LastError, gobreaker.ErrOpenState.Error(), "last error")
	assert.False(t, rec.InDoubt, "in doubt")
	assert.Equal(t, idem.NoOutcome, rec.Outcome, "outcome")
	assert.True(t, rec.FirstSentAt.IsZero(), "first sent at %v", rec.FirstSentAt)
	// The two refusals before the third made the queue offline count; from
	// the third on, the record is spared: offline is the device's state.
	assert.Equal(t, 2, rec.NumAttempts, "attempts")
	assert.Zero(t, f.shop.arrived(key), "requests under the key")

	// What tells the application the breaker may let a request through is
	// the breaker: on half-open, Wake sends the probe at once.
	require.Eventually(t, func() bool { return f.cb.State() != gobreaker.StateOpen }, 5*time.Second, 5*time.Millisecond)
	q.Wake()
	rec, err = q.Wait(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, queue.Done, rec.State, "state")
	assert.Equal(t, idem.Applied, rec.Outcome, "outcome")
	assert.False(t, rec.InDoubt, "in doubt")
	assert.Equal(t, 1, f.shop.appliedFor(key), "payments applied")
	assert.Equal(t, 1, f.shop.arrived(key), "requests under the key")
	assert.Equal(t, gobreaker.StateClosed, f.cb.State())
}

func waitEvent(t *testing.T, ctx context.Context, events <-chan queue.Event, kind queue.EventKind) {
	t.Helper()
	for {
		select {
		case e := <-events:
			if e.Kind == kind {
				return
			}
		case <-ctx.Done():
			t.Fatalf("no %s event: %v", kind, errors.Unwrap(ctx.Err()))
		}
	}
}
