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
// CreatedAt, limits it instead. A record first sent later than now, by
// more than the tolerance, was sent by a clock that read ahead: its horizon
// cannot be judged, and it expires.
func (h horizon) judge(r *Record, now, hwm time.Time) (verdict, string) {
	if !hwm.IsZero() && now.Before(hwm.Add(-h.clockTolerance)) {
		return verdictHold, fmt.Sprintf("clock reads %s, %v before the latest time seen (%s)",
			now.UTC().Format(time.RFC3339), hwm.Sub(now).Round(time.Second), hwm.UTC().Format(time.RFC3339))
	}
	if first := r.FirstSentAt; first.After(now.Add(h.clockTolerance)) {
		// First sent by a clock that read ahead of this one, since set
		// back (the mark reset, or capped): when the server saw the key
		// cannot be told, so neither can its horizon.
		return verdictExpire, fmt.Sprintf("first sent %s, after the clock's reading %s: the clock was wrong then or is now, and the horizon cannot be judged",
			first.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
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

// MaxClockStep is the furthest one clock reading moves the clock's
// high-water mark: a reading later than the mark by more than this moves it
// by MaxClockStep only. A clock that reads ahead by mistake, once, then
// holds sends for at most about MaxClockStep after it is set right, not
// until the wrong time comes; a clock that is right after a long time off
// is not held, and its mark catches up a step per attempt.
const MaxClockStep = 24 * time.Hour

// advanceMark returns the clock's high-water mark after a reading now: now if
// it is later, but no further than MaxClockStep past mark. A zero mark (a new
// file) takes now.
func advanceMark(mark, now time.Time) time.Time {
	switch {
	case mark.IsZero():
		return now
	case !now.After(mark):
		return mark
	case now.Sub(mark) > MaxClockStep:
		return mark.Add(MaxClockStep)
	}
	return now
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
