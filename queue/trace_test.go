package queue

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/binenc"
)

const (
	parentA = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	parentB = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
)

// producerKey carries a producer's traceparent in a context, as a span would.
type producerKey struct{}

// drainKey carries, in an attempt's context, the index of its drain.
type drainKey struct{}

func withParent(ctx context.Context, tp string) context.Context {
	return context.WithValue(ctx, producerKey{}, tp)
}

// ended is one call of a drain's end.
type ended struct {
	drain   int
	action  idem.Action
	outcome idem.Outcome
	err     error
}

// fakeTracer injects the traceparent in producerKey, and records each
// StartDrain and each end, which it also sends on ends.
type fakeTracer struct {
	mu     sync.Mutex // guards starts, over and log
	starts []map[string]string
	over   []int    // how many times each drain's end was called
	log    []string // "start i" and "end i", in turn
	ends   chan ended
}

func newFakeTracer() *fakeTracer { return &fakeTracer{ends: make(chan ended, 64)} }

func (f *fakeTracer) Inject(ctx context.Context) map[string]string {
	if tp, ok := ctx.Value(producerKey{}).(string); ok {
		return map[string]string{"traceparent": tp}
	}
	return nil
}

func (f *fakeTracer) StartDrain(ctx context.Context, r *Record) (context.Context, func(idem.Action, idem.Outcome, error)) {
	f.mu.Lock()
	i := len(f.starts)
	f.starts = append(f.starts, r.Trace)
	f.over = append(f.over, 0)
	f.log = append(f.log, fmt.Sprint("start ", i))
	f.mu.Unlock()
	return context.WithValue(ctx, drainKey{}, i), func(a idem.Action, o idem.Outcome, err error) {
		f.mu.Lock()
		f.over[i]++
		f.log = append(f.log, fmt.Sprint("end ", i))
		f.mu.Unlock()
		f.ends <- ended{i, a, o, err}
	}
}

// next returns the next end called, failing the test after a while.
func (f *fakeTracer) next(t *testing.T) ended {
	t.Helper()
	select {
	case e := <-f.ends:
		return e
	case <-time.After(10 * time.Second):
		t.Fatal("no drain ended")
		return ended{}
	}
}

func (f *fakeTracer) started() ([]map[string]string, []int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]map[string]string(nil), f.starts...), append([]int(nil), f.over...)
}

func TestTraceStoredAndReopened(t *testing.T) {
	ctx := waitCtx(t)
	q, path := openTest(t, Options{Tracer: newFakeTracer()})
	traced, err := q.Enqueue(withParent(ctx, parentA), post(t, "http://127.0.0.1:1/p", 1, idem.WithKey("k1")))
	require.NoError(t, err)
	untraced, err := q.Enqueue(ctx, post(t, "http://127.0.0.1:1/p", 2, idem.WithKey("k2")))
	require.NoError(t, err)

	check := func(q *Queue) {
		t.Helper()
		r, err := q.Get(ctx, traced)
		require.NoError(t, err)
		assert.Equal(t, map[string]string{"traceparent": parentA}, r.Trace)
		r, err = q.Get(ctx, untraced)
		require.NoError(t, err)
		assert.Nil(t, r.Trace, "Inject returned nil")
	}
	check(q)
	require.NoError(t, q.Close())
	check(reopen(t, path, Options{}))

	plain, _ := openTest(t, Options{})
	id, err := plain.Enqueue(withParent(ctx, parentA), post(t, "http://127.0.0.1:1/p", 3, idem.WithKey("k3")))
	require.NoError(t, err)
	r, err := plain.Get(ctx, id)
	require.NoError(t, err)
	assert.Nil(t, r.Trace, "no Tracer, no Trace")
}

// TestTraceDrain checks that each attempt runs under the context StartDrain
// returned, with the stored Trace, and that its end is called once with
// what the queue did.
func TestTraceDrain(t *testing.T) {
	noToken := errors.New("no token")
	tests := []struct {
		name      string
		status    []int // the answers, in turn
		authFails bool  // the first Authorize fails
		want      []ended
	}{
		{"done", []int{200}, false, []ended{{0, idem.ActionDone, idem.Applied, nil}}},
		{"retry then done", []int{503, 200}, false, []ended{
			{0, idem.ActionRetry, idem.NoOutcome, nil}, {1, idem.ActionDone, idem.Applied, nil}}},
		{"stop", []int{400}, false, []ended{{0, idem.ActionStop, idem.NotApplied, nil}}},
		{"no attempt", []int{200}, true, []ended{
			{0, idem.ActionRetry, idem.NoOutcome, noToken}, {1, idem.ActionDone, idem.Applied, nil}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var (
				mu     sync.Mutex // guards n, seen and auths
				n      int
				seen   []any // the drain in each OnAttempt's context
				auths  int
				tracer = newFakeTracer()
				ctx    = waitCtx(t)
			)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				mu.Lock()
				s := tt.status[min(n, len(tt.status)-1)]
				n++
				mu.Unlock()
				w.WriteHeader(s)
			}))
			t.Cleanup(srv.Close)
			c := &idem.Client{HTTPClient: srv.Client()}
			c.OnAttempt = func(actx context.Context, _ idem.AttemptInfo) {
				mu.Lock()
				seen = append(seen, actx.Value(drainKey{}))
				mu.Unlock()
			}
			c.Authorize = func(context.Context, *http.Request) error {
				mu.Lock()
				defer mu.Unlock()
				if auths++; tt.authFails && auths == 1 {
					return noToken
				}
				return nil
			}
			opts := fast(c)
			opts.Tracer = tracer
			q, _ := openTest(t, opts)
			id, err := q.Enqueue(withParent(ctx, parentA), post(t, srv.URL+"/p", 1, idem.WithKey("k")))
			require.NoError(t, err)
			run(t, q)

			for i, want := range tt.want {
				got := tracer.next(t)
				assert.Equal(t, want.drain, got.drain, "end %d: drain", i)
				assert.Equal(t, want.action, got.action, "end %d: action", i)
				assert.Equal(t, want.outcome, got.outcome, "end %d: outcome", i)
				assert.ErrorIs(t, got.err, want.err, "end %d: err", i)
				if want.err == nil {
					assert.NoError(t, got.err, "end %d: err", i)
				}
			}
			r, err := q.Wait(ctx, id)
			require.NoError(t, err)
			assert.Equal(t, tt.want[len(tt.want)-1].outcome, r.Outcome)

			starts, over := tracer.started()
			require.Len(t, starts, len(tt.want), "one StartDrain an attempt")
			for i, tr := range starts {
				assert.Equal(t, map[string]string{"traceparent": parentA}, tr, "StartDrain %d: Trace", i)
				assert.Equal(t, 1, over[i], "drain %d ended %d times, want once", i, over[i])
			}
			mu.Lock()
			defer mu.Unlock()
			want := []any{}
			for i, e := range tt.want {
				if e.err == nil { // an attempt was made
					want = append(want, i)
				}
			}
			assert.Equal(t, want, append([]any{}, seen...), "the drain each OnAttempt saw in its context")
		})
	}
}

// tracedQueue opens a queue with a fake Tracer, whose client sends to a
// server answering 200.
func tracedQueue(t *testing.T) (*Queue, *fakeTracer, *httptest.Server) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	t.Cleanup(srv.Close)
	tracer := newFakeTracer()
	opts := fast(&idem.Client{HTTPClient: srv.Client()})
	opts.Tracer = tracer
	q, _ := openTest(t, opts)
	return q, tracer, srv
}

func TestTraceUntracedRecordDrains(t *testing.T) {
	q, tracer, srv := tracedQueue(t)
	ctx := waitCtx(t)
	_, err := q.Enqueue(ctx, post(t, srv.URL+"/p", 1, idem.WithKey("k")))
	require.NoError(t, err)
	run(t, q)
	assert.Equal(t, idem.ActionDone, tracer.next(t).action)
	starts, _ := tracer.started()
	require.Len(t, starts, 1)
	assert.Nil(t, starts[0])
}

// TestTraceLaneStreak drains a lane whose records are leased each with the
// settle of the one before (settleDone): each drain ends before the next
// starts.
func TestTraceLaneStreak(t *testing.T) {
	q, tracer, srv := tracedQueue(t)
	ctx := waitCtx(t)
	const n = 4
	for i := range n {
		_, err := q.Enqueue(withParent(ctx, parentA), post(t, srv.URL+"/p", i, idem.WithKey(fmt.Sprint("k", i)), idem.WithLane("l")))
		require.NoError(t, err)
	}
	run(t, q)
	var want []string
	for i := range n {
		assert.Equal(t, ended{i, idem.ActionDone, idem.Applied, nil}, tracer.next(t))
		want = append(want, fmt.Sprint("start ", i), fmt.Sprint("end ", i))
	}
	tracer.mu.Lock()
	defer tracer.mu.Unlock()
	assert.Equal(t, want, tracer.log)
}

func TestTraceResubmit(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(400) }))
	t.Cleanup(srv.Close)
	opts := fast(&idem.Client{HTTPClient: srv.Client()})
	opts.Tracer = newFakeTracer()
	q, _ := openTest(t, opts)
	run(t, q)
	ctx := waitCtx(t)
	var ids []ID
	for i := range 2 {
		id, err := q.Enqueue(withParent(ctx, parentA), post(t, srv.URL+"/p", i, idem.WithKey("k"+strings.Repeat("x", i))))
		require.NoError(t, err)
		_, err = q.Wait(ctx, id)
		require.NoError(t, err)
		ids = append(ids, id)
	}
	kept, err := q.Resubmit(ctx, ids[0])
	require.NoError(t, err)
	fresh, err := q.Resubmit(withParent(ctx, parentB), ids[1])
	require.NoError(t, err)
	for _, c := range []struct {
		id   ID
		want string
	}{{kept, parentA}, {fresh, parentB}} {
		r, err := q.Get(ctx, c.id)
		require.NoError(t, err)
		assert.Equal(t, map[string]string{"traceparent": c.want}, r.Trace, "record %d", c.id)
	}
}

func TestBoundTrace(t *testing.T) {
	long := func(n int) string { return strings.Repeat("v", n) }
	many := map[string]string{}
	want := map[string]string{}
	for i := range 10 {
		k := string(rune('a' + i))
		many[k] = k
		if i < 8 {
			want[k] = k
		}
	}
	tests := []struct {
		name string
		in   map[string]string
		want map[string]string
	}{
		{"nil", nil, nil},
		{"empty", map[string]string{}, nil},
		{"kept", map[string]string{"traceparent": parentA, "tracestate": long(512)}, map[string]string{"traceparent": parentA, "tracestate": long(512)}},
		{"value too long", map[string]string{"traceparent": parentA, "tracestate": long(513)}, map[string]string{"traceparent": parentA}},
		{"name too long", map[string]string{long(65): "x", long(64): "y"}, map[string]string{long(64): "y"}},
		{"empty name", map[string]string{"": "x"}, nil},
		{"the first 8 by name", many, want},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := BoundTrace(tt.in)
			assert.Equal(t, tt.want, got)
			if got != nil && tt.in != nil {
				got["new"] = "x"
				assert.NotContains(t, tt.in, "new", "BoundTrace returned its argument, not a copy")
			}
		})
	}
}

func TestTraceRecordEncoding(t *testing.T) {
	base := time.Unix(1_800_000_000, 0)
	in, err := idem.NewIntent("POST", "https://h/p", []byte("x"), idem.WithKey("k"), idem.WithLane("l"))
	require.NoError(t, err)
	rec := func(trace map[string]string) *Record {
		return &Record{ID: 1, State: Pending, NextAttempt: base, EnqueuedAt: base, Intent: in, Trace: trace}
	}
	trace := map[string]string{"traceparent": parentA, "tracestate": "a=1", "baggage": "b=2"}
	data, err := rec(trace).MarshalBinary()
	require.NoError(t, err)
	again, err := rec(trace).MarshalBinary()
	require.NoError(t, err)
	assert.Equal(t, data, again, "the encoding is deterministic")
	assert.Equal(t, byte(recordVersion), data[len(recordMagic)], "a traced record is of version 2")
	var got Record
	require.NoError(t, got.UnmarshalBinary(data))
	assert.Equal(t, trace, got.Trace)

	untraced, err := rec(map[string]string{}).MarshalBinary()
	require.NoError(t, err)
	assert.Equal(t, byte(recordVersionUntraced), untraced[len(recordMagic)], "an empty Trace is none")

	_, err = rec(map[string]string{"": "x"}).MarshalBinary()
	assert.Error(t, err, "an empty name")
	_, err = rec(map[string]string{"t": strings.Repeat("v", 513)}).MarshalBinary()
	assert.Error(t, err, "a value too long")
	tooMany := map[string]string{}
	for i := range 9 {
		tooMany[string(rune('a'+i))] = ""
	}
	_, err = rec(tooMany).MarshalBinary()
	assert.Error(t, err, "9 entries")

	// The trace's entries are the last bytes before the seal: replace them.
	one := map[string]string{"t": "v"}
	good, err := rec(one).MarshalBinary()
	require.NoError(t, err)
	tail, err := appendTrace(nil, one)
	require.NoError(t, err)
	body := good[:len(good)-4-len(tail)]
	entry := func(_ []byte, k, v string) []byte { return binenc.Append(binenc.Append(nil, k), v) }
	damaged := []struct {
		name string
		tail []byte
	}{
		{"no entries", []byte{0}},
		{"9 entries", []byte{9}},
		{"count past the data", []byte{2, 1, 't', 1, 'v'}},
		{"empty name", append([]byte{1}, entry(nil, "", "v")...)},
		{"name too long", append([]byte{1}, entry(nil, strings.Repeat("n", 65), "v")...)},
		{"value too long", append([]byte{1}, entry(nil, "t", strings.Repeat("v", 513))...)},
		{"out of order", append(append([]byte{2}, entry(nil, "b", "")...), entry(nil, "a", "")...)},
		{"twice", append(append([]byte{2}, entry(nil, "a", "")...), entry(nil, "a", "")...)},
	}
	for _, d := range damaged {
		t.Run(d.name, func(t *testing.T) {
			data := binenc.Seal(append(append([]byte(nil), body...), d.tail...))
			var r Record
			err := r.UnmarshalBinary(data)
			assert.ErrorIs(t, err, ErrDamaged)
			assert.NotErrorIs(t, err, ErrNewerVersion)
		})
	}
	t.Run("quarantined", func(t *testing.T) {
		b := append([]byte(nil), good...)
		b[len(b)-1] ^= 1 // the seal no longer matches
		var r Record
		err := r.UnmarshalBinary(b)
		require.ErrorIs(t, err, ErrDamaged)
		q := Quarantined(1, b, err, base)
		assert.Nil(t, q.Trace, "a damaged record keeps no Trace")
		require.NotNil(t, q.Intent, "the intact intent is kept")
		assert.Equal(t, "k", q.Intent.Key())
	})
	t.Run("trace flag in version 1", func(t *testing.T) {
		b := append([]byte(nil), good[:len(good)-4]...)
		b[len(recordMagic)] = recordVersionUntraced
		var r Record
		assert.ErrorIs(t, r.UnmarshalBinary(binenc.Seal(b)), ErrDamaged)
	})
	t.Run("version 2 without trace flag", func(t *testing.T) {
		b := append([]byte(nil), untraced[:len(untraced)-4]...)
		b[len(recordMagic)] = recordVersion
		var r Record
		assert.ErrorIs(t, r.UnmarshalBinary(binenc.Seal(b)), ErrDamaged)
	})
}

// TestRecordsBeforeTrace reads records encoded by the build before
// Record.Trace (testdata/records-before-trace.json, the records of
// fzRecords): each decodes to the fields it had, with no Trace, and encodes
// again to the same bytes (but for the order of a stored answer's several
// headers, which the encoding never fixed).
func TestRecordsBeforeTrace(t *testing.T) {
	data, err := os.ReadFile("testdata/records-before-trace.json")
	require.NoError(t, err)
	var golden []struct {
		Hex    string
		Fields fzFields
	}
	require.NoError(t, json.Unmarshal(data, &golden))
	require.NotEmpty(t, golden)
	for _, g := range golden {
		b, err := hex.DecodeString(g.Hex)
		require.NoError(t, err)
		var r Record
		require.NoError(t, r.UnmarshalBinary(b), "record %d", g.Fields.ID)
		assert.Nil(t, r.Trace, "record %d", g.Fields.ID)
		assert.Equal(t, g.Fields, fzRecordFields(&r), "record %d", g.Fields.ID)
		if r.Result == nil || len(r.Result.Header) < 2 {
			again, err := r.MarshalBinary()
			require.NoError(t, err)
			assert.Equal(t, g.Hex, hex.EncodeToString(again), "record %d encodes again otherwise", g.Fields.ID)
		}
	}
}
