package idem

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/idem-go/idem/internal/wire"
)

// DefaultKeyHeader is the header that carries the idempotency key unless
// Client.KeyHeader names another.
const DefaultKeyHeader = "Idempotency-Key"

// maxDrain bounds how much of an intermediate response body is read so that
// its connection can be reused; a larger body costs a new connection instead.
const maxDrain = 64 << 10

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
	// Its Timeout, if set, bounds each attempt.
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
	// intent and is wrapped in the *Error.
	Authorize func(ctx context.Context, req *http.Request) error
	// KeyHeader names the header carrying the key. If empty,
	// DefaultKeyHeader is used.
	KeyHeader string
	// KeyFormat is how the key is written. The zero value is KeyPlain.
	KeyFormat KeyFormat
	// DeletePolicy says when a DELETE answered 404 or 410 is done. The zero
	// value is DeleteAfterAmbiguous.
	DeletePolicy DeletePolicy

	budgetOnce sync.Once
	budget     *Budget

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
	// Response is the final response. The caller must close its Body.
	Response *http.Response
	// Attempts is the trail, first attempt first.
	Attempts []Attempt
}

// Attempt is the record of one attempt.
type Attempt struct {
	// Class is the attempt's class.
	Class Class
	// Status is the response status, or 0 when none arrived.
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
		return fmt.Sprintf("%s: %v", a.Class, a.Err)
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
func (c *Client) Do(ctx context.Context, in *Intent) (*Result, error) {
	if in == nil {
		return nil, fmt.Errorf("%w: nil intent", ErrInvalidIntent)
	}
	if ctx == nil {
		return nil, errors.New("idem: nil context")
	}
	p, err := c.Policy.withDefaults()
	if err != nil {
		return nil, err
	}
	r := run{c: c, in: in, p: p, clock: c.clockOrReal()}
	return r.loop(ctx)
}

// History is what earlier attempts of an intent showed, for an attempt made
// with Client.Attempt by a caller that keeps the trail itself, such as a
// queue across restarts.
type History struct {
	// Ambiguous reports that an earlier attempt was ambiguous.
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
	if in == nil {
		return Step{}, fmt.Errorf("%w: nil intent", ErrInvalidIntent)
	}
	if ctx == nil {
		return Step{}, errors.New("idem: nil context")
	}
	p, err := c.Policy.withDefaults()
	if err != nil {
		return Step{}, err
	}
	r := run{c: c, in: in, p: p, clock: c.clockOrReal(), ambiguous: h.Ambiguous}
	resp, d, err := r.step(ctx)
	if err != nil {
		return Step{}, err
	}
	s := Step{Attempt: r.attempts[0], Decision: d, Response: resp}
	if resp != nil {
		s.RetryAfter, _ = ParseRetryAfter(resp.Header.Get("Retry-After"), r.clock.Now())
	}
	return s, nil
}

func (c *Client) httpClient() *http.Client {
	if c.HTTPClient != nil {
		return c.HTTPClient
	}
	return http.DefaultClient
}

func (c *Client) budgetOrDefault() *Budget {
	if c.Budget != nil {
		return c.Budget
	}
	c.budgetOnce.Do(func() { c.budget = NewBudget(DefaultBudgetTokens) })
	return c.budget
}

func (c *Client) clockOrReal() clock {
	if c.clock != nil {
		return c.clock
	}
	return realClock{}
}

func (c *Client) random() float64 {
	if c.rand != nil {
		return c.rand()
	}
	return rand.Float64()
}

func (c *Client) keyHeader() string {
	if c.KeyHeader != "" {
		return c.KeyHeader
	}
	return DefaultKeyHeader
}

func (c *Client) keyValue(key string) string {
	if c.KeyFormat == KeySFString {
		return `"` + key + `"`
	}
	return key
}

// run is the state of one Do.
type run struct {
	c     *Client
	in    *Intent
	p     Policy
	clock clock

	start     time.Time
	attempts  []Attempt
	ambiguous bool                        // an attempt so far was ambiguous
	spent     int                         // budget tokens spent by this intent's retries
	bo        *backoff.ExponentialBackOff // made on the first retry
}

func (r *run) loop(ctx context.Context) (*Result, error) {
	r.start = r.clock.Now()
	for {
		resp, d, err := r.step(ctx)
		if err != nil { // the attempt could not be made at all
			reason := "could not send: " + err.Error()
			if ctx.Err() != nil {
				reason, err = "context ended before the attempt", ctx.Err()
			}
			return nil, r.fail(r.outcome(), reason, 0, err)
		}
		switch {
		case d.Action == ActionDone:
			r.c.budgetOrDefault().succeed(r.spent)
			return r.result(d.Outcome, resp), nil
		case d.Action == ActionStop && d.Class == ClassRejected && d.Outcome == NotApplied:
			return r.result(d.Outcome, resp), nil
		case d.Action == ActionStop:
			drain(resp)
			return nil, r.fail(d.Outcome, d.Reason, 0, d.Cause)
		}
		wait, err := r.nextWait(ctx, resp, d.Class)
		drain(resp)
		if err != nil {
			return nil, err
		}
		r.attempts[len(r.attempts)-1].Wait = wait
		if err := r.clock.Sleep(ctx, wait); err != nil {
			return nil, r.fail(r.outcome(), "context ended while waiting to retry", 0, err)
		}
	}
}

// step makes one attempt, decides on it and adds it to the trail.
func (r *run) step(ctx context.Context) (*http.Response, Decision, error) {
	resp, att, err := r.attempt(ctx)
	if err != nil {
		return nil, Decision{}, err
	}
	d := Decide(Facts{
		Method: r.in.method, HasKey: r.in.HasKey(), Wire: att.Wire, Err: att.Err,
		Status: att.Status, Header: header(resp), EarlierAmbiguous: r.ambiguous,
		DeletePolicy: r.c.DeletePolicy,
	})
	att.Class = d.Class
	r.attempts = append(r.attempts, att)
	r.ambiguous = r.ambiguous || d.Class == ClassAmbiguous
	return resp, d, nil
}

// attempt sends one attempt. A non-nil error means no attempt was made: the
// context had ended or the request could not be built or authorized.
func (r *run) attempt(ctx context.Context) (*http.Response, Attempt, error) {
	if err := ctx.Err(); err != nil {
		return nil, Attempt{}, err
	}
	actx, cancel := ctx, context.CancelFunc(nil)
	if r.p.AttemptTimeout > 0 {
		actx, cancel = context.WithTimeout(ctx, r.p.AttemptTimeout)
	}
	req, err := r.request(actx)
	if err != nil {
		if cancel != nil {
			cancel()
		}
		return nil, Attempt{}, err
	}
	var rec wire.Recorder
	req = req.WithContext(rec.WithContext(actx))

	att := Attempt{Start: r.clock.Now()}
	resp, err := r.c.httpClient().Do(req)
	att.Duration = r.clock.Now().Sub(att.Start)
	f := rec.Facts()
	att.Wire = Wire{Conns: f.Conns, WroteHeaders: f.WroteHeaders, WroteRequest: f.WroteRequest, GotResponse: f.GotResponse}
	if att.Wire.MayHaveReachedServer() {
		r.in.markSent(att.Start)
	}
	if err != nil {
		att.Err = err
		if cancel != nil {
			cancel()
		}
		return nil, att, nil
	}
	att.Status = resp.StatusCode
	if cancel != nil {
		resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
	}
	return resp, att, nil
}

// request builds the request of one attempt: the intent's bytes and headers,
// the key, and fresh credentials.
func (r *run) request(ctx context.Context) (*http.Request, error) {
	in := r.in
	var body io.Reader
	if in.body != nil {
		body = bytes.NewReader(in.body) // NewRequest sets GetBody, so net/http can resend it
	}
	req, err := http.NewRequestWithContext(ctx, in.method, in.url, body)
	if err != nil {
		return nil, fmt.Errorf("idem: building request: %w", err)
	}
	if in.header != nil {
		req.Header = in.header.Clone()
	}
	if in.key != "" {
		req.Header.Set(r.c.keyHeader(), r.c.keyValue(in.key))
	}
	if r.c.Authorize != nil {
		if err := r.c.Authorize(ctx, req); err != nil {
			return nil, fmt.Errorf("idem: authorize: %w", err)
		}
	}
	return req, nil
}

// nextWait decides how long to wait before the next attempt, or returns the
// *Error that ends the intent: attempts, elapsed time, Retry-After cap,
// budget or context deadline.
func (r *run) nextWait(ctx context.Context, resp *http.Response, c Class) (time.Duration, error) {
	out := r.outcome()
	if err := ctx.Err(); err != nil {
		return 0, r.fail(out, "context ended", 0, err)
	}
	if len(r.attempts) >= r.p.MaxAttempts {
		return 0, r.fail(out, fmt.Sprintf("attempts exhausted (%d of %d)", len(r.attempts), r.p.MaxAttempts), 0, ErrAttemptsExhausted)
	}
	now := r.clock.Now()
	wait, hinted := time.Duration(0), false
	if resp != nil {
		wait, hinted = ParseRetryAfter(resp.Header.Get("Retry-After"), now)
	}
	if hinted && wait > r.p.MaxRetryAfter {
		return 0, r.fail(out, fmt.Sprintf("server asked to wait %v (Retry-After), over the %v cap", wait, r.p.MaxRetryAfter), wait, ErrRetryAfterTooLong)
	}
	if !hinted {
		if r.bo == nil {
			r.bo = r.p.newBackOff()
		}
		wait = jittered(r.bo.NextBackOff(), r.c.random(), r.p.MaxDelay)
	}
	next := now.Add(wait)
	if r.p.MaxElapsed > 0 && next.Sub(r.start) > r.p.MaxElapsed {
		return 0, r.fail(out, fmt.Sprintf("max elapsed time %v reached", r.p.MaxElapsed), 0, ErrAttemptsExhausted)
	}
	if dl, ok := ctx.Deadline(); ok && !next.Before(dl) {
		return 0, r.fail(out, "context deadline comes before the next attempt", 0, context.DeadlineExceeded)
	}
	cost, ok := r.c.budgetOrDefault().take(c)
	if !ok {
		return 0, r.fail(out, "retry budget exhausted", 0, ErrBudgetExhausted)
	}
	r.spent += cost
	return wait, nil
}

// outcome is the outcome if the intent ended now without success.
func (r *run) outcome() Outcome {
	if r.ambiguous {
		return Unknown
	}
	return NotApplied
}

func (r *run) result(o Outcome, resp *http.Response) *Result {
	return &Result{Outcome: o, Replayed: IsReplayed(resp.Header), Response: resp, Attempts: r.attempts}
}

func (r *run) fail(o Outcome, reason string, retryAfter time.Duration, cause error) *Error {
	e := &Error{
		Method: r.in.method, URL: r.in.url, Outcome: o, Reason: reason,
		RetryAfter: retryAfter, Attempts: r.attempts, Err: cause,
	}
	if n := len(r.attempts); n > 0 {
		e.Status = r.attempts[n-1].Status
		if e.Err == nil {
			e.Err = r.attempts[n-1].Err
		}
	}
	if e.Reason == "" && cause != nil {
		e.Reason = cause.Error()
	}
	return e
}

func header(resp *http.Response) http.Header {
	if resp == nil {
		return nil
	}
	return resp.Header
}

// drain reads a bounded part of an unwanted body and closes it, so that its
// connection can be reused.
func drain(resp *http.Response) {
	if resp == nil {
		return
	}
	_, _ = io.CopyN(io.Discard, resp.Body, maxDrain)
	_ = resp.Body.Close()
}

// cancelOnClose ends an attempt's timeout context when the caller closes the
// final body, not before: the caller is still reading it.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c *cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}
