package queue

import (
	"context"
	"fmt"
	"time"
)

// ResetClock sets the clock's high-water mark to the clock's current
// reading, in the file too, and reports EventClockReset with the old and new
// marks. It is an operator's call, for a mark a clock that read ahead by
// mistake left behind: while the clock reads earlier than the mark by more
// than Options.ClockTolerance, nothing is sent (EventClockHeld), and only
// the clock catching up, or ResetClock, ends that. Call it only once the
// clock is known to be right: the mark is what stops a clock set back from
// hiding a horizon. It also ends the holds on hosts whose certificate was
// refused for its dates, so that each is tried again.
//
// Records first sent while the clock read ahead keep that FirstSentAt; the
// next judgement finds it later than the clock and expires them (Outcome
// Unknown if an attempt was ambiguous), since when the server saw the key
// cannot be told.
func (q *Queue) ResetClock(ctx context.Context) error {
	if q.opts.ReadOnly {
		return ErrReadOnly
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	now := q.now()
	q.mu.Lock()
	closed := q.closed
	q.mu.Unlock()
	if closed {
		return ErrClosed
	}
	old, err := q.st.ResetMark(ctx, now)
	if err != nil {
		return fmt.Errorf("queue: ResetClock: %w", err)
	}
	q.mu.Lock()
	q.held = false
	q.endCertHolds()
	q.mu.Unlock()
	if err := q.st.Schedule(ctx, RejudgeLanes, "", now); err != nil { // held lanes wait for idle; judge them now
		q.report(err)
	}
	q.notify(Event{
		Kind: EventClockReset, OldMark: old, NewMark: now,
		Err: fmt.Errorf("queue: clock mark reset from %s to %s by ResetClock", fmtMark(old), fmtMark(now)),
	})
	q.poke()
	return nil
}

func fmtMark(t time.Time) string {
	if t.IsZero() {
		return "none"
	}
	return t.UTC().Format(time.RFC3339)
}
