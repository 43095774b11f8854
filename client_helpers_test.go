package idem

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeClock records sleeps instead of sleeping; tests stay exact and fast.
// Its timers run on real time, as attempt timeouts against a real server
// must, and are recorded so that a test may also fire one itself (fireTimers).
type fakeClock struct {
	mu     sync.Mutex // guards now, sleeps and timers
	now    time.Time
	sleeps []time.Duration
	timers []func()
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sleeps = append(c.sleeps, d)
	c.now = c.now.Add(d)
	return nil
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) stopper {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.timers = append(c.timers, f)
	return time.AfterFunc(d, f)
}

// fireTimers runs the function of every timer started so far, as if each had
// expired now, whether or not it was stopped: what a timer that fires late,
// after its Stop lost the race, does.
func (c *fakeClock) fireTimers() int {
	c.mu.Lock()
	fs := append([]func(){}, c.timers...)
	c.mu.Unlock()
	for _, f := range fs {
		f()
	}
	return len(fs)
}

// fireStarted waits until n timers have been started, then fires them all
// (fireTimers). A timer another goroutine starts may come after the event a
// test waited for: the hedge's is started once the first request has been
// launched, and that request may reach the server first.
func (c *fakeClock) fireStarted(t *testing.T, n int) int {
	t.Helper()
	require.Eventually(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.timers) >= n
	}, 10*time.Second, time.Millisecond, "%d timers never started", n)
	return c.fireTimers()
}

func (c *fakeClock) Sleeps() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.sleeps...)
}

// step is what the scripted server does with one request.
type step struct {
	status int
	header http.Header
	body   string
	hangup bool          // read the request, then close the connection without answering
	delay  time.Duration // sleep before answering
}

func answer(status int, kv ...string) step {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return step{status: status, header: h}
}

var hangup = step{hangup: true}

// script returns the step of each of xs, in order: a scripted server's
// script for a table whose rows each hold a step.
func script[T any](xs []T, stepOf func(T) step) []step {
	steps := make([]step, len(xs))
	for i, x := range xs {
		steps[i] = stepOf(x)
	}
	return steps
}

// seen is one request as the scripted server saw it.
type seen struct {
	method, key, auth, body string
	header                  http.Header
}

// scripted is a loopback server that answers requests from a script; past
// its end it answers 200.
type scripted struct {
	*httptest.Server
	mu    sync.Mutex // guards steps and reqs
	steps []step
	reqs  []seen
	conns atomic.Int32
}

func newScripted(t *testing.T, steps ...step) *scripted {
	t.Helper()
	s := &scripted{steps: steps}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	s.Start()
	t.Cleanup(s.Close)
	return s
}

func (s *scripted) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.reqs = append(s.reqs, seen{method: r.Method, key: r.Header.Get("Idempotency-Key"), auth: r.Header.Get("Authorization"), body: string(body), header: r.Header.Clone()})
	st := step{status: 200}
	if len(s.steps) > 0 {
		st, s.steps = s.steps[0], s.steps[1:]
	}
	s.mu.Unlock()
	if st.delay > 0 {
		select {
		case <-time.After(st.delay):
		case <-r.Context().Done():
			return
		}
	}
	if st.hangup {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
		return
	}
	for k, vs := range st.header {
		w.Header()[k] = vs
	}
	if st.status == 0 {
		st.status = 200
	}
	w.WriteHeader(st.status)
	io.WriteString(w, st.body)
}

func (s *scripted) Requests() []seen {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]seen(nil), s.reqs...)
}

// refusingDialer refuses the first n dials with ECONNREFUSED, then dials.
type refusingDialer struct {
	left atomic.Int32
	d    net.Dialer
}

func (r *refusingDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	if r.left.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "dial", Net: network, Err: &net.AddrError{Err: syscall.ECONNREFUSED.Error(), Addr: addr}}
	}
	return r.d.DialContext(ctx, network, addr)
}

// httpClient returns a client with its own transport, so that tests do not
// share pooled connections.
func httpClient(t *testing.T, dial func(context.Context, string, string) (net.Conn, error)) *http.Client {
	t.Helper()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if dial != nil {
		tr.DialContext = dial
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// testClient returns a Client on a fake clock with jitter pinned to the
// middle, so waits equal the base schedule.
func testClient(t *testing.T, hc *http.Client) (*Client, *fakeClock) {
	clk := newFakeClock()
	if hc == nil {
		hc = httpClient(t, nil)
	}
	return &Client{HTTPClient: hc, clock: clk, rand: func() float64 { return 0.5 }}, clk
}

// doResult is what Do returned, for a test that runs Do on a goroutine of
// its own.
type doResult struct {
	res *Result
	err error
}

// goDo runs c.Do on in on a goroutine of its own and returns the channel
// its result comes on.
func goDo(c *Client, in *Intent) <-chan doResult {
	done := make(chan doResult, 1)
	go func() {
		res, err := c.Do(context.Background(), in)
		done <- doResult{res, err}
	}()
	return done
}

func mustIntent(t *testing.T, method, url string, body string, opts ...IntentOption) *Intent {
	t.Helper()
	var b []byte
	if body != "" {
		b = []byte(body)
	}
	in, err := NewIntent(method, url, b, opts...)
	if err != nil {
		t.Fatalf("NewIntent: %v", err)
	}
	return in
}

func classes(atts []Attempt) []Class {
	out := make([]Class, len(atts))
	for i, a := range atts {
		out[i] = a.Class
	}
	return out
}

func asError(t *testing.T, err error) *Error {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not an *idem.Error", err, err)
	}
	return e
}

func itoa(n int) string { return strconv.Itoa(n) }

// keyedRoundTrip sends a POST under key k1 to url through tr with a Report,
// closes the response's body and returns the response and the Report.
func keyedRoundTrip(t *testing.T, tr *Transport, url string) (*http.Response, *Report) {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader("x"))
	require.NoError(t, err)
	req.Header.Set("Idempotency-Key", "k1")
	rep := new(Report)
	resp, err := tr.RoundTrip(req.WithContext(WithReport(req.Context(), rep)))
	require.NoError(t, err, "a RoundTripper hands back the last answer")
	resp.Body.Close()
	return resp, rep
}
