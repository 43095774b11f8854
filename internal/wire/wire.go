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
// Use New: a Recorder holds its own trace, so that recording an attempt
// allocates the Recorder and its four hooks, not a separate trace as well.
type Recorder struct {
	trace        httptrace.ClientTrace
	conns        atomic.Int32
	wroteHeaders atomic.Bool
	wroteRequest atomic.Bool
	resent       atomic.Bool
	// unanswered reports that headers went out on the current connection
	// and no response has begun: a connection taken now is a resend. A
	// redirect's hop begins after an answer, so it is not one.
	unanswered atomic.Bool
}

// New returns a Recorder whose trace feeds it.
func New() *Recorder {
	r := &Recorder{}
	r.trace = httptrace.ClientTrace{
		GotConn: func(httptrace.GotConnInfo) {
			// net/http waits for the failed connection's writer before it
			// takes another, so an earlier WroteHeaders is seen here.
			if r.unanswered.Load() {
				r.resent.Store(true)
			}
			r.conns.Add(1)
		},
		WroteHeaders: func() {
			r.wroteHeaders.Store(true)
			r.unanswered.Store(true)
		},
		GotFirstResponseByte: func() { r.unanswered.Store(false) },
		WroteRequest: func(info httptrace.WroteRequestInfo) {
			if info.Err == nil {
				r.wroteRequest.Store(true)
			}
		},
	}
	return r
}

// WithContext returns ctx carrying r's trace. Hooks of a trace already in
// ctx keep running: httptrace composes them.
func (r *Recorder) WithContext(ctx context.Context) context.Context {
	return httptrace.WithClientTrace(ctx, &r.trace)
}

// Trace returns what r has recorded so far.
func (r *Recorder) Trace() Trace {
	return Trace{
		Conns:        int(r.conns.Load()),
		WroteHeaders: r.wroteHeaders.Load(),
		WroteRequest: r.wroteRequest.Load(),
		Resent:       r.resent.Load(),
	}
}
