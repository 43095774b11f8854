package idemotel

import (
	"cmp"
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/idem-go/idem"
)

// The attribute sets the tests expect, as attrs formats them; $T stands
// for the server's address, port and scheme (hostAttrs).
const (
	post503     = "error.type=503 http.request.method=POST http.response.status_code=503 idem.action=retry idem.class=ambiguous $T"
	post201     = "http.request.method=POST http.response.status_code=201 idem.action=done idem.class=applied $T"
	postApplied = "http.request.method=POST idem.outcome=applied $T"
	postTarget  = "http.request.method=POST $T"
)

// fill replaces $T in each key of want with srv's attributes.
func fill(want points, host string) points {
	out := points{}
	for k, v := range want {
		out[strings.ReplaceAll(k, "$T", host)] = v
	}
	return out
}

func TestInstrumentNames(t *testing.T) {
	reader, provider := newReader(t)
	client := &idem.Client{Policy: idem.Policy{BaseDelay: time.Millisecond, MaxDelay: time.Millisecond}}
	_, err := Instrument(client, provider)
	require.NoError(t, err)
	doPost(t, client, scripted(t, []int{503, 201}).URL+"/orders")

	got := map[string]string{}
	for name, in := range collect(t, reader) {
		got[name] = in.kind + " " + in.unit
	}
	want := map[string]string{
		"http.client.request.duration": "histogram s",
		"http.client.active_requests":  "up-down counter {request}",
		"idem.operation.duration":      "histogram s",
		"idem.replays":                 "counter {operation}",
		"idem.retry_budget.refusals":   "counter {retry}",
		"idem.retry_budget.tokens":     "gauge {token}",
	}
	assert.Equal(t, want, got, "instruments: name -> kind and unit")
}

func TestInstrumentClient(t *testing.T) {
	tests := []struct {
		name     string
		statuses []int // the server's answers in order; nil: nothing listens
		budget   *idem.Budget
		timeout  time.Duration // the HTTP client's, if not 0
		// maxAttempts is the policy's; 0 means 2.
		maxAttempts int
		// want holds the expected points per metric; those not named are not
		// checked. Histogram points are counts.
		want map[string]points
	}{{
		name:     "503 then a replayed 201",
		statuses: []int{503, 201},
		want: map[string]points{
			MetricRequestDuration:   {post503: 1, post201: 1},
			MetricActiveRequests:    {postTarget: 0},
			MetricOperationDuration: {postApplied: 1},
			MetricReplays:           {"-": 1},
			MetricBudgetRefusals:    {"-": 0},
		},
	}, {
		name:     "400: rejected, no retry",
		statuses: []int{400},
		want: map[string]points{
			MetricRequestDuration: {
				"error.type=400 http.request.method=POST http.response.status_code=400 idem.action=stop idem.class=rejected $T": 1,
			},
			// A rejection is a Result, not an error: no error.type.
			MetricOperationDuration: {"http.request.method=POST idem.outcome=not_applied $T": 1},
			MetricReplays:           {"-": 0},
		},
	}, {
		name: "refused: never sent, no status",
		want: map[string]points{
			// The second attempt is the last MaxAttempts allows: stop.
			MetricRequestDuration: {
				"error.type=connection_refused http.request.method=POST idem.action=retry idem.class=never_sent $T": 1,
				"error.type=connection_refused http.request.method=POST idem.action=stop idem.class=never_sent $T":  1,
			},
			MetricActiveRequests:    {postTarget: 0},
			MetricOperationDuration: {"error.type=connection_refused http.request.method=POST idem.outcome=not_applied $T": 1},
		},
	}, {
		name:     "timeout after the headers went out: ambiguous",
		statuses: []int{hang, hang},
		timeout:  50 * time.Millisecond,
		want: map[string]points{
			MetricRequestDuration: {
				"error.type=timeout http.request.method=POST idem.action=retry idem.class=ambiguous $T": 1,
				"error.type=timeout http.request.method=POST idem.action=stop idem.class=ambiguous $T":  1,
			},
			MetricOperationDuration: {"error.type=timeout http.request.method=POST idem.outcome=unknown $T": 1},
		},
	}, {
		name:        "the budget refuses the second retry",
		statuses:    []int{503, 503},
		budget:      idem.NewBudget(1),
		maxAttempts: 3,
		want: map[string]points{
			MetricRequestDuration: {
				post503: 1,
				"error.type=503 http.request.method=POST http.response.status_code=503 idem.action=stop idem.class=ambiguous $T": 1,
			},
			MetricOperationDuration: {"error.type=503 http.request.method=POST idem.outcome=unknown $T": 1},
			MetricBudgetRefusals:    {"-": 1},
			MetricBudgetTokens:      {"-": 0},
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reader, provider := newReader(t)
			srv := scripted(t, tt.statuses)
			hc := srv.Client()
			hc.Timeout = tt.timeout
			maxAttempts := cmp.Or(tt.maxAttempts, 2)
			client := &idem.Client{
				HTTPClient: hc,
				Policy:     idem.Policy{MaxAttempts: maxAttempts, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond},
				Budget:     tt.budget,
			}
			_, err := Instrument(client, provider)
			require.NoError(t, err)

			doPost(t, client, srv.URL+"/orders?customer=c-17")

			got := collect(t, reader)
			for name, want := range tt.want {
				assert.Equal(t, fill(want, hostAttrs(srv)), got[name].points, "%s after %v", name, tt.statuses)
			}
		})
	}
}

// TestInstrumentSpans checks the spans of a POST answered 503 then 201:
// the operation's span is a child of the caller's, each attempt's a child
// of the operation's, and the server gets each attempt's span context.
func TestInstrumentSpans(t *testing.T) {
	recorder, tracing := newTracer(t)
	_, provider := newReader(t)
	var ends []time.Time
	client := &idem.Client{
		Policy: idem.Policy{BaseDelay: time.Millisecond, MaxDelay: time.Millisecond},
		// A hook the client had: it still runs, and tells when each attempt ended.
		OnAttempt: func(_ context.Context, ai idem.AttemptInfo) {
			ends = append(ends, ai.Attempt.Start.Add(ai.Attempt.Duration))
		},
	}
	_, err := Instrument(client, provider, tracing, WithAttributes(attribute.String("idem.client", "payments")))
	require.NoError(t, err)
	srv, parents := scriptedTraced(t, []int{503, 201})

	ctx, caller := callerSpan(t, recorder)
	doPostCtx(t, ctx, client, srv.URL+"/orders?api_key=secret")
	caller.End()

	spans := recorder.Ended()
	require.Len(t, spans, 4, "ended spans")
	host := hostAttrs(srv)
	// WithAttributes is for measurements: no span carries idem.client.
	want := []string{
		"HTTP POST client parent=2 " + strings.ReplaceAll(post503, "$T", host) + " status=Error: ",
		"HTTP POST client parent=2 " + strings.ReplaceAll(
			"http.request.method=POST http.request.resend_count=1 http.response.status_code=201 idem.action=done idem.class=applied $T", "$T", host),
		"idem POST internal parent=3 " + strings.ReplaceAll(postApplied, "$T", host),
		"pay internal parent=- -",
	}
	assert.Equal(t, want, spanLines(spans, nil), "spans")

	var sent []string
	for _, s := range spans[:2] {
		sc := s.SpanContext()
		sent = append(sent, "00-"+sc.TraceID().String()+"-"+sc.SpanID().String()+"-01")
	}
	assert.Equal(t, sent, parents(), "traceparent of each request: its attempt's span")
	require.Len(t, ends, 2, "calls of the client's own OnAttempt")
	for i, s := range spans[:2] {
		assert.True(t, ends[i].Equal(s.EndTime()), "attempt %d's span ends at %v, want Start+Duration %v", i+1, s.EndTime(), ends[i])
	}
}

// callerSpan starts the caller's span "pay" on a provider reporting to
// recorder.
func callerSpan(t *testing.T, recorder *spanRecorder) (context.Context, trace.Span) {
	t.Helper()
	return tracerFor(t, recorder).Start(t.Context(), "pay")
}

// doPostCtx is doPost with the caller's ctx.
func doPostCtx(t *testing.T, ctx context.Context, c *idem.Client, url string) {
	t.Helper()
	in, err := idem.NewIntent(http.MethodPost, url, []byte(`{"sku":"x"}`))
	require.NoError(t, err)
	res, err := c.Do(ctx, in)
	require.NoError(t, err)
	require.NoError(t, res.Response.Body.Close())
}

// TestInstrumentURLFull checks that url.full is on no span by default, and
// with WithURLFull is on the operation's and the attempt's span without the
// query.
func TestInstrumentURLFull(t *testing.T) {
	for _, full := range []bool{false, true} {
		recorder, tracing := newTracer(t)
		opts := []Option{tracing}
		if full {
			opts = append(opts, WithURLFull())
		}
		client := &idem.Client{}
		_, err := Instrument(client, opts...)
		require.NoError(t, err)
		srv := scripted(t, []int{201})
		doPostCtx(t, t.Context(), client, srv.URL+"/orders?api_key=secret#frag")

		var got []string
		for _, s := range recorder.Ended() {
			for _, kv := range s.Attributes() {
				assert.NotContains(t, kv.Value.Emit(), "secret", "attribute %s of span %s", kv.Key, s.Name())
				if kv.Key == "url.full" {
					got = append(got, s.Name()+" "+kv.Value.Emit())
				}
			}
		}
		var want []string
		if full {
			want = []string{"HTTP POST " + srv.URL + "/orders", "idem POST " + srv.URL + "/orders"}
		}
		assert.Equal(t, want, got, "url.full with WithURLFull: %v", full)
	}
}

func TestInstrumentKeepsHooks(t *testing.T) {
	reader, provider := newReader(t)
	recorder, tracing := newTracer(t)
	var operations, ends, sends, attempts atomic.Int32
	type key struct{}
	client := &idem.Client{
		OnOperation: func(ctx context.Context, _, _ string) (context.Context, func(idem.Outcome, error)) {
			operations.Add(1)
			return ctx, func(idem.Outcome, error) { ends.Add(1) }
		},
		OnSend: func(req *http.Request) context.Context {
			sends.Add(1)
			req.Header.Set("X-Seen", "yes")
			return context.WithValue(req.Context(), key{}, "mine")
		},
		OnAttempt: func(ctx context.Context, _ idem.AttemptInfo) {
			// The context OnSend returned, holding the attempt's span.
			if ctx.Value(key{}) == "mine" && trace.SpanFromContext(ctx).SpanContext().IsValid() {
				attempts.Add(1)
			}
		},
	}
	_, err := Instrument(client, provider, tracing)
	require.NoError(t, err)

	srv := scripted(t, []int{201})
	doPost(t, client, srv.URL+"/orders")

	assert.Equal(t, [4]int32{1, 1, 1, 1}, [4]int32{operations.Load(), ends.Load(), sends.Load(), attempts.Load()},
		"calls of the hooks the client had: OnOperation, its end, OnSend, OnAttempt")
	assert.Equal(t, fill(points{post201: 1}, hostAttrs(srv)), collect(t, reader)[MetricRequestDuration].points, MetricRequestDuration)
	assert.Len(t, recorder.Ended(), 2, "spans")
}

// TestForeignSpan: an OnAttempt hook of this package ends no span it did
// not start, such as one another OnSend put in the context.
func TestForeignSpan(t *testing.T) {
	recorder, tracing := newTracer(t)
	h, err := newHooks(newConfig([]Option{tracing}))
	require.NoError(t, err)
	ctx, span := tracerFor(t, recorder).Start(t.Context(), "someone else's")
	h.attempt(nil)(ctx, idem.AttemptInfo{Method: "POST", URL: "http://shop/orders", N: 1,
		Attempt: idem.Attempt{Class: idem.ClassApplied, Status: 201}, Action: idem.ActionDone})
	assert.Empty(t, recorder.Ended(), "spans ended by OnAttempt")
	span.End()
}

func TestInstrumentTransport(t *testing.T) {
	reader, provider := newReader(t)
	recorder, tracing := newTracer(t)
	srv, parents := scriptedTraced(t, []int{503, 201})
	tr := &idem.Transport{
		Base:   srv.Client().Transport,
		Policy: idem.Policy{BaseDelay: time.Millisecond, MaxDelay: time.Millisecond},
	}
	reg, err := InstrumentTransport(tr, provider, tracing, WithAttributes(attribute.String("idem.client", "shop")))
	require.NoError(t, err)

	ctx, caller := callerSpan(t, recorder)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/orders", strings.NewReader(`{}`))
	require.NoError(t, err)
	req.Header.Set(idem.DefaultKeyHeader, "k-1")
	resp, err := (&http.Client{Transport: tr}).Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	caller.End()

	host := hostAttrs(srv)
	got := collect(t, reader)
	const client = "idem.client=shop "
	assert.Equal(t, fill(points{
		"error.type=503 http.request.method=POST http.response.status_code=503 idem.action=retry idem.class=ambiguous " + client + "$T": 1,
		"http.request.method=POST http.response.status_code=201 idem.action=done idem.class=applied " + client + "$T":                   1,
	}, host), got[MetricRequestDuration].points, MetricRequestDuration)
	assert.Equal(t, fill(points{"http.request.method=POST idem.client=shop idem.outcome=applied $T": 1}, host),
		got[MetricOperationDuration].points, MetricOperationDuration)

	lines := spanLines(recorder.Ended(), nil)
	require.Len(t, lines, 4, "spans: %v", lines)
	assert.Equal(t, []string{"HTTP POST client parent=2", "HTTP POST client parent=2", "idem POST internal parent=3", "pay internal parent=- -"},
		[]string{prefix(lines[0], 4), prefix(lines[1], 4), prefix(lines[2], 4), prefix(lines[3], 4)}, "spans")
	assert.Len(t, parents(), 2, "requests")
	for i, p := range parents() {
		assert.Contains(t, p, recorder.Ended()[i].SpanContext().SpanID().String(), "traceparent of request %d", i+1)
	}
	assert.Empty(t, req.Header.Get("Traceparent"), "the caller's header is left as it was")

	require.NoError(t, reg.Unregister())
	got = collect(t, reader)
	assert.Empty(t, got[MetricReplays].points, "%s after Unregister", MetricReplays)
	assert.Len(t, got[MetricRequestDuration].points, 2, "%s after Unregister: the hooks stay", MetricRequestDuration)
}

// prefix returns the first n space-separated words of s.
func prefix(s string, n int) string {
	return strings.Join(strings.Fields(s)[:n], " ")
}

// TestInstrumentNoop: with the no-op providers nothing goes into the
// request and nothing breaks.
func TestInstrumentNoop(t *testing.T) {
	client := &idem.Client{Policy: idem.Policy{BaseDelay: time.Millisecond, MaxDelay: time.Millisecond}}
	_, err := Instrument(client, WithMeterProvider(metricnoop.NewMeterProvider()),
		WithTracerProvider(tracenoop.NewTracerProvider()), WithPropagator(propagation.TraceContext{}))
	require.NoError(t, err)
	srv, parents := scriptedTraced(t, []int{503, 201})
	assert.Equal(t, idem.Applied, doPost(t, client, srv.URL+"/orders"))
	assert.Equal(t, []string{"", ""}, parents(), "traceparent without a span")

	// The global providers, unset: no-ops too.
	client = &idem.Client{}
	_, err = Instrument(client)
	require.NoError(t, err)
	assert.Equal(t, idem.Applied, doPost(t, client, scripted(t, []int{201}).URL+"/orders"))
}

// TestInstrumentOperationError: an operation that ends in an error has
// error.type and the status Error on its span, with a description that
// holds no URL.
func TestInstrumentOperationError(t *testing.T) {
	recorder, tracing := newTracer(t)
	client := &idem.Client{Policy: idem.Policy{MaxAttempts: 1}}
	_, err := Instrument(client, tracing)
	require.NoError(t, err)
	srv := scripted(t, []int{503})
	assert.Equal(t, idem.Unknown, doPost(t, client, srv.URL+"/orders/8213?api_key=secret"))

	lines := spanLines(recorder.Ended(), nil)
	require.Len(t, lines, 2, "spans")
	assert.Equal(t, strings.ReplaceAll(
		"idem POST internal parent=- error.type=503 http.request.method=POST idem.outcome=unknown $T status=Error: outcome unknown: attempts exhausted (1 of 1)",
		"$T", hostAttrs(srv)), lines[1], "the operation's span")
	assert.NotContains(t, lines[1], "8213", "the operation's span")
}
