package queue

import (
	"fmt"
	"time"
)

// horizon holds what the horizon judgement needs; all durations are set.
type horizon struct {
	retention      time.Duration // how long the server keeps a key
	margin         time.Duration // kept off the retention for safety
	maxAge         time.Duration // since CreatedAt; 0 means none
	attemptTimeout time.Duration // how long an attempt may take
	clockTolerance time.Duration // how far the clock may read before the high-water mark
}

// verdict is what the horizon judgement says of one attempt.
type verdict uint8

const (
	verdictSend   verdict = iota + 1 // send the attempt
	verdictExpire                    // never send it: settle as expired
	verdictHold                      // the clock cannot be trusted: send nothing yet
)

// judge decides, before an attempt at now, whether r may be sent. hwm is the
// highest wall time the queue has seen; a clock reading well before it has
// gone backwards (an edge device booting with a wrong clock), and no horizon
// can be judged by it. It is pure: no clock, no I/O.
//
// An attempt is refused once it could end after the server may have
// forgotten the key: now + attemptTimeout > FirstSentAt + retention - margin.
// A record that never reached the server has no such horizon; MaxAge, since
// CreatedAt, limits it instead.
func (h horizon) judge(r *Record, now, hwm time.Time) (verdict, string) {
	if !hwm.IsZero() && now.Before(hwm.Add(-h.clockTolerance)) {
		return verdictHold, fmt.Sprintf("clock reads %s, %v before the latest time seen (%s)",
			now.UTC().Format(time.RFC3339), hwm.Sub(now).Round(time.Second), hwm.UTC().Format(time.RFC3339))
	}
	end := now.Add(h.attemptTimeout)
	if first := r.FirstSentAt; !first.IsZero() {
		if limit := h.keyLimit(first); end.After(limit) {
			return verdictExpire, fmt.Sprintf("past the horizon: first sent %s, so attempts must end by %s (retention %v less margin %v)",
				first.UTC().Format(time.RFC3339Nano), limit.UTC().Format(time.RFC3339Nano), h.retention, h.margin)
		}
	}
	if h.maxAge > 0 {
		if limit := r.Intent.CreatedAt().Add(h.maxAge); end.After(limit) {
			return verdictExpire, fmt.Sprintf("older than the max age %v (created %s)", h.maxAge, r.Intent.CreatedAt().UTC().Format(time.RFC3339))
		}
	}
	return verdictSend, ""
}

// keyLimit is the last instant an attempt may end for an intent first sent
// at first.
func (h horizon) keyLimit(first time.Time) time.Time {
	return first.Add(h.retention - h.margin)
}

// fitsBefore reports whether an attempt starting at next still passes the
// horizon; a wait the server asks for (Retry-After) may not.
func (h horizon) fitsBefore(r *Record, next time.Time) (bool, string) {
	v, reason := h.judge(r, next, time.Time{})
	return v == verdictSend, reason
}
