package idem

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/idem-go/idem/internal/wire"
)

// maxDrain bounds how much of an intermediate response body is read so that
// its connection can be reused; a larger body costs a new connection instead.
const maxDrain = 64 << 10

// engine is what a run takes from its owner, a Client or a Transport.
type engine struct {
	policy       Policy
	budget       *Budget
	deletePolicy DeletePolicy
	clock        clock
	rand         func() float64
	obs          observer
}

// run is the state of one operation: the attempts of one intent by Do, or of
// one request by Transport.
type run struct {
	engine
	method, url string
	hasKey      bool
	// build returns the request of one attempt, with a fresh body.
	build func(ctx context.Context) (*http.Request, error)
	// send sends it.
	send func(*http.Request) (*http.Response, error)
	// sent, if not nil, learns when an attempt may have reached the server;
	// ambiguous, if not nil, that an attempt was ambiguous.
	sent        func(time.Time)
	onAmbiguous func()

	start     time.Time
	attempts  []Attempt
	ambiguous bool // an attempt so far was ambiguous
	spent     int  // budget tokens spent by this run's retries
	bo        *backoff.ExponentialBackOff
}

// loop makes attempts until a definitive answer or a reason to stop. On
// success it returns the final response. On a stop it returns the *Error,
// and the last response if one came and is still unread, for the caller to
// drain or pass on.
func (r *run) loop(ctx context.Context) (*http.Response, Decision, *Error) {
	r.start = r.clock.Now()
	for {
		resp, d, err := r.step(ctx)
		if err != nil { // the attempt could not be made at all
			reason := "could not send: " + err.Error()
			if ctx.Err() != nil {
				reason, err = "context ended before the attempt", ctx.Err()
			}
			return nil, d, r.fail(r.outcome(), reason, 0, err)
		}
		switch {
		case d.Action == ActionDone:
			r.obs.attempt(ctx, r, ActionDone)
			r.budget.succeed(r.spent)
			return resp, d, nil
		case d.Action == ActionStop && d.Class == ClassRejected && d.Outcome == NotApplied:
			r.obs.attempt(ctx, r, ActionStop)
			return resp, d, nil
		case d.Action == ActionStop:
			r.obs.attempt(ctx, r, ActionStop)
			return resp, d, r.fail(d.Outcome, d.Reason, 0, d.Cause)
		}
		wait, ferr := r.nextWait(ctx, resp, d.Class)
		if ferr != nil {
			r.obs.attempt(ctx, r, ActionStop) // the decision said retry; the policy said no
			return resp, d, ferr
		}
		drain(resp)
		r.attempts[len(r.attempts)-1].Wait = wait
		r.obs.attempt(ctx, r, ActionRetry)
		r.obs.retry(ctx, r, wait)
		if err := r.clock.Sleep(ctx, wait); err != nil {
			return nil, d, r.fail(r.outcome(), "context ended while waiting to retry", 0, err)
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
		Method: r.method, HasKey: r.hasKey, Wire: att.Wire, Err: att.Err,
		Status: att.Status, Header: header(resp), EarlierAmbiguous: r.ambiguous,
		DeletePolicy: r.deletePolicy,
	})
	att.Class = d.Class
	r.attempts = append(r.attempts, att)
	if d.Class == ClassAmbiguous {
		r.ambiguous = true
		if r.onAmbiguous != nil {
			r.onAmbiguous()
		}
	}
	return resp, d, nil
}

// attempt sends one attempt. A non-nil error means no attempt was made: the
// context had ended or the request could not be built.
func (r *run) attempt(ctx context.Context) (*http.Response, Attempt, error) {
	if err := ctx.Err(); err != nil {
		return nil, Attempt{}, err
	}
	// The attempt timeout bounds the wait for response headers, not the
	// caller's reading of the final body: a timer cancels the attempt and is
	// stopped once headers are in.
	actx, cancel := ctx, context.CancelFunc(nil)
	var timer *time.Timer
	var timedOut atomic.Bool
	if r.policy.AttemptTimeout > 0 {
		actx, cancel = context.WithCancel(ctx)
		timer = time.AfterFunc(r.policy.AttemptTimeout, func() { timedOut.Store(true); cancel() })
	}
	var rec wire.Recorder
	req, err := r.build(rec.WithContext(actx))
	if err != nil {
		if cancel != nil {
			timer.Stop()
			cancel()
		}
		return nil, Attempt{}, err
	}

	att := Attempt{Start: r.clock.Now()}
	resp, err := r.send(req)
	if timer != nil {
		timer.Stop()
	}
	if err != nil && timedOut.Load() {
		err = fmt.Errorf("%w: attempt timeout %v: %w", context.DeadlineExceeded, r.policy.AttemptTimeout, err)
	}
	att.Duration = r.clock.Now().Sub(att.Start)
	f := rec.Facts()
	att.Wire = Wire{Conns: f.Conns, WroteHeaders: f.WroteHeaders, WroteRequest: f.WroteRequest, GotResponse: f.GotResponse}
	if att.Wire.MayHaveReachedServer() && r.sent != nil {
		r.sent(att.Start)
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

// nextWait decides how long to wait before the next attempt, or returns the
// *Error that ends the run: context, attempts, elapsed time, Retry-After
// cap, deadline or budget.
func (r *run) nextWait(ctx context.Context, resp *http.Response, c Class) (time.Duration, *Error) {
	out := r.outcome()
	if err := ctx.Err(); err != nil {
		return 0, r.fail(out, "context ended", 0, err)
	}
	if len(r.attempts) >= r.policy.MaxAttempts {
		return 0, r.fail(out, fmt.Sprintf("attempts exhausted (%d of %d)", len(r.attempts), r.policy.MaxAttempts), 0, ErrAttemptsExhausted)
	}
	now := r.clock.Now()
	wait, hinted := time.Duration(0), false
	if resp != nil {
		wait, hinted = ParseRetryAfter(resp.Header.Get("Retry-After"), now)
	}
	if hinted && wait > r.policy.MaxRetryAfter {
		return 0, r.fail(out, fmt.Sprintf("server asked to wait %v (Retry-After), over the %v cap", wait, r.policy.MaxRetryAfter), wait, ErrRetryAfterTooLong)
	}
	if !hinted {
		if r.bo == nil {
			r.bo = r.policy.newBackOff()
		}
		wait = jittered(r.bo.NextBackOff(), r.rand(), r.policy.MaxDelay)
	}
	next := now.Add(wait)
	if r.policy.MaxElapsed > 0 && next.Sub(r.start) > r.policy.MaxElapsed {
		return 0, r.fail(out, fmt.Sprintf("max elapsed time %v reached", r.policy.MaxElapsed), 0, ErrAttemptsExhausted)
	}
	if dl, ok := ctx.Deadline(); ok && !next.Before(dl) {
		return 0, r.fail(out, "context deadline comes before the next attempt", 0, context.DeadlineExceeded)
	}
	cost, ok := r.budget.take(c)
	if !ok {
		r.obs.m.budgetRefusals.Add(1)
		return 0, r.fail(out, "retry budget exhausted", 0, ErrBudgetExhausted)
	}
	r.spent += cost
	return wait, nil
}

// outcome is the outcome if the run ended now without success.
func (r *run) outcome() Outcome {
	if r.ambiguous {
		return Unknown
	}
	return NotApplied
}

func (r *run) fail(o Outcome, reason string, retryAfter time.Duration, cause error) *Error {
	e := &Error{
		Method: r.method, URL: r.url, Outcome: o, Reason: reason,
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
