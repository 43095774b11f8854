// Package idem is an HTTP client that makes a write happen once across
// timeouts, resets, retries and restarts, and tells the caller the truth when
// it cannot know.
//
// Where net/http's Client sends one request and reports what came back, idem
// runs an operation: it sends attempts until the server gives a definitive
// answer, and retries only where a retry cannot apply the operation twice.
//
// # Basics
//
// An Intent is one logical operation, created where the intent is born (the
// user pressed "Pay"). For a method that is not safe it carries an
// idempotency key generated once, when the Intent is created; every attempt
// presents it, and a server that implements the Idempotency-Key protocol
// answers a repeat with the stored result instead of acting again. An Intent
// holds its body as bytes, so every attempt is byte-identical, and it holds
// no secrets: Client.Authorize adds credentials per attempt.
//
//	in, err := idem.NewIntent("POST", "https://api.example/payments", body)
//	...
//	res, err := client.Do(ctx, in)
//
// Do runs a whole operation, waiting between attempts under the Client's
// Policy and retry budget. A caller that keeps its own schedule, as package
// queue does or a job runner whose jobs run again later, makes one attempt
// at a time with Client.Try, which never waits, and decides itself what
// follows each: the decision table's verdict is its advice.
//
// Every failed attempt is classified by what reached the wire (recorded
// through net/http/httptrace) and by the answer:
//
//   - never sent: no request headers were written to a connection (dial
//     refused, DNS). The server cannot have acted; any method is resent.
//   - invalid: nothing was sent and waiting cannot help (a TLS certificate
//     that does not verify, a header net/http refuses): stop, NotApplied,
//     ErrInvalidRequest. A certificate refused only for its validity dates
//     (expired or not yet valid by this machine's clock) stops too, with
//     ErrCertificateDates instead: a wrong clock may be the cause, and a
//     queue holds its sends until the clock is right.
//   - not processed: 408, 425, 429, or 409 for a keyed request (the same key
//     is in flight). Resent after the longer of Retry-After and the backoff.
//     A keyed 409 is polled, not counted as an attempt nor a budget token,
//     within Policy.InFlightWindow (30 s by default) of the first 409.
//   - ambiguous: the request may have reached the server and no complete
//     answer came back (timeout, reset), or a 5xx. Resent only for safe and
//     idempotent methods (GET, HEAD, OPTIONS, TRACE, QUERY, PUT, DELETE) or
//     when the intent has a key; a POST or PATCH without one stops. A 301
//     or 302 to a method that is not safe is ambiguous too (post/redirect/get
//     or moved?) and stops with ErrRedirected.
//   - key reused (422 for a keyed request), rejected (other 4xx): stop. A
//     keyed write redirected to another host, where its key would not go,
//     or from https to http, where it would go in clear, is not followed:
//     ErrRedirected.
//
// An answer marked replayed (Idempotent-Replayed, Idempotency-Replayed or
// X-Idempotent-Replayed: true) is the one the server stored under the key,
// which every retry would get again: whatever its class it is never
// retried (ErrServerSaidStop; Unknown for a replayed 5xx).
//
// A request net/http followed through a redirect that made it a GET (303,
// or 301/302 after a POST) is judged by its own answer, the redirect, not by
// the GET's status. A redirect loop is one run of hops, never resent:
// ErrRedirected, NotApplied when every answer was a 307 or 308, the
// request's own answer otherwise.
//
// The key header is found under any spelling of its name: net/http sends
// req.Header["idempotency-key"] as it is, and the server reads it as the
// key. An Authorize hook must leave it as the Client set it.
//
// The table reads the facts of one attempt, and whether an earlier attempt
// of the intent was ambiguous, and nothing else (no clock, no I/O, no
// randomness): the same facts always give the same decision.
//
// Hooks narrow the table and never widen it: Policy.Veto may stop a retry
// the table allows (ErrVetoed), as for a server that releases a key when
// its handler fails with a 5xx, and is never asked where the table stops.
//
// # Outcomes
//
// Every return of Client.Do maps to one Outcome:
//
//   - Applied (Result.Replayed when the server answered from its store) and
//     AlreadyApplied (a DELETE answered 404 or 410 after an ambiguous
//     attempt): success, with a *Result.
//   - NotApplied: the server did not act. A *Result for a 4xx rejection, or
//     an *Error matching ErrNotApplied when attempts never got through. A new
//     intent is safe.
//   - Unknown: an attempt left the operation in doubt and nothing later
//     settled it. An *Error matching ErrOutcomeUnknown:
//     reconcile, do not resubmit under a new key. In doubt means an
//     ambiguous attempt, a keyed 409 (a request under the key is in flight
//     and may still apply), or a resend net/http made after the headers had
//     gone out (Wire.Resent). Once in doubt only a success settles it: a
//     later 4xx proves that attempt did nothing, not the earlier one.
//
// An Intent is immutable data and remembers nothing of its runs. Its Client
// remembers the keys its calls left in doubt, for Client.DoubtWindow: a Do,
// Resume or Try under such a key starts in doubt, whatever its caller was
// told, so a job runner that restarted without the prior it lost reads a
// later 4xx as Unknown, never NotApplied, until a success settles the key.
// To run an intent again after Unknown, the way to reconcile under its key,
// pass the first run's error to Client.Resume, which judges the answers in
// that run's light.
//
// The zero Outcome, NoOutcome, means none yet.
//
// # Caveats
//
// A key protects one operation only while the server remembers it (Stripe:
// at least 24 hours); a resend after that is a new operation. The queue
// package limits resends to that horizon.
//
// Keys help only against servers that implement them. Against a server that
// ignores the header, a keyed POST retried after an ambiguous attempt can
// apply twice; use WithoutKey for such servers, and idem will not retry it.
//
// net/http itself resends a request carrying an Idempotency-Key header when a
// reused connection fails before any answer, and resends HTTP/2 streams the
// server refused or never processed (REFUSED_STREAM, above a GOAWAY's last
// stream id). Attempt.Wire.Conns counts those connections, and
// Stats.Requests counts them as sends; Wire.Resent marks an attempt whose
// headers had gone out before the resend, which leaves it in doubt.
//
// For existing *http.Client code, Transport applies the same decisions
// without an Intent; it never makes up a key, and a Report attached with
// WithReport tells the outcome behind the response it hands back. It
// remembers the keys it left in doubt as a Client does, so that an SDK's own
// retry under one of them reads Unknown short of success; still, turn such
// retries off. The queue package keeps intents
// on disk and sends them after outages and restarts, never past the time the
// server keeps their keys.
package idem
