package idem

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem/idemtest"
)

// These tests run the Client against idemtest, a server side of
// the Idempotency-Key protocol written from the draft, and count effects
// there: the server, not the client, says whether an operation applied once.

// firstTime injects f into the first request of each key.
func firstTime(f idemtest.Fault) func(*http.Request, string, int) idemtest.Fault {
	return func(_ *http.Request, _ string, seen int) idemtest.Fault {
		if seen == 0 {
			return f
		}
		return idemtest.FaultNone
	}
}

func startServer(t *testing.T, opts idemtest.Options) *idemtest.Server {
	t.Helper()
	s := idemtest.New(opts)
	require.NoError(t, s.Start())
	t.Cleanup(s.Close)
	return s
}

// fastClient retries quickly on the real clock; the test server's faults
// take real time.
func fastClient(t *testing.T, s *idemtest.Server) *Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = s.DialContext
	t.Cleanup(tr.CloseIdleConnections)
	return &Client{
		HTTPClient: &http.Client{Transport: tr},
		Policy:     Policy{MaxAttempts: 12, BaseDelay: 5 * ms, MaxDelay: 50 * ms, AttemptTimeout: time.Second},
	}
}

func TestServerFaults(t *testing.T) {
	tests := []struct {
		fault    idemtest.Fault
		classes  []Class
		replayed bool
	}{
		{idemtest.FaultNone, []Class{ClassApplied}, false},
		{idemtest.FaultCommitThenDrop, []Class{ClassAmbiguous, ClassApplied}, true},
		{idemtest.FaultCloseBeforeRead, []Class{ClassAmbiguous, ClassApplied}, false},
		{idemtest.Fault500AfterEffect, []Class{ClassAmbiguous, ClassApplied}, true},
		{idemtest.Fault503, []Class{ClassAmbiguous, ClassApplied}, false},
		{idemtest.Fault429, []Class{ClassNotProcessed, ClassApplied}, false},
	}
	for _, tt := range tests {
		t.Run(tt.fault.String(), func(t *testing.T) {
			t.Parallel()
			s := startServer(t, idemtest.Options{RequireKey: true, Faults: firstTime(tt.fault), RetryAfter: 10 * ms})
			c := fastClient(t, s)
			body := []byte(`{"payment":"` + tt.fault.String() + `"}`)
			in := mustIntent(t, "POST", s.URL()+"/payments", string(body))
			res, err := c.Do(context.Background(), in)
			require.NoError(t, err)
			defer res.Response.Body.Close()
			assert.Equal(t, Applied, res.Outcome)
			assert.Equal(t, 201, res.Response.StatusCode)
			assert.Equal(t, tt.replayed, res.Replayed)
			assert.Equal(t, tt.classes, classes(res.Attempts))
			assert.Equal(t, 1, s.EffectsForKey(in.Key()), "exactly one effect")
			assert.Equal(t, 1, s.EffectsForPayload(body))
		})
	}
}

func TestServerDelayGives409ThenReplay(t *testing.T) {
	s := startServer(t, idemtest.Options{Faults: firstTime(idemtest.FaultDelay), Delay: 300 * ms})
	c := fastClient(t, s)
	c.Policy.AttemptTimeout = 50 * ms
	c.Policy.MaxAttempts = 40
	in := mustIntent(t, "POST", s.URL()+"/payments", `{"p":1}`)
	res, err := c.Do(context.Background(), in)
	require.NoError(t, err)
	defer res.Response.Body.Close()
	cl := classes(res.Attempts)
	assert.Equal(t, ClassAmbiguous, cl[0], "the first attempt timed out")
	assert.Contains(t, cl, ClassNotProcessed, "retries meet the claim: 409")
	assert.Equal(t, ClassApplied, cl[len(cl)-1])
	assert.True(t, res.Replayed)
	assert.Equal(t, 1, s.EffectsForKey(in.Key()))
	assert.GreaterOrEqual(t, s.Stats().Conflicts, 1)
}

func TestServerRefusedDial(t *testing.T) {
	var mu sync.Mutex
	refusals := 2
	s := startServer(t, idemtest.Options{RefuseDial: func() bool {
		mu.Lock()
		defer mu.Unlock()
		refusals--
		return refusals >= 0
	}})
	c := fastClient(t, s)
	in := mustIntent(t, "POST", s.URL()+"/payments", "x", WithoutKey())
	res, err := c.Do(context.Background(), in)
	require.NoError(t, err)
	res.Response.Body.Close()
	assert.Equal(t, []Class{ClassNeverSent, ClassNeverSent, ClassApplied}, classes(res.Attempts))
	assert.Equal(t, 1, s.TotalEffects())
}

func TestServerDown(t *testing.T) {
	s := startServer(t, idemtest.Options{})
	s.SetDown(true)
	c := fastClient(t, s)
	in := mustIntent(t, "POST", s.URL()+"/payments", "x")
	_, err := c.Do(context.Background(), in)
	require.ErrorIs(t, err, ErrNotApplied, "an offline server never saw it")
	assert.ErrorIs(t, err, ErrAttemptsExhausted)
	assert.Equal(t, 0, s.Requests())
}

func TestServerKeyReused(t *testing.T) {
	s := startServer(t, idemtest.Options{})
	c := fastClient(t, s)
	a := mustIntent(t, "POST", s.URL()+"/payments", `{"amount":1}`, WithKey("shared"))
	b := mustIntent(t, "POST", s.URL()+"/payments", `{"amount":2}`, WithKey("shared"))
	res, err := c.Do(context.Background(), a)
	require.NoError(t, err)
	res.Response.Body.Close()
	_, err = c.Do(context.Background(), b)
	require.ErrorIs(t, err, ErrKeyReused)
	assert.ErrorIs(t, err, ErrNotApplied)
	assert.Equal(t, 422, asError(t, err).Status)
	assert.Equal(t, 1, s.TotalEffects())
}

func TestServerKeyRequired(t *testing.T) {
	s := startServer(t, idemtest.Options{RequireKey: true})
	c := fastClient(t, s)
	res, err := c.Do(context.Background(), mustIntent(t, "POST", s.URL()+"/payments", "x", WithoutKey()))
	require.NoError(t, err)
	defer res.Response.Body.Close()
	assert.Equal(t, NotApplied, res.Outcome)
	assert.Equal(t, 400, res.Response.StatusCode)
	b, _ := io.ReadAll(res.Response.Body)
	assert.Contains(t, string(b), "idempotency key required")
}

func TestServerSFStringKey(t *testing.T) {
	s := startServer(t, idemtest.Options{SFStringOnly: true, Faults: firstTime(idemtest.FaultCommitThenDrop)})
	c := fastClient(t, s)
	c.KeySFString = true
	in := mustIntent(t, "POST", s.URL()+"/payments", "x")
	res, err := c.Do(context.Background(), in)
	require.NoError(t, err)
	res.Response.Body.Close()
	assert.True(t, res.Replayed, "the server must read the sf-string as the same key")
	assert.Equal(t, 1, s.EffectsForKey(in.Key()))
}

func TestServerDeleteAlreadyApplied(t *testing.T) {
	var mu sync.Mutex
	deleteFaulted := false
	s := startServer(t, idemtest.Options{Faults: func(r *http.Request, _ string, _ int) idemtest.Fault {
		mu.Lock()
		defer mu.Unlock()
		if r.Method == "DELETE" && !deleteFaulted {
			deleteFaulted = true
			return idemtest.FaultCommitThenDrop
		}
		return idemtest.FaultNone
	}})
	c := fastClient(t, s)
	put := mustIntent(t, "PUT", s.URL()+"/resources/r1", `{"v":1}`)
	res, err := c.Do(context.Background(), put)
	require.NoError(t, err)
	res.Response.Body.Close()

	del := mustIntent(t, "DELETE", s.URL()+"/resources/r1", "")
	res, err = c.Do(context.Background(), del)
	require.NoError(t, err)
	res.Response.Body.Close()
	assert.Equal(t, AlreadyApplied, res.Outcome)
	assert.Equal(t, []Class{ClassAmbiguous, ClassAlreadyApplied}, classes(res.Attempts))
	assert.Equal(t, 404, res.Response.StatusCode)
	assert.Equal(t, 2, s.TotalEffects(), "one PUT and one DELETE")
}

// TestServerExactlyOnceUnderRandomFaults sends many keyed payments through
// every fault at once and checks what the client said against what the
// server did: no duplicate ever, and no outcome that contradicts the server.
func TestServerExactlyOnceUnderRandomFaults(t *testing.T) {
	const n = 150
	s := startServer(t, idemtest.Options{
		RequireKey: true,
		Delay:      150 * ms,
		RetryAfter: 10 * ms,
		Faults: idemtest.RandomFaults(7, map[idemtest.Fault]float64{
			idemtest.FaultCommitThenDrop:  0.10,
			idemtest.FaultCloseBeforeRead: 0.05,
			idemtest.FaultDelay:           0.05,
			idemtest.Fault503:             0.05,
			idemtest.Fault500AfterEffect:  0.05,
			idemtest.Fault429:             0.05,
		}),
		RefuseDial: idemtest.RandomRefusals(7, 0.2),
	})
	c := fastClient(t, s)
	c.Policy.AttemptTimeout = 50 * ms

	type outcome struct {
		body []byte
		out  Outcome
	}
	results := make([]outcome, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			body := []byte(fmt.Sprintf(`{"payment":"p-%d"}`, i))
			in := mustIntent(t, "POST", s.URL()+"/payments", string(body))
			res, err := c.Do(context.Background(), in)
			results[i] = outcome{body: body}
			switch {
			case err == nil:
				res.Response.Body.Close()
				results[i].out = res.Outcome
			default:
				var e *Error
				require.True(t, errors.As(err, &e), "error %v", err)
				results[i].out = e.Outcome
			}
		})
	}
	wg.Wait()
	applied := 0
	for i, r := range results {
		effects := s.EffectsForPayload(r.body)
		assert.LessOrEqual(t, effects, 1, "intent %d applied %d times", i, effects)
		switch r.out {
		case Applied:
			applied++
			assert.Equal(t, 1, effects, "intent %d reported applied", i)
		case NotApplied:
			assert.Equal(t, 0, effects, "intent %d reported not applied", i)
		}
	}
	assert.Greater(t, applied, n*9/10, "most intents get through")
	st := s.Stats()
	assert.Greater(t, st.Replays, 0, "faults must have been exercised")
	assert.Greater(t, st.Refused, 0)
}
