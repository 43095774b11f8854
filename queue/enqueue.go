package queue

import (
	"context"
	"fmt"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/methods"
	"github.com/idem-go/idem/redact"
)

// Enqueue stores in durably and returns its ID: when it returns nil, the
// intent is in the file (an fsync'd commit) and will be sent, after a crash
// too, with its key. Concurrent callers share commits; a lone caller commits
// at once.
//
// Enqueue refuses a POST or PATCH without a key (ErrNeedsKey) and an intent
// that would take the queue past its limits (ErrQueueFull). Enqueuing an
// intent whose key is queued already returns the existing record's ID when it
// is the same operation (method, URL and body), so a producer that crashed
// before learning the result can simply enqueue again; another operation
// under that key gives ErrKeyInUse. This holds for keys given with
// idem.WithKey: a generated key is new by construction, so two Enqueue calls
// with one generated-key Intent queue it twice (the server still applies it
// once).
//
// Enqueue returns ctx's error without writing if ctx has ended. ctx goes to
// the store, which gives up when it ends as far as it can (see Store): an
// Enqueue that returns ctx's error may have stored the record all the same,
// which enqueuing again under a supplied key answers.
func (q *Queue) Enqueue(ctx context.Context, in *idem.Intent) (ID, error) {
	if q.opts.ReadOnly {
		return 0, ErrReadOnly
	}
	r, err := q.newRecord(ctx, in, nil)
	if err != nil {
		return 0, err
	}
	id, err := q.st.Insert(ctx, r)
	if err != nil {
		return 0, err
	}
	q.poke()
	return id, nil
}

// newRecord is the record that Enqueue, or Resubmit for its copy, stores
// for in: ctx's error if ctx has ended, which stores nothing. Its Trace is
// what Options.Tracer injects from ctx, or else trace.
func (q *Queue) newRecord(ctx context.Context, in *idem.Intent, trace map[string]string) (*Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r, err := NewRecord(in, q.now())
	if err != nil {
		return nil, err
	}
	if r.Trace = q.inject(ctx); r.Trace == nil {
		r.Trace = trace
	}
	return r, nil
}

// NewRecord returns the pending record that enqueuing in at now stores, due
// at once. It refuses a nil intent (idem.ErrInvalidIntent) and a POST or
// PATCH without a key (ErrNeedsKey), as Enqueue does. A Store's own enqueue,
// such as pgqueue's in the caller's transaction, starts from it.
func NewRecord(in *idem.Intent, now time.Time) (*Record, error) {
	if in == nil {
		return nil, fmt.Errorf("%w: nil intent", idem.ErrInvalidIntent)
	}
	if in.Key() == "" && !methods.Idempotent(in.Method()) {
		return nil, fmt.Errorf("%w: %s %s", ErrNeedsKey, in.Method(), redact.RawURL(in.URL()))
	}
	data, err := in.MarshalBinary()
	if err != nil {
		return nil, err
	}
	return &Record{Intent: in, State: Pending, NextAttempt: now, EnqueuedAt: now, intentBytes: data}, nil
}
