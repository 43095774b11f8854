package queue

import (
	"context"
	"errors"
	"time"

	"github.com/idem-go/idem"
)

// Wake tells the drainer the network is back: it ends an offline wait, lane
// holds and the holds on hosts whose certificate the clock put outside its
// dates, and makes records whose last attempt was never sent due at once.
// Retry-After waits the server asked for still hold. Wake takes no
// context: a store bounds its call itself (see Store).
func (q *Queue) Wake() {
	now := q.now()
	q.mu.Lock()
	q.woken = now
	wasOffline := q.offline.on
	q.offline = offlineState{}
	q.endCertHolds()
	q.mu.Unlock()
	if err := q.st.Schedule(context.Background(), WakeLanes, "", now); err != nil { // not under mu: a store may wait on its disk or network
		q.report(err)
	}
	if wasOffline {
		q.notify(Event{Kind: EventOnline})
	}
	q.poke()
}

// Run drains the queue until ctx ends or Close is called, then returns nil
// once the attempts under way have been recorded and Options.Notify has
// returned for the events sent meanwhile. Lanes drain in parallel,
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
	q.drainCtx = context.WithoutCancel(ctx)
	damaged := q.damaged // found damaged by the store's opening: reported once
	q.damaged = nil
	q.draining.Add(1)
	q.mu.Unlock()
	defer func() {
		q.mu.Lock()
		q.running, q.stop = false, nil
		q.mu.Unlock()
		q.draining.Done()
		q.ev.flush() // Run's events reach Notify before it returns; Close does not wait for this
	}()

	if feed := q.info.Settles; feed != nil {
		q.draining.Add(1)
		go func() {
			defer q.draining.Done()
			q.relaySettles(ctx, feed)
		}()
	}
	for _, r := range damaged {
		q.notify(Event{Kind: EventSettled, Record: r})
	}

	free := q.opts.Workers
	done := make(chan struct{}, q.opts.Workers) // a worker is done with its lane
	lastSweep := q.now()
	for {
		for drained := false; !drained; { // collect finished workers
			select {
			case <-done:
				free++
			default:
				drained = true
			}
		}
		if ctx.Err() != nil || q.isClosing() {
			for ; free < q.opts.Workers; free++ {
				<-done
			}
			return nil
		}
		now := q.now()
		if now.Sub(lastSweep) >= sweepEvery {
			lastSweep = now
			if err := q.st.Sweep(q.drainCtx, now); err != nil {
				q.report(err)
			}
		}
		lanes, wait := q.dispatch(now, free)
		for _, l := range lanes {
			free--
			q.draining.Add(1)
			go func() {
				defer q.draining.Done()
				q.work(ctx, l)
				done <- struct{}{}
			}()
		}
		if len(lanes) > 0 {
			continue
		}
		q.sig.idle.signal(idlePass{now: now, free: free})
		t := time.NewTimer(min(wait, q.opts.idle))
		select {
		case <-ctx.Done():
		case <-q.kick:
		case <-q.info.Wakeups: // nil, never ready, for a store of one process
		case <-done:
			free++
		case <-t.C:
		}
		t.Stop()
	}
}

// dispatch takes due lanes for the free workers, or says how long to wait.
// Offline, it takes one, the probe. TakeDue runs without Queue.mu, which a
// store that waits on its disk or network would hold from every other
// caller.
func (q *Queue) dispatch(now time.Time, free int) ([]string, time.Duration) {
	wait := q.opts.idle
	if free == 0 {
		return nil, wait
	}
	d, ok, offline := q.offlineWait(now)
	if !ok {
		return nil, d
	}
	n := free
	if offline {
		n = 1
	}
	lanes, d, err := q.st.TakeDue(q.drainCtx, now, n)
	if err != nil {
		q.report(err)
		return nil, wait
	}
	if len(lanes) == 0 {
		if d > 0 {
			wait = d
		}
		return nil, wait
	}
	q.mu.Lock()
	if q.offline.on { // also if offline began during TakeDue: these lanes probe
		q.offline.probing = true
	}
	q.mu.Unlock()
	return lanes, 0
}

// offlineWait says whether the drainer may take a lane now (ok), or how
// long it waits first, and whether the queue is offline: then it sends one
// probe at a time, when its delay is up.
func (q *Queue) offlineWait(now time.Time) (wait time.Duration, ok, offline bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	o := &q.offline
	switch {
	case !o.on:
		return 0, true, false
	case o.probing:
		return q.opts.idle, false, true
	}
	if d := o.until.Sub(now); d > 0 {
		return d, false, true
	}
	return 0, true, true
}

// work makes at most one attempt for the head of lane l, or settles it
// without one, then sets when the lane is next due; then, while the store
// hands the worker another lane with the settle that gave l back
// (laneHandoff), the same for that lane.
func (q *Queue) work(ctx context.Context, l string) {
	h, _ := q.st.(laneHandoff)
	for {
		q.workLane(ctx, l)
		if h == nil {
			return
		}
		next, ok := h.HandedOver(l)
		if !ok {
			return
		}
		if ctx.Err() != nil || !q.takesLanes() {
			// Given back untouched, due at once: the dispatcher decides.
			if err := q.st.SetNext(q.drainCtx, next, q.now()); err != nil {
				q.report(err)
			}
			return
		}
		l = next
	}
}

// laneHandoff is a store that may take another due lane for a worker in
// the statement that settles the last record of the worker's lane and gives
// that lane back, sparing the worker a TakeDue of its own (package
// pgqueue's is one). The worker then goes on with that lane as with one
// TakeDue gave it.
type laneHandoff interface {
	// HandedOver returns the lane taken for the worker that held lane,
	// once SetNext gave lane back, and forgets it; false if none was.
	HandedOver(lane string) (string, bool)
}

// takesLanes reports whether a worker may go on with a lane handed over:
// the queue is neither closing nor offline (see offlineState), when the
// dispatcher takes lanes on its own terms.
func (q *Queue) takesLanes() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return !q.closing && !q.offline.on
}

// workLane makes at most one attempt for the head of lane l, or settles it
// without one, then sets when the lane is next due.
func (q *Queue) workLane(ctx context.Context, l string) {
	now := q.now()
	next, err := q.workHead(ctx, l, now)
	switch {
	case errors.Is(err, ErrMovedOn): // discarded, or the lane taken over: next head
		q.notify(Event{Kind: EventMovedOn, Err: err})
		next = now
	case err != nil:
		q.report(err)
		next = now.Add(q.opts.Policy.BaseDelay)
	}
	q.mu.Lock()
	q.offline.probing = false // a probe that made no attempt is over too
	q.mu.Unlock()
	if err := q.st.SetNext(q.drainCtx, l, next); err != nil {
		q.report(err)
	}
}

// observe feeds an attempt's class to offline detection and reports
// whether the attempt was a probe that did not get through: never sent,
// with the queue offline after it. A request that could not be sent as it
// is (ClassInvalid) says nothing of the network: counting it either way
// would let one lane's bad requests flip the whole queue offline and back
// while other lanes get through.
func (q *Queue) observe(c idem.Class) (probeFailed bool) {
	if c == idem.ClassInvalid {
		return false
	}
	var ev EventKind
	now := q.now()
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
		if !o.on && o.streak >= offlineAfter {
			o.on, ev = true, EventOffline
		}
		if o.on {
			o.until, probeFailed = now.Add(q.opts.ProbeInterval), true
		}
	}
	q.mu.Unlock()
	if ev == EventOnline {
		// The probes put back the lanes they took (see probed): every
		// lane is judged again at once, each head by its own schedule.
		if err := q.st.Schedule(q.drainCtx, RejudgeLanes, "", now); err != nil {
			q.report(err)
		}
		q.poke()
	}
	if ev != 0 {
		q.notify(Event{Kind: ev})
	}
	return probeFailed
}

// offlineState tracks whether the device looks offline: every recent
// attempt was never sent. Offline is the device's state, not a record's:
// the drainer sends one probe each Options.ProbeInterval, the attempt of a
// due lane's head, and a probe that does not get through is given back to
// its record (see probed), so that the outage costs no record an attempt
// or a step of backoff, however long it lasts, and the interval need not
// grow to spare them: it stays short, for a quick return.
type offlineState struct {
	streak  int       // never-sent attempts in a row
	on      bool      // offline
	until   time.Time // no probe before
	probing bool      // a probe is under way
}

// offlineAfter is how many never-sent attempts in a row make the queue
// offline. They count as their records' attempts but the last: fewer would
// let one unreachable host among reachable ones hold every lane back.
const offlineAfter = 3

// sweepEvery is how often a running drainer removes settled records past
// Options.KeepSettled.
const sweepEvery = time.Minute
