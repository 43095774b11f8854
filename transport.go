package idem

import (
	"context"
	"log/slog"
	"net/http"
	"slices"
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
// *url.Error; errors.Is and errors.As see through it). A 503 handed back
// after the retries ran out looks like any 503: to learn that its outcome is
// Unknown, attach a Report to the request's context with WithReport.
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
	ctx := req.Context()
	resp, d, e := r.loop(ctx)
	if !r.reqUsed {
		closeBody(req) // no attempt took it
	}
	rep, _ := ctx.Value(reportKey{}).(*Report)
	if e != nil && resp == nil {
		e.URL = req.URL.String()
		r.obs.finish(ctx, &r, e.Outcome, false, e)
		if rep != nil {
			*rep = Report{Outcome: e.Outcome, Err: e, Attempts: e.Attempts}
		}
		return nil, e
	}
	out := d.Outcome
	if e != nil {
		e.URL = req.URL.String()
		out = e.Outcome
	}
	replayed := IsReplayed(resp.Header)
	r.obs.finish(ctx, &r, out, replayed, e)
	if rep != nil {
		*rep = Report{Outcome: out, Replayed: replayed, Err: e, Attempts: slices.Clone(r.attempts)}
	}
	return resp, nil
}

// Report is what a Transport learned about one RoundTrip: the outcome
// Client.Do would have given, and the attempts. A RoundTripper must hand back
// the last response as it came, so a 503 after exhausted retries, or a 409
// under a key, reads like any other answer; the Report says what it means.
//
// Attach a Report to a request's context with WithReport; RoundTrip fills it
// in before it returns. An http.Client that follows redirects makes one
// RoundTrip per hop, each filling the same Report: it describes the last.
// Read it after the call returns, from the goroutine that made it.
type Report struct {
	// Outcome is the operation's outcome: Applied, AlreadyApplied,
	// NotApplied, or Unknown when an attempt left it in doubt and no answer
	// settled it. NoOutcome until a RoundTrip fills the Report.
	Outcome Outcome
	// Replayed reports that the final answer was a replay of a stored one.
	Replayed bool
	// Err says why the Transport stopped without success (exhausted
	// attempts, the budget, a stop of the decision table), whether or not a
	// response was handed back; nil after success or a plain final answer
	// such as a 404.
	Err *Error
	// Attempts is the trail, first attempt first.
	Attempts []Attempt
}

// reportKey is the context key of a *Report.
type reportKey struct{}

// WithReport returns a copy of ctx that asks a Transport to fill in rep for
// the RoundTrip of a request made with it:
//
//	var rep idem.Report
//	req, _ := http.NewRequestWithContext(idem.WithReport(ctx, &rep), "POST", url, body)
//	resp, err := hc.Do(req)
//	// rep.Outcome is Unknown when resp is a 503 the retries could not get past.
func WithReport(ctx context.Context, rep *Report) context.Context {
	return context.WithValue(ctx, reportKey{}, rep)
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
