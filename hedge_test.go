package idem

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hedgeServer holds the first request it gets until that request's context
// ends, and answers "second" to every later one at once.
type hedgeServer struct {
	*httptest.Server
	first     chan struct{} // closed as the first request arrives
	cancelled chan struct{} // closed as the first request's context ends
	n         atomic.Int32
	mu        sync.Mutex // guards bodies
	bodies    []string
}

func newHedgeServer(t *testing.T) *hedgeServer {
	t.Helper()
	h := &hedgeServer{first: make(chan struct{}), cancelled: make(chan struct{})}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		h.bodies = append(h.bodies, string(body))
		h.mu.Unlock()
		if h.n.Add(1) == 1 {
			close(h.first)
			<-r.Context().Done()
			close(h.cancelled)
			return
		}
		io.WriteString(w, "second")
	}))
	t.Cleanup(h.Close) // waits for every handler to return
	return h
}

func (h *hedgeServer) Bodies() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.bodies...)
}

// countingRT counts the requests handed to its base: every request the
// Client or Transport sent, a hedge included.
type countingRT struct {
	base http.RoundTripper
	n    atomic.Int32
}

func (c *countingRT) RoundTrip(req *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.base.RoundTrip(req)
}

// called is what one call through a Client or a Transport gave back.
type called struct {
	status   int
	body     string
	attempts []Attempt
	err      error
}

// hedgeCaller sends one request through a Client (Do) or a Transport
// (RoundTrip) under policy p, on a fake clock, over base.
type hedgeCaller struct {
	name string
	make func(t *testing.T, base http.RoundTripper, p Policy) (send func(ctx context.Context, method, url, body, key string) called, clk *fakeClock, stats func() Stats)
}

var hedgeCallers = []hedgeCaller{
	{"Client", func(t *testing.T, base http.RoundTripper, p Policy) (func(context.Context, string, string, string, string) called, *fakeClock, func() Stats) {
		c, clk := testClient(t, &http.Client{Transport: base})
		c.Policy = p
		send := func(ctx context.Context, method, url, body, key string) called {
			var opts []IntentOption
			if key != "" {
				opts = append(opts, WithKey(key))
			}
			res, err := c.Do(ctx, mustIntent(t, method, url, body, opts...))
			if err != nil {
				var e *Error
				errors.As(err, &e)
				var atts []Attempt
				if e != nil {
					atts = e.Attempts
				}
				return called{attempts: atts, err: err}
			}
			defer res.Response.Body.Close()
			b, err := io.ReadAll(res.Response.Body)
			return called{status: res.Response.StatusCode, body: string(b), attempts: res.Attempts, err: err}
		}
		return send, clk, c.Stats
	}},
	{"Transport", func(t *testing.T, base http.RoundTripper, p Policy) (func(context.Context, string, string, string, string) called, *fakeClock, func() Stats) {
		clk := newFakeClock()
		tr := &Transport{Base: base, Policy: p, clock: clk, rand: func() float64 { return 0.5 }}
		hc := &http.Client{Transport: tr}
		send := func(ctx context.Context, method, url, body, key string) called {
			var rep Report
			var rd io.Reader
			if body != "" {
				rd = strings.NewReader(body) // NewRequest gives it a GetBody
			}
			req, err := http.NewRequestWithContext(WithReport(ctx, &rep), method, url, rd)
			require.NoError(t, err)
			if key != "" {
				req.Header.Set("Idempotency-Key", key)
			}
			resp, err := hc.Do(req)
			if err != nil {
				return called{attempts: rep.Attempts, err: err}
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			return called{status: resp.StatusCode, body: string(b), attempts: rep.Attempts, err: err}
		}
		return send, clk, tr.Stats
	}},
}

// await fails the test if ch is not closed soon: a bound on a wait for a
// signal, not a synchronisation.
func await(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// recv receives from ch, or fails the test if nothing comes soon.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// TestHedgeAnswersWhenFirstHangs: a safe request without an answer after
// HedgeAfter is hedged; the hedge's answer is the attempt's, one Attempt
// in the trail, and the first request is cancelled at the server. A
// QUERY's body goes out with both requests.
func TestHedgeAnswersWhenFirstHangs(t *testing.T) {
	for _, caller := range hedgeCallers {
		for _, tc := range []struct{ method, body string }{{"GET", ""}, {"QUERY", "q=1"}} {
			t.Run(caller.name+" "+tc.method, func(t *testing.T) {
				srv := newHedgeServer(t)
				cnt := &countingRT{base: httpClient(t, nil).Transport}
				send, clk, stats := caller.make(t, cnt, Policy{HedgeAfter: time.Hour})
				done := make(chan called, 1)
				go func() { done <- send(t.Context(), tc.method, srv.URL, tc.body, "") }()
				await(t, srv.first, "the first request")
				require.Equal(t, 1, clk.fireStarted(t, 1), "one timer: the hedge's")
				got := recv(t, done, "the answer")
				require.NoError(t, got.err)
				assert.Equal(t, 200, got.status)
				assert.Equal(t, "second", got.body, "the hedge's answer, read whole")
				require.Len(t, got.attempts, 1, "a hedge is part of its attempt")
				assert.True(t, got.attempts[0].Wire.Hedged, "Wire.Hedged")
				assert.True(t, got.attempts[0].Wire.GotResponse)
				await(t, srv.cancelled, "the first request's cancellation at the server")
				assert.Equal(t, int32(2), cnt.n.Load(), "requests sent")
				assert.Equal(t, uint64(2), stats().Requests, "Stats.Requests counts the hedge")
				assert.Equal(t, []string{tc.body, tc.body}, srv.Bodies(), "both requests carry the body")
			})
		}
	}
}

// TestHedgeNotNeeded: an answer before HedgeAfter leaves a single request,
// even when the hedge's timer fires late, after the attempt.
func TestHedgeNotNeeded(t *testing.T) {
	for _, caller := range hedgeCallers {
		t.Run(caller.name, func(t *testing.T) {
			srv := newScripted(t, answer(200))
			cnt := &countingRT{base: httpClient(t, nil).Transport}
			send, clk, stats := caller.make(t, cnt, Policy{HedgeAfter: time.Hour})
			got := send(context.Background(), "GET", srv.URL, "", "")
			require.NoError(t, got.err)
			require.Len(t, got.attempts, 1)
			assert.False(t, got.attempts[0].Wire.Hedged)
			assert.Equal(t, 1, clk.fireTimers(), "the hedge's timer, stopped, fires late")
			assert.Equal(t, int32(1), cnt.n.Load(), "requests sent")
			assert.Equal(t, uint64(1), stats().Requests)
			assert.Len(t, srv.Requests(), 1)
		})
	}
}

// TestHedgeNeverForWrites: a write, keyed or not, is never hedged, however
// long it waits for its answer: a hedge due at once and a fired timer send
// nothing more while the first request hangs until the context ends.
func TestHedgeNeverForWrites(t *testing.T) {
	for _, caller := range hedgeCallers {
		for _, method := range []string{"POST", "PUT", "DELETE", "PATCH"} {
			for _, key := range []string{"", "k-1"} {
				name := caller.name + " " + method + " keyless"
				if key != "" {
					name = caller.name + " " + method + " keyed"
				}
				t.Run(name, func(t *testing.T) {
					srv := newHedgeServer(t)
					cnt := &countingRT{base: httpClient(t, nil).Transport}
					send, clk, _ := caller.make(t, cnt, Policy{HedgeAfter: time.Nanosecond, MaxAttempts: 1})
					ctx, cancel := context.WithCancel(t.Context())
					defer cancel()
					done := make(chan called, 1)
					go func() { done <- send(ctx, method, srv.URL, "x", key) }()
					await(t, srv.first, "the first request")
					assert.Equal(t, 0, clk.fireTimers(), "no hedge timer")
					cancel()
					got := recv(t, done, "the answer")
					require.Error(t, got.err)
					await(t, srv.cancelled, "the request's end at the server")
					assert.Equal(t, int32(1), cnt.n.Load(), "requests sent")
					require.Len(t, got.attempts, 1)
					assert.False(t, got.attempts[0].Wire.Hedged)
				})
			}
		}
	}
}

// TestHedgeFirstFailsFast: a first request that fails before HedgeAfter
// (a refused connection) ends its attempt at once, without a hedge; the
// retry rule sends the next attempt.
func TestHedgeFirstFailsFast(t *testing.T) {
	srv := newScripted(t, answer(200))
	dial := &refusingDialer{}
	dial.left.Store(1)
	cnt := &countingRT{base: httpClient(t, dial.DialContext).Transport}
	send, _, _ := hedgeCallers[0].make(t, cnt, Policy{HedgeAfter: time.Hour})
	done := make(chan called, 1)
	go func() { done <- send(t.Context(), "GET", srv.URL, "", "") }()
	got := recv(t, done, "the answer, before the hedge is due")
	require.NoError(t, got.err)
	require.Len(t, got.attempts, 2)
	assert.Equal(t, ClassNeverSent, got.attempts[0].Class)
	assert.False(t, got.attempts[0].Wire.Hedged, "no hedge after a fast failure")
	assert.Equal(t, int32(2), cnt.n.Load(), "one request per attempt")
}

// scriptRT runs one function per request, in order of arrival.
type scriptRT struct {
	mu      sync.Mutex // guards scripts and ctxs
	scripts []func(*http.Request) (*http.Response, error)
	ctxs    []context.Context // each request's context, in order of arrival
	entered chan struct{}     // receives as each request arrives
}

func (s *scriptRT) RoundTrip(req *http.Request) (*http.Response, error) {
	s.mu.Lock()
	f := s.scripts[0]
	s.scripts = s.scripts[1:]
	s.ctxs = append(s.ctxs, req.Context())
	s.mu.Unlock()
	s.entered <- struct{}{}
	return f(req)
}

func (s *scriptRT) ctx(i int) context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ctxs[i]
}

func okResponse(req *http.Request, body io.ReadCloser) *http.Response {
	return &http.Response{StatusCode: 200, Header: http.Header{}, Body: body, Request: req}
}

// TestHedgeFailureWaitsForTheOther: once both requests are out, a failure
// of one waits for the other, whose answer is the attempt's; when both
// fail, the first failure is the attempt's error.
func TestHedgeFailureWaitsForTheOther(t *testing.T) {
	errFirst, errHedge := errors.New("first failed"), errors.New("hedge failed")
	for _, tc := range []struct {
		name     string
		firstErr error
		wantErr  error
	}{
		{"the first answers", nil, nil},
		{"both fail", errFirst, errHedge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			release := make(chan struct{})
			rt := &scriptRT{entered: make(chan struct{}, 2), scripts: []func(*http.Request) (*http.Response, error){
				func(req *http.Request) (*http.Response, error) {
					select { // the test's end frees it if no hedge came
					case <-release:
					case <-t.Context().Done():
					}
					if tc.firstErr != nil {
						return nil, tc.firstErr
					}
					return okResponse(req, io.NopCloser(strings.NewReader("first"))), nil
				},
				func(*http.Request) (*http.Response, error) { return nil, errHedge },
			}}
			send, clk, _ := hedgeCallers[0].make(t, rt, Policy{HedgeAfter: time.Hour, MaxAttempts: 1})
			done := make(chan called, 1)
			go func() { done <- send(t.Context(), "GET", "http://127.0.0.1:1/r", "", "") }()
			recv(t, rt.entered, "the first request")
			clk.fireStarted(t, 1)
			recv(t, rt.entered, "the hedge")
			// The run cancels a failed request's context once it has taken
			// its failure: only then may the first fail, after it.
			await(t, rt.ctx(1).Done(), "the run taking the hedge's failure")
			close(release)
			got := recv(t, done, "the answer")
			if tc.wantErr == nil {
				require.NoError(t, got.err)
				assert.Equal(t, "first", got.body)
			} else {
				assert.ErrorIs(t, got.err, tc.wantErr, "the first failure in time")
			}
			require.Len(t, got.attempts, 1)
			assert.True(t, got.attempts[0].Wire.Hedged)
		})
	}
}

// closeSignal is a body that says when it is closed.
type closeSignal struct {
	io.Reader
	closed chan struct{}
	once   sync.Once
}

func (c *closeSignal) Close() error {
	c.once.Do(func() { close(c.closed) })
	return nil
}

// TestHedgeLoserClosed: the request that loses is cancelled, and its
// response, when it comes after all, is closed; the winner's context lives
// until its body is closed.
func TestHedgeLoserClosed(t *testing.T) {
	release := make(chan struct{})
	loser := &closeSignal{Reader: strings.NewReader("late"), closed: make(chan struct{})}
	rt := &scriptRT{entered: make(chan struct{}, 2), scripts: []func(*http.Request) (*http.Response, error){
		func(req *http.Request) (*http.Response, error) {
			select { // a RoundTripper that answers after its cancellation
			case <-release:
			case <-t.Context().Done(): // the test's end, if no hedge came
			}
			return okResponse(req, loser), nil
		},
		func(req *http.Request) (*http.Response, error) {
			return okResponse(req, io.NopCloser(strings.NewReader("second"))), nil
		},
	}}
	c, clk := testClient(t, &http.Client{Transport: rt})
	c.Policy.HedgeAfter = time.Hour
	type result struct {
		res *Result
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := c.Do(t.Context(), mustIntent(t, "GET", "http://127.0.0.1:1/r", ""))
		done <- result{res, err}
	}()
	recv(t, rt.entered, "the first request")
	clk.fireStarted(t, 1)
	recv(t, rt.entered, "the hedge")
	got := recv(t, done, "the answer")
	require.NoError(t, got.err)
	loserCtx, winnerCtx := rt.ctx(0), rt.ctx(1)
	assert.ErrorIs(t, loserCtx.Err(), context.Canceled, "the loser is cancelled")
	assert.NoError(t, winnerCtx.Err(), "the winner's context lives while its body is read")
	b, err := io.ReadAll(got.res.Response.Body)
	require.NoError(t, err)
	assert.Equal(t, "second", string(b))
	require.NoError(t, got.res.Response.Body.Close())
	assert.ErrorIs(t, winnerCtx.Err(), context.Canceled, "closing the body ends the winner's context")
	close(release)
	await(t, loser.closed, "the loser's body closed")
}

// TestHedgeEndsWithContext: both requests of a hedged attempt end with the
// operation's context.
func TestHedgeEndsWithContext(t *testing.T) {
	var ended sync.WaitGroup
	arrived := make(chan struct{}, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-r.Context().Done()
		ended.Done()
	}))
	t.Cleanup(srv.Close)
	ended.Add(2)
	c, clk := testClient(t, nil)
	c.Policy = Policy{HedgeAfter: time.Hour, MaxAttempts: 1}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := c.Do(ctx, mustIntent(t, "GET", srv.URL, ""))
		done <- err
	}()
	recv(t, arrived, "the first request")
	clk.fireStarted(t, 1)
	recv(t, arrived, "the hedge")
	cancel()
	err := recv(t, done, "the end")
	assert.ErrorIs(t, err, context.Canceled)
	ended.Wait() // both handlers saw their request end
}

// TestHedgeAfterNegative: a negative HedgeAfter is an invalid policy,
// named, for a Client and a Transport alike.
func TestHedgeAfterNegative(t *testing.T) {
	p := Policy{HedgeAfter: -time.Millisecond}
	c := &Client{Policy: p}
	_, err := c.Do(context.Background(), mustIntent(t, "GET", "http://127.0.0.1:1/", ""))
	assert.ErrorIs(t, err, ErrInvalidPolicy)
	assert.ErrorContains(t, err, "HedgeAfter is negative")
	req, _ := http.NewRequest("GET", "http://127.0.0.1:1/", nil)
	_, err = (&Transport{Policy: p}).RoundTrip(req)
	assert.ErrorIs(t, err, ErrInvalidPolicy)
	assert.ErrorContains(t, err, "HedgeAfter is negative")
}

// BenchmarkHedgedGET sends 2,000 GETs one after another to a server whose
// every 100th answer is 200 ms late, without a hedge and with HedgeAfter
// 20 ms, and reports the 99th percentile latency (the 1,981st of 2,000,
// the first of the slowest 1%), the slowest, and the hedges per request.
// Run with -benchtime=1x: one op is the 2,000 requests.
func BenchmarkHedgedGET(b *testing.B) {
	const n = 2000
	for _, hedge := range []time.Duration{0, 20 * time.Millisecond} {
		name := "off"
		if hedge > 0 {
			name = hedge.String()
		}
		b.Run(name, func(b *testing.B) {
			var arrivals atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if arrivals.Add(1)%100 == 0 {
					select {
					case <-time.After(200 * time.Millisecond):
					case <-r.Context().Done():
						return
					}
				}
				io.WriteString(w, "ok")
			}))
			b.Cleanup(srv.Close)
			tr := http.DefaultTransport.(*http.Transport).Clone()
			b.Cleanup(tr.CloseIdleConnections)
			c := &Client{HTTPClient: &http.Client{Transport: tr}, Policy: Policy{HedgeAfter: hedge}}
			in := mustIntentB(b, srv.URL)
			lat := make([]time.Duration, n)
			var p99, slowest time.Duration
			for b.Loop() {
				for i := range lat {
					start := time.Now()
					res, err := c.Do(context.Background(), in)
					if err != nil {
						b.Fatal(err)
					}
					_, _ = io.Copy(io.Discard, res.Response.Body)
					_ = res.Response.Body.Close()
					lat[i] = time.Since(start)
				}
				sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
				p99, slowest = lat[n*99/100], lat[n-1]
			}
			st := c.Stats()
			b.ReportMetric(float64(p99)/float64(time.Millisecond), "p99-ms")
			b.ReportMetric(float64(slowest)/float64(time.Millisecond), "max-ms")
			b.ReportMetric(float64(st.Requests)/float64(b.N)-n, "extra-req/op")
		})
	}
}

func mustIntentB(b *testing.B, url string) *Intent {
	in, err := NewIntent("GET", url, nil)
	if err != nil {
		b.Fatal(err)
	}
	return in
}

// TestHedgePanicReachesCaller: a hedged attempt's requests run on
// goroutines of idem's own; a panic in one (the HTTPClient's RoundTripper,
// CheckRedirect, Jar) is carried to the caller's goroutine, where it would
// have been without a hedge: Do, and a Transport's RoundTrip, panic there
// with an error holding the panic's value and the request's stack, and
// the other request is cancelled. A runtime.Goexit is carried as a Goexit.
func TestHedgePanicReachesCaller(t *testing.T) {
	boom := func(*http.Request) (*http.Response, error) { panic("boom in a RoundTripper") }
	exit := func(*http.Request) (*http.Response, error) { runtime.Goexit(); return nil, nil }
	wait := func(req *http.Request) (*http.Response, error) {
		<-req.Context().Done()
		return nil, req.Context().Err()
	}
	type end struct {
		p        any
		returned bool
	}
	for _, caller := range hedgeCallers {
		for _, tc := range []struct {
			name    string
			scripts []func(*http.Request) (*http.Response, error)
			goexit  bool
		}{
			{"the first request panics", []func(*http.Request) (*http.Response, error){boom}, false},
			{"the hedge panics", []func(*http.Request) (*http.Response, error){wait, boom}, false},
			{"the first request exits", []func(*http.Request) (*http.Response, error){exit}, true},
			{"the hedge exits", []func(*http.Request) (*http.Response, error){wait, exit}, true},
		} {
			t.Run(caller.name+" "+tc.name, func(t *testing.T) {
				rt := &scriptRT{entered: make(chan struct{}, 2), scripts: tc.scripts}
				send, clk, _ := caller.make(t, rt, Policy{HedgeAfter: time.Hour, MaxAttempts: 1})
				done := make(chan end, 1)
				go func() {
					returned := false
					defer func() { done <- end{recover(), returned} }()
					send(t.Context(), "GET", "http://127.0.0.1:1/r", "", "")
					returned = true
				}()
				recv(t, rt.entered, "the first request")
				if len(tc.scripts) == 2 {
					require.Equal(t, 1, clk.fireTimers(), "the hedge's timer")
					recv(t, rt.entered, "the hedge")
				}
				got := recv(t, done, "the caller's end")
				assert.False(t, got.returned, "the call does not return")
				if len(tc.scripts) == 2 {
					assert.ErrorIs(t, rt.ctx(0).Err(), context.Canceled, "the other request is cancelled")
				}
				if tc.goexit {
					assert.Nil(t, got.p, "a Goexit, not a panic")
					return
				}
				err, ok := got.p.(error)
				require.True(t, ok, "Do panics with an error, got %#v", got.p)
				assert.Contains(t, err.Error(), "boom in a RoundTripper", "the value")
				assert.Contains(t, err.Error(), "TestHedgePanicReachesCaller", "the request's stack")
			})
		}
	}
}
