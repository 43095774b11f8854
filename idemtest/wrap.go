package idemtest

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"slices"
)

// ServerErrorPolicy is what Wrap does with a key whose handler answered
// 5xx or panicked. The zero value is StoreServerErrors.
type ServerErrorPolicy int

const (
	// StoreServerErrors completes the key's record with the 5xx, as with
	// any other answer, and replays it to retries: the draft asks for "the
	// result of the previously completed operation, success or an error",
	// and Stripe stores its 500s so. A panic is stored as a 500. A client
	// that retries a keyed 500 then gets the 500 again, never a second run.
	StoreServerErrors ServerErrorPolicy = iota
	// ReleaseServerErrors deletes the claim instead, so a retry runs the
	// handler again, as the fixed routes do for a failure before the
	// effect. That is right only for a handler whose 5xx means it changed
	// nothing; for any other it is the server behaviour that makes keyed
	// retries of a 500 apply the effect twice, which a test can show.
	ReleaseServerErrors
)

// Wrapper puts the Idempotency-Key protocol and fault injection in front of
// a caller's handler, so the key layer, its answers and its faults can be
// tested against an API of one's own rather than Server's fixed routes.
// Create one with Wrap and serve it like any handler (httptest.NewServer);
// EffectsForKey says how often the handler really ran. A Wrapper is safe
// for concurrent use if its handler is.
type Wrapper struct {
	layer
	h       http.Handler
	methods []string // that carry the key layer
}

// Wrap returns h behind the key layer and the faults of opts.
//
// A request whose method is in Options.KeyedMethods (POST and PATCH by
// default) and that carries a valid key goes through the key layer: the
// first request with the key claims it, runs h, and completes the record
// with what h wrote (status, header fields, body), which later requests
// with the same key and fingerprint get replayed byte for byte with
// "Idempotent-Replayed: true"; another fingerprint gets 422, and a request
// while h still runs gets 409. h gets a copy of the request whose body is
// the bytes read, and writes into a recorder: its answer is sent once h
// returns, so streaming, 1xx answers and hijacking are not available to
// it there. Options.ServerErrors says what a 5xx or a panic from h does to
// the key.
//
// A request without a key is refused with 400 on those methods when
// Options.RequireKey is set, and otherwise passes to h as it came, as do
// requests with other methods, whatever key they carry. Faults apply to
// every request, at the points Fault describes; a passing request is
// recorded only under a fault that replaces its answer.
//
// A FaultDelay pause always lasts Options.Delay: a Wrapper has no Close to
// cut it short.
func Wrap(h http.Handler, opts Options) *Wrapper {
	w := &Wrapper{h: h}
	w.init(opts)
	w.methods = slices.Clone(w.opts.KeyedMethods)
	if w.methods == nil {
		w.methods = []string{http.MethodPost, http.MethodPatch}
	}
	return w
}

// ServeHTTP serves r through the key layer and the faults to the wrapped
// handler.
func (w *Wrapper) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	x, ok := w.arrive(rw, r)
	if !ok {
		return
	}
	if !slices.Contains(w.methods, r.Method) || (x.key == "" && x.keyErr == nil && !w.opts.RequireKey) {
		w.passThrough(x)
		return
	}
	switch {
	case x.keyErr != nil:
		w.badRequest(rw, x.keyErr)
	case x.key == "":
		w.badRequest(rw, errKeyRequired)
	case w.readBody(x):
		w.executeKeyed(x, w.commit)
	}
}

// commit runs the handler for x, which owns its key's claim under owner,
// and completes or releases the record as Options.ServerErrors says.
func (w *Wrapper) commit(x *exchange, owner uint64) response {
	w.mu.Lock()
	owns := w.ownsLocked(x.key, owner)
	if !owns {
		// Overtaken during a FaultDelay pause: the handler must not run.
		w.stats.Fenced++
	}
	w.mu.Unlock()
	if !owns {
		return takenOver()
	}

	r := x.r.Clone(x.r.Context())
	r.Body = io.NopCloser(bytes.NewReader(x.body))
	resp, panicked := w.run(x.key, r)
	failed := panicked != nil || resp.status >= http.StatusInternalServerError
	if failed && w.opts.ServerErrors == ReleaseServerErrors {
		w.release(x.key, owner)
		if panicked != nil {
			panic(panicked)
		}
		return resp
	}
	if panicked != nil {
		resp = errorResponse(http.StatusInternalServerError, "handler panicked")
	}
	w.mu.Lock()
	// The handler ran outside the lock, so this fences the record only: a
	// request that took the claim over meanwhile ran the handler too.
	stored, done := w.completeLocked(x.key, owner, func() response { return resp })
	w.mu.Unlock()
	if panicked != nil {
		// As without the wrapper: net/http aborts the response.
		panic(panicked)
	}
	if !done {
		return takenOver()
	}
	return stored
}

// passThrough serves x, a request without the key layer, to the handler
// with x's faults: the original request and ResponseWriter unless a fault
// replaces the answer, which needs it recorded.
func (w *Wrapper) passThrough(x *exchange) {
	if w.failBeforeEffect(x) {
		return
	}
	switch x.fault {
	case FaultCommitThenDrop, Fault500AfterEffect:
		resp, panicked := w.run(x.key, x.r)
		if panicked != nil {
			panic(panicked)
		}
		w.respond(x, resp)
	default:
		w.mu.Lock()
		w.countEffectLocked(x.key)
		w.mu.Unlock()
		w.h.ServeHTTP(x.w, x.r)
	}
}

// run counts a run of the handler under key and runs it on r with a
// recorder, returning what it wrote and what it panicked with, if it did.
func (w *Wrapper) run(key string, r *http.Request) (resp response, panicked any) {
	w.mu.Lock()
	w.countEffectLocked(key)
	w.mu.Unlock()
	rec := &recorder{header: make(http.Header)}
	defer func() {
		panicked = recover()
		resp = rec.response()
	}()
	w.h.ServeHTTP(rec, r)
	return resp, nil
}

// EffectsForKey returns how many times the handler ran for requests
// carrying key, on any method: the truth to compare with what a client
// reports.
func (w *Wrapper) EffectsForKey(key string) int { return w.effectsForKey(key) }

// RequestsForKey returns how many requests carrying key reached the
// wrapper: the attempts it saw, as opposed to those the client made.
func (w *Wrapper) RequestsForKey(key string) int { return w.requestsForKey(key) }

// Stats returns a snapshot of the counters. Effects counts every run of
// the handler, since the wrapper cannot tell a read from a write.
func (w *Wrapper) Stats() Stats { return w.snapshot() }

// DialContext dials like Server.DialContext, refusing dials while down
// (SetDown) or when Options.RefuseDial says so. Use it as
// http.Transport.DialContext of the client under test.
func (w *Wrapper) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return w.dialContext(ctx, network, addr)
}

// SetDown refuses every dial through DialContext while down is true.
// Connections already open are not affected.
func (w *Wrapper) SetDown(down bool) { w.down.Store(down) }

// recorder is the ResponseWriter a keyed request's handler writes into: it
// keeps the status, the header fields as they stood when the status was
// written (as net/http sends them) and the body.
type recorder struct {
	header http.Header
	status int         // 0 until written
	sent   http.Header // header at WriteHeader
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }

// WriteHeader records code and the header; later calls are ignored, as
// are 1xx answers, which are not replayed.
func (r *recorder) WriteHeader(code int) {
	if r.status != 0 || (code >= 100 && code < 200) {
		return
	}
	r.status = code
	r.sent = r.header.Clone()
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.WriteHeader(http.StatusOK)
	}
	return r.body.Write(b)
}

// Flush does nothing: the answer is sent whole once the handler returns.
func (r *recorder) Flush() {}

// response is what the handler wrote, as net/http would have sent it: 200
// when it wrote nothing.
func (r *recorder) response() response {
	if r.status == 0 {
		r.WriteHeader(http.StatusOK)
	}
	return response{status: r.status, header: r.sent, body: bytes.Clone(r.body.Bytes())}
}
