package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idem-go/idem"
)

// Get returns record id, or ErrNotFound. It returns ctx's error if ctx ends
// first (see read).
func (q *Queue) Get(ctx context.Context, id ID) (*Record, error) {
	return read(ctx, func(ctx context.Context) (*Record, error) { return q.st.Get(ctx, id) })
}

// List returns up to limit records in state s with IDs after after, in ID
// order: pass the last ID of a page to get the next. A state of 0 lists
// every state. It returns ctx's error if ctx ends first (see read).
func (q *Queue) List(ctx context.Context, s State, after ID, limit int) ([]*Record, error) {
	if s != 0 && !validState(s) {
		return nil, fmt.Errorf("queue: List: unknown state %d", s)
	}
	if limit <= 0 {
		return nil, fmt.Errorf("queue: List: limit %d, want at least 1", limit)
	}
	return read(ctx, func(ctx context.Context) ([]*Record, error) { return q.st.List(ctx, s, after, limit) })
}

// Counts returns how many records are in each state, every state named. It
// returns ctx's error if ctx ends first (see read).
func (q *Queue) Counts(ctx context.Context) (map[State]int, error) {
	s, err := q.stats(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[State]int, 5)
	for _, st := range states() {
		out[st] = s.Counts[st]
	}
	return out, nil
}

// stats reads the store's Stats.
func (q *Queue) stats(ctx context.Context) (StoreStats, error) {
	if q.isClosed() {
		return StoreStats{}, ErrClosed
	}
	return read(ctx, q.st.Stats)
}

// Wait returns record id once it is settled (done, failed or expired), or
// ctx's error. It returns at once for a settled record, ErrDiscarded if the
// record is discarded while it waits, and ErrClosed if the queue closes.
// A read-only queue waits only on a store shared with the processes that
// drain it (ErrReadOnly otherwise: nothing would settle the record).
func (q *Queue) Wait(ctx context.Context, id ID) (*Record, error) {
	if q.opts.ReadOnly && !q.info.Shared {
		return nil, ErrReadOnly // no drainer will settle anything
	}
	ch := make(chan *Record, 1)
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return nil, ErrClosed
	}
	q.waiters[id] = append(q.waiters[id], ch)
	q.mu.Unlock()
	defer q.unwait(id, ch)

	r, err := q.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if r.State.Settled() {
		return r, nil
	}
	var poll <-chan time.Time
	if q.info.Shared { // another process may settle it
		t := time.NewTicker(sharedWaitPoll)
		defer t.Stop()
		poll = t.C
	}
	q.sig.waiting.signal(id)
	for {
		select {
		case r, ok := <-ch:
			switch {
			case !ok:
				return nil, ErrClosed
			case r == nil: // see discarded
				return nil, fmt.Errorf("%w: %d", ErrDiscarded, id)
			}
			return r, nil
		case <-poll:
			r, err := q.Get(ctx, id)
			if errors.Is(err, ErrNotFound) {
				return nil, fmt.Errorf("%w: %d", ErrDiscarded, id)
			}
			if err != nil || r.State.Settled() {
				return r, err
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// read runs fn, a store's read given ctx, and returns ctx's error when ctx
// ends first: a read may be abandoned, unlike a write, so a store that
// cannot stop on ctx (a bbolt transaction stalled on its disk) does not hold
// its caller past its context. The read itself runs on until the store
// answers; Close waits for it (see Store).
func read[T any](ctx context.Context, fn func(context.Context) (T, error)) (T, error) {
	type got struct {
		v   T
		err error
	}
	if err := ctx.Err(); err != nil {
		var zero T
		return zero, err
	}
	c := make(chan got, 1) // buffered: an abandoned read still ends
	go func() {
		v, err := fn(ctx)
		c <- got{v, err}
	}()
	select {
	case g := <-c:
		return g.v, g.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

// sharedWaitPoll is how often Wait reads a record of a shared store, which
// another process may settle.
const sharedWaitPoll = 100 * time.Millisecond

func (q *Queue) unwait(id ID, ch chan *Record) {
	q.mu.Lock()
	defer q.mu.Unlock()
	ws := q.waiters[id]
	for i, w := range ws {
		if w == ch {
			ws = append(ws[:i], ws[i+1:]...)
			break
		}
	}
	if len(ws) == 0 {
		delete(q.waiters, id)
	} else {
		q.waiters[id] = ws
	}
}

// Discard removes record id: an operator's decision that it will not be
// sent (pending) or need not be kept (settled). A record in flight gives
// ErrInFlight. Discarding a pending record that was sent before leaves its
// outcome unknown: that is the operator's to reconcile. A Wait for the
// record returns ErrDiscarded. ctx goes to the store; a Discard under way
// when ctx ends may have removed the record all the same.
func (q *Queue) Discard(ctx context.Context, id ID) error {
	if q.opts.ReadOnly {
		return ErrReadOnly
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := q.st.Discard(ctx, id); err != nil {
		return err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.discarded(id)
	return nil
}

// discarded wakes the waiters of record id, which Discard removed: each gets
// a nil record, which Wait turns into ErrDiscarded. Queue.mu is held.
func (q *Queue) discarded(id ID) {
	for _, w := range q.waiters[id] {
		w <- nil // buffered, and each waiter is sent to once: it is out of the map
	}
	delete(q.waiters, id)
}

// Resubmit queues an expired or failed record again as a new intent with a
// new key, and returns the new record's ID; the old record notes it in
// ResubmittedAs. It is never automatic: a resend under a new key can apply
// the operation a second time if the first attempt did, which only the
// operator can judge. The copy's Trace is what Options.Tracer injects from
// ctx, or else the old record's.
func (q *Queue) Resubmit(ctx context.Context, id ID) (ID, error) {
	if q.opts.ReadOnly {
		return 0, ErrReadOnly
	}
	old, err := q.Get(ctx, id)
	if err != nil {
		return 0, err
	}
	if err := resubmittable(old); err != nil {
		return 0, err
	}
	in := old.Intent
	opts := []idem.IntentOption{idem.WithLane(in.Lane())}
	for k, vs := range in.Header() {
		for _, v := range vs {
			opts = append(opts, idem.WithHeader(k, v))
		}
	}
	if in.Key() == "" {
		opts = append(opts, idem.WithoutKey())
	}
	fresh, err := idem.NewIntent(in.Method(), in.URL(), in.Body(), opts...)
	if err != nil {
		return 0, err
	}
	return q.enqueue(ctx, fresh, id, old.Trace)
}

// resubmittable says why r cannot be resubmitted, if it cannot.
func resubmittable(r *Record) error {
	switch {
	case r.Damaged:
		return fmt.Errorf("%w: %d was found damaged: what it held cannot be trusted", ErrNotResubmittable, r.ID)
	case r.State != Expired && r.State != Failed:
		return fmt.Errorf("%w: %d is %s, not expired or failed", ErrNotResubmittable, r.ID, r.State)
	case r.ResubmittedAs != 0:
		return fmt.Errorf("%w: %d was resubmitted as %d", ErrNotResubmittable, r.ID, r.ResubmittedAs)
	}
	return nil
}

// OldestPending returns how long the oldest unsettled record has waited
// since it was enqueued; 0 for an empty queue. It returns ctx's error if
// ctx ends first (see read).
func (q *Queue) OldestPending(ctx context.Context) (time.Duration, error) {
	s, err := read(ctx, q.st.Stats)
	if err != nil || s.OldestUnsettled.IsZero() {
		return 0, err
	}
	return max(q.now().Sub(s.OldestUnsettled), 0), nil
}
