// Package queuetest is the behaviour every Store behind a queue.Queue must
// give its users, as one test suite, as testing/fstest is for an fs.FS: the
// bbolt store runs it in package queue's tests, pgqueue's store runs it, and
// a store of your own (queue.New takes any queue.Store) runs it the same way,
// so that a queue means one thing whatever keeps its records:
//
//	func TestContract(t *testing.T) {
//		queuetest.Run(t, func(t *testing.T, opts queue.Options) *queue.Queue {
//			q, err := queue.New(newMyStore(t), opts)
//			require.NoError(t, err)
//			t.Cleanup(func() { q.Close() })
//			return q
//		})
//	}
//
// It uses only the public API of queue.Queue, on real time and loopback
// servers the suite starts itself; it takes a few seconds.
package queuetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/idemtest"
	"github.com/idem-go/idem/queue"
)

// Opener returns a new, empty queue with opts, closed when the test ends.
type Opener func(t *testing.T, opts queue.Options) *queue.Queue

// Run runs every case of the contract against the queues open makes.
func Run(t *testing.T, open Opener) {
	cases := []struct {
		name string
		fn   func(*testing.T, Opener)
	}{
		{"AppliedOnce", appliedOnce},
		{"LaneOrder", laneOrder},
		{"LanesIndependent", lanesIndependent},
		{"SuppliedKeyDedupe", suppliedKeyDedupe},
		{"NeedsKey", needsKey},
		{"Outcomes", outcomes},
		{"HorizonExpires", horizonExpires},
		{"MaxAgeExpires", maxAgeExpires},
		{"LaneHeldAfter401", laneHeldAfter401},
		{"LaneHeldAfterPanic", laneHeldAfterPanic},
		{"DiscardAndResubmit", discardAndResubmit},
		{"ResubmitRacesSettle", resubmitRacesSettle},
		{"ForceResubmit", forceResubmit},
		{"CountsAndList", countsAndList},
		{"ExactlyOnceUnderFaults", exactlyOnceUnderFaults},
		{"TraceRoundTrip", traceRoundTrip},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.fn(t, open) })
	}
}

// fast is a policy of quick retries, for tests.
func fast() idem.Policy {
	return idem.Policy{BaseDelay: 5 * time.Millisecond, MaxDelay: 20 * time.Millisecond, AttemptTimeout: 2 * time.Second}
}

// recorder is a loopback server that answers by a script and records what
// it was sent.
type recorder struct {
	*httptest.Server
	mu   sync.Mutex // guards seen
	seen []seen
}

type seen struct {
	method, path, key, body string
}

// newRecorder starts a server whose answer to the n-th request (from 0) for
// a path is answer's.
func newRecorder(t *testing.T, answer func(w http.ResponseWriter, r *http.Request, n int)) *recorder {
	t.Helper()
	rec := &recorder{}
	rec.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rec.mu.Lock()
		n := 0
		for _, s := range rec.seen {
			if s.path == r.URL.Path {
				n++
			}
		}
		rec.seen = append(rec.seen, seen{r.Method, r.URL.Path, r.Header.Get("Idempotency-Key"), string(body)})
		rec.mu.Unlock()
		answer(w, r, n)
	}))
	t.Cleanup(rec.Close)
	return rec
}

func (rec *recorder) requests() []seen {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return slices.Clone(rec.seen)
}

// hangup closes the connection without an answer.
func hangup(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err == nil {
		conn.Close()
	}
}

// drain runs q until the test ends.
func drain(t *testing.T, q *queue.Queue) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- q.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, queue.ErrClosed) {
			t.Errorf("Run: %v", err)
		}
	})
}

func waitCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func intent(t *testing.T, method, url string, body string, opts ...idem.IntentOption) *idem.Intent {
	t.Helper()
	in, err := idem.NewIntent(method, url, []byte(body), opts...)
	require.NoError(t, err)
	return in
}

// appliedOnce: an enqueued intent is sent with its key and settles done,
// applied, with the answer stored.
func appliedOnce(t *testing.T, open Opener) {
	srv := newRecorder(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"id":"pay_1"}`)
	})
	var settled []queue.Event
	var mu sync.Mutex
	q := open(t, queue.Options{Policy: fast(), Notify: func(e queue.Event) {
		if e.Kind == queue.EventSettled {
			mu.Lock()
			settled = append(settled, e)
			mu.Unlock()
		}
	}})
	ctx := waitCtx(t)
	in := intent(t, "POST", srv.URL+"/payments", `{"amount":100}`)
	id, err := q.Enqueue(ctx, in)
	require.NoError(t, err)
	drain(t, q)
	r, err := q.Wait(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, queue.Done, r.State)
	assert.Equal(t, idem.Applied, r.Outcome)
	assert.Equal(t, 1, r.NumAttempts)
	require.NotNil(t, r.Result)
	assert.Equal(t, http.StatusCreated, r.Result.Status)
	assert.Equal(t, `{"id":"pay_1"}`, string(r.Result.Body))
	assert.False(t, r.FirstSentAt.IsZero(), "an attempt went out")
	reqs := srv.requests()
	require.Len(t, reqs, 1)
	assert.Equal(t, in.Key(), reqs[0].key)
	assert.Equal(t, `{"amount":100}`, reqs[0].body)
	require.NoError(t, q.Close()) // every event is delivered when it returns
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, settled, 1, "one EventSettled")
	assert.Equal(t, id, settled[0].Record.ID)
}

// laneOrder: records of one lane are sent one at a time, in enqueue order,
// even when an earlier one needs several attempts.
func laneOrder(t *testing.T, open Opener) {
	srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if r.URL.Path == "/p/1" && n < 2 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	q := open(t, queue.Options{Policy: fast()})
	ctx := waitCtx(t)
	var ids []queue.ID
	for i := range 5 {
		id, err := q.Enqueue(ctx, intent(t, "POST", srv.URL+"/p/"+strconv.Itoa(i), "x", idem.WithLane("acct-1")))
		require.NoError(t, err)
		ids = append(ids, id)
	}
	drain(t, q)
	for _, id := range ids {
		r, err := q.Wait(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, queue.Done, r.State)
	}
	var order []string
	for _, s := range srv.requests() {
		order = append(order, s.path)
	}
	assert.Equal(t, []string{"/p/0", "/p/1", "/p/1", "/p/1", "/p/2", "/p/3", "/p/4"}, order)
}

// lanesIndependent: a lane whose head waits on the server's Retry-After does
// not hold up another lane.
func lanesIndependent(t *testing.T, open Opener) {
	srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		if r.URL.Path == "/slow" {
			w.Header().Set("Retry-After", "3600")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	q := open(t, queue.Options{Policy: fast()})
	ctx := waitCtx(t)
	slow, err := q.Enqueue(ctx, intent(t, "POST", srv.URL+"/slow", "x", idem.WithLane("a")))
	require.NoError(t, err)
	fastID, err := q.Enqueue(ctx, intent(t, "POST", srv.URL+"/fast", "y", idem.WithLane("b")))
	require.NoError(t, err)
	drain(t, q)
	r, err := q.Wait(ctx, fastID)
	require.NoError(t, err)
	assert.Equal(t, queue.Done, r.State)
	var s *queue.Record
	require.Eventually(t, func() bool {
		s, err = q.Get(context.Background(), slow)
		return err == nil && s.State == queue.Pending && s.NumAttempts == 1
	}, 5*time.Second, 5*time.Millisecond, "the slow lane's first attempt")
	assert.False(t, s.State.Settled(), "the slow lane waits an hour, as its server asked")
	assert.Equal(t, http.StatusTooManyRequests, s.LastStatus)
	assert.True(t, s.NextAttempt.After(time.Now().Add(50*time.Minute)), "next attempt %v, after Retry-After", s.NextAttempt)
}

// suppliedKeyDedupe: enqueuing the same operation under a supplied key
// again gives the queued record; another operation under it is refused.
func suppliedKeyDedupe(t *testing.T, open Opener) {
	q := open(t, queue.Options{Policy: fast()})
	ctx := waitCtx(t)
	const url = "http://127.0.0.1:1/orders"
	first, err := q.Enqueue(ctx, intent(t, "POST", url, "a", idem.WithKey("order-42")))
	require.NoError(t, err)
	again, err := q.Enqueue(ctx, intent(t, "POST", url, "a", idem.WithKey("order-42")))
	require.NoError(t, err)
	assert.Equal(t, first, again, "a producer enqueuing again after a crash gets its record")
	_, err = q.Enqueue(ctx, intent(t, "POST", url, "b", idem.WithKey("order-42")))
	assert.ErrorIs(t, err, queue.ErrKeyInUse)
	c, err := q.Counts(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 1, c[queue.Pending])
}

// needsKey: a POST without a key could not be resent safely.
func needsKey(t *testing.T, open Opener) {
	q := open(t, queue.Options{})
	_, err := q.Enqueue(waitCtx(t), intent(t, "POST", "http://127.0.0.1:1/x", "a", idem.WithoutKey()))
	assert.ErrorIs(t, err, queue.ErrNeedsKey)
	_, err = q.Enqueue(waitCtx(t), nil)
	assert.ErrorIs(t, err, idem.ErrInvalidIntent)
}

// outcomes: what a record settles as follows Do's contract.
func outcomes(t *testing.T, open Opener) {
	tests := []struct {
		name    string
		method  string
		answer  func(w http.ResponseWriter, n int)
		state   queue.State
		outcome idem.Outcome
	}{
		{"rejected", "POST", func(w http.ResponseWriter, _ int) { w.WriteHeader(400) }, queue.Failed, idem.NotApplied},
		{"ambiguous then rejected", "POST", func(w http.ResponseWriter, n int) {
			if n == 0 {
				w.WriteHeader(502)
				return
			}
			w.WriteHeader(400)
		}, queue.Failed, idem.Unknown},
		{"keyed 409 until out of attempts", "POST", func(w http.ResponseWriter, _ int) { w.WriteHeader(409) }, queue.Failed, idem.Unknown},
		{"DELETE 404 after a lost answer", "DELETE", func(w http.ResponseWriter, n int) {
			if n == 0 {
				hangup(w)
				return
			}
			w.WriteHeader(404)
		}, queue.Done, idem.AlreadyApplied},
		{"key reused", "POST", func(w http.ResponseWriter, _ int) { w.WriteHeader(422) }, queue.Failed, idem.NotApplied},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newRecorder(t, func(w http.ResponseWriter, _ *http.Request, n int) { tt.answer(w, n) })
			q := open(t, queue.Options{Policy: fast(), MaxAttempts: 3})
			ctx := waitCtx(t)
			id, err := q.Enqueue(ctx, intent(t, tt.method, srv.URL+"/r/1", "x"))
			require.NoError(t, err)
			drain(t, q)
			r, err := q.Wait(ctx, id)
			require.NoError(t, err)
			assert.Equal(t, tt.state, r.State)
			assert.Equal(t, tt.outcome, r.Outcome, "reason: %s", r.Reason)
		})
	}
}

// horizonExpires: a record that could still be sent only after the server
// may have forgotten its key expires instead, Unknown when it was sent.
func horizonExpires(t *testing.T, open Opener) {
	srv := newRecorder(t, func(w http.ResponseWriter, _ *http.Request, _ int) { w.WriteHeader(503) })
	p := fast()
	p.AttemptTimeout = 200 * time.Millisecond
	p.BaseDelay, p.MaxDelay = 100*time.Millisecond, 100*time.Millisecond
	q := open(t, queue.Options{Policy: p, Retention: 1500 * time.Millisecond, Margin: time.Second})
	ctx := waitCtx(t)
	id, err := q.Enqueue(ctx, intent(t, "POST", srv.URL+"/p", "x"))
	require.NoError(t, err)
	drain(t, q)
	r, err := q.Wait(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, queue.Expired, r.State)
	assert.Equal(t, idem.Unknown, r.Outcome, "a 503 may have applied")
	limit := r.FirstSentAt.Add(1500*time.Millisecond - time.Second)
	assert.NotEmpty(t, srv.requests())
	assert.False(t, r.LastAttemptAt.Add(p.AttemptTimeout).After(limit),
		"last attempt at %v could end after the key's horizon %v", r.LastAttemptAt, limit)
}

// maxAgeExpires: an intent too old to send expires without an attempt,
// NotApplied. Its MaxAge is shorter than one attempt's timeout, so no attempt
// could end within it: it is too old at once, with no wait.
func maxAgeExpires(t *testing.T, open Opener) {
	srv := newRecorder(t, func(w http.ResponseWriter, _ *http.Request, _ int) { w.WriteHeader(201) })
	q := open(t, queue.Options{Policy: fast(), MaxAge: 50 * time.Millisecond})
	ctx := waitCtx(t)
	id, err := q.Enqueue(ctx, intent(t, "POST", srv.URL+"/p", "x"))
	require.NoError(t, err)
	drain(t, q)
	r, err := q.Wait(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, queue.Expired, r.State)
	assert.Equal(t, idem.NotApplied, r.Outcome)
	assert.Empty(t, srv.requests())
}

// laneHeldAfter401: a 401 gets one more attempt with fresh credentials, then
// the lane is held, reported, and resumed by Wake.
func laneHeldAfter401(t *testing.T, open Opener) {
	var mu sync.Mutex
	authorized := false
	srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		mu.Lock()
		ok := authorized
		mu.Unlock()
		if !ok || r.Header.Get("Authorization") != "Bearer good" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	held := make(chan string, 4)
	client := &idem.Client{Authorize: func(_ context.Context, r *http.Request) error {
		r.Header.Set("Authorization", "Bearer good")
		return nil
	}}
	q := open(t, queue.Options{Client: client, Policy: fast(), Notify: func(e queue.Event) {
		if e.Kind == queue.EventLaneHeld {
			held <- e.Lane
		}
	}})
	ctx := waitCtx(t)
	id, err := q.Enqueue(ctx, intent(t, "POST", srv.URL+"/p", "x", idem.WithLane("acct-9")))
	require.NoError(t, err)
	drain(t, q)
	select {
	case lane := <-held:
		assert.Equal(t, "acct-9", lane)
	case <-ctx.Done():
		t.Fatal("no EventLaneHeld")
	}
	assert.Len(t, srv.requests(), 2, "one more attempt with fresh credentials, then held")
	mu.Lock()
	authorized = true
	mu.Unlock()
	q.Wake()
	r, err := q.Wait(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, queue.Done, r.State)
}

// laneHeldAfterPanic: a Veto that panics holds its record's lane, reported
// with ErrHookPanicked, the record kept pending with its key, while the
// other lane drains; once the Veto is mended, Wake sends the record again
// under its key.
func laneHeldAfterPanic(t *testing.T, open Opener) {
	var broken atomic.Bool
	broken.Store(true)
	srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		if r.URL.Path == "/a" && broken.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	held := make(chan queue.Event, 4)
	p := fast()
	p.Veto = func(context.Context, idem.AttemptInfo) bool {
		if broken.Load() {
			panic("a programmer's bug")
		}
		return false
	}
	q := open(t, queue.Options{Policy: p, Notify: func(e queue.Event) {
		if e.Kind == queue.EventLaneHeld {
			held <- e
		}
	}})
	ctx := waitCtx(t)
	a, err := q.Enqueue(ctx, intent(t, "POST", srv.URL+"/a", "x", idem.WithLane("a")))
	require.NoError(t, err)
	b, err := q.Enqueue(ctx, intent(t, "POST", srv.URL+"/b", "y", idem.WithLane("b")))
	require.NoError(t, err)
	drain(t, q)
	select {
	case e := <-held:
		assert.Equal(t, "a", e.Lane)
		assert.ErrorIs(t, e.Err, queue.ErrHookPanicked)
		assert.ErrorContains(t, e.Err, "Options.Policy.Veto")
	case <-ctx.Done():
		t.Fatal("no EventLaneHeld")
	}
	rb, err := q.Wait(ctx, b)
	require.NoError(t, err)
	assert.Equal(t, queue.Done, rb.State, "the other lane drains")
	ra, err := q.Get(ctx, a)
	require.NoError(t, err)
	assert.Equal(t, queue.Pending, ra.State, "kept")
	assert.Contains(t, ra.LastError, "Options.Policy.Veto")
	broken.Store(false)
	q.Wake()
	ra, err = q.Wait(ctx, a)
	require.NoError(t, err)
	assert.Equal(t, queue.Done, ra.State)
	var keys []string
	for _, s := range srv.requests() {
		if s.path == "/a" {
			keys = append(keys, s.key)
		}
	}
	require.Len(t, keys, 2, "one request before the panic, one after Wake")
	assert.Equal(t, keys[0], keys[1], "under one key")
}

// discardAndResubmit: Discard removes a pending record and wakes its
// waiters; Resubmit queues an expired one again under a new key, once.
func discardAndResubmit(t *testing.T, open Opener) {
	srv := newRecorder(t, func(w http.ResponseWriter, _ *http.Request, _ int) { w.WriteHeader(201) })
	q := open(t, queue.Options{Policy: fast(), MaxAge: 50 * time.Millisecond})
	ctx := waitCtx(t)

	gone, err := q.Enqueue(ctx, intent(t, "POST", srv.URL+"/gone", "x"))
	require.NoError(t, err)
	waited := make(chan error, 1)
	go func() {
		_, err := q.Wait(ctx, gone)
		waited <- err
	}()
	time.Sleep(20 * time.Millisecond) // Wait is waiting
	require.NoError(t, q.Discard(context.Background(), gone))
	assert.ErrorIs(t, <-waited, queue.ErrDiscarded)
	_, err = q.Get(context.Background(), gone)
	assert.ErrorIs(t, err, queue.ErrNotFound)

	old := intent(t, "POST", srv.URL+"/old", "y")
	id, err := q.Enqueue(ctx, old)
	require.NoError(t, err)
	drain(t, q) // expires at once: MaxAge is shorter than an attempt's timeout
	r, err := q.Wait(ctx, id)
	require.NoError(t, err)
	require.Equal(t, queue.Expired, r.State)
	_, err = q.Resubmit(ctx, gone)
	assert.ErrorIs(t, err, queue.ErrNotFound)
	fresh, err := q.Resubmit(ctx, id)
	require.NoError(t, err)
	_, err = q.Resubmit(ctx, id)
	assert.ErrorIs(t, err, queue.ErrNotResubmittable, "once")
	r, err = q.Get(context.Background(), id)
	require.NoError(t, err)
	assert.Equal(t, fresh, r.ResubmittedAs)
	n, err := q.Get(context.Background(), fresh)
	require.NoError(t, err)
	assert.NotEqual(t, old.Key(), n.Intent.Key(), "a new key: the operator's decision")
	assert.Equal(t, old.Body(), n.Intent.Body())
}

// countsAndList: Counts and List see every record by state, List in ID
// order with paging.
func countsAndList(t *testing.T, open Opener) {
	q := open(t, queue.Options{})
	ctx := waitCtx(t)
	var ids []queue.ID
	for i := range 5 {
		id, err := q.Enqueue(ctx, intent(t, "POST", fmt.Sprintf("http://127.0.0.1:1/p/%d", i), "x"))
		require.NoError(t, err)
		ids = append(ids, id)
	}
	c, err := q.Counts(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 5, c[queue.Pending])
	page, err := q.List(context.Background(), queue.Pending, 0, 3)
	require.NoError(t, err)
	require.Len(t, page, 3)
	next, err := q.List(context.Background(), queue.Pending, page[2].ID, 3)
	require.NoError(t, err)
	require.Len(t, next, 2)
	var got []queue.ID
	for _, r := range append(page, next...) {
		got = append(got, r.ID)
	}
	assert.Equal(t, ids, got)
	done, err := q.List(context.Background(), queue.Done, 0, 10)
	require.NoError(t, err)
	assert.Empty(t, done)
	_, err = q.List(context.Background(), queue.State(99), 0, 1)
	assert.Error(t, err)
}

// exactlyOnceUnderFaults: against a faithful server that drops answers
// after committing and refuses connections, every intent takes effect once.
func exactlyOnceUnderFaults(t *testing.T, open Opener) {
	srv := idemtest.New(idemtest.Options{
		RequireKey: true,
		Faults: idemtest.RandomFaults(7, map[idemtest.Fault]float64{
			idemtest.FaultCommitThenDrop: 0.2, idemtest.FaultCloseBeforeRead: 0.1,
		}),
		RefuseDial: idemtest.RandomRefusals(7, 0.1),
	})
	require.NoError(t, srv.Start())
	t.Cleanup(srv.Close)
	tr := &http.Transport{DialContext: srv.DialContext, DisableKeepAlives: true}
	p := fast()
	p.AttemptTimeout = time.Second
	q := open(t, queue.Options{Client: &idem.Client{HTTPClient: &http.Client{Transport: tr}}, Policy: p, Workers: 4})
	ctx := waitCtx(t)
	var ins []*idem.Intent
	var ids []queue.ID
	for i := range 40 {
		in := intent(t, "POST", srv.URL()+"/payments", fmt.Sprintf(`{"p":%d}`, i), idem.WithLane(strconv.Itoa(i%5)))
		id, err := q.Enqueue(ctx, in)
		require.NoError(t, err)
		ins, ids = append(ins, in), append(ids, id)
	}
	drain(t, q)
	for i, id := range ids {
		r, err := q.Wait(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, queue.Done, r.State, "record %d: %s", id, r.Reason)
		assert.Equal(t, 1, srv.EffectsForKey(ins[i].Key()), "record %d applied once", id)
	}
}

// traceKey carries a producer's traceparent in a context.
type traceKey struct{}

// tracer injects the traceparent in traceKey and sends the Trace each drain
// starts with on started.
type tracer struct{ started chan map[string]string }

func (tr tracer) Inject(ctx context.Context) map[string]string {
	if tp, ok := ctx.Value(traceKey{}).(string); ok {
		return map[string]string{"traceparent": tp}
	}
	return nil
}

func (tr tracer) StartDrain(ctx context.Context, r *queue.Record) (context.Context, func(idem.Action, idem.Outcome, error)) {
	tr.started <- r.Trace
	return ctx, func(idem.Action, idem.Outcome, error) {}
}

// traceRoundTrip: the Trace that Options.Tracer injects at Enqueue is
// stored with the record (Get, Wait, List), reaches StartDrain when the
// record comes to the head of its lane, and a Resubmit without one of its
// own keeps it.
func traceRoundTrip(t *testing.T, open Opener) {
	const parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	want := map[string]string{"traceparent": parent}
	srv := newRecorder(t, func(w http.ResponseWriter, _ *http.Request, _ int) { w.WriteHeader(http.StatusBadRequest) })
	tr := tracer{started: make(chan map[string]string, 8)}
	q := open(t, queue.Options{Policy: fast(), Tracer: tr})
	ctx := waitCtx(t)
	id, err := q.Enqueue(context.WithValue(ctx, traceKey{}, parent), intent(t, "POST", srv.URL+"/p", "x"))
	require.NoError(t, err)
	untraced, err := q.Enqueue(ctx, intent(t, "POST", srv.URL+"/p", "y"))
	require.NoError(t, err)
	r, err := q.Get(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, want, r.Trace, "Get")

	drain(t, q)
	var started []map[string]string
	for range 2 {
		select {
		case got := <-tr.started:
			started = append(started, got)
		case <-ctx.Done():
			t.Fatal("no drain started")
		}
	}
	assert.ElementsMatch(t, []map[string]string{want, nil}, started, "the Trace each StartDrain got")
	r, err = q.Wait(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, queue.Failed, r.State)
	assert.Equal(t, want, r.Trace, "the settled record")
	r, err = q.Wait(ctx, untraced)
	require.NoError(t, err)
	assert.Nil(t, r.Trace, "a record enqueued under a context without trace")
	list, err := q.List(ctx, queue.Failed, 0, 1)
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.Equal(t, want, list[0].Trace, "List")

	fresh, err := q.Resubmit(ctx, id)
	require.NoError(t, err)
	r, err = q.Get(ctx, fresh)
	require.NoError(t, err)
	assert.Equal(t, want, r.Trace, "a Resubmit under a context without trace keeps the record's")
}
