package idemtest

import (
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// layer is the key protocol and the fault injection, apart from what they
// guard: Server puts its fixed routes behind it, Wrap a caller's handler.
// A request arrives (arrive), then either goes through the key layer
// (executeKeyed, with a commit step that performs the effect) or is
// executed without one; faults act at the same points on both paths.
type layer struct {
	opts Options       // with defaults filled in; read-only after init
	done chan struct{} // closed by Server.Close to cut FaultDelay sleeps short
	gate pauseGate     // a test's hand on FaultDelay pauses; nil outside tests
	down atomic.Bool

	// mu guards the protocol state, every counter below and the fixed
	// routes' resources. One lock keeps claim, effect and completion atomic
	// with respect to each other, which is the property under test;
	// throughput does not matter here.
	mu               sync.Mutex
	records          map[string]*record
	nextOwner        uint64
	seen             map[string]int // requests that reached a handler, by key
	effectsByKey     map[string]int
	effectsByPayload map[[sha256.Size]byte]int
	stats            Stats
}

// init readies l for opts. It is called once, before any request.
func (l *layer) init(opts Options) {
	l.opts = opts.withDefaults()
	l.done = make(chan struct{})
	l.records = make(map[string]*record)
	l.seen = make(map[string]int)
	l.effectsByKey = make(map[string]int)
	l.effectsByPayload = make(map[[sha256.Size]byte]int)
	l.stats = Stats{Faults: make(map[Fault]int)}
}

// exchange is one request on its way through the pipeline.
type exchange struct {
	w      http.ResponseWriter
	r      *http.Request
	key    string // valid key, or ""
	keyErr error  // why the key header was rejected, if it was
	fault  Fault
	body   []byte // set by readBody
}

// arrive counts the request, parses its key, chooses its fault and applies
// FaultCloseBeforeRead. It returns false when the request is already dealt
// with.
func (l *layer) arrive(w http.ResponseWriter, r *http.Request) (*exchange, bool) {
	x := &exchange{w: w, r: r}
	x.key, x.keyErr = requestKey(r.Header, l.opts.KeyHeader, l.opts.SFStringOnly)

	l.mu.Lock()
	l.stats.Requests++
	seen := 0
	if x.key != "" {
		seen = l.seen[x.key]
		l.seen[x.key]++
	}
	l.mu.Unlock()

	if l.opts.Faults != nil {
		x.fault = l.opts.Faults(r, x.key, seen)
	}
	if x.fault != FaultNone {
		l.mu.Lock()
		l.stats.Faults[x.fault]++
		l.mu.Unlock()
	}
	if x.fault == FaultCloseBeforeRead {
		drop(w)
		return nil, false
	}
	return x, true
}

// readBody reads x's body, up to Options.MaxBody, into x.body. It returns
// false when the request is already dealt with.
func (l *layer) readBody(x *exchange) bool {
	body, err := io.ReadAll(http.MaxBytesReader(x.w, x.r.Body, l.opts.MaxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(x.w, http.StatusRequestEntityTooLarge, "request body too large")
		}
		// Otherwise the client went away mid-body: nobody to answer.
		return false
	}
	x.body = body
	return true
}

// commitFunc performs the effect of x, whose request owns its key's claim
// under owner, completes the record and returns the response to send.
type commitFunc func(x *exchange, owner uint64) response

// executeKeyed runs x, which carries a valid key and a read body, through
// claim, effect and completion; commit performs the effect when x owns
// the claim.
func (l *layer) executeKeyed(x *exchange, commit commitFunc) {
	fp := fingerprint(x.r.Method, x.r.URL.Path, x.body)
	l.mu.Lock()
	c := l.claimLocked(x.key, fp, l.opts.Now())
	l.mu.Unlock()

	if l.failBeforeEffect(x) {
		if c.kind == claimOwned {
			l.release(x.key, c.owner)
		}
		return
	}

	var resp response
	switch c.kind {
	case claimOwned:
		resp = commit(x, c.owner)
	case claimReplay:
		resp = c.resp
	case claimBusy:
		resp = errorResponse(http.StatusConflict, "a request with this key is in progress")
	case claimMismatch:
		resp = errorResponse(http.StatusUnprocessableEntity, "idempotency key reused with a different payload")
	}
	l.respond(x, resp)
}

// fenced returns the commit step of an effect that runs under l.mu: the
// effect is applied and the record completed in one step, only if the
// request still owns the claim, so an overtaken request applies nothing.
func (l *layer) fenced(effect func(*exchange) response) commitFunc {
	return func(x *exchange, owner uint64) response {
		l.mu.Lock()
		resp, done := l.completeLocked(x.key, owner, func() response { return effect(x) })
		l.mu.Unlock()
		if !done {
			return takenOver()
		}
		return resp
	}
}

// takenOver is the answer to a request whose claim another request took
// over after its lease expired.
func takenOver() response {
	return errorResponse(http.StatusConflict, "idempotency key claim was taken over by another request")
}

// release deletes key's claim if owner still holds it.
func (l *layer) release(key string, owner uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.releaseLocked(key, owner)
}

// execute runs x without a key layer, the effect under l.mu: there is no
// claim, and "commit" means performing the effect.
func (l *layer) execute(x *exchange, effect func(*exchange) response) {
	if l.failBeforeEffect(x) {
		return
	}
	l.mu.Lock()
	resp := effect(x)
	l.mu.Unlock()
	l.respond(x, resp)
}

// failBeforeEffect acts on x's pre-effect fault, if it has one, and reports
// whether x was answered instead of going on to the effect: always for
// Fault503 and Fault429, and for FaultDelay when Close cut the delay short.
func (l *layer) failBeforeEffect(x *exchange) bool {
	var status int
	switch x.fault {
	case Fault503:
		status = http.StatusServiceUnavailable
	case Fault429:
		status = http.StatusTooManyRequests
	case FaultDelay:
		if l.pause() {
			return false
		}
		writeError(x.w, http.StatusServiceUnavailable, "server shutting down")
		return true
	default:
		return false
	}
	if v := l.opts.retryAfter(x.fault); v != "" {
		x.w.Header().Set("Retry-After", v)
	}
	writeError(x.w, status, http.StatusText(status))
	return true
}

// pause sleeps Options.Delay in real time, returning false if Close cut it
// short.
func (l *layer) pause() bool {
	if l.gate != nil {
		return l.gate.pause(l.done)
	}
	t := time.NewTimer(l.opts.Delay)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-l.done:
		return false
	}
}

// respond writes resp, unless x's fault replaces it after the commit.
func (l *layer) respond(x *exchange, resp response) {
	switch x.fault {
	case FaultCommitThenDrop:
		drop(x.w)
		return
	case Fault500AfterEffect:
		writeError(x.w, http.StatusInternalServerError, http.StatusText(http.StatusInternalServerError))
		return
	}
	writeResponse(x.w, resp)
}

// badRequest answers 400 for a missing or invalid key.
func (l *layer) badRequest(w http.ResponseWriter, err error) {
	l.mu.Lock()
	l.stats.BadRequests++
	l.mu.Unlock()
	writeError(w, http.StatusBadRequest, err.Error())
}

// dialContext is Server.DialContext and Wrapper.DialContext.
func (l *layer) dialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	if l.down.Load() || (l.opts.RefuseDial != nil && l.opts.RefuseDial()) {
		l.mu.Lock()
		l.stats.Refused++
		l.mu.Unlock()
		// Built rather than provoked by dialing a closed port: no race
		// with another process taking the port, and the same on every OS.
		return nil, &net.OpError{
			Op:   "dial",
			Net:  network,
			Addr: dialAddr{network: network, addr: addr},
			Err:  os.NewSyscallError("connect", syscall.ECONNREFUSED),
		}
	}
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}

// dialAddr is the net.Addr of a refused dial, named as the caller wrote it
// so no name resolution happens.
type dialAddr struct{ network, addr string }

func (a dialAddr) Network() string { return a.network }
func (a dialAddr) String() string  { return a.addr }

// snapshot returns a copy of the counters.
func (l *layer) snapshot() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.stats
	st.Faults = maps.Clone(l.stats.Faults)
	return st
}

// effectsForKey returns how many effects requests carrying key applied.
func (l *layer) effectsForKey(key string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.effectsByKey[key]
}

// requestsForKey returns how many requests carrying key reached a handler.
func (l *layer) requestsForKey(key string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seen[key]
}
