package queue

import (
	"context"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/idem-go/idem/internal/binenc"
)

// ResetClock sets the clock's high-water mark to the clock's current
// reading, in the file too, and reports EventClockReset with the old and new
// marks. It is an operator's call, for a mark a clock that read ahead by
// mistake left behind: while the clock reads earlier than the mark by more
// than Options.ClockTolerance, nothing is sent (EventClockHeld), and only
// the clock catching up, or ResetClock, ends that. Call it only once the
// clock is known to be right: the mark is what stops a clock set back from
// hiding a horizon.
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
	now := q.opts.now()
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return ErrClosed
	}
	old := q.hwm
	q.hwm = now
	q.mu.Unlock()
	err := q.guard(func() error {
		return q.write(func(tx *bolt.Tx) error {
			b, err := open(tx)
			if err != nil {
				return err
			}
			return putUint(b.meta, metaHWM, uint64(binenc.Nanos(now)))
		})
	})
	if err != nil {
		q.mu.Lock()
		if q.hwm.Equal(now) { // not moved on meanwhile: as it was
			q.hwm = old
		}
		q.mu.Unlock()
		return fmt.Errorf("queue: ResetClock: %w", err)
	}
	q.mu.Lock()
	q.held = false
	for _, l := range q.idx.lanes { // held lanes wait for idle; judge them now
		if !l.busy && !l.held && len(l.ids) > 0 {
			l.nextAt = now
			q.ready.push(l)
		}
	}
	q.mu.Unlock()
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
