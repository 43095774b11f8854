package idemotel

import (
	"slices"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// An Option configures Instrument, InstrumentTransport or ObserveQueue.
type Option func(*config)

// config is what the options set; its zero value means the global
// providers and propagator, no url.full and no extra attributes.
type config struct {
	meterProvider  metric.MeterProvider
	tracerProvider trace.TracerProvider
	propagator     propagation.TextMapPropagator
	urlFull        bool
	attrs          []attribute.KeyValue
}

// WithMeterProvider makes the instruments with p. Without it, or if p is
// nil, the global MeterProvider (otel.GetMeterProvider) is used.
func WithMeterProvider(p metric.MeterProvider) Option {
	return func(c *config) { c.meterProvider = p }
}

// WithTracerProvider makes the spans with p. Without it, or if p is nil,
// the global TracerProvider (otel.GetTracerProvider) is used. ObserveQueue
// makes no span and ignores it.
func WithTracerProvider(p trace.TracerProvider) Option {
	return func(c *config) { c.tracerProvider = p }
}

// WithPropagator puts each attempt's span context in its request's header
// with p. Without it, or if p is nil, the global propagator
// (otel.GetTextMapPropagator) is used; it propagates nothing until the
// application sets one (otel.SetTextMapPropagator).
func WithPropagator(p propagation.TextMapPropagator) Option {
	return func(c *config) { c.propagator = p }
}

// WithURLFull adds url.full to the operation's and the attempts' spans:
// the request URL without its query, user info or fragment, as package
// github.com/idem-go/idem/redact shows it, since a query often holds a
// credential. Without it no span carries the URL, only its scheme, host
// and port; no measurement ever carries it.
func WithURLFull() Option {
	return func(c *config) { c.urlFull = true }
}

// WithAttributes adds attrs to every measurement. Give each instrumented
// client, transport or queue its own (idem.client="payments") when several
// share a MeterProvider: otherwise their series coincide. Spans do not get
// them: a span tells its client by its parent.
func WithAttributes(attrs ...attribute.KeyValue) Option {
	return func(c *config) { c.attrs = append(c.attrs, attrs...) }
}

func newConfig(opts []Option) config {
	var c config
	for _, o := range opts {
		o(&c)
	}
	return c
}

func (c config) meter() metric.Meter {
	p := c.meterProvider
	if p == nil {
		p = otel.GetMeterProvider()
	}
	return p.Meter(ScopeName, metric.WithSchemaURL(semconv.SchemaURL))
}

func (c config) tracer() trace.Tracer {
	p := c.tracerProvider
	if p == nil {
		p = otel.GetTracerProvider()
	}
	return p.Tracer(ScopeName, trace.WithSchemaURL(semconv.SchemaURL))
}

func (c config) textMapPropagator() propagation.TextMapPropagator {
	if c.propagator == nil {
		return otel.GetTextMapPropagator()
	}
	return c.propagator
}

// with returns the measurement option for kv plus the configured attributes.
func (c config) with(kv ...attribute.KeyValue) metric.MeasurementOption {
	if len(c.attrs) == 0 {
		return metric.WithAttributes(kv...)
	}
	return metric.WithAttributes(slices.Concat(kv, c.attrs)...)
}
