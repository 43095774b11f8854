package idemtest

import (
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"sync"
	"time"
)

// Server is an in-memory Idempotency-Key server with fault injection.
// Create one with New; call Start to serve on loopback, or use Handler in
// process. Most tests want Start, a client dialing through DialContext
// (Client gives one), and EffectsForKey or Stats to check what happened.
// A Server is safe for concurrent use.
type Server struct {
	layer
	handler   http.Handler
	resources map[string]resource // guarded by layer.mu, with the records

	// lifeMu guards the listener lifecycle.
	lifeMu    sync.Mutex
	srv       *http.Server
	url       string
	closed    bool
	closeOnce sync.Once
}

// resource is the stored representation of /resources/{id}.
type resource struct {
	body        []byte
	contentType string
}

// Stats is a snapshot of the counters of a Server or a Wrapper.
type Stats struct {
	// Requests counts HTTP requests that reached a handler, including
	// those a fault then cut short.
	Requests int
	// Effects counts business effects applied, on every route; for a
	// Wrapper, every run of its handler.
	Effects int
	// Replays counts stored responses replayed for a completed key.
	Replays int
	// Conflicts counts 409 answers for a key whose claim was live. Fenced
	// completions are counted in Fenced, not here.
	Conflicts int
	// Mismatches counts 422 answers for a key reused with another payload.
	Mismatches int
	// Fenced counts completions refused because another request had taken
	// the claim over; they got 409. Their effect was not applied, except
	// under a Wrapper whose handler was already running when overtaken.
	Fenced int
	// Released counts claims deleted by a failure before the effect, and
	// under a Wrapper with ReleaseServerErrors by a 5xx or a panic.
	Released int
	// BadRequests counts 400 answers for a missing or invalid key.
	BadRequests int
	// Refused counts dials refused by DialContext.
	Refused int
	// Faults counts the faults Options.Faults chose, by kind; FaultNone
	// is not counted. A request answered 400 or 413 before its fault's
	// point still counts, though the fault never acted.
	Faults map[Fault]int
}

// New returns a Server configured by opts. It does not listen until Start.
func New(opts Options) *Server {
	s := &Server{resources: make(map[string]resource)}
	s.init(opts)
	s.handler = s.routes()
	return s
}

// Start listens on 127.0.0.1 on a free port and serves in the background
// until Close. It fails if the server was started or closed before.
func (s *Server) Start() error {
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	switch {
	case s.closed:
		return errors.New("idemtest: Start after Close")
	case s.srv != nil:
		return errors.New("idemtest: already started")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	s.srv = &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		// Hijacked and aborted connections make net/http log; faults are
		// deliberate, so stay silent.
		ErrorLog: log.New(io.Discard, "", 0),
	}
	s.url = "http://" + ln.Addr().String()
	go s.srv.Serve(ln) // returns ErrServerClosed after Close: nothing to report
	return nil
}

// URL returns the base URL, such as "http://127.0.0.1:41234", or "" before
// Start.
func (s *Server) URL() string {
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	return s.url
}

// Close stops serving: FaultDelay sleeps end early (their claims are
// released), and Close waits up to five seconds for handlers to return
// before closing every connection. It may be called more than once.
func (s *Server) Close() {
	s.closeOnce.Do(func() { close(s.done) })
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	s.closed = true
	if s.srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.srv.Shutdown(ctx) // waits for handlers; a timeout is settled by Close
	_ = s.srv.Close()
	s.srv = nil
}

// Handler returns the server's handler, for in-process use without a
// listener. Faults that drop the connection need a hijackable
// ResponseWriter; without one they panic with http.ErrAbortHandler.
func (s *Server) Handler() http.Handler { return s.handler }

// Client returns a new client whose transport dials through DialContext, so
// RefuseDial and SetDown apply to it. Each call makes a new transport; call
// CloseIdleConnections on it when done.
func (s *Server) Client() *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext:         s.DialContext,
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     30 * time.Second,
	}}
}

// DialContext dials like net.Dialer, unless the server is down (SetDown) or
// Options.RefuseDial returns true: then it returns the error a refused
// connection gives, a *net.OpError with Op "dial" for which
// errors.Is(err, syscall.ECONNREFUSED) holds. Use it as
// http.Transport.DialContext. RefuseDial is not consulted while down.
func (s *Server) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return s.dialContext(ctx, network, addr)
}

// SetDown takes the server offline (true) or back online (false) for
// clients dialing through DialContext: while down, every dial is refused.
// Connections already open are not affected.
func (s *Server) SetDown(down bool) { s.down.Store(down) }

// Stats returns a snapshot of the counters.
func (s *Server) Stats() Stats { return s.snapshot() }

// EffectsForKey returns how many effects requests carrying key applied, on
// any route.
func (s *Server) EffectsForKey(key string) int { return s.effectsForKey(key) }

// EffectsForPayload returns how many effects were applied by requests whose
// body was exactly body.
func (s *Server) EffectsForPayload(body []byte) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.effectsByPayload[sha256.Sum256(body)]
}

// TotalEffects returns how many effects were applied on all routes.
func (s *Server) TotalEffects() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats.Effects
}

// Requests returns how many HTTP requests reached a handler.
func (s *Server) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats.Requests
}

// RequestsForKey returns how many requests carrying key reached a handler:
// the attempts the server saw, as opposed to those the client made.
func (s *Server) RequestsForKey(key string) int { return s.requestsForKey(key) }
