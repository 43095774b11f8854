package queue

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/delay"
	"github.com/idem-go/idem/redact"
)

// workHead handles the head of a lane and returns when the lane is next due.
func (q *Queue) workHead(ctx context.Context, name string, now time.Time) (time.Time, error) {
	r, quarantined, err := q.st.Head(q.drainCtx, name)
	for _, d := range quarantined {
		q.settled(d, false)
	}
	if err != nil || r == nil {
		return now, err
	}
	if r.State == InFlight {
		// This lane's last result commit failed, or the replica that
		// held the lane died: as after a crash, the attempt's end is
		// unknown.
		orphaned(r)
		if err := q.st.Put(q.drainCtx, InFlight, r); err != nil {
			return now, err
		}
	}
	if !q.due(r, now) {
		return r.NextAttempt, nil
	}
	_, mark := q.st.Clock()
	switch v, reason := q.h.judge(r, now, mark); v {
	case verdictHold:
		q.holdClock(reason)
		return now.Add(q.opts.idle), nil
	case verdictExpire:
		q.unholdClock()
		return now, q.settle(r, Pending, Expired, q.outcomeOf(r), reason, nil)
	}
	q.unholdClock()
	if q.certHeld(r, now) {
		return now.Add(q.opts.idle), nil
	}
	if err := q.lease(r, now); err != nil {
		return now, err
	}
	return q.sendRecord(ctx, r, 0)
}

// lease marks r leased and commits that before anything is sent: a crash
// after the send leaves the record marked as possibly sent, which is the
// safe side.
func (q *Queue) lease(r *Record, now time.Time) error {
	markLeased(r, now)
	return q.st.Put(q.drainCtx, Pending, r)
}

// markLeased marks r in flight and counts the attempt, setting FirstSentAt
// if unset.
func markLeased(r *Record, now time.Time) {
	r.State = InFlight
	r.NumAttempts++
	r.LastAttemptAt = now
	r.leaseSetFirstSent = r.FirstSentAt.IsZero()
	if r.leaseSetFirstSent {
		r.FirstSentAt = now
	}
}

// due reports whether r's next attempt is due (see dueAt).
func (q *Queue) due(r *Record, now time.Time) bool {
	q.mu.Lock()
	woken := q.woken
	q.mu.Unlock()
	return q.dueAt(r, now, woken)
}

// dueAt reports whether r's next attempt is due, Wake having last been
// called at woken: its time has come, its last attempt was made by a clock
// ahead of now, or Wake was called after an attempt that never got out.
func (q *Queue) dueAt(r *Record, now, woken time.Time) bool {
	if !r.NextAttempt.After(now) {
		return true
	}
	if r.LastAttemptAt.After(now.Add(q.opts.ClockTolerance)) {
		// Scheduled by a clock that read ahead of this one (see
		// ResetClock): the schedule cannot be trusted, the judgement can.
		return true
	}
	return r.LastClass == idem.ClassNeverSent && !woken.IsZero() && !woken.Before(r.LastAttemptAt)
}

// maxStreak is how many records in a row a worker sends from one lane
// before it gives the lane back to the schedule, so that with more lanes
// than workers every lane gets its turn.
const maxStreak = 16

// settleDone settles the leased r as done. When the store can
// (leaseNexter), the same commit leases the next record of r's lane, if it
// is due and within the horizon, and that record is returned, to be
// attempted at once: a lane in a steady drain costs one commit a record. After a crash either
// both the settle and the lease are in the file or neither: at most one
// record of the lane is in flight, and it is resent with its key.
func (q *Queue) settleDone(ctx context.Context, r *Record, o idem.Outcome, res *Response, streak int) (time.Time, *Record, error) {
	ln, ok := q.st.(leaseNexter)
	if !ok || streak+1 >= maxStreak || ctx.Err() != nil || q.isClosing() {
		return q.now(), nil, q.settleLeased(r, Done, o, "", res)
	}
	markSettled(r, Done, o, "", res, q.now())
	q.mu.Lock()
	woken := q.woken
	q.mu.Unlock()
	_, mark := q.st.Clock()
	held := q.certHoldsNow()
	next, err := ln.SettleLeaseNext(q.drainCtx, r, func(n *Record) bool {
		now := q.now()
		if !q.dueAt(n, now, woken) || held.holds(n, now) {
			return false
		}
		if v, _ := q.h.judge(n, now, mark); v != verdictSend {
			return false // the usual path expires it, or holds the clock
		}
		markLeased(n, now)
		return true
	})
	if err != nil {
		return q.now(), nil, err
	}
	q.settled(r, false)
	return q.now(), next, nil
}

// sendRecord sends one attempt of the leased r, the streak-th record in a row
// of its lane this worker sends, and records what followed; then, while the
// lane's next record was leased with r's settle (settleDone), that one.
func (q *Queue) sendRecord(ctx context.Context, r *Record, streak int) (time.Time, error) {
	for {
		next, more, err := q.drain(ctx, r, streak)
		if more == nil {
			return next, err
		}
		r, streak = more, streak+1
	}
}

// drain makes one attempt of the leased r and records what followed, which
// it tells Options.Tracer. It returns the lane's next record when its lease
// was committed with r's settle. A user hook that panics holds r's lane
// (see guard).
func (q *Queue) drain(ctx context.Context, r *Record, streak int) (next time.Time, more *Record, err error) {
	var d drainEnd
	if hp := d.guard(func() {
		actx := q.startDrain(ctx, r, &d)
		next, more, err = q.attempt(ctx, actx, r, streak, &d)
	}); hp != nil {
		next, more, err = q.heldForPanic(r, more, &d, hp)
	}
	if hp := d.guard(func() { d.finish(r, err) }); hp != nil {
		next, more, err = q.heldForPanic(r, more, &d, hp)
	}
	return next, more, err
}

// attempt sends one attempt of the leased r under actx, the drain's context
// (ctx, the worker's, or derived from it by Options.Tracer), and records
// what followed in the store and in d.
func (q *Queue) attempt(ctx, actx context.Context, r *Record, streak int, d *drainEnd) (time.Time, *Record, error) {
	// The timeout bounds the stored body's reading too, which the horizon
	// counts as part of the attempt.
	timeout := q.opts.Policy.AttemptTimeout
	actx, cancel := context.WithTimeout(actx, timeout)
	defer cancel()
	d.in = inClient
	step, err := q.opts.Client.Try(actx, r.Intent, q.outcomeOf(r), timeout)
	var res *Response
	if err == nil && step.Response != nil {
		res = q.keep(step.Response)
	}
	d.in = inIdem
	now := q.now()
	if err != nil { // nothing was sent: ctx ended, credentials could not be had, or the request is invalid
		r.LastError = redact.Error(err)
		r.unlease()
		d.err = err
		if errors.Is(err, idem.ErrInvalidRequest) { // no later attempt can cure it
			r.LastClass = idem.ClassInvalid
			d.action = idem.ActionStop
			return now, nil, q.settleLeased(r, Failed, q.outcomeOf(r), r.LastError, nil)
		}
		d.action = idem.ActionRetry
		p := q.opts.Policy
		next := now.Add(delay.Backoff(p.BaseDelay, p.MaxDelay, r.NumAttempts, q.opts.rand()))
		if ctx.Err() != nil {
			next = now // shutting down: due at once on the next run
		}
		return next, nil, q.requeue(r, next)
	}
	step.N = r.NumAttempts // the record's attempts so far, this one included
	a := step.Attempt
	r.LastClass, r.LastStatus, r.LastError = a.Class, a.Status, ""
	if a.Err != nil {
		r.LastError = redact.Error(a.Err)
	}
	probeFailed := q.observe(a.Class)
	if step.InDoubt { // ambiguous, resent by net/http, or a keyed 409
		r.InDoubt = true
	}
	if probeFailed {
		next, err := q.probed(r, step, now, d)
		return next, nil, err
	}
	// Each branch reports what the queue does next, which the table's
	// action only advises: its schedule may fail, expire or hold instead.
	switch action, outcome := step.Action, step.Outcome; {
	case action == idem.ActionDone:
		d.tell(step, idem.ActionDone, 0)
		return q.settleDone(ctx, r, outcome, res, streak)
	case errors.Is(step.Cause, idem.ErrCertificateDates):
		next, err := q.holdCertificate(r, step, now, d)
		return next, nil, err
	case action == idem.ActionStop && a.Status == http.StatusUnauthorized:
		next, err := q.unauthorized(r, step, now, d)
		return next, nil, err
	case action == idem.ActionStop:
		d.tell(step, idem.ActionStop, 0)
		return now, nil, q.settleLeased(r, Failed, outcome, step.Reason, res)
	}
	next, err := q.retryLater(actx, r, step, now, d)
	return next, nil, err
}

// retryLater schedules the next attempt of r after the attempt step, or
// settles r when Options.Policy.Veto stops the retry or no attempt could be
// made in time.
func (q *Queue) retryLater(ctx context.Context, r *Record, step *idem.Step, now time.Time, d *drainEnd) (time.Time, error) {
	if step.Attempt.Class == idem.ClassNeverSent {
		r.unsend()
	}
	if q.vetoed(ctx, r, step, d) {
		d.tell(step, idem.ActionStop, 0)
		return now, q.settleLeased(r, Failed, q.outcomeOf(r), "retry vetoed by the policy (Options.Policy.Veto)", nil)
	}
	v := delay.Next(q.rule(), r.NumAttempts, r.FirstSentAt, retryAfter(step), now, q.opts.rand())
	if v.Stop != delay.Retry {
		d.tell(step, idem.ActionStop, 0)
		return now, q.settleLeased(r, Failed, q.outcomeOf(r), v.Reason, nil)
	}
	next := now.Add(v.Wait)
	if ok, reason := q.h.fitsBefore(r, next); !ok {
		d.tell(step, idem.ActionExpire, 0)
		if v.RetryAfter > 0 {
			reason = fmt.Sprintf("the server asked to wait %v (Retry-After): %s", v.RetryAfter, reason)
		}
		return now, q.settleLeased(r, Expired, q.outcomeOf(r), reason, nil)
	}
	d.tell(step, idem.ActionRetry, v.Wait)
	return next, q.requeue(r, next)
}

// probed gives the leased r back after its attempt step, a probe of the
// network that never reached it while the device is offline: r keeps its
// attempts and its schedule, as if the probe had not been made, and what
// it met (LastClass, LastError). Its lane is next due after the probe
// interval, so that the next probe takes another lane if one is due, and
// is judged again when a probe gets through (observe).
func (q *Queue) probed(r *Record, step *idem.Step, now time.Time, d *drainEnd) (time.Time, error) {
	d.tell(step, idem.ActionHold, 0)
	r.unlease()
	if err := q.requeue(r, r.NextAttempt); err != nil {
		return now, err
	}
	return now.Add(q.opts.ProbeInterval), nil
}

// vetoed reports whether Options.Policy.Veto stops the retry the table
// advised after the attempt step, which it is shown as a Client's OnAttempt
// hook would show it.
func (q *Queue) vetoed(ctx context.Context, r *Record, step *idem.Step, d *drainEnd) bool {
	veto := q.opts.Policy.Veto
	if veto == nil {
		return false
	}
	a := step.Attempt
	a.Err = redact.Wrap(a.Err)
	d.in = inVeto
	v := veto(ctx, idem.AttemptInfo{
		Method: r.Intent.Method(), URL: redact.RawURL(r.Intent.URL()), N: step.N,
		Attempt: a, Action: idem.ActionRetry, Keyed: r.Intent.Key() != "",
	})
	d.in = inIdem
	return v
}

// unauthorized handles a 401, the attempt step: one more attempt at once
// with fresh credentials, then the lane is held and reported, its records
// kept.
func (q *Queue) unauthorized(r *Record, step *idem.Step, now time.Time, d *drainEnd) (time.Time, error) {
	if !r.InDoubt {
		r.unsend() // a 401 comes before any effect; the key was not used
	}
	if !r.reauthorized {
		r.reauthorized = true
		d.tell(step, idem.ActionRetry, 0)
		return now, q.requeue(r, now)
	}
	d.tell(step, idem.ActionHold, 0)
	if err := q.requeue(r, now); err != nil {
		return now, err
	}
	err := fmt.Errorf("queue: lane %q: 401 Unauthorized with fresh credentials; held until Wake", r.Intent.Lane())
	if err := q.st.Schedule(q.drainCtx, HoldLane, r.Intent.Lane(), now); err != nil {
		return now, err
	}
	q.notify(Event{Kind: EventLaneHeld, Lane: r.Intent.Lane(), Err: err})
	return now, nil
}

// unsend clears FirstSentAt if this lease set it: the server cannot have
// seen the attempt, so its key's retention has not started.
func (r *Record) unsend() {
	if r.leaseSetFirstSent {
		r.FirstSentAt = time.Time{}
	}
}

// requeue commits r as pending, due at next.
func (q *Queue) requeue(r *Record, next time.Time) error {
	r.State, r.NextAttempt, r.leaseSetFirstSent = Pending, next, false
	return q.st.Put(q.drainCtx, InFlight, r)
}

// settleLeased settles a record that is in flight.
func (q *Queue) settleLeased(r *Record, s State, o idem.Outcome, reason string, res *Response) error {
	return q.settle(r, InFlight, s, o, reason, res)
}

// settle settles r, stored in state old.
func (q *Queue) settle(r *Record, old, s State, o idem.Outcome, reason string, res *Response) error {
	markSettled(r, s, o, reason, res, q.now())
	if err := q.st.Put(q.drainCtx, old, r); err != nil {
		return err
	}
	q.settled(r, false)
	return nil
}

// markSettled marks r settled at now in state s.
func markSettled(r *Record, s State, o idem.Outcome, reason string, res *Response, now time.Time) {
	r.State, r.Outcome, r.Reason, r.Result, r.SettledAt = s, o, reason, res, now
	r.leaseSetFirstSent = false
}

// outcomeOf is the outcome of r if it ends now without success, by the rule
// idem.Outcome states: Unknown once an attempt left it in doubt, NotApplied
// otherwise. It is the prior of r's next attempt too (Client.Try), which so
// reads the doubt of attempts made before a restart.
func (q *Queue) outcomeOf(r *Record) idem.Outcome {
	if r.InDoubt {
		return idem.Unknown
	}
	return idem.NotApplied
}

// retryAfter is the Retry-After header of the answer to the attempt step,
// unparsed, for the retry rule (delay.Next) to judge; "" for none.
func retryAfter(step *idem.Step) string {
	if step.Response == nil {
		return ""
	}
	return step.Response.Header.Get("Retry-After")
}

// rule is what the retry rule (delay.Next) reads of the queue's options: no
// MaxElapsed, for the horizon and MaxAge bound a record's life.
func (q *Queue) rule() delay.Policy {
	p := q.opts.Policy
	return delay.Policy{MaxAttempts: q.opts.MaxAttempts, BaseDelay: p.BaseDelay, MaxDelay: p.MaxDelay, MaxRetryAfter: q.opts.MaxRetryAfter}
}

// keep reads the part of a response worth storing and closes it.
func (q *Queue) keep(resp *http.Response) *Response {
	defer resp.Body.Close()
	limit := int64(q.opts.MaxResultBody)
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	res := &Response{Status: resp.StatusCode, Header: http.Header{}, Truncated: err != nil} // a read cut short keeps what came
	if int64(len(body)) > limit {
		body, res.Truncated = body[:limit], true
	}
	if len(body) > 0 {
		res.Body = body
	}
	for _, k := range [...]string{"Content-Type", "Location", "Etag", "Idempotent-Replayed", "Idempotency-Replayed", "X-Idempotent-Replayed"} {
		if v := resp.Header.Values(k); len(v) > 0 {
			res.Header[k] = append([]string(nil), v...)
		}
	}
	return res
}
