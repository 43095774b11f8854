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
// # Your own handler
//
// Wrap puts the same key layer and faults in front of any http.Handler, so
// a team can test its own API, and its clients against it, rather than the
// fixed routes:
//
//	w := idemtest.Wrap(myAPI, idemtest.Options{RequireKey: true, Faults: faults})
//	srv := httptest.NewServer(w)
//	defer srv.Close()
//	// ... send through an idem.Client to srv.URL ...
//	if n := w.EffectsForKey(key); n != 1 {
//		t.Errorf("handler ran %d times", n)
//	}
//
// The handler is the effect. On POST and PATCH (Options.KeyedMethods) the
// first request with a key claims it and runs the handler into a recorder;
// what the handler wrote (status, header fields as they stood when the
// status was written, body) completes the record and is replayed byte for
// byte, with "Idempotent-Replayed: true", to later requests with the key
// and the same fingerprint; another fingerprint gets 422, and a request
// while the handler runs gets 409. Keyless requests on those methods, and
// every request on other methods, reach the handler as they came (or 400
// without a key under RequireKey). EffectsForKey counts the handler's runs
// per key, the truth to set beside what a client reports.
//
// A 5xx or a panic from the handler is an answer too: by default
// (StoreServerErrors) it is stored and replayed, as the draft asks for "the
// result of the previously completed operation, success or an error", and
// a panic is stored as a 500 while the response it broke is aborted as
// net/http does. ReleaseServerErrors deletes the claim instead, so a retry
// runs the handler again: the rule the fixed routes keep for a failure
// before the effect, and, for a handler that may have acted before failing,
// the server behaviour that makes keyed retries of a 500 unsafe.
//
// A takeover after Options.Lease fences what it can: a request overtaken
// before its handler started (in a FaultDelay pause) does not run it, but
// one overtaken while its handler ran has run it, and only the taker's
// answer is stored.
//
// # Caveats
//
// Everything is held in memory and records are only forgotten lazily, when
// their key is used again after retention; that is fine for tests, not for
// production. The faults that drop connections hijack them, so they need
// HTTP/1.1; through Handler or a Wrapper with a ResponseWriter that cannot be
// hijacked (an httptest.ResponseRecorder, HTTP/2) they panic with
// http.ErrAbortHandler, which net/http servers treat as an abort: under
// HTTP/2 the stream is reset, the connection kept. A wrapped handler on
// the key layer writes into a recorder, so it cannot stream, flush, send
// 1xx answers or hijack there; trailers are not replayed.
// Clients with keep-alives on should know that net/http itself resends a
// request carrying an Idempotency-Key header when a reused connection fails,
// so the server may see more attempts than the client made.
package idemtest
