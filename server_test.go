package idem

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
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

// heldServer is an idemtest.Wrapper whose handler holds the first request
// that claims a key until the test releases it.
type heldServer struct {
	*httptest.Server
	wrapper *idemtest.Wrapper
}

// heldKeyServer starts a heldServer. claimed is closed once a request holds
// a claim (its handler runs); release lets every handler return, and runs
// at the test's end if the test has not called it. The claim's lease is
// judged by a clock that never moves, so no slowness lets another request
// take it over.
func heldKeyServer(t *testing.T) (srv heldServer, claimed <-chan struct{}, release func()) {
	t.Helper()
	held, let := make(chan struct{}), make(chan struct{})
	var heldOnce, letOnce sync.Once
	epoch := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	srv.wrapper = idemtest.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		heldOnce.Do(func() { close(held) })
		<-let
		w.WriteHeader(http.StatusCreated)
	}), idemtest.Options{RequireKey: true, Now: func() time.Time { return epoch }})
	srv.Server = httptest.NewServer(srv.wrapper)
	t.Cleanup(srv.Close)
	release = func() { letOnce.Do(func() { close(let) }) }
	t.Cleanup(release) // before srv.Close, which waits for the handler
	return srv, held, release
}

// fastClient retries quickly on the real clock; the test server's faults
// take real time. Its attempt timeout only ends a stall: a test that needs
// attempts to time out sets its own.
func fastClient(t *testing.T, s *idemtest.Server) *Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = s.DialContext
	t.Cleanup(tr.CloseIdleConnections)
	return &Client{
		HTTPClient: &http.Client{Transport: tr},
		Policy:     Policy{MaxAttempts: 12, BaseDelay: 5 * ms, MaxDelay: 50 * ms, AttemptTimeout: 30 * time.Second},
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

// TestServerDelayGives409ThenReplay: an attempt that times out while the
// server works on its request leaves the key claimed; the retries meet 409,
// are polled, and get the stored answer once the request completes. The
// test fires the attempt's timer once the server holds the request, and the
// server completes it on the first 409, so the trail is the same on a slow
// machine as on a fast one.
func TestServerDelayGives409ThenReplay(t *testing.T) {
	srv, claimed, release := heldKeyServer(t)
	c, clk := testClient(t, srv.Client())
	// Fired by the test; polls wait on the fake clock, whose window allows
	// tens of thousands of them while the held request completes.
	c.Policy = Policy{AttemptTimeout: time.Hour, BaseDelay: 5 * ms, MaxDelay: 50 * ms, InFlightWindow: time.Hour}
	c.OnAttempt = func(_ context.Context, a AttemptInfo) {
		if a.Attempt.Status == http.StatusConflict {
			release()
		}
	}
	in := mustIntent(t, "POST", srv.URL+"/payments", `{"p":1}`)
	done := goDo(c, in)
	await(t, claimed, "the server holding the request")
	clk.fireTimers()
	got := recv(t, done, "the answer")
	require.NoError(t, got.err)
	res := got.res
	defer res.Response.Body.Close()
	cl := classes(res.Attempts)
	assert.Equal(t, ClassAmbiguous, cl[0], "the first attempt timed out")
	assert.Contains(t, cl, ClassNotProcessed, "retries meet the claim: 409")
	assert.Equal(t, ClassApplied, cl[len(cl)-1])
	assert.True(t, res.Replayed)
	assert.Equal(t, 1, srv.wrapper.EffectsForKey(in.Key()))
	assert.GreaterOrEqual(t, srv.wrapper.Stats().Conflicts, 1)
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
// Then the application does what the outcomes tell it to (Resume what is not
// applied, under its key) until every payment is applied once.
//
// The first run's 50 ms attempt timeout, below the server's 150 ms delay,
// puts attempts in doubt; how many depends on the machine's speed (on a
// busy one most intents end Unknown), so no count of the first run is a
// verdict. The rounds of Resume that follow have no attempt timeout: every
// request is answered, so they settle every payment however slow the
// machine is.
func TestServerExactlyOnceUnderRandomFaults(t *testing.T) {
	const n, rounds = 150, 5
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

	payments := make([]payment, n)
	for i := range payments {
		body := fmt.Sprintf(`{"payment":"p-%d"}`, i)
		payments[i] = payment{in: mustIntent(t, "POST", s.URL()+"/payments", body), body: []byte(body)}
	}
	todo := payAll(payments, func(ctx context.Context, in *Intent, _ error) (*Result, error) { return c.Do(ctx, in) })
	checkTruth(t, s, payments)
	t.Logf("first run: %d of %d payments not applied", len(todo), n)

	patient := fastClient(t, s)
	patient.Policy.AttemptTimeout = 0 // the server answers every request
	patient.Budget = NewBudget(0)     // a NotApplied prior makes Resume pay as Do does
	for round := 0; round < rounds && len(todo) > 0; round++ {
		todo = payAll(todo, patient.Resume)
		checkTruth(t, s, todo)
	}
	assert.Empty(t, todo, "payments still not applied after %d rounds of Resume", rounds)
	for i, p := range payments {
		assert.Equal(t, 1, s.EffectsForPayload(p.body), "payment %d applied once", i)
	}
	st := s.Stats()
	assert.Greater(t, st.Replays, 0, "faults must have been exercised")
	assert.Greater(t, st.Refused, 0)
}

// payment is one intent of TestServerExactlyOnceUnderRandomFaults and what
// the client said of its latest run.
type payment struct {
	in   *Intent
	body []byte
	out  Outcome
	err  error // the latest run's; nil when it ended with a Result
}

// payAll runs every payment through send (Do, or Resume with the payment's
// latest error as prior), 16 at a time, and returns those not applied.
func payAll(ps []payment, send func(ctx context.Context, in *Intent, prior error) (*Result, error)) []payment {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range ps {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			p := &ps[i]
			res, err := send(context.Background(), p.in, p.err)
			p.err, p.out = err, NoOutcome // checkTruth reports an error that is no *Error
			var e *Error
			switch {
			case err == nil:
				res.Response.Body.Close()
				p.out = res.Outcome
			case errors.As(err, &e):
				p.out = e.Outcome
			}
		})
	}
	wg.Wait()
	var left []payment
	for _, p := range ps {
		if p.out != Applied {
			left = append(left, p)
		}
	}
	return left
}

// checkTruth compares what the client said of each payment's latest run
// with the server's count of its effects.
func checkTruth(t *testing.T, s *idemtest.Server, ps []payment) {
	t.Helper()
	for _, p := range ps {
		var e *Error
		if p.err != nil && !errors.As(p.err, &e) {
			t.Errorf("%s: error %v is not an *idem.Error", p.body, p.err)
			continue
		}
		effects := s.EffectsForPayload(p.body)
		assert.LessOrEqual(t, effects, 1, "%s applied %d times", p.body, effects)
		switch p.out {
		case Applied:
			assert.Equal(t, 1, effects, "%s reported applied", p.body)
		case NotApplied:
			assert.Equal(t, 0, effects, "%s reported not applied", p.body)
		}
	}
}
