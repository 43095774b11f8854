package queue

import (
	"cmp"
	"slices"

	"github.com/idem-go/idem/internal/binenc"
)

// index is what the queue knows of its file in memory: counts, sizes and
// orders that would cost a page per commit on disk. Open builds it by one
// scan; every commit updates it after it succeeds. The store's mutex guards it.
type index struct {
	counts  [Expired + 1]int
	active  int64 // encoded bytes of unsettled records
	lanes   map[string]*lane
	settled []settledEntry // by settle time, for removal after KeepSettled
	// reserved holds room promised to enqueues whose commit is under way.
	reservedItems int
	reservedBytes int64
}

type settledEntry struct {
	at int64 // SettledAt, in nanoseconds
	id ID
}

func (x *index) unsettled() int { return x.counts[Pending] + x.counts[InFlight] }

// lane returns the lane called name, creating it.
func (x *index) lane(name string) *lane {
	l := x.lanes[name]
	if l == nil {
		l = &lane{name: name, index: -1}
		x.lanes[name] = l
	}
	return l
}

// added notes a new pending record.
func (x *index) added(id ID, lane string, size int) *lane {
	x.counts[Pending]++
	x.active += int64(size)
	l := x.lane(lane)
	l.add(id)
	return l
}

// moved notes that record r went from state old (oldSize bytes) to its
// current state (newSize bytes).
func (x *index) moved(r *Record, old State, oldSize, newSize int) {
	x.counts[old]--
	x.counts[r.State]++
	switch {
	case r.State.Settled() && !old.Settled():
		x.active -= int64(oldSize)
		if l := x.lanes[r.lane()]; l != nil {
			l.drop(r.ID)
		}
		x.addSettled(settledEntry{binenc.Nanos(r.SettledAt), r.ID})
	case !r.State.Settled():
		x.active += int64(newSize - oldSize)
	}
}

// removed notes that record r (size bytes) was deleted.
func (x *index) removed(r *Record, size int) {
	x.counts[r.State]--
	if r.State.Settled() {
		e := settledEntry{binenc.Nanos(r.SettledAt), r.ID}
		if i, ok := slices.BinarySearchFunc(x.settled, e, cmpSettled); ok {
			x.settled = slices.Delete(x.settled, i, i+1)
		}
		return
	}
	x.active -= int64(size)
	if l := x.lanes[r.lane()]; l != nil {
		l.drop(r.ID)
	}
}

func (x *index) addSettled(e settledEntry) {
	i, _ := slices.BinarySearchFunc(x.settled, e, cmpSettled)
	x.settled = slices.Insert(x.settled, i, e)
}

// dropSettled removes the entries of due, sorted, from the settled order in
// one pass. A sweep takes the oldest entries, at the front: deleting them one
// at a time would shift the whole order, under the store's mutex, for each.
func (x *index) dropSettled(due []settledEntry) {
	if len(due) == 0 {
		return
	}
	s := x.settled
	end, found := slices.BinarySearchFunc(s, due[len(due)-1], cmpSettled)
	if found {
		end++
	}
	head := slices.DeleteFunc(s[:end], func(e settledEntry) bool {
		_, ok := slices.BinarySearchFunc(due, e, cmpSettled)
		return ok
	})
	x.settled = append(head, s[end:]...)
}

func cmpSettled(a, b settledEntry) int {
	return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.id, b.id))
}

// orphaned returns r, left in flight with nobody to see its attempt end (a
// crash, a failed result commit), to pending: the attempt may have reached
// the server, so r keeps FirstSentAt and counts as in doubt.
func orphaned(r *Record) {
	r.State, r.InDoubt, r.leaseSetFirstSent = Pending, true, false
}
