package idemotel

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/queue"
)

// TestQueueTracer: a record enqueued under the span "pay" is drained in two
// attempts (503, then 201); each attempt runs in a drain span, a root
// linked to "pay", whose child is the attempt's CLIENT span, and the
// request carries that span's context. A record enqueued without a span
// drains in a span without links.
func TestQueueTracer(t *testing.T) {
	recorder, tracing := newTracer(t)
	client := &idem.Client{}
	_, err := Instrument(client, tracing)
	require.NoError(t, err)
	srv, parents := scriptedTraced(t, []int{503, 201, 201})
	q, err := queue.Open(filepath.Join(t.TempDir(), "q.db"), queue.Options{
		Client: client, Tracer: QueueTracer(tracing),
		Policy: idem.Policy{BaseDelay: time.Millisecond, MaxDelay: time.Millisecond},
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = q.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()

	pctx, pay := callerSpan(t, recorder)
	in, err := idem.NewIntent(http.MethodPost, srv.URL+"/orders?api_key=secret", []byte(`{}`))
	require.NoError(t, err)
	id, err := q.Enqueue(pctx, in)
	require.NoError(t, err)
	pay.End()
	r, err := q.Get(ctx, id)
	require.NoError(t, err)
	tp := r.Trace["traceparent"]
	assert.Equal(t, "00-"+pay.SpanContext().TraceID().String()+"-"+pay.SpanContext().SpanID().String()+"-01", tp,
		"the record keeps the producer's trace context")

	go func() { _ = q.Run(ctx) }()
	r, err = q.Wait(ctx, id)
	require.NoError(t, err)
	require.Equal(t, queue.Done, r.State)

	// The drain span ends once the queue has committed what followed, which
	// Wait may see first.
	endedAtLeast(t, recorder, 5)
	spans := recorder.Ended()
	require.Len(t, spans, 5, "pay, then an attempt span and a drain span per attempt")
	host := hostAttrs(srv)
	want := []string{
		"pay internal parent=- -",
		"HTTP POST client parent=2 error.type=503 http.request.method=POST http.response.status_code=503 idem.action=retry idem.class=ambiguous " + host + " status=Error: ",
		"idem drain POST consumer parent=- http.request.method=POST idem.action=retry idem.queue.record.attempt=1 idem.queue.record.id=" + id.String() + " " + host,
		"HTTP POST client parent=4 http.request.method=POST http.request.resend_count=1 http.response.status_code=201 idem.action=done idem.class=applied " + host,
		"idem drain POST consumer parent=- http.request.method=POST idem.action=done idem.outcome=applied idem.queue.record.attempt=2 idem.queue.record.id=" + id.String() + " " + host,
	}
	assert.Equal(t, want, spanLines(spans, nil), "spans")
	for _, i := range []int{2, 4} {
		links := spans[i].Links()
		require.Len(t, links, 1, "drain span %d links to its producer", i)
		assert.Equal(t, pay.SpanContext().SpanID(), links[0].SpanContext.SpanID())
		assert.Equal(t, pay.SpanContext().TraceID(), links[0].SpanContext.TraceID())
	}
	var sent []string
	for _, s := range []sdktrace.ReadOnlySpan{spans[1], spans[3]} {
		sc := s.SpanContext()
		sent = append(sent, "00-"+sc.TraceID().String()+"-"+sc.SpanID().String()+"-01")
	}
	assert.Equal(t, sent, parents(), "traceparent of each request: its attempt's span")
	for _, s := range spans {
		for _, kv := range s.Attributes() {
			assert.NotContains(t, kv.Value.Emit(), "secret", "%s: %s", s.Name(), kv.Key)
		}
	}

	// Enqueued with no span: nothing stored, a drain span without links.
	in, err = idem.NewIntent(http.MethodPost, srv.URL+"/orders", []byte(`{"n":2}`))
	require.NoError(t, err)
	id2, err := q.Enqueue(context.Background(), in)
	require.NoError(t, err)
	r, err = q.Wait(ctx, id2)
	require.NoError(t, err)
	assert.Nil(t, r.Trace)
	endedAtLeast(t, recorder, 7)
	spans = recorder.Ended()
	require.Len(t, spans, 7)
	last := spans[6]
	assert.Equal(t, SpanDrainPrefix+"POST", last.Name())
	assert.Empty(t, last.Links())
}

// TestQueueTracerStoredForm: a record keeps its producer's context in the
// W3C form even when the application's propagator is another (here none),
// and a drain span ends in error when no attempt could be made.
func TestQueueTracerStoredForm(t *testing.T) {
	recorder, tracing := newTracer(t)
	tr := QueueTracer(tracing, WithPropagator(propagation.NewCompositeTextMapPropagator()))
	ctx, span := callerSpan(t, recorder)
	stored := tr.Inject(ctx)
	span.End()
	require.Contains(t, stored, "traceparent")
	assert.Nil(t, tr.Inject(context.Background()), "no span, nothing stored")

	in, err := idem.NewIntent(http.MethodPut, "http://shop.invalid/a", nil)
	require.NoError(t, err)
	_, end := tr.StartDrain(context.Background(), &queue.Record{ID: 7, Intent: in, NumAttempts: 1, Trace: stored})
	end(idem.ActionRetry, idem.NoOutcome, context.DeadlineExceeded)
	spans := recorder.Ended()
	require.Len(t, spans, 2)
	got := spanLines(spans[1:], nil)[0]
	assert.True(t, strings.HasPrefix(got, "idem drain PUT consumer parent=- error.type=timeout"), got)
	assert.Contains(t, got, "status=Error: context deadline exceeded")
	assert.Equal(t, span.SpanContext().SpanID(), spans[1].Links()[0].SpanContext.SpanID())

	// A damaged stored value links to nothing, and does not fail the drain.
	_, end = tr.StartDrain(context.Background(), &queue.Record{ID: 8, Intent: in, Trace: map[string]string{"traceparent": "00-zz"}})
	end(idem.ActionDone, idem.Applied, nil)
	spans = recorder.Ended()
	assert.Empty(t, spans[2].Links())
}

// endedAtLeast waits until recorder has n ended spans.
func endedAtLeast(t *testing.T, recorder *spanRecorder, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return len(recorder.Ended()) >= n }, 10*time.Second, time.Millisecond,
		"%d ended spans", n)
}
