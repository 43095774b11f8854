package idemotel

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/metric"

	"github.com/idem-go/idem/queue"
)

// ObserveQueue registers two instruments that read q at each collection:
// idem.queue.record.count, the records in each state, and
// idem.queue.oldest_pending, how long the oldest unsettled record has
// waited since it was enqueued, 0 when none waits: the first sign of a
// drainer that is stuck or not running. Each collection makes two read
// transactions on q's file.
//
// A queue shared by replicas (package pgqueue) counts the whole fleet's
// records from each replica: observe it from one replica, or aggregate the
// replicas' series with max, not sum. Nothing here counts settle events, so
// Remote ones (queue.Options.NotifyRemote) are never counted twice.
//
// Unregister the result before closing q: a closed queue answers every
// collection with an error. The error is the meter's, when it cannot make an
// instrument.
func ObserveQueue(q *queue.Queue, opts ...Option) (metric.Registration, error) {
	c := newConfig(opts)
	m := c.meter()
	// An up-down counter rather than a gauge: the states add up to the
	// queue's size, and a sum across them means something.
	records, err1 := m.Int64ObservableUpDownCounter(MetricQueueRecordCount,
		metric.WithUnit("{record}"),
		metric.WithDescription("Records in the queue, by state."))
	oldest, err2 := m.Float64ObservableGauge(MetricQueueOldestPending,
		metric.WithUnit("s"),
		metric.WithDescription("How long the oldest unsettled record has waited since it was enqueued; 0 when none waits."))
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("idemotel: %w", err)
	}
	reg, err := m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		counts, err := q.Counts(ctx)
		if err != nil {
			return fmt.Errorf("idemotel: %s: %w", MetricQueueRecordCount, err)
		}
		for s, n := range counts {
			o.ObserveInt64(records, int64(n), c.with(AttrQueueState.String(s.String())))
		}
		age, err := q.OldestPending(ctx)
		if err != nil {
			return fmt.Errorf("idemotel: %s: %w", MetricQueueOldestPending, err)
		}
		o.ObserveFloat64(oldest, age.Seconds(), c.with())
		return nil
	}, records, oldest)
	if err != nil {
		return nil, fmt.Errorf("idemotel: %w", err)
	}
	return reg, nil
}
