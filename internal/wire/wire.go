// Package wire records, through net/http/httptrace, what one HTTP attempt put
// on the wire: whether a connection was obtained, and whether the request
// headers and the whole request were written. Those facts separate a request
// the server cannot have seen from one it may have acted on.
package wire

import (
	"context"
	"net/http/httptrace"
	"sync/atomic"
)

// Trace is a snapshot of a Recorder.
type Trace struct {
	// Conns counts GotConn events: net/http may resend a request on a new
	// connection within one RoundTrip.
	Conns int
	// WroteHeaders reports that request headers were written to a connection.
	WroteHeaders bool
	// WroteRequest reports that the whole request was written without error.
	WroteRequest bool
	// Resent reports that a connection was obtained after headers had been
	// written on an earlier one and before any response began: net/http sent
	// the request again. A redirect net/http follows begins after an answer
	// and is not a resend. An HTTP/2 stream the server refused cannot be
	// told from one it reset after reading, so its resend counts too.
	Resent bool
}

// Recorder collects the facts of one attempt. Its hooks run on net/http's
// goroutines, so every field is atomic; a Recorder is safe for concurrent use.
// The zero Recorder is ready to use, so that one can live inside a larger
// struct allocated once for an operation; it must not be copied after first
// use, and its first WithContext must not run concurrently with another. It
// records one attempt: a later attempt takes a Recorder of its own.
type Recorder struct {
	trace httptrace.ClientTrace // its hooks set by the first WithContext
	conns atomic.Int32
	flags atomic.Uint32 // of the facts below
}

// The facts a Recorder holds besides its count of connections.
const (
	wroteHeaders uint32 = 1 << iota
	wroteRequest
	resent
	// unanswered: headers went out on the current connection and no
	// response has begun, so a connection taken now is a resend. A
	// redirect's hop begins after an answer, so it is not one.
	unanswered
)

// New returns a new Recorder, for a caller that has no struct to hold one.
func New() *Recorder { return new(Recorder) }

// WithContext returns ctx carrying r's trace. Hooks of a trace already in
// ctx keep running: httptrace composes them.
func (r *Recorder) WithContext(ctx context.Context) context.Context {
	if r.trace.GotConn == nil {
		r.init()
	}
	return httptrace.WithClientTrace(ctx, &r.trace)
}

// init points r's trace at r's hooks. The trace lives in r, so recording an
// attempt allocates the four hooks and nothing else of its own.
func (r *Recorder) init() {
	r.trace = httptrace.ClientTrace{
		GotConn:              r.gotConn,
		WroteHeaders:         r.wroteHeaders,
		GotFirstResponseByte: r.gotFirstResponseByte,
		WroteRequest:         r.wroteRequest,
	}
}

func (r *Recorder) gotConn(httptrace.GotConnInfo) {
	// net/http waits for the failed connection's writer before it takes
	// another, so an earlier WroteHeaders is seen here.
	if r.flags.Load()&unanswered != 0 {
		r.flags.Or(resent)
	}
	r.conns.Add(1)
}

func (r *Recorder) wroteHeaders() { r.flags.Or(wroteHeaders | unanswered) }

func (r *Recorder) gotFirstResponseByte() { r.flags.And(^unanswered) }

func (r *Recorder) wroteRequest(info httptrace.WroteRequestInfo) {
	if info.Err == nil {
		r.flags.Or(wroteRequest)
	}
}

// Trace returns what r has recorded so far.
func (r *Recorder) Trace() Trace {
	f := r.flags.Load()
	return Trace{
		Conns:        int(r.conns.Load()),
		WroteHeaders: f&wroteHeaders != 0,
		WroteRequest: f&wroteRequest != 0,
		Resent:       f&resent != 0,
	}
}
