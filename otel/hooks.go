package idemotel

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/semconv/v1.43.0/httpconv"
	"go.opentelemetry.io/otel/trace"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/redact"
)

// The hooks' types, as idem.Client and idem.Transport declare them.
type (
	operationFunc func(ctx context.Context, method, url string) (context.Context, func(idem.Outcome, error))
	sendFunc      func(req *http.Request) context.Context
	attemptFunc   func(context.Context, idem.AttemptInfo)
)

// hooks makes the spans and measurements of one instrumented Client or
// Transport. It is safe for concurrent use.
type hooks struct {
	c          config
	tracer     trace.Tracer
	propagator propagation.TextMapPropagator
	duration   metric.Float64Histogram // http.client.request.duration
	active     metric.Int64UpDownCounter
	operations metric.Float64Histogram // idem.operation.duration
	// The spans' start options, made once: a variadic call with a fresh
	// option would allocate on every attempt.
	internal, client []trace.SpanStartOption
}

func newHooks(c config) (*hooks, error) {
	m := c.meter()
	duration, err1 := httpconv.NewClientRequestDuration(m, metric.WithExplicitBucketBoundaries(durationBuckets()...))
	active, err2 := httpconv.NewClientActiveRequests(m)
	operations, err3 := m.Float64Histogram(MetricOperationDuration,
		metric.WithUnit("s"),
		metric.WithDescription("Duration of an operation: its attempts and the waits between them."),
		metric.WithExplicitBucketBoundaries(durationBuckets()...))
	if err := errors.Join(err1, err2, err3); err != nil {
		return nil, fmt.Errorf("idemotel: %w", err)
	}
	return &hooks{
		c: c, tracer: c.tracer(), propagator: c.textMapPropagator(),
		duration: duration.Inst(), active: active.Inst(), operations: operations,
		internal: []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal)},
		client:   []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)},
	}, nil
}

// operation returns an OnOperation hook that starts the operation's span
// and, at its end, records idem.operation.duration. next, if not nil, is
// called with the span's context, and its end before the span ends.
func (h *hooks) operation(next operationFunc) operationFunc {
	return func(ctx context.Context, m, rawURL string) (context.Context, func(idem.Outcome, error)) {
		start := time.Now()
		measured := h.operations.Enabled(ctx)
		octx, span := h.tracer.Start(ctx, spanName(SpanOperationPrefix, m), h.internal...)
		if !span.SpanContext().IsValid() && !measured {
			// Nothing to record nor to propagate: keep ctx as it was.
			return callOperation(next, ctx, m, rawURL)
		}
		t := targetOfRaw(m, rawURL)
		if span.IsRecording() {
			span.SetAttributes(t.attrs()...)
			if h.c.urlFull {
				span.SetAttributes(semconv.URLFull(rawURL)) // idem gives it redacted
			}
		}
		octx, nextEnd := callOperation(next, octx, m, rawURL)
		return octx, func(out idem.Outcome, err error) {
			if nextEnd != nil {
				nextEnd(out, err)
			}
			errType := ""
			if err != nil {
				errType = operationErrorType(err)
			}
			if span.IsRecording() {
				span.SetAttributes(AttrOutcome.String(out.String()))
				if errType != "" {
					span.SetAttributes(semconv.ErrorTypeKey.String(errType))
					span.SetStatus(codes.Error, operationErrorText(err))
				}
			}
			span.End()
			if measured {
				kv := make([]attribute.KeyValue, 0, 6)
				kv = append(append(kv, t.attrs()...), AttrOutcome.String(out.String()))
				if errType != "" {
					kv = append(kv, semconv.ErrorTypeKey.String(errType))
				}
				h.operations.Record(octx, time.Since(start).Seconds(), h.c.with(kv...))
			}
		}
	}
}

// operationErrorText describes err for a span's status: an *idem.Error by
// its outcome and reason, which unlike its Error hold no URL; another by
// its message without the URL net/http puts in front of it.
func operationErrorText(err error) string {
	var e *idem.Error
	if !errors.As(err, &e) {
		return redact.Error(err)
	}
	if e.Reason == "" {
		return "outcome " + e.Outcome.String()
	}
	return "outcome " + e.Outcome.String() + ": " + e.Reason
}

func callOperation(next operationFunc, ctx context.Context, m, rawURL string) (context.Context, func(idem.Outcome, error)) {
	if next == nil {
		return ctx, nil
	}
	nctx, end := next(ctx, m, rawURL)
	if nctx == nil {
		nctx = ctx
	}
	return nctx, end
}

// attemptCtx is the context an OnSend hook of this package returns: the
// attempt's span's, carrying what OnAttempt needs to end the span and undo
// the active request. One allocation serves as both context and marker, so
// that OnAttempt never ends a span another hook started.
type attemptCtx struct {
	context.Context
	span   trace.Span
	target target
	active bool // http.client.active_requests was incremented
}

// attemptKey finds an attemptCtx among a context's values.
type attemptKey struct{}

func (c *attemptCtx) Value(key any) any {
	if key == (attemptKey{}) {
		return c
	}
	return c.Context.Value(key)
}

// send returns an OnSend hook that starts the attempt's span, puts its
// context in req's header and counts the request as active. next, if not
// nil, is then called with req holding that context.
func (h *hooks) send(next sendFunc) sendFunc {
	return func(req *http.Request) context.Context {
		ctx := req.Context()
		active := h.active.Enabled(ctx)
		sctx, span := h.tracer.Start(ctx, spanName(SpanAttemptPrefix, req.Method), h.client...)
		if !span.SpanContext().IsValid() && !active && !h.duration.Enabled(ctx) {
			return callSend(next, req)
		}
		ac := &attemptCtx{Context: sctx, span: span, target: targetOf(req.Method, req.URL), active: active}
		if span.IsRecording() {
			span.SetAttributes(ac.target.attrs()...)
			if h.c.urlFull {
				span.SetAttributes(semconv.URLFull(redact.URL(req.URL)))
			}
		}
		h.propagator.Inject(ac, propagation.HeaderCarrier(req.Header))
		if active {
			h.active.Add(ac, 1, h.c.with(ac.target.attrs()...))
		}
		if next == nil {
			return ac
		}
		if nctx := next(req.WithContext(ac)); nctx != nil {
			return nctx
		}
		return ac
	}
}

func callSend(next sendFunc, req *http.Request) context.Context {
	if next == nil {
		return nil
	}
	return next(req)
}

// attempt returns an OnAttempt hook that ends the attempt's span, if this
// package's OnSend started one, records http.client.request.duration and
// undoes the active request; then it calls next, if not nil.
func (h *hooks) attempt(next attemptFunc) attemptFunc {
	return func(ctx context.Context, ai idem.AttemptInfo) {
		ac, _ := ctx.Value(attemptKey{}).(*attemptCtx)
		errType := errorType(ai.Attempt)
		if ac != nil {
			endAttemptSpan(ac.span, ai, errType)
		}
		if h.duration.Enabled(ctx) {
			var t target
			if ac != nil {
				t = ac.target
			} else { // OnSend was replaced, or failed before ours ran
				t = targetOfRaw(ai.Method, ai.URL)
			}
			h.duration.Record(ctx, ai.Attempt.Duration.Seconds(), h.c.with(attemptMetricAttrs(&t, ai, errType)...))
		}
		if ac != nil && ac.active {
			h.active.Add(ctx, -1, h.c.with(ac.target.attrs()...))
		}
		if next != nil {
			next(ctx, ai)
		}
	}
}

// endAttemptSpan sets what the attempt learnt on span and ends it when the
// attempt ended. Its status is Error when error.type is set, as the
// conventions ask of an HTTP client span; a transport error's message
// comes without the request URL.
func endAttemptSpan(span trace.Span, ai idem.AttemptInfo, errType string) {
	var opts []trace.SpanEndOption
	if span.IsRecording() {
		span.SetAttributes(attemptSpanAttrs(ai, errType)...)
		if errType != "" {
			desc := ""
			if ai.Attempt.Err != nil {
				desc = ai.Attempt.Err.Error() // redacted by idem
			}
			span.SetStatus(codes.Error, desc)
		}
		if a := ai.Attempt; !a.Start.IsZero() {
			opts = append(opts, trace.WithTimestamp(a.Start.Add(a.Duration)))
		}
	}
	span.End(opts...)
}

// spanName returns prefix + method, without allocating for the prefixes
// of this package and the methods most requests use.
func spanName(prefix, method string) string {
	if n, ok := spanNames[[2]string{prefix, method}]; ok {
		return n
	}
	return prefix + method
}

// spanNames holds the names spanName makes without allocating.
var spanNames = func() map[[2]string]string {
	m := map[[2]string]string{}
	for _, p := range []string{SpanAttemptPrefix, SpanOperationPrefix, SpanDrainPrefix} {
		for _, method := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodHead} {
			m[[2]string{p, method}] = p + method
		}
	}
	return m
}()
