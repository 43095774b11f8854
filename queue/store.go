package queue

import (
	"context"
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
// PostgreSQL for several replicas at once. A store provides the few
// operations below; the Queue derives the rest (Counts and OldestPending
// from Stats, Wait from Get and the feeds).
//
// A store never calls back into the Queue: it returns what the Queue must
// report. Its methods are safe for concurrent use, and the Queue calls none
// of them with its own mutex held: a store may wait on its disk or its
// network without stopping Wait, Close, Enqueue or the admin calls of the
// callers it does not serve.
//
// Every method that may wait on I/O takes a ctx first. For a call a caller
// makes (Enqueue, Get, List, Counts, OldestPending, Discard, Resubmit,
// ResetClock, Wait's reads) it is the caller's, and Wake, which takes none,
// gives context.Background; for the drainer's own calls it is Run's,
// without its cancellation: what an attempt did is recorded even as Run is
// told to stop. A store gives up when ctx ends as far as its
// medium allows, returning an error that wraps ctx's (pgqueue passes ctx to
// every statement; the bbolt store checks it before it starts, since a bbolt
// transaction cannot be interrupted), and may bound a call whose ctx has no
// deadline. A write given up on may still have been stored. Close waits for
// the calls under way, which the store ends.
//
// What a store must keep is one test suite that every store runs
// (package queuetest).
type Store interface {
	// Clock reads the clock that every time in a record is written by (the
	// local clock for a store of one process, the database's for a store
	// shared by several) and the clock's high-water mark: the latest
	// lease time committed, which a clock set back must not hide (see
	// Queue.ResetClock). A store on a shared server's clock keeps no mark
	// and returns the zero Time for it. Clock does no I/O: the Queue calls
	// it often.
	Clock() (now, mark time.Time)
	// Info describes the store. The Queue calls it once, in New, and keeps
	// what it returns; it does no I/O.
	Info() StoreInfo

	// Insert stores r, a new pending record made by NewRecord, and returns
	// its ID; a record holding r's supplied key for the same operation
	// gives that record's ID instead, another operation ErrKeyInUse
	// (KeyHeld gives both). Past the store's limits it gives ErrQueueFull.
	Insert(ctx context.Context, r *Record) (ID, error)
	// Resubmit stores r, the copy of record old that Queue.Resubmit or
	// ForceResubmit made, as Insert does, and marks old resubmitted
	// (Record.ResubmittedAs) in the same commit, which decides whether old
	// may be copied: it gives rule old as that commit finds it, kept from
	// every other writer (a settle, another Resubmit, in any process
	// sharing the store) until the commit ends, and stores nothing when
	// rule returns an error, which it returns as it is. It returns an
	// error wrapping ErrNotFound when old is gone. So rule sees old in
	// flight or settled with its outcome, never a state a settle is
	// leaving; of two Resubmit calls at once, the second sees the first's
	// mark.
	Resubmit(ctx context.Context, r *Record, old ID, rule func(old *Record) error) (ID, error)
	// Get returns record id, or an error wrapping ErrNotFound.
	Get(ctx context.Context, id ID) (*Record, error)
	// List returns up to limit (at least 1) records in state s, every
	// state for 0, with IDs above after, in ID order.
	List(ctx context.Context, s State, after ID, limit int) ([]*Record, error)
	// Stats counts the records in each state and finds when the oldest
	// unsettled one was enqueued.
	Stats(ctx context.Context) (StoreStats, error)
	// Discard removes record id unless it is in flight (ErrInFlight);
	// ErrNotFound if there is none.
	Discard(ctx context.Context, id ID) error

	// TakeDue takes up to n (at least 1) lanes whose heads are due at now,
	// the first due first, one for each of n free workers of this Queue;
	// with none taken it says how long until one is due, wait 0 when none
	// waits. A lane is taken by one worker at a time, in every process
	// sharing the store, and a lane this Queue's worker holds is not taken
	// again until SetNext gives it back. Taking several at once spares a
	// store on a network a round trip per lane.
	TakeDue(ctx context.Context, now time.Time, n int) (lanes []string, wait time.Duration, err error)
	// Head returns the first unsettled record of a taken lane, in the
	// lane's order, or nil for none, and the damaged records it
	// quarantined on the way (see Quarantined), for the Queue to report.
	Head(ctx context.Context, lane string) (*Record, []*Record, error)
	// Put stores r over its stored self, which must still be in state old:
	// else it returns an error wrapping ErrMovedOn (an operator's Discard,
	// a takeover of the lane by another process), and the Queue drops what
	// it holds and moves on. A Put from Pending of r in flight is a lease,
	// for one attempt: a store that keeps a mark moves it on to
	// r.LastAttemptAt once the lease is committed, and a store whose lanes
	// are leased to processes renews the lane's lease for the attempt.
	Put(ctx context.Context, old State, r *Record) error
	// SetNext sets when the head of a lane a worker of this Queue took is
	// next due, and gives the lane back to every process's TakeDue, this
	// Queue's too. The worker is done with the lane whatever SetNext
	// returns: an error must not keep the lane from this Queue.
	SetNext(ctx context.Context, lane string, next time.Time) error
	// Schedule changes the schedule of due lanes by op (see LaneOp): lane
	// is HoldLane's, now the time WakeLanes and RejudgeLanes make lanes due
	// at.
	Schedule(ctx context.Context, op LaneOp, lane string, now time.Time) error
	// ResetMark replaces the clock's mark (see Clock) with now and returns
	// the mark it replaced; a store that keeps no mark does nothing.
	ResetMark(ctx context.Context, now time.Time) (time.Time, error)
	// Sweep removes records settled Options.KeepSettled before now.
	Sweep(ctx context.Context, now time.Time) error
	// Close releases the store once the calls under way have ended; the
	// Queue calls it once, from Close, which takes no context.
	Close() error
}

// StoreInfo describes a Store (see Store.Info).
type StoreInfo struct {
	// Location names where the records are kept, such as a file's path
	// (Queue.Path).
	Location string
	// Shared reports whether other processes may change the records: a
	// shared store's records may settle without this Queue's drainer, so
	// Wait reads them again now and then, and a read-only Queue may wait.
	Shared bool
	// Wakeups, if not nil, receives when another process made work due:
	// an enqueue, a WakeLanes. A store of one process leaves it nil.
	Wakeups <-chan struct{}
	// Settles, if not nil, receives the ID of each record another process
	// sharing the store settled, once that process's commit is done: for
	// Wait and Options.NotifyRemote. It is best effort: an ID that comes
	// while the feed is down or behind is lost, and Wait's polling covers
	// it. A store of one process leaves it nil.
	Settles <-chan ID
	// Damaged holds the records found damaged when the store was opened,
	// which the Queue reports once, from Run; nil for none.
	Damaged []*Record
}

// StoreStats is what Store.Stats counts.
type StoreStats struct {
	// Counts holds how many records are in each state; a state missing
	// has none.
	Counts map[State]int
	// OldestUnsettled is when the oldest unsettled record was enqueued;
	// the zero Time when there is none.
	OldestUnsettled time.Time
}

// LaneOp is a change to the schedule of due lanes (see Store.Schedule).
type LaneOp int

const (
	// HoldLane keeps one lane, which a worker of this Queue took, out of
	// every process's schedule until WakeLanes: its requests met a 401
	// with fresh credentials, or a hook panicked in the drain of its head.
	HoldLane LaneOp = iota + 1
	// WakeLanes ends every hold and makes every lane with records that no
	// worker holds due at now; a shared store tells the other processes
	// (StoreInfo.Wakeups).
	WakeLanes
	// RejudgeLanes makes every lane with records that no worker holds and
	// that is not held due at now, for the drainer to judge its head again.
	RejudgeLanes
)

// String names the operation, as its constant does.
func (op LaneOp) String() string {
	switch op {
	case HoldLane:
		return "HoldLane"
	case WakeLanes:
		return "WakeLanes"
	case RejudgeLanes:
		return "RejudgeLanes"
	}
	return fmt.Sprintf("LaneOp(%d)", int(op))
}

// errLaneOp is a Store's answer to an operation it does not know.
func errLaneOp(op LaneOp) error { return fmt.Errorf("queue: Schedule: unknown operation %v", op) }

// ErrMovedOn is returned by a Store's Put when the stored record
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
