// Package engine opens the idem Client's engine to the companion packages of
// this module, the queue first: they make one attempt at a time through a
// Client, with its requests, credentials, redirect rules, wire recording,
// decision table and counters, and keep the schedule themselves. Package idem
// exports no API for single attempts: a user runs operations with Client.Do,
// and a schedule spread over hours and restarts belongs to a queue.
//
// Package idem registers its implementation when it is initialised, before
// any code of a package that imports it runs; it never changes afterwards.
package engine

import (
	"context"
	"net/http"
	"time"
)

// Call is one attempt to make.
type Call struct {
	// Client is the *idem.Client that sends the attempt.
	Client any
	// Intent is the *idem.Intent to send.
	Intent any
	// InDoubt reports that an earlier attempt of the operation left it in
	// doubt: from then on only a success settles it.
	InDoubt bool
	// Timeout bounds the attempt until its response headers arrive, as
	// Policy.AttemptTimeout does; 0 means no bound but ctx. The Client's own
	// Policy is not read: the caller keeps the schedule.
	Timeout time.Duration
}

// Step is what one attempt showed, and the decision table's verdict on it.
// Class, Action and Outcome hold values of idem.Class, idem.Action and
// idem.Outcome.
type Step struct {
	Class   uint8
	Action  uint8
	Outcome uint8
	// InDoubt reports that this attempt left the operation in doubt.
	InDoubt bool
	// Reason says why the decision is to stop; empty otherwise.
	Reason string
	// Cause is the sentinel behind a decision to stop, such as
	// idem.ErrCertificateDates; nil otherwise.
	Cause error
	// Status is the status of the request's own answer; 0 when none came.
	Status int
	// Err is the attempt's transport error; nil when an answer came.
	Err error
	// Response is the response, or nil; the caller must close its Body.
	Response *http.Response
	// RetryAfter is the answer's Retry-After header, unparsed, for the
	// retry rule (package delay) to judge; "" for none.
	RetryAfter string
	// Report tells the Client's counters, logger and OnAttempt hook what
	// followed the attempt: action (an idem.Action) and, for a retry, the
	// wait before it. The decision table's Action is only advice to a
	// caller that keeps its own schedule, so the attempt is not reported
	// until the caller has decided: it calls Report exactly once, before
	// any further attempt. Attempt sets it; it is never nil.
	Report func(action uint8, wait time.Duration)
}

// Impl is what package idem registers.
type Impl struct {
	Attempt   func(context.Context, Call) (Step, error)
	Unsettled func(inDoubt bool) uint8
}

var impl Impl

// Register sets the implementation of Attempt and Unsettled. Package idem
// calls it once, from its init function; a second call panics.
func Register(i Impl) {
	if impl.Attempt != nil {
		panic("engine: Register called twice")
	}
	impl = i
}

// Attempt makes exactly one attempt of c.Intent through c.Client and decides
// on it. It neither waits nor spends the Client's retry budget. A non-nil
// error means no attempt was made: ctx had ended, the intent is nil or the
// timeout negative, or the request could not be built or authorized (an
// error wrapping idem.ErrInvalidRequest then means no attempt ever can be).
func Attempt(ctx context.Context, c Call) (Step, error) { return impl.Attempt(ctx, c) }

// Unsettled returns the outcome (an idem.Outcome) of an operation that ends
// without success, by no answer or by the caller's schedule: Unknown when an
// attempt left it in doubt, NotApplied otherwise.
func Unsettled(inDoubt bool) uint8 { return impl.Unsettled(inDoubt) }
