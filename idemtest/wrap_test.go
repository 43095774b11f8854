package idemtest

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// startWrapped serves Wrap(h, opts) on loopback and returns the wrapper, the
// server's URL and a client without keep-alives, all closed when t ends.
func startWrapped(t *testing.T, h http.Handler, opts Options) (*Wrapper, string, *http.Client) {
	t.Helper()
	w := Wrap(h, opts)
	url, c := serveWrapped(t, w)
	return w, url, c
}

// serveWrapped is startWrapped for a Wrapper made by the caller.
func serveWrapped(t *testing.T, w *Wrapper) (string, *http.Client) {
	t.Helper()
	srv := httptest.NewUnstartedServer(w)
	// A handler's panic is part of some tests; net/http's log of it is noise.
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Start()
	t.Cleanup(srv.Close)
	tr := &http.Transport{DialContext: w.DialContext, DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	return srv.URL, &http.Client{Transport: tr, Timeout: 5 * time.Second}
}

// orders is a small user handler: each run creates an order, answers 201
// with headers of its own and a body that echoes the request's.
func orders() http.Handler {
	var n atomic.Int64
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		id := n.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", fmt.Sprintf("/orders/%d", id))
		w.Header()["X-Multi"] = []string{"a", "b"}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%d,"got":%q}`, id, body)
		// After the header is written, as net/http would ignore it.
		w.Header().Set("X-Late", "1")
	})
}

// withoutDate returns h without the fields net/http adds per response and
// the replay mark.
func withoutDate(h http.Header) http.Header {
	h = h.Clone()
	h.Del("Date")
	h.Del("Idempotent-Replayed")
	return h
}

func TestWrapReplaysByteForByte(t *testing.T) {
	w, url, c := startWrapped(t, orders(), Options{})

	first := mustSend(t, c, "POST", url+"/orders", "k1", `{"sku":"x"}`)
	assert.Equal(t, http.StatusCreated, first.status)
	assert.Equal(t, `{"id":1,"got":"{\"sku\":\"x\"}"}`, first.body, "the handler got the body")
	assert.Equal(t, []string{"a", "b"}, first.header.Values("X-Multi"))
	assert.Empty(t, first.header.Get("X-Late"), "a field set after WriteHeader was sent")
	assert.Empty(t, first.header.Get("Idempotent-Replayed"), "first response marked as replay")

	again := mustSend(t, c, "POST", url+"/orders", "k1", `{"sku":"x"}`)
	assert.Equal(t, first.status, again.status, "replay status")
	assert.Equal(t, first.body, again.body, "replay body")
	assert.Equal(t, withoutDate(first.header), withoutDate(again.header), "replay header")
	assert.Equal(t, "true", again.header.Get("Idempotent-Replayed"), "replay mark")

	assert.Equal(t, 1, w.EffectsForKey("k1"), "EffectsForKey")
	assert.Equal(t, 2, w.RequestsForKey("k1"), "RequestsForKey")
	st := w.Stats()
	assert.Equal(t, 1, st.Replays, "Stats.Replays")
	assert.Equal(t, 1, st.Effects, "Stats.Effects")
}

func TestWrapConflictWhileRunning(t *testing.T) {
	entered := make(chan struct{}, 2)
	release := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
		w.WriteHeader(http.StatusCreated)
	})
	w, url, c := startWrapped(t, h, Options{})

	var wg sync.WaitGroup
	var first reply
	var firstErr error
	wg.Go(func() { first, firstErr = send(c, "POST", url+"/x", "k", "body") })
	<-entered // the first request's handler is running

	second, err := send(c, "POST", url+"/x", "k", "body")
	close(release)
	wg.Wait()
	require.NoError(t, err, "second request")
	assert.Equal(t, http.StatusConflict, second.status, "while the handler runs")
	assert.JSONEq(t, `{"error":"a request with this key is in progress"}`, second.body)
	require.NoError(t, firstErr, "first request")
	assert.Equal(t, http.StatusCreated, first.status, "first request")

	third := mustSend(t, c, "POST", url+"/x", "k", "body")
	assert.Equal(t, http.StatusCreated, third.status, "after completion")
	assert.Equal(t, "true", third.header.Get("Idempotent-Replayed"), "after completion")
	assert.Equal(t, 1, w.EffectsForKey("k"), "EffectsForKey")
	assert.Equal(t, 1, w.Stats().Conflicts, "Stats.Conflicts")
}

func TestWrapMismatch(t *testing.T) {
	w, url, c := startWrapped(t, orders(), Options{})
	mustSend(t, c, "POST", url+"/orders", "k", `{"sku":"x"}`)
	other := mustSend(t, c, "POST", url+"/orders", "k", `{"sku":"y"}`)
	assert.Equal(t, http.StatusUnprocessableEntity, other.status)
	assert.JSONEq(t, `{"error":"idempotency key reused with a different payload"}`, other.body)
	assert.Equal(t, 1, w.EffectsForKey("k"), "EffectsForKey")
	assert.Equal(t, 1, w.Stats().Mismatches, "Stats.Mismatches")
}

// An idem.Client retrying under its key after the answer was lost makes
// the handler run once.
func TestWrapCommitThenDropWithClient(t *testing.T) {
	w, url, c := startWrapped(t, orders(), Options{Faults: faultOnFirst(FaultCommitThenDrop)})
	in, err := idem.NewIntent("POST", url+"/orders", []byte(`{"sku":"x"}`))
	require.NoError(t, err)
	client := &idem.Client{HTTPClient: c, Policy: idem.Policy{BaseDelay: time.Millisecond}}

	res, err := client.Do(context.Background(), in)
	require.NoError(t, err)
	defer res.Response.Body.Close()
	body, err := io.ReadAll(res.Response.Body)
	require.NoError(t, err)
	assert.Equal(t, idem.Applied, res.Outcome, "Outcome")
	assert.True(t, res.Replayed, "Replayed")
	assert.Equal(t, `{"id":1,"got":"{\"sku\":\"x\"}"}`, string(body), "the stored answer")
	require.Len(t, res.Attempts, 2, "attempts")
	assert.Equal(t, idem.ClassAmbiguous, res.Attempts[0].Class, "first attempt")
	assert.Equal(t, 1, w.EffectsForKey(in.Key()), "handler runs under the key")
	assert.Equal(t, 2, w.RequestsForKey(in.Key()), "requests under the key")
}

// A fault before the effect releases the claim without running the
// handler, so the retry runs it.
func TestWrapFaultBeforeEffect(t *testing.T) {
	w, url, c := startWrapped(t, orders(), Options{Faults: faultOnFirst(Fault503)})
	first := mustSend(t, c, "POST", url+"/orders", "k", "x")
	assert.Equal(t, http.StatusServiceUnavailable, first.status, "first")
	assert.Equal(t, 0, w.EffectsForKey("k"), "handler ran behind a 503")
	second := mustSend(t, c, "POST", url+"/orders", "k", "x")
	assert.Equal(t, http.StatusCreated, second.status, "retry")
	assert.Empty(t, second.header.Get("Idempotent-Replayed"), "retry replayed")
	assert.Equal(t, 1, w.EffectsForKey("k"), "EffectsForKey")
}

// failOnce answers 500 (or panics) on its first run and 201 afterwards.
func failOnce(panics bool) http.Handler {
	var runs atomic.Int64
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if runs.Add(1) == 1 {
			if panics {
				panic("handler failed")
			}
			w.Header().Set("X-Failed", "yes")
			w.WriteHeader(http.StatusInternalServerError)
			io.WriteString(w, "boom")
			return
		}
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "made")
	})
}

func TestWrapServerErrors(t *testing.T) {
	tests := []struct {
		name       string
		policy     ServerErrorPolicy
		panics     bool
		wantStatus int // of the retry
		wantBody   string
		wantRuns   int
		released   int
	}{
		{"store 500", StoreServerErrors, false, http.StatusInternalServerError, "boom", 1, 0},
		{"release 500", ReleaseServerErrors, false, http.StatusCreated, "made", 2, 1},
		{"store panic", StoreServerErrors, true, http.StatusInternalServerError, `{"error":"handler panicked"}`, 1, 0},
		{"release panic", ReleaseServerErrors, true, http.StatusCreated, "made", 2, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, url, c := startWrapped(t, failOnce(tt.panics), Options{ServerErrors: tt.policy})
			first, err := send(c, "POST", url+"/x", "k", "x")
			if tt.panics {
				assert.Error(t, err, "a panic aborts the response, as without the wrapper")
			} else {
				require.NoError(t, err)
				assert.Equal(t, http.StatusInternalServerError, first.status, "first")
				assert.Equal(t, "yes", first.header.Get("X-Failed"), "first")
				assert.Equal(t, "boom", first.body, "first")
			}
			retry := mustSend(t, c, "POST", url+"/x", "k", "x")
			assert.Equal(t, tt.wantStatus, retry.status, "retry status")
			assert.Equal(t, tt.wantBody, retry.body, "retry body")
			assert.Equal(t, tt.wantRuns == 1, retry.header.Get("Idempotent-Replayed") == "true", "retry replayed")
			assert.Equal(t, tt.wantRuns, w.EffectsForKey("k"), "handler runs")
			assert.Equal(t, tt.released, w.Stats().Released, "Stats.Released")
		})
	}
}

func TestWrapPassThrough(t *testing.T) {
	var runs atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Method", r.Method)
		w.WriteHeader(http.StatusOK)
		w.Write(body)
	})
	tests := []struct {
		name     string
		opts     Options
		method   string
		key      string
		want     int // status of each of two requests
		wantRuns int
	}{
		{"POST without key", Options{}, "POST", "", http.StatusOK, 2},
		{"POST without key, key required", Options{RequireKey: true}, "POST", "", http.StatusBadRequest, 0},
		{"GET without key, key required", Options{RequireKey: true}, "GET", "", http.StatusOK, 2},
		{"PUT with key", Options{}, "PUT", "k", http.StatusOK, 2},
		{"PUT with key, PUT keyed", Options{KeyedMethods: []string{"PUT"}}, "PUT", "k", http.StatusOK, 1},
		{"POST with key, PUT keyed", Options{KeyedMethods: []string{"PUT"}}, "POST", "k", http.StatusOK, 2},
		{"POST with malformed key", Options{}, "POST", "a b", http.StatusBadRequest, 0},
		{"GET with malformed key", Options{}, "GET", "a b", http.StatusOK, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runs.Store(0)
			w, url, c := startWrapped(t, h, tt.opts)
			for i := range 2 {
				got := mustSend(t, c, tt.method, url+"/x", tt.key, "payload")
				assert.Equal(t, tt.want, got.status, "request %d status", i)
				if tt.want == http.StatusOK {
					assert.Equal(t, "payload", got.body, "request %d body", i)
					assert.Equal(t, tt.method, got.header.Get("X-Method"), "request %d from the handler", i)
				}
			}
			assert.Equal(t, tt.wantRuns, int(runs.Load()), "handler runs")
			assert.Equal(t, tt.wantRuns, w.Stats().Effects, "Stats.Effects")
		})
	}
}

// The key is found under any spelling of the header's name, and its
// sf-string and bare forms name one record.
func TestWrapKeySpellings(t *testing.T) {
	w := Wrap(orders(), Options{})
	req := func(name, value string) *http.Request {
		r := httptest.NewRequest("POST", "/orders", strings.NewReader("x"))
		r.Header[name] = []string{value} // not canonicalised, as a handler called directly may get
		return r
	}
	first := httptest.NewRecorder()
	w.ServeHTTP(first, req("idempotency-key", "k"))
	require.Equal(t, http.StatusCreated, first.Code, "first")

	for _, r := range []*http.Request{req("Idempotency-Key", `"k"`), req("IDEMPOTENCY-KEY", "k")} {
		got := httptest.NewRecorder()
		w.ServeHTTP(got, r)
		assert.Equal(t, "true", got.Header().Get("Idempotent-Replayed"), "replayed")
		assert.Equal(t, first.Body.String(), got.Body.String(), "body")
	}
	assert.Equal(t, 1, w.EffectsForKey("k"), "EffectsForKey")
}

// Without a hijackable ResponseWriter, a dropping fault aborts the
// response after the handler ran, as with Server.Handler.
func TestWrapDropWithoutHijack(t *testing.T) {
	w := Wrap(orders(), Options{Faults: faultOnFirst(FaultCommitThenDrop)})
	r := httptest.NewRequest("POST", "/orders", strings.NewReader("x"))
	r.Header.Set("Idempotency-Key", "k")
	assert.PanicsWithValue(t, http.ErrAbortHandler, func() {
		w.ServeHTTP(httptest.NewRecorder(), r)
	})
	assert.Equal(t, 1, w.EffectsForKey("k"))
}

// A request whose lease expired is overtaken: if it was still before the
// handler (a FaultDelay pause), the handler does not run for it; if the
// handler was running, it has run twice, which EffectsForKey tells, and
// only the taker's answer is stored.
func TestWrapTakeover(t *testing.T) {
	tests := []struct {
		name     string
		inPause  bool // overtaken in a FaultDelay pause, else in the handler
		wantRuns int
	}{
		{"overtaken before the handler", true, 1},
		{"overtaken in the handler", false, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := newFakeClock()
			var runs atomic.Int64
			entered := make(chan struct{}, 1)
			release := make(chan struct{})
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n := runs.Add(1)
				if n == 1 && !tt.inPause {
					entered <- struct{}{}
					<-release
				}
				w.WriteHeader(http.StatusCreated)
				fmt.Fprintf(w, "run %d", n)
			})
			opts := Options{Now: clock.Now, Lease: 10 * time.Second}
			if tt.inPause {
				opts.Faults = faultOnFirst(FaultDelay)
			}
			w := Wrap(h, opts)
			gate := make(pauseGate)
			w.gate = gate // the test ends the pause: no real-time ordering
			url, c := serveWrapped(t, w)

			var slow reply
			var slowErr error
			slowDone := make(chan struct{})
			go func() {
				defer close(slowDone)
				slow, slowErr = send(c, "POST", url+"/x", "k", "x")
			}()
			var wakeSlow chan struct{}
			if tt.inPause {
				wakeSlow = <-gate // the slow request holds the claim
			} else {
				<-entered // the slow request's handler is running
				wakeSlow = release
			}

			clock.Advance(11 * time.Second)
			taker := mustSend(t, c, "POST", url+"/x", "k", "x")
			assert.Equal(t, http.StatusCreated, taker.status, "takeover status")

			close(wakeSlow)
			<-slowDone
			require.NoError(t, slowErr)
			assert.Equal(t, http.StatusConflict, slow.status, "overtaken request status")
			assert.JSONEq(t, `{"error":"idempotency key claim was taken over by another request"}`, slow.body)
			assert.Equal(t, tt.wantRuns, w.EffectsForKey("k"), "handler runs")
			assert.Equal(t, 1, w.Stats().Fenced, "Stats.Fenced")

			replay := mustSend(t, c, "POST", url+"/x", "k", "x")
			assert.Equal(t, taker.body, replay.body, "the stored answer is the taker's")
		})
	}
}
