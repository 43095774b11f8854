package idemtest

import (
	"net/http"
	"strconv"
	"time"
)

// Defaults used when the corresponding Options field is zero.
const (
	// DefaultKeyHeader is the header the draft and deployed servers use.
	DefaultKeyHeader = "Idempotency-Key"
	// DefaultRetention matches Stripe's documented minimum of 24 hours.
	DefaultRetention = 24 * time.Hour
	// DefaultLease is how long a claim protects a request in progress.
	DefaultLease = 30 * time.Second
	// DefaultDelay is how long FaultDelay holds a claim before the effect.
	DefaultDelay = time.Second
	// DefaultMaxBody is the largest request body the server reads.
	DefaultMaxBody = 1 << 20
	// MaxKeyLength is the longest key accepted, in characters after
	// sf-string decoding.
	MaxKeyLength = 255
)

// Options configures a Server (New) or a Wrapper (Wrap). The zero value is
// a server that accepts but does not require keys, injects no faults and
// uses the real clock.
type Options struct {
	// KeyHeader is the request header carrying the idempotency key.
	// Empty means DefaultKeyHeader.
	KeyHeader string

	// RequireKey makes a POST or PATCH (under Wrap, a request with one of
	// KeyedMethods) without a key fail with 400, as the draft allows. False
	// means a keyless POST is executed every time.
	RequireKey bool

	// SFStringOnly makes a bare key (abc rather than "abc") fail with 400,
	// as on a server that takes the draft's sf-string form only; a test of
	// a client's sf-string option needs it to fail when the option is
	// ignored. False accepts both forms, as deployed servers do.
	SFStringOnly bool

	// Retention is how long a completed record is kept, counted from the
	// key's first claim (the server's first sight of it, as Stripe counts a
	// key's age and as the queue's horizon assumes); after that the same key
	// is a new request. Zero or negative means DefaultRetention.
	Retention time.Duration

	// Lease is how long a claim stays live; a request finding a claim whose
	// lease has expired takes it over. Zero or negative means DefaultLease.
	Lease time.Duration

	// Now is the clock that judges Retention and Lease. Nil means time.Now.
	// FaultDelay still sleeps in real time.
	Now func() time.Time

	// Faults chooses the fault injected into each request that reaches a
	// handler. key is the request's valid key, or "" when it has none;
	// seen is how many earlier requests with that key reached the server
	// (0 for the first, and always 0 when key is ""). Faults must not read
	// r.Body and must be safe for concurrent use. Nil means no faults.
	Faults func(r *http.Request, key string, seen int) Fault

	// Delay is how long FaultDelay sleeps, in real time, while holding the
	// claim. Zero or negative means DefaultDelay.
	Delay time.Duration

	// RetryAfter is sent as a Retry-After header in whole seconds, rounded
	// up, with Fault503 and Fault429. Zero means Fault503 sends no header
	// and Fault429 sends "1".
	RetryAfter time.Duration

	// RefuseDial is asked on every dial through DialContext; true refuses
	// the connection. Nil means dials are refused only while SetDown(true)
	// is in force. It must be safe for concurrent use.
	RefuseDial func() bool

	// MaxBody is the largest request body read; a larger one gets 413.
	// Zero or negative means DefaultMaxBody. Wrap reads only the bodies of
	// requests that go through the key layer.
	MaxBody int64

	// KeyedMethods are the methods Wrap puts behind the key layer, spelled
	// as in the request line; other methods pass through to the handler,
	// with faults but without a key layer. Nil means POST and PATCH, the
	// methods the draft is for; an empty slice means none. New ignores it:
	// its routes fix their methods.
	KeyedMethods []string

	// ServerErrors is what Wrap does with a key whose handler answered 5xx
	// or panicked. The zero value, StoreServerErrors, keeps the answer as
	// the key's response, as the draft asks. New ignores it: its routes do
	// not fail on their own.
	ServerErrors ServerErrorPolicy
}

// withDefaults returns a copy of o with every zero field filled in, so the
// server never consults a default twice.
func (o Options) withDefaults() Options {
	if o.KeyHeader == "" {
		o.KeyHeader = DefaultKeyHeader
	}
	if o.Retention <= 0 {
		o.Retention = DefaultRetention
	}
	if o.Lease <= 0 {
		o.Lease = DefaultLease
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Delay <= 0 {
		o.Delay = DefaultDelay
	}
	if o.MaxBody <= 0 {
		o.MaxBody = DefaultMaxBody
	}
	return o
}

// retryAfter returns the Retry-After value for fault f, or "" for none.
func (o Options) retryAfter(f Fault) string {
	if o.RetryAfter <= 0 {
		if f == Fault429 {
			return "1"
		}
		return ""
	}
	// Round up: a client told "0" would retry at once, defeating the hint.
	secs := (o.RetryAfter + time.Second - 1) / time.Second
	return strconv.FormatInt(int64(secs), 10)
}

// Fault is a failure injected into one request. The zero value is FaultNone.
//
// A request moves through arrival, body read and key validation, claim,
// effect and response; each fault acts at one of those points, the same way
// whatever the claim found (a replay, a 409 or a 422 is dropped or replaced
// just like a fresh response). On routes without a key layer the claim is
// skipped and "commit" means performing the effect.
type Fault int

const (
	// FaultNone injects nothing.
	FaultNone Fault = iota
	// FaultCloseBeforeRead closes the connection on arrival, before the body
	// is read or anything is done: the server cannot have acted.
	FaultCloseBeforeRead
	// FaultCommitThenDrop runs claim, effect and completion, storing the
	// real response, then closes the connection without writing anything:
	// the classic ambiguous case, where a retry gets the replay.
	FaultCommitThenDrop
	// FaultDelay sleeps Options.Delay after the claim and before the
	// effect, holding the claim so concurrent retries get 409; then it
	// completes and responds, usually after the client has given up.
	FaultDelay
	// Fault503 fails before the effect: the claim is released so a retry
	// executes, and the answer is 503 with Retry-After when
	// Options.RetryAfter is set.
	Fault503
	// Fault500AfterEffect commits the effect and stores the real response,
	// but answers 500; a retry gets the replay of the stored response.
	Fault500AfterEffect
	// Fault429 fails before the effect like Fault503, answering 429 with
	// Retry-After (Options.RetryAfter, default 1 second).
	Fault429
)

// String returns a short lower-case name such as "commit-then-drop".
func (f Fault) String() string {
	switch f {
	case FaultNone:
		return "none"
	case FaultCloseBeforeRead:
		return "close-before-read"
	case FaultCommitThenDrop:
		return "commit-then-drop"
	case FaultDelay:
		return "delay"
	case Fault503:
		return "503"
	case Fault500AfterEffect:
		return "500-after-effect"
	case Fault429:
		return "429"
	}
	return "Fault(" + strconv.Itoa(int(f)) + ")"
}
