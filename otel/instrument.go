package idemotel

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/metric"

	"github.com/idem-go/idem"
)

// Instrument exports c's attempts and Stats: it sets c.OnAttempt to a hook
// that records idem.attempts and idem.attempt.duration and adds an
// idem.attempt event to the operation's span, then calls the hook c had, if
// any; and it registers observable counters that read c.Stats at each
// collection. Call it before c's first use, as a Client's fields must not
// change afterwards.
//
// Unregister the result when c is retired, or its last Stats are reported
// for ever; the hook stays on c and goes on recording. The error is the
// meter's, when it cannot make an instrument; c is then unchanged.
func Instrument(c *idem.Client, opts ...Option) (metric.Registration, error) {
	return instrument(&c.OnAttempt, c.Stats, newConfig(opts))
}

// InstrumentTransport is Instrument for an idem.Transport.
func InstrumentTransport(t *idem.Transport, opts ...Option) (metric.Registration, error) {
	return instrument(&t.OnAttempt, t.Stats, newConfig(opts))
}

// instrument wraps the hook in *onAttempt and registers stats.
func instrument(onAttempt *func(context.Context, idem.AttemptInfo), stats func() idem.Stats, c config) (metric.Registration, error) {
	hook, err := attemptHook(c, *onAttempt)
	if err != nil {
		return nil, err
	}
	reg, err := observeStats(c, stats)
	if err != nil {
		return nil, err
	}
	*onAttempt = hook
	return reg, nil
}

// observeStats registers the observable counters that read stats.
//
// Stats.Requests, Retries, RetriesAfter, Conflicts and KeyReused are left
// out: idem.attempts counts the same attempts with attributes
// (idem.action="retry" and idem.class for retries, http.response.status_code=409,
// idem.class="key_reused"). A second count of retries would disagree with
// it as soon as a queue shares the client: the client reports the queue's
// attempts, and their action, but the queue, not the client, makes the
// retry, so Stats.Retries never counts it.
func observeStats(c config, stats func() idem.Stats) (metric.Registration, error) {
	m := c.meter()
	counter := func(name, unit, desc string) (metric.Int64ObservableCounter, error) {
		return m.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
	}
	operations, err1 := counter(MetricOperations, "{operation}", "Operations Do or RoundTrip finished, by outcome.")
	replays, err2 := counter(MetricReplays, "{operation}", "Operations the server answered from its store of completed requests.")
	refusals, err3 := counter(MetricBudgetRefusals, "{retry}", "Retries the retry budget refused.")
	tokens, err4 := m.Int64ObservableGauge(MetricBudgetTokens, metric.WithUnit("{token}"),
		metric.WithDescription("Tokens left in the retry budget."))
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return nil, fmt.Errorf("idemotel: %w", err)
	}
	// One callback for all, so that they come from one Stats snapshot.
	reg, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		s := stats()
		// Stats leaves zero entries out of its maps, so a series appears with
		// its first operation; a rate over it still starts at zero.
		for out, n := range s.Outcomes {
			o.ObserveInt64(operations, int64(n), c.with(AttrOutcome.String(out.String())))
		}
		o.ObserveInt64(replays, int64(s.Replays), c.with())
		o.ObserveInt64(refusals, int64(s.BudgetRefusals), c.with())
		if s.BudgetTokens >= 0 { // -1: unlimited
			o.ObserveInt64(tokens, int64(s.BudgetTokens), c.with())
		}
		return nil
	}, operations, replays, refusals, tokens)
	if err != nil {
		return nil, fmt.Errorf("idemotel: %w", err)
	}
	return reg, nil
}
