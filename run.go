package idem

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/idem-go/idem/internal/delay"
	"github.com/idem-go/idem/internal/methods"
	"github.com/idem-go/idem/internal/wire"
	"github.com/idem-go/idem/redact"
)

// maxDrain bounds how much of an intermediate response body is read so that
// its connection can be reused; a larger body costs a new connection instead.
const maxDrain = 64 << 10

// runConfig is what a run takes from its owner, a Client or a Transport.
type runConfig struct {
	policy       Policy
	budget       runBudget
	deletePolicy DeletePolicy
	clock        clock
	rand         func() float64 // nil means math/rand/v2
	obs          observer
}

// run is the policy loop of one operation, the attempts of one intent by Do or
// of one request by Transport, and the one owner of what those attempts
// showed: the trail and whether the operation is in doubt. Its sender makes
// and sends each attempt's request.
type run struct {
	runConfig
	s           sender
	method, url string
	hasKey      bool
	origin      *url.URL // the intent's URL, for judging redirects; nil for a Transport
	shownURL    string   // redact.RawURL(url), made on first use by the observer

	// The trail is earlier, then latest: n attempts in all. The latest is
	// kept apart so that a run of one attempt, most runs, allocates a trail
	// only when it hands one out (trail), and a Transport's success none.
	earlier []Attempt
	latest  Attempt
	n       int
	inDoubt bool // an attempt so far left the operation in doubt (decision.InDoubt)
	// polls counts the requests of the trail answered 409 under the key,
	// which are not attempts (Policy.InFlightWindow); firstConflict is when
	// the first of them began, the start of the window.
	polls         int
	firstConflict time.Time
	// latestCtx is the context OnSend gave the latest attempt; nil without
	// OnSend.
	latestCtx context.Context
	// refused is why the http.Client did not follow the latest attempt's
	// redirect (its CheckRedirect's error); nil when it did, or none came.
	refused error
	// firstRec is the recorder of the first attempt, held by the block its
	// owner allocated for the operation; nil once the first attempt took
	// it. Later attempts make their own.
	firstRec *wire.Recorder
}

// trail returns a copy of the attempts so far, first attempt first; nil
// before the first.
func (r *run) trail() []Attempt {
	if r.n == 0 {
		return nil
	}
	return append(r.earlier[:len(r.earlier):len(r.earlier)], r.latest)
}

// loop makes attempts until a definitive answer or a reason to stop. On
// success it returns the final response. On a stop it returns the *Error,
// and the last response if one came and is still unread, for the caller to
// drain or pass on.
func (r *run) loop(ctx context.Context) (*http.Response, decision, *Error) {
	for {
		resp, d, err := r.step(ctx)
		if err != nil { // the attempt could not be made at all
			reason := "could not send: " + err.Error()
			if ctx.Err() != nil {
				reason, err = "context ended before the attempt", ctx.Err()
			}
			return nil, d, r.fail(r.outcome(), reason, 0, err)
		}
		if d.Action != ActionRetry && servedAnswer(d.Class) {
			r.budget.answered() // the server is answering
		}
		switch {
		case d.Action == ActionDone:
			r.obs.reportAttempt(ctx, r, ActionDone)
			return resp, d, nil
		case d.Action == ActionStop && d.Class == ClassRejected && d.Outcome == NotApplied && d.Cause == nil:
			// A final HTTP answer, as net/http returns one.
			r.obs.reportAttempt(ctx, r, ActionStop)
			return resp, d, nil
		case d.Action == ActionStop:
			r.obs.reportAttempt(ctx, r, ActionStop)
			return resp, d, r.fail(d.Outcome, d.Reason, 0, d.Cause)
		}
		if veto := r.policy.Veto; veto != nil && veto(ctx, r.attemptInfo(ActionRetry)) {
			// Before nextWait: a vetoed retry spends no budget token.
			r.obs.reportAttempt(ctx, r, ActionStop)
			return resp, d, r.fail(r.outcome(), "retry vetoed by the policy (Policy.Veto)", 0, ErrVetoed)
		}
		wait, ferr := r.nextWait(ctx, resp)
		if ferr != nil {
			r.obs.reportAttempt(ctx, r, ActionStop) // the decision said retry; the policy said no
			return resp, d, ferr
		}
		drain(resp)
		r.latest.Wait = wait
		r.obs.reportAttempt(ctx, r, ActionRetry)
		r.obs.retry(ctx, r, wait)
		if err := r.clock.Sleep(ctx, wait); err != nil {
			return nil, d, r.fail(r.outcome(), "context ended while waiting to retry", 0, err)
		}
	}
}

// step makes one attempt, decides on it and makes it the latest of the
// trail.
func (r *run) step(ctx context.Context) (*http.Response, decision, error) {
	resp, att, err := r.send(ctx)
	if err != nil {
		return nil, decision{}, err
	}
	f := facts{
		Method: r.method, HasKey: r.hasKey, Wire: att.Wire, Err: att.Err,
		Status: att.Status, EarlierInDoubt: r.inDoubt, DeletePolicy: r.deletePolicy,
	}
	if resp != nil {
		own := ownAnswer(resp, r.method)
		att.Status, f.Status, f.Header = own.StatusCode, own.StatusCode, own.Header
		f.Redirect, f.RedirectErr = r.redirectStop(own), r.refused
	}
	d := decide(f)
	att.Class = d.Class
	if r.n > 0 {
		r.earlier = append(r.earlier, r.latest)
	}
	r.latest, r.n = att, r.n+1
	r.inDoubt = r.inDoubt || d.InDoubt
	return resp, d, nil
}

// servedAnswer reports whether an attempt of class c was answered by a
// server at work: a success or a refusal of the request itself, not an
// outage's 5xx, a 429 or 409 that asks for later, nor a failure to send.
func servedAnswer(c Class) bool {
	switch c {
	case ClassApplied, ClassAlreadyApplied, ClassRejected, ClassKeyReused:
		return true
	}
	return false
}

// ownAnswer returns the answer to the request itself: when net/http followed
// a redirect that changed the method (a 303, or a 301 or 302 to a POST), the
// followed GET's answer says nothing of the request, whose own answer is the
// redirect. A 307 or 308 keeps the method, and its target's answer is the
// request's.
func ownAnswer(resp *http.Response, method string) *http.Response {
	for resp.Request != nil && resp.Request.Method != method && resp.Request.Response != nil {
		resp = resp.Request.Response
	}
	return resp
}

// redirectStop says why own, the request's own answer, is a redirect that
// was not followed: the http.Client's redirect policy stopped, or own is a
// 307 or 308 to a keyed write that would leave the intent's origin
// (RedirectPolicy).
func (r *run) redirectStop(own *http.Response) redirectStop {
	if r.refused != nil {
		return redirectRefused
	}
	if r.origin == nil || !r.hasKey || methods.Safe(r.method) {
		return redirectFollowed
	}
	if own.StatusCode != http.StatusTemporaryRedirect && own.StatusCode != http.StatusPermanentRedirect {
		return redirectFollowed
	}
	loc, err := own.Location()
	switch {
	case err != nil:
		return redirectFollowed
	case loc.Host != r.origin.Host:
		return redirectOffHost
	case dropsTLS(r.origin.Scheme, loc.Scheme):
		return redirectDropsTLS
	}
	return redirectFollowed
}

// send sends one attempt and records it in the trail. A non-nil error
// means no attempt was made: the context had ended or the request could not
// be built.
func (r *run) send(ctx context.Context) (*http.Response, Attempt, error) {
	if err := ctx.Err(); err != nil {
		return nil, Attempt{}, err
	}
	// The attempt timeout bounds the wait for response headers, not the
	// caller's reading of the final body: a timer cancels the attempt and is
	// stopped once headers are in.
	actx, cancel := ctx, context.CancelFunc(nil)
	var timer *attemptTimer
	if r.policy.AttemptTimeout > 0 {
		actx, cancel = context.WithCancel(ctx)
		timer = startTimer(r.clock, r.policy.AttemptTimeout, cancel)
	}
	rec, first := r.firstRec, r.firstRec != nil
	if !first {
		rec = wire.New()
	}
	r.firstRec = nil
	req, err := r.s.request(rec.WithContext(actx), first)
	r.latestCtx = nil
	if err == nil && r.s.hooked() {
		req, err = r.s.hook(req)
		r.latestCtx = req.Context()
	}
	if err != nil {
		timer.Stop()
		if cancel != nil {
			cancel()
		}
		return nil, Attempt{}, err
	}

	att := Attempt{Start: r.clock.Now()}
	resp, won, err := r.sendAttempt(actx, req, rec)
	spared := timer.Stop()
	if !spared && resp != nil && err == nil {
		// The headers came as the timer fired: their body is cut off with
		// the attempt's context. The attempt timed out, its answer unread.
		_ = resp.Body.Close()
		resp, err = nil, context.Canceled
	}
	r.refused = nil
	if err != nil && resp != nil {
		// Only a CheckRedirect's error comes with a response: the redirect
		// it refused to follow, an answer, whose body http.Client closed.
		r.refused, err = redirectError(err), nil
		resp.Body = http.NoBody
	}
	if err != nil && !spared {
		err = fmt.Errorf("%w: attempt timeout %v: %w", context.DeadlineExceeded, r.policy.AttemptTimeout, err)
	}
	att.Duration = r.clock.Since(att.Start)
	f := won.rec.Trace()
	att.Wire = Wire{Conns: f.Conns, WroteHeaders: f.WroteHeaders, WroteRequest: f.WroteRequest, GotResponse: err == nil, Resent: f.Resent, Hedged: won.hedged}
	if err != nil {
		att.Err = err
		if cancel != nil {
			cancel()
		}
		return nil, att, nil
	}
	if cancel != nil {
		resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
	}
	return resp, att, nil
}

// redirectError is the error of an http.Client's CheckRedirect, without
// the url.Error around it, which names the redirect's URL.
func redirectError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// attemptTimer cancels an attempt that waits too long for its headers.
// Stop and the timer's firing exclude each other: an attempt is either
// spared or cancelled, never cancelled after Stop said it was spared.
type attemptTimer struct {
	t    stopper
	done atomic.Bool // Stop or the timer has run
}

func startTimer(clk clock, d time.Duration, cancel context.CancelFunc) *attemptTimer {
	at := &attemptTimer{}
	at.t = clk.AfterFunc(d, func() {
		if at.done.CompareAndSwap(false, true) {
			cancel()
		}
	})
	return at
}

// Stop stops the timer and reports whether it spared the attempt: false
// when the timer fired first. A nil timer spares it.
func (at *attemptTimer) Stop() bool {
	if at == nil {
		return true
	}
	at.t.Stop()
	return at.done.CompareAndSwap(false, true)
}

// nextWait decides how long to wait before the next attempt, or returns the
// *Error that ends the run: the context, the retry rule (verdict: attempts,
// Retry-After cap, elapsed time, the window of a key in flight), the
// deadline or the budget, which a poll of a key in flight does not spend.
func (r *run) nextWait(ctx context.Context, resp *http.Response) (time.Duration, *Error) {
	out := r.outcome()
	if err := ctx.Err(); err != nil {
		return 0, r.fail(out, "context ended", 0, err)
	}
	var hint string
	if resp != nil {
		hint = resp.Header.Get("Retry-After")
	}
	now := r.clock.Now()
	v, poll := r.verdict(hint, now)
	switch v.Stop {
	case delay.AttemptsExhausted, delay.ElapsedExhausted:
		return 0, r.fail(out, v.Reason, 0, ErrAttemptsExhausted)
	case delay.RetryAfterTooLong:
		return 0, r.fail(out, v.Reason, v.RetryAfter, ErrRetryAfterTooLong)
	}
	if dl, ok := ctx.Deadline(); ok && !now.Add(v.Wait).Before(dl) {
		return 0, r.fail(out, "context deadline comes before the next attempt", 0, context.DeadlineExceeded)
	}
	if poll {
		return v.Wait, nil // a poll of a key in flight cannot add an effect
	}
	if !r.budget.take() {
		r.obs.m.budgetRefusals.Add(1)
		return 0, r.fail(out, "retry budget exhausted", 0, ErrBudgetExhausted)
	}
	return v.Wait, nil
}

// verdict is the retry rule's verdict at now on the latest request, whose
// answer asked to wait hint (Retry-After). A keyed 409 gets a poll's
// (pollVerdict), and poll is true; any other answer delay.Next's, which
// counts the attempts, not the polls.
func (r *run) verdict(hint string, now time.Time) (_ delay.Verdict, poll bool) {
	if r.latest.Class == ClassNotProcessed && r.latest.Status == http.StatusConflict {
		return r.pollVerdict(hint, now), true
	}
	rule := r.policy.rule()
	// n counts the polls too, so that the backoff goes on growing after
	// them; the limit on attempts does not.
	rule.MaxAttempts += r.polls
	v := delay.Next(rule, r.n, r.firstStart(), hint, now, r.random())
	if v.Stop == delay.AttemptsExhausted && r.polls > 0 {
		v.Reason = fmt.Sprintf("attempts exhausted (%d of %d, and %d polls of the key in flight)", r.n-r.polls, r.policy.MaxAttempts, r.polls)
	}
	return v, false
}

// The polling of a key in flight has a floor and a ceiling of its own,
// which no Policy lowers: polls spend neither attempts nor budget, so a
// policy of 1 ms waits would otherwise ask a server some 30,000 times in
// the default window of 30 s.
const (
	// minPollInterval is the shortest wait before a poll.
	minPollInterval = 100 * time.Millisecond
	// maxPollsPerWindow is the most requests answered 409 in one
	// InFlightWindow: the last one comes at the window's end.
	maxPollsPerWindow = 30
)

// pollVerdict is the verdict on the latest request, answered 409 under the
// key: a request under the key is in flight, and asking again is a wait,
// not an attempt. The wait is the backoff or the server's Retry-After, as
// after an attempt, but at least minPollInterval, and the polling lasts
// Policy.InFlightWindow from the operation's first 409 (not the latest run
// of them: a server that alternates 409 with 5xx still ends within the
// window), the last poll at the window's end; once maxPollsPerWindow-1
// polls were answered 409, that last one is the only one left. MaxElapsed
// bounds the polling as it bounds attempts.
func (r *run) pollVerdict(hint string, now time.Time) delay.Verdict {
	r.polls++
	if r.firstConflict.IsZero() {
		r.firstConflict = r.latest.Start
	}
	rule := r.policy.rule()
	rule.MaxAttempts, rule.MaxElapsed = 0, 0
	v := delay.Next(rule, r.n, time.Time{}, hint, now, r.random())
	if v.Stop != delay.Retry {
		return v
	}
	v.Wait = max(v.Wait, minPollInterval)
	left := r.firstConflict.Add(r.policy.InFlightWindow).Sub(now)
	if r.polls >= maxPollsPerWindow-1 {
		v.Wait = max(v.Wait, left)
	}
	if v.Wait > left {
		if left < minPollInterval || v.RetryAfter > left {
			return delay.Verdict{Stop: delay.ElapsedExhausted, RetryAfter: v.RetryAfter,
				Reason: fmt.Sprintf("a request under the key was still in flight after %v (InFlightWindow)", r.policy.InFlightWindow)}
		}
		v.Wait = left
	}
	if m := r.policy.MaxElapsed; m > 0 && now.Add(v.Wait).Sub(r.firstStart()) > m {
		return delay.Verdict{Stop: delay.ElapsedExhausted, RetryAfter: v.RetryAfter, Reason: fmt.Sprintf("max elapsed time %v reached", m)}
	}
	return v
}

// firstStart is when the run's first attempt began.
func (r *run) firstStart() time.Time {
	if len(r.earlier) > 0 {
		return r.earlier[0].Start
	}
	return r.latest.Start
}

// outcome is the outcome if the run ended now without success: Unknown once
// an attempt left the operation in doubt.
func (r *run) outcome() Outcome { return outcomeAfter(ClassNone, r.inDoubt) }

// logsURL reports whether anything will want the URL as a string: a
// Transport formats it only then.
func (r *run) logsURL() bool {
	return r.obs.hook != nil || r.obs.logger != nil || r.obs.onOperation != nil
}

// safeURL returns the URL without what may hold a secret, parsing it once
// per run however many records show it.
func (r *run) safeURL() string {
	if r.shownURL == "" {
		r.shownURL = redact.RawURL(r.url)
	}
	return r.shownURL
}

func (r *run) random() float64 {
	if r.rand != nil {
		return r.rand()
	}
	return rand.Float64()
}

func (r *run) fail(o Outcome, reason string, retryAfter time.Duration, cause error) *Error {
	e := &Error{
		Method: r.method, URL: r.url, Outcome: o, Reason: reason,
		RetryAfter: retryAfter, Attempts: r.trail(), Err: cause,
	}
	// Every caller names a reason, and a nil cause comes only with a
	// rejection, whose attempt has no transport error: Unwrap reaches the
	// last attempt's error in any case.
	if r.n > 0 {
		e.Status = r.latest.Status
	}
	return e
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
