package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/queue"
)

// This file is the part to copy: it turns idem's OnAttempt hook, Stats and a
// queue's read methods into OpenTelemetry instruments. It needs only the
// metric API; the application chooses the SDK and the exporter.
//
// No attribute carries a key, a body or a URL. Even without its query a URL
// path often holds IDs (/orders/8213), and one series per order is a
// cardinality explosion; method, class, action and status are a few dozen
// series at most.

// Attribute keys, in the snake_case OpenTelemetry uses for attribute values
// too (see label).
const (
	attrMethod  = attribute.Key("method")
	attrClass   = attribute.Key("class")
	attrAction  = attribute.Key("action")
	attrStatus  = attribute.Key("status_code")
	attrOutcome = attribute.Key("outcome")
	attrState   = attribute.Key("state")
)

// durationBuckets are the bucket bounds of idem.attempt.duration, in seconds:
// OpenTelemetry's advice for http.client.request.duration, so that idem's
// histogram lines up with an instrumented http.Client's. A function, not a
// variable, so no caller can change them for everyone.
func durationBuckets() []float64 {
	return []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10}
}

// NewAttemptHook returns a hook for idem.Client.OnAttempt or
// idem.Transport.OnAttempt that records every attempt on m: the counter
// idem.attempts and the histogram idem.attempt.duration (seconds), both with
// the attributes method, class and action, and status_code when a response
// came. The hook is safe for concurrent use, as OnAttempt requires, since
// the instruments are.
//
// The error is m's, when it cannot make an instrument.
func NewAttemptHook(m metric.Meter) (func(context.Context, idem.AttemptInfo), error) {
	attempts, err1 := m.Int64Counter("idem.attempts",
		metric.WithUnit("{attempt}"),
		metric.WithDescription("Attempts sent, the first of each operation included."))
	duration, err2 := m.Float64Histogram("idem.attempt.duration",
		metric.WithUnit("s"),
		metric.WithDescription("Duration of one attempt, until response headers or an error."),
		metric.WithExplicitBucketBoundaries(durationBuckets()...))
	if err := errors.Join(err1, err2); err != nil {
		return nil, err
	}
	return func(ctx context.Context, ai idem.AttemptInfo) {
		attrs := []attribute.KeyValue{
			attrMethod.String(ai.Method),
			attrClass.String(label(ai.Attempt.Class)),
			attrAction.String(label(ai.Action)),
		}
		if ai.Attempt.Status != 0 { // no response: a status of 0 would be a fake series
			attrs = append(attrs, attrStatus.Int(ai.Attempt.Status))
		}
		opt := metric.WithAttributeSet(attribute.NewSet(attrs...))
		// ctx is the operation's: measurements link to the caller's span.
		attempts.Add(ctx, 1, opt)
		duration.Record(ctx, ai.Attempt.Duration.Seconds(), opt)
	}, nil
}

// RegisterStats registers observable counters on m that read stats once per
// collection: idem.operations by outcome, idem.retries by the class of the
// attempt retried, idem.replays, idem.conflicts, idem.key_reused and
// idem.budget_refusals. Pass a Client's or a Transport's Stats method.
//
// Stats.Attempts is left out: the hook's idem.attempts counts the same
// attempts with attributes. Call Unregister on the result when the client is
// retired, or its last values are reported for ever.
func RegisterStats(m metric.Meter, stats func() idem.Stats) (metric.Registration, error) {
	counter := func(name, unit, desc string) (metric.Int64ObservableCounter, error) {
		return m.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
	}
	operations, err1 := counter("idem.operations", "{operation}", "Finished operations, by outcome.")
	retries, err2 := counter("idem.retries", "{retry}", "Retries, by the class of the attempt they followed.")
	replays, err3 := counter("idem.replays", "{response}", "Successes the server answered from its store of completed requests.")
	conflicts, err4 := counter("idem.conflicts", "{response}", "409 answers: the same key was in flight.")
	keyReused, err5 := counter("idem.key_reused", "{response}", "422 answers to keyed requests: the key is held for another payload.")
	refusals, err6 := counter("idem.budget_refusals", "{retry}", "Retries the retry budget refused.")
	if err := errors.Join(err1, err2, err3, err4, err5, err6); err != nil {
		return nil, err
	}
	// One callback for all six, so that they come from one Stats snapshot.
	return m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		s := stats()
		// Stats leaves zero entries out of its maps, so a series appears with
		// its first operation; a rate over it still starts at zero.
		for out, n := range s.Outcomes {
			o.ObserveInt64(operations, int64(n), metric.WithAttributes(attrOutcome.String(outcomeLabel(out))))
		}
		for c, n := range s.RetriesAfter {
			o.ObserveInt64(retries, int64(n), metric.WithAttributes(attrClass.String(label(c))))
		}
		o.ObserveInt64(replays, int64(s.Replays))
		o.ObserveInt64(conflicts, int64(s.Conflicts))
		o.ObserveInt64(keyReused, int64(s.KeyReused))
		o.ObserveInt64(refusals, int64(s.BudgetRefusals))
		return nil
	}, operations, retries, replays, conflicts, keyReused, refusals)
}

// QueueReader is what RegisterQueue reads; a *queue.Queue has both methods.
type QueueReader interface {
	Counts() (map[queue.State]int, error)
	OldestPending() (time.Duration, error)
}

// RegisterQueue registers, on m, idem.queue.records (records per state, an
// up-down counter since states add up to the file's size) and
// idem.queue.oldest_pending (seconds the oldest unsettled record has waited,
// a gauge: the first sign of a drainer that is stuck or offline). Each
// collection is one read transaction per method.
//
// Call Unregister on the result before closing the queue: a closed queue
// answers every collection with an error.
func RegisterQueue(m metric.Meter, q QueueReader) (metric.Registration, error) {
	records, err1 := m.Int64ObservableUpDownCounter("idem.queue.records",
		metric.WithUnit("{record}"),
		metric.WithDescription("Records in the queue file, by state."))
	oldest, err2 := m.Float64ObservableGauge("idem.queue.oldest_pending",
		metric.WithUnit("s"),
		metric.WithDescription("How long the oldest unsettled record has waited since it was enqueued; 0 when none waits."))
	if err := errors.Join(err1, err2); err != nil {
		return nil, err
	}
	return m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		counts, err := q.Counts()
		if err != nil {
			return fmt.Errorf("idem.queue.records: %w", err)
		}
		for s, n := range counts {
			o.ObserveInt64(records, int64(n), metric.WithAttributes(attrState.String(label(s))))
		}
		age, err := q.OldestPending()
		if err != nil {
			return fmt.Errorf("idem.queue.oldest_pending: %w", err)
		}
		o.ObserveFloat64(oldest, age.Seconds())
		return nil
	}, records, oldest)
}

// label turns the String of one of idem's enums ("not processed") into an
// attribute value in snake_case ("not_processed"). Working from String
// rather than a table keeps values idem adds later from being dropped.
func label(v fmt.Stringer) string { return strings.ReplaceAll(v.String(), " ", "_") }

// outcomeLabel is label for an Outcome, whose Unknown reads "outcome
// unknown": beside the outcome attribute key, plain "unknown" is enough.
func outcomeLabel(o idem.Outcome) string {
	if o == idem.Unknown {
		return "unknown"
	}
	return label(o)
}
