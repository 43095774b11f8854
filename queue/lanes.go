package queue

import (
	"container/heap"
	"slices"
	"time"
)

// lane is the in-memory state of one lane; Queue.mu guards it.
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

func (h laneHeap) Len() int           { return len(h) }
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

// offlineState tracks whether the device looks offline: every recent
// attempt was never sent. Offline, the drainer sends one probe at a time with
// a growing delay instead of spending every record's attempts.
type offlineState struct {
	streak  int           // never-sent attempts in a row
	on      bool          // offline
	until   time.Time     // no probe before
	delay   time.Duration // the current probe delay
	probing bool          // a probe is under way
}

const (
	offlineAfter    = 3 // never-sent attempts in a row before going offline
	offlineFirst    = time.Second
	offlineMaxDelay = time.Minute
)
