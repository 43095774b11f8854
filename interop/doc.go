// Package interop proves idem against servers and fault tools that nobody on
// the idem project wrote: fiber v3's idempotency middleware, plain net/http
// servers that read the Idempotency-Key protocol in the other ways deployed
// servers do, and Shopify's toxiproxy, run in-process, cutting, delaying and
// resetting real TCP connections. It is its own module, so that those
// dependencies stay out of idem's.
//
// Like httptest beside net/http, the package holds what the tests need and a
// reader may reuse: DraftServer, a server side of the protocol written from
// draft-ietf-httpapi-idempotency-key-header rather than from idem; Ledger,
// which counts what a server really did; and Tally, which compares that with
// what a client reported. The tests are the point.
//
// # Basics
//
// Every test checks idem's outcome contract against a ledger of effects:
// Applied means the effect took place exactly once, NotApplied that it did
// not take place, Unknown that it may have; no effect ever takes place twice
// because of idem. Every test that talks to a server that never settles
// asserts a bound on the time Do takes.
//
//	go test -race -count=1 ./...                                         # everything, well under a minute
//	IDEM_SOAK=1 go test -run TestToxicsSoak -v -timeout 60m .             # 100,000 payments through toxiproxy
//	IDEM_SOAK=1 IDEM_SOAK_N=20000 IDEM_SOAK_WORKERS=32 go test -run TestToxicsSoak -v .
//
// # Caveats
//
// Everything listens on 127.0.0.1. The tests that depend on timing (attempt
// timeouts against toxiproxy's latency, fiber's lock) use margins of a few
// hundred milliseconds; a machine loaded far beyond its cores can still push
// a clean attempt past its timeout, which changes the number of attempts but
// never the outcome's truth. fiber's middleware departs from the draft in
// several ways (README.md lists them, each with its test); idem stays truthful
// against all of them except one it cannot see: a fiber handler that returns
// an error after its effect is executed again by a retry.
package interop
