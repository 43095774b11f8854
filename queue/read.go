package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idem-go/idem"
)

// Get returns record id, or ErrNotFound.
func (q *Queue) Get(id ID) (*Record, error) { return q.st.Get(id) }

// List returns up to limit records in state s with IDs after after, in ID
// order: pass the last ID of a page to get the next. A state of 0 lists
// every state.
func (q *Queue) List(s State, after ID, limit int) ([]*Record, error) {
	if s != 0 && !validState(s) {
		return nil, fmt.Errorf("queue: List: unknown state %d", s)
	}
	if limit <= 0 {
		return nil, fmt.Errorf("queue: List: limit %d, want at least 1", limit)
	}
	return q.st.List(s, after, limit)
}

// Counts returns how many records are in each state.
func (q *Queue) Counts() (map[State]int, error) {
	if q.isClosed() {
		return nil, ErrClosed
	}
	return q.st.Counts()
}

// Wait returns record id once it is settled (done, failed or expired), or
// ctx's error. It returns at once for a settled record, ErrDiscarded if the
// record is discarded while it waits, and ErrClosed if the queue closes.
// A read-only queue waits only on a store shared with the processes that
// drain it (ErrReadOnly otherwise: nothing would settle the record).
func (q *Queue) Wait(ctx context.Context, id ID) (*Record, error) {
	if q.opts.ReadOnly && !q.st.Shared() {
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

	r, err := q.read(ctx, id)
	if err != nil {
		return nil, err
	}
	if r.State.Settled() {
		return r, nil
	}
	var poll <-chan time.Time
	if q.st.Shared() { // another process may settle it
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
			r, err := q.read(ctx, id)
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

// read is Get for Wait, which returns ctx's error when ctx ends first: a
// read may be abandoned, unlike a write, so a stalled store does not hold a
// Wait past its context. The read itself runs on until the store answers.
func (q *Queue) read(ctx context.Context, id ID) (*Record, error) {
	type got struct {
		r   *Record
		err error
	}
	c := make(chan got, 1) // buffered: an abandoned read still ends
	go func() {
		r, err := q.st.Get(id)
		c <- got{r, err}
	}()
	select {
	case g := <-c:
		return g.r, g.err
	case <-ctx.Done():
		return nil, ctx.Err()
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
// record returns ErrDiscarded.
func (q *Queue) Discard(id ID) error {
	if q.opts.ReadOnly {
		return ErrReadOnly
	}
	if err := q.st.Discard(id); err != nil {
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
// operator can judge.
func (q *Queue) Resubmit(ctx context.Context, id ID) (ID, error) {
	if q.opts.ReadOnly {
		return 0, ErrReadOnly
	}
	old, err := q.Get(id)
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
	return q.enqueue(ctx, fresh, id)
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
// since it was enqueued; 0 for an empty queue.
func (q *Queue) OldestPending() (time.Duration, error) {
	enqueued, err := q.st.OldestUnsettled()
	if err != nil || enqueued.IsZero() {
		return 0, err
	}
	return max(q.st.Now().Sub(enqueued), 0), nil
}
