// Package idemotel exports what an idem.Client, an idem.Transport and a
// queue.Queue do as OpenTelemetry metrics and span events, as otelhttp does
// for a plain http.Client, but per attempt: with the class of each attempt,
// what followed it and how the operation ended.
//
// It lives in its own module, github.com/idem-go/idem/otel, so that idem
// itself does not depend on OpenTelemetry. It uses only the OpenTelemetry
// API; the application chooses the SDK and the exporter.
//
// # Basics
//
// Instrument a Client before its first use, and a queue once it is open:
//
//	client := &idem.Client{}
//	reg, err := idemotel.Instrument(client)
//	...
//	defer reg.Unregister()
//
//	q, err := queue.Open(path, queue.Options{Client: client})
//	...
//	qreg, err := idemotel.ObserveQueue(q)
//	...
//	defer q.Close()
//	defer qreg.Unregister() // runs first: a closed queue cannot be read
//
// Without WithMeterProvider the global MeterProvider is used. Span events
// need no option: each attempt adds one to the span in the operation's
// context, when that span is recording.
//
// # Instruments
//
// Instrument and InstrumentTransport record, per attempt, from the OnAttempt
// hook:
//
//	idem.attempts              counter    {attempt}    attempt attributes
//	idem.attempt.duration      histogram  s            attempt attributes
//
// and observe, at each collection, from Stats:
//
//	idem.operations            counter    {operation}  idem.outcome
//	idem.replays               counter    {operation}
//	idem.budget_refusals       counter    {retry}
//	idem.budget.tokens         gauge      {token}      (not for an unlimited budget)
//
// ObserveQueue observes:
//
//	idem.queue.records         up-down counter {record} idem.queue.state
//	idem.queue.oldest_pending  gauge      s
//
// The attempt attributes, on both instruments and on the idem.attempt span
// event, are:
//
//	http.request.method        POST; "_OTHER" for a method the conventions do not know
//	http.response.status_code  503; absent when no response came
//	http.request.resend_count  the attempt's number in its operation minus one; absent on the first
//	error.type                 "503" after a 4xx or 5xx answer, except a DELETE's 404 read as already
//	                           applied; after a transport error "timeout", "canceled", "dns",
//	                           "connection_refused", "connection_reset", "connection_closed",
//	                           "tls_certificate", "invalid_request" or "_OTHER"; absent otherwise
//	idem.class                 "ambiguous": the attempt's idem.Class
//	idem.action                "retry": what followed, "done", "retry", "stop", "hold" or "expire"
//
// The first four are OpenTelemetry's semantic conventions for HTTP clients;
// the names and values of idem's own are the constants of this package. A
// retry is an attempt with idem.action="retry"; its idem.class says after
// what. No attribute carries a URL, a key, a body or an error message.
//
// # Caveats
//
// idem.operations and idem.replays count the operations Client.Do and
// Transport.RoundTrip finished. A queue makes its attempts one at a time
// through its client: they count in idem.attempts, with what the queue did
// next ("retry" when it will try again, "stop" when it failed the record,
// "expire" when the next attempt would pass the horizon, "hold" when it held
// a lane after a 401 or a host for its certificate's dates), but a queue's
// records end in idem.queue.records, not in idem.operations. Each of them
// is a first attempt to the client, so it has no
// http.request.resend_count.
//
// idem.attempts counts idem's attempts. When net/http itself resends a
// request on a fresh connection (idem.Wire.Conns > 1), that is one attempt
// here and more than one in Stats.Requests.
//
// Several clients instrumented with one MeterProvider share the instruments,
// and without WithAttributes their series too: attempts add up, and so do
// the observable counters in the Go SDK, but idem.budget.tokens shows one
// client's budget, and the OpenTelemetry API asks callbacks not to report a
// series twice. Tell them apart with WithAttributes:
//
//	idemotel.Instrument(payments, idemotel.WithAttributes(attribute.String("idem.client", "payments")))
//
// The hook is safe for concurrent use, as OnAttempt requires. It runs on
// the caller's goroutine after every attempt; recording costs a few
// allocations, small beside a network round trip.
package idemotel
