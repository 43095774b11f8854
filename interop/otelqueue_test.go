package interop

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idem-go/idem"
	idemotel "github.com/idem-go/idem/otel"
	"github.com/idem-go/idem/pgqueue"
	"github.com/idem-go/idem/pgqueue/pgserver"
	"github.com/idem-go/idem/queue"
)

// TestOtelPostgresDrainLinks: a payment queued in PostgreSQL inside the
// business transaction (pgqueue.Producer.EnqueueTx) under the span
// "checkout", and drained by a replica (pgqueue.New) in two attempts (503,
// then 201), gives per attempt a drain span linked to "checkout" whose child
// is the attempt's span, whose context the server received.
func TestOtelPostgresDrainLinks(t *testing.T) {
	srv, err := pgserver.Start()
	if errors.Is(err, pgserver.ErrNoBinaries) && os.Getenv("CI") != "true" {
		t.Skip(err)
	}
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, srv.ConnString())
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	require.NoError(t, pgqueue.Migrate(ctx, pool))

	recorder := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	opts := []idemotel.Option{idemotel.WithTracerProvider(tp), idemotel.WithPropagator(propagation.TraceContext{})}

	var mu sync.Mutex
	var statuses = []int{http.StatusServiceUnavailable, http.StatusCreated}
	var parents []string
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		parents = append(parents, r.Header.Get("Traceparent"))
		status := http.StatusCreated
		if len(statuses) > 0 {
			status, statuses = statuses[0], statuses[1:]
		}
		mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(api.Close)

	client := &idem.Client{HTTPClient: api.Client()}
	_, err = idemotel.Instrument(client, opts...)
	require.NoError(t, err)
	tracer := idemotel.QueueTracer(opts...)

	// The producer: a business transaction that queues the payment.
	pctx, checkout := tp.Tracer("shop").Start(ctx, "checkout")
	in, err := idem.NewIntent(http.MethodPost, api.URL+"/payments", []byte(`{"amount":100}`))
	require.NoError(t, err)
	tx, err := pool.Begin(pctx)
	require.NoError(t, err)
	id, err := pgqueue.Producer{Tracer: tracer}.EnqueueTx(pctx, tx, in)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(pctx))
	checkout.End()

	// A replica drains it.
	q, err := pgqueue.New(ctx, pool, pgqueue.Options{Options: queue.Options{
		Client: client, Tracer: tracer,
		Policy: idem.Policy{BaseDelay: time.Millisecond, MaxDelay: time.Millisecond},
	}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = q.Close() })
	rctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = q.Run(rctx) })
	t.Cleanup(func() { stop(); wg.Wait() })
	r, err := q.Wait(ctx, id)
	require.NoError(t, err)
	require.Equal(t, queue.Done, r.State)
	assert.Equal(t, idem.Applied, r.Outcome)

	// A drain span ends once the queue has committed what followed, which
	// Wait may see first.
	require.Eventually(t, func() bool { return len(recorder.Ended()) >= 5 }, 10*time.Second, time.Millisecond)
	var drains, attempts []sdktrace.ReadOnlySpan
	for _, s := range recorder.Ended() {
		switch s.Name() {
		case idemotel.SpanDrainPrefix + "POST":
			drains = append(drains, s)
		case idemotel.SpanAttemptPrefix + "POST":
			attempts = append(attempts, s)
		}
	}
	require.Len(t, drains, 2, "a drain span per attempt")
	require.Len(t, attempts, 2, "an attempt span per attempt")
	for i, d := range drains {
		assert.Equal(t, trace.SpanKindConsumer, d.SpanKind())
		require.Len(t, d.Links(), 1, "drain %d", i+1)
		assert.Equal(t, checkout.SpanContext().SpanID(), d.Links()[0].SpanContext.SpanID(), "drain %d links to checkout", i+1)
		assert.Equal(t, d.SpanContext().SpanID(), attempts[i].Parent().SpanID(), "attempt %d is the drain's child", i+1)
		sc := attempts[i].SpanContext()
		mu.Lock()
		assert.Equal(t, "00-"+sc.TraceID().String()+"-"+sc.SpanID().String()+"-01", parents[i], "attempt %d's traceparent", i+1)
		mu.Unlock()
	}
	assert.Contains(t, attrValue(drains[1], "idem.outcome"), "applied")
	assert.Equal(t, "1", attrValue(attempts[1], "http.request.resend_count"), "the queue's second attempt is a resend")
}

// attrValue returns the value of s's attribute key, "" without it.
func attrValue(s sdktrace.ReadOnlySpan, key string) string {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.Emit()
		}
	}
	return ""
}
