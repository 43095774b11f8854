// Command otel shows idem's traces and metrics in OpenTelemetry, through the
// companion module github.com/idem-go/idem/otel (package idemotel).
//
// It starts a loopback shop that implements idempotency keys and loses one
// answer: it places the first payment, then answers 503, as a server whose
// answer is lost on the way back; the retry, with the same key, gets the
// stored answer with "Idempotent-Replayed: true". The shop's handler is
// wrapped in otelhttp.NewHandler with the W3C propagator, so its spans join
// the client's trace. run then
//
//  1. sends that payment with an instrumented idem.Client under an
//     application span, "checkout": the trace is checkout > idem POST (the
//     operation) > two HTTP POST (the attempts, CLIENT spans) > the shop's
//     SERVER span under each attempt, whose parent came in the request's
//     traceparent header;
//  2. enqueues a payment in a queue under a span, "order-placed", and lets
//     the queue drain it: the drain is a CONSUMER span, "idem drain POST",
//     the root of its own trace, linked to order-placed's span;
//  3. collects the metrics: http.client.request.duration and
//     http.client.active_requests (the HTTP semantic conventions, per
//     attempt), idem.operation.duration, idem.replays,
//     idem.retry_budget.*, idem.queue.record.count and
//     idem.queue.oldest_pending.
//
// It prints a summary of the traces first, one line per span indented under
// its parent, from a tracetest.SpanRecorder; then what the stdout exporters
// printed of the same spans and metrics. An application passes its own
// providers to idemotel.Instrument, idemotel.QueueTracer and
// idemotel.ObserveQueue as run does, with a batching span processor, a
// periodic reader and an OTLP exporter in the stdout exporters' place.
//
// It lives in its own module so that idem itself does not depend on
// OpenTelemetry.
package main

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/stdout/stdoutmetric"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idem-go/idem"
	idemotel "github.com/idem-go/idem/otel"
	"github.com/idem-go/idem/queue"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := run(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "otel:", err)
		os.Exit(1)
	}
}

// policy keeps the example fast: a retry waits a few milliseconds.
var policy = idem.Policy{BaseDelay: 5 * time.Millisecond, MaxDelay: 20 * time.Millisecond}

// telemetry is the SDK's side: the providers, the span recorder the
// summary reads and the stdout exporter's output.
type telemetry struct {
	tracers  *sdktrace.TracerProvider
	recorder *tracetest.SpanRecorder
	spanOut  bytes.Buffer // what stdouttrace printed
	meters   *sdkmetric.MeterProvider
	reader   *sdkmetric.ManualReader
}

// newTelemetry makes the providers. stdouttrace writes to a buffer, copied
// out after the summary; a synchronous processor exports each span as it
// ends, in the order they end.
func newTelemetry() (*telemetry, error) {
	res, err := resource.Merge(resource.Default(),
		resource.NewSchemaless(attribute.String("service.name", "idem-otel-example")))
	if err != nil {
		return nil, err
	}
	t := &telemetry{recorder: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	exporter, err := stdouttrace.New(stdouttrace.WithWriter(&t.spanOut))
	if err != nil {
		return nil, err
	}
	t.tracers = sdktrace.NewTracerProvider(
		sdktrace.WithResource(res),
		sdktrace.WithSpanProcessor(t.recorder),
		sdktrace.WithSyncer(exporter),
	)
	t.meters = sdkmetric.NewMeterProvider(sdkmetric.WithResource(res), sdkmetric.WithReader(t.reader))
	return t, nil
}

func (t *telemetry) shutdown() {
	_ = t.tracers.Shutdown(context.Background())
	_ = t.meters.Shutdown(context.Background())
}

// run sends the payments and prints the traces and metrics to w.
func run(ctx context.Context, w io.Writer) error {
	tel, err := newTelemetry()
	if err != nil {
		return err
	}
	defer tel.shutdown()
	tracers, meters := tel.tracers, tel.meters
	w3c := propagation.TraceContext{}

	// The shop's spans come from otelhttp, with the same TracerProvider
	// and the W3C propagator: its SERVER spans are the attempts' children.
	// Its metrics go to the global MeterProvider, which records nothing,
	// to keep the output to idem's.
	s := newShop()
	srv := httptest.NewServer(otelhttp.NewHandler(s, "shop",
		otelhttp.WithTracerProvider(tracers), otelhttp.WithPropagators(w3c)))
	defer srv.Close()

	client := &idem.Client{HTTPClient: srv.Client(), Policy: policy}
	reg, err := idemotel.Instrument(client, idemotel.WithTracerProvider(tracers),
		idemotel.WithMeterProvider(meters), idemotel.WithPropagator(w3c))
	if err != nil {
		return err
	}
	defer reg.Unregister()
	app := tracers.Tracer("example/checkout")

	if err := checkout(ctx, app, client, srv.URL); err != nil {
		return err
	}
	// The queue's metrics are read at collection: it stays open until run
	// returns.
	dir, err := os.MkdirTemp("", "idem-otel-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	q, err := queue.Open(filepath.Join(dir, "payments.db"), queue.Options{
		Client: client,
		Policy: policy,
		Tracer: idemotel.QueueTracer(idemotel.WithTracerProvider(tracers)),
	})
	if err != nil {
		return err
	}
	defer q.Close()
	qreg, err := idemotel.ObserveQueue(q, idemotel.WithMeterProvider(meters))
	if err != nil {
		return err
	}
	defer qreg.Unregister() // deferred after q.Close, so it runs first
	if err := placeOrder(ctx, app, q, srv.URL); err != nil {
		return err
	}
	// Close waits for the shop's handlers, so every span has ended.
	srv.Close()

	var rm metricdata.ResourceMetrics
	if err := tel.reader.Collect(ctx, &rm); err != nil {
		return err
	}
	printSummary(w, tel.recorder.Ended(), s.log(), rm)
	fmt.Fprintln(w, "\n== The spans, as stdouttrace printed them as they ended")
	if _, err := tel.spanOut.WriteTo(w); err != nil {
		return err
	}
	fmt.Fprintln(w, "\n== The metrics, as stdoutmetric printed them")
	metricExporter, err := stdoutmetric.New(stdoutmetric.WithWriter(w))
	if err != nil {
		return err
	}
	return metricExporter.Export(ctx, &rm)
}

// checkout sends one payment with c under the application's span
// "checkout". The shop loses its first answer: c retries and gets it
// replayed.
func checkout(ctx context.Context, app trace.Tracer, c *idem.Client, base string) error {
	ctx, span := app.Start(ctx, "checkout")
	defer span.End()
	in, err := idem.NewIntent(http.MethodPost, base+"/payments", []byte(`{"order":"A-1","amount":"12.50"}`))
	if err != nil {
		return err
	}
	res, err := c.Do(ctx, in)
	if err != nil {
		return err
	}
	return res.Response.Body.Close()
}

// placeOrder enqueues a payment in q under the span "order-placed", runs
// the queue until the payment is settled and stops it.
func placeOrder(ctx context.Context, app trace.Tracer, q *queue.Queue, base string) error {
	in, err := idem.NewIntent(http.MethodPost, base+"/payments", []byte(`{"order":"B-7","amount":"40.00"}`))
	if err != nil {
		return err
	}
	pctx, span := app.Start(ctx, "order-placed")
	id, err := q.Enqueue(pctx, in)
	span.End()
	if err != nil {
		return err
	}

	rctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = q.Run(rctx) }) // returns nil once stopped
	defer func() { stop(); wg.Wait() }()
	r, err := q.Wait(ctx, id)
	if err != nil {
		return err
	}
	if r.State != queue.Done {
		return fmt.Errorf("record %d is %s: %s", id, r.State, r.Reason)
	}
	return nil
}

// shop is a payment server that implements idempotency keys: a retry with
// a key it has seen gets the stored answer, "Idempotent-Replayed: true". It
// loses the answer to its first payment: it places it, then answers 503. A
// shop is safe for concurrent use.
type shop struct {
	mux *http.ServeMux

	mu       sync.Mutex      // guards the fields below
	lost     bool            // an answer was lost
	placed   map[string]bool // keys of the payments placed
	received []string        // one line per request
}

func newShop() *shop {
	s := &shop{mux: http.NewServeMux(), placed: map[string]bool{}}
	// The pattern names otelhttp's server span, "POST /payments".
	s.mux.HandleFunc("POST /payments", s.pay)
	return s
}

func (s *shop) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

func (s *shop) pay(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get(idem.DefaultKeyHeader)
	if key == "" {
		http.Error(w, "Idempotency-Key required", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	replay := s.placed[key]
	s.placed[key] = true
	lose := !replay && !s.lost
	s.lost = s.lost || lose
	status := http.StatusCreated
	if lose {
		status = http.StatusServiceUnavailable
	}
	s.received = append(s.received, fmt.Sprintf("%s %s traceparent=%s replayed=%t -> %d",
		r.Method, r.URL.Path, r.Header.Get("traceparent"), replay, status))
	s.mu.Unlock()
	switch {
	case lose:
		http.Error(w, "payment placed, answer lost", status)
	case replay:
		w.Header().Set("Idempotent-Replayed", "true")
		w.WriteHeader(status)
	default:
		w.WriteHeader(status)
	}
}

// log returns a line per request the shop received, in order.
func (s *shop) log() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.received)
}

// summaryKeys are the attributes the summary shows, in this order.
var summaryKeys = []attribute.Key{
	"http.response.status_code", "error.type", "http.request.resend_count",
	"idem.class", "idem.action", "idem.outcome",
	"idem.queue.record.id", "idem.queue.record.attempt",
}

// printSummary writes the traces, one line per span indented under its
// parent, children in the order they started; what the shop received; and
// the metrics, one line per instrument.
func printSummary(w io.Writer, spans []sdktrace.ReadOnlySpan, received []string, rm metricdata.ResourceMetrics) {
	names := map[trace.SpanID]string{}
	children := map[trace.SpanID][]sdktrace.ReadOnlySpan{}
	var roots []sdktrace.ReadOnlySpan
	for _, s := range spans {
		names[s.SpanContext().SpanID()] = s.Name()
	}
	for _, s := range spans {
		if p := s.Parent(); p.IsValid() && names[p.SpanID()] != "" {
			children[p.SpanID()] = append(children[p.SpanID()], s)
		} else {
			roots = append(roots, s)
		}
	}
	byStart := func(a, b sdktrace.ReadOnlySpan) int { return a.StartTime().Compare(b.StartTime()) }
	slices.SortStableFunc(roots, byStart)

	fmt.Fprintln(w, "== Traces: a line per span, under its parent (from a tracetest.SpanRecorder)")
	var walk func(s sdktrace.ReadOnlySpan, depth int)
	walk = func(s sdktrace.ReadOnlySpan, depth int) {
		fmt.Fprintln(w, spanLine(s, depth, names))
		kids := children[s.SpanContext().SpanID()]
		slices.SortStableFunc(kids, byStart)
		for _, k := range kids {
			walk(k, depth+1)
		}
	}
	for _, r := range roots {
		fmt.Fprintf(w, "trace %s\n", r.SpanContext().TraceID())
		walk(r, 1)
	}

	fmt.Fprintln(w, "\n== The shop received")
	for _, l := range received {
		fmt.Fprintln(w, "  "+l)
	}

	fmt.Fprintln(w, "\n== Metrics: a line per instrument (in full below)")
	for _, sm := range rm.ScopeMetrics {
		ms := slices.Clone(sm.Metrics)
		slices.SortFunc(ms, func(a, b metricdata.Metrics) int { return cmp.Compare(a.Name, b.Name) })
		for _, m := range ms {
			fmt.Fprintf(w, "  %-30s %s\n", m.Name, metricLine(m.Data))
		}
	}
}

// spanLine formats s at depth: its name, kind, the summaryKeys it has, its
// span ID and its links, each by span ID and name.
func spanLine(s sdktrace.ReadOnlySpan, depth int, names map[trace.SpanID]string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-*s%-*s %-8s", 2*depth, "", 24-2*depth, s.Name(), s.SpanKind())
	set := attribute.NewSet(s.Attributes()...)
	for _, k := range summaryKeys {
		if v, ok := set.Value(k); ok {
			fmt.Fprintf(&b, " %s=%s", k, v.Emit())
		}
	}
	fmt.Fprintf(&b, " span=%s", s.SpanContext().SpanID())
	for _, l := range s.Links() {
		id := l.SpanContext.SpanID()
		fmt.Fprintf(&b, " link=%s(%s)", id, cmp.Or(names[id], "?"))
	}
	return b.String()
}

// metricLine sums up an instrument's data points: a count per histogram
// series, the value of a counter or gauge, with the attributes that tell
// the series apart. Durations are left out: they change from run to run.
func metricLine(data metricdata.Aggregation) string {
	var parts []string
	switch d := data.(type) {
	case metricdata.Histogram[float64]:
		for _, p := range d.DataPoints {
			parts = append(parts, point(fmt.Sprintf("count=%d", p.Count), p.Attributes))
		}
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			parts = append(parts, point(fmt.Sprint(p.Value), p.Attributes))
		}
	case metricdata.Gauge[int64]:
		for _, p := range d.DataPoints {
			parts = append(parts, point(fmt.Sprint(p.Value), p.Attributes))
		}
	case metricdata.Gauge[float64]:
		for _, p := range d.DataPoints {
			parts = append(parts, point(fmt.Sprintf("%.3g", p.Value), p.Attributes))
		}
	default:
		return fmt.Sprintf("(%T)", d)
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}

// point formats a data point's value and the attributes that tell series
// apart, "value{k=v k=v}": the method, the server's address and port are
// the same in every series here.
func point(value string, s attribute.Set) string {
	var parts []string
	for _, kv := range s.ToSlice() {
		switch kv.Key {
		case "http.request.method", "server.address", "server.port", "url.scheme":
			continue
		}
		parts = append(parts, string(kv.Key)+"="+kv.Value.Emit())
	}
	if len(parts) == 0 {
		return value
	}
	return value + "{" + strings.Join(parts, " ") + "}"
}
