package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idem-go/idem/queue"
	"github.com/idem-go/idem/queue/queueweb"
)

// source is the queue a command reads and acts on: a file or a PostgreSQL
// queue (fileSource), or a running application's queueweb handler
// (urlSource, --url). Both give queueweb's views, so the commands print the
// same for either.
type source interface {
	// list returns the records f selects, in ID order.
	list(ctx context.Context, f lsFilter, now time.Time) ([]recordView, error)
	get(ctx context.Context, id queue.ID) (recordView, error)
	stats(ctx context.Context, opts queueweb.Options, now time.Time) (queueweb.Stats, error)
	discard(ctx context.Context, id queue.ID) (discarded, error)
	// resubmit is queue.Queue.Resubmit, or ForceResubmit when force is
	// set: the queue refuses what it must, never the source.
	resubmit(ctx context.Context, id queue.ID, force bool) (queue.ID, error)
}

// discarded is what a discard did (queueweb.Discard).
type discarded = queueweb.Discarded

// withSource runs fn on the queue --url or --file names: a file opened
// with opts (read-only ones with opts.ReadOnly).
func (a *app) withSource(opts queue.Options, fn func(source) error) error {
	if a.url != "" {
		s, err := a.urlSource()
		if err != nil {
			return err
		}
		return fn(s)
	}
	return a.withQueue(opts, func(q *queue.Queue) error { return fn(fileSource{q}) })
}

// fileSource is a queue idemq opened: a file, or a PostgreSQL queue.
type fileSource struct{ q *queue.Queue }

// listPage is how many records ls reads per call.
const listPage = 500

func (s fileSource) list(ctx context.Context, f lsFilter, now time.Time) ([]recordView, error) {
	var state queue.State // 0: every state, filtered by match
	if len(f.states) == 1 {
		state = f.states[0]
	}
	var out []recordView
	for after := queue.ID(0); ; {
		page, err := s.q.List(ctx, state, after, listPage)
		if err != nil {
			return nil, err
		}
		for _, r := range page {
			v := queueweb.RecordOf(r)
			if !f.match(v, now) {
				continue
			}
			out = append(out, v)
			if f.limit > 0 && len(out) == f.limit {
				return out, nil
			}
		}
		if len(page) < listPage {
			return out, nil
		}
		after = page[len(page)-1].ID
	}
}

func (s fileSource) get(ctx context.Context, id queue.ID) (recordView, error) {
	r, err := s.q.Get(ctx, id)
	if err != nil {
		return recordView{}, err
	}
	return queueweb.RecordOf(r), nil
}

func (s fileSource) stats(ctx context.Context, opts queueweb.Options, now time.Time) (queueweb.Stats, error) {
	return queueweb.ReadStats(ctx, s.q, opts, now)
}

func (s fileSource) discard(ctx context.Context, id queue.ID) (discarded, error) {
	return queueweb.Discard(ctx, s.q, id)
}

func (s fileSource) resubmit(ctx context.Context, id queue.ID, force bool) (queue.ID, error) {
	resubmit := s.q.Resubmit
	if force {
		resubmit = s.q.ForceResubmit
	}
	nid, err := resubmit(ctx, id)
	if errors.Is(err, queue.ErrUnknownOutcome) {
		return 0, needsForce(id)
	}
	return nid, err
}

// needsForce is the queue's refusal to resubmit record id, whose outcome
// is unknown, without force, as idemq words it for a file, a DSN or a URL.
func needsForce(id queue.ID) error {
	return fmt.Errorf("%d: %w: an attempt may have been applied, and a resubmit under a new key would apply it again; check with the server, then pass --force", id, queue.ErrUnknownOutcome)
}

// errNotOverURL is returned by the commands a handler does not serve.
var errNotOverURL = errors.New("works on a queue file only, not over --url")
