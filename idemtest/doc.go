// Package idemtest is an in-memory server side of the Idempotency-Key
// protocol (IETF draft-ietf-httpapi-idempotency-key-header, with the server
// state machine of Stripe-style idempotency keys), with fault injection, for
// testing code that sends writes that must happen once.
//
// It plays the part httptest.Server plays for ordinary HTTP code: a test
// starts one on loopback, sends real HTTP round trips through idem (or any
// client), and then asks it how many business effects actually happened:
//
//	s := idemtest.New(idemtest.Options{
//		RequireKey: true,
//		Faults:     idemtest.RandomFaults(1, map[idemtest.Fault]float64{idemtest.FaultCommitThenDrop: 0.2}),
//	})
//	if err := s.Start(); err != nil {
//		t.Fatal(err)
//	}
//	defer s.Close()
//	client := &idem.Client{HTTPClient: s.Client()}
//	// ... send payments to s.URL() + "/payments" ...
//	if n := s.EffectsForKey(key); n != 1 {
//		t.Errorf("payment applied %d times", n)
//	}
//
// idem's own tests, its queue's and its examples use it. It follows the
// protocol as the draft describes it, not as any client behaves, so a client
// bug shows up as a duplicate effect or a wrong answer rather than being
// papered over.
//
// # Basics
//
// POST and PATCH carry the idempotency layer. The first request with a key
// claims it (state claimed, with an owner token and a lease), runs the effect
// and completes the record with the response it sent. A later request with
// the same key and the same fingerprint (SHA-256 of method, path and body)
// gets that response replayed byte for byte with "Idempotent-Replayed: true";
// with another fingerprint it gets 422; while the first is still running it
// gets 409. A lease that expires lets a later request take the claim over,
// and completion is fenced by the owner token, so the slow original cannot
// apply its effect after being overtaken. A failure before the effect deletes
// the claim so that a retry executes. Completed records are forgotten
// Options.Retention after the key's first claim; after that the same key is
// a new request.
//
// The key is taken as the draft's sf-string ("abc") or bare (abc), as
// deployed servers take it, and both name one record; Options.SFStringOnly
// refuses the bare form, as the draft's letter does.
//
// PUT, DELETE and GET on /resources/{id} are naturally idempotent and carry
// no key layer: a key sent with them is ignored, as Stripe does.
//
// Faults are chosen per request by Options.Faults, and dials are refused
// through DialContext (Options.RefuseDial, SetDown), since a server cannot
// know which request a connection will carry.
//
// # Caveats
//
// Everything is held in memory and records are only forgotten lazily, when
// their key is used again after retention; that is fine for tests, not for
// production. The faults that drop connections hijack them, so they need
// HTTP/1.1; through Handler with a ResponseWriter that cannot be hijacked they
// panic with http.ErrAbortHandler, which net/http servers treat as an abort.
// Clients with keep-alives on should know that net/http itself resends a
// request carrying an Idempotency-Key header when a reused connection fails,
// so the server may see more attempts than the client made.
package idemtest
