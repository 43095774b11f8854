package interop

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
)

// KeyHeader is the request header of draft-ietf-httpapi-idempotency-key-header.
const KeyHeader = "Idempotency-Key"

// ReplayHeader marks a replayed answer. The draft defines no such header;
// DraftServer uses Stripe's spelling, which idem reads.
const ReplayHeader = "Idempotent-Replayed"

// maxRequestBody bounds what DraftServer reads of a request.
const maxRequestBody = 1 << 20

// responsePad pads every success body, so that a fault cutting a response
// after a few hundred bytes cuts it in the body, not in the headers.
const responsePad = 512

// Payment is the request body DraftServer and the fiber tests accept: a
// payment, identified by ID, whose effect is counted in a Ledger.
type Payment struct {
	ID     string `json:"id"`
	Amount int    `json:"amount"`
}

// DraftServer is an http.Handler implementing the server side of the
// Idempotency-Key protocol as draft-ietf-httpapi-idempotency-key-header-06
// writes it, independently of idem (whose own test server lives in an
// internal package and is lenient where this one is strict):
//
//   - POST and PATCH carry the key layer; other methods get 405.
//   - The key is an RFC 8941 sf-string ("..."). A missing key, or one that is
//     not an sf-string, is answered 400: the draft says a field that fails to
//     parse is ignored, and a missing key is a 400.
//   - The fingerprint is SHA-256 over method, path and body. The same key
//     with another fingerprint gets 422.
//   - The first request claims the key; while it runs, a request with the same
//     key gets 409.
//   - A completed request's answer is stored and replayed, with
//     "Idempotent-Replayed: true", to every later request with the key.
//   - A failure before the effect (BeforeEffect returning an error) releases
//     the claim and answers 503, so that a retry executes.
//
// The effect, counted in Ledger, runs to completion whatever happens to the
// client's connection, as a real server's database commit would.
//
// The zero DraftServer is ready to use; it is safe for concurrent use. Its
// records are kept in memory forever: it is a test double, not a store.
type DraftServer struct {
	// BeforeEffect, if not nil, runs after the claim and before the effect
	// for the payment id. An error is a failure before the effect: the claim
	// is released and the answer is 503. It may block, holding the claim.
	BeforeEffect func(id string) error

	// Ledger records arrivals and effects per payment id.
	Ledger Ledger

	mu      sync.Mutex // guards records
	records map[string]*record

	inFlight atomic.Int64
}

// record is the state of one key: claimed while done is false, then the
// stored answer.
type record struct {
	fingerprint [sha256.Size]byte
	done        bool
	status      int
	header      http.Header
	body        []byte
}

// verdict is what a claim found.
type verdict int

const (
	claimed verdict = iota
	busy
	mismatch
	replay
)

// InFlight returns how many requests are being handled now, past reading
// their body. Tests wait for zero before reading the Ledger.
func (s *DraftServer) InFlight() int { return int(s.inFlight.Load()) }

// ServeHTTP implements http.Handler.
func (s *DraftServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost && r.Method != http.MethodPatch {
		w.Header().Set("Allow", "POST, PATCH")
		problem(w, http.StatusMethodNotAllowed, "method not allowed")
		return
	}
	key, ok := parseSFString(r.Header.Values(KeyHeader))
	if !ok {
		problem(w, http.StatusBadRequest, "Idempotency-Key is required, as an sf-string")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRequestBody))
	if err != nil {
		// The request never arrived whole: nothing is claimed, nothing done.
		problem(w, http.StatusBadRequest, "reading the body: "+err.Error())
		return
	}
	var p Payment
	if err := json.Unmarshal(body, &p); err != nil || p.ID == "" {
		problem(w, http.StatusBadRequest, "body must be a payment with an id")
		return
	}
	s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	s.Ledger.Arrive(p.ID)

	fp := sha256.Sum256([]byte(r.Method + "\n" + r.URL.Path + "\n" + string(body)))
	rec, v := s.claim(key, fp)
	switch v {
	case mismatch:
		problem(w, http.StatusUnprocessableEntity, "Idempotency-Key was used with another request")
	case busy:
		problem(w, http.StatusConflict, "a request with this Idempotency-Key is being processed")
	case replay:
		writeStored(w, rec, true)
	case claimed:
		if s.BeforeEffect != nil {
			if err := s.BeforeEffect(p.ID); err != nil {
				s.release(key)
				problem(w, http.StatusServiceUnavailable, err.Error())
				return
			}
		}
		n := s.Ledger.Apply(p.ID)
		out := &record{status: http.StatusCreated, header: http.Header{}}
		out.header.Set("Content-Type", "application/json")
		out.header.Set("Location", "/payments/"+p.ID)
		out.body = fmt.Appendf(nil, `{"id":%q,"amount":%d,"effect":%d,"pad":%q}`,
			p.ID, p.Amount, n, strings.Repeat("x", responsePad))
		s.complete(key, out)
		writeStored(w, out, false)
	}
}

// claim looks key up and claims it when it is free.
func (s *DraftServer) claim(key string, fp [sha256.Size]byte) (*record, verdict) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.records == nil {
		s.records = make(map[string]*record)
	}
	rec, ok := s.records[key]
	switch {
	case !ok:
		s.records[key] = &record{fingerprint: fp}
		return nil, claimed
	case rec.fingerprint != fp:
		return nil, mismatch
	case !rec.done:
		return nil, busy
	}
	return rec, replay
}

// release frees a claim after a failure before the effect.
func (s *DraftServer) release(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rec, ok := s.records[key]; ok && !rec.done {
		delete(s.records, key)
	}
}

// complete stores the answer of a claimed key.
func (s *DraftServer) complete(key string, out *record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec := s.records[key]
	rec.done, rec.status, rec.header, rec.body = true, out.status, out.header, out.body
}

func writeStored(w http.ResponseWriter, rec *record, replayed bool) {
	for name, values := range rec.header {
		w.Header()[name] = append([]string(nil), values...)
	}
	if replayed {
		w.Header().Set(ReplayHeader, "true")
	}
	w.WriteHeader(rec.status)
	_, _ = w.Write(rec.body)
}

// problem answers with an RFC 9457 problem document.
func problem(w http.ResponseWriter, status int, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_, _ = fmt.Fprintf(w, `{"title":%q,"status":%d,"detail":%q}`, http.StatusText(status), status, detail)
}

// parseSFString decodes the single field line of an Idempotency-Key as an
// RFC 8941 sf-string. It reports false for anything else: no line, several
// lines (a list is not an item), a bare token, a bad escape, an empty key, or
// parameters, which the draft does not define.
func parseSFString(lines []string) (string, bool) {
	if len(lines) != 1 {
		return "", false
	}
	v := strings.Trim(lines[0], " ")
	if len(v) < 3 || v[0] != '"' || v[len(v)-1] != '"' {
		return "", false
	}
	var b strings.Builder
	for i := 1; i < len(v)-1; i++ {
		c := v[i]
		switch {
		case c == '\\':
			i++
			if i >= len(v)-1 || (v[i] != '"' && v[i] != '\\') {
				return "", false
			}
			b.WriteByte(v[i])
		case c == '"', c < 0x20, c > 0x7e:
			return "", false
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), true
}
