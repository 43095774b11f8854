package queue

import (
	"errors"
	"fmt"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/redact"
)

// Store keeps a Queue's records, their lanes and the schedule of due lanes.
// The Queue is written once over it: the drainer, the horizon, backoff and
// Retry-After, 401 handling, offline detection, events and waiters are the
// Queue's, whatever keeps the records. Open uses a store in one bbolt file;
// New takes any other, such as package pgqueue's, which keeps the records in
// PostgreSQL for several replicas at once.
//
// A store never calls back into the Queue: it returns what the Queue must
// report. Its methods are safe for concurrent use, and the Queue calls none
// of them with its own mutex held: a store may wait on its disk or its
// network without stopping Wait, Close, Enqueue or the admin calls of the
// callers it does not serve. A call under way is waited for, never
// abandoned: the store ends it, as pgqueue's per-operation timeouts do.
// What a store must keep is one test suite that every store runs.
type Store interface {
	// Now reads the clock that every time in a record is written by: the
	// local clock for a store of one process, the database's for a store
	// shared by several.
	Now() time.Time
	// Insert stores r, a new pending record, and returns its ID; a record
	// holding r's supplied key for the same operation gives that record's
	// ID instead, another operation ErrKeyInUse (KeyHeld gives both). Past
	// the store's limits it gives ErrQueueFull.
	Insert(r *Record) (ID, error)
	// Resubmit is Insert for the copy of record old, which it marks as
	// resubmitted (Record.ResubmittedAs) in the same commit;
	// ErrNotResubmittable if it was already.
	Resubmit(r *Record, old ID) (ID, error)
	// Get returns record id, or ErrNotFound.
	Get(id ID) (*Record, error)
	// List returns up to limit records in state s with IDs above after, in
	// ID order.
	List(s State, after ID, limit int) ([]*Record, error)
	// Counts counts the records in each state.
	Counts() (map[State]int, error)
	// Discard removes record id unless it is in flight (ErrInFlight).
	Discard(id ID) error
	// OldestUnsettled returns when the oldest unsettled record was
	// enqueued; the zero Time for none.
	OldestUnsettled() (time.Time, error)

	// TakeDue takes the lane whose head is due first for a worker of this
	// Queue (got), or says how long until one is due; wait is 0 when none
	// waits. A lane is taken by one worker at a time, in every process
	// sharing the store.
	TakeDue(now time.Time) (lane string, got bool, wait time.Duration, err error)
	// SetNext sets when the head of a lane a worker took is next due, and
	// gives the lane back to other processes; Release then gives it back to
	// this Queue's schedule.
	SetNext(lane string, next time.Time) error
	Release(lane string)
	// Hold keeps a lane out of the schedule until Wake, which also makes
	// every idle lane due at now; Rejudge makes every idle, unheld lane due.
	Hold(lane string) error
	Wake(now time.Time) error
	Rejudge(now time.Time) error
	// Wakeups, if not nil, receives when another process made work due:
	// an enqueue, a Wake. A store of one process returns nil.
	Wakeups() <-chan struct{}
	// Shared reports whether other processes may change the records: a
	// shared store's records may settle without this Queue's drainer, so
	// Wait reads them again now and then, and a read-only Queue may wait.
	Shared() bool
	// Settles, if not nil, receives the ID of each record another process
	// sharing the store settled, once that process's commit is done: for
	// Wait and Options.NotifyRemote. It is best effort: an ID that comes
	// while the feed is down or behind is lost, and Wait's polling covers
	// it. A store of one process returns nil.
	Settles() <-chan ID
	// Head returns the first unsettled record of a taken lane, in the
	// lane's order, and the damaged records it quarantined on the way, for
	// the Queue to report.
	Head(lane string) (*Record, []*Record, error)
	// Lease stores r, which the Queue has marked in flight for one attempt,
	// over its stored self, which must still be pending; Commit stores r
	// over its stored self, which must still be in state old. Both return
	// an error wrapping ErrMovedOn when the stored record changed
	// meanwhile (an operator's Discard, a takeover of the lane by another
	// process): the Queue drops what it holds and moves on.
	Lease(r *Record) error
	Commit(old State, r *Record) error
	// Mark and ResetMark read and replace the clock's high-water mark (see
	// Queue.ResetClock); a store on a shared server's clock keeps none:
	// Mark returns the zero Time.
	Mark() time.Time
	ResetMark(now time.Time) (time.Time, error)
	// TakeDamaged returns, once, the records found damaged when the store
	// was opened.
	TakeDamaged() []*Record
	// Sweep removes records settled Options.KeepSettled ago.
	Sweep(now time.Time) error
	// Location names where the records are kept, such as a file's path.
	Location() string
	// Close releases the store; the Queue calls it once, from Close.
	Close() error
}

// ErrMovedOn is returned by a Store's Lease and Commit when the stored record
// is no longer as its writer read it: an operator discarded it, or another
// process took its lane over after this one's lease ran out.
var ErrMovedOn = errors.New("queue: record changed meanwhile")

// KeyHeld is what a Store's Insert returns for in when holder already holds
// in's supplied key: holder's ID if holder is the same operation (the same
// method, URL and body), ErrKeyInUse if it is another or is damaged (its
// Intent nil). Every store answers through it, so that a key means the same
// thing whatever keeps the records.
//
// The error names holder by its ID, never by the key or the URL's query,
// which may be secrets.
func KeyHeld(holder *Record, in *idem.Intent) (ID, error) {
	o := holder.Intent
	if o == nil {
		return 0, fmt.Errorf("%w: record %d, found damaged, holds its key; Discard it to free the key", ErrKeyInUse, holder.ID)
	}
	if !o.SameOperation(in) {
		return 0, fmt.Errorf("%w: record %d holds its key, for %s %s", ErrKeyInUse, holder.ID, o.Method(), redact.RawURL(o.URL()))
	}
	return holder.ID, nil
}
