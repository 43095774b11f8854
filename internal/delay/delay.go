// Package delay is the retry rule of package idem's calls and of the queue's
// records alike: after an attempt that the decision table would retry, wait
// this long, or stop, because. It is one pure function, Next, of the policy,
// the attempt number, when the first attempt began, the server's Retry-After
// and the time, with the jitter drawn by the caller, so that tests are exact
// and a queue, which persists only the attempt number, waits as a Client
// does. What else may end an operation (its context, a Client's retry
// budget, a queue's horizon) is its runner's.
package delay

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// jitter is the randomization factor: a delay d is drawn from [d/2, 3d/2).
const jitter = 0.5

// Policy is what the rule reads of an idem.Policy, its runner's defaults
// applied. A zero limit is no limit.
type Policy struct {
	MaxAttempts   int           // attempts, the first included
	BaseDelay     time.Duration // the first retry's backoff before jitter; each retry doubles it
	MaxDelay      time.Duration // caps a backoff, jitter included
	MaxElapsed    time.Duration // from the first attempt to the start of the next
	MaxRetryAfter time.Duration // the longest Retry-After waited
}

// Stop says why no attempt follows; Retry, the zero Stop, that one does.
type Stop uint8

// The stops, in the order Next judges them.
const (
	Retry             Stop = iota
	AttemptsExhausted      // Policy.MaxAttempts made
	RetryAfterTooLong      // the server asked for more than Policy.MaxRetryAfter
	ElapsedExhausted       // the next attempt would start after Policy.MaxElapsed
)

// Verdict is the rule's answer after an attempt.
type Verdict struct {
	Stop Stop
	// Wait is the wait before the next attempt when Stop is Retry.
	Wait time.Duration
	// RetryAfter is the wait the server asked for, parsed and not capped;
	// 0 when it asked for none.
	RetryAfter time.Duration
	// Reason says why, when Stop is not Retry.
	Reason string
}

// Next is the retry rule. After attempt n (1 for the first) of an operation
// whose first attempt began at first (zero when unknown, which no
// MaxElapsed bounds), answered with a Retry-After header of retryAfter (""
// for none), it says at now how long to wait before attempt n+1, or why
// there is none. r in [0, 1) places the backoff in its jitter range.
//
// The wait is the longer of the server's Retry-After and the backoff of
// attempt n: a server's short or zero Retry-After never makes the retries
// faster than the backoff would (a queue's attempts are unlimited by
// default, and a Retry-After of 0 on every answer must not make them a
// loop). A malformed Retry-After is no Retry-After.
func Next(p Policy, n int, first time.Time, retryAfter string, now time.Time, r float64) Verdict {
	if p.MaxAttempts > 0 && n >= p.MaxAttempts {
		return Verdict{Stop: AttemptsExhausted, Reason: fmt.Sprintf("attempts exhausted (%d of %d)", n, p.MaxAttempts)}
	}
	hint, _ := ParseRetryAfter(retryAfter, now)
	if p.MaxRetryAfter > 0 && hint > p.MaxRetryAfter {
		return Verdict{Stop: RetryAfterTooLong, RetryAfter: hint,
			Reason: fmt.Sprintf("server asked to wait %v (Retry-After), over the %v cap", hint, p.MaxRetryAfter)}
	}
	wait := max(Backoff(p.BaseDelay, p.MaxDelay, n, r), hint)
	if p.MaxElapsed > 0 && !first.IsZero() && now.Add(wait).Sub(first) > p.MaxElapsed {
		return Verdict{Stop: ElapsedExhausted, RetryAfter: hint, Reason: fmt.Sprintf("max elapsed time %v reached", p.MaxElapsed)}
	}
	return Verdict{Wait: wait, RetryAfter: hint}
}

// Backoff is the backoff after attempt n (1 for the first; less counts as
// 1): base doubled n-1 times, capped at max, then spread over [d/2, 3d/2)
// by r in [0, 1) and capped at max again. It is computed from n alone, in at
// most 63 doublings, so that a queue resumes its schedule after a restart
// from the attempt count it persisted. Its values are those of backoff/v4's
// ExponentialBackOff with multiplier 2 and no randomization (the test holds
// it to them), jittered.
func Backoff(base, max time.Duration, n int, r float64) time.Duration {
	d := base
	for i := 1; i < n && 0 < d && d < max; i++ {
		if float64(d) >= float64(max)/2 {
			d = max
		} else {
			d *= 2
		}
	}
	return min(time.Duration(float64(d)*(1-jitter+2*jitter*r)), max)
}

// ParseRetryAfter reads a Retry-After value (RFC 9110 10.2.3): delay-seconds
// or an HTTP-date, which is judged against now. It reports false for a
// missing or malformed value; a date in the past gives 0.
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if v[0] >= '0' && v[0] <= '9' {
		for i := 0; i < len(v); i++ {
			if v[i] < '0' || v[i] > '9' {
				return 0, false // delay-seconds is 1*DIGIT, nothing else
			}
		}
		const maxSecs = uint64(1<<63-1) / uint64(time.Second)
		// All digits, so the only error is ErrRange: huge, and the cap will
		// refuse it.
		secs, err := strconv.ParseUint(v, 10, 63)
		if err != nil || secs > maxSecs {
			secs = maxSecs
		}
		return time.Duration(secs) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(t.Sub(now), 0), true
}
