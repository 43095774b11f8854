package queue

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// EventKind says what an Event reports.
type EventKind uint8

const (
	// EventSettled: Record settled (done, failed or expired). A record Open
	// found damaged and quarantined (Record.Damaged) is reported so by the
	// first Run after that Open.
	EventSettled EventKind = iota + 1
	// EventLaneHeld: Lane is held after a 401 that fresh credentials did
	// not cure; its records wait for Wake.
	EventLaneHeld
	// EventOffline: attempts stopped reaching the network; the drainer
	// probes with a growing delay until an attempt gets through or Wake.
	EventOffline
	// EventOnline: an attempt got through again.
	EventOnline
	// EventClockHeld: the clock reads earlier than a time the queue has
	// seen; no send until it catches up, since no horizon can be judged.
	// Or a host's TLS certificate was refused for its validity dates
	// (idem.ErrCertificateDates); no send to that host until the clock
	// reads within them, Wake or ResetClock.
	EventClockHeld
	// EventError: the drainer met an error it will retry, such as a failed
	// commit.
	EventError
	// EventClockReset: ResetClock replaced the clock's high-water mark
	// OldMark with NewMark, an operator's decision worth a log line.
	EventClockReset
	// EventMovedOn: a record this Queue held changed meanwhile, and what
	// the drainer learned of it was dropped (Err wraps ErrMovedOn): an
	// operator discarded it, or, with a shared store, another process
	// took its lane over after this one's lease ran out and the record
	// is that process's now.
	EventMovedOn
)

func (k EventKind) String() string {
	switch k {
	case EventSettled:
		return "settled"
	case EventLaneHeld:
		return "lane held"
	case EventOffline:
		return "offline"
	case EventOnline:
		return "online"
	case EventClockHeld:
		return "clock held"
	case EventError:
		return "error"
	case EventClockReset:
		return "clock reset"
	case EventMovedOn:
		return "moved on"
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// Event reports something the drainer did or met.
type Event struct {
	Kind EventKind
	// Record is the settled record, for EventSettled.
	Record *Record
	// Lane is the held lane, for EventLaneHeld.
	Lane string
	// Err says why, for EventLaneHeld, EventClockHeld, EventError and
	// EventMovedOn, and what was done, for EventClockReset.
	Err error
	// OldMark and NewMark are the clock's high-water mark before and after
	// ResetClock, for EventClockReset; zero otherwise.
	OldMark, NewMark time.Time
	// Remote says, for EventSettled, that another process sharing the
	// store settled Record (Options.NotifyRemote); that process reported
	// it with Remote false. Metrics count settles whose Remote is false.
	Remote bool
}

// settled tells the waiters and Notify that r settled, here or, if remote,
// in another process sharing the store.
func (q *Queue) settled(r *Record, remote bool) {
	q.mu.Lock()
	ws := q.waiters[r.ID]
	delete(q.waiters, r.ID)
	q.mu.Unlock()
	if !remote || q.opts.NotifyRemote {
		q.notify(Event{Kind: EventSettled, Record: r, Remote: remote}) // before Wait returns, so a waiter sees its effects
	}
	for _, w := range ws {
		w <- r
	}
}

// relaySettles hands the records other processes settle, as feed names
// them, to the waiters and, with Options.NotifyRemote, to Notify, until
// ctx ends. A record no one waits for is not read unless Notify wants it.
func (q *Queue) relaySettles(ctx context.Context, feed <-chan ID) {
	for {
		var id ID
		select {
		case <-ctx.Done():
			return
		case id = <-feed:
		}
		q.mu.Lock()
		_, waited := q.waiters[id]
		q.mu.Unlock()
		if !waited && !q.opts.NotifyRemote {
			continue
		}
		r, err := q.st.Get(id)
		switch {
		case errors.Is(err, ErrNotFound): // discarded or swept since
		case err != nil:
			q.report(err)
		case r.State.Settled():
			q.settled(r, true)
		}
	}
}

func (q *Queue) holdClock(reason string) {
	q.mu.Lock()
	first := !q.held
	q.held = true
	q.mu.Unlock()
	if first {
		q.notify(Event{Kind: EventClockHeld, Err: errors.New("queue: sends held: " + reason + "; if the clock is right, the mark is not: see ResetClock")})
	}
}

func (q *Queue) unholdClock() {
	q.mu.Lock()
	q.held = false
	q.mu.Unlock()
}

// notify calls Options.Notify. Close looks for this function among its
// callers (see inNotify): keep it the one caller of Notify.
func (q *Queue) notify(e Event) {
	if q.opts.Notify == nil {
		return
	}
	q.notifying.Add(1)
	defer q.notifying.Add(-1)
	q.opts.Notify(e)
}

// report reports a store's failure that no caller waits for.
func (q *Queue) report(err error) { q.notify(Event{Kind: EventError, Err: err}) }
