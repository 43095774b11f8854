package idem

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/idem-go/idem/internal/anycase"
	"github.com/idem-go/idem/internal/methods"
	"github.com/idem-go/idem/internal/replay"
	"github.com/idem-go/idem/internal/wire"
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
	// Budget limits retries across every request of the Transport, per
	// origin. If nil, the Transport makes its own with DefaultBudgetTokens.
	Budget *Budget
	// KeyHeader names the header that marks a request as keyed. If empty,
	// DefaultKeyHeader is used.
	KeyHeader string
	// CredentialHeaders names the header fields, in any letter case, that
	// carry this service's credentials beyond those redact.CredentialHeaders
	// lists. A redirect hop that leaves the first request's origin (another
	// host or port, or https to http) is sent without the key and without
	// any credential header, listed or named here. If nil, the list alone
	// is used.
	CredentialHeaders []string
	// DeletePolicy says when a DELETE answered 404 or 410 is done. The zero
	// value is DeleteAfterDoubt.
	DeletePolicy DeletePolicy
	// Logger, OnAttempt, OnOperation and OnSend are as in Client: an
	// operation is a RoundTrip, which ends as it returns. OnSend gets a
	// request of its own, whose header it may change; the caller's is never
	// changed.
	Logger      *slog.Logger
	OnAttempt   func(context.Context, AttemptInfo)
	OnOperation func(ctx context.Context, method, url string) (_ context.Context, end func(Outcome, error))
	OnSend      func(req *http.Request) context.Context
	// DoubtWindow and DoubtKeys bound the Transport's memory of the keys
	// its RoundTrips left in doubt, as Client's do: a later RoundTrip under
	// such a key, an SDK's own retry, ends Unknown short of success too.
	DoubtWindow time.Duration
	DoubtKeys   int

	budget  ownBudget
	metrics metrics
	doubts  doubts

	// Seams for tests: nil means the real clock and math/rand/v2.
	clock clock
	rand  func() float64
}

// RoundTrip implements http.RoundTripper. It does not modify req, and it
// closes req.Body, as the interface requires.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL == nil {
		closeBody(req)
		return nil, errors.New("idem: Transport: request has no URL")
	}
	p, err := t.Policy.withDefaults()
	if err != nil {
		closeBody(req)
		return nil, err
	}
	replayable := req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
	if !replayable {
		// Without GetBody a body cannot be sent twice: one attempt only.
		p = p.narrow(Policy{MaxAttempts: 1})
	}
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	// A redirect hop to another origin goes without key and credentials.
	leaves := hopLeavesOrigin(req)
	sent := req
	if leaves != redirectFollowed {
		sent = t.offOrigin(req)
	}
	// The sender and the first attempt's recorder in one allocation.
	st := &struct {
		s   requestSender
		rec wire.Recorder
	}{s: requestSender{base: base, req: sent, onSend: t.OnSend}}
	s := &st.s
	r := run{
		runConfig: runConfig{
			policy: p, budget: runBudget{b: t.budget.or(t.Budget), origin: originOf(req.URL), m: &t.metrics}, deletePolicy: t.DeletePolicy,
			clock: clockOr(t.clock), rand: t.rand,
			obs: observer{m: &t.metrics, logger: t.Logger, hook: t.OnAttempt, onOperation: t.OnOperation},
		},
		s: s, method: req.Method, firstRec: &st.rec,
	}
	key := t.key(req)
	r.hasKey = key != ""
	if r.method == "" {
		r.method = http.MethodGet
	}
	if r.logsURL() {
		r.url = req.URL.String()
	}
	// A hop of a redirect http.Client follows: what the earlier hops left
	// in doubt stays in doubt, and when the redirect made the request a GET
	// (a 303, or a 301 or 302 to a write), the write's own answer stands.
	prev, changed := earlierHop(req)
	if prev != nil {
		r.inDoubt = prev.inDoubt || (changed && prev.outcome != NotApplied)
	}
	dc := t.doubts.begin(&r, key, doubtLimits{t.DoubtWindow, t.DoubtKeys}) // an SDK's resend of a request left in doubt
	if changed {
		dc.key = "" // the GET a redirect made of a write settles nothing: its answer says nothing of the write
	}
	ctx, end := r.obs.startOperation(req.Context(), &r)
	var (
		resp *http.Response
		d    decision
		e    *Error
	)
	if why := r.hopRefused(leaves); why != redirectFollowed {
		e = r.fail(r.outcome(), redirectReason(facts{Redirect: why, Status: req.Response.StatusCode}), 0, ErrRedirected)
	} else {
		resp, d, e = r.loop(ctx)
	}
	if e != nil {
		e.Reason = dc.note(e.Reason)
	}
	if !s.used {
		closeBody(req) // no attempt took it
	}
	rep, _ := ctx.Value(reportKey{}).(*Report)
	if e != nil && resp == nil {
		e.URL = req.URL.String()
		r.obs.finish(ctx, &r, e.Outcome, false, e)
		dc.end(e.Outcome)
		rep.fill(Report{Outcome: e.Outcome, Err: e, Attempts: e.Attempts}, prev, changed)
		end(e.Outcome, e)
		return nil, e
	}
	out := d.Outcome
	if e != nil {
		e.URL = req.URL.String()
		out = e.Outcome
	}
	replayed := replay.Replayed(resp.Header)
	r.obs.finish(ctx, &r, out, replayed, e)
	dc.end(out)
	if rep != nil {
		rep.fill(Report{Outcome: out, Replayed: replayed, Err: e, Attempts: r.trail()}, prev, changed)
	}
	if isRedirect(resp.StatusCode) {
		resp.Body = &hopBody{ReadCloser: resp.Body, hop: hop{outcome: out, inDoubt: r.inDoubt}}
	}
	end(out, nil)
	return resp, nil
}

// hop is what one RoundTrip concluded, for the next hop of a redirect.
type hop struct {
	outcome Outcome
	inDoubt bool
}

// hopBody carries a redirect's hop to the RoundTrip of the next hop, which
// finds it as Request.Response.Body: http.Client hands the redirect's
// response on with the request it makes to follow it.
type hopBody struct {
	io.ReadCloser
	hop hop
}

// earlierHop returns what the RoundTrip of the redirect req follows
// concluded, if this Transport made it, and whether the redirect changed the
// method (a write followed by a GET).
func earlierHop(req *http.Request) (*hop, bool) {
	if req.Response == nil {
		return nil, false
	}
	hb, ok := req.Response.Body.(*hopBody)
	if !ok {
		return nil, false
	}
	changed := req.Response.Request != nil && req.Response.Request.Method != req.Method
	return &hb.hop, changed
}

func isRedirect(status int) bool {
	switch status {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther,
		http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		return true
	}
	return false
}

// Report is what a Transport learned about one RoundTrip: the outcome
// Client.Do would have given, and the attempts. A RoundTripper must hand back
// the last response as it came, so a 503 after exhausted retries, or a 409
// under a key, reads like any other answer; the Report says what it means.
//
// Attach a Report to a request's context with WithReport; RoundTrip fills it
// in before it returns. An http.Client that follows redirects makes one
// RoundTrip per hop, each filling the same Report: it describes the last,
// but an earlier hop's doubt carries over, and when the redirect made a
// write a GET (a 303, or a 301 or 302), Outcome stays the write's own.
// Doubt carries over between RoundTrips under the same key too, as when an
// SDK retries on top of the Transport: see Transport.DoubtWindow.
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

// fill sets *rep to r, keeping the write's own outcome when this RoundTrip
// was the GET a redirect of it turned into (changed). A nil rep is a no-op.
func (rep *Report) fill(r Report, prev *hop, changed bool) {
	if rep == nil {
		return
	}
	if changed {
		r.Outcome = prev.outcome // the write's, not the GET's
	}
	*rep = r
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

// hopRefused says why the request, a keyed write's redirect hop that leaves
// the first request's origin as hopLeavesOrigin said (leaves), must not be
// sent: the http.Client follows it all the same, as one without
// RedirectPolicy does. redirectFollowed when it may be sent.
func (r *run) hopRefused(leaves redirectStop) redirectStop {
	if !r.hasKey || methods.Safe(r.method) {
		return redirectFollowed
	}
	return leaves
}

// offOrigin returns req, a redirect hop to another origin, without what
// RedirectPolicy takes off such a hop, and without the Transport's own
// CredentialHeaders: http.Client copies the first request's header onto
// every hop. req itself is not changed.
func (t *Transport) offOrigin(req *http.Request) *http.Request {
	out := *req
	out.Header = req.Header.Clone()
	dropOffOrigin(out.Header, keyHeaderName(t.KeyHeader), t.CredentialHeaders)
	return &out
}

// key returns req's idempotency key, or "" when it carries none, found
// under any spelling of the header's name: net/http sends a map key that is
// not canonical as it is.
func (t *Transport) key(req *http.Request) string {
	if t.KeyHeader != "" {
		return anycase.First(req.Header, keyHeaderName(t.KeyHeader))
	}
	return anycase.First(req.Header, DefaultKeyHeader, "X-Idempotency-Key")
}

// Stats returns the Transport's counters.
func (t *Transport) Stats() Stats { return t.metrics.stats(t.budget.or(t.Budget)) }

func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}
