package idemotel

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/idem-go/idem"
)

// sdkOptions returns the options of a real SDK: every span sampled and
// recorded but exported nowhere, every measurement aggregated for a
// ManualReader that never collects.
func sdkOptions(tb testing.TB) []Option {
	tp := sdktrace.NewTracerProvider()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	tb.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	return []Option{WithTracerProvider(tp), WithMeterProvider(mp), WithPropagator(propagation.TraceContext{})}
}

// noopOptions returns the options of the no-op providers, which the
// global ones are until an application sets its own.
func noopOptions() []Option {
	return []Option{WithTracerProvider(tracenoop.NewTracerProvider()), WithMeterProvider(metricnoop.NewMeterProvider()),
		WithPropagator(propagation.TraceContext{})}
}

// BenchmarkInstrumentedDo compares a Do of a POST through a plain Client
// with the same through a Client instrumented with the SDK and with the
// no-op providers.
func BenchmarkInstrumentedDo(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	for _, bc := range []struct {
		name string
		opts func() []Option
	}{{"plain", nil}, {"sdk", func() []Option { return sdkOptions(b) }}, {"noop", noopOptions}} {
		b.Run(bc.name, func(b *testing.B) {
			client := &idem.Client{HTTPClient: srv.Client()}
			if bc.opts != nil {
				if _, err := Instrument(client, bc.opts()...); err != nil {
					b.Fatal(err)
				}
			}
			in, err := idem.NewIntent(http.MethodPost, srv.URL+"/orders", []byte(`{"sku":"tea"}`))
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				res, err := client.Do(ctx, in)
				if err != nil {
					b.Fatal(err)
				}
				_ = res.Response.Body.Close()
			}
		})
	}
}

// attemptHooks returns the OnSend and OnAttempt hooks made with opts, a
// request in an operation's span, and the AttemptInfo of its answer.
func attemptHooks(tb testing.TB, opts []Option) (sendFunc, attemptFunc, *http.Request, idem.AttemptInfo) {
	h, err := newHooks(newConfig(opts))
	if err != nil {
		tb.Fatal(err)
	}
	ctx, span := h.tracer.Start(context.Background(), "idem POST")
	tb.Cleanup(func() { span.End() })
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://127.0.0.1:8080/orders", http.NoBody)
	if err != nil {
		tb.Fatal(err)
	}
	ai := idem.AttemptInfo{Method: http.MethodPost, URL: "http://127.0.0.1:8080/orders", N: 2, Action: idem.ActionDone,
		Attempt: idem.Attempt{Class: idem.ClassApplied, Status: 201, Start: time.Now(), Duration: time.Millisecond}}
	return h.send(nil), h.attempt(nil), req, ai
}

// Budgets of one attempt's OnSend and OnAttempt, as TestAttemptHookAllocs
// measured them (go test -run TestAttemptHookAllocs -v): a Do of a POST
// answered at once makes 75 allocations without instrumentation, 116 with
// the SDK and 79 with the no-op providers (BenchmarkInstrumentedDo), the
// operation's hook, Stats and the attempt's hooks included.
const (
	// sdkAttemptAllocs: the span, its attributes and end options, its
	// context, the traceparent value, and the attribute sets of three
	// measurements.
	sdkAttemptAllocs = 24
	// noopAttemptAllocs: the no-op span's context, which Start makes
	// before anything can tell that nothing records.
	noopAttemptAllocs = 1
)

func TestAttemptHookAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	for _, tc := range []struct {
		name string
		opts []Option
		max  float64
	}{{"sdk", sdkOptions(t), sdkAttemptAllocs}, {"noop", noopOptions(), noopAttemptAllocs}} {
		send, attempt, req, ai := attemptHooks(t, tc.opts)
		got := testing.AllocsPerRun(200, func() {
			ctx := send(req)
			if ctx == nil {
				ctx = req.Context()
			}
			attempt(ctx, ai)
		})
		t.Logf("%s: %v allocations per attempt", tc.name, got)
		if got > tc.max {
			t.Errorf("%s: OnSend and OnAttempt make %v allocations, want at most %v", tc.name, got, tc.max)
		}
	}
}
