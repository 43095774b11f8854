package idem

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/idem-go/idem/internal/methods"
	"github.com/idem-go/idem/internal/replay"
	"github.com/idem-go/idem/redact"
)

// MethodQuery is the safe, idempotent QUERY method: a GET with a body.
const MethodQuery = methods.Query

// Class is what one attempt's result proves about the server's state.
type Class uint8

// The classes of an attempt. The zero Class, ClassNone, is no class: an
// attempt not yet made or judged.
const (
	// ClassNone is the zero Class: nothing is known yet.
	ClassNone Class = iota
	// ClassApplied: a 2xx answer, or 303 or 304. The operation took effect.
	ClassApplied
	// ClassAlreadyApplied: DELETE answered 404 or 410 where DeletePolicy
	// reads that as "already deleted".
	ClassAlreadyApplied
	// ClassNeverSent: no request headers reached a connection (dial refused,
	// DNS, connection reset before the request). The server cannot have
	// acted, and a later attempt may get through.
	ClassNeverSent
	// ClassNotProcessed: the server answered that it did not process the
	// request and may later: 408, 425, 429, or 409 for a keyed request (the
	// same key is in flight; see decision.InDoubt).
	ClassNotProcessed
	// ClassAmbiguous: the request may have reached the server and no
	// complete answer came back (timeout, reset, EOF), or a 5xx, or a 301 or
	// 302 answer to a method that is not safe (it may mean "done, see there"
	// as well as "moved").
	ClassAmbiguous
	// ClassKeyReused: 422 for a keyed request: the server holds this key for
	// another payload. A client bug, never retried.
	ClassKeyReused
	// ClassRejected: any other 4xx, and 3xx other than 303 and 304: the
	// server declined the request before acting on it.
	ClassRejected
	// ClassInvalid: the request cannot be sent as it is, and waiting will
	// not change that: the server's TLS certificate does not verify, or the
	// request is one net/http refuses, such as a header with a CR or LF
	// (ErrInvalidRequest). Nothing reached the server; never retried. A
	// certificate refused only for its validity dates is of this class too,
	// with its own cause (ErrCertificateDates): the clock may be what is
	// wrong, and a queue holds its sends rather than fail them.
	ClassInvalid

	numClasses = iota // how many Class values there are, ClassNone included
)

// String returns c's name, in snake_case: "never_sent", "key_reused". It is
// the one spelling idem writes for a class in logs, errors, JSON, idemq's
// output and OpenTelemetry attributes.
func (c Class) String() string {
	switch c {
	case ClassNone:
		return "none"
	case ClassApplied:
		return "applied"
	case ClassAlreadyApplied:
		return "already_applied"
	case ClassNeverSent:
		return "never_sent"
	case ClassNotProcessed:
		return "not_processed"
	case ClassAmbiguous:
		return "ambiguous"
	case ClassKeyReused:
		return "key_reused"
	case ClassRejected:
		return "rejected"
	case ClassInvalid:
		return "invalid"
	}
	return fmt.Sprintf("Class(%d)", uint8(c))
}

// DeletePolicy says when a DELETE answered 404 or 410 counts as done.
type DeletePolicy uint8

const (
	// DeleteAfterDoubt, the zero value, reads 404 and 410 as "already
	// deleted" only after an earlier attempt of the same intent left it in doubt:
	// that attempt is then the likely deleter. On a first attempt 404 means
	// what it says.
	DeleteAfterDoubt DeletePolicy = iota
	// DeleteAlways reads every 404 or 410 to a DELETE as "already deleted".
	DeleteAlways
	// DeleteNever reads 404 and 410 as rejections.
	DeleteNever
)

// Wire records what one attempt put on the wire, as net/http/httptrace
// reported it.
type Wire struct {
	// Conns counts the connections obtained. It exceeds 1 when net/http
	// itself resent the request on a fresh connection, as it does for
	// replayable requests after a reused connection failed.
	Conns int
	// WroteHeaders reports that the request headers were written to a
	// connection: from then on the server may have acted.
	WroteHeaders bool
	// WroteRequest reports that the whole request was written.
	WroteRequest bool
	// GotResponse reports that a response (its status and headers) arrived.
	GotResponse bool
	// Resent reports that net/http sent the request again on a fresh
	// connection after its headers had gone out on an earlier one, as it
	// does for replayable requests when a reused connection fails. The
	// earlier send may have been processed: whatever the final answer says,
	// short of success, the operation is in doubt.
	Resent bool
	// Hedged reports that a hedge, a second request, went out during the
	// attempt (Policy.HedgeAfter). The other facts are those of the request
	// whose answer or error the attempt reports.
	Hedged bool
}

// facts are what is known about one attempt: the input of classify and decide.
type facts struct {
	// Method is the request method.
	Method string
	// HasKey reports whether the request carried an idempotency key.
	HasKey bool
	// Wire is what reached the wire.
	Wire Wire
	// Err is the transport error; nil when a response arrived.
	Err error
	// Status is the response status; ignored when Err is not nil.
	Status int
	// Header is the response header; nil when there is none.
	Header http.Header
	// EarlierInDoubt reports that an earlier attempt of the same intent
	// left it in doubt (decision.InDoubt): it was ambiguous, resent by
	// net/http after its headers went out, or answered 409 under the key.
	EarlierInDoubt bool
	// DeletePolicy says how a DELETE answered 404 or 410 is read.
	DeletePolicy DeletePolicy
	// Redirect says why the answer, a redirect, was not followed; zero when
	// it was, or is no redirect. Client sets it; see RedirectPolicy.
	Redirect redirectStop
	// RedirectErr is the error with which the http.Client's redirect policy
	// stopped following (redirectRefused); nil otherwise.
	RedirectErr error
}

// redirectStop says why a redirect answering an attempt was not followed.
type redirectStop uint8

const (
	// redirectFollowed, the zero value: followed, or no redirect.
	redirectFollowed redirectStop = iota
	// redirectOffHost: a 307 or 308 to another host, where the key of a
	// write would not go.
	redirectOffHost
	// redirectDropsTLS: a 307 or 308 from https to http, where the key and
	// credentials of a write would go in clear.
	redirectDropsTLS
	// redirectRefused: the http.Client's redirect policy stopped following,
	// as RedirectPolicy does after 10 redirects (a loop).
	redirectRefused
)

// classify returns the class of one attempt. It performs no I/O and reads no
// clock.
//
// An error before any header was written is ClassNeverSent, unless it is one
// that waiting cannot cure (ClassInvalid): ErrInvalidRequest, or a TLS
// certificate that does not verify.
//
// An HTTP/2 stream the server refused (REFUSED_STREAM) or left above a
// GOAWAY's last stream id was never processed; net/http resends those itself
// when the body can be replayed, which it always can for an Intent, so they
// reach classify only as a later outcome of the same attempt, with
// Wire.Resent set: httptrace cannot tell them from a stream the server reset
// after reading it, so the attempt is in doubt, the safe side.
func classify(f facts) Class {
	if f.Err != nil {
		switch {
		case f.Wire.WroteHeaders:
			return ClassAmbiguous
		case permanent(f.Err):
			return ClassInvalid
		}
		return ClassNeverSent
	}
	s := f.Status
	switch {
	case s >= 200 && s <= 299, s == http.StatusSeeOther, s == http.StatusNotModified:
		return ClassApplied
	case (s == http.StatusMovedPermanently || s == http.StatusFound) && !methods.Safe(f.Method):
		// Post/redirect/get servers answer a POST they applied with 302
		// (or 301) as often as others answer "moved" without acting.
		return ClassAmbiguous
	case s >= 300 && s <= 399:
		return ClassRejected
	case (s == http.StatusNotFound || s == http.StatusGone) && f.Method == http.MethodDelete:
		return deleteGone(f)
	case s == http.StatusRequestTimeout, s == http.StatusTooEarly, s == http.StatusTooManyRequests:
		return ClassNotProcessed
	case s == http.StatusConflict && f.HasKey:
		return ClassNotProcessed
	case s == http.StatusUnprocessableEntity && f.HasKey:
		return ClassKeyReused
	case s >= 400 && s <= 499:
		return ClassRejected
	}
	// 5xx, and anything outside the defined ranges: a doubt is ambiguous.
	return ClassAmbiguous
}

func deleteGone(f facts) Class {
	switch f.DeletePolicy {
	case DeleteAlways:
		return ClassAlreadyApplied
	case DeleteNever:
		return ClassRejected
	}
	if f.EarlierInDoubt {
		return ClassAlreadyApplied
	}
	return ClassRejected
}

// Action is what to do after an attempt.
type Action uint8

const (
	// ActionDone ends with success: the operation is applied.
	ActionDone Action = iota + 1
	// ActionRetry makes another attempt, subject to policy, budget and
	// context.
	ActionRetry
	// ActionStop ends without success.
	ActionStop
	// ActionHold keeps the operation and sends nothing until something
	// outside the schedule changes: a queue holds a lane after a 401 that
	// fresh credentials did not cure, a host whose certificate the
	// clock puts outside its validity dates, and a record whose attempt,
	// a probe while the device is offline, did not reach the network.
	// Client.Do never holds.
	ActionHold
	// ActionExpire ends without success because the next attempt could not
	// start before the server may forget the key (or the intent's max
	// age): a queue settles the record as expired. Client.Do never
	// expires.
	ActionExpire
)

// String returns a's name: "done", "retry", "stop", "hold" or "expire",
// the one spelling idem writes for an action.
func (a Action) String() string {
	switch a {
	case ActionDone:
		return "done"
	case ActionRetry:
		return "retry"
	case ActionStop:
		return "stop"
	case ActionHold:
		return "hold"
	case ActionExpire:
		return "expire"
	}
	return fmt.Sprintf("Action(%d)", uint8(a))
}

// decision is the verdict on one attempt.
type decision struct {
	// Class is the attempt's class.
	Class Class
	// Action says whether to finish, retry or stop.
	Action Action
	// Outcome is the outcome of the intent if it ends after this attempt.
	Outcome Outcome
	// Reason says why the intent stops, for ActionStop; empty otherwise.
	Reason string
	// Cause is the sentinel error matching Reason, for ActionStop: ErrNoKey,
	// ErrKeyReused, ErrServerSaidStop, ErrRedirected, ErrInvalidRequest,
	// ErrCertificateDates, or nil for a plain rejection.
	Cause error
	// InDoubt reports that after this attempt the operation may have been
	// applied though no answer says so: the attempt was ambiguous, net/http
	// resent it after its headers had gone out (Wire.Resent), or a keyed
	// 409 said that a request under the key is in flight, which may still
	// apply. From then on every end short of success is Unknown: pass it on
	// as facts.EarlierInDoubt of every later attempt of the operation.
	InDoubt bool
}

// decide classifies an attempt and decides what follows, as the decision
// table of the package documentation says. Like classify it is a pure
// function.
func decide(f facts) decision {
	c := classify(f)
	d := decision{Class: c, InDoubt: leavesDoubt(c, f)}
	d.Outcome = outcomeAfter(c, f.EarlierInDoubt || d.InDoubt)
	switch c {
	case ClassApplied, ClassAlreadyApplied:
		d.Action = ActionDone
		return d
	case ClassNeverSent, ClassNotProcessed:
		d.Action = ActionRetry
	case ClassAmbiguous:
		if f.Err == nil && (f.Status == http.StatusMovedPermanently || f.Status == http.StatusFound) {
			d.Action, d.Cause = ActionStop, redirectCause(f)
			d.Reason = fmt.Sprintf("answered %d to %s: done (post/redirect/get) or moved, which cannot be told; not resent", f.Status, f.Method)
			return d // another attempt gets the same answer
		}
		if f.HasKey || methods.Idempotent(f.Method) {
			d.Action = ActionRetry
		} else {
			d.Action, d.Cause = ActionStop, ErrNoKey
			d.Reason = "not retried: " + f.Method + " without key"
		}
	case ClassKeyReused:
		d.Action, d.Cause = ActionStop, ErrKeyReused
		d.Reason = "server holds this key for another payload (422)"
		return d // a hint cannot make a reused key right
	case ClassRejected:
		d.Action = ActionStop
		d.Reason = fmt.Sprintf("rejected (%d)", f.Status)
		switch {
		case f.Redirect != redirectFollowed:
			d.Cause, d.Reason = redirectCause(f), redirectReason(f)
			return d // another attempt gets the same redirect
		case f.Status == http.StatusPreconditionFailed && f.EarlierInDoubt:
			d.Reason = "precondition failed (412) after an ambiguous attempt: that attempt may be the write that moved the validator"
		}
	case ClassInvalid:
		d.Action, d.Cause = ActionStop, ErrInvalidRequest
		d.Reason = "cannot be sent as it is: " + redact.Error(f.Err)
		if outsideDates(f.Err) {
			d.Cause = ErrCertificateDates
			d.Reason = "certificate refused for its validity dates, which the clock may have wrong: " + redact.Error(f.Err)
		}
		return d // no answer came, so no hint either
	}
	applyHint(&d, f)
	finalIfReplayed(&d, f)
	return d
}

// finalIfReplayed stops where d would retry an answer the server replayed
// from its store: under the key, every later request gets that answer
// again, whatever its status, so a retry cannot change it. A replayed 5xx
// stays in doubt (Unknown): the operation stored may have acted before it
// failed. No hint reopens a replayed answer.
func finalIfReplayed(d *decision, f facts) {
	if d.Action != ActionRetry || !replay.Replayed(f.Header) {
		return
	}
	d.Action, d.Cause = ActionStop, ErrServerSaidStop
	d.Reason = fmt.Sprintf("the server replayed its stored answer (%d): a retry under the key gets it again", f.Status)
}

// redirectCause is the Cause of a stop on a redirect: ErrRedirected, and
// the redirect policy's error when it stopped following.
func redirectCause(f facts) error {
	switch {
	case f.RedirectErr == nil:
		return ErrRedirected
	case errors.Is(f.RedirectErr, ErrRedirected):
		return f.RedirectErr
	}
	return fmt.Errorf("%w: %w", ErrRedirected, f.RedirectErr)
}

// redirectReason says why a redirect answering a rejected attempt was not
// followed.
//
// A redirect loop that reaches here ends NotApplied, unless an earlier
// attempt left the operation in doubt. Every hop was answered, and every
// answer to the request itself was a redirect that keeps it: a 307 or 308
// (a 301, 302 or 303 makes a write a GET, and the write is judged by that
// answer, Unknown or Applied, before this), or any redirect of a safe
// request. Each is a complete answer from the server that it did not act
// on the request at that URL, and that the request belongs elsewhere; the
// table reads a single unfollowed 307 as a rejection for the same reason,
// and a server that had acted would answer 2xx, or 303 to show the result.
// The hops are one attempt, not resent: another would meet the same loop.
func redirectReason(f facts) string {
	switch f.Redirect {
	case redirectOffHost:
		return fmt.Sprintf("redirected (%d) to another host, where the key would not go: not followed", f.Status)
	case redirectDropsTLS:
		return fmt.Sprintf("redirected (%d) from https to http, where the key and credentials would go in clear: not followed", f.Status)
	}
	why := "the redirect policy stopped following"
	if f.RedirectErr != nil {
		why += " (" + redact.Error(f.RedirectErr) + ")"
	}
	return fmt.Sprintf("redirected (%d), and %s: every answer was a redirect; not resent", f.Status, why)
}

// applyHint lets a server's explicit retry hint override the table.
func applyHint(d *decision, f facts) {
	if f.Err != nil {
		return
	}
	// EqualFold, as a replay header is read: no lowered copy per attempt.
	switch v := strings.TrimSpace(f.Header.Get("Stripe-Should-Retry")); {
	case strings.EqualFold(v, "true"):
		d.Action, d.Reason, d.Cause = ActionRetry, "", nil
	case strings.EqualFold(v, "false"):
		if d.Action == ActionRetry {
			d.Action, d.Cause = ActionStop, ErrServerSaidStop
			d.Reason = "server said not to retry (Stripe-Should-Retry: false)"
		}
	}
}

// leavesDoubt reports whether an attempt of class c leaves the operation
// possibly applied without an answer saying so.
func leavesDoubt(c Class, f facts) bool {
	switch {
	case c == ClassApplied, c == ClassAlreadyApplied:
		return false
	case c == ClassAmbiguous, f.Wire.Resent:
		return true
	}
	// A keyed 409: a request under this key is in flight, perhaps an
	// earlier attempt of ours, perhaps another replica's or process's with
	// the same supplied or derived key. It may still apply.
	return f.Err == nil && f.Status == http.StatusConflict && f.HasKey
}

// outcomeAfter is the outcome of an intent whose last attempt has class c.
// Once the operation is in doubt (see decision.InDoubt), only a success
// settles the question: a later 4xx proves that attempt was not applied, not
// that an earlier one was not (credentials may have expired, a rate limiter
// may answer before the idempotency layer).
func outcomeAfter(c Class, inDoubt bool) Outcome {
	switch {
	case c == ClassApplied:
		return Applied
	case c == ClassAlreadyApplied:
		return AlreadyApplied
	case inDoubt:
		return Unknown
	}
	return NotApplied
}

// permanent reports whether err, met before anything was written, is one
// that no later attempt can cure.
func permanent(err error) bool {
	var (
		verify   *tls.CertificateVerificationError
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
	)
	return errors.Is(err, ErrInvalidRequest) || errors.As(err, &verify) || errors.As(err, &unknown) ||
		errors.As(err, &hostname) || errors.As(err, &invalid)
}

// outsideDates reports whether err is a certificate refused for its
// validity dates alone: expired or not yet valid by the clock that judged it.
// A wrong host name or an unknown authority is refused whatever the clock
// reads.
func outsideDates(err error) bool {
	var invalid x509.CertificateInvalidError
	return errors.As(err, &invalid) && invalid.Reason == x509.Expired
}
