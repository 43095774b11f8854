package interop

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v82"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/idemtest"
)

// stripeGateway is a loopback gateway in front of s, as an API gateway sits
// in front of a payment service: it maps stripe-go's POST /v1/charges to the
// test server's POST /payments, loses the answer when the test server drops
// the connection, and answers 401 to a key once the test server has seen
// after requests under it, as a gateway whose session expired while the
// client retried. hits counts the requests it took.
func stripeGateway(t *testing.T, s *idemtest.Server, after int, hits *atomic.Int32) string {
	t.Helper()
	up, err := url.Parse(s.URL())
	require.NoError(t, err)
	rp := httputil.NewSingleHostReverseProxy(up)
	// No keep-alives: net/http would resend a keyed request whose reused
	// connection failed, and the test server would count requests nobody
	// made.
	upstream := &http.Transport{DisableKeepAlives: true}
	t.Cleanup(upstream.CloseIdleConnections)
	rp.Transport = upstream
	rp.ErrorHandler = func(http.ResponseWriter, *http.Request, error) {
		panic(http.ErrAbortHandler) // the answer was lost upstream: lose it here too
	}
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if s.RequestsForKey(r.Header.Get("Idempotency-Key")) >= after {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"error":{"type":"invalid_request_error","message":"Invalid API Key provided"}}`)
			return
		}
		r.URL.Path = "/payments"
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(gw.Close)
	return gw.URL
}

// TestStripeRetriesOnTransport: stripe-go v82 with idem's Transport under its
// http.Client. The test server applies the charge and drops every answer, so
// the first RoundTrip, all of idem's attempts, ends Unknown. With the SDK's
// own retries on, stripe-go sends the charge again under the same key, the
// gateway answers 401, and stripe-go returns that 401 for a charge that was
// applied: the Report of that last RoundTrip must still say Unknown. With
// them off, as README advises, the SDK hands back idem's own Unknown error.
func TestStripeRetriesOnTransport(t *testing.T) {
	policy := quickPolicy()
	tests := []struct {
		name       string
		sdkRetries int64
		hits       int32 // requests the gateway took
		status     int   // the SDK error's HTTP status; 0 when no answer came
	}{
		{"SDK retries on", 2, int32(policy.MaxAttempts) + 1, http.StatusUnauthorized},
		{"SDK retries off", 0, int32(policy.MaxAttempts), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := idemtest.New(idemtest.Options{
				RequireKey: true,
				Faults:     func(*http.Request, string, int) idemtest.Fault { return idemtest.FaultCommitThenDrop },
			})
			require.NoError(t, s.Start())
			t.Cleanup(s.Close)
			var hits atomic.Int32
			gw := stripeGateway(t, s, policy.MaxAttempts, &hits)

			base := &http.Transport{DisableKeepAlives: true}
			t.Cleanup(base.CloseIdleConnections)
			hc := &http.Client{Transport: &idem.Transport{Base: base, Policy: policy, Budget: idem.NewBudget(0)}}
			sc := stripe.NewClient("sk_test_interop", stripe.WithBackends(stripe.NewBackendsWithConfig(&stripe.BackendConfig{
				URL:               stripe.String(gw),
				HTTPClient:        hc,
				MaxNetworkRetries: stripe.Int64(tt.sdkRetries),
				LeveledLogger:     &stripe.LeveledLogger{Level: stripe.LevelNull},
			})))

			const key = "charge-0001"
			var rep idem.Report
			params := &stripe.ChargeCreateParams{Amount: stripe.Int64(4200), Currency: stripe.String(string(stripe.CurrencyEUR))}
			params.SetIdempotencyKey(key)
			_, err := sc.V1Charges.Create(idem.WithReport(context.Background(), &rep), params)

			require.Error(t, err)
			assert.Equal(t, 1, s.EffectsForKey(key), "the charge was applied once")
			assert.Equal(t, tt.hits, hits.Load(), "requests the gateway took")
			var se *stripe.Error
			if tt.status != 0 {
				require.True(t, errors.As(err, &se), "the SDK returns the gateway's answer: %v", err)
				assert.Equal(t, tt.status, se.HTTPStatusCode)
			} else {
				assert.ErrorIs(t, err, idem.ErrOutcomeUnknown, "the SDK hands back idem's error")
			}
			assert.Equal(t, idem.Unknown, rep.Outcome, "Report of the last RoundTrip: outcome = %v, want %v", rep.Outcome, idem.Unknown)
			require.NotNil(t, rep.Err)
			assert.ErrorIs(t, rep.Err, idem.ErrOutcomeUnknown)
		})
	}
}
