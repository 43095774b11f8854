package idem

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem/idemtest"
)

// These tests pin the outcome contract where a server or a setup could make
// idem say "not applied" of a write that happened, or send a keyed write
// twice. Each failed on the code before the fix it names.

// TestKeyed409IsNeverNotApplied: a 409 under a key says that a request with
// that key is in flight. Whoever sent it (an earlier attempt, a replica, a
// restarted process sharing a supplied or derived key), it may still apply:
// the outcome is Unknown, never NotApplied, whether the 409 came first or
// after retries, and whatever ended the polling (Policy.InFlightWindow).
//
// The key's holder is a request the server holds until the test lets it go,
// with a lease on a clock that never moves: however slow the machine, every
// request under the key meets the claim, and the context ends on a signal
// (the first attempt), not on a deadline the polling could outrun.
func TestKeyed409IsNeverNotApplied(t *testing.T) {
	ends := []struct {
		name  string
		setup func(c *Client, cancel context.CancelFunc)
		cause error
	}{
		{"the window ends", func(c *Client, _ context.CancelFunc) { c.Policy.InFlightWindow = 40 * ms }, ErrAttemptsExhausted},
		{"first attempt only", func(c *Client, _ context.CancelFunc) { c.Policy.MaxAttempts, c.Policy.InFlightWindow = 1, 40*ms }, ErrAttemptsExhausted},
		{"a budget of one", func(c *Client, _ context.CancelFunc) { c.Budget, c.Policy.InFlightWindow = NewBudget(1), 40*ms }, ErrAttemptsExhausted},
		{"context ends", func(c *Client, cancel context.CancelFunc) {
			c.Policy.MaxAttempts = 100
			c.OnAttempt = func(context.Context, AttemptInfo) { cancel() }
		}, context.Canceled},
	}
	for _, tt := range ends {
		t.Run(tt.name, func(t *testing.T) {
			srv, claimed, release := heldKeyServer(t)
			key := DeriveKey("order-7", "charge")
			body := `{"amount":100}`

			// The first holder of the key: another replica whose request
			// the server is still working on.
			first := &Client{HTTPClient: srv.Client(), Policy: Policy{MaxAttempts: 1}}
			firstDone := make(chan error, 1)
			go func() {
				res, err := first.Do(context.Background(), mustIntent(t, "POST", srv.URL+"/payments", body, WithKey(key)))
				if err == nil {
					res.Response.Body.Close()
				}
				firstDone <- err
			}()
			await(t, claimed, "the first request's claim")

			// A second intent under the same key, with no ambiguous attempt of
			// its own, meets 409s.
			c := &Client{HTTPClient: srv.Client(), Policy: Policy{MaxAttempts: 12, BaseDelay: 5 * ms, MaxDelay: 50 * ms}}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			tt.setup(c, cancel)
			_, err := c.Do(ctx, mustIntent(t, "POST", srv.URL+"/payments", body, WithKey(key)))
			require.Error(t, err)
			e := asError(t, err)
			require.NotEmpty(t, e.Attempts)
			assert.Equal(t, http.StatusConflict, e.Attempts[0].Status, "the key's holder answers 409")
			assert.ErrorIs(t, err, tt.cause)
			assert.ErrorIs(t, err, ErrOutcomeUnknown)
			assert.NotErrorIs(t, err, ErrNotApplied, "a 409 under our key is not a refusal")

			// And indeed the key's request applied.
			release()
			require.NoError(t, recv(t, firstDone, "the first request's answer"))
			assert.Equal(t, 1, srv.wrapper.EffectsForKey(key))
		})
	}
}

// TestResendByNetHTTPIsInDoubt: net/http resends a keyed request on a fresh
// connection when a reused one fails after the headers went out. The first
// send may have been processed, so a later 4xx in the same attempt cannot
// mean NotApplied.
func TestResendByNetHTTPIsInDoubt(t *testing.T) {
	srv := newScripted(t, answer(200), hangup, answer(400))
	c, _ := testClient(t, nil)
	res, err := c.Do(context.Background(), mustIntent(t, "GET", srv.URL+"/warm", ""))
	require.NoError(t, err) // leaves an idle connection for the POST to reuse
	res.Response.Body.Close()

	_, err = c.Do(context.Background(), mustIntent(t, "POST", srv.URL+"/pay", "x"))
	require.ErrorIs(t, err, ErrOutcomeUnknown)
	assert.NotErrorIs(t, err, ErrNotApplied)
	e := asError(t, err)
	require.Len(t, e.Attempts, 1, "one attempt of idem's; net/http sent it twice")
	w := e.Attempts[0].Wire
	assert.Equal(t, 2, w.Conns)
	assert.True(t, w.Resent)
	reqs := srv.Requests()
	require.Len(t, reqs, 3)
	assert.Equal(t, reqs[1].key, reqs[2].key, "net/http resent it under the same key")
}

// TestRedirectJudgedByOwnStatus: net/http follows a 301, 302 or 303 after a
// POST with a GET. The POST's answer is the redirect, not the GET's status.
func TestRedirectJudgedByOwnStatus(t *testing.T) {
	tests := []struct {
		code    int
		outcome Outcome
	}{
		{http.StatusSeeOther, Applied},
		{http.StatusFound, Unknown},
		{http.StatusMovedPermanently, Unknown},
	}
	for _, tt := range tests {
		t.Run(http.StatusText(tt.code), func(t *testing.T) {
			var posts atomic.Int32
			var mux http.ServeMux
			mux.HandleFunc("POST /orders", func(w http.ResponseWriter, r *http.Request) {
				posts.Add(1) // the order is made...
				http.Redirect(w, r, "/orders/1", tt.code)
			})
			mux.HandleFunc("GET /orders/1", func(w http.ResponseWriter, r *http.Request) {
				http.Error(w, "sign in to see orders", http.StatusUnauthorized) // ... and its page needs a login
			})
			srv := httptest.NewServer(&mux)
			defer srv.Close()

			c, _ := testClient(t, nil)
			res, err := c.Do(context.Background(), mustIntent(t, "POST", srv.URL+"/orders", "x"))
			assert.Equal(t, int32(1), posts.Load(), "sent once")
			if tt.outcome == Applied {
				require.NoError(t, err)
				defer res.Response.Body.Close()
				assert.Equal(t, Applied, res.Outcome)
				assert.Equal(t, http.StatusUnauthorized, res.Response.StatusCode, "the caller gets the followed response")
				assert.Equal(t, tt.code, res.Attempts[0].Status, "the attempt records the POST's own answer")
				return
			}
			require.ErrorIs(t, err, ErrOutcomeUnknown)
			assert.ErrorIs(t, err, ErrRedirected)
			assert.Equal(t, tt.code, asError(t, err).Status)
		})
	}
}

// TestErrorsThatWaitingCannotCure: a certificate that does not verify or a
// request net/http refuses is not "never sent, try later": one attempt, then
// NotApplied with ErrInvalidRequest.
func TestErrorsThatWaitingCannotCure(t *testing.T) {
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer tlsSrv.Close()
	plain := newScripted(t)

	tests := []struct {
		name      string
		url       string
		authorize func(context.Context, *http.Request) error
		attempts  int // what the trail holds
	}{
		{"certificate not trusted", tlsSrv.URL, nil, 1},
		{"CR LF from Authorize", plain.URL, func(_ context.Context, r *http.Request) error {
			r.Header.Set("Authorization", "Bearer t\r\nX-Evil: 1")
			return nil
		}, 0},
		{"hop-by-hop header from Authorize", plain.URL, func(_ context.Context, r *http.Request) error {
			r.Header.Set("Upgrade", "h2c")
			return nil
		}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, clk := testClient(t, nil)
			c.Authorize = tt.authorize
			_, err := c.Do(context.Background(), mustIntent(t, "POST", tt.url, "x"))
			require.ErrorIs(t, err, ErrInvalidRequest)
			assert.ErrorIs(t, err, ErrNotApplied)
			assert.Len(t, asError(t, err).Attempts, tt.attempts)
			assert.Empty(t, clk.Sleeps(), "no wait: waiting would not help")
			assert.Empty(t, plain.Requests())
		})
	}

	t.Run("certificate error type reaches the caller", func(t *testing.T) {
		c, _ := testClient(t, nil)
		_, err := c.Do(context.Background(), mustIntent(t, "GET", tlsSrv.URL, ""))
		var verr *tls.CertificateVerificationError
		require.ErrorAs(t, err, &verr)
		var unknown x509.UnknownAuthorityError
		assert.ErrorAs(t, err, &unknown)
	})

	t.Run("Transport, invalid port", func(t *testing.T) {
		tr, clk := testTransport(t, nil)
		req, err := http.NewRequest("PUT", "http://127.0.0.1:99999/x", nil)
		require.NoError(t, err)
		_, err = tr.RoundTrip(req)
		require.ErrorIs(t, err, ErrInvalidRequest)
		assert.ErrorIs(t, err, ErrNotApplied)
		assert.Empty(t, clk.Sleeps())
	})

	t.Run("Transport, CR in a header value", func(t *testing.T) {
		tr, _ := testTransport(t, nil)
		req, err := http.NewRequest("GET", plain.URL, nil)
		require.NoError(t, err)
		req.Header["X-Trace"] = []string{"a\rb"}
		_, err = tr.RoundTrip(req)
		require.ErrorIs(t, err, ErrInvalidRequest)
		assert.Empty(t, plain.Requests())
	})
}

// TestBudgetInTotalOutage: with every dial refused, 200 concurrent intents
// cost fewer than 1.2 dials each: the budget stops retries after its reserve.
func TestBudgetInTotalOutage(t *testing.T) {
	const n = 200
	s := startServer(t, idemtest.Options{RefuseDial: func() bool { return true }})
	var dials atomic.Int64
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return s.DialContext(ctx, network, addr)
	}
	t.Cleanup(tr.CloseIdleConnections)
	c := &Client{HTTPClient: &http.Client{Transport: tr}, Policy: Policy{BaseDelay: ms, MaxDelay: 5 * ms}}

	var wg sync.WaitGroup
	var notApplied atomic.Int32
	for range n {
		wg.Go(func() {
			_, err := c.Do(context.Background(), mustIntent(t, "POST", s.URL()+"/payments", "x"))
			if errors.Is(err, ErrNotApplied) {
				notApplied.Add(1)
			}
		})
	}
	wg.Wait()
	perIntent := float64(dials.Load()) / n
	t.Logf("total outage: %d dials for %d intents, %.3f per intent (budget %d)", dials.Load(), n, perIntent, DefaultBudgetTokens)
	assert.Less(t, perIntent, 1.2)
	assert.Equal(t, int32(n), notApplied.Load(), "refused dials: every intent is NotApplied")
	assert.Positive(t, c.Stats().BudgetRefusals)
}

// TestBudgetUnderRandomFaults: with a quarter of the attempts failing, 300
// intents at concurrency 16 never meet a refusal of the budget.
func TestBudgetUnderRandomFaults(t *testing.T) {
	const n, workers = 300, 16
	s := startServer(t, idemtest.Options{
		RequireKey: true,
		Faults: idemtest.RandomFaults(11, map[idemtest.Fault]float64{
			idemtest.FaultCommitThenDrop:  0.06,
			idemtest.FaultCloseBeforeRead: 0.06,
			idemtest.Fault503:             0.05,
			idemtest.Fault500AfterEffect:  0.04,
			idemtest.Fault429:             0.04,
		}),
		RefuseDial: idemtest.RandomRefusals(11, 0.25),
	})
	c := fastClient(t, s)
	c.Policy = Policy{BaseDelay: ms, MaxDelay: 5 * ms, AttemptTimeout: time.Second}

	var wg sync.WaitGroup
	sem := make(chan struct{}, workers)
	var refused, failed atomic.Int32
	for range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			res, err := c.Do(context.Background(), mustIntent(t, "POST", s.URL()+"/payments", "x"))
			switch {
			case err == nil:
				res.Response.Body.Close()
			case errors.Is(err, ErrBudgetExhausted):
				refused.Add(1)
			default:
				failed.Add(1)
			}
		})
	}
	wg.Wait()
	st := c.Stats()
	t.Logf("random faults: %d attempts for %d intents, %d retries, budget left %d, refusals %d, other failures %d",
		st.Requests, n, st.Retries, st.BudgetTokens, st.BudgetRefusals, failed.Load())
	assert.Zero(t, refused.Load(), "no intent may end with ErrBudgetExhausted")
	assert.Zero(t, st.BudgetRefusals)
	assert.Greater(t, st.Retries, uint64(n/5), "the faults must have been exercised")
}

// TestReplayedAnswerIsFinal: an answer marked replayed, in any spelling of
// the header, is the answer the server stored under the key: another
// request gets it again and cannot change it. A replayed 500 ends the
// operation at once, Unknown, by Do and by Transport; against a server that
// stores its 500s, the retry that meets the replay is the last request.
func TestReplayedAnswerIsFinal(t *testing.T) {
	for _, name := range replayHeaders {
		t.Run(name+"/Do", func(t *testing.T) {
			replayed := answer(500, name, "true")
			srv := newScripted(t, replayed, replayed, replayed, replayed)
			c, _ := testClient(t, nil)
			_, err := c.Do(context.Background(), mustIntent(t, "POST", srv.URL, "{}"))
			e := asError(t, err)
			assert.Equal(t, Unknown, e.Outcome)
			assert.ErrorIs(t, err, ErrServerSaidStop)
			assert.Equal(t, 500, e.Status)
			assert.Equal(t, 1, len(srv.Requests()), "requests")
		})
		t.Run(name+"/Transport", func(t *testing.T) {
			replayed := answer(500, name, "true")
			srv := newScripted(t, replayed, replayed, replayed, replayed)
			tr, _ := testTransport(t, nil)
			resp, rep := keyedRoundTrip(t, tr, srv.URL)
			assert.Equal(t, 500, resp.StatusCode)
			assert.Equal(t, Unknown, rep.Outcome)
			require.NotNil(t, rep.Err)
			assert.ErrorIs(t, rep.Err, ErrServerSaidStop)
			assert.Equal(t, 1, len(srv.Requests()), "requests")
		})
	}
	t.Run("a server that stores its 500s", func(t *testing.T) {
		api := idemtest.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusInternalServerError)
		}), idemtest.Options{}) // StoreServerErrors
		srv := httptest.NewServer(api)
		t.Cleanup(srv.Close)
		c, _ := testClient(t, nil)
		in := mustIntent(t, "POST", srv.URL, "{}")
		_, err := c.Do(context.Background(), in)
		e := asError(t, err)
		assert.Equal(t, Unknown, e.Outcome)
		assert.ErrorIs(t, err, ErrServerSaidStop)
		assert.Equal(t, 2, api.RequestsForKey(in.Key()), "the 500, then its replay")
		assert.Equal(t, 1, api.EffectsForKey(in.Key()))
	})
}
