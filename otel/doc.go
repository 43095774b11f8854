// Package idemotel exports what an idem.Client, an idem.Transport and a
// queue.Queue do to OpenTelemetry: a span per operation and per attempt,
// the attempt's trace context in its request, and metrics. Where otelhttp
// makes one client span and one measurement per request of a plain
// http.Client, idemotel makes the same per attempt, named and attributed
// as otelhttp's, adds the class of each attempt and what followed it, and
// an operation's span and duration around its attempts.
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
// Without options the global MeterProvider, TracerProvider and propagator
// are used (WithMeterProvider, WithTracerProvider, WithPropagator). The
// global propagator propagates nothing until the application sets one,
// such as propagation.TraceContext{}.
//
// # Spans
//
// Instrument sets the client's OnOperation, OnSend and OnAttempt hooks,
// each calling the hook the client had, if any. For a POST answered 503
// then 201, under the caller's span:
//
//	caller's span
//	└── idem POST        INTERNAL  the operation: Do, Resume or RoundTrip
//	    ├── HTTP POST    CLIENT    attempt 1: 503, idem.action=retry, status Error
//	    └── HTTP POST    CLIENT    attempt 2: 201, http.request.resend_count=1
//
// The operation's span ("idem " + method) has http.request.method,
// server.address, server.port, url.scheme and, at its end, idem.outcome;
// when Do returns an error, error.type and the status Error with the
// error's outcome and reason, without the URL. A 4xx rejection is a Result, not an
// error: its span has idem.outcome="not_applied" and no error.
//
// An attempt's span is named as otelhttp names its client spans ("HTTP " +
// method). It starts as the request goes out (OnSend), which then puts its
// context in the request's header with the propagator (traceparent with
// the W3C propagator): the server's span is the attempt's child. It has
// http.request.method, server.address, server.port and url.scheme, and once
// the attempt is over http.response.status_code (absent when no response
// came), http.request.resend_count (absent on an operation's first
// attempt), error.type, idem.class and idem.action. Its status is Error
// when error.type is set, with a transport error's message, without the
// URL. It ends when the attempt ended (Attempt.Start + Attempt.Duration),
// not when OnAttempt runs.
//
// With WithURLFull both spans carry url.full, without its query, user info
// and fragment (package redact's rule); without it no span carries the
// URL. WithAttributes adds to measurements, not to spans.
//
// # A trace across a queue
//
// QueueTracer, set as queue.Options.Tracer (pgqueue.Options carries it) and
// as pgqueue.Producer's Tracer, stores the trace context of the span that
// enqueued a record with the record, and makes each attempt the drainer
// makes of it a span of its own, linked to that producer's span, so that a
// payment that went out two hours after it was queued is one click from
// the request that queued it:
//
//	checkout                         the producer's span: Enqueue or Producer.EnqueueTx
//	idem drain POST  CONSUMER  root, linked to checkout; attempt 1 of the record
//	└── HTTP POST    CLIENT    503, idem.action=retry
//	idem drain POST  CONSUMER  root, linked to checkout; attempt 2
//	└── HTTP POST    CLIENT    201, http.request.resend_count=1
//
// A drain span ("idem drain " + method) has http.request.method,
// server.address, server.port, url.scheme (url.full with WithURLFull),
// idem.queue.record.id and idem.queue.record.attempt, and at its end
// idem.action (what the queue did) and idem.outcome once the record
// settled; its status is Error when no attempt could be made (error.type
// says why), or the record failed or expired. A record enqueued without a
// span, without QueueTracer, or before idem kept trace contexts drains in
// a span without links.
//
// # Instruments
//
// Instrument and InstrumentTransport record, from the hooks:
//
//	http.client.request.duration  histogram        s          per attempt: attempt attributes
//	http.client.active_requests   up-down counter  {request}  http.request.method, server.address,
//	                                                          server.port, url.scheme
//	idem.operation.duration       histogram        s          per operation: http.request.method,
//	                                                          server.address, server.port, url.scheme,
//	                                                          idem.outcome, error.type (on an error)
//
// and observe, at each collection, from Stats:
//
//	idem.replays                  counter          {operation}
//	idem.retry_budget.refusals    counter          {retry}
//	idem.retry_budget.tokens      gauge            {token}    (not for an unlimited budget)
//
// ObserveQueue observes:
//
//	idem.queue.record.count       up-down counter  {record}   idem.queue.state
//	idem.queue.oldest_pending     gauge            s
//
// The first two are OpenTelemetry's semantic conventions for HTTP clients,
// with the conventions' bucket bounds; the attempt attributes are:
//
//	http.request.method        POST; "_OTHER" for a method the conventions do not know
//	server.address             shop.example
//	server.port                443: the URL's port, or its scheme's
//	url.scheme                 https
//	http.response.status_code  503; absent when no response came
//	error.type                 "503" after a 4xx or 5xx answer, except a DELETE's 404 read as already
//	                           applied; after a transport error "timeout", "canceled", "dns",
//	                           "connection_refused", "connection_reset", "connection_closed",
//	                           "tls_certificate", "invalid_request" or "_OTHER"; absent otherwise
//	idem.class                 "ambiguous": the attempt's idem.Class
//	idem.action                "retry": what followed, "done", "retry", "stop", "hold" or "expire"
//
// A retry is an attempt with idem.action="retry"; its idem.class says after
// what. The histogram counts attempts, and idem.operation.duration
// operations by outcome. No measurement carries a URL, a key, a body or an
// error message, nor http.request.resend_count, which would multiply the
// series.
//
// # Caveats
//
// A queue makes its attempts one at a time through its client's Try: each
// has its span and its measurement, with what the queue did next ("retry"
// when it will try again, "stop" when it failed the record, "expire" when
// the next attempt would pass the horizon, "hold" when it held a lane after
// a 401 or a host for its certificate's dates), but no operation: its span
// is a child of the context the queue gives Try (the drain span with
// QueueTracer), and a queue's records end
// in idem.queue.record.count, not in idem.operation.duration. An attempt of
// Try that its caller never reports (Step.Report) leaves its span open and
// its request counted in http.client.active_requests.
//
// When net/http itself resends a request on a fresh connection
// (idem.Wire.Conns > 1), that is one attempt here and more than one in
// Stats.Requests.
//
// Several clients instrumented with one MeterProvider share the instruments,
// and without WithAttributes their series too: attempts add up, and so do
// the observable counters in the Go SDK, but idem.retry_budget.tokens shows
// one client's budget, and the OpenTelemetry API asks callbacks not to
// report a series twice. Tell them apart with WithAttributes:
//
//	idemotel.Instrument(payments, idemotel.WithAttributes(attribute.String("idem.client", "payments")))
//
// The hooks are safe for concurrent use, as idem requires; they run on the
// caller's goroutine. OnAttempt ends only a span this package's OnSend
// started. With the SDK one attempt's hooks cost about two dozen
// allocations, small beside a network round trip; with the no-op providers
// (the global ones until the application sets its own) they record
// nothing, put nothing in the request and cost one allocation.
package idemotel
