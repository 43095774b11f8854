package queue

import (
	"testing"
	"time"
)

// signalWait bounds every wait on a signal; a wait that ends there fails its
// test.
const signalWait = 5 * time.Second

// next waits for a signal s gives that ok accepts, dropping others.
func next[T any](t *testing.T, s *testSignal[T], ok func(T) bool) T {
	t.Helper()
	limit := time.NewTimer(signalWait)
	defer limit.Stop()
	for {
		select {
		case v := <-s.c:
			if ok(v) {
				return v
			}
		case <-limit.C:
			t.Fatalf("no signal after %v", signalWait)
		}
	}
}

// flush drops the signals s gave so far.
func flush[T any](s *testSignal[T]) {
	for {
		select {
		case <-s.c:
		default:
			return
		}
	}
}

// waitRest waits, from now on, for a drainer pass at a clock reading of at
// least at that found nothing to start with every worker free. With the
// test's clock stopped, the drainer starts nothing after that until it is
// woken: what it has sent by then is all it sends. A pass with every worker
// free comes after the release of every worker that was busy when
// waitRest was called.
func waitRest(t *testing.T, q *Queue, at time.Time) {
	t.Helper()
	flush(&q.sig.idle)
	next(t, &q.sig.idle, func(p idlePass) bool {
		return p.free == q.opts.Workers && !p.now.Before(at)
	})
}
