package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/queue"
	"github.com/idem-go/idem/queue/queueweb"
)

// source is the queue a command reads and acts on: a file (fileSource), or
// a running application's queueweb handler (urlSource, --url). Both give
// queueweb's views, so the commands print the same for either.
type source interface {
	// list returns the records f selects, in ID order.
	list(ctx context.Context, f lsFilter, now time.Time) ([]recordView, error)
	get(ctx context.Context, id queue.ID) (recordView, error)
	stats(ctx context.Context, opts queueweb.Options, now time.Time) (queueweb.Stats, error)
	discard(ctx context.Context, id queue.ID) (discarded, error)
	resubmit(ctx context.Context, id queue.ID, force bool) (queue.ID, error)
}

// discarded is what a discard did: the record's state before, and a
// warning when it may have reached the server.
type discarded struct {
	State   string `json:"state"`
	Warning string `json:"warning"`
}

// withSource runs fn on the queue --url or --file names: a file opened
// with opts (read-only ones with opts.ReadOnly).
func (a *app) withSource(opts queue.Options, fn func(source) error) error {
	if a.url != "" {
		if a.file != "" || a.dsn != "" {
			return a.checkFlags() // both given
		}
		s, err := a.urlSource()
		if err != nil {
			return err
		}
		return fn(s)
	}
	return a.withQueue(opts, func(q *queue.Queue) error { return fn(fileSource{q}) })
}

// fileSource is a queue file idemq opened.
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
	r, err := s.q.Get(ctx, id)
	if err != nil {
		return discarded{}, err
	}
	if err := s.q.Discard(ctx, id); err != nil {
		return discarded{}, err
	}
	d := discarded{State: r.State.String()}
	if r.State == queue.Pending && !r.FirstSentAt.IsZero() {
		d.Warning = fmt.Sprintf("%d may have reached the server (first sent %s): its outcome is unknown, reconcile it there",
			id, r.FirstSentAt.UTC().Format(time.RFC3339))
	}
	return d, nil
}

func (s fileSource) resubmit(ctx context.Context, id queue.ID, force bool) (queue.ID, error) {
	r, err := s.q.Get(ctx, id)
	if err != nil {
		return 0, err
	}
	if r.Outcome == idem.Unknown && !force {
		return 0, fmt.Errorf("%d: outcome unknown: an attempt may have been applied, and a resubmit under a new key would apply it again; check with the server, then pass --force", id)
	}
	return s.q.Resubmit(ctx, id)
}

// errNotOverURL is returned by the commands a handler does not serve.
var errNotOverURL = errors.New("works on a queue file only, not over --url")
