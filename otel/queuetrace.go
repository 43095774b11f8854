package idemotel

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/queue"
	"github.com/idem-go/idem/redact"
)

// QueueTracer returns a queue.Tracer, for queue.Options.Tracer (and so
// pgqueue.Options) and pgqueue.Producer, that links each drain of a record
// to the span of the code that enqueued it:
//
//   - Enqueue stores the trace context of ctx's span with the record, in
//     the W3C Trace Context form whatever the configured propagator, since
//     it never leaves the queue; nothing when ctx has no span;
//   - each attempt the drainer makes runs in a CONSUMER span named
//     SpanDrainPrefix + method ("idem drain POST"), a root span with a
//     link to the producer's span, so that a trace viewer goes from a
//     payment that went out two hours late to the request that queued it
//     in one click. The attempt's own span, from Instrument's hooks on the
//     queue's Client, is its child.
//
// A drain span carries http.request.method, server.address, server.port,
// url.scheme (url.full with WithURLFull, redacted), idem.queue.record.id
// and idem.queue.record.attempt, then what the queue did: idem.action, and
// idem.outcome once the record settled. Its status is Error when no
// attempt could be made (error.type names why), when the record failed or
// expired. Of the options, WithTracerProvider and WithURLFull apply.
func QueueTracer(opts ...Option) queue.Tracer {
	c := newConfig(opts)
	return &queueTracer{c: c, tracer: c.tracer()}
}

type queueTracer struct {
	c      config
	tracer trace.Tracer
}

// storedForm is how a record keeps its producer's trace context.
var storedForm propagation.TraceContext

func (t *queueTracer) Inject(ctx context.Context) map[string]string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	m := propagation.MapCarrier{}
	storedForm.Inject(ctx, m)
	if len(m) == 0 {
		return nil
	}
	return m
}

func (t *queueTracer) StartDrain(ctx context.Context, r *queue.Record) (context.Context, func(idem.Action, idem.Outcome, error)) {
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer), trace.WithNewRoot()}
	if len(r.Trace) > 0 {
		producer := trace.SpanContextFromContext(storedForm.Extract(context.Background(), propagation.MapCarrier(r.Trace)))
		if producer.IsValid() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: producer}))
		}
	}
	method := ""
	if r.Intent != nil {
		method = r.Intent.Method()
	}
	dctx, span := t.tracer.Start(ctx, spanName(SpanDrainPrefix, method), opts...)
	if span.IsRecording() && r.Intent != nil {
		tg := targetOfRaw(method, r.Intent.URL())
		span.SetAttributes(tg.attrs()...)
		if t.c.urlFull {
			span.SetAttributes(semconv.URLFull(redact.RawURL(r.Intent.URL())))
		}
		span.SetAttributes(AttrRecordID.Int64(int64(r.ID)), AttrRecordAttempt.Int(r.NumAttempts))
	}
	return dctx, func(action idem.Action, outcome idem.Outcome, err error) {
		if span.IsRecording() {
			span.SetAttributes(AttrAction.String(action.String()))
			if outcome != idem.NoOutcome {
				span.SetAttributes(AttrOutcome.String(outcome.String()))
			}
			switch {
			case err != nil:
				span.SetAttributes(semconv.ErrorTypeKey.String(drainErrorType(err)))
				span.SetStatus(codes.Error, redact.Error(err))
			case action == idem.ActionStop:
				span.SetStatus(codes.Error, "record failed, outcome "+outcome.String())
			case action == idem.ActionExpire:
				span.SetStatus(codes.Error, "record expired: past the server's retention of its key")
			}
		}
		span.End()
	}
}

// drainErrorType is the error.type of a drain that made no attempt.
func drainErrorType(err error) string {
	if errors.Is(err, idem.ErrInvalidRequest) {
		return "invalid_request"
	}
	return transportErrorType(err)
}
