package queue

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/delay"
	"github.com/idem-go/idem/internal/engine"
	"github.com/idem-go/idem/internal/redact"
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
	EventClockHeld
	// EventError: the drainer met an error it will retry, such as a failed
	// commit.
	EventError
	// EventClockReset: ResetClock replaced the clock's high-water mark
	// OldMark with NewMark, an operator's decision worth a log line.
	EventClockReset
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
	// Err says why, for EventLaneHeld, EventClockHeld and EventError, and
	// what was done, for EventClockReset.
	Err error
	// OldMark and NewMark are the clock's high-water mark before and after
	// ResetClock, for EventClockReset; zero otherwise.
	OldMark, NewMark time.Time
}

// Wake tells the drainer the network is back: it ends an offline wait and
// lane holds, and makes records whose last attempt was never sent due at
// once. Retry-After waits the server asked for still hold.
func (q *Queue) Wake() {
	q.mu.Lock()
	now := q.opts.now()
	q.woken = now
	wasOffline := q.offline.on
	q.offline = offlineState{}
	for _, l := range q.idx.lanes {
		l.held = false
		if !l.busy && len(l.ids) > 0 {
			l.nextAt = now
			q.ready.push(l)
		}
	}
	q.mu.Unlock()
	if wasOffline {
		q.notify(Event{Kind: EventOnline})
	}
	q.poke()
}

// Run drains the queue until ctx ends or Close is called, then returns nil
// once the attempts under way have been recorded. Lanes drain in parallel,
// up to Options.Workers; within a lane, records go one at a time in enqueue
// order, one attempt per lease. Only one Run may drain a queue at a time.
func (q *Queue) Run(ctx context.Context) error {
	if q.opts.ReadOnly {
		return ErrReadOnly // nothing could be recorded
	}
	q.mu.Lock()
	switch {
	case q.closing:
		q.mu.Unlock()
		return ErrClosed
	case q.running:
		q.mu.Unlock()
		return ErrRunning
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	q.running, q.stop = true, stop
	q.draining.Add(1)
	q.mu.Unlock()
	defer func() {
		q.mu.Lock()
		q.running, q.stop = false, nil
		q.mu.Unlock()
		q.draining.Done()
	}()

	q.mu.Lock()
	quarantine := q.damaged
	q.damaged = nil
	q.mu.Unlock()
	for _, r := range quarantine { // found damaged by Open: reported once
		q.notify(Event{Kind: EventSettled, Record: r})
	}

	free := q.opts.Workers
	done := make(chan *lane, q.opts.Workers)
	lastSweep := q.opts.now()
	for {
		for drained := false; !drained; { // collect finished workers
			select {
			case l := <-done:
				free++
				q.release(l)
			default:
				drained = true
			}
		}
		if ctx.Err() != nil || q.isClosing() {
			for ; free < q.opts.Workers; free++ {
				q.release(<-done)
			}
			return nil
		}
		now := q.opts.now()
		if now.Sub(lastSweep) >= sweepEvery {
			lastSweep = now
			if err := q.guardedSweep(now); err != nil {
				q.notify(Event{Kind: EventError, Err: err})
			}
		}
		l, wait := q.dispatch(now, free)
		if l != nil {
			free--
			q.draining.Add(1)
			go func() {
				defer q.draining.Done()
				q.work(ctx, l)
				done <- l
			}()
			continue
		}
		t := time.NewTimer(min(wait, q.opts.idle))
		select {
		case <-ctx.Done():
		case <-q.kick:
		case l := <-done:
			free++
			q.release(l)
		case <-t.C:
		}
		t.Stop()
	}
}

// dispatch picks a due lane for a free worker, or says how long to wait.
func (q *Queue) dispatch(now time.Time, free int) (*lane, time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	wait := q.opts.idle
	if free == 0 {
		return nil, wait
	}
	if o := &q.offline; o.on {
		if o.probing {
			return nil, wait
		}
		if d := o.until.Sub(now); d > 0 {
			return nil, d
		}
	}
	l, d, ok := q.ready.due(now)
	if l == nil {
		if ok {
			wait = d
		}
		return nil, wait
	}
	l.busy = true
	if q.offline.on {
		q.offline.probing = true
	}
	return l, 0
}

// release returns a lane from a worker to the schedule.
func (q *Queue) release(l *lane) {
	q.mu.Lock()
	defer q.mu.Unlock()
	l.busy = false
	switch {
	case len(l.ids) == 0:
		q.ready.remove(l)
		delete(q.idx.lanes, l.name)
	case !l.held:
		q.ready.push(l)
	}
}

// work makes at most one attempt for the head of lane l, or settles it
// without one, then sets when the lane is next due.
func (q *Queue) work(ctx context.Context, l *lane) {
	now := q.opts.now()
	next, err := q.workHead(ctx, l.name, now)
	switch {
	case errors.Is(err, errMovedOn): // discarded by an operator meanwhile: next head
		next = now
	case err != nil:
		q.notify(Event{Kind: EventError, Err: err})
		next = now.Add(q.opts.Policy.BaseDelay)
	}
	q.mu.Lock()
	l.nextAt = next
	q.offline.probing = false // a probe that made no attempt is over too
	q.mu.Unlock()
}

// workHead handles the head of a lane and returns when the lane is next due.
func (q *Queue) workHead(ctx context.Context, name string, now time.Time) (time.Time, error) {
	r, err := q.head(name)
	if err != nil || r == nil {
		return now, err
	}
	if r.State == InFlight {
		// This lane's last result commit failed: as after a crash, the
		// attempt's end is unknown.
		orphaned(r)
		if err := q.commit(InFlight, r, nil); err != nil {
			return now, err
		}
	}
	if !q.due(r, now) {
		return r.NextAttempt, nil
	}
	q.mu.Lock()
	hwm := q.hwm
	q.mu.Unlock()
	switch v, reason := q.h.judge(r, now, hwm); v {
	case verdictHold:
		q.holdClock(reason)
		return now.Add(q.opts.idle), nil
	case verdictExpire:
		q.unholdClock()
		return now, q.settle(r, Pending, Expired, q.outcomeOf(r), reason, nil)
	}
	q.unholdClock()
	if err := q.lease(r, now); err != nil {
		return now, err
	}
	return q.attempt(ctx, r)
}

// due reports whether r's next attempt is due: its time has come, its last
// attempt was made by a clock ahead of now, or Wake was called after an
// attempt that never got out.
func (q *Queue) due(r *Record, now time.Time) bool {
	if !r.NextAttempt.After(now) {
		return true
	}
	if r.LastAttemptAt.After(now.Add(q.opts.ClockTolerance)) {
		// Scheduled by a clock that read ahead of this one (see
		// ResetClock): the schedule cannot be trusted, the judgement can.
		return true
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return r.LastClass == idem.ClassNeverSent && !q.woken.IsZero() && !q.woken.Before(r.LastAttemptAt)
}

// head returns the first unsettled record of the lane called name, or nil.
func (q *Queue) head(name string) (*Record, error) {
	for {
		q.mu.Lock()
		var id ID
		ok := false
		if l := q.idx.lanes[name]; l != nil {
			id, ok = l.head()
		}
		q.mu.Unlock()
		if !ok {
			return nil, nil
		}
		r, err := q.Get(id)
		if err == nil && !r.State.Settled() {
			return r, nil
		}
		if errors.Is(err, ErrDamaged) {
			if done, qerr := q.quarantineHead(name, id); done || qerr != nil {
				err = qerr // quarantined: on to the next head
			}
		}
		if !errors.Is(err, ErrNotFound) && err != nil {
			return nil, err
		}
		q.forget(name, id) // discarded, settled or quarantined behind the index's back
	}
}

// forget drops id from a lane's order.
func (q *Queue) forget(name string, id ID) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if l := q.idx.lanes[name]; l != nil {
		l.drop(id)
	}
}

// lease marks r in flight and counts the attempt, setting FirstSentAt if
// unset, before anything is sent: a crash after the send leaves the record
// marked as possibly sent, which is the safe side.
func (q *Queue) lease(r *Record, now time.Time) error {
	r.State = InFlight
	r.NumAttempts++
	r.LastAttemptAt = now
	r.leaseSetFirstSent = r.FirstSentAt.IsZero()
	if r.leaseSetFirstSent {
		r.FirstSentAt = now
	}
	q.mu.Lock()
	q.hwm = advanceMark(q.hwm, now)
	q.mu.Unlock()
	return q.commit(Pending, r, q.saveHWM)
}

// attempt sends one attempt of the leased r and records what followed.
func (q *Queue) attempt(ctx context.Context, r *Record) (time.Time, error) {
	// The timeout bounds the stored body's reading too, which the horizon
	// counts as part of the attempt.
	timeout := q.opts.Policy.AttemptTimeout
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	step, err := engine.Attempt(actx, engine.Call{Client: q.opts.Client, Intent: r.Intent, InDoubt: r.Ambiguous, Timeout: timeout})
	now := q.opts.now()
	if err != nil { // nothing was sent: ctx ended, credentials could not be had, or the request is invalid
		r.LastError = redact.Error(err)
		r.NumAttempts--
		r.unsend()
		if errors.Is(err, idem.ErrInvalidRequest) { // no later attempt can cure it
			r.LastClass = idem.ClassInvalid
			return now, q.settleLeased(r, Failed, q.outcomeOf(r), r.LastError, nil)
		}
		next := now.Add(q.backoff(r))
		if ctx.Err() != nil {
			next = now // shutting down: due at once on the next run
		}
		return next, q.requeue(r, next)
	}
	var res *Response
	if step.Response != nil {
		res = q.keep(step.Response)
	}
	class := idem.Class(step.Class)
	r.LastClass, r.LastStatus, r.LastError = class, step.Status, ""
	if step.Err != nil {
		r.LastError = redact.Error(step.Err)
	}
	q.observe(class)
	if step.InDoubt { // ambiguous, resent by net/http, or a keyed 409
		r.Ambiguous = true
	}
	switch action, outcome := idem.Action(step.Action), idem.Outcome(step.Outcome); {
	case action == idem.ActionDone:
		return now, q.settleLeased(r, Done, outcome, "", res)
	case action == idem.ActionStop && step.Status == http.StatusUnauthorized:
		return q.unauthorized(r, now)
	case action == idem.ActionStop:
		return now, q.settleLeased(r, Failed, outcome, step.Reason, res)
	}
	return q.retryLater(r, class, step.RetryAfter, now)
}

// retryLater schedules the next attempt of r, whose last attempt had class
// c, or settles it when no attempt could be made in time.
func (q *Queue) retryLater(r *Record, c idem.Class, retryAfter time.Duration, now time.Time) (time.Time, error) {
	if c == idem.ClassNeverSent {
		r.unsend()
	}
	p := q.opts.Policy
	if p.MaxAttempts > 0 && r.NumAttempts >= p.MaxAttempts {
		return now, q.settleLeased(r, Failed, q.outcomeOf(r), fmt.Sprintf("attempts exhausted (%d)", r.NumAttempts), nil)
	}
	if p.MaxRetryAfter > 0 && retryAfter > p.MaxRetryAfter {
		reason := fmt.Sprintf("server asked to wait %v (Retry-After), over the %v cap", retryAfter, p.MaxRetryAfter)
		return now, q.settleLeased(r, Failed, q.outcomeOf(r), reason, nil)
	}
	wait := max(q.backoff(r), retryAfter)
	next := now.Add(wait)
	if ok, reason := q.h.fitsBefore(r, next); !ok {
		if retryAfter > 0 {
			reason = fmt.Sprintf("the server asked to wait %v (Retry-After): %s", retryAfter, reason)
		}
		return now, q.settleLeased(r, Expired, q.outcomeOf(r), reason, nil)
	}
	return next, q.requeue(r, next)
}

// unauthorized handles a 401: one more attempt at once with fresh
// credentials, then the lane is held and reported, its records kept.
func (q *Queue) unauthorized(r *Record, now time.Time) (time.Time, error) {
	if !r.Ambiguous {
		r.unsend() // a 401 comes before any effect; the key was not used
	}
	if !r.reauthorized {
		r.reauthorized = true
		return now, q.requeue(r, now)
	}
	if err := q.requeue(r, now); err != nil {
		return now, err
	}
	err := fmt.Errorf("queue: lane %q: 401 Unauthorized with fresh credentials; held until Wake", r.Intent.Lane())
	q.mu.Lock()
	if l := q.idx.lanes[r.Intent.Lane()]; l != nil {
		l.held = true
	}
	q.mu.Unlock()
	q.notify(Event{Kind: EventLaneHeld, Lane: r.Intent.Lane(), Err: err})
	return now, nil
}

// unsend clears FirstSentAt if this lease set it: the server cannot have
// seen the attempt, so its key's retention has not started.
func (r *Record) unsend() {
	if r.leaseSetFirstSent {
		r.FirstSentAt = time.Time{}
	}
}

// requeue commits r as pending, due at next.
func (q *Queue) requeue(r *Record, next time.Time) error {
	r.State, r.NextAttempt, r.leaseSetFirstSent = Pending, next, false
	return q.commit(InFlight, r, nil)
}

// settleLeased settles a record that is in flight.
func (q *Queue) settleLeased(r *Record, s State, o idem.Outcome, reason string, res *Response) error {
	return q.settle(r, InFlight, s, o, reason, res)
}

// settle settles r, stored in state old.
func (q *Queue) settle(r *Record, old, s State, o idem.Outcome, reason string, res *Response) error {
	r.State, r.Outcome, r.Reason, r.Result, r.SettledAt = s, o, reason, res, q.opts.now()
	r.leaseSetFirstSent = false
	if err := q.commit(old, r, nil); err != nil {
		return err
	}
	q.settled(r)
	return nil
}

// errMovedOn is returned by commit when the stored record is no longer in
// the state its writer read, as after an operator's Discard.
var errMovedOn = errors.New("queue: record changed meanwhile")

// commit stores r over its stored self, which must still be in state old,
// runs also in the same transaction, and updates the index.
func (q *Queue) commit(old State, r *Record, also func(buckets) error) error {
	var oldSize, newSize int
	err := q.guard(func() error {
		return q.write(func(tx *bolt.Tx) error {
			b, err := open(tx)
			if err != nil {
				return err
			}
			var ok bool
			oldSize, newSize, ok, err = b.replace(r, old)
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("%w: record %d", errMovedOn, r.ID)
			}
			if also != nil {
				return also(b)
			}
			return nil
		})
	})
	if errors.Is(err, errMovedOn) {
		q.forget(r.lane(), r.ID)
	}
	if err != nil {
		return err
	}
	q.mu.Lock()
	q.idx.moved(r, old, oldSize, newSize)
	q.mu.Unlock()
	return nil
}

// settled tells the waiters and Notify that r settled.
func (q *Queue) settled(r *Record) {
	q.mu.Lock()
	ws := q.waiters[r.ID]
	delete(q.waiters, r.ID)
	q.mu.Unlock()
	q.notify(Event{Kind: EventSettled, Record: r}) // before Wait returns, so a waiter sees its effects
	for _, w := range ws {
		w <- r
	}
}

// outcomeOf is the outcome of r if it ends now without success.
func (q *Queue) outcomeOf(r *Record) idem.Outcome { return idem.Outcome(engine.Unsettled(r.Ambiguous)) }

// backoff is the wait before r's next attempt.
func (q *Queue) backoff(r *Record) time.Duration {
	return delay.Nth(q.opts.Policy.BaseDelay, q.opts.Policy.MaxDelay, max(r.NumAttempts, 1), q.opts.rand())
}

// observe feeds an attempt's class to offline detection. A request that
// could not be sent as it is (ClassInvalid) says nothing of the network:
// counting it either way would let one lane's bad requests flip the whole
// queue offline and back while other lanes get through.
func (q *Queue) observe(c idem.Class) {
	if c == idem.ClassInvalid {
		return
	}
	var ev EventKind
	q.mu.Lock()
	o := &q.offline
	o.probing = false
	if c != idem.ClassNeverSent {
		if o.on {
			ev = EventOnline
		}
		*o = offlineState{}
	} else {
		o.streak++
		switch {
		case o.on:
			o.delay = min(2*o.delay, offlineMaxDelay)
			o.until = q.opts.now().Add(o.delay)
		case o.streak >= offlineAfter:
			o.on, o.delay = true, offlineFirst
			o.until = q.opts.now().Add(o.delay)
			ev = EventOffline
		}
	}
	q.mu.Unlock()
	if ev != 0 {
		q.notify(Event{Kind: ev})
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

// keep reads the part of a response worth storing and closes it.
func (q *Queue) keep(resp *http.Response) *Response {
	defer resp.Body.Close()
	limit := int64(q.opts.MaxResultBody)
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	res := &Response{Status: resp.StatusCode, Header: http.Header{}, Truncated: err != nil} // a read cut short keeps what came
	if int64(len(body)) > limit {
		body, res.Truncated = body[:limit], true
	}
	if len(body) > 0 {
		res.Body = body
	}
	for _, k := range [...]string{"Content-Type", "Location", "Etag", "Idempotent-Replayed", "Idempotency-Replayed", "X-Idempotent-Replayed"} {
		if v := resp.Header.Values(k); len(v) > 0 {
			res.Header[k] = append([]string(nil), v...)
		}
	}
	return res
}
