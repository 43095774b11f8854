package idemotel

import "go.opentelemetry.io/otel/attribute"

// ScopeName is the instrumentation scope of every instrument: the meter is
// MeterProvider.Meter(ScopeName).
const ScopeName = "github.com/idem-go/idem/otel"

// Instrument names. The package documentation lists each one's unit and
// attributes.
const (
	// MetricAttempts counts attempts, from the OnAttempt hook.
	MetricAttempts = "idem.attempts"
	// MetricAttemptDuration is the histogram of attempt durations, in
	// seconds, from the OnAttempt hook.
	MetricAttemptDuration = "idem.attempt.duration"
	// MetricOperations counts operations that Do or RoundTrip finished, by
	// outcome, from Stats.Outcomes.
	MetricOperations = "idem.operations"
	// MetricReplays counts operations whose answer the server replayed from
	// its store, from Stats.Replays.
	MetricReplays = "idem.replays"
	// MetricBudgetRefusals counts retries the retry budget refused, from
	// Stats.BudgetRefusals.
	MetricBudgetRefusals = "idem.budget_refusals"
	// MetricBudgetTokens is what is left of the retry budget, from
	// Stats.BudgetTokens; not reported for an unlimited budget.
	MetricBudgetTokens = "idem.budget.tokens"
	// MetricQueueRecords is the number of a queue's records, by state.
	MetricQueueRecords = "idem.queue.records"
	// MetricQueueOldestPending is how long, in seconds, the oldest unsettled
	// record of a queue has waited.
	MetricQueueOldestPending = "idem.queue.oldest_pending"

	// EventAttempt names the span event added per attempt.
	EventAttempt = "idem.attempt"
)

// idem's own attribute keys. Their values are the String of idem's enums,
// the one spelling idem writes everywhere: "not_processed" for
// idem.ClassNotProcessed. The HTTP ones
// (http.request.method, http.response.status_code,
// http.request.resend_count, error.type) are OpenTelemetry's semantic
// conventions, as package semconv names them.
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
)
