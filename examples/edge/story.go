package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/idemtest"
	"github.com/idem-go/idem/queue"
)

// Bounds on the waits of the story, so that a fault shows as an error or an
// unsettled reading rather than a hang.
const (
	firstSendLimit = 5 * time.Second  // for the first reading to reach the server
	drainLimit     = 10 * time.Second // for the queue to drain once the server is back
)

// play runs the story and reports what happened to each reading. An error
// means the story could not be played (a file, a port), not that the device
// got something wrong: the report says that.
func play(ctx context.Context, cfg config, stdout io.Writer) (report, error) {
	dir, err := os.MkdirTemp("", "idem-edge-")
	if err != nil {
		return report{}, fmt.Errorf("edge: %w", err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "intents.db")

	srvLog := newServerLog()
	srv := idemtest.New(idemtest.Options{Retention: cfg.retention, Faults: srvLog.fault})
	srvLog.srv = srv
	if err := srv.Start(); err != nil {
		return report{}, fmt.Errorf("edge: starting the server: %w", err)
	}
	defer srv.Close()
	// The test server's keyed POST route stands in for the device's
	// ingest endpoint.
	url := srv.URL() + "/payments"

	fmt.Fprintln(stdout, "idem edge: a device queues readings through an outage and a restart")
	fmt.Fprintf(stdout, "queue file %s; the server keeps keys %v, so the horizon is first sent + %v - %v margin\n\n",
		path, cfg.retention, cfg.retention, cfg.margin)
	n := &narrator{start: time.Now(), w: stdout}

	s := &story{cfg: cfg, n: n, srv: srv, log: srvLog, path: path, url: url}
	recs, err := s.tell(ctx)
	if err != nil {
		return report{}, err
	}
	return s.tally(stdout, recs), nil
}

// story is the device's day.
type story struct {
	cfg     config
	n       *narrator
	srv     *idemtest.Server
	log     *serverLog
	path    string
	url     string
	intents []*idem.Intent // the readings, in the order taken
	ids     []queue.ID     // their records
}

// tell takes the device through the outage and the restart, and returns the
// readings' records as the queue left them.
func (s *story) tell(ctx context.Context) ([]*queue.Record, error) {
	dev, err := boot(ctx, s.path, s.srv, s.cfg, s.n)
	if err != nil {
		return nil, err
	}
	wentDown, err := s.online(ctx, dev)
	if err == nil {
		err = s.offline(ctx, dev)
	}
	if err == nil {
		err = sleepUntil(ctx, wentDown.Add(s.cfg.retention/3))
	}
	if err := errors.Join(err, dev.shutdown()); err != nil {
		return nil, err
	}
	s.n.say("the device restarts: its program stopped, the queue closed")

	if dev, err = boot(ctx, s.path, s.srv, s.cfg, s.n); err != nil {
		return nil, err
	}
	recs, err := s.restarted(ctx, dev, wentDown)
	return recs, errors.Join(err, dev.shutdown())
}

// online sends the first reading, which the server applies and then goes
// down without answering, and returns when the server went down.
func (s *story) online(ctx context.Context, dev *device) (time.Time, error) {
	if err := s.take(ctx, dev, 0); err != nil {
		return time.Time{}, err
	}
	s.n.say("r-00 (door) taken and queued; the drainer sends it")
	select {
	case <-s.log.down:
	case <-time.After(firstSendLimit):
		return time.Time{}, fmt.Errorf("edge: r-00 did not reach the server within %v", firstSendLimit)
	case <-ctx.Done():
		return time.Time{}, ctx.Err()
	}
	s.n.say("the server applied r-00 and went down before answering: the device cannot tell whether it did")
	return time.Now(), nil
}

// offline takes the other readings while the server is down.
func (s *story) offline(ctx context.Context, dev *device) error {
	for i := 1; i <= s.cfg.readings; i++ {
		if err := s.take(ctx, dev, i); err != nil {
			return err
		}
	}
	s.n.say("r-01 to r-%02d taken while the server is down, each on disk when Enqueue returned", s.cfg.readings)
	return nil
}

// restarted follows the queue after the restart until the server is back
// and the queue drained.
func (s *story) restarted(ctx context.Context, dev *device, wentDown time.Time) ([]*queue.Record, error) {
	c, err := dev.q.Counts(context.Background())
	if err != nil {
		return nil, fmt.Errorf("edge: %w", err)
	}
	s.n.say("started again on the same file: %d readings pending, %d settled",
		c[queue.Pending]+c[queue.InFlight], c[queue.Done]+c[queue.Failed]+c[queue.Expired])
	first, err := dev.q.Get(context.Background(), s.ids[0])
	if err != nil {
		return nil, fmt.Errorf("edge: %w", err)
	}
	if !first.FirstSentAt.IsZero() {
		s.n.say("r-00 was first sent at %s, in-doubt=%t: no attempt may end after %s, its horizon",
			s.n.at(first.FirstSentAt), first.InDoubt, s.n.at(first.FirstSentAt.Add(s.cfg.retention-s.cfg.margin)))
	}

	// The server comes back after it has forgotten r-00's key.
	if err := sleepUntil(ctx, wentDown.Add(s.cfg.retention+s.cfg.retention/6)); err != nil {
		return nil, err
	}
	s.srv.SetDown(false)
	s.n.say("the server is back; it has forgotten r-00's key, so a resend would apply r-00 again. The device calls Wake")
	dev.q.Wake()

	wctx, cancel := context.WithTimeout(ctx, drainLimit)
	defer cancel()
	recs, err := settled(wctx, dev.q, s.ids)
	if err != nil {
		return nil, err
	}
	done := 0
	for _, r := range recs {
		if r.State == queue.Done {
			done++
		}
	}
	// What an operator's console would list: the records to reconcile.
	expired, err := dev.q.List(context.Background(), queue.Expired, 0, len(s.ids))
	if err != nil {
		return nil, fmt.Errorf("edge: %w", err)
	}
	names := []string{}
	for _, r := range expired {
		names = append(names, nameOf(r.Intent))
	}
	s.n.say("drained: %d of %d readings done; List(queue.Expired) gives the operator %v", done, len(recs), names)
	return recs, nil
}

// take takes reading i and queues it. Before the queue can send it, the
// server learns what its first request meets: the first reading's takes the
// server down; a few others fail once when the server is back, and the queue
// retries them with the same key.
func (s *story) take(ctx context.Context, dev *device, i int) error {
	in, err := newReading(s.url, i)
	if err != nil {
		return err
	}
	switch {
	case i == 0:
		s.log.cutOn(in.Key())
	case i%5 == 0:
		s.log.plan(in.Key(), idemtest.FaultCommitThenDrop)
	case i%7 == 0:
		s.log.plan(in.Key(), idemtest.Fault503)
	}
	id, err := dev.q.Enqueue(ctx, in)
	if err != nil {
		return fmt.Errorf("edge: queuing r-%02d: %w", i, err)
	}
	s.intents, s.ids = append(s.intents, in), append(s.ids, id)
	return nil
}

// settled waits until every record in ids is settled or ctx ends, and
// returns them as they stand then.
func settled(ctx context.Context, q *queue.Queue, ids []queue.ID) ([]*queue.Record, error) {
	recs := make([]*queue.Record, len(ids))
	for i, id := range ids {
		r, err := q.Wait(ctx, id)
		if ctx.Err() != nil {
			r, err = q.Get(context.Background(), id) // still queued: the report counts it
		}
		if err != nil {
			return nil, fmt.Errorf("edge: record %v: %w", id, err)
		}
		recs[i] = r
	}
	return recs, nil
}

func sleepUntil(ctx context.Context, t time.Time) error {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// tally prints each reading's fate beside the server's counts, and counts
// what went right and wrong.
func (s *story) tally(w io.Writer, recs []*queue.Record) report {
	rep := report{readings: len(recs)}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "reading\tsensor\tthe queue says\tattempts\trequests seen\teffects")
	for i, r := range recs {
		in := s.intents[i]
		effects := s.srv.EffectsForPayload(in.Body())
		switch {
		case effects == 1:
			rep.applied++
		case effects > 1:
			rep.duplicates++
		default:
			rep.lost++
		}
		says := "still queued"
		if r.State.Settled() {
			says = fmt.Sprintf("%s, %s", r.State, r.Outcome)
			if r.Result != nil && r.Result.Replayed() {
				says += " (replayed)"
			}
		}
		switch {
		case !r.State.Settled():
			rep.unsettled++
		case r.Outcome == idem.Unknown:
			rep.unknown++
		case r.State == queue.Done && effects == 0, r.State != queue.Done && effects > 0:
			rep.misreported++
		}
		if r.State == queue.Expired {
			rep.expired++
			rep.horizonExpired = rep.horizonExpired || i == 0
		}
		if !r.FirstSentAt.IsZero() {
			rep.late += s.log.lateArrivals(in.Key(), r.FirstSentAt.Add(s.cfg.retention-s.cfg.margin))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\n", nameOf(in), in.Lane(), says, r.NumAttempts, s.srv.RequestsForKey(in.Key()), effects)
	}
	tw.Flush()
	s.explain(w, recs[0])
	return rep
}

// explain says what became of the first reading and what is left to do.
func (s *story) explain(w io.Writer, r *queue.Record) {
	in := s.intents[0]
	if r.State != queue.Expired {
		fmt.Fprintf(w, "\nr-00 is %s, not expired: the story did not reach its horizon.\n", r.State)
		return
	}
	late := "none"
	if n := s.log.lateArrivals(in.Key(), r.FirstSentAt.Add(s.cfg.retention-s.cfg.margin)); n > 0 {
		late = strconv.Itoa(n)
	}
	fmt.Fprintf(w, "\nr-00 expired at its horizon and was not sent again: the server saw %s with its key, %s after the horizon.\n",
		count(s.srv.RequestsForKey(in.Key()), "request"), late)
	if s.srv.EffectsForPayload(in.Body()) > 0 {
		fmt.Fprintln(w, "The server's count shows it was applied before the outage: ForceResubmit, which sends it again under a new key,")
		fmt.Fprintln(w, "would apply it twice. An operator reconciles first; the queue never resubmits by itself.")
	} else {
		fmt.Fprintln(w, "The server's count shows it was not applied: an operator who has checked can ForceResubmit it under a new key;")
		fmt.Fprintln(w, "the queue never resubmits by itself.")
	}
}

// count is n things, in words: "no requests", "1 request", "2 requests".
func count(n int, thing string) string {
	switch n {
	case 0:
		return "no " + thing + "s"
	case 1:
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}
