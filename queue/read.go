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
// ResubmittedAs. It is never automatic: a resend under a new key applies
// the operation a second time if an attempt of the first did, which only
// the operator can judge. Resubmit therefore refuses a record whose outcome
// is Unknown (ErrUnknownOutcome; see ForceResubmit), as it refuses one in
// another state, found damaged or resubmitted already
// (ErrNotResubmittable). The store decides this in the commit that stores
// the copy, so that a record settling meanwhile is judged as it settled:
// a Resubmit racing the drainer never copies a record that ends Unknown,
// and of two at once one copies the record. The copy's Trace is what
// Options.Tracer injects from ctx, or else the old record's.
func (q *Queue) Resubmit(ctx context.Context, id ID) (ID, error) {
	return q.resubmit(ctx, id, resubmittable)
}

// ForceResubmit is Resubmit for a record whose outcome is Unknown too: the
// operator has checked with the server that no attempt of it was applied.
// It lifts that refusal only.
func (q *Queue) ForceResubmit(ctx context.Context, id ID) (ID, error) {
	return q.resubmit(ctx, id, resubmittableForced)
}

// resubmit copies record id, if rule, given the record in the store's
// commit, allows it.
func (q *Queue) resubmit(ctx context.Context, id ID, rule func(*Record) error) (ID, error) {
	if q.opts.ReadOnly {
		return 0, ErrReadOnly
	}
	old, err := q.Get(ctx, id)
	if err != nil {
		return 0, err
	}
	if old.Intent == nil { // found damaged: nothing to copy, which rule says
		return 0, rule(old)
	}
	fresh, err := resubmitted(old.Intent)
	if err != nil {
		return 0, err
	}
	r, err := q.newRecord(ctx, fresh, old.Trace)
	if err != nil {
		return 0, err
	}
	nid, err := q.st.Resubmit(ctx, r, id, rule)
	if err != nil {
		return 0, err
	}
	q.poke()
	return nid, nil
}

// resubmitted returns in again under a new key.
func resubmitted(in *idem.Intent) (*idem.Intent, error) {
	opts := []idem.IntentOption{idem.WithLane(in.Lane())}
	for k, vs := range in.Header() {
		for _, v := range vs {
			opts = append(opts, idem.WithHeader(k, v))
		}
	}
	if in.Key() == "" {
		opts = append(opts, idem.WithoutKey())
	}
	return idem.NewIntent(in.Method(), in.URL(), in.Body(), opts...)
}

// resubmittable is Resubmit's rule: it says why r cannot be resubmitted
// without force, if it cannot.
func resubmittable(r *Record) error {
	if err := resubmittableForced(r); err != nil {
		return err
	}
	if r.Outcome == idem.Unknown {
		return fmt.Errorf("%w: %d: an attempt may have been applied, and a resubmit under a new key would apply it again; check with the server", ErrUnknownOutcome, r.ID)
	}
	return nil
}

// resubmittableForced is ForceResubmit's rule: it says why r cannot be
// resubmitted, if it cannot.
func resubmittableForced(r *Record) error {
	switch {
	case r.Damaged || r.Intent == nil:
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
