package idemotel

import (
	"context"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/queue"
)

func TestObserveQueue(t *testing.T) {
	reader, provider := newReader(t)
	q, err := queue.Open(filepath.Join(t.TempDir(), "q.db"), queue.Options{})
	require.NoError(t, err)
	reg, err := ObserveQueue(q, provider)
	require.NoError(t, err)

	got := collect(t, reader)
	assert.Equal(t, points{"-": 0}, got[MetricQueueOldestPending].points, "%s of an empty queue", MetricQueueOldestPending)

	// No drainer runs: the records stay pending.
	for range 3 {
		in, err := idem.NewIntent(http.MethodPost, "http://shop.invalid/orders", []byte(`{}`))
		require.NoError(t, err)
		_, err = q.Enqueue(t.Context(), in)
		require.NoError(t, err)
	}
	got = collect(t, reader)
	records := got[MetricQueueRecordCount]
	assert.Equal(t, "up-down counter {record}", records.kind+" "+records.unit, MetricQueueRecordCount)
	assert.Equal(t, points{
		"idem.queue.state=pending": 3, "idem.queue.state=in_flight": 0, "idem.queue.state=done": 0,
		"idem.queue.state=failed": 0, "idem.queue.state=expired": 0,
	}, records.points, MetricQueueRecordCount)
	oldest := got[MetricQueueOldestPending]
	assert.Equal(t, "gauge s", oldest.kind+" "+oldest.unit, MetricQueueOldestPending)
	assert.Positive(t, oldest.points["-"], "%s with records pending", MetricQueueOldestPending)

	// Unregistered before Close, as the documentation asks: collections go on
	// without error.
	require.NoError(t, reg.Unregister())
	require.NoError(t, q.Close())
	got = collect(t, reader)
	assert.Empty(t, got[MetricQueueRecordCount].points, "%s after Unregister", MetricQueueRecordCount)
}

// TestInstrumentQueueAttempt: an attempt a queue makes through an
// instrumented client is recorded with what the queue did next: a 503 on
// the only attempt the policy allows fails the record, so the action is
// "stop", not the "retry" the decision table advises.
func TestInstrumentQueueAttempt(t *testing.T) {
	reader, provider := newReader(t)
	recorder, tracing := newTracer(t)
	client := &idem.Client{}
	_, err := Instrument(client, provider, tracing)
	require.NoError(t, err)
	srv := scripted(t, []int{http.StatusServiceUnavailable})
	q, err := queue.Open(filepath.Join(t.TempDir(), "q.db"), queue.Options{Client: client, MaxAttempts: 1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = q.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	go func() { _ = q.Run(ctx) }()

	in, err := idem.NewIntent(http.MethodPost, srv.URL+"/orders", []byte(`{}`))
	require.NoError(t, err)
	id, err := q.Enqueue(ctx, in)
	require.NoError(t, err)
	r, err := q.Wait(ctx, id)
	require.NoError(t, err)
	require.Equal(t, queue.Failed, r.State)

	want := "error.type=503 http.request.method=POST http.response.status_code=503 idem.action=stop idem.class=ambiguous " + hostAttrs(srv)
	assert.Equal(t, points{want: 1}, collect(t, reader)[MetricRequestDuration].points, MetricRequestDuration)
	// Try makes no operation: the attempt's span is a root.
	assert.Equal(t, []string{"HTTP POST client parent=- " + want + " status=Error: "}, spanLines(recorder.Ended(), nil), "spans")
}
