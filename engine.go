package idem

import (
	"context"
	"time"

	"github.com/idem-go/idem/internal/engine"
)

func init() {
	engine.Register(engine.Impl{
		Attempt:   sendOne,
		Unsettled: func(inDoubt bool) uint8 { return uint8(outcomeAfter(ClassNone, inDoubt)) },
	})
}

// sendOne makes exactly one attempt for a companion package such as the
// queue, which keeps the schedule (see package internal/engine): the run's
// policy loop is left out, its sender, decision and observer are the same.
func sendOne(ctx context.Context, call engine.Call) (engine.Step, error) {
	c, _ := call.Client.(*Client)
	in, _ := call.Intent.(*Intent)
	if c == nil {
		c = &Client{}
	}
	// The caller's schedule replaces the Client's Policy: of a policy, one
	// attempt needs only its timeout.
	p, err := Policy{AttemptTimeout: call.Timeout}.withDefaults()
	if err != nil {
		return engine.Step{}, err
	}
	var r run
	if err := c.initRun(&r, ctx, in, p); err != nil {
		return engine.Step{}, err
	}
	r.inDoubt = call.InDoubt
	resp, d, err := r.step(ctx)
	if err != nil {
		return engine.Step{}, err
	}
	a := r.latest
	s := engine.Step{
		Class: uint8(d.Class), Action: uint8(d.Action), Outcome: uint8(d.Outcome), InDoubt: d.InDoubt,
		Reason: d.Reason, Cause: d.Cause, Status: a.Status, Err: a.Err, Response: resp,
		// The caller's schedule decides what follows, not the table's
		// Action: observers hear of the attempt once it has.
		Report: func(action uint8, wait time.Duration) {
			r.latest.Wait = wait
			r.obs.reportAttempt(ctx, &r, Action(action))
		},
	}
	if resp != nil {
		s.RetryAfter = resp.Header.Get("Retry-After")
	}
	return s, nil
}
