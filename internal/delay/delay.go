// Package delay computes the waits between the attempts of an operation, for
// package idem's calls and for the queue alike: an exponential schedule
// (github.com/cenkalti/backoff/v4) with jitter drawn from a value the caller
// supplies, so that tests are exact.
package delay

import (
	"time"

	"github.com/cenkalti/backoff/v4"
)

// jitter is the randomization factor: a delay d is drawn from [d/2, 3d/2).
const jitter = 0.5

// Schedule returns the exponential schedule that starts at base and doubles
// up to max, without jitter and without an end: the caller judges elapsed
// time by its own clock and applies Jittered.
func Schedule(base, max time.Duration) *backoff.ExponentialBackOff {
	return backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(base),
		backoff.WithMaxInterval(max),
		backoff.WithMultiplier(2),
		backoff.WithRandomizationFactor(0),
		backoff.WithMaxElapsedTime(0),
	)
}

// Jittered spreads d over [d/2, 3d/2) by r in [0, 1), capped at max.
func Jittered(d time.Duration, r float64, max time.Duration) time.Duration {
	j := time.Duration(float64(d) * (1 - jitter + 2*jitter*r))
	return min(j, max)
}

// Nth returns the delay before retry n (1 for the first retry) of the
// schedule from base to max, jittered by r in [0, 1): for a queue, which
// persists its retry count rather than a schedule.
func Nth(base, max time.Duration, n int, r float64) time.Duration {
	b := Schedule(base, max)
	d := b.NextBackOff()
	for i := 1; i < n && d < max; i++ {
		d = b.NextBackOff()
	}
	return Jittered(d, r, max)
}
