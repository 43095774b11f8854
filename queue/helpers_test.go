package queue

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
)

// url is where intents point in tests that never reach a server: nothing
// listens there.
const url = "http://127.0.0.1:1/payments"

// clock is a settable clock for the queue's now seam.
type clock struct {
	mu sync.Mutex // guards t
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// openTest opens a queue in a temporary directory, closed at cleanup.
func openTest(t *testing.T, opts Options) (*Queue, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "q.db")
	return reopen(t, path, opts), path
}

func reopen(t *testing.T, path string, opts Options) *Queue {
	t.Helper()
	if opts.idle == 0 {
		opts.idle = 5 * time.Millisecond
	}
	if opts.rand == nil {
		opts.rand = func() float64 { return 0.5 }
	}
	q, err := Open(path, opts)
	require.NoError(t, err)
	t.Cleanup(func() { q.Close() })
	return q
}

func post(t *testing.T, url string, i int, opts ...idem.IntentOption) *idem.Intent {
	t.Helper()
	in, err := idem.NewIntent("POST", url, []byte(fmt.Sprintf(`{"payment":"p-%d"}`, i)), opts...)
	require.NoError(t, err)
	return in
}

// run drains q in the background until the test ends.
func run(t *testing.T, q *Queue) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- q.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, ErrClosed) {
			t.Errorf("Run: %v", err)
		}
	})
}

// events collects Notify events.
type events struct {
	mu  sync.Mutex // guards got
	got []Event
}

func (e *events) notify(ev Event) {
	e.mu.Lock()
	e.got = append(e.got, ev)
	e.mu.Unlock()
}

func (e *events) kinds() []EventKind {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []EventKind
	for _, ev := range e.got {
		out = append(out, ev.Kind)
	}
	return out
}

func (e *events) count(k EventKind) int {
	n := 0
	for _, got := range e.kinds() {
		if got == k {
			n++
		}
	}
	return n
}

func waitCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// settleOne opens a queue with opts, drains it, enqueues one payment to url
// and returns its record once settled.
func settleOne(t *testing.T, opts Options, url string) *Record {
	t.Helper()
	q, _ := openTest(t, opts)
	run(t, q)
	ctx := waitCtx(t)
	id, err := q.Enqueue(ctx, post(t, url, 1))
	require.NoError(t, err)
	r, err := q.Wait(ctx, id)
	require.NoError(t, err)
	return r
}
