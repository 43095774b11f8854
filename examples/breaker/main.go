// Command breaker composes idem with a circuit breaker (sony/gobreaker) and
// a rate limiter (golang.org/x/time/rate), each an http.RoundTripper under
// idem.Client's HTTPClient:
//
//	client := &idem.Client{HTTPClient: &http.Client{Transport: breakerTransport{cb: cb, base: limitTransport{lim: lim, base: base}}}}
//
// An open breaker, and a limiter that cannot grant a token before the
// request's deadline, refuse a request in RoundTrip, before any connection
// is taken: idem's trace of the attempt shows no connection and no header
// written, so the attempt is never sent (idem.ClassNeverSent), whatever the
// method. A keyed POST refused so is retried as any never-sent attempt is
// (backoff, retry budget, Policy.MaxAttempts) and, when the attempts run out
// with nothing else in doubt, ends NotApplied with the breaker's error
// (errors.Is(err, gobreaker.ErrOpenState)), never Unknown. A queue reads
// such attempts as it reads a network that is down: the record stays
// pending, not in doubt, its key's retention not started; after a few in a
// row the drainer probes once each queue.Options.ProbeInterval, at no
// record's cost (queue.EventOffline), and the probe that finds the breaker
// half-open gets through and closes it.
//
// The breaker sits above the limiter, so that a request it refuses spends
// no token, and it does not count the limiter's refusals, which say nothing
// of the server. It counts a 5xx as a failure but hands the response on:
// idem judges the answer, and for a keyed POST a 503 is in doubt. So an
// intent whose earlier attempts reached the failing server stays Unknown
// when the breaker then refuses it; only an intent the breaker refused
// throughout is NotApplied. A queue counts each refused attempt in
// queue.Options.MaxAttempts (no limit by default): with a limit, a breaker
// open long enough fails the record, NotApplied. gobreaker moves to
// half-open only when asked (State, or a request), so OnStateChange cannot
// wake a queue at that moment; an application that wants the probe sooner
// than the drainer's offline delay calls Queue.Wake once State is no longer
// open, as the test does.
//
// The program starts a loopback server that answers 503 for a while (an
// overloaded service, before acting) and then recovers. The breaker opens
// after three failures in a row and half-opens after half a second. It
// prints each intent's outcome: the first, whose attempts reached the
// failing server, is Unknown, as a keyed POST answered 503 is, and resumed
// later under its key; the second, refused by the open breaker, is
// NotApplied; a queued one waits out the open breaker and is applied.
//
// It lives in its own module, so that idem itself depends on neither
// library.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/sony/gobreaker/v2"
	"golang.org/x/time/rate"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/queue"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := run(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "breaker:", err)
		os.Exit(1)
	}
}

// run sends the intents, queues one, and prints what became of each to w.
func run(ctx context.Context, w io.Writer) error {
	out := &printer{w: w}
	s := newShop()
	s.failing.Store(true)
	srv := httptest.NewServer(s)
	defer srv.Close()

	cb := newBreaker(3, 500*time.Millisecond, func(_ string, from, to gobreaker.State) {
		out.printf("breaker: %s -> %s", from, to)
	})
	client := &idem.Client{
		HTTPClient: &http.Client{Transport: newTransport(cb, rate.NewLimiter(200, 10), srv.Client().Transport)},
		Policy:     idem.Policy{MaxAttempts: 4, BaseDelay: 5 * time.Millisecond, MaxDelay: 20 * time.Millisecond},
	}
	url := srv.URL + "/payments"

	// The queue is open before the breaker trips, so that its record meets
	// the breaker open.
	dir, err := os.MkdirTemp("", "idem-breaker-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	q, err := openQueue(filepath.Join(dir, "intents.db"), client, out)
	if err != nil {
		return err
	}
	defer q.Close()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	go q.Run(runCtx)

	out.printf("server: answering 503")
	first, err := newPayment(url, "pay-1")
	if err != nil {
		return err
	}
	firstErr := report(ctx, out, client, "pay-1", first, nil)
	second, err := newPayment(url, "pay-2")
	if err != nil {
		return err
	}
	report(ctx, out, client, "pay-2", second, nil)

	third, err := newPayment(url, "pay-3")
	if err != nil {
		return err
	}
	id, err := q.Enqueue(ctx, third)
	if err != nil {
		return err
	}
	rec, err := firstRefusal(ctx, q, id)
	if err != nil {
		return err
	}
	out.printf("pay-3  queued: %s, last attempt %s (%s), in doubt %t, first sent %s",
		rec.State, rec.LastClass, rec.LastError, rec.InDoubt, sentAt(rec.FirstSentAt))

	s.failing.Store(false)
	out.printf("server: recovered")
	if rec, err = q.Wait(ctx, id); err != nil {
		return err
	}
	out.printf("pay-3  queued: %s, %s", rec.State, rec.Outcome)

	// Under its key, pay-1 is resumed, never sent under a new one: the 503s
	// may have come after the server acted. pay-2 was never sent, so
	// sending it again is safe.
	report(ctx, out, client, "pay-1", first, firstErr)
	report(ctx, out, client, "pay-2", second, nil)
	out.printf("server: %s", s.effects())
	return nil
}

// openQueue opens a queue at path whose attempts go through client, and
// which prints when it goes offline and back.
func openQueue(path string, client *idem.Client, out *printer) (*queue.Queue, error) {
	return queue.Open(path, queue.Options{
		Client: client,
		Policy: idem.Policy{BaseDelay: 20 * time.Millisecond, MaxDelay: 100 * time.Millisecond, AttemptTimeout: 5 * time.Second},
		Notify: func(e queue.Event) {
			if e.Kind == queue.EventOffline || e.Kind == queue.EventOnline {
				out.printf("queue: %s", e.Kind)
			}
		},
	})
}

// newPayment returns a keyed POST of a payment named name.
func newPayment(url, name string) (*idem.Intent, error) {
	return idem.NewIntent("POST", url, []byte(`{"payment":"`+name+`"}`),
		idem.WithHeader("Content-Type", "application/json"))
}

// report runs the intent, with Do or, after an earlier error prior, Resume,
// and prints its outcome and attempts. It returns Do's error.
func report(ctx context.Context, out *printer, client *idem.Client, name string, in *idem.Intent, prior error) error {
	var (
		res *idem.Result
		err error
	)
	if prior != nil {
		res, err = client.Resume(ctx, in, prior)
	} else {
		res, err = client.Do(ctx, in)
	}
	var ie *idem.Error
	switch {
	case err == nil:
		res.Response.Body.Close()
		out.printf("%s  %s (%d %s)", name, res.Outcome, res.Response.StatusCode, http.StatusText(res.Response.StatusCode))
	case errors.As(err, &ie):
		// errors.Is(err, gobreaker.ErrOpenState) holds when the last
		// attempt was refused by the open breaker.
		out.printf("%s  %s: %s", name, ie.Outcome, trail(ie.Attempts))
	default:
		out.printf("%s  %v", name, err)
	}
	return err
}

// trail lists attempts as their class and status or error, a run of alike
// attempts once with its count.
func trail(atts []idem.Attempt) string {
	var parts []string
	last, n := "", 0
	flush := func() {
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%d × %s", n, last))
		}
	}
	for _, a := range atts {
		s := fmt.Sprintf("%s (%d %s)", a.Class, a.Status, http.StatusText(a.Status))
		if a.Err != nil {
			s = fmt.Sprintf("%s (%v)", a.Class, innermost(a.Err))
		}
		if s != last {
			flush()
			last, n = s, 0
		}
		n++
	}
	flush()
	return strings.Join(parts, ", ")
}

// innermost is the error at the end of err's chain, without the url.Error
// around a transport's own.
func innermost(err error) error {
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err
		}
		err = next
	}
}

// firstRefusal waits until record id's latest attempt was never sent, and
// returns the record then.
func firstRefusal(ctx context.Context, q *queue.Queue, id queue.ID) (*queue.Record, error) {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		rec, err := q.Get(ctx, id)
		if err != nil {
			return nil, err
		}
		if rec.State == queue.Pending && rec.LastClass == idem.ClassNeverSent {
			return rec, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

func sentAt(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.Format(time.RFC3339Nano)
}

// printer writes whole lines to w from any goroutine: the breaker reports
// its state changes from the goroutine whose request moved it.
type printer struct {
	mu sync.Mutex // guards w
	w  io.Writer
}

func (p *printer) printf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, format+"\n", args...)
}
