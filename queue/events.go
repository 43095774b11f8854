package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/idem-go/idem/redact"
)

// EventKind says what an Event reports.
type EventKind uint8

const (
	// EventSettled: Record settled (done, failed or expired). A record Open
	// found damaged and quarantined (Record.Damaged) is reported so by the
	// first Run after that Open.
	EventSettled EventKind = iota + 1
	// EventLaneHeld: Lane is held after a 401 that fresh credentials did
	// not cure, or after a hook the drainer ran for its head panicked (Err
	// wraps ErrHookPanicked; see the package doc); its records wait for
	// Wake.
	EventLaneHeld
	// EventOffline: attempts stopped reaching the network; the drainer
	// probes once each Options.ProbeInterval, at no record's cost, until a
	// probe gets through or Wake (see the package doc).
	EventOffline
	// EventOnline: an attempt got through again; every lane is due again
	// at once.
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

// String returns k's name, in snake_case: "settled", "lane_held",
// "offline", "online", "clock_held", "error", "clock_reset", "moved_on".
func (k EventKind) String() string {
	switch k {
	case EventSettled:
		return "settled"
	case EventLaneHeld:
		return "lane_held"
	case EventOffline:
		return "offline"
	case EventOnline:
		return "online"
	case EventClockHeld:
		return "clock_held"
	case EventError:
		return "error"
	case EventClockReset:
		return "clock_reset"
	case EventMovedOn:
		return "moved_on"
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

// String describes e on one line, for a log: its kind, then what it names,
// as LogValue's attributes do: "settled id=7 state=done outcome=applied
// lane=payments". Like LogValue, it holds no key, body or URL query.
func (e Event) String() string {
	var b strings.Builder
	b.WriteString(e.Kind.String())
	for _, a := range e.attrs() {
		v := a.Value.String()
		if a.Value.Kind() == slog.KindTime {
			v = a.Value.Time().UTC().Format(time.RFC3339Nano)
		}
		if strings.IndexFunc(v, func(r rune) bool { return r <= ' ' || r == '"' || r == '=' || !unicode.IsPrint(r) }) >= 0 {
			v = strconv.Quote(v)
		}
		fmt.Fprintf(&b, " %s=%s", a.Key, v)
	}
	return b.String()
}

// LogValue makes e a group of attributes for log/slog: "kind", and those of
// its kind: "id", "state", "outcome", "lane", "in_doubt", "attempts" and
// "remote" of a settled record, "lane" of a held one, "error", and
// "old_mark" and "new_mark" of a clock reset. Names and values are spelt as
// everywhere in idem (State.String, idem.Outcome.String); the error is
// redacted as Record.LastError is.
func (e Event) LogValue() slog.Value {
	return slog.GroupValue(append([]slog.Attr{slog.String("kind", e.Kind.String())}, e.attrs()...)...)
}

// attrs are e's attributes after its kind.
func (e Event) attrs() []slog.Attr {
	var as []slog.Attr
	if r := e.Record; r != nil {
		as = append(as, slog.Uint64("id", uint64(r.ID)), slog.String("state", r.State.String()))
		if r.Outcome != 0 {
			as = append(as, slog.String("outcome", r.Outcome.String()))
		}
		if r.Intent != nil {
			as = append(as, slog.String("lane", r.Intent.Lane()))
		}
		as = append(as, slog.Int("attempts", r.NumAttempts))
		if r.InDoubt {
			as = append(as, slog.Bool("in_doubt", true))
		}
		if e.Remote {
			as = append(as, slog.Bool("remote", true))
		}
	}
	if e.Lane != "" {
		as = append(as, slog.String("lane", e.Lane))
	}
	if e.Err != nil {
		as = append(as, slog.String("error", redact.Error(e.Err)))
	}
	if !e.OldMark.IsZero() || !e.NewMark.IsZero() {
		as = append(as, slog.Time("old_mark", e.OldMark), slog.Time("new_mark", e.NewMark))
	}
	return as
}

// settled tells the waiters and Notify that r settled, here or, if remote,
// in another process sharing the store. The waiters are told once Notify has
// returned for the event, so a waiter sees its effects.
func (q *Queue) settled(r *Record, remote bool) {
	q.mu.Lock()
	ws := q.waiters[r.ID]
	delete(q.waiters, r.ID)
	q.mu.Unlock()
	tell := func() {
		for _, w := range ws {
			w <- r
		}
	}
	if remote && !q.opts.NotifyRemote {
		tell()
		return
	}
	q.ev.send(Event{Kind: EventSettled, Record: r, Remote: remote}, tell)
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
		r, err := q.st.Get(ctx, id)
		switch {
		case ctx.Err() != nil:
			return
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

// notify hands e to Options.Notify (see deliverer).
func (q *Queue) notify(e Event) { q.ev.send(e, nil) }

// report reports a store's failure that no caller waits for.
func (q *Queue) report(err error) { q.notify(Event{Kind: EventError, Err: err}) }

// delivery is an event on its way to Notify, and what to do once Notify has
// returned for it.
type delivery struct {
	e    Event
	then func()
}

// deliverer hands a Queue's events to Options.Notify one at a time, in the
// order they were made, from a goroutine of its own: no drainer and no caller
// of the Queue waits for Notify, so Notify may call any method of the Queue,
// Close included, and no one needs to know who called. While Notify is slow
// the events wait in memory, without bound: the drainer goes on and nothing
// is dropped.
type deliverer struct {
	notify func(Event) // nil: events go nowhere, what follows them runs at once

	mu       sync.Mutex
	change   *sync.Cond // the backlog grew, a call returned, or closing began
	backlog  []delivery
	seq      uint64              // numbers the calls
	running  map[uint64]struct{} // the calls under way, by number
	gen      int                 // the goroutine that delivers; an older one stops after its call
	started  bool                // a goroutine of generation gen delivers
	tookOver bool                // drain started a new generation
	closing  bool                // Close waits for the backlog: deliver it, then stop
	closed   bool                // Close is done: no goroutine delivers any more
}

func newDeliverer(notify func(Event)) *deliverer {
	d := &deliverer{notify: notify, running: map[uint64]struct{}{}}
	d.change = sync.NewCond(&d.mu)
	return d
}

// send queues e for Notify; then runs once Notify has returned for it.
// After Close, nothing delivers any more: the caller delivers e itself.
func (d *deliverer) send(e Event, then func()) {
	if then == nil {
		then = func() {}
	}
	if d.notify == nil {
		then()
		return
	}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		d.notify(e)
		then()
		return
	}
	d.backlog = append(d.backlog, delivery{e: e, then: then})
	if !d.started {
		d.started = true
		go d.run(d.gen)
	}
	d.change.Broadcast()
	d.mu.Unlock()
}

// run delivers the backlog while gen is the delivering generation, and
// until closing has emptied it.
func (d *deliverer) run(gen int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for d.gen == gen {
		if len(d.backlog) == 0 {
			if d.closing {
				return
			}
			d.change.Wait()
			continue
		}
		x := d.backlog[0]
		d.backlog[0] = delivery{}
		d.backlog = d.backlog[1:]
		d.seq++
		n := d.seq
		d.running[n] = struct{}{}
		d.mu.Unlock()
		d.notify(x.e)
		x.then()
		d.mu.Lock()
		delete(d.running, n)
		d.change.Broadcast()
	}
}

// flush returns once Notify has returned for every event sent before it
// was called.
func (d *deliverer) flush() {
	d.mu.Lock()
	defer d.mu.Unlock()
	last := d.seq + uint64(len(d.backlog))
	for {
		busy := d.seq < last
		for n := range d.running {
			busy = busy || n <= last
		}
		if !busy {
			return
		}
		d.change.Wait()
	}
}

// underWay returns the Notify calls under way now.
func (d *deliverer) underWay() map[uint64]bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[uint64]bool, len(d.running))
	for n := range d.running {
		out[n] = true
	}
	return out
}

// drain returns once every event sent so far has been delivered: Notify has
// returned for each, save the calls in under, which were under way when
// Close was called: Close's caller may be one of them, and it cannot return
// before Close does. If one of them holds the backlog up, a new goroutine
// delivers the rest meanwhile. Later events are delivered by their senders.
func (d *deliverer) drain(under map[uint64]bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closing = true
	d.change.Broadcast()
	for {
		held, others := false, 0
		for n := range d.running {
			if under[n] {
				held = true
			} else {
				others++
			}
		}
		if len(d.backlog) == 0 && others == 0 {
			break
		}
		if len(d.backlog) > 0 && held && !d.tookOver {
			d.tookOver = true
			d.gen++
			go d.run(d.gen)
		}
		d.change.Wait()
	}
	d.closed = true
}
