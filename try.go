package idem

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// Step is one attempt made by Client.Try and the decision table's verdict on
// it. The verdict is advice: the caller keeps the schedule, decides what
// follows, and says so with Report. Report is safe for concurrent use; the
// rest is plain data.
type Step struct {
	// Attempt is the attempt's record. Its Wait is 0: the caller's
	// schedule decides the wait and tells it to Report.
	Attempt Attempt
	// Action is the decision table's advice: ActionDone on success,
	// ActionRetry when another attempt cannot apply the operation twice,
	// ActionStop when none should follow (Reason says why).
	Action Action
	// Outcome is the operation's outcome if it ends after this attempt:
	// Applied or AlreadyApplied when Action is ActionDone; otherwise Unknown
	// when this attempt or an earlier one left the operation in doubt,
	// NotApplied when none did. It is the prior of the next Try.
	Outcome Outcome
	// InDoubt reports that this attempt left the operation in doubt: it
	// was ambiguous, answered 409 under the key, or resent by net/http
	// after its headers had gone out.
	InDoubt bool
	// Reason says why the advice is to stop; empty otherwise.
	Reason string
	// Cause is the sentinel behind advice to stop, such as
	// ErrCertificateDates or ErrRedirected; nil otherwise.
	Cause error
	// N numbers the attempt within its operation, from 1, for Report's
	// observers (AttemptInfo.N, the logs' http.request.resend_count): Try
	// sets 1, knowing nothing of earlier attempts; a caller that counts
	// them, as a queue does, sets it before calling Report.
	N int
	// Response is the response, or nil when none came (Attempt.Err says
	// why). The caller must close its Body. Its Retry-After header, if
	// any, is the caller's to judge. As for Result.Response, after a
	// redirect that made the request a GET it is the GET's response, while
	// Attempt.Status is the request's own answer.
	Response *http.Response
	// Report tells the Client's Stats, Logger and OnAttempt hook of the
	// attempt, with what the caller did next: ActionDone, ActionRetry
	// with the wait it scheduled, ActionStop, or ActionExpire or
	// ActionHold for a schedule that has them. They hear of the attempt
	// only then, for the table's Action is advice and only the caller
	// knows what followed; call it once the caller has decided, before
	// its next attempt. A Step whose Report is never called is missing from
	// them, Stats.Requests included; calls after the first do nothing.
	// Report is never nil and is safe to call from any goroutine; the hook
	// is called with the attempt's context: the one OnSend returned, or
	// Try's ctx.
	Report func(action Action, wait time.Duration)
}

// Try makes exactly one attempt of in and decides on it, for a caller that
// keeps its own schedule, as package queue does, or a job runner whose jobs
// are retried on its schedule: Try never waits, neither spends nor refills
// the retry budget, and reads nothing of the Client's Policy. Its request,
// credentials, redirect rules and decision table are those of Do, which
// most callers want: Do runs a whole operation, Try one attempt of it.
//
// prior is what earlier attempts of the operation showed, by Try, Do or
// Resume: Unknown when one left it in doubt, as the Outcome of a Step or
// an *Error says; then only a success settles the operation, and under
// DeleteAfterDoubt a DELETE answered 404 or 410 is AlreadyApplied. Any
// other value, NoOutcome for a first attempt, means none did, as far as the
// caller knows: a call of the Client that left the intent's key in doubt
// within DoubtWindow puts the attempt in doubt whatever prior says, and
// Try tells the Client what the attempt concluded as it returns, Report or
// not. timeout
// bounds the attempt until its response headers arrive, as
// Policy.AttemptTimeout does; 0 means no bound but ctx.
//
// A non-nil error means no attempt was made: ctx had ended, in or ctx is
// nil, timeout is negative (ErrInvalidPolicy), or the request could not be
// built or authorized (an error wrapping ErrInvalidRequest then means no
// attempt ever can be). Otherwise the caller must close Step.Response's
// Body, if any, and call Step.Report.
//
// An operation that the caller's schedule ends without success has the
// Outcome of its last Step, by the rule Outcome states: Unknown once an
// attempt left it in doubt, NotApplied otherwise.
func (c *Client) Try(ctx context.Context, in *Intent, prior Outcome, timeout time.Duration) (*Step, error) {
	if timeout < 0 {
		return nil, fmt.Errorf("%w: Try: timeout is negative (%v)", ErrInvalidPolicy, timeout)
	}
	// The caller's schedule replaces the Client's Policy: of a policy, one
	// attempt reads only its timeout.
	b := new(tryState)
	b.op.s.first = &b.parts
	r := &b.r
	if err := c.initRun(r, &b.op, ctx, in, Policy{AttemptTimeout: timeout}); err != nil {
		return nil, err
	}
	r.inDoubt = prior == Unknown
	dc := c.doubts.begin(r, in.key, c.doubtLimits())
	resp, d, err := r.step(ctx)
	if err != nil {
		return nil, err
	}
	dc.end(d.Outcome) // now: a runner that never calls Report may still try again
	b.ctx = ctx
	b.step = Step{
		Attempt: r.latest, Action: d.Action, Outcome: d.Outcome, InDoubt: d.InDoubt,
		Reason: dc.note(d.Reason), Cause: d.Cause, Response: resp, N: 1, Report: b.report,
	}
	return &b.step, nil
}

// tryState is what one Try allocates, in one block: the run, which the Step's
// Report keeps to the end, the Step and what the run's sender holds.
type tryState struct {
	op    opState
	parts firstParts
	r     run
	ctx   context.Context // Try's, for the observers
	step  Step
	once  sync.Once // Report reports once
}

// report is Step.Report.
func (b *tryState) report(action Action, wait time.Duration) {
	b.once.Do(func() {
		b.r.latest.Wait, b.r.n = wait, max(b.step.N, 1)
		b.r.obs.reportAttempt(b.ctx, &b.r, action)
	})
}
