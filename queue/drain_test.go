package queue

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/idemtest"
)

func startServer(t *testing.T, opts idemtest.Options) *idemtest.Server {
	t.Helper()
	s := idemtest.New(opts)
	require.NoError(t, s.Start())
	t.Cleanup(s.Close)
	return s
}

func clientFor(s *idemtest.Server) *idem.Client {
	return &idem.Client{HTTPClient: s.Client()}
}

// fast are options for tests that let records retry on the real clock. The
// attempt timeout only ends a stall: the tests' servers answer at once, or
// hold a request until the test lets it go.
func fast(c *idem.Client) Options {
	return Options{Client: c, Policy: idem.Policy{BaseDelay: 5 * time.Millisecond, MaxDelay: 20 * time.Millisecond, AttemptTimeout: 30 * time.Second}, Workers: 4}
}

func TestDrainExactlyOnce(t *testing.T) {
	s := startServer(t, idemtest.Options{
		RequireKey: true, Delay: 50 * time.Millisecond,
		Faults: idemtest.RandomFaults(3, map[idemtest.Fault]float64{
			idemtest.FaultCommitThenDrop: 0.15, idemtest.FaultCloseBeforeRead: 0.05,
			idemtest.Fault503: 0.05, idemtest.Fault500AfterEffect: 0.05,
		}),
		RefuseDial: idemtest.RandomRefusals(3, 0.1),
	})
	var ev events
	opts := fast(clientFor(s))
	opts.Notify = ev.notify
	q, _ := openTest(t, opts)
	run(t, q)
	ctx := waitCtx(t)
	const n = 60
	ids := make([]ID, n)
	for i := range n {
		id, err := q.Enqueue(ctx, post(t, s.URL()+"/payments", i, idem.WithLane(fmt.Sprint(i%4))))
		require.NoError(t, err)
		ids[i] = id
	}
	for i, id := range ids {
		r, err := q.Wait(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, Done, r.State, "record %d: %s", id, r.Reason)
		assert.Equal(t, idem.Applied, r.Outcome)
		require.NotNil(t, r.Result)
		assert.Equal(t, 201, r.Result.Status)
		assert.Contains(t, string(r.Result.Body), `"id":"pay_`)
		assert.Equal(t, "application/json", r.Result.Header.Get("Content-Type"))
		assert.Equal(t, 1, s.EffectsForPayload([]byte(fmt.Sprintf(`{"payment":"p-%d"}`, i))), "payment %d", i)
	}
	assert.Equal(t, n, s.TotalEffects())
	assert.Equal(t, n, ev.count(EventSettled))
	st := s.Stats()
	assert.Greater(t, st.Replays, 0, "faults were exercised")
	c, err := q.Counts(context.Background())
	require.NoError(t, err)
	assert.Equal(t, n, c[Done])
}

// recorder is a scripted server: answer decides each response from the
// request and how many requests with that key came before.
type recorder struct {
	*httptest.Server
	mu    sync.Mutex // guards order and seen
	order []string   // payload bodies, in arrival order
	seen  map[string]int
}

func newRecorder(t *testing.T, answer func(w http.ResponseWriter, r *http.Request, body string, seen int)) *recorder {
	rec := &recorder{seen: map[string]int{}}
	rec.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		rec.mu.Lock()
		key := r.Header.Get("Idempotency-Key")
		n := rec.seen[key]
		rec.seen[key]++
		rec.order = append(rec.order, string(b))
		rec.mu.Unlock()
		answer(w, r, string(b), n)
	}))
	t.Cleanup(rec.Close)
	return rec
}

func (r *recorder) requests() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.order...)
}

func hangup(w http.ResponseWriter) {
	if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
		c.Close()
	}
}

// TestDrainLanes: a lane whose head must wait blocks only itself, and within
// a lane records go in enqueue order.
func TestDrainLanes(t *testing.T) {
	clk := newClock()
	srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request, body string, seen int) {
		if strings.Contains(body, "a-0") && seen == 0 {
			w.Header().Set("Retry-After", "60")
			w.WriteHeader(429)
			return
		}
		w.WriteHeader(201)
	})
	q, _ := openTest(t, Options{now: clk.Now, Client: &idem.Client{}, Workers: 2})
	ctx := waitCtx(t)
	var aIDs, bIDs []ID
	for i := range 3 {
		ina, err := idem.NewIntent("POST", srv.URL, []byte(fmt.Sprintf("a-%d", i)), idem.WithLane("a"))
		require.NoError(t, err)
		inb, err := idem.NewIntent("POST", srv.URL, []byte(fmt.Sprintf("b-%d", i)), idem.WithLane("b"))
		require.NoError(t, err)
		ida, err := q.Enqueue(ctx, ina)
		require.NoError(t, err)
		idb, err := q.Enqueue(ctx, inb)
		require.NoError(t, err)
		aIDs, bIDs = append(aIDs, ida), append(bIDs, idb)
	}
	run(t, q)
	for _, id := range bIDs {
		r, err := q.Wait(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, Done, r.State)
	}
	head, err := q.Get(context.Background(), aIDs[0])
	require.NoError(t, err)
	assert.Equal(t, Pending, head.State)
	assert.True(t, head.NextAttempt.Equal(clk.Now().Add(time.Minute)), "Retry-After is persisted: next %v", head.NextAttempt)
	for _, id := range aIDs[1:] {
		r, err := q.Get(context.Background(), id)
		require.NoError(t, err)
		assert.Equal(t, Pending, r.State, "lane a waits behind its head")
		assert.Zero(t, r.NumAttempts)
	}

	clk.Add(time.Minute)
	q.poke()
	for _, id := range aIDs {
		r, err := q.Wait(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, Done, r.State)
	}
	var aOrder []string
	for _, b := range srv.requests() {
		if strings.HasPrefix(b, "a-") {
			aOrder = append(aOrder, b)
		}
	}
	assert.Equal(t, []string{"a-0", "a-0", "a-1", "a-2"}, aOrder, "FIFO within the lane")
}

func TestDrainOfflineThenWake(t *testing.T) {
	clk := newClock()
	s := startServer(t, idemtest.Options{})
	s.SetDown(true)
	var ev events
	// Backoff well under the first probe's delay: every record is due
	// again before the drainer may probe.
	p := idem.Policy{BaseDelay: DefaultProbeInterval / 10}
	q, _ := openTest(t, Options{now: clk.Now, Client: clientFor(s), Notify: ev.notify, Workers: 4, Policy: p})
	q.sig.init()
	ctx := waitCtx(t)
	var ids []ID
	for i := range 6 {
		id, err := q.Enqueue(ctx, post(t, s.URL()+"/payments", i, idem.WithLane(fmt.Sprint(i))))
		require.NoError(t, err)
		ids = append(ids, id)
	}
	run(t, q)
	require.Eventually(t, func() bool { return ev.count(EventOffline) == 1 }, 5*time.Second, time.Millisecond)
	require.Eventually(t, func() bool { // attempts begun before the drainer went offline end
		c, err := q.Counts(context.Background())
		return err == nil && c[InFlight] == 0
	}, 5*time.Second, time.Millisecond)
	waitRest(t, q, clk.Now())
	attempts := 0
	for _, id := range ids {
		r, err := q.Get(context.Background(), id)
		require.NoError(t, err)
		attempts += r.NumAttempts
	}
	// Every record is due, and the first probe is not: offline, the
	// drainer keeps polling and must not send them.
	clk.Add(DefaultProbeInterval - time.Millisecond)
	waitRest(t, q, clk.Now())
	after := 0
	for _, id := range ids {
		r, err := q.Get(context.Background(), id)
		require.NoError(t, err)
		assert.False(t, r.NextAttempt.After(clk.Now()), "record %d is due", id)
		after += r.NumAttempts
		assert.Equal(t, Pending, r.State)
		assert.True(t, r.FirstSentAt.IsZero(), "a never-sent attempt leaves no FirstSentAt")
	}
	assert.Equal(t, attempts, after, "offline, the queue sends nothing that is due")
	assert.LessOrEqual(t, attempts, offlineAfter+3, "offline, the queue stops spending attempts")

	s.SetDown(false)
	q.Wake()
	for _, id := range ids {
		r, err := q.Wait(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, Done, r.State)
	}
	assert.Equal(t, 6, s.TotalEffects())
	assert.Equal(t, 1, ev.count(EventOnline))
}

func TestDrainUnauthorizedHoldsLane(t *testing.T) {
	var token atomic.Value
	token.Store("expired")
	var authCalls atomic.Int32
	srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request, body string, seen int) {
		if r.Header.Get("Authorization") != "Bearer good" {
			w.WriteHeader(401)
			return
		}
		w.WriteHeader(201)
	})
	c := &idem.Client{Authorize: func(_ context.Context, req *http.Request) error {
		authCalls.Add(1)
		req.Header.Set("Authorization", "Bearer "+token.Load().(string))
		return nil
	}}
	var ev events
	clk := newClock()
	q, _ := openTest(t, Options{now: clk.Now, Client: c, Notify: ev.notify})
	q.sig.init()
	ctx := waitCtx(t)
	id1, err := q.Enqueue(ctx, post(t, srv.URL, 1, idem.WithLane("acct")))
	require.NoError(t, err)
	id2, err := q.Enqueue(ctx, post(t, srv.URL, 2, idem.WithLane("acct")))
	require.NoError(t, err)
	run(t, q)

	require.Eventually(t, func() bool { return ev.count(EventLaneHeld) == 1 }, 5*time.Second, time.Millisecond)
	// Held, the lane stays out of the schedule however long it waits.
	clk.Add(time.Hour)
	waitRest(t, q, clk.Now())
	assert.Equal(t, int32(2), authCalls.Load(), "one attempt, then one more with fresh credentials")
	assert.Len(t, srv.requests(), 2)
	for _, id := range []ID{id1, id2} {
		r, err := q.Get(context.Background(), id)
		require.NoError(t, err)
		assert.Equal(t, Pending, r.State, "a held lane keeps its records")
	}

	token.Store("good")
	q.Wake()
	for _, id := range []ID{id1, id2} {
		r, err := q.Wait(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, Done, r.State)
	}
}

// TestDrainHorizon: an intent whose first attempt may have applied is never
// sent after the server may have forgotten its key; it expires, Unknown.
func TestDrainHorizon(t *testing.T) {
	clk := newClock()
	srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request, body string, seen int) {
		hangup(w) // applied, answer lost: ambiguous
	})
	var ev events
	q, _ := openTest(t, Options{now: clk.Now, Client: &idem.Client{}, Notify: ev.notify})
	ctx := waitCtx(t)
	sentAt := clk.Now()
	id, err := q.Enqueue(ctx, post(t, srv.URL, 1))
	require.NoError(t, err)
	run(t, q)
	require.Eventually(t, func() bool { return len(srv.requests()) == 1 }, 5*time.Second, time.Millisecond)
	require.Eventually(t, func() bool {
		r, err := q.Get(context.Background(), id)
		return err == nil && r.State == Pending && r.InDoubt
	}, 5*time.Second, time.Millisecond)
	r, err := q.Get(context.Background(), id)
	require.NoError(t, err)
	assert.True(t, r.FirstSentAt.Equal(sentAt))

	clk.Add(23 * time.Hour) // past FirstSentAt + 24h - 1h, counting the attempt timeout
	q.poke()
	r, err = q.Wait(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, Expired, r.State)
	assert.Equal(t, idem.Unknown, r.Outcome, "the first attempt may have applied")
	assert.Contains(t, r.Reason, "past the horizon")
	assert.Len(t, srv.requests(), 1, "never sent past the horizon")
	// Wait may read the settled record before its event is delivered (it
	// was settled before Wait began); Close delivers every event.
	require.NoError(t, q.Close())
	assert.Equal(t, 1, ev.count(EventSettled))
}

func TestDrainRetryAfterPastHorizon(t *testing.T) {
	for _, tt := range []struct {
		status  int
		outcome idem.Outcome
	}{{503, idem.Unknown}, {429, idem.NotApplied}} {
		t.Run(fmt.Sprint(tt.status), func(t *testing.T) {
			srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request, body string, seen int) {
				w.Header().Set("Retry-After", "90000") // 25 hours
				w.WriteHeader(tt.status)
			})
			q, _ := openTest(t, Options{Client: &idem.Client{}})
			ctx := waitCtx(t)
			id, err := q.Enqueue(ctx, post(t, srv.URL, 1))
			require.NoError(t, err)
			run(t, q)
			r, err := q.Wait(ctx, id)
			require.NoError(t, err)
			assert.Equal(t, Expired, r.State)
			assert.Equal(t, tt.outcome, r.Outcome)
			assert.Contains(t, r.Reason, "asked to wait 25h0m0s (Retry-After)")
			assert.Len(t, srv.requests(), 1)
		})
	}
}

func TestDrainRetryAfterHonouredUncapped(t *testing.T) {
	clk := newClock()
	srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request, body string, seen int) {
		if seen == 0 {
			w.Header().Set("Retry-After", "7200") // beyond idem.Client's 60 s cap
			w.WriteHeader(503)
			return
		}
		w.WriteHeader(201)
	})
	q, _ := openTest(t, Options{now: clk.Now, Client: &idem.Client{}})
	ctx := waitCtx(t)
	id, err := q.Enqueue(ctx, post(t, srv.URL, 1))
	require.NoError(t, err)
	run(t, q)
	require.Eventually(t, func() bool {
		r, _ := q.Get(context.Background(), id)
		return r != nil && r.NumAttempts == 1 && r.State == Pending
	}, 5*time.Second, time.Millisecond)
	r, err := q.Get(context.Background(), id)
	require.NoError(t, err)
	assert.True(t, r.NextAttempt.Equal(clk.Now().Add(2*time.Hour)), "next attempt %v", r.NextAttempt)
	clk.Add(2 * time.Hour)
	q.poke()
	r, err = q.Wait(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, Done, r.State)
}

func TestDrainClockBackwards(t *testing.T) {
	clk := newClock()
	srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request, body string, seen int) { w.WriteHeader(201) })
	var ev events
	q, path := openTest(t, Options{now: clk.Now, Client: &idem.Client{}, Notify: ev.notify})
	ctx := waitCtx(t)
	first, err := q.Enqueue(ctx, post(t, srv.URL, 1))
	require.NoError(t, err)
	run(t, q)
	_, err = q.Wait(ctx, first)
	require.NoError(t, err)
	require.NoError(t, q.Close())

	// The device reboots with its clock a day behind.
	clk.Add(-24 * time.Hour)
	ev = events{}
	q = reopen(t, path, Options{now: clk.Now, Client: &idem.Client{}, Notify: ev.notify})
	q.sig.init()
	second, err := q.Enqueue(ctx, post(t, srv.URL, 2))
	require.NoError(t, err)
	run(t, q)
	require.Eventually(t, func() bool { return ev.count(EventClockHeld) == 1 }, 5*time.Second, time.Millisecond)
	clk.Add(time.Hour) // still far behind: the hold lasts
	waitRest(t, q, clk.Now())
	assert.Len(t, srv.requests(), 1, "no send while the clock cannot be trusted")
	r, err := q.Get(context.Background(), second)
	require.NoError(t, err)
	assert.Zero(t, r.NumAttempts)

	clk.Add(23 * time.Hour) // the clock is set right
	r, err = q.Wait(ctx, second)
	require.NoError(t, err)
	assert.Equal(t, Done, r.State)
	assert.Equal(t, 1, ev.count(EventClockHeld), "reported once")
}

func TestDrainSettles(t *testing.T) {
	tests := []struct {
		name    string
		method  string
		opts    Options
		answer  func(w http.ResponseWriter, seen int)
		state   State
		outcome idem.Outcome
		reason  string
		status  int
	}{
		{"400 fails", "POST", Options{}, func(w http.ResponseWriter, _ int) {
			w.WriteHeader(400)
			io.WriteString(w, `{"error":"bad amount"}`)
		}, Failed, idem.NotApplied, "rejected (400)", 400},
		{"422 fails", "POST", Options{}, func(w http.ResponseWriter, _ int) { w.WriteHeader(422) },
			Failed, idem.NotApplied, "another payload", 422},
		{"ambiguous then 400 is unknown", "POST", Options{}, func(w http.ResponseWriter, seen int) {
			if seen == 0 {
				w.WriteHeader(502)
				return
			}
			w.WriteHeader(400)
		}, Failed, idem.Unknown, "rejected (400)", 400},
		{"DELETE 404 after a lost answer is done", "DELETE", Options{}, func(w http.ResponseWriter, seen int) {
			if seen == 0 {
				hangup(w)
				return
			}
			w.WriteHeader(404)
		}, Done, idem.AlreadyApplied, "", 404},
		{"attempts exhausted", "POST", Options{MaxAttempts: 3}, func(w http.ResponseWriter, _ int) { w.WriteHeader(503) },
			Failed, idem.Unknown, "attempts exhausted (3 of 3)", 0},
		{"Retry-After over the cap", "POST", Options{MaxRetryAfter: time.Minute}, func(w http.ResponseWriter, _ int) {
			w.Header().Set("Retry-After", "3600")
			w.WriteHeader(429)
		}, Failed, idem.NotApplied, "Retry-After), over the 1m0s cap", 0},
		{"a Client's Policy is not the queue's", "POST", Options{Client: &idem.Client{Policy: idem.Policy{MaxAttempts: 1, MaxRetryAfter: time.Second}}},
			func(w http.ResponseWriter, seen int) {
				if seen < 2 {
					w.Header().Set("Retry-After", "0")
					w.WriteHeader(429)
					return
				}
				w.WriteHeader(201)
			}, Done, idem.Applied, "", 201},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request, body string, seen int) { tt.answer(w, seen) })
			opts := tt.opts
			if opts.Client == nil {
				opts.Client = &idem.Client{}
			}
			opts.Policy.BaseDelay, opts.Policy.MaxDelay = time.Millisecond, 5*time.Millisecond
			q, _ := openTest(t, opts)
			ctx := waitCtx(t)
			in, err := idem.NewIntent(tt.method, srv.URL+"/r/1", []byte("x"))
			require.NoError(t, err)
			id, err := q.Enqueue(ctx, in)
			require.NoError(t, err)
			run(t, q)
			r, err := q.Wait(ctx, id)
			require.NoError(t, err)
			assert.Equal(t, tt.state, r.State)
			assert.Equal(t, tt.outcome, r.Outcome)
			assert.Contains(t, r.Reason, tt.reason)
			if tt.status != 0 {
				require.NotNil(t, r.Result)
				assert.Equal(t, tt.status, r.Result.Status)
			}
		})
	}
}

func TestDrainMaxAge(t *testing.T) {
	clk := newClock()
	srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request, body string, seen int) { w.WriteHeader(201) })
	q, _ := openTest(t, Options{now: clk.Now, Client: &idem.Client{}, MaxAge: time.Minute})
	ctx := waitCtx(t)
	in := post(t, srv.URL, 1) // CreatedAt is the real time; the queue's clock is far ahead
	clk.Set(in.CreatedAt().Add(2 * time.Minute))
	id, err := q.Enqueue(ctx, in)
	require.NoError(t, err)
	run(t, q)
	r, err := q.Wait(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, Expired, r.State)
	assert.Equal(t, idem.NotApplied, r.Outcome)
	assert.Contains(t, r.Reason, "max age")
	assert.Empty(t, srv.requests())
}

func TestRunOnce(t *testing.T) {
	q, _ := openTest(t, Options{})
	run(t, q)
	require.Eventually(t, func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.running
	}, 5*time.Second, time.Millisecond)
	assert.ErrorIs(t, q.Run(context.Background()), ErrRunning)
}

// TestCloseDuringAttempt: Close ends an attempt under way and still records
// it, so nothing is left in flight.
func TestCloseDuringAttempt(t *testing.T) {
	started := make(chan struct{})
	srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request, body string, seen int) {
		close(started)
		<-r.Context().Done()
	})
	q, path := openTest(t, Options{Client: &idem.Client{}})
	id, err := q.Enqueue(waitCtx(t), post(t, srv.URL, 1))
	require.NoError(t, err)
	go q.Run(context.Background())
	<-started
	require.NoError(t, q.Close())

	q = reopen(t, path, Options{})
	r, err := q.Get(context.Background(), id)
	require.NoError(t, err)
	assert.Equal(t, Pending, r.State)
	assert.True(t, r.InDoubt, "the request was sent and no answer came")
	assert.Equal(t, 1, r.NumAttempts)
	assert.Equal(t, idem.ClassAmbiguous, r.LastClass)
}

// failingBody gives its data, then a read error.
type failingBody struct{ data []byte }

func (f *failingBody) Read(p []byte) (int, error) {
	if len(f.data) == 0 {
		return 0, errors.New("connection reset")
	}
	n := copy(p, f.data)
	f.data = f.data[n:]
	return n, nil
}

func (f *failingBody) Close() error { return nil }

// TestKeepResult: a stored result is capped at MaxResultBody, keeps what
// came of a body whose reading failed, and marks both as truncated.
func TestKeepResult(t *testing.T) {
	q, _ := openTest(t, Options{MaxResultBody: 8})
	answer := func(body io.ReadCloser) *http.Response {
		return &http.Response{StatusCode: 201, Body: body, Header: http.Header{
			"Content-Type": {"application/json"}, "Set-Cookie": {"s=1"}, "Idempotent-Replayed": {"true"},
		}}
	}
	short := q.keep(answer(io.NopCloser(strings.NewReader("{}"))))
	assert.Equal(t, &Response{Status: 201, Body: []byte("{}"), Header: http.Header{
		"Content-Type": {"application/json"}, "Idempotent-Replayed": {"true"},
	}}, short, "only the listed headers are kept")
	long := q.keep(answer(io.NopCloser(strings.NewReader(strings.Repeat("x", 100)))))
	assert.Equal(t, []byte("xxxxxxxx"), long.Body)
	assert.True(t, long.Truncated)
	cut := q.keep(answer(&failingBody{data: []byte("{\"id\"")}))
	assert.Equal(t, []byte(`{"id"`), cut.Body)
	assert.True(t, cut.Truncated, "a body whose read failed is not whole")
}
