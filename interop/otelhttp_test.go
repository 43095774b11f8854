package interop

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/idem-go/idem"
	idemotel "github.com/idem-go/idem/otel"
)

// sharedKeys are the attributes of the HTTP conventions that both otelhttp
// and idemotel set on an HTTP client span and measurement.
var sharedKeys = []attribute.Key{
	"http.request.method", "server.address", "server.port", "url.scheme", "http.response.status_code",
}

// TestOtelSideBySide sends the same GET and POST through an http.Client
// with otelhttp's Transport and through an idem.Client instrumented by
// idemotel, with one TracerProvider and one MeterProvider, and compares what
// each recorded: an attempt's span is named and kinded as otelhttp's client
// span, and where both set one of the conventions' attributes, they agree.
func TestOtelSideBySide(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.Method == http.MethodPost {
			w.WriteHeader(http.StatusCreated)
		}
	}))
	defer srv.Close()
	recorder := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()); _ = mp.Shutdown(t.Context()) })
	prop := propagation.TraceContext{}

	plain := &http.Client{Transport: otelhttp.NewTransport(srv.Client().Transport,
		otelhttp.WithTracerProvider(tp), otelhttp.WithMeterProvider(mp), otelhttp.WithPropagators(prop))}
	client := &idem.Client{HTTPClient: srv.Client()}
	_, err := idemotel.Instrument(client, idemotel.WithTracerProvider(tp), idemotel.WithMeterProvider(mp),
		idemotel.WithPropagator(prop))
	require.NoError(t, err)

	url := srv.URL + "/orders?page=2"
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		var body []byte
		if method == http.MethodPost {
			body = []byte(`{"sku":"tea"}`)
		}
		req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(string(body)))
		require.NoError(t, err)
		resp, err := plain.Do(req)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close()) // ends otelhttp's span
		spans := recorder.Ended()
		require.NotEmpty(t, spans, "%s: otelhttp's span", method)
		theirs := spans[len(spans)-1]

		in, err := idem.NewIntent(method, url, body)
		require.NoError(t, err)
		res, err := client.Do(t.Context(), in)
		require.NoError(t, err)
		require.NoError(t, res.Response.Body.Close())
		var ours sdktrace.ReadOnlySpan
		for _, s := range recorder.Ended()[len(spans):] {
			if s.SpanKind() == theirs.SpanKind() {
				ours = s
			}
		}
		require.NotNil(t, ours, "%s: idemotel's attempt span of kind %s", method, theirs.SpanKind())

		assert.Equal(t, theirs.Name(), ours.Name(), "%s: span name", method)
		theirAttrs, ourAttrs := attribute.NewSet(theirs.Attributes()...), attribute.NewSet(ours.Attributes()...)
		compared := compareShared(t, method+" span", theirAttrs, ourAttrs)
		assert.GreaterOrEqual(t, compared, 4, "%s: shared attributes compared on the span", method)
		assert.True(t, ourAttrs.HasValue(idemotel.AttrClass), "%s: idem.class on idem's span", method)
		full, ok := theirAttrs.Value("url.full")
		assert.True(t, ok && strings.HasSuffix(full.AsString(), "?page=2"), "%s: otelhttp's url.full %q has the query", method, full.Emit())
		assert.False(t, ourAttrs.HasValue("url.full"), "%s: url.full on idem's span without WithURLFull", method)
	}

	// The request durations: one point per method and scope; where both set
	// a shared attribute, they agree.
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(t.Context(), &rm))
	points := map[string]map[string]attribute.Set{} // scope -> method -> attributes
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "http.client.request.duration" {
				continue
			}
			h, ok := m.Data.(metricdata.Histogram[float64])
			require.True(t, ok, "%s of %s: %T", m.Name, sm.Scope.Name, m.Data)
			byMethod := map[string]attribute.Set{}
			for _, p := range h.DataPoints {
				v, _ := p.Attributes.Value("http.request.method")
				byMethod[v.AsString()] = p.Attributes
			}
			points[sm.Scope.Name] = byMethod
		}
	}
	theirs, ours := points["go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"], points[idemotel.ScopeName]
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		require.Contains(t, theirs, method, "otelhttp's http.client.request.duration")
		require.Contains(t, ours, method, "idemotel's http.client.request.duration")
		compared := compareShared(t, method+" http.client.request.duration", theirs[method], ours[method])
		assert.Equal(t, len(sharedKeys), compared, "%s: shared attributes compared on the metric", method)
	}
}

// compareShared asserts that the sharedKeys both sets hold have the same
// values, and returns how many it compared.
func compareShared(t *testing.T, what string, theirs, ours attribute.Set) int {
	t.Helper()
	n := 0
	for _, k := range sharedKeys {
		a, okA := theirs.Value(k)
		b, okB := ours.Value(k)
		if okA && okB {
			n++
			assert.Equal(t, a.Emit(), b.Emit(), "%s: %s, otelhttp's and idemotel's", what, k)
		}
	}
	return n
}
