package idemotel

import "go.opentelemetry.io/otel/attribute"

// ScopeName is the instrumentation scope of every instrument and span: the
// meter is MeterProvider.Meter(ScopeName), the tracer
// TracerProvider.Tracer(ScopeName).
const ScopeName = "github.com/idem-go/idem/otel"

// Instrument names. The package documentation lists each one's unit and
// attributes.
const (
	// MetricRequestDuration is the semantic conventions' histogram of HTTP
	// client request durations, in seconds: one measurement per attempt,
	// from the OnAttempt hook, with idem's idem.class and idem.action
	// beside the conventions' attributes. It counts attempts too.
	MetricRequestDuration = "http.client.request.duration"
	// MetricActiveRequests is the semantic conventions' number of HTTP
	// requests in flight: up as an attempt's request goes out (OnSend),
	// down once the attempt is reported (OnAttempt).
	MetricActiveRequests = "http.client.active_requests"
	// MetricOperationDuration is the histogram of operation durations, in
	// seconds, from OnOperation's start to its end: the attempts and the
	// waits between them.
	MetricOperationDuration = "idem.operation.duration"
	// MetricReplays counts operations whose answer the server replayed from
	// its store, from Stats.Replays.
	MetricReplays = "idem.replays"
	// MetricBudgetRefusals counts retries the retry budget refused, from
	// Stats.BudgetRefusals.
	MetricBudgetRefusals = "idem.retry_budget.refusals"
	// MetricBudgetTokens is what is left of the retry budget to the origin
	// that has least, from Stats.BudgetTokens; not reported for an
	// unlimited budget.
	MetricBudgetTokens = "idem.retry_budget.tokens"
	// MetricQueueRecordCount is the number of a queue's records, by state.
	MetricQueueRecordCount = "idem.queue.record.count"
	// MetricQueueOldestPending is how long, in seconds, the oldest unsettled
	// record of a queue has waited.
	MetricQueueOldestPending = "idem.queue.oldest_pending"
)

// Span names. An operation's span is named SpanOperationPrefix + method
// ("idem POST"); an attempt's as otelhttp names its client spans,
// "HTTP " + method ("HTTP POST"), so that the two line up in a trace view.
const (
	// SpanOperationPrefix starts the name of an operation's span.
	SpanOperationPrefix = "idem "
	// SpanAttemptPrefix starts the name of an attempt's span.
	SpanAttemptPrefix = "HTTP "
	// SpanDrainPrefix starts the name of the span of a queue record's
	// drain, one attempt of the record ("idem drain POST").
	SpanDrainPrefix = "idem drain "
)

// idem's own attribute keys. Their values are the String of idem's enums,
// the one spelling idem writes everywhere: "not_processed" for
// idem.ClassNotProcessed. The HTTP ones (http.request.method,
// server.address, server.port, url.scheme, url.full,
// http.response.status_code, http.request.resend_count, error.type) are
// OpenTelemetry's semantic conventions, as package semconv names them.
const (
	// AttrClass is the attempt's idem.Class: "applied", "already_applied",
	// "never_sent", "not_processed", "ambiguous", "key_reused", "rejected",
	// "invalid".
	AttrClass = attribute.Key("idem.class")
	// AttrAction is the idem.Action that followed the attempt: "done",
	// "retry", "stop", "hold" or "expire" (the last two only from a queue).
	AttrAction = attribute.Key("idem.action")
	// AttrOutcome is an operation's idem.Outcome: "applied",
	// "already_applied", "not_applied" or "unknown".
	AttrOutcome = attribute.Key("idem.outcome")
	// AttrQueueState is a queue record's queue.State: "pending",
	// "in_flight", "done", "failed" or "expired".
	AttrQueueState = attribute.Key("idem.queue.state")
	// AttrRecordID is the queue.ID of the record a drain span attempts.
	AttrRecordID = attribute.Key("idem.queue.record.id")
	// AttrRecordAttempt numbers a drain span's attempt among its record's
	// attempts, from 1.
	AttrRecordAttempt = attribute.Key("idem.queue.record.attempt")
)
