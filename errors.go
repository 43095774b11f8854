package idem

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/idem-go/idem/redact"
)

// Outcome is what the caller is told about an intent: whether the operation
// took effect at the server.
//
// An operation that ends without success, by an answer, the policy or a
// caller's own schedule, is Unknown when an attempt of it left it in doubt,
// NotApplied when none did: the Outcome of Do's *Error, of a Step of
// Client.Try, and of a queued record that fails or expires.
type Outcome uint8

const (
	// NoOutcome, the zero Outcome, means there is none yet: the operation
	// has not ended, as a queued record that is not settled.
	NoOutcome Outcome = iota
	// Unknown means an attempt may have reached the server and no later
	// answer settled whether it took effect. The caller must reconcile (read
	// the resource, ask the server) rather than resubmit the operation under
	// a new key.
	Unknown
	// Applied means the server answered with success. Result.Replayed tells
	// whether the answer was a stored one.
	Applied
	// AlreadyApplied means the server answered that the goal is reached: a
	// DELETE answered 404 or 410 after an ambiguous attempt.
	AlreadyApplied
	// NotApplied means the server did not act: every attempt was never sent
	// or not processed, or the server rejected the request, and nothing left
	// the operation in doubt. The caller may create a new
	// intent.
	NotApplied
)

// String returns o's name, in snake_case: "unknown", "not_applied",
// "already_applied"; "none" for NoOutcome. It is the one spelling idem
// writes for an outcome in logs, errors, JSON, idemq's output and
// OpenTelemetry attributes.
func (o Outcome) String() string {
	switch o {
	case NoOutcome:
		return "none"
	case Unknown:
		return "unknown"
	case Applied:
		return "applied"
	case AlreadyApplied:
		return "already_applied"
	case NotApplied:
		return "not_applied"
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// Succeeded reports whether o is Applied or AlreadyApplied.
func (o Outcome) Succeeded() bool { return o == Applied || o == AlreadyApplied }

// Sentinel errors. Match them with errors.Is; an *Error wraps the outcome's
// sentinel (ErrOutcomeUnknown or ErrNotApplied) and the reason's.
var (
	// ErrOutcomeUnknown is wrapped by an *Error whose Outcome is Unknown.
	ErrOutcomeUnknown = errors.New("idem: outcome unknown")
	// ErrNotApplied is wrapped by an *Error whose Outcome is NotApplied.
	ErrNotApplied = errors.New("idem: not applied")
	// ErrKeyReused is returned when the server answered 422 to a keyed
	// request: it holds the key for another payload. It is a client bug: two
	// different operations were given the same key.
	ErrKeyReused = errors.New("idem: idempotency key reused with another payload")
	// ErrNoKey is returned when an ambiguous attempt of a method that is not
	// idempotent (POST, PATCH) cannot be retried because the intent has no
	// key.
	ErrNoKey = errors.New("idem: not idempotent and no key")
	// ErrAttemptsExhausted is returned when the policy's attempts or elapsed
	// time ran out before a definitive answer.
	ErrAttemptsExhausted = errors.New("idem: attempts exhausted")
	// ErrBudgetExhausted is returned when the Client's retry budget refused a
	// retry: the server has been failing and retries would add to its load.
	ErrBudgetExhausted = errors.New("idem: retry budget exhausted")
	// ErrRetryAfterTooLong is returned when the server asked to wait longer
	// than Policy.MaxRetryAfter; Error.RetryAfter holds the wait.
	ErrRetryAfterTooLong = errors.New("idem: Retry-After beyond the cap")
	// ErrServerSaidStop is returned when the server forbade a retry: by a
	// hint (Stripe-Should-Retry: false), or by replaying the answer it
	// stored under the key (Idempotent-Replayed, Idempotency-Replayed or
	// X-Idempotent-Replayed: true), which every retry would get again.
	ErrServerSaidStop = errors.New("idem: server said not to retry")
	// ErrRedirected is returned when a redirect ends an intent: a keyed
	// request that is not safe was redirected to another host, where its key
	// would not go, or from https to http, where it would go in clear, so
	// the redirect was not followed (NotApplied); or a 301 or 302 answered a
	// method that is not safe, which may mean "done, see there" as well as
	// "moved" (Unknown); or the redirect policy stopped following, as after
	// 10 redirects in a loop (NotApplied when every answer was a 307 or
	// 308). RedirectPolicy's own error for a loop wraps it too.
	ErrRedirected = errors.New("idem: redirect")
	// ErrInvalidRequest is returned when a request cannot be sent as it is
	// and waiting will not change that: a header net/http refuses (a
	// hop-by-hop header, a control byte in a value, as an Authorize hook may
	// add), a TLS certificate that does not verify (other than for its
	// dates: ErrCertificateDates), an invalid address. The outcome is
	// NotApplied: nothing reached the server.
	ErrInvalidRequest = errors.New("idem: invalid request")
	// ErrCertificateDates is returned when the server's TLS certificate was
	// refused only for its validity dates: expired or not yet valid by this
	// machine's clock. A device whose clock is wrong refuses every valid
	// certificate so. Nothing reached the server and the outcome is
	// NotApplied; unlike ErrInvalidRequest, setting the clock right may
	// cure it, and a queue holds its sends rather than fail them. The
	// x509.CertificateInvalidError, with the certificate and its dates, is
	// reachable with errors.As.
	ErrCertificateDates = errors.New("idem: certificate validity dates disagree with the clock")
	// ErrVetoed is returned when Policy.Veto stopped a retry the decision
	// table allowed. The outcome is the table's for an end at that point:
	// Unknown if an attempt left the operation in doubt, NotApplied
	// otherwise.
	ErrVetoed = errors.New("idem: retry vetoed by the policy")

	// ErrInvalidIntent is returned by NewIntent and UnmarshalBinary for a bad
	// method, URL, header, lane or encoding, and by Client.Do,
	// Client.Resume and Client.Try for a nil intent.
	ErrInvalidIntent = errors.New("idem: invalid intent")
	// ErrInvalidKey is returned for an idempotency key that is empty, longer
	// than MaxKeyLen, or holds a character outside visible ASCII or one of
	// '"', '\', ','.
	ErrInvalidKey = errors.New("idem: invalid idempotency key")
	// ErrSecretHeader is returned when a credential header is given to an
	// intent: by NewIntent for one redact.CredentialHeaders lists, and by
	// Client.Do, Client.Resume and Client.Try, wrapped in ErrInvalidRequest,
	// for one of the Client's own CredentialHeaders. Credentials belong in
	// Client.Authorize.
	ErrSecretHeader = errors.New("idem: secret header in intent")
	// ErrBodyTooLarge is returned for a body over MaxBodyBytes.
	ErrBodyTooLarge = errors.New("idem: body too large")
	// ErrInvalidPolicy is returned by Client.Do, Client.Resume and
	// Transport.RoundTrip when their Policy has a negative field, and by
	// Client.Try for a negative timeout.
	ErrInvalidPolicy = errors.New("idem: invalid policy")
)

// Error is returned by Client.Do when an intent ended without a definitive
// answer or with a protocol violation. It tells what is known: the Outcome,
// why the client stopped, and the attempts.
type Error struct {
	// Method and URL identify the intent.
	Method, URL string
	// Outcome is NotApplied or Unknown.
	Outcome Outcome
	// Reason says why no further attempt was made.
	Reason string
	// Status is the last response's status; 0 when the last attempt got no
	// response.
	Status int
	// RetryAfter is the wait the server asked for, when ErrRetryAfterTooLong
	// ended the intent; a queue uses it as the next attempt time.
	RetryAfter time.Duration
	// Attempts is the trail, first attempt first.
	Attempts []Attempt
	// Err is the cause: a sentinel such as ErrNoKey or ErrBudgetExhausted,
	// the context's error, or why a request could not be built; nil for a
	// rejection. The last attempt's transport error is in Attempts, and
	// errors.Is and errors.As reach it through Unwrap.
	Err error
}

// Error says what is known, without the URL's query, which may hold a
// secret.
func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "idem: %s %s: outcome %s", e.Method, redact.RawURL(e.URL), e.Outcome)
	if e.Reason != "" {
		b.WriteString(", ")
		b.WriteString(e.Reason)
	}
	n := len(e.Attempts)
	fmt.Fprintf(&b, " (%d attempt", n)
	if n != 1 {
		b.WriteByte('s')
	}
	if n > 0 {
		b.WriteString("; last: ")
		b.WriteString(attemptText(e.Attempts[n-1]))
	}
	b.WriteByte(')')
	return b.String()
}

// Unwrap returns the outcome's sentinel, the cause and the last attempt's
// transport error, so that errors.Is matches any of them.
func (e *Error) Unwrap() []error {
	errs := make([]error, 0, 3)
	switch e.Outcome {
	case Unknown:
		errs = append(errs, ErrOutcomeUnknown)
	case NotApplied:
		errs = append(errs, ErrNotApplied)
	}
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	if n := len(e.Attempts); n > 0 {
		if last := e.Attempts[n-1].Err; last != nil && last != e.Err {
			errs = append(errs, last)
		}
	}
	return errs
}
