package idemtest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// exchange is one request on its way through the pipeline.
type exchange struct {
	w      http.ResponseWriter
	r      *http.Request
	key    string // valid key, or ""
	keyErr error  // why the key header was rejected, if it was
	fault  Fault
	body   []byte
}

// routes builds the business routes.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /payments", s.handlePayment)
	mux.HandleFunc("PATCH /payments/{id}", s.handlePayment)
	mux.HandleFunc("PUT /resources/{id}", s.handlePut)
	mux.HandleFunc("DELETE /resources/{id}", s.handleDelete)
	mux.HandleFunc("GET /resources/{id}", s.handleGet)
	return mux
}

// begin counts the request, chooses its fault, applies FaultCloseBeforeRead
// and reads the body. It returns false when the request is already dealt
// with.
func (s *Server) begin(w http.ResponseWriter, r *http.Request) (*exchange, bool) {
	x := &exchange{w: w, r: r}
	x.key, x.keyErr = requestKey(r.Header, s.opts.KeyHeader, s.opts.SFStringOnly)

	s.mu.Lock()
	s.stats.Requests++
	seen := 0
	if x.key != "" {
		seen = s.seen[x.key]
		s.seen[x.key]++
	}
	s.mu.Unlock()

	if s.opts.Faults != nil {
		x.fault = s.opts.Faults(r, x.key, seen)
	}
	if x.fault != FaultNone {
		s.mu.Lock()
		s.stats.Faults[x.fault]++
		s.mu.Unlock()
	}
	if x.fault == FaultCloseBeforeRead {
		drop(w)
		return nil, false
	}

	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusRequestEntityTooLarge, "request body too large")
		}
		// Otherwise the client went away mid-body: nobody to answer.
		return nil, false
	}
	x.body = body
	return x, true
}

// handlePayment serves POST /payments and PATCH /payments/{id}, the routes
// with the idempotency layer.
func (s *Server) handlePayment(w http.ResponseWriter, r *http.Request) {
	x, ok := s.begin(w, r)
	if !ok {
		return
	}
	switch {
	case x.keyErr != nil:
		s.badRequest(w, x.keyErr)
	case x.key != "":
		s.executeKeyed(x, s.paymentLocked)
	case s.opts.RequireKey:
		s.badRequest(w, errKeyRequired)
	default:
		// Without a key every request is a new effect, as on a server
		// that has no idempotency support at all.
		s.execute(x, s.paymentLocked)
	}
}

// paymentLocked records a payment. The caller holds s.mu.
func (s *Server) paymentLocked(x *exchange) response {
	n := s.effectLocked(x.key, x.body)
	return response{
		status:      http.StatusCreated,
		body:        fmt.Appendf(nil, `{"id":"pay_%d","seq":%d}`, n, n),
		contentType: "application/json",
	}
}

// executeKeyed runs x through claim, effect and completion.
func (s *Server) executeKeyed(x *exchange, effect func(*exchange) response) {
	fp := fingerprint(x.r.Method, x.r.URL.Path, x.body)
	s.mu.Lock()
	c := s.claimLocked(x.key, fp, s.opts.Now())
	s.mu.Unlock()

	if s.failBeforeEffect(x) {
		if c.kind == claimOwned {
			s.mu.Lock()
			s.releaseLocked(x.key, c.owner)
			s.mu.Unlock()
		}
		return
	}

	var resp response
	switch c.kind {
	case claimOwned:
		s.mu.Lock()
		var done bool
		resp, done = s.completeLocked(x.key, c.owner, func() response { return effect(x) })
		s.mu.Unlock()
		if !done {
			resp = errorResponse(http.StatusConflict, "idempotency key claim was taken over by another request")
		}
	case claimReplay:
		resp = c.resp
	case claimBusy:
		resp = errorResponse(http.StatusConflict, "a request with this key is in progress")
	case claimMismatch:
		resp = errorResponse(http.StatusUnprocessableEntity, "idempotency key reused with a different payload")
	}
	s.respond(x, resp)
}

// execute runs x on a route without a key layer: there is no claim, and
// "commit" means performing the effect.
func (s *Server) execute(x *exchange, effect func(*exchange) response) {
	if s.failBeforeEffect(x) {
		return
	}
	s.mu.Lock()
	resp := effect(x)
	s.mu.Unlock()
	s.respond(x, resp)
}

// failBeforeEffect acts on x's pre-effect fault, if it has one, and reports
// whether x was answered instead of going on to the effect: always for
// Fault503 and Fault429, and for FaultDelay when Close cut the delay short.
func (s *Server) failBeforeEffect(x *exchange) bool {
	var status int
	switch x.fault {
	case Fault503:
		status = http.StatusServiceUnavailable
	case Fault429:
		status = http.StatusTooManyRequests
	case FaultDelay:
		if s.pause() {
			return false
		}
		writeError(x.w, http.StatusServiceUnavailable, "server shutting down")
		return true
	default:
		return false
	}
	if v := s.opts.retryAfter(x.fault); v != "" {
		x.w.Header().Set("Retry-After", v)
	}
	writeError(x.w, status, http.StatusText(status))
	return true
}

// pause sleeps Options.Delay in real time, returning false if Close cut it
// short.
func (s *Server) pause() bool {
	if s.gate != nil {
		return s.gate.pause(s.done)
	}
	t := time.NewTimer(s.opts.Delay)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.done:
		return false
	}
}

// respond writes resp, unless x's fault replaces it after the commit.
func (s *Server) respond(x *exchange, resp response) {
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

// handlePut stores the body as the resource: naturally idempotent, so no
// key layer, but every write counts as an effect.
func (s *Server) handlePut(w http.ResponseWriter, r *http.Request) {
	x, ok := s.begin(w, r)
	if !ok {
		return
	}
	s.execute(x, func(x *exchange) response {
		id := x.r.PathValue("id")
		_, existed := s.resources[id]
		s.resources[id] = resource{body: x.body, contentType: x.r.Header.Get("Content-Type")}
		n := s.effectLocked(x.key, x.body)
		status := http.StatusOK
		if !existed {
			status = http.StatusCreated
		}
		body, _ := json.Marshal(struct {
			ID  string `json:"id"`
			Seq int    `json:"seq"`
		}{id, n})
		return response{status: status, body: body, contentType: "application/json"}
	})
}

// handleDelete removes the resource; only a removal counts as an effect.
func (s *Server) handleDelete(w http.ResponseWriter, r *http.Request) {
	x, ok := s.begin(w, r)
	if !ok {
		return
	}
	s.execute(x, func(x *exchange) response {
		id := x.r.PathValue("id")
		if _, ok := s.resources[id]; !ok {
			return errorResponse(http.StatusNotFound, "not found")
		}
		delete(s.resources, id)
		s.effectLocked(x.key, x.body)
		return response{status: http.StatusNoContent}
	})
}

// handleGet returns the stored resource. Faults still apply, so a read can
// be made to fail too.
func (s *Server) handleGet(w http.ResponseWriter, r *http.Request) {
	x, ok := s.begin(w, r)
	if !ok {
		return
	}
	s.execute(x, func(x *exchange) response {
		res, ok := s.resources[x.r.PathValue("id")]
		if !ok {
			return errorResponse(http.StatusNotFound, "not found")
		}
		return response{status: http.StatusOK, body: res.body, contentType: res.contentType}
	})
}

// badRequest answers 400 for a missing or invalid key.
func (s *Server) badRequest(w http.ResponseWriter, err error) {
	s.mu.Lock()
	s.stats.BadRequests++
	s.mu.Unlock()
	writeError(w, http.StatusBadRequest, err.Error())
}

// errorResponse is a JSON error answer, {"error":"msg"}.
func errorResponse(status int, msg string) response {
	body, _ := json.Marshal(struct {
		Error string `json:"error"`
	}{msg})
	return response{status: status, body: body, contentType: "application/json"}
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeResponse(w, errorResponse(status, msg))
}

func writeResponse(w http.ResponseWriter, resp response) {
	h := w.Header()
	if resp.contentType != "" {
		h.Set("Content-Type", resp.contentType)
	}
	if resp.replayed {
		h.Set("Idempotent-Replayed", "true")
	}
	w.WriteHeader(resp.status)
	_, _ = w.Write(resp.body)
}

// drop closes the connection without writing a response. Hijacking closes
// it at once; where that is impossible, http.ErrAbortHandler makes the
// server abort the response, which is the closest equivalent.
func drop(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic(http.ErrAbortHandler)
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	_ = conn.Close()
}
