package idemotel

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idem-go/idem"
)

// hang, in a script, holds the request until the client gives up on it.
const hang = -1

// scripted starts a server that answers with statuses, one per request in
// order, and marks a 2xx to a key it answered before as a replay. With no
// statuses it returns a closed server: connections are refused.
func scripted(t *testing.T, statuses []int) *httptest.Server {
	srv, _ := scriptedTraced(t, statuses)
	return srv
}

// scriptedTraced is scripted, and returns a function that gives the
// traceparent header of each request so far.
func scriptedTraced(t *testing.T, statuses []int) (*httptest.Server, func() []string) {
	var mu sync.Mutex // guards next, seen and parents
	next, seen := 0, map[string]bool{}
	var parents []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		parents = append(parents, r.Header.Get("Traceparent"))
		if next == len(statuses) {
			mu.Unlock()
			t.Errorf("request %d %s beyond the script %v", next+1, r.URL, statuses)
			w.WriteHeader(http.StatusTeapot)
			return
		}
		status, key := statuses[next], r.Header.Get(idem.DefaultKeyHeader)
		next++
		replay := status/100 == 2 && seen[key]
		seen[key] = true
		mu.Unlock()
		if status == hang {
			// The server notices the client leave only once the body is read.
			_, _ = io.Copy(io.Discard, r.Body)
			<-r.Context().Done()
			return
		}
		if replay {
			w.Header().Set("Idempotent-Replayed", "true")
		}
		w.WriteHeader(status)
	}))
	if statuses == nil {
		srv.Close()
	} else {
		t.Cleanup(srv.Close)
	}
	return srv, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(parents)
	}
}

// newReader returns a ManualReader and a MeterProvider that reports to it.
func newReader(t *testing.T) (*sdkmetric.ManualReader, Option) {
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = provider.Shutdown(t.Context()) })
	return reader, WithMeterProvider(provider)
}

// doPost runs a keyed POST to url through c and returns the outcome.
func doPost(t *testing.T, c *idem.Client, url string) idem.Outcome {
	t.Helper()
	in, err := idem.NewIntent(http.MethodPost, url, []byte(`{"sku":"x"}`))
	require.NoError(t, err)
	res, err := c.Do(t.Context(), in)
	var e *idem.Error
	if errors.As(err, &e) {
		return e.Outcome
	}
	require.NoError(t, err)
	require.NoError(t, res.Response.Body.Close())
	return res.Outcome
}

// points maps a data point's attributes, as attrs formats them, to its
// value; a histogram point's value is its count.
type points map[string]float64

// collected is what a collection holds for one instrument.
type collected struct {
	unit   string
	kind   string // "counter", "up-down counter", "histogram" or "gauge"
	points points
}

// collect gathers every metric of ScopeName from reader, by name.
func collect(t *testing.T, reader sdkmetric.Reader) map[string]collected {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(t.Context(), &rm))
	out := map[string]collected{}
	for _, sm := range rm.ScopeMetrics {
		require.Equal(t, ScopeName, sm.Scope.Name, "instrumentation scope")
		for _, m := range sm.Metrics {
			in := collected{unit: m.Unit, points: points{}}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				in.kind = "up-down counter"
				if d.IsMonotonic {
					in.kind = "counter"
				}
				for _, p := range d.DataPoints {
					in.points[attrs(p.Attributes)] = float64(p.Value)
				}
			case metricdata.Gauge[int64]:
				in.kind = "gauge"
				for _, p := range d.DataPoints {
					in.points[attrs(p.Attributes)] = float64(p.Value)
				}
			case metricdata.Gauge[float64]:
				in.kind = "gauge"
				for _, p := range d.DataPoints {
					in.points[attrs(p.Attributes)] = p.Value
				}
			case metricdata.Histogram[float64]:
				in.kind = "histogram"
				for _, p := range d.DataPoints {
					in.points[attrs(p.Attributes)] = float64(p.Count)
				}
			default:
				t.Fatalf("%s: unexpected data %T", m.Name, d)
			}
			out[m.Name] = in
		}
	}
	return out
}

// attrs formats attributes as "k=v k=v" in key order, or "-" when there
// are none.
func attrs(s attribute.Set) string {
	if s.Len() == 0 {
		return "-"
	}
	var parts []string
	for _, kv := range s.ToSlice() {
		parts = append(parts, string(kv.Key)+"="+kv.Value.Emit())
	}
	return strings.Join(parts, " ")
}

// newTracer returns a SpanRecorder and the options for a TracerProvider
// that reports to it and the W3C trace-context propagator.
func newTracer(t *testing.T) (*tracetest.SpanRecorder, Option) {
	recorder := tracetest.NewSpanRecorder()
	provider := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder))
	t.Cleanup(func() { _ = provider.Shutdown(context.Background()) })
	return recorder, func(c *config) {
		WithTracerProvider(provider)(c)
		WithPropagator(propagation.TraceContext{})(c)
	}
}

// hostAttrs formats server.address, server.port and url.scheme of srv, as
// attrs does.
func hostAttrs(srv *httptest.Server) string {
	u, _ := url.Parse(srv.URL)
	return "server.address=" + u.Hostname() + " server.port=" + u.Port() + " url.scheme=http"
}

// spanLines formats spans, in the order they ended, as "name kind
// parent=P attributes", where P names the parent by its index in spans, or
// by its name in named, or is "-" for a root; and " status=Error: desc"
// after an error status.
func spanLines(spans []sdktrace.ReadOnlySpan, named map[trace.SpanID]string) []string {
	ids := map[trace.SpanID]string{}
	for i, s := range spans {
		ids[s.SpanContext().SpanID()] = strconv.Itoa(i)
	}
	var out []string
	for _, s := range spans {
		parent := "-"
		if p := s.Parent(); p.IsValid() {
			parent = cmp.Or(ids[p.SpanID()], named[p.SpanID()], "?")
		}
		line := fmt.Sprintf("%s %s parent=%s %s", s.Name(), s.SpanKind(), parent, attrs(attribute.NewSet(s.Attributes()...)))
		if st := s.Status(); st.Code == codes.Error {
			line += " status=Error: " + st.Description
		}
		out = append(out, line)
	}
	return out
}

// spanRecorder is the SDK's recorder of ended spans.
type spanRecorder = tracetest.SpanRecorder

// tracerFor returns a tracer of a provider reporting to recorder, for the
// caller's own spans.
func tracerFor(t *testing.T, recorder *spanRecorder) trace.Tracer {
	provider := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder))
	t.Cleanup(func() { _ = provider.Shutdown(context.Background()) })
	return provider.Tracer("test")
}
