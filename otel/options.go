package idemotel

import (
	"slices"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
)

// An Option configures Instrument, InstrumentTransport or ObserveQueue.
type Option func(*config)

// config is what the options set; its zero value means the global
// MeterProvider and no extra attributes.
type config struct {
	provider metric.MeterProvider
	attrs    []attribute.KeyValue
}

// WithMeterProvider makes the instruments with p. Without it, or if p is
// nil, the global MeterProvider (otel.GetMeterProvider) is used.
func WithMeterProvider(p metric.MeterProvider) Option {
	return func(c *config) { c.provider = p }
}

// WithAttributes adds attrs to every measurement. Give each instrumented
// client, transport or queue its own (idem.client="payments") when several
// share a MeterProvider: otherwise their series coincide.
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
	p := c.provider
	if p == nil {
		p = otel.GetMeterProvider()
	}
	return p.Meter(ScopeName, metric.WithSchemaURL(semconv.SchemaURL))
}

// with returns the measurement option for kv plus the configured attributes.
func (c config) with(kv ...attribute.KeyValue) metric.MeasurementOption {
	if len(c.attrs) == 0 {
		return metric.WithAttributes(kv...)
	}
	return metric.WithAttributes(slices.Concat(kv, c.attrs)...)
}
