package idemtest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
)

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

// begin takes a request to a fixed route as far as its effect: arrival
// and the body. It returns false when the request is already dealt with.
func (s *Server) begin(w http.ResponseWriter, r *http.Request) (*exchange, bool) {
	x, ok := s.arrive(w, r)
	if !ok || !s.readBody(x) {
		return nil, false
	}
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
		s.executeKeyed(x, s.fenced(s.paymentLocked))
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

// errorResponse is a JSON error answer, {"error":"msg"}.
func errorResponse(status int, msg string) response {
	body, _ := json.Marshal(struct {
		Error string `json:"error"`
	}{msg})
	return response{status: status, body: body, contentType: "application/json"}
}

// writeError writes errorResponse(status, msg) to w.
func writeError(w http.ResponseWriter, status int, msg string) {
	writeResponse(w, errorResponse(status, msg))
}

// writeResponse writes resp to w: the fields a wrapped handler set, then
// Content-Type and the replay mark.
func writeResponse(w http.ResponseWriter, resp response) {
	h := w.Header()
	for name, values := range resp.header {
		h[name] = slices.Clone(values)
	}
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
