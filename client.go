package idem

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/idem-go/idem/internal/replay"
	"github.com/idem-go/idem/internal/wire"
	"github.com/idem-go/idem/redact"
)

// DefaultKeyHeader is the header that carries the idempotency key unless
// Client.KeyHeader names another.
const DefaultKeyHeader = "Idempotency-Key"

// Client runs intents: it makes attempts until the server gives a definitive
// answer, the policy or the retry budget ends, or the context does, and it
// retries only where the decision table says a retry cannot apply the
// operation twice.
//
// The zero Client is ready to use, with http.DefaultClient, the default
// Policy and a budget of DefaultBudgetTokens. A Client is safe for concurrent
// use once its fields are set; do not change them afterwards.
type Client struct {
	// HTTPClient sends the attempts. If nil, http.DefaultClient is used.
	// Its Timeout, if set, bounds each attempt. The Client uses a copy whose
	// CheckRedirect takes the key and the credentials off a redirect to
	// another origin (see RedirectPolicy) before calling HTTPClient's own.
	HTTPClient *http.Client
	// Policy bounds attempts and waits. The zero Policy is the default.
	// An intent made WithPolicy is run by this Policy narrowed by its own,
	// never loosened (see WithPolicy).
	Policy Policy
	// Budget limits retries across every intent of the Client, per origin.
	// If nil, the Client makes its own with DefaultBudgetTokens on first
	// use; use NewBudget(0) for no limit.
	Budget *Budget
	// Authorize, if not nil, is called on every attempt to add credentials
	// to the request (Authorization, X-Api-Key ...), so an intent never stores a
	// secret and a late attempt carries fresh credentials. An error ends the
	// intent and is wrapped in the *Error. The request's header value lists
	// are the intent's own: set, add or delete headers, never write into a
	// value list in place. The key header must stay as the Client set it:
	// an attempt whose request lost or changed the intent's key (under any
	// spelling of KeyHeader) stops with ErrInvalidRequest before anything is
	// sent.
	Authorize func(ctx context.Context, req *http.Request) error
	// CredentialHeaders names the header fields, in any letter case, that
	// carry this service's credentials beyond those redact.CredentialHeaders
	// lists (an X-Shop-Token of its own). They are held to the same rule:
	// a redirect to another origin takes them off, and an intent that
	// carries one is not sent (ErrSecretHeader, wrapped in ErrInvalidRequest;
	// NewIntent, which knows no Client, refuses only the listed ones). If
	// nil, the list alone is used.
	CredentialHeaders []string
	// KeyHeader names the header carrying the key. If empty,
	// DefaultKeyHeader is used.
	KeyHeader string
	// KeySFString writes the key as an RFC 8941 string, Idempotency-Key:
	// "k", as the IETF draft specifies; valid keys hold no '"' or '\', so
	// no escaping is needed. If false, the key is written as is,
	// Idempotency-Key: k, the form deployed servers expect.
	KeySFString bool
	// DeletePolicy says when a DELETE answered 404 or 410 is done. The zero
	// value is DeleteAfterDoubt.
	DeletePolicy DeletePolicy
	// Logger, if not nil, receives a debug record per attempt, an info
	// record per retry and a warning per Unknown outcome. Their attributes
	// are named as OpenTelemetry's HTTP semantic conventions name them
	// (http.request.method, server.address, server.port, url.scheme,
	// url.full, http.request.resend_count, http.response.status_code,
	// error.message), idem's own under "idem." (idem.class, idem.action,
	// idem.outcome, idem.attempt.duration, idem.retry.wait, ...), durations
	// as time.Duration. Keys, bodies and credentials are never logged, nor
	// URL queries.
	Logger *slog.Logger
	// OnAttempt, if not nil, is called after every attempt, once what
	// follows it is known, with the attempt's context: the one OnSend
	// returned, or the operation's without OnSend. It is for exporting
	// metrics and traces; it runs on the caller's goroutine and must be
	// quick.
	OnAttempt func(context.Context, AttemptInfo)
	// OnOperation, if not nil, is called as Do or Resume starts an
	// operation, before its first attempt, with its method and URL (without
	// query, user info or fragment). The context it returns, derived from
	// ctx, is the operation's: its attempts, hooks and log records get it.
	// end, if not nil, is called once as the operation ends, with its
	// outcome and the error Do returns (nil on success). A tracer makes a
	// span of the operation here; package github.com/idem-go/idem/otel does.
	OnOperation func(ctx context.Context, method, url string) (_ context.Context, end func(Outcome, error))
	// OnSend, if not nil, is called as each attempt's request is about to go
	// out, Try's included, after Authorize. It may add header fields to req,
	// such as a trace context, under the rules Authorize follows (the key
	// header stays as the Client set it: an attempt whose key changed stops
	// with ErrInvalidRequest). The context it returns, derived from
	// req.Context(), becomes the request's and OnAttempt's for this attempt;
	// nil keeps req's. A tracer starts the attempt's span here and puts its
	// context in the request's headers.
	OnSend func(req *http.Request) context.Context
	// DoubtWindow is how long the Client remembers a key that a call (Do,
	// Resume or Try) left in doubt, an Unknown outcome, so that a later call
	// under the key, told nothing of the earlier one (a Do, a Resume without
	// the error, a Try without the prior, as a job runner that restarted
	// makes it), ends Unknown short of success too, never NotApplied; a
	// success under the key settles it. If zero, DefaultDoubtWindow is used;
	// a negative value remembers nothing.
	DoubtWindow time.Duration
	// DoubtKeys bounds how many keys in doubt are remembered, the least
	// recently left in doubt forgotten first. If zero or negative,
	// DefaultDoubtKeys is used.
	DoubtKeys int

	budget  ownBudget
	hcOnce  sync.Once
	hc      *http.Client // HTTPClient with RedirectPolicy; made on first use
	metrics metrics
	doubts  doubts

	// Seams for tests: nil means the real clock and math/rand/v2.
	clock clock
	rand  func() float64
}

// clock is the time seam of a Client.
type clock interface {
	Now() time.Time
	// Since is Now().Sub(t); the real clock's reads only the monotonic
	// clock, half the cost of Now.
	Since(t time.Time) time.Duration
	// Sleep waits d or until ctx ends, returning ctx's error then.
	Sleep(ctx context.Context, d time.Duration) error
	// AfterFunc calls f in its own goroutine after d, unless the returned
	// timer's Stop stops it first, as time.AfterFunc does.
	AfterFunc(d time.Duration, f func()) stopper
}

// stopper is the part of a *time.Timer an attempt timer uses.
type stopper interface{ Stop() bool }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) Since(t time.Time) time.Duration { return time.Since(t) }

func (realClock) AfterFunc(d time.Duration, f func()) stopper { return time.AfterFunc(d, f) }

func (realClock) Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Result is a definitive answer to an intent.
type Result struct {
	// Outcome is Applied, AlreadyApplied, or NotApplied when the server
	// rejected the request with a 4xx before any ambiguous attempt.
	Outcome Outcome
	// Replayed reports that the server answered from its store of completed
	// requests: an earlier attempt had taken effect.
	Replayed bool
	// Response is the final response. The caller must close its Body. When
	// net/http followed a 303 (or another redirect that turns the request
	// into a GET), it is the followed GET's response; the request's own
	// answer, which Outcome judges, is the last attempt's Status. When the
	// redirect policy stopped following such a GET (a loop after a 303), it
	// is the last redirect, its body empty.
	Response *http.Response
	// Attempts is the trail, first attempt first.
	Attempts []Attempt
}

// Attempt is the record of one attempt.
type Attempt struct {
	// Class is the attempt's class.
	Class Class
	// Status is the status of the request's own answer, or 0 when none
	// arrived. When net/http followed a redirect that changed the method,
	// it is the redirect's status, not the followed GET's.
	Status int
	// Err is the transport error, or nil when a response arrived.
	Err error
	// Wire is what reached the wire.
	Wire Wire
	// Start is when the attempt began; Duration how long it took.
	Start    time.Time
	Duration time.Duration
	// Wait is the delay before the next attempt; 0 for the last attempt.
	Wait time.Duration
}

// attemptText is how an Error shows its last attempt: the class, and the
// status or the redacted transport error.
func attemptText(a Attempt) string {
	if a.Err != nil {
		return fmt.Sprintf("%s: %s", a.Class, redact.Error(a.Err))
	}
	return fmt.Sprintf("%s: %d %s", a.Class, a.Status, http.StatusText(a.Status))
}

// Do runs the intent: it sends attempts until a definitive answer, the end of
// the policy, of the budget or of ctx.
//
// A definitive answer returns a *Result and a nil error: 2xx (Applied),
// a DELETE's 404 or 410 after an ambiguous attempt (AlreadyApplied), or a
// 4xx rejection when no attempt was ambiguous (NotApplied), as net/http
// returns any HTTP answer. The caller must close Result.Response.Body.
// Otherwise Do returns a nil *Result and an *Error whose Outcome is Unknown
// (errors.Is(err, ErrOutcomeUnknown): reconcile, do not resubmit under a new
// key) or NotApplied (errors.Is(err, ErrNotApplied): safe to try again).
// Invalid arguments (a nil intent or context, a Policy with a negative field)
// give an error that is not an *Error, before any attempt.
//
// Redirects net/http follows are hops of one attempt. When the redirect
// policy stops following (after 10 redirects, a loop; or HTTPClient's own
// CheckRedirect refuses), the attempt is judged by the request's own answer,
// never resent: an *Error matching ErrRedirected, NotApplied when every
// answer was a 307 or 308, each a complete answer that the server did not
// act on the request there, Unknown after a 301 or 302 to a write (done or
// moved?); after a 303 the write was applied and its GET looped: a Result,
// Applied.
//
// Each Do is a run of its own and knows of an earlier one only what the
// Client remembers (DoubtWindow): that a call left the intent's key in
// doubt, which puts this run in doubt from the start. To run an intent again
// after an Unknown outcome, use Resume.
func (c *Client) Do(ctx context.Context, in *Intent) (*Result, error) {
	return c.run(ctx, in, false)
}

// Resume runs the intent again after an earlier Do or Resume of it ended
// with the error prior, as a caller reconciling an Unknown outcome does:
// under the same key, a server that has the operation replays its answer.
// Resume judges the answers in the light of the earlier run. When prior is an
// *Error whose Outcome is Unknown, the operation is in doubt from the start:
// a refusal now proves only that this run's attempts were not applied, so
// only a success settles it, and a DELETE answered 404 or 410 is
// AlreadyApplied (under DeleteAfterDoubt). Such a run of a keyed intent
// spends no retry budget: it is there to learn an outcome the server may
// already hold, and a budget emptied by the outage that left the operation
// in doubt must not keep it in doubt once the server is back. Its retries
// still obey the Policy (MaxAttempts, the backoff, Retry-After) and ctx, and
// its answers put tokens back; a caller resuming many operations at once
// paces them itself. For any other prior, Resume is Do, and pays for its
// retries as Do does.
func (c *Client) Resume(ctx context.Context, in *Intent, prior error) (*Result, error) {
	var e *Error
	return c.run(ctx, in, errors.As(prior, &e) && e.Outcome == Unknown)
}

// run runs in, in doubt from the start when inDoubt is set.
func (c *Client) run(ctx context.Context, in *Intent, inDoubt bool) (*Result, error) {
	p, err := c.Policy.withDefaults()
	if err != nil {
		return nil, err
	}
	if in != nil && in.policy != nil {
		p = p.narrow(*in.policy) // WithPolicy's only tightens the Client's
	}
	var r run
	st := newDoState(in)
	if err := c.initRun(&r, &st.op, ctx, in, p); err != nil {
		return nil, err
	}
	r.inDoubt = inDoubt
	r.budget.free = inDoubt && r.hasKey // learning the outcome, not sending it again
	dc := c.doubts.begin(&r, in.key, c.doubtLimits())
	ctx, end := r.obs.startOperation(ctx, &r)
	resp, d, e := r.loop(ctx)
	if e != nil {
		drain(resp)
		e.Reason = dc.note(e.Reason)
		dc.end(e.Outcome)
		r.obs.finish(ctx, &r, e.Outcome, false, e)
		end(e.Outcome, e)
		return nil, e
	}
	res := r.result(&st.one)
	res.Outcome, res.Replayed, res.Response = d.Outcome, replay.Replayed(ownAnswer(resp, r.method).Header), resp
	dc.end(res.Outcome)
	r.obs.finish(ctx, &r, res.Outcome, res.Replayed, nil)
	end(res.Outcome, nil)
	return res, nil
}

// opState is what a run of an intent holds for its operation: the sender
// with the first attempt's request parts, and the first attempt's recorder.
// Do and Try allocate it in one block with what else they keep (doState,
// tryState), since the parts live as long as one another: the response
// holds the request, whose context holds the recorder.
type opState struct {
	s   intentSender
	rec wire.Recorder
}

// doState is what one Do allocates: its operation's state and room for the
// Result of a single attempt, the common case.
type doState struct {
	op  opState
	one oneAttempt
}

// doParts is a doState with room for the first attempt's body reader and key
// value, for an intent with a body or a key.
type doParts struct {
	doState
	parts firstParts
}

// newDoState returns the state of a Do of in, in one allocation.
func newDoState(in *Intent) *doState {
	if in == nil || !needsParts(in) {
		return new(doState)
	}
	b := new(doParts)
	b.op.s.first = &b.parts
	return &b.doState
}

// oneAttempt is a Result with room for a trail of one attempt, so that the
// success of a single attempt, the common case, needs no trail of its own.
type oneAttempt struct {
	Result
	trail [1]Attempt
}

// result returns a Result holding r's trail, in one when the trail is of
// one attempt.
func (r *run) result(one *oneAttempt) *Result {
	if r.n != 1 {
		return &Result{Attempts: r.trail()}
	}
	one.trail = [1]Attempt{r.latest}
	one.Attempts = one.trail[:]
	return &one.Result
}

// initRun validates the arguments of a run of in under policy p, which has
// its defaults, and prepares r, its sender and first recorder held by st,
// whose sender's room for first parts, if any, is set.
func (c *Client) initRun(r *run, st *opState, ctx context.Context, in *Intent, p Policy) error {
	if in == nil {
		return fmt.Errorf("%w: nil intent", ErrInvalidIntent)
	}
	if ctx == nil {
		return errors.New("idem: nil context")
	}
	st.s.c, st.s.in = c, in
	*r = run{
		runConfig: runConfig{
			policy: p, budget: runBudget{b: c.budget.or(c.Budget), origin: originOf(in.u), m: &c.metrics}, deletePolicy: c.DeletePolicy,
			clock: clockOr(c.clock), rand: c.rand,
			obs: observer{m: &c.metrics, logger: c.Logger, hook: c.OnAttempt, onOperation: c.OnOperation},
		},
		s:      &st.s,
		method: in.method, url: in.url, hasKey: in.key != "", origin: in.u,
		firstRec: &st.rec,
	}
	return nil
}

// doubtLimits are the bounds of the Client's memory of keys in doubt.
func (c *Client) doubtLimits() doubtLimits { return doubtLimits{c.DoubtWindow, c.DoubtKeys} }

// Stats returns the Client's counters.
func (c *Client) Stats() Stats { return c.metrics.stats(c.budget.or(c.Budget)) }

// httpClient returns the http.Client attempts go through: HTTPClient, or
// http.DefaultClient, with RedirectPolicy in front of its own CheckRedirect.
func (c *Client) httpClient() *http.Client {
	c.hcOnce.Do(func() {
		base := c.HTTPClient
		if base == nil {
			base = http.DefaultClient
		}
		hc := *base
		hc.CheckRedirect = redirectPolicy(c.KeyHeader, c.CredentialHeaders, base.CheckRedirect)
		c.hc = &hc
	})
	return c.hc
}

// clockOr returns c, or the real clock when c is nil.
func clockOr(c clock) clock {
	if c != nil {
		return c
	}
	return realClock{}
}

// keyHeaderName is the canonical name of the key header configured as name:
// DefaultKeyHeader when name is empty.
func keyHeaderName(name string) string {
	if name == "" {
		return DefaultKeyHeader
	}
	return http.CanonicalHeaderKey(name)
}
