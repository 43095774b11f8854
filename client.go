package idem

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"
)

// DefaultKeyHeader is the header that carries the idempotency key unless
// Client.KeyHeader names another.
const DefaultKeyHeader = "Idempotency-Key"

// newBody is a request body over an intent's bytes. It must stay an
// io.NopCloser around a *bytes.Reader: net/http recognises that pair as held
// in memory and sends headers and body in one write; any other type costs a
// separate flush of the headers.
func newBody(b []byte) io.ReadCloser { return io.NopCloser(bytes.NewReader(b)) }

// KeyFormat is how the key is written in its header.
type KeyFormat uint8

const (
	// KeyPlain, the zero value, writes the key as is: Idempotency-Key: k.
	// Deployed servers expect this form.
	KeyPlain KeyFormat = iota
	// KeySFString writes the key as an RFC 8941 string, Idempotency-Key: "k",
	// as the IETF draft specifies. Valid keys hold no '"' or '\', so no
	// escaping is needed.
	KeySFString
)

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
	// CheckRedirect drops the key on redirects to another host (see
	// RedirectPolicy) before calling HTTPClient's own.
	HTTPClient *http.Client
	// Policy bounds attempts and waits. The zero Policy is the default.
	Policy Policy
	// Budget limits retries across every intent of the Client. If nil, the
	// Client makes its own with DefaultBudgetTokens on first use; use
	// NewBudget(0) for no limit.
	Budget *Budget
	// Authorize, if not nil, is called on every attempt to add credentials
	// to the request (Authorization, Cookie ...), so an intent never stores a
	// secret and a late attempt carries fresh credentials. An error ends the
	// intent and is wrapped in the *Error. The request's header value lists
	// are the intent's own: set, add or delete headers, never write into a
	// value list in place.
	Authorize func(ctx context.Context, req *http.Request) error
	// KeyHeader names the header carrying the key. If empty,
	// DefaultKeyHeader is used.
	KeyHeader string
	// KeyFormat is how the key is written. The zero value is KeyPlain.
	KeyFormat KeyFormat
	// DeletePolicy says when a DELETE answered 404 or 410 is done. The zero
	// value is DeleteAfterAmbiguous.
	DeletePolicy DeletePolicy
	// Logger, if not nil, receives a debug record per attempt, an info
	// record per retry and a warning per Unknown outcome. Keys, bodies and
	// credentials are never logged, nor URL queries.
	Logger *slog.Logger
	// OnAttempt, if not nil, is called after every attempt with the
	// operation's context, for exporting metrics and traces. It runs on the
	// caller's goroutine and must be quick.
	OnAttempt func(context.Context, AttemptInfo)

	budget  ownBudget
	hcOnce  sync.Once
	hc      *http.Client // HTTPClient with RedirectPolicy; made on first use
	metrics metrics

	// Seams for tests: nil means the real clock and math/rand/v2.
	clock clock
	rand  func() float64
}

// clock is the time seam of a Client.
type clock interface {
	Now() time.Time
	// Sleep waits d or until ctx ends, returning ctx's error then.
	Sleep(ctx context.Context, d time.Duration) error
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

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
	// answer, which Outcome judges, is the last attempt's Status.
	Response *http.Response
	// Attempts is the trail, first attempt first.
	Attempts []Attempt

	first [1]Attempt // holds a one-attempt trail without another allocation
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

func (a Attempt) String() string {
	if a.Err != nil {
		return fmt.Sprintf("%s: %s", a.Class, safeError(a.Err))
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
func (c *Client) Do(ctx context.Context, in *Intent) (*Result, error) {
	var r run
	if err := c.initRun(&r, ctx, in); err != nil {
		return nil, err
	}
	resp, d, e := r.loop(ctx)
	if e != nil {
		drain(resp)
		r.obs.finish(ctx, &r, e.Outcome, false, e)
		return nil, e
	}
	res := &Result{Outcome: d.Outcome, Replayed: IsReplayed(ownAnswer(resp, r.method).Header), Response: resp}
	if len(r.attempts) == 1 { // the common case: the trail lives in the Result
		res.first[0] = r.attempts[0]
		res.Attempts = res.first[:]
	} else {
		res.Attempts = slices.Clone(r.attempts)
	}
	r.obs.finish(ctx, &r, res.Outcome, res.Replayed, nil)
	return res, nil
}

// initRun validates the arguments of Do or Attempt and prepares r.
func (c *Client) initRun(r *run, ctx context.Context, in *Intent) error {
	if in == nil {
		return fmt.Errorf("%w: nil intent", ErrInvalidIntent)
	}
	if ctx == nil {
		return errors.New("idem: nil context")
	}
	p, err := c.Policy.withDefaults()
	if err != nil {
		return err
	}
	*r = run{
		engine: engine{
			policy: p, budget: c.budget.or(c.Budget), deletePolicy: c.DeletePolicy,
			clock: clockOr(c.clock), rand: c.rand,
			obs: observer{m: &c.metrics, logger: c.Logger, hook: c.OnAttempt},
		},
		method: in.method, url: in.url, hasKey: in.HasKey(),
		c: c, in: in, hc: c.httpClient(),
		// An earlier Do of this intent may have reached the server: a 409
		// now may be that attempt still running, not a refusal.
		ambiguous: in.ambiguous.Load(),
	}
	return nil
}

// Stats returns the Client's counters.
func (c *Client) Stats() Stats { return c.metrics.stats(c.budget.or(c.Budget)) }

// request builds the request of one attempt: the intent's bytes and headers,
// the key, and fresh credentials.
func (c *Client) request(ctx context.Context, in *Intent) (*http.Request, error) {
	// From the URL the intent parsed once: given the URL, NewRequest would
	// parse it again on every attempt. Given "", it parses nothing and
	// allocates the URL this copies the intent's into.
	req, err := http.NewRequestWithContext(ctx, in.method, "", nil)
	if err != nil {
		return nil, fmt.Errorf("idem: building request: %w", err)
	}
	*req.URL = *in.u
	req.Host = in.u.Host
	for _, f := range in.header {
		req.Header[f.name] = f.values // clipped at NewIntent: an append here copies
	}
	if in.body != nil {
		body := in.body
		req.ContentLength = int64(len(body))
		req.Body = newBody(body)
		// GetBody lets net/http follow a 307 or 308 with the body, as it
		// does for NewRequest's bodies.
		req.GetBody = func() (io.ReadCloser, error) { return newBody(body), nil }
	}
	if in.HasKey() {
		v := in.keyValues()
		if c.KeyFormat == KeySFString {
			v = []string{`"` + in.key[0] + `"`}
		}
		req.Header[keyHeaderName(c.KeyHeader)] = v
	}
	if c.Authorize != nil {
		if err := c.Authorize(ctx, req); err != nil {
			return nil, fmt.Errorf("idem: authorize: %w", err)
		}
		// The intent's own headers were checked by NewIntent; the hook's
		// may hold what net/http would refuse, or let through to harm.
		if err := checkRequestHeader(req.Header, true); err != nil {
			return nil, fmt.Errorf("idem: authorize: %w", err)
		}
	}
	return req, nil
}

// History is what earlier attempts of an intent showed, for an attempt made
// with Client.Attempt by a caller that keeps the trail itself, such as a
// queue across restarts.
type History struct {
	// Ambiguous reports that an earlier attempt left the operation in doubt
	// (its Decision.InDoubt): from then on only a success settles it.
	Ambiguous bool
}

// Step is the result of one attempt made by Client.Attempt.
type Step struct {
	// Attempt is the attempt's record.
	Attempt Attempt
	// Decision is the verdict on it, given the History.
	Decision Decision
	// Response is the response, or nil when none arrived. The caller must
	// close its Body.
	Response *http.Response
	// RetryAfter is the wait the response asked for, not capped; 0 when it
	// asked for none.
	RetryAfter time.Duration
}

// Attempt makes exactly one attempt of in, with the key, credentials,
// attempt timeout and wire recording of Do, and decides on it as Do would
// after the attempts h describes. It neither waits nor spends the retry
// budget: the caller owns the schedule. Most callers want Do; a durable queue,
// which spreads the attempts of an intent over hours and restarts, wants
// Attempt.
//
// A non-nil error means no attempt was made: ctx had ended, the policy is
// invalid, or the request could not be built or authorized.
func (c *Client) Attempt(ctx context.Context, in *Intent, h History) (Step, error) {
	var r run
	if err := c.initRun(&r, ctx, in); err != nil {
		return Step{}, err
	}
	r.ambiguous = r.ambiguous || h.Ambiguous
	resp, d, err := r.step(ctx)
	if err != nil {
		return Step{}, err
	}
	r.obs.attempt(ctx, &r, d.Action)
	s := Step{Attempt: r.attempts[0], Decision: d, Response: resp}
	if resp != nil {
		s.RetryAfter, _ = ParseRetryAfter(resp.Header.Get("Retry-After"), r.clock.Now())
	}
	return s, nil
}

// httpClient returns the http.Client attempts go through: HTTPClient, or
// http.DefaultClient, with RedirectPolicy in front of its own CheckRedirect.
func (c *Client) httpClient() *http.Client {
	c.hcOnce.Do(func() {
		base := c.HTTPClient
		if base == nil {
			base = http.DefaultClient
		}
		hc := *base
		hc.CheckRedirect = RedirectPolicy(c.KeyHeader, base.CheckRedirect)
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
