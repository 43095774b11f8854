package queue

import (
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/redact"
)

// The drainer's goroutines are the queue's, not the application's: a panic
// in a user hook they run would end the process, and a process that
// restarts runs the hook again, in a crash loop that resends every other
// lane's record in flight at each start. So the drain of a record runs its
// hooks under guard, which recovers a hook's panic, and heldForPanic holds
// the record's lane, keeping the record with its key, as a second 401 does.
//
// A hook that panics is a programmer's bug, not a fact about the
// operation: failing the record would settle it on no answer from the
// server, Unknown or NotApplied, and invite a Resubmit under a new key;
// holding it waits for the operator, who mends the hook and calls Wake (or
// restarts), and the record goes on with its key. A panic in the queue's
// own code (its store, its schedule) is not recovered: nothing says the
// drain's state is sound. Client.Try counts as the Client's hooks: from
// here, a panic in its own code cannot be told from one in theirs.

// hookIn names the user code a drain is running, if any.
type hookIn uint8

const (
	inIdem       hookIn = iota // the queue's own code
	inStartDrain               // Options.Tracer's StartDrain: nothing sent yet
	inClient                   // Client.Try and the reading of its response
	inReport                   // Step.Report: the Client's OnAttempt and Logger
	inVeto                     // Options.Policy.Veto
	inEnd                      // the Tracer's end: the attempt is recorded
)

// hookPanic is a panic recovered from a user hook a drain ran.
type hookPanic struct {
	in    hookIn
	value any
	site  string // where it was raised
}

// guard runs f, a part of a drain, and returns the panic of a user hook
// that f was running (d.in), or nil. It is the one place where a drain
// recovers; a panic in the queue's own code goes on.
func (d *drainEnd) guard(f func()) (hp *hookPanic) {
	defer func() {
		if d.in == inIdem {
			return // the queue's own code: the panic goes on
		}
		if v := recover(); v != nil { // since Go 1.21, panic(nil) recovers non-nil too
			hp = &hookPanic{in: d.in, value: v, site: panicSite()}
		}
		d.in = inIdem
	}()
	f()
	return nil
}

// heldForPanic handles hp, a panic in a hook of the drain of the leased r
// (and of more, the lane's next record if its lease was committed with r's
// settle): r goes back to pending as far as the drain had come, its lane
// is held and EventLaneHeld reports the hook. It returns what the drain
// returns.
func (q *Queue) heldForPanic(r, more *Record, d *drainEnd, hp *hookPanic) (time.Time, *Record, error) {
	now := q.now()
	lane := r.Intent.Lane()
	herr := q.hookError(r, hp)
	var err error
	switch hp.in {
	case inEnd: // r's attempt is recorded; the next record was not sent
		if more != nil {
			more.unlease()
			err = q.requeue(more, now)
		}
	case inStartDrain: // before Try: nothing went out
		r.unlease()
		r.LastError = redact.Error(herr)
		err = q.requeue(r, now)
	default:
		// Within Try the request may have gone out, as after a crash; after
		// it, r holds the attempt's facts, save a success not recorded.
		if hp.in == inClient || d.action == idem.ActionDone {
			r.InDoubt = true
		}
		r.LastError = redact.Error(herr)
		err = q.requeue(r, now)
	}
	d.action, d.err = idem.ActionHold, herr
	if serr := q.st.Schedule(q.drainCtx, HoldLane, lane, now); err == nil {
		err = serr
	}
	q.notify(Event{Kind: EventLaneHeld, Lane: lane, Err: herr})
	return now, nil, err
}

// hookError is the error of the EventLaneHeld that hp caused in the drain
// of r: it names the hook, what it panicked with, and where.
func (q *Queue) hookError(r *Record, hp *hookPanic) error {
	what := "%v"
	if _, ok := hp.value.(error); ok {
		what = "%w"
	}
	return fmt.Errorf("%w (%s) in the drain of record %d: "+what+", at %s; its lane %q is held until Wake",
		ErrHookPanicked, q.hookName(hp.in), r.ID, hp.value, hp.site, r.Intent.Lane())
}

// hookName names the hooks that could have run at in: of the Client's,
// those that are set.
func (q *Queue) hookName(in hookIn) string {
	c := q.opts.Client
	switch in {
	case inStartDrain:
		return "Options.Tracer's StartDrain"
	case inEnd:
		return "the end Options.Tracer's StartDrain returned"
	case inVeto:
		return "Options.Policy.Veto"
	case inClient:
		return setHooks("Client.Try", []string{"Client.Authorize", "Client.OnSend", "Client.HTTPClient"},
			[]bool{c.Authorize != nil, c.OnSend != nil, c.HTTPClient != nil})
	case inReport:
		return setHooks("Step.Report", []string{"Client.OnAttempt", "Client.Logger"},
			[]bool{c.OnAttempt != nil, c.Logger != nil})
	}
	return "idem"
}

// setHooks joins the names that are set with "or"; none if none is.
func setHooks(none string, names []string, set []bool) string {
	var out []string
	for i, n := range names {
		if set[i] {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return none
	}
	return strings.Join(out, " or ")
}

// unlease undoes the counting of the lease of r, whose attempt was not
// made: nothing reached the server.
func (r *Record) unlease() {
	r.NumAttempts--
	r.unsend()
}

// panicSite names where the panic under way was raised, as "function
// (file:line)": the first frame past the runtime's. Only a deferred call
// sees it, before the panic's frames are unwound.
func panicSite() string {
	pcs := make([]uintptr, 64)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(1, pcs)])
	past := false
	for {
		f, more := frames.Next()
		if past && !strings.HasPrefix(f.Function, "runtime.") {
			return fmt.Sprintf("%s (%s:%d)", f.Function, filepath.Base(f.File), f.Line)
		}
		past = past || f.Function == "runtime.gopanic"
		if !more {
			return "an unknown place"
		}
	}
}
