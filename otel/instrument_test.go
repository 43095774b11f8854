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
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/idem-go/idem"
)

// The attribute sets the tests expect, as attrs formats them.
const (
	post503     = "error.type=503 http.request.method=POST http.response.status_code=503 idem.action=retry idem.class=ambiguous"
	post201Once = "http.request.method=POST http.request.resend_count=1 http.response.status_code=201 idem.action=done idem.class=applied"
)

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
		MetricAttempts:        "counter {attempt}",
		MetricAttemptDuration: "histogram s",
		MetricOperations:      "counter {operation}",
		MetricReplays:         "counter {operation}",
		MetricBudgetRefusals:  "counter {retry}",
		MetricBudgetTokens:    "gauge {token}",
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
			MetricAttempts:        {post503: 1, post201Once: 1},
			MetricAttemptDuration: {post503: 1, post201Once: 1},
			MetricOperations:      {"idem.outcome=applied": 1},
			MetricReplays:         {"-": 1},
			MetricBudgetRefusals:  {"-": 0},
		},
	}, {
		name:     "400: rejected, no retry",
		statuses: []int{400},
		want: map[string]points{
			MetricAttempts: {
				"error.type=400 http.request.method=POST http.response.status_code=400 idem.action=stop idem.class=rejected": 1,
			},
			MetricOperations: {"idem.outcome=not_applied": 1},
			MetricReplays:    {"-": 0},
		},
	}, {
		name: "refused: never sent, no status",
		want: map[string]points{
			// The second attempt is the last MaxAttempts allows: stop.
			MetricAttempts: {
				"error.type=connection_refused http.request.method=POST idem.action=retry idem.class=never_sent":                            1,
				"error.type=connection_refused http.request.method=POST http.request.resend_count=1 idem.action=stop idem.class=never_sent": 1,
			},
			MetricOperations: {"idem.outcome=not_applied": 1},
		},
	}, {
		name:     "timeout after the headers went out: ambiguous",
		statuses: []int{hang, hang},
		timeout:  50 * time.Millisecond,
		want: map[string]points{
			MetricAttempts: {
				"error.type=timeout http.request.method=POST idem.action=retry idem.class=ambiguous":                            1,
				"error.type=timeout http.request.method=POST http.request.resend_count=1 idem.action=stop idem.class=ambiguous": 1,
			},
			MetricOperations: {"idem.outcome=unknown": 1},
		},
	}, {
		name:        "the budget refuses the second retry",
		statuses:    []int{503, 503},
		budget:      idem.NewBudget(1),
		maxAttempts: 3,
		want: map[string]points{
			MetricAttempts: {
				post503: 1,
				"error.type=503 http.request.method=POST http.request.resend_count=1 http.response.status_code=503 idem.action=stop idem.class=ambiguous": 1,
			},
			MetricOperations:     {"idem.outcome=unknown": 1},
			MetricBudgetRefusals: {"-": 1},
			MetricBudgetTokens:   {"-": 0},
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
				assert.Equal(t, want, got[name].points, "%s after %v", name, tt.statuses)
			}
		})
	}
}

func TestInstrumentSpanEvents(t *testing.T) {
	recorder := tracetest.NewSpanRecorder()
	tracer := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder)).Tracer("test")
	_, provider := newReader(t)
	client := &idem.Client{Policy: idem.Policy{BaseDelay: time.Millisecond, MaxDelay: time.Millisecond}}
	_, err := Instrument(client, provider, WithAttributes(attribute.String("idem.client", "payments")))
	require.NoError(t, err)
	srv := scripted(t, []int{503, 201, 201})

	ctx, span := tracer.Start(t.Context(), "pay")
	in, err := idem.NewIntent(http.MethodPost, srv.URL+"/orders", []byte(`{}`))
	require.NoError(t, err)
	res, err := client.Do(ctx, in)
	require.NoError(t, err)
	require.NoError(t, res.Response.Body.Close())
	span.End()

	spans := recorder.Ended()
	require.Len(t, spans, 1, "ended spans")
	var got []string
	for _, e := range spans[0].Events() {
		got = append(got, e.Name+": "+attrs(attribute.NewSet(e.Attributes...)))
	}
	// WithAttributes is for measurements: the span says which client it is.
	want := []string{EventAttempt + ": " + post503, EventAttempt + ": " + post201Once}
	assert.Equal(t, want, got, "events of the operation's span")
}

func TestInstrumentKeepsHook(t *testing.T) {
	reader, provider := newReader(t)
	var calls atomic.Int32
	client := &idem.Client{OnAttempt: func(context.Context, idem.AttemptInfo) { calls.Add(1) }}
	_, err := Instrument(client, provider)
	require.NoError(t, err)

	doPost(t, client, scripted(t, []int{201}).URL+"/orders")

	assert.Equal(t, int32(1), calls.Load(), "calls of the hook the client had")
	assert.Equal(t, points{"http.request.method=POST http.response.status_code=201 idem.action=done idem.class=applied": 1},
		collect(t, reader)[MetricAttempts].points, MetricAttempts)
}

func TestInstrumentTransport(t *testing.T) {
	reader, provider := newReader(t)
	srv := scripted(t, []int{503, 201})
	tr := &idem.Transport{
		Base:   srv.Client().Transport,
		Policy: idem.Policy{BaseDelay: time.Millisecond, MaxDelay: time.Millisecond},
	}
	reg, err := InstrumentTransport(tr, provider, WithAttributes(attribute.String("idem.client", "shop")))
	require.NoError(t, err)

	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/orders", strings.NewReader(`{}`))
	require.NoError(t, err)
	req.Header.Set(idem.DefaultKeyHeader, "k-1")
	resp, err := (&http.Client{Transport: tr}).Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())

	got := collect(t, reader)
	const client = " idem.client=shop"
	assert.Equal(t, points{post503 + client: 1, post201Once + client: 1}, got[MetricAttempts].points, MetricAttempts)
	assert.Equal(t, points{"idem.client=shop idem.outcome=applied": 1}, got[MetricOperations].points, MetricOperations)

	require.NoError(t, reg.Unregister())
	got = collect(t, reader)
	assert.Empty(t, got[MetricOperations].points, "%s after Unregister", MetricOperations)
	assert.Len(t, got[MetricAttempts].points, 2, "%s after Unregister: the hook stays", MetricAttempts)
}
