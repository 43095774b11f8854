package idemotel_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/idem-go/idem"
	idemotel "github.com/idem-go/idem/otel"
)

func ExampleInstrument() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()

	// An application passes its own providers, or none for the global
	// ones; a ManualReader and a SpanRecorder let the example read what was
	// recorded.
	reader := sdkmetric.NewManualReader()
	meters := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	spans := tracetest.NewSpanRecorder()
	tracers := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	client := &idem.Client{HTTPClient: srv.Client()}
	reg, err := idemotel.Instrument(client, idemotel.WithMeterProvider(meters), idemotel.WithTracerProvider(tracers))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer reg.Unregister()

	ctx := context.Background()
	in, _ := idem.NewIntent(http.MethodPost, srv.URL+"/orders", []byte(`{"sku":"tea"}`))
	if res, err := client.Do(ctx, in); err == nil {
		res.Response.Body.Close()
	}

	// show prints attributes but the server's address and port, which
	// change from run to run.
	show := func(kvs []attribute.KeyValue) {
		for _, kv := range kvs {
			if !strings.HasPrefix(string(kv.Key), "server.") {
				fmt.Printf("  %s=%s\n", kv.Key, kv.Value.Emit())
			}
		}
	}
	for _, s := range spans.Ended() {
		fmt.Println("span:", s.Name(), s.SpanKind())
		set := attribute.NewSet(s.Attributes()...)
		show(set.ToSlice())
	}
	var rm metricdata.ResourceMetrics
	_ = reader.Collect(ctx, &rm)
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if h, ok := m.Data.(metricdata.Histogram[float64]); ok && m.Name == idemotel.MetricRequestDuration {
			for _, p := range h.DataPoints {
				fmt.Println("metric:", m.Name, "count", p.Count)
				show(p.Attributes.ToSlice())
			}
		}
	}
	// Output:
	// span: HTTP POST client
	//   http.request.method=POST
	//   http.response.status_code=201
	//   idem.action=done
	//   idem.class=applied
	//   url.scheme=http
	// span: idem POST internal
	//   http.request.method=POST
	//   idem.outcome=applied
	//   url.scheme=http
	// metric: http.client.request.duration count 1
	//   http.request.method=POST
	//   http.response.status_code=201
	//   idem.action=done
	//   idem.class=applied
	//   url.scheme=http
}
