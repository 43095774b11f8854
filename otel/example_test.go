package idemotel_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/idem-go/idem"
	idemotel "github.com/idem-go/idem/otel"
)

func ExampleInstrument() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()

	// An application passes its own MeterProvider, or none for the global
	// one; a ManualReader lets the example read what was recorded.
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	client := &idem.Client{HTTPClient: srv.Client()}
	reg, err := idemotel.Instrument(client, idemotel.WithMeterProvider(provider))
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

	var rm metricdata.ResourceMetrics
	_ = reader.Collect(ctx, &rm)
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == idemotel.MetricAttempts {
			for _, p := range sum.DataPoints {
				for _, kv := range p.Attributes.ToSlice() {
					fmt.Printf("%s=%s\n", kv.Key, kv.Value.Emit())
				}
				fmt.Println("value:", p.Value)
			}
		}
	}
	// Output:
	// http.request.method=POST
	// http.response.status_code=201
	// idem.action=done
	// idem.class=applied
	// value: 1
}
