package idem

import (
	"context"
	"log/slog"
	"net/http"
)

// Transport is an http.RoundTripper that gives an existing *http.Client,
// and the generated API clients and SDKs built on one, idem's retries without
// changing a call site:
//
//	hc := &http.Client{Transport: &idem.Transport{}}
//
// It classifies each attempt and retries as Client.Do would: a request that
// never reached the server is resent whatever its method (its body replayed
// through Request.GetBody); an ambiguous one only when its method is safe or
// idempotent, or when it already carries an idempotency key header.
//
// Transport never adds a key. A key made per call inside a transport is made
// per attempt from the operation's point of view: a caller that retries a
// timed-out call gets a new key and, at the server, a new operation. Keys must
// be born with the intent, in the application; give the request its
// Idempotency-Key header there, or use Client.Do with an Intent.
//
// Unlike Client.Do, Transport hands back the last response whatever its
// status, as a RoundTripper should; when no response came, the error is an
// *Error with the outcome and the attempts (wrapped by http.Client in a
// *url.Error; errors.Is and errors.As see through it).
//
// The zero Transport is ready to use with http.DefaultTransport. A Transport
// is safe for concurrent use; do not change its fields after first use.
type Transport struct {
	// Base sends each attempt. If nil, http.DefaultTransport is used.
	Base http.RoundTripper
	// Policy bounds attempts and waits. The zero Policy is the default.
	Policy Policy
	// Budget limits retries across every request of the Transport. If nil,
	// the Transport makes its own with DefaultBudgetTokens.
	Budget *Budget
	// KeyHeader names the header that marks a request as keyed. If empty,
	// DefaultKeyHeader is used.
	KeyHeader string
	// DeletePolicy says when a DELETE answered 404 or 410 is done. The zero
	// value is DeleteAfterAmbiguous.
	DeletePolicy DeletePolicy
	// Logger and OnAttempt are as in Client.
	Logger    *slog.Logger
	OnAttempt func(context.Context, AttemptInfo)

	budget  ownBudget
	metrics metrics

	// Seams for tests: nil means the real clock and math/rand/v2.
	clock clock
	rand  func() float64
}

// RoundTrip implements http.RoundTripper. It does not modify req, and it
// closes req.Body, as the interface requires.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	p, err := t.Policy.withDefaults()
	if err != nil {
		closeBody(req)
		return nil, err
	}
	replayable := req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
	if !replayable {
		// Without GetBody a body cannot be sent twice: one attempt only.
		p.MaxAttempts = 1
	}
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	r := run{
		engine: engine{
			policy: p, budget: t.budget.or(t.Budget), deletePolicy: t.DeletePolicy,
			clock: clockOr(t.clock), rand: t.rand,
			obs: observer{m: &t.metrics, logger: t.Logger, hook: t.OnAttempt},
		},
		method: req.Method, hasKey: t.keyed(req),
		base: base, req: req,
	}
	if r.method == "" {
		r.method = http.MethodGet
	}
	if r.logsURL() {
		r.url = req.URL.String()
	}
	resp, d, e := r.loop(req.Context())
	if !r.reqUsed {
		closeBody(req) // no attempt took it
	}
	if e != nil && resp == nil {
		e.URL = req.URL.String()
		r.obs.finish(req.Context(), &r, e.Outcome, false, e)
		return nil, e
	}
	out := d.Outcome
	if e != nil {
		out = e.Outcome
	}
	r.obs.finish(req.Context(), &r, out, IsReplayed(resp.Header), e)
	return resp, nil
}

// keyed reports whether req carries an idempotency key.
func (t *Transport) keyed(req *http.Request) bool {
	return req.Header.Get(keyHeaderName(t.KeyHeader)) != "" || (t.KeyHeader == "" && req.Header.Get("X-Idempotency-Key") != "")
}

// Stats returns the Transport's counters.
func (t *Transport) Stats() Stats { return t.metrics.stats(t.budget.or(t.Budget)) }

func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}
