package idem

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// holder is a server whose first request under a key is still in flight
// for hold after the first request reached it, by the fake clock: until
// then it answers 409 (with Retry-After when retryAfter is set), then 201
// from its store, as a replay. A negative hold holds for ever.
type holder struct {
	*httptest.Server
	clk        *fakeClock
	hold       time.Duration
	retryAfter string

	mu    sync.Mutex // guards times and keys
	times []time.Time
	keys  []string
}

func newHolder(t *testing.T, clk *fakeClock, hold time.Duration, retryAfter string) *holder {
	t.Helper()
	h := &holder{clk: clk, hold: hold, retryAfter: retryAfter}
	h.Server = httptest.NewServer(http.HandlerFunc(h.serve))
	t.Cleanup(h.Close)
	return h
}

func (h *holder) serve(w http.ResponseWriter, r *http.Request) {
	now := h.clk.Now()
	h.mu.Lock()
	h.times = append(h.times, now)
	h.keys = append(h.keys, r.Header.Get("Idempotency-Key"))
	first := h.times[0]
	h.mu.Unlock()
	if h.hold < 0 || now.Before(first.Add(h.hold)) {
		if h.retryAfter != "" {
			w.Header().Set("Retry-After", h.retryAfter)
		}
		w.WriteHeader(http.StatusConflict)
		return
	}
	w.Header().Set("Idempotent-Replayed", "true")
	w.WriteHeader(http.StatusCreated)
}

// gaps returns the time between each request and the one before, by the
// server's view of the fake clock.
func (h *holder) gaps() []time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []time.Duration
	for i := 1; i < len(h.times); i++ {
		out = append(out, h.times[i].Sub(h.times[i-1]))
	}
	return out
}

func (h *holder) requests() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.times)
}

func sum(ds []time.Duration) time.Duration {
	var s time.Duration
	for _, d := range ds {
		s += d
	}
	return s
}

// TestInFlightPolled: a keyed 409 without Retry-After is polled with the
// backoff beyond MaxAttempts (4 by default), until the holder finishes 3 s
// later and the next request is answered from its store.
func TestInFlightPolled(t *testing.T) {
	c, clk := testClient(t, nil)
	srv := newHolder(t, clk, 3*time.Second, "")
	res, err := c.Do(context.Background(), mustIntent(t, "POST", srv.URL, "x"))
	require.NoError(t, err, "a key in flight for 3 s is waited for")
	defer res.Response.Body.Close()
	assert.Equal(t, Applied, res.Outcome)
	assert.True(t, res.Replayed)
	want := []time.Duration{200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, 1600 * time.Millisecond}
	assert.Equal(t, want, clk.Sleeps(), "the waits are the backoff's")
	assert.Equal(t, want, srv.gaps())
	assert.Equal(t, []Class{ClassNotProcessed, ClassNotProcessed, ClassNotProcessed, ClassNotProcessed, ClassApplied}, classes(res.Attempts),
		"each poll is in the trail")
	assert.Equal(t, 5, srv.requests())
	for _, k := range srv.keys {
		assert.Equal(t, srv.keys[0], k, "every poll carries the key")
	}
	st := c.Stats()
	assert.Equal(t, uint64(4), st.Conflicts, "each 409 is a conflict")
	assert.Equal(t, DefaultBudgetTokens, st.BudgetTokens, "no poll takes a budget token")
}

// TestInFlightRetryAfter: a keyed 409 with Retry-After: 2 is polled no
// sooner than 2 s apart.
func TestInFlightRetryAfter(t *testing.T) {
	c, clk := testClient(t, nil)
	srv := newHolder(t, clk, 5*time.Second, "2")
	res, err := c.Do(context.Background(), mustIntent(t, "POST", srv.URL, "x"))
	require.NoError(t, err)
	defer res.Response.Body.Close()
	assert.Equal(t, Applied, res.Outcome)
	assert.True(t, res.Replayed)
	gaps := srv.gaps()
	require.Len(t, gaps, 3, "requests at 0, 2, 4 s answered 409, at 6 s 201")
	for i, g := range gaps {
		assert.GreaterOrEqual(t, g, 2*time.Second, "gap %d", i)
	}
	assert.Equal(t, []time.Duration{2 * time.Second, 2 * time.Second, 2 * time.Second}, clk.Sleeps())
}

// TestInFlightWindowEnds: a server answering 409 for ever is polled for
// InFlightWindow from the first 409, the last poll at the window's end,
// then the operation ends Unknown; the polls take no budget token, and
// MaxAttempts: 1 does not stop them.
func TestInFlightWindowEnds(t *testing.T) {
	tests := []struct {
		name     string
		policy   Policy
		window   time.Duration
		requests int
	}{
		// 0.2+0.4+0.8+1.6+3.2+6.4+10 = 22.6 s, then 7.4 s to the window's end.
		{"default window", Policy{}, 30 * time.Second, 9},
		// 0.2+0.4+0.8, then 0.6 s to the window's end.
		{"MaxAttempts 1", Policy{MaxAttempts: 1, InFlightWindow: 2 * time.Second}, 2 * time.Second, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, clk := testClient(t, nil)
			c.Policy, c.Budget = tt.policy, NewBudget(1)
			srv := newHolder(t, clk, -1, "")
			_, err := c.Do(context.Background(), mustIntent(t, "POST", srv.URL, "x"))
			e := asError(t, err)
			assert.Equal(t, Unknown, e.Outcome)
			assert.ErrorIs(t, err, ErrAttemptsExhausted)
			assert.ErrorIs(t, err, ErrOutcomeUnknown)
			assert.Equal(t, "a request under the key was still in flight after "+tt.window.String()+" (InFlightWindow)", e.Reason)
			assert.Equal(t, 409, e.Status)
			assert.Equal(t, tt.window, sum(clk.Sleeps()), "polled to the window's end, not past it")
			assert.Equal(t, tt.requests, srv.requests())
			assert.Len(t, e.Attempts, tt.requests)
			assert.Equal(t, 1, c.Stats().BudgetTokens, "no poll took the budget's one token")
		})
	}
}

// TestInFlightBetweenAttempts: polls do not count against MaxAttempts, the
// other retries do, and the window runs from the operation's first 409,
// not from the latest run of them.
func TestInFlightBetweenAttempts(t *testing.T) {
	srv := newScripted(t, answer(409), answer(503), answer(409), answer(409), answer(503), answer(409), answer(503))
	c, clk := testClient(t, nil)
	c.Policy = Policy{MaxAttempts: 3}
	_, err := c.Do(context.Background(), mustIntent(t, "POST", srv.URL, "x"))
	e := asError(t, err)
	assert.Equal(t, Unknown, e.Outcome)
	assert.ErrorIs(t, err, ErrAttemptsExhausted)
	assert.Equal(t, "attempts exhausted (3 of 3, and 4 polls of the key in flight)", e.Reason)
	assert.Len(t, srv.Requests(), 7)
	assert.Equal(t, []time.Duration{200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, 1600 * time.Millisecond,
		3200 * time.Millisecond, 6400 * time.Millisecond}, clk.Sleeps(), "the backoff grows with every request")

	srv = newScripted(t, answer(409), answer(503), answer(409))
	c, clk = testClient(t, nil)
	c.Policy = Policy{InFlightWindow: 500 * time.Millisecond}
	_, err = c.Do(context.Background(), mustIntent(t, "POST", srv.URL, "x"))
	e = asError(t, err)
	assert.Contains(t, e.Reason, "still in flight after 500ms", "the window counts from the first 409")
	assert.Len(t, srv.Requests(), 3, "0 s: 409, 0.2 s: 503, 0.6 s: 409, past the window")
	assert.Equal(t, []time.Duration{200 * time.Millisecond, 400 * time.Millisecond}, clk.Sleeps())
}

// TestInFlightKeylessConflict: a 409 to a request without a key is a
// rejection, as before: no polling.
func TestInFlightKeylessConflict(t *testing.T) {
	c, clk := testClient(t, nil)
	srv := newHolder(t, clk, -1, "")
	res, err := c.Do(context.Background(), mustIntent(t, "PUT", srv.URL, "x", WithoutKey()))
	require.NoError(t, err)
	res.Response.Body.Close()
	assert.Equal(t, NotApplied, res.Outcome)
	assert.Equal(t, []Class{ClassRejected}, classes(res.Attempts))
	assert.Equal(t, 1, srv.requests())
	assert.Empty(t, clk.Sleeps())
}

// TestInFlightTransport: Transport.RoundTrip polls a keyed request's 409 as
// Client.Do does.
func TestInFlightTransport(t *testing.T) {
	tr, clk := testTransport(t, nil)
	tr.Budget = NewBudget(1)
	srv := newHolder(t, clk, 3*time.Second, "")
	resp, rep := keyedRoundTrip(t, tr, srv.URL)
	assert.Equal(t, http.StatusCreated, resp.StatusCode)
	assert.Equal(t, Applied, rep.Outcome)
	assert.True(t, rep.Replayed)
	assert.Equal(t, 5, srv.requests())
	assert.Equal(t, []time.Duration{200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, 1600 * time.Millisecond}, clk.Sleeps())
	assert.Equal(t, 1, tr.Stats().BudgetTokens)
}

// TestInFlightMaxElapsed: MaxElapsed bounds the polling of a key in flight
// as it bounds attempts.
func TestInFlightMaxElapsed(t *testing.T) {
	c, clk := testClient(t, nil)
	c.Policy = Policy{MaxElapsed: time.Second}
	srv := newHolder(t, clk, -1, "")
	_, err := c.Do(context.Background(), mustIntent(t, "POST", srv.URL, "x"))
	e := asError(t, err)
	assert.Equal(t, Unknown, e.Outcome)
	assert.ErrorIs(t, err, ErrAttemptsExhausted)
	assert.Equal(t, "max elapsed time 1s reached", e.Reason)
	assert.Equal(t, []time.Duration{200 * time.Millisecond, 400 * time.Millisecond}, clk.Sleeps(), "the next, 0.8 s, would start after 1 s")
	assert.Equal(t, 3, srv.requests())
}

// TestInFlightPollsBounded: a policy with waits of 1 ms cannot make the
// polling of a key in flight a flood. Against a server answering 409 for
// ever (with Retry-After: 0 to the Transport), Do and Transport poll no
// faster than minPollInterval and make at most maxPollsPerWindow requests
// in the window, the last at its end, then end Unknown.
func TestInFlightPollsBounded(t *testing.T) {
	fast := Policy{BaseDelay: time.Millisecond, MaxDelay: time.Millisecond}
	long := fast
	long.InFlightWindow = 10 * time.Minute
	for _, tt := range []struct {
		name   string
		policy Policy
		window time.Duration
	}{
		{"default window", fast, 30 * time.Second},
		{"10 min window", long, 10 * time.Minute},
	} {
		check := func(t *testing.T, srv *holder, clk *fakeClock, err error) {
			t.Helper()
			e := asError(t, err)
			assert.Equal(t, Unknown, e.Outcome)
			assert.ErrorIs(t, err, ErrAttemptsExhausted)
			assert.LessOrEqual(t, srv.requests(), 30, "requests in one window")
			assert.GreaterOrEqual(t, slices.Min(srv.gaps()), 100*time.Millisecond, "the shortest gap between requests")
			assert.Equal(t, tt.window, sum(clk.Sleeps()), "polled to the window's end")
		}
		t.Run(tt.name+"/Do", func(t *testing.T) {
			c, clk := testClient(t, nil)
			c.Policy = tt.policy
			srv := newHolder(t, clk, -1, "")
			_, err := c.Do(context.Background(), mustIntent(t, "POST", srv.URL, "x"))
			check(t, srv, clk, err)
		})
		t.Run(tt.name+"/Transport", func(t *testing.T) {
			tr, clk := testTransport(t, nil)
			tr.Policy = tt.policy
			srv := newHolder(t, clk, -1, "0")
			resp, rep := keyedRoundTrip(t, tr, srv.URL)
			assert.Equal(t, http.StatusConflict, resp.StatusCode)
			require.NotNil(t, rep.Err)
			check(t, srv, clk, rep.Err)
		})
	}
}
