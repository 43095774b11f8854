package idemotel

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"go.opentelemetry.io/otel/metric"

	"github.com/idem-go/idem"
)

// Instrument exports what c does: it sets c.OnOperation, c.OnSend and
// c.OnAttempt to hooks that make a span per operation and per attempt, put
// the attempt's trace context in its request's header, and record
// http.client.request.duration, http.client.active_requests and
// idem.operation.duration; each calls the hook c had, if any. It also
// registers observable instruments that read c.Stats at each collection.
// Call it before c's first use, as a Client's fields must not change
// afterwards.
//
// Unregister the result when c is retired, or its last Stats are reported
// for ever; the hooks stay on c and go on recording. The error is the
// meter's, when it cannot make an instrument; c is then unchanged.
func Instrument(c *idem.Client, opts ...Option) (metric.Registration, error) {
	return instrument(&c.OnOperation, &c.OnSend, &c.OnAttempt, c.Stats, newConfig(opts))
}

// InstrumentTransport is Instrument for an idem.Transport: an operation is
// a RoundTrip.
func InstrumentTransport(t *idem.Transport, opts ...Option) (metric.Registration, error) {
	return instrument(&t.OnOperation, &t.OnSend, &t.OnAttempt, t.Stats, newConfig(opts))
}

// instrument wraps the three hooks and registers stats.
func instrument(
	onOperation *func(context.Context, string, string) (context.Context, func(idem.Outcome, error)),
	onSend *func(*http.Request) context.Context,
	onAttempt *func(context.Context, idem.AttemptInfo),
	stats func() idem.Stats, c config,
) (metric.Registration, error) {
	h, err := newHooks(c)
	if err != nil {
		return nil, err
	}
	reg, err := observeStats(c, stats)
	if err != nil {
		return nil, err
	}
	*onOperation = h.operation(*onOperation)
	*onSend = h.send(*onSend)
	*onAttempt = h.attempt(*onAttempt)
	return reg, nil
}

// observeStats registers the observable instruments that read stats.
//
// Stats.Outcomes is left out: idem.operation.duration counts the same
// operations by idem.outcome. So are Requests, Retries, RetriesAfter,
// Conflicts and KeyReused: http.client.request.duration counts the same
// attempts with attributes (idem.action="retry" and idem.class for
// retries, http.response.status_code=409, idem.class="key_reused"). A
// second count of retries would disagree with it as soon as a queue shares
// the client: the client reports the queue's attempts, and their action,
// but the queue, not the client, makes the retry, so Stats.Retries never
// counts it.
func observeStats(c config, stats func() idem.Stats) (metric.Registration, error) {
	m := c.meter()
	counter := func(name, unit, desc string) (metric.Int64ObservableCounter, error) {
		return m.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
	}
	replays, err1 := counter(MetricReplays, "{operation}", "Operations the server answered from its store of completed requests.")
	refusals, err2 := counter(MetricBudgetRefusals, "{retry}", "Retries the retry budget refused.")
	tokens, err3 := m.Int64ObservableGauge(MetricBudgetTokens, metric.WithUnit("{token}"),
		metric.WithDescription("Tokens left in the retry budget of the origin that has fewest."))
	if err := errors.Join(err1, err2, err3); err != nil {
		return nil, fmt.Errorf("idemotel: %w", err)
	}
	// One callback for all, so that they come from one Stats snapshot.
	reg, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		s := stats()
		o.ObserveInt64(replays, int64(s.Replays), c.with())
		o.ObserveInt64(refusals, int64(s.BudgetRefusals), c.with())
		if s.BudgetTokens >= 0 { // -1: unlimited
			o.ObserveInt64(tokens, int64(s.BudgetTokens), c.with())
		}
		return nil
	}, replays, refusals, tokens)
	if err != nil {
		return nil, fmt.Errorf("idemotel: %w", err)
	}
	return reg, nil
}
