package idem

import (
	"context"
	"fmt"
	"time"

	"github.com/idem-go/idem/internal/delay"
)

// defaultPolicy returns the policy whose values a Policy takes for its zero
// fields: 4 attempts, backoff from 200 ms doubling to 10 s, Retry-After
// waited up to 60 s; no bound on elapsed time or on one attempt but the
// context's and the http.Client's. A queue, whose schedule spans hours,
// gives the backoff and the attempt timeout values of its own
// (queue.DefaultPolicy) and has limits of its own (queue.Options). A key in
// flight is polled for up to 30 s.
func defaultPolicy() Policy {
	return Policy{
		MaxAttempts: 4, BaseDelay: 200 * time.Millisecond, MaxDelay: 10 * time.Second, MaxRetryAfter: 60 * time.Second,
		InFlightWindow: 30 * time.Second,
	}
}

// Policy says how many attempts an operation gets and how long to wait
// between them: a call's, by Client and Transport, or each queued record's,
// by a queue. Each field means the same to every reader that takes it, by
// one rule (the retry rule of package internal/delay). The zero Policy is
// the default policy: 4 attempts, backoff from 200 ms doubling to 10 s,
// Retry-After waited up to 60 s, and no bound on elapsed time or on one
// attempt but the context's and the http.Client's. A queue takes the
// backoff, the attempt timeout and the Veto, each zero one taking
// queue.DefaultPolicy's value, and refuses the limits (MaxAttempts,
// MaxElapsed, MaxRetryAfter, InFlightWindow): a record's limits are its
// queue's Options. Negative fields are invalid. An intent may carry a
// Policy of its own (WithPolicy), which can only narrow its Client's: each
// limit the smaller, each delay the larger, both vetoes.
//
// A keyed request answered 409 (a request under its key is in flight) is
// not a failed attempt but a wait: the server has the operation, and a
// later request under the key gets its answer. It is polled with the same
// backoff and Retry-After rules, within InFlightWindow, and such a poll
// counts neither against MaxAttempts nor against the retry Budget; the
// polling has a floor and a ceiling of its own instead, which no policy
// lowers (see InFlightWindow).
type Policy struct {
	// MaxAttempts is the number of attempts, the first included; 1 means
	// no retries, 0 means 4. A queue refuses it: a record's is
	// queue.Options.MaxAttempts.
	MaxAttempts int
	// BaseDelay is the first retry's delay before jitter; 0 means 200 ms
	// (a queue's: 1 s). Each retry doubles it: the delay after attempt n
	// is BaseDelay doubled n-1 times, jittered.
	BaseDelay time.Duration
	// MaxDelay caps a retry's delay; 0 means 10 s (a queue's: 5 min).
	MaxDelay time.Duration
	// MaxElapsed bounds the time from the first attempt to the start of the
	// last; 0 means no bound but the context's deadline. A queue refuses
	// it: the key's retention and queue.Options.MaxAge bound a record.
	MaxElapsed time.Duration
	// AttemptTimeout bounds one attempt until its response headers arrive;
	// reading the final body is the caller's and is not bounded by it. A
	// timed-out attempt whose headers were sent is ambiguous. 0 means no
	// bound but the context's (a queue's: 30 s, for its horizon counts
	// each attempt).
	AttemptTimeout time.Duration
	// MaxRetryAfter caps the wait a server may ask for with Retry-After; 0
	// means 60 s. A longer demand ends the operation with
	// ErrRetryAfterTooLong and the wait in Error.RetryAfter. A queue
	// refuses it: a record's is queue.Options.MaxRetryAfter.
	MaxRetryAfter time.Duration
	// InFlightWindow bounds the polling of a key in flight: after a 409 to
	// a keyed request, requests follow with backoff (BaseDelay doubling to
	// MaxDelay, or the server's Retry-After up to MaxRetryAfter) while the
	// next would start within InFlightWindow of the operation's first 409,
	// the last one at the window's end. These polls are requests, listed
	// in the trail, but not attempts: MaxAttempts does not count them,
	// nor does the Budget, for a request under a key the server holds
	// cannot apply the operation again. Instead each waits at least 100
	// ms, and once 29 requests were answered 409 the one poll left comes
	// at the window's end, whatever the policy. When the window ends, the
	// operation ends Unknown with ErrAttemptsExhausted. MaxElapsed and the
	// context bound the polling too. 0 means 30 s. A queue refuses it: a
	// queued record's 409 is an attempt, which queue.Options.MaxAttempts
	// counts.
	InFlightWindow time.Duration
	// Veto, if not nil, may stop a retry the decision table allows. It is
	// called after an attempt the table would retry (a poll of a key in
	// flight included), before the wait and before the retry budget is
	// asked, with the attempt's facts: AttemptInfo.Keyed says whether the
	// request carried a key, and its Action is ActionRetry, the table's
	// advice. Returning true ends the operation there, as the table ends
	// one without success: Unknown if an attempt left it in doubt,
	// NotApplied otherwise, with an *Error matching ErrVetoed; no budget
	// token is spent, and OnAttempt hears ActionStop. It is never called
	// when the table stops or succeeds, so it narrows the table and never
	// widens it: it cannot make a POST without key retried. Use it for a
	// server that releases a key when its handler fails with a 5xx, where
	// a keyed retry of a 500 would run the handler again:
	//
	//	Veto: func(_ context.Context, ai idem.AttemptInfo) bool {
	//		return ai.Keyed && ai.Attempt.Status == http.StatusInternalServerError
	//	}
	//
	// It runs on the caller's goroutine (a queue's: a drainer's, for the
	// retries of a record; see queue.Options.Policy) and must be quick; a
	// panic in it is the caller's, as in any callback (a queue's drainer
	// holds the record's lane instead). nil vetoes nothing.
	Veto func(ctx context.Context, ai AttemptInfo) bool
	// HedgeAfter, if above 0, hedges the attempts of safe methods (GET,
	// HEAD, OPTIONS, TRACE, QUERY): when an attempt has had no response
	// headers for HedgeAfter, a second request goes to the same URL, and
	// the first answer is the attempt's, the other request cancelled and
	// its body closed. One hedge at most per attempt, within its timeout;
	// the attempt is one Attempt in the trail (Wire.Hedged), and
	// Stats.Requests counts both requests. A write, keyed or not, is never
	// hedged. The requests run on goroutines of their own: a panic in one
	// (in the HTTPClient's RoundTripper, say) is carried to the caller's
	// goroutine, as an unhedged request's reaches it, as an error holding
	// the value and the request's stack. 0 means no hedge. A queue refuses
	// it: its records are writes.
	HedgeAfter time.Duration
}

// withDefaults returns p with zero fields set to their defaults, or an error
// naming a negative field.
func (p Policy) withDefaults() (Policy, error) {
	if p.MaxAttempts < 0 || p.BaseDelay < 0 || p.MaxDelay < 0 || p.MaxElapsed < 0 || p.AttemptTimeout < 0 || p.MaxRetryAfter < 0 ||
		p.InFlightWindow < 0 || p.HedgeAfter < 0 {
		return p, p.negativeField()
	}
	def := defaultPolicy()
	if p.MaxAttempts == 0 {
		p.MaxAttempts = def.MaxAttempts
	}
	if p.BaseDelay == 0 {
		p.BaseDelay = def.BaseDelay
	}
	if p.MaxDelay == 0 {
		p.MaxDelay = def.MaxDelay
	}
	if p.MaxRetryAfter == 0 {
		p.MaxRetryAfter = def.MaxRetryAfter
	}
	if p.InFlightWindow == 0 {
		p.InFlightWindow = def.InFlightWindow
	}
	return p, nil
}

// narrow returns p, whose defaults are applied, narrowed by q, the policy
// of one call (WithPolicy), whose fields are not negative: q can only
// tighten p. A zero field of q leaves p's as it is. Every limit is the
// smaller of the two: MaxAttempts, MaxElapsed, AttemptTimeout,
// MaxRetryAfter, InFlightWindow (a zero MaxElapsed or AttemptTimeout of p
// is no limit, so q's applies). Every delay is the larger, which makes
// fewer requests: BaseDelay, MaxDelay, and HedgeAfter where p hedges, for
// q cannot turn hedging on. Both vetoes apply, p's first.
func (p Policy) narrow(q Policy) Policy {
	p.MaxAttempts = smaller(p.MaxAttempts, q.MaxAttempts)
	p.MaxElapsed = smaller(p.MaxElapsed, q.MaxElapsed)
	p.AttemptTimeout = smaller(p.AttemptTimeout, q.AttemptTimeout)
	p.MaxRetryAfter = smaller(p.MaxRetryAfter, q.MaxRetryAfter)
	p.InFlightWindow = smaller(p.InFlightWindow, q.InFlightWindow)
	p.BaseDelay = max(p.BaseDelay, q.BaseDelay)
	p.MaxDelay = max(p.MaxDelay, q.MaxDelay)
	if p.HedgeAfter > 0 {
		p.HedgeAfter = max(p.HedgeAfter, q.HedgeAfter)
	}
	switch pv, qv := p.Veto, q.Veto; {
	case pv == nil:
		p.Veto = qv
	case qv != nil:
		p.Veto = func(ctx context.Context, ai AttemptInfo) bool { return pv(ctx, ai) || qv(ctx, ai) }
	}
	return p
}

// smaller is the tighter of two limits, either of which may be 0 for none.
func smaller[T ~int | ~int64](a, b T) T {
	switch {
	case a == 0:
		return b
	case b == 0:
		return a
	}
	return min(a, b)
}

// negativeField returns the error naming p's first negative field. It is
// apart from withDefaults, which runs on every operation, because building
// its list of names costs more than the rest of withDefaults.
func (p Policy) negativeField() error {
	fields := [...]struct {
		name string
		v    int64
	}{
		{"MaxAttempts", int64(p.MaxAttempts)},
		{"BaseDelay", int64(p.BaseDelay)},
		{"MaxDelay", int64(p.MaxDelay)},
		{"MaxElapsed", int64(p.MaxElapsed)},
		{"AttemptTimeout", int64(p.AttemptTimeout)},
		{"MaxRetryAfter", int64(p.MaxRetryAfter)},
		{"InFlightWindow", int64(p.InFlightWindow)},
		{"HedgeAfter", int64(p.HedgeAfter)},
	}
	for _, f := range fields {
		if f.v < 0 {
			return fmt.Errorf("%w: %s is negative (%d)", ErrInvalidPolicy, f.name, f.v)
		}
	}
	return nil
}

// rule is what the retry rule (delay.Next) reads of p, whose defaults are
// applied.
func (p Policy) rule() delay.Policy {
	return delay.Policy{
		MaxAttempts: p.MaxAttempts, BaseDelay: p.BaseDelay, MaxDelay: p.MaxDelay,
		MaxElapsed: p.MaxElapsed, MaxRetryAfter: p.MaxRetryAfter,
	}
}
