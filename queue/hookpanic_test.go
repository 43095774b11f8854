package queue

import (
	"cmp"
	"context"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
)

// funcTracer is a Tracer whose StartDrain is a function and whose Inject
// stores nothing.
type funcTracer func(ctx context.Context, r *Record) (context.Context, func(idem.Action, idem.Outcome, error))

func (funcTracer) Inject(context.Context) map[string]string { return nil }

func (f funcTracer) StartDrain(ctx context.Context, r *Record) (context.Context, func(idem.Action, idem.Outcome, error)) {
	return f(ctx, r)
}

// boomHandler is a slog.Handler that calls boom with the URL of each record
// it handles.
type boomHandler struct{ boom func(url string) }

func (boomHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h boomHandler) Handle(_ context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "url.full" {
			h.boom(a.Value.String())
		}
		return true
	})
	return nil
}

func (h boomHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h boomHandler) WithGroup(string) slog.Handler      { return h }

// rtFunc is an http.RoundTripper made of a function.
type rtFunc func(*http.Request) (*http.Response, error)

func (f rtFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// keysByBody records the keys each payload arrived under.
type keysByBody struct {
	mu   sync.Mutex // guards keys
	keys map[string]map[string]bool
}

func (k *keysByBody) add(body, key string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.keys == nil {
		k.keys = map[string]map[string]bool{}
	}
	if k.keys[body] == nil {
		k.keys[body] = map[string]bool{}
	}
	k.keys[body][key] = true
}

func (k *keysByBody) count(body string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.keys[body])
}

// hookPanics are the user hooks a drainer runs, each set to call boom with
// the URL of the record it runs for. Lane a's head is answered status (429
// if 0) while its hook is broken. hook is what the held lane's error names;
// sent how many requests lane a's head made before its hook panicked;
// doubt whether the head is then in doubt (a request may have gone out
// within Try, or a success was not recorded); recorded whether the record
// itself says why it waits (the Tracer's end runs once the attempt is
// recorded).
var hookPanics = []struct {
	name     string
	hook     string
	status   int
	sent     int
	doubt    bool
	recorded bool
	set      func(o *Options, c *idem.Client, boom func(url string))
}{
	{"Veto", "Options.Policy.Veto", 0, 1, false, true, func(o *Options, _ *idem.Client, boom func(string)) {
		o.Policy.Veto = func(_ context.Context, ai idem.AttemptInfo) bool { boom(ai.URL); return false }
	}},
	{"Authorize", "Client.Authorize", 0, 0, true, true, func(_ *Options, c *idem.Client, boom func(string)) {
		c.Authorize = func(_ context.Context, req *http.Request) error { boom(req.URL.String()); return nil }
	}},
	{"OnSend", "Client.OnSend", 0, 0, true, true, func(_ *Options, c *idem.Client, boom func(string)) {
		c.OnSend = func(req *http.Request) context.Context { boom(req.URL.String()); return nil }
	}},
	{"HTTPClient", "Client.HTTPClient", 0, 0, true, true, func(_ *Options, c *idem.Client, boom func(string)) {
		c.HTTPClient = &http.Client{Transport: rtFunc(func(req *http.Request) (*http.Response, error) {
			boom(req.URL.String())
			return http.DefaultTransport.RoundTrip(req)
		})}
	}},
	{"OnAttempt", "Client.OnAttempt", 0, 1, false, true, func(_ *Options, c *idem.Client, boom func(string)) {
		c.OnAttempt = func(_ context.Context, ai idem.AttemptInfo) { boom(ai.URL) }
	}},
	{"OnAttempt after a success", "Client.OnAttempt", http.StatusCreated, 1, true, true, func(_ *Options, c *idem.Client, boom func(string)) {
		c.OnAttempt = func(_ context.Context, ai idem.AttemptInfo) { boom(ai.URL) }
	}},
	{"Logger", "Client.Logger", 0, 1, false, true, func(_ *Options, c *idem.Client, boom func(string)) {
		c.Logger = slog.New(boomHandler{boom})
	}},
	{"Tracer.StartDrain", "Options.Tracer's StartDrain", 0, 0, false, true, func(o *Options, _ *idem.Client, boom func(string)) {
		o.Tracer = funcTracer(func(ctx context.Context, r *Record) (context.Context, func(idem.Action, idem.Outcome, error)) {
			boom(r.Intent.URL())
			return ctx, nil
		})
	}},
	{"the Tracer's end", "the end Options.Tracer's StartDrain returned", 0, 1, false, false, func(o *Options, _ *idem.Client, boom func(string)) {
		o.Tracer = funcTracer(func(ctx context.Context, r *Record) (context.Context, func(idem.Action, idem.Outcome, error)) {
			u := r.Intent.URL()
			return ctx, func(idem.Action, idem.Outcome, error) { boom(u) }
		})
	}},
}

// TestHookPanicHoldsItsLane: a user hook that panics on a drainer's
// goroutine does not end the process: the panic is recovered where the
// drainer runs the attempt, the record's lane is held (EventLaneHeld, its
// error naming the hook and matching ErrHookPanicked), the record is kept
// with its key, not sent again while held, and the other lane's record is
// sent and done. Once the hook is mended, Wake sends the held records, the
// head under the key it had.
func TestHookPanicHoldsItsLane(t *testing.T) {
	for _, tt := range hookPanics {
		t.Run(tt.name, func(t *testing.T) {
			var broken atomic.Bool
			broken.Store(true)
			var panics atomic.Int32
			boom := func(u string) {
				if broken.Load() && strings.HasSuffix(u, "/a") {
					panics.Add(1)
					panic("boom in lane a")
				}
			}
			var keys keysByBody
			srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request, body string, _ int) {
				keys.add(body, r.Header.Get("Idempotency-Key"))
				if r.URL.Path == "/a" && broken.Load() {
					w.WriteHeader(cmp.Or(tt.status, http.StatusTooManyRequests)) // a retry for Veto to judge
					return
				}
				w.WriteHeader(http.StatusCreated)
			})
			client := &idem.Client{}
			var ev events
			clk := newClock()
			opts := Options{Client: client, Notify: ev.notify, now: clk.Now, Workers: 2}
			tt.set(&opts, client, boom)
			q, _ := openTest(t, opts)
			q.sig.init()
			ctx := waitCtx(t)
			a1, err := q.Enqueue(ctx, post(t, srv.URL+"/a", 1, idem.WithLane("a")))
			require.NoError(t, err)
			a2, err := q.Enqueue(ctx, post(t, srv.URL+"/a", 2, idem.WithLane("a")))
			require.NoError(t, err)
			b, err := q.Enqueue(ctx, post(t, srv.URL+"/b", 3, idem.WithLane("b")))
			require.NoError(t, err)
			run(t, q)

			rb, err := q.Wait(ctx, b)
			require.NoError(t, err)
			assert.Equal(t, Done, rb.State, "the other lane's record")
			assert.Equal(t, idem.Applied, rb.Outcome)
			require.Eventually(t, func() bool { return ev.count(EventLaneHeld) == 1 }, 5*time.Second, time.Millisecond)
			held := heldEvents(&ev)[0]
			assert.Equal(t, "a", held.Lane)
			require.ErrorIs(t, held.Err, ErrHookPanicked)
			t.Log(held.Err)
			assert.Contains(t, held.Err.Error(), tt.hook, "the error names the hook")
			assert.Contains(t, held.Err.Error(), "hookpanic_test.go:", "and where it panicked")
			assert.Contains(t, held.Err.Error(), "boom in lane a", "and what it panicked with")

			// Held, the lane stays out of the schedule however long it waits.
			clk.Add(time.Hour)
			waitRest(t, q, clk.Now())
			assert.Equal(t, int32(1), panics.Load(), "the hook panicked once")
			assert.Equal(t, tt.sent, keys.count(`{"payment":"p-1"}`), "requests of lane a's head")
			assert.Zero(t, keys.count(`{"payment":"p-2"}`), "the record behind it waits")
			assert.Equal(t, 1, keys.count(`{"payment":"p-3"}`), "the other lane's record, sent once")
			r1, err := q.Get(ctx, a1)
			require.NoError(t, err)
			assert.Equal(t, Pending, r1.State, "kept, not settled")
			assert.Equal(t, tt.doubt, r1.InDoubt, "InDoubt")
			counted := 0
			if tt.sent > 0 || tt.doubt { // the attempt was made, or may have been
				counted = 1
			}
			assert.Equal(t, counted, r1.NumAttempts, "attempts counted")
			if tt.recorded {
				assert.Contains(t, r1.LastError, tt.hook, "the record says why it waits")
			}

			broken.Store(false)
			q.Wake()
			for _, id := range []ID{a1, a2} {
				r, err := q.Wait(ctx, id)
				require.NoError(t, err)
				assert.Equal(t, Done, r.State, r.Reason)
			}
			assert.Equal(t, 1, keys.count(`{"payment":"p-1"}`), "the head's requests carried one key")
			assert.Equal(t, 1, ev.count(EventLaneHeld))
		})
	}
}

// TestHookPanicAcrossRestarts: a Veto that panics on every start costs the
// record one attempt per start, under its key, and the process survives
// each; the other lane's record is sent once, in the first run.
func TestHookPanicAcrossRestarts(t *testing.T) {
	var keys keysByBody
	srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request, body string, _ int) {
		keys.add(body, r.Header.Get("Idempotency-Key"))
		if r.URL.Path == "/a" {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	var vetoes atomic.Int32
	var ev atomic.Pointer[events] // this start's
	opts := fast(&idem.Client{})
	opts.Notify = func(e Event) { ev.Load().notify(e) }
	opts.Policy.Veto = func(context.Context, idem.AttemptInfo) bool {
		vetoes.Add(1)
		var m map[string]int
		m["boom"]++ // a programmer's bug
		return false
	}
	path := filepath.Join(t.TempDir(), "q.db")
	ctx := waitCtx(t)
	var a, b ID
	const starts = 3
	for i := range starts {
		ev.Store(new(events))
		q := reopen(t, path, opts)
		q.sig.init()
		if i == 0 {
			var err error
			a, err = q.Enqueue(ctx, post(t, srv.URL+"/a", 1, idem.WithLane("a")))
			require.NoError(t, err)
			b, err = q.Enqueue(ctx, post(t, srv.URL+"/b", 2, idem.WithLane("b")))
			require.NoError(t, err)
		}
		runCtx, stop := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- q.Run(runCtx) }()
		require.Eventually(t, func() bool { return ev.Load().count(EventLaneHeld) == 1 }, 5*time.Second, time.Millisecond)
		rb, err := q.Wait(ctx, b)
		require.NoError(t, err)
		assert.Equal(t, Done, rb.State)
		waitRest(t, q, q.now())
		stop()
		require.NoError(t, <-done)
		require.NoError(t, q.Close())
		assert.Equal(t, int32(i+1), vetoes.Load(), "start %d: one veto, one panic", i+1)
		assert.Equal(t, i+1, len(srv.requests())-1, "start %d: one request of lane a per start", i+1)
	}
	q := reopen(t, path, Options{ReadOnly: true})
	ra, err := q.Get(ctx, a)
	require.NoError(t, err)
	assert.Equal(t, Pending, ra.State)
	assert.True(t, ra.InDoubt, "500s left it in doubt")
	assert.Equal(t, starts, ra.NumAttempts)
	assert.Contains(t, ra.LastError, "Options.Policy.Veto")
	rb, err := q.Get(ctx, b)
	require.NoError(t, err)
	assert.Equal(t, Done, rb.State)
	assert.Equal(t, 1, keys.count(`{"payment":"p-1"}`), "every request of lane a under one key")
	assert.Equal(t, 1, keys.count(`{"payment":"p-2"}`))
}

// heldEvents returns the EventLaneHeld events ev collected.
func heldEvents(ev *events) []Event {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	var out []Event
	for _, e := range ev.got {
		if e.Kind == EventLaneHeld {
			out = append(out, e)
		}
	}
	return out
}
