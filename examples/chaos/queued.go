package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/idemtest"
	"github.com/idem-go/idem/queue"
)

// The queue's schedule is shortened so that the scene takes seconds, not the
// minutes a device's queue would spread its attempts over.
const (
	queueRetryBase = 20 * time.Millisecond
	queueRetryMax  = 250 * time.Millisecond
	// queueLimit bounds the whole scene: a queue still holding payments
	// after it is a failure of the demo, reported as such.
	queueLimit = time.Minute
	// offlineWait bounds the wait for the drainer to notice the outage.
	offlineWait = 2 * time.Second
)

// queued sends the payments through a durable queue.Queue, with the outage
// and the restart a device or a service meets on the way: the server is down
// while the payments are enqueued, so the drainer goes offline; then the
// server comes back with its faults, and part-way through the drain, with
// attempts in flight, the queue is closed and opened again on the same file,
// as a restarted process would. Each payment's verdict is its record's
// settled state, once the application has acted on it (see settle).
func queued(ctx context.Context, srv *idemtest.Server, cfg config) ([]report, error) {
	ctx, cancel := context.WithTimeout(ctx, queueLimit)
	defer cancel()
	dir, err := os.MkdirTemp("", "idem-chaos-")
	if err != nil {
		return nil, fmt.Errorf("chaos: queue scene: %w", err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "intents.db")

	ids, err := queueThroughOutage(ctx, path, srv, cfg)
	if err != nil {
		return nil, err
	}
	d, err := startQueue(ctx, path, srv, cfg, nil) // the restart: the same file, a new process
	if err != nil {
		return nil, err
	}
	// The application's own client, for Resume: the queue's sends go through
	// the queue.
	c := &idem.Client{
		HTTPClient: &http.Client{Transport: d.tr},
		Policy:     idem.Policy{AttemptTimeout: cfg.timeout},
	}
	reports := make([]report, cfg.n)
	errs := make([]error, cfg.n)
	inParallel(cfg.n, cfg.workers, func(i int) {
		reports[i], errs[i] = settle(ctx, d.q, c, ids[i])
		if errs[i] != nil {
			errs[i] = fmt.Errorf("chaos: queue scene: payment %d (record %v): %w", i, ids[i], errs[i])
		}
	})
	return reports, errors.Join(errors.Join(errs...), d.stop())
}

// settle waits for record id and acts on its outcome as README tells an
// application to: a record that failed or expired NotApplied because its
// attempts never got through is resubmitted, a new intent; one that failed
// Unknown is resumed under its key with c. A record that expired Unknown is
// past the horizon, where a resend under its key may be a new operation to
// the server: it stays unknown, for a person to reconcile.
func settle(ctx context.Context, q *queue.Queue, c *idem.Client, id queue.ID) (report, error) {
	var rep report
	for round := 0; ; round++ {
		rec, err := q.Wait(ctx, id)
		if err != nil {
			return rep, err
		}
		rep.verdict = verdictOf(rec)
		switch {
		case rec.State == queue.Failed && rec.Outcome == idem.Unknown && !rec.Damaged:
			rep.verdict, rep.resumed = resume(ctx, c, rec)
			return rep, nil
		case rec.Outcome != idem.NotApplied:
			return rep, nil
		}
		rep.notApplied = append(rep.notApplied, rec.Intent.Key())
		if round == maxResends || !neverGotThrough(rec) {
			return rep, nil
		}
		if id, err = q.Resubmit(ctx, id); err != nil {
			return rep, err
		}
		rep.resent = true
	}
}

// neverGotThrough reports whether a NotApplied record ended on an attempt
// that sending again may cure: one never sent, or one the server did not
// process (429 and the like). A rejection would come back until the request
// changes.
func neverGotThrough(r *queue.Record) bool {
	return r.LastClass == idem.ClassNeverSent || r.LastClass == idem.ClassNotProcessed
}

// resume runs a record that failed Unknown again under its key, as
// Client.Resume after a Do that ended Unknown, at most maxResumes times. It
// returns what the last run says, and whether there was one.
func resume(ctx context.Context, c *idem.Client, rec *queue.Record) (v verdict, resumed bool) {
	in := rec.Intent
	var res *idem.Result
	var err error = &idem.Error{Method: in.Method(), URL: in.URL(), Outcome: idem.Unknown, Reason: rec.Reason}
	for r := 0; r < maxResumes && errors.Is(err, idem.ErrOutcomeUnknown) && pause(ctx); r++ {
		res, err = c.Resume(ctx, in, err)
		resumed = true
	}
	return verdictOfRun(res, err), resumed
}

// queueThroughOutage enqueues the payments while srv is down and brings srv
// back once the drainer has noticed. Once half the payments are settled, with
// others in flight, it closes the queue as a process that stops would.
func queueThroughOutage(ctx context.Context, path string, srv *idemtest.Server, cfg config) ([]queue.ID, error) {
	srv.SetDown(true)
	offline := make(chan struct{})
	var once sync.Once
	d, err := startQueue(ctx, path, srv, cfg, func(e queue.Event) {
		if e.Kind == queue.EventOffline {
			once.Do(func() { close(offline) })
		}
	})
	if err != nil {
		return nil, err
	}
	ids, err := enqueueAll(ctx, d.q, srv.URL()+"/payments", cfg)
	if err == nil {
		select { // let the drainer meet the outage
		case <-offline:
		case <-time.After(offlineWait):
		}
		srv.SetDown(false)
		d.q.Wake()
		err = settledAtLeast(ctx, d.q, cfg.n/2)
	}
	return ids, errors.Join(err, d.stop())
}

// drainer is an open queue whose drainer runs.
type drainer struct {
	q    *queue.Queue
	tr   *http.Transport
	done chan error // Run's result
}

// startQueue opens the queue file at path, with a fresh client as a new
// process would have, and starts draining it.
func startQueue(ctx context.Context, path string, srv *idemtest.Server, cfg config, notify func(queue.Event)) (*drainer, error) {
	tr := transport(srv, cfg)
	q, err := queue.Open(path, queue.Options{
		Client:      &idem.Client{HTTPClient: &http.Client{Transport: tr}},
		Workers:     cfg.workers,
		MaxAttempts: cfg.queueAttempts,
		Policy:      idem.Policy{AttemptTimeout: cfg.timeout, BaseDelay: queueRetryBase, MaxDelay: queueRetryMax},
		Notify:      notify,
	})
	if err != nil {
		return nil, fmt.Errorf("chaos: queue scene: %w", err)
	}
	d := &drainer{q: q, tr: tr, done: make(chan error, 1)}
	go func() { d.done <- q.Run(ctx) }()
	return d, nil
}

// stop closes the queue once the attempts under way are recorded, as a
// process that exits cleanly would.
func (d *drainer) stop() error {
	err := d.q.Close()
	// Run says ErrClosed if Close came first; that is no failure here.
	if rerr := <-d.done; !errors.Is(rerr, queue.ErrClosed) {
		err = errors.Join(err, rerr)
	}
	d.tr.CloseIdleConnections()
	if err != nil {
		return fmt.Errorf("chaos: queue scene: closing the queue: %w", err)
	}
	return nil
}

// enqueueAll queues every payment, cfg.workers producers at a time so that
// they share commits. Payments go to queueLanes(cfg) lanes, as an
// application might order them by account.
func enqueueAll(ctx context.Context, q *queue.Queue, url string, cfg config) ([]queue.ID, error) {
	ids := make([]queue.ID, cfg.n)
	errs := make([]error, cfg.n)
	inParallel(cfg.n, cfg.workers, func(i int) {
		in, err := idem.NewIntent(http.MethodPost, url, payment(i),
			idem.WithHeader("Content-Type", "application/json"),
			idem.WithLane(strconv.Itoa(i%queueLanes(cfg))))
		if err == nil {
			ids[i], err = q.Enqueue(ctx, in)
		}
		if err != nil {
			errs[i] = fmt.Errorf("chaos: queue scene: enqueuing payment %d: %w", i, err)
		}
	})
	return ids, errors.Join(errs...)
}

// queueLanes is how many lanes the payments are spread over: more than the
// workers, so that a lane whose head must wait (for a Retry-After, or a claim
// the server holds) leaves its worker to another lane.
func queueLanes(cfg config) int { return 4 * cfg.workers }

// settledAtLeast waits until n records of q are settled.
func settledAtLeast(ctx context.Context, q *queue.Queue, n int) error {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		c, err := q.Counts(context.Background())
		if err != nil {
			return fmt.Errorf("chaos: queue scene: %w", err)
		}
		if c[queue.Done]+c[queue.Failed]+c[queue.Expired] >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("chaos: queue scene: fewer than %d payments settled: %w", n, ctx.Err())
		case <-t.C:
		}
	}
}

// verdictOf is what a settled record tells the application.
func verdictOf(r *queue.Record) verdict {
	switch {
	case r.State == queue.Done:
		return saidApplied
	case r.Outcome == idem.Unknown:
		return saidUnknown
	}
	return saidFailed
}
