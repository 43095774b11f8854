// Package queueweb shows a running queue over HTTP, as idemq shows a
// stopped one: an http.Handler an application mounts in its own server,
// behind its own authentication, serving JSON (counts, the oldest pending,
// the horizon at risk, a filtered list of records, one record) and one
// HTML page that shows the same and refreshes itself.
//
// bbolt lets no other process read a file a writer holds, so without it an
// operator sees a bbolt queue only after stopping the application; the
// handler reads the queue inside the application instead. It serves a
// PostgreSQL queue (package pgqueue) the same way.
//
// # Basics
//
// Mount the handler under a path ending in "/" and strip that prefix:
//
//	mux.Handle("/admin/queue/", requireOperator(http.StripPrefix("/admin/queue",
//		queueweb.Handler(q, queueweb.Options{}))))
//
// idemq reads a live queue through the same routes: idemq --url
// https://app.example/admin/queue ls.
//
// Records are redacted as idemq redacts them (RecordOf): no URL query,
// fragment or user info, no body, no header value, no more of a key than a
// short prefix; control and bidi characters in the JSON are \u escapes and
// the page writes every value as text, never as HTML. Discard, resubmit and
// reset-clock answer 403 unless Options.Writes turns them on.
//
// # Caveats
//
// The handler does no authentication of its own: mount it behind the
// application's. It refuses a browser's cross-origin POST
// (http.CrossOriginProtection), so that another site cannot make an
// operator's browser discard a record.
//
// A list filtered by lane reads the records of the other lanes too, a page
// at a time, until it has filled its limit.
package queueweb
