package queue

import (
	"container/heap"
	"context"
	"errors"
	"slices"
	"time"
)

// lane is the in-memory state of one lane; the bbolt store's mutex guards
// it.
type lane struct {
	name   string
	ids    []ID      // its unsettled records, in ID (delivery) order
	nextAt time.Time // when its head is due
	busy   bool      // a worker holds it
	held   bool      // after a 401 with fresh credentials, until Wake
	index  int       // in Queue.ready; -1 when not there
}

// add inserts id in order; concurrent enqueues may commit out of order.
func (l *lane) add(id ID) {
	i, found := slices.BinarySearch(l.ids, id)
	if !found {
		l.ids = slices.Insert(l.ids, i, id)
	}
}

// drop removes id.
func (l *lane) drop(id ID) {
	if i, found := slices.BinarySearch(l.ids, id); found {
		l.ids = slices.Delete(l.ids, i, i+1)
	}
	if len(l.ids) == 0 {
		l.ids = nil // let a long lane's array go
	}
}

// head returns the lane's first record.
func (l *lane) head() (ID, bool) {
	if len(l.ids) == 0 {
		return 0, false
	}
	return l.ids[0], true
}

// laneHeap orders idle, unheld lanes by when their head is due.
type laneHeap []*lane

func (h laneHeap) Len() int { return len(h) }

func (h laneHeap) Less(i, j int) bool { return h[i].nextAt.Before(h[j].nextAt) }

func (h laneHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}

func (h *laneHeap) Push(x any) {
	l := x.(*lane)
	l.index = len(*h)
	*h = append(*h, l)
}

func (h *laneHeap) Pop() any {
	old := *h
	l := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	l.index = -1
	return l
}

// push adds l, or moves it if it is there already.
func (h *laneHeap) push(l *lane) {
	if l.index >= 0 {
		heap.Fix(h, l.index)
		return
	}
	heap.Push(h, l)
}

// remove takes l out if it is there.
func (h *laneHeap) remove(l *lane) {
	if l.index >= 0 {
		heap.Remove(h, l.index)
	}
}

// due pops the lane whose head is due first, if it is due at now, or
// returns how long until one is.
func (h *laneHeap) due(now time.Time) (*lane, time.Duration, bool) {
	if h.Len() == 0 {
		return nil, 0, false
	}
	top := (*h)[0]
	if wait := top.nextAt.Sub(now); wait > 0 {
		return nil, wait, true
	}
	return heap.Pop(h).(*lane), 0, true
}

// TakeDue takes up to n lanes whose heads are due at now for workers, the
// first due first; with none due it says how long until one is (0: none
// waits). It does no I/O: the schedule is in memory.
func (st *boltStore) TakeDue(_ context.Context, now time.Time, n int) (lanes []string, wait time.Duration, err error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	for len(lanes) < max(n, 1) {
		l, d, ok := st.ready.due(now)
		switch {
		case l != nil:
			l.busy = true
			lanes = append(lanes, l.name)
			continue
		case len(lanes) == 0 && ok:
			wait = d
		}
		break
	}
	return lanes, wait, nil
}

// SetNext sets when the head of the lane called name, which a worker holds,
// is next due, and returns the lane from its worker to the schedule, or
// forgets it when it has no records left.
func (st *boltStore) SetNext(_ context.Context, name string, next time.Time) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	l := st.idx.lanes[name]
	if l == nil {
		return nil
	}
	l.nextAt = next
	l.busy = false
	switch {
	case len(l.ids) == 0:
		st.ready.remove(l)
		delete(st.idx.lanes, l.name)
	case !l.held:
		st.ready.push(l)
	}
	return nil
}

// Schedule changes the schedule, in memory: HoldLane takes the lane called
// lane out of it until WakeLanes, which ends every hold and makes every
// idle lane due at now; RejudgeLanes makes every idle lane that is not held
// due at now, for the drainer to judge its head again.
func (st *boltStore) Schedule(_ context.Context, op LaneOp, lane string, now time.Time) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	switch op {
	case HoldLane:
		if l := st.idx.lanes[lane]; l != nil {
			l.held = true
		}
		return nil
	case WakeLanes, RejudgeLanes:
		for _, l := range st.idx.lanes {
			if op == WakeLanes {
				l.held = false
			}
			if !l.busy && !l.held && len(l.ids) > 0 {
				l.nextAt = now
				st.ready.push(l)
			}
		}
		return nil
	}
	return errLaneOp(op)
}

// Head returns the first unsettled record of the lane called name, or nil,
// and the damaged records it quarantined on the way, for the caller to
// report.
func (st *boltStore) Head(ctx context.Context, name string) (*Record, []*Record, error) {
	var quarantined []*Record
	for {
		if err := ctx.Err(); err != nil {
			return nil, quarantined, err
		}
		st.mu.Lock()
		var id ID
		ok := false
		if l := st.idx.lanes[name]; l != nil {
			id, ok = l.head()
		}
		st.mu.Unlock()
		if !ok {
			return nil, quarantined, nil
		}
		r, err := st.get(id)
		if err == nil && !r.State.Settled() {
			return r, quarantined, nil
		}
		if errors.Is(err, ErrDamaged) {
			if qr, qerr := st.quarantineHead(name, id); qr != nil || qerr != nil {
				err = qerr // quarantined: on to the next head
				if qr != nil {
					quarantined = append(quarantined, qr)
				}
			}
		}
		if !errors.Is(err, ErrNotFound) && err != nil {
			return nil, quarantined, err
		}
		st.forget(name, id) // discarded, settled or quarantined behind the index's back
	}
}

// forget drops id from a lane's order.
func (st *boltStore) forget(name string, id ID) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if l := st.idx.lanes[name]; l != nil {
		l.drop(id)
	}
}
