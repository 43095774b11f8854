package queue

import (
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/binenc"
)

// A Tracer links the drain of each record to the code that enqueued it, for
// a tracing system: package github.com/idem-go/idem/otel has one. The queue
// calls it, and does not know what it stores; package queue imports no
// tracing system. Its methods are called concurrently.
type Tracer interface {
	// Inject returns what to store with a record enqueued under ctx, such as
	// the trace context of ctx's span (a W3C traceparent); nil stores
	// nothing. The queue keeps a copy within the bounds of Record.Trace (8
	// entries of names up to 64 bytes and values up to 512 bytes): entries
	// beyond them are dropped, never an error.
	Inject(ctx context.Context) map[string]string
	// StartDrain is called as a drainer is about to make an attempt of r,
	// with r.Trace as stored (nil for a record enqueued without a Tracer).
	// r is a copy the Tracer may keep; its Trace and Intent are the queue's,
	// not to be modified. The context StartDrain returns, derived from ctx,
	// is the attempt's: the Client's hooks (OnSend, OnAttempt) see it.
	//
	// end is called once, when the queue has decided what follows the
	// attempt, with that action (idem.ActionDone, ActionRetry, ActionStop,
	// ActionExpire or ActionHold) and the record's Outcome if the decision
	// settled it (idem.NoOutcome otherwise). When no attempt could be made
	// (the context ended, credentials could not be had, the request is
	// invalid), err is why, and action is ActionRetry if the record will be
	// tried again, ActionStop if it was failed. err is also the store's
	// error when the decision could not be committed: the record is then
	// handled again as after a crash. When a hook panicked in the drain,
	// action is ActionHold and err wraps ErrHookPanicked.
	StartDrain(ctx context.Context, r *Record) (context.Context, func(action idem.Action, outcome idem.Outcome, err error))
}

// The bounds of Record.Trace. A traceparent takes 55 bytes and a W3C
// tracestate at most 512.
const (
	maxTraceEntries = 8
	maxTraceName    = 64
	maxTraceValue   = 512
)

// traceEntryFits reports whether a trace entry is within the bounds: a
// name of 1 to maxTraceName bytes, a value of at most maxTraceValue.
func traceEntryFits(k, v string) bool {
	return k != "" && len(k) <= maxTraceName && len(v) <= maxTraceValue
}

// BoundTrace returns a copy of m within the bounds a Record's Trace keeps,
// as Queue.Enqueue stores what Options.Tracer's Inject returns: entries
// with an empty name, a name over 64 bytes or a value over 512 bytes are
// dropped, and of the rest the 8 first by name are kept. It returns nil when
// no entry is left. A Store's own enqueue (pgqueue's Producer) calls it
// before it stores Record.Trace: Record.MarshalBinary refuses a Trace beyond
// these bounds.
func BoundTrace(m map[string]string) map[string]string {
	var out map[string]string
	n := 0
	for _, k := range slices.Sorted(maps.Keys(m)) {
		v := m[k]
		if !traceEntryFits(k, v) {
			continue
		}
		if out == nil {
			out = make(map[string]string, min(len(m), maxTraceEntries))
		}
		out[k] = v
		if n++; n == maxTraceEntries {
			break
		}
	}
	return out
}

// inject is what Options.Tracer stores with a record enqueued under ctx;
// nil without a Tracer.
func (q *Queue) inject(ctx context.Context) map[string]string {
	if q.opts.Tracer == nil {
		return nil
	}
	return BoundTrace(q.opts.Tracer.Inject(ctx))
}

// appendTrace appends the entries of t, sorted by name so that the encoding
// is deterministic: their count, then each name and value. It refuses a
// trace beyond the bounds, which the decoder would refuse as damaged.
func appendTrace(b []byte, t map[string]string) ([]byte, error) {
	if len(t) > maxTraceEntries {
		return nil, fmt.Errorf("queue: record trace has %d entries, more than %d", len(t), maxTraceEntries)
	}
	b = binary.AppendUvarint(b, uint64(len(t)))
	for _, k := range slices.Sorted(maps.Keys(t)) {
		v := t[k]
		if !traceEntryFits(k, v) {
			return nil, fmt.Errorf("queue: record trace entry %.64q: empty name, or name or value too long (limits %d and %d bytes)", k, maxTraceName, maxTraceValue)
		}
		b = binenc.Append(binenc.Append(b, k), v)
	}
	return b, nil
}

// decodeTrace reads what appendTrace wrote; it refuses more entries than
// the bounds, names or values past them, and names not in strictly
// ascending order, which appendTrace never writes.
func decodeTrace(d *binenc.Decoder) map[string]string {
	n := d.Uvarint(maxTraceEntries, "trace entries")
	if d.Err != nil {
		return nil
	}
	if n == 0 {
		d.Err = fmt.Errorf("trace flag set without entries")
		return nil
	}
	t := make(map[string]string, n)
	prev := ""
	for i := range n {
		k, v := d.String("trace name"), d.String("trace value")
		switch {
		case d.Err != nil:
			return nil
		case k == "" || len(k) > maxTraceName:
			d.Err = fmt.Errorf("trace name of %d bytes (limit %d)", len(k), maxTraceName)
		case len(v) > maxTraceValue:
			d.Err = fmt.Errorf("trace value of %d bytes (limit %d)", len(v), maxTraceValue)
		case i > 0 && k <= prev:
			d.Err = fmt.Errorf("trace names out of order")
		}
		if d.Err != nil {
			return nil
		}
		t[k], prev = v, k
	}
	return t
}

// drainEnd is what one attempt's drain tells Options.Tracer when the queue
// has decided what follows it. Its zero value, without a Tracer, does
// nothing and costs nothing.
type drainEnd struct {
	end    func(idem.Action, idem.Outcome, error)
	action idem.Action
	err    error  // why no attempt could be made, or a hook's panic
	in     hookIn // the user code the drain runs now, for guard
}

// startDrain starts the drain of the leased r with Options.Tracer, and
// returns the attempt's context: ctx itself without a Tracer.
func (q *Queue) startDrain(ctx context.Context, r *Record, d *drainEnd) context.Context {
	t := q.opts.Tracer
	if t == nil {
		return ctx
	}
	c := *r
	d.in = inStartDrain
	actx, end := t.StartDrain(ctx, &c)
	d.in = inIdem
	if actx == nil { // a Tracer's mistake is not the record's
		actx = ctx
	}
	d.end = end
	return actx
}

// tell reports to the Client's observers what the queue does after the
// attempt step, with the wait before a retry, and notes it for the Tracer.
func (d *drainEnd) tell(step *idem.Step, a idem.Action, wait time.Duration) {
	d.action = a
	d.in = inReport
	step.Report(a, wait)
	d.in = inIdem
}

// finish ends the drain of r, whose handling ended with err (the store's,
// if not nil).
func (d *drainEnd) finish(r *Record, err error) {
	if d.end == nil {
		return
	}
	o := idem.NoOutcome
	if r.State.Settled() {
		o = r.Outcome
	}
	if d.err != nil {
		err = d.err
	}
	end := d.end
	d.end = nil
	d.in = inEnd
	end(d.action, o, err)
	d.in = inIdem
}
