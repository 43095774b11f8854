package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/idemtest"
)

// sendFunc sends one payment and says what the client would tell its caller.
type sendFunc func(ctx context.Context, url string, body []byte) verdict

// clientKind is one way of sending payments.
type clientKind struct {
	name string
	// send sends the payments to srv and returns what the client told its
	// caller about each, in payment order.
	send func(ctx context.Context, srv *idemtest.Server, cfg config) ([]verdict, error)
	// idem marks idem's rows, which the last line sums and the exit code
	// judges.
	idem bool
}

// clientKinds lists the clients compared, idem's last.
func clientKinds() []clientKind {
	return []clientKind{
		{name: "no retries", send: eachPayment(noRetries)},
		{name: "naive retries", send: eachPayment(naiveRetries)},
		{name: "idem", send: eachPayment(idemClient), idem: true},
		{name: "idem queue", send: queued, idem: true},
	}
}

// eachPayment sends the payments one call each, cfg.workers at a time,
// through the client build makes.
func eachPayment(build func(*idemtest.Server, config) sendFunc) func(context.Context, *idemtest.Server, config) ([]verdict, error) {
	return func(ctx context.Context, srv *idemtest.Server, cfg config) ([]verdict, error) {
		send := build(srv, cfg)
		verdicts := make([]verdict, cfg.n)
		inParallel(cfg.n, cfg.workers, func(i int) {
			verdicts[i] = send(ctx, srv.URL()+"/payments", payment(i))
		})
		return verdicts, nil
	}
}

// inParallel calls f for each of 0 to n-1, workers calls at a time.
func inParallel(n, workers int, f func(i int)) {
	var wg sync.WaitGroup
	next := make(chan int)
	for range workers {
		wg.Go(func() {
			for i := range next {
				f(i)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}

func transport(srv *idemtest.Server, cfg config) *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = srv.DialContext // the server refuses some dials
	tr.MaxIdleConnsPerHost = cfg.workers
	return tr
}

// noRetries sends once: what a plain http.Client does.
func noRetries(srv *idemtest.Server, cfg config) sendFunc {
	hc := &http.Client{Transport: transport(srv, cfg), Timeout: cfg.timeout}
	return func(ctx context.Context, url string, body []byte) verdict {
		if ok, _ := post(ctx, hc, url, body); ok {
			return saidApplied
		}
		return saidFailed
	}
}

// naiveRetries resends on any transport error, 5xx or 429, without a key:
// the default of popular retry libraries.
func naiveRetries(srv *idemtest.Server, cfg config) sendFunc {
	hc := &http.Client{Transport: transport(srv, cfg), Timeout: cfg.timeout}
	return func(ctx context.Context, url string, body []byte) verdict {
		// idem's default policy (see idem.Policy): the rows differ in what is
		// retried, not in how often.
		naive := idem.Policy{MaxAttempts: 4, BaseDelay: 200 * time.Millisecond}
		for attempt := range naive.MaxAttempts {
			ok, retry := post(ctx, hc, url, body)
			if ok {
				return saidApplied
			}
			if !retry || attempt == naive.MaxAttempts-1 {
				break
			}
			time.Sleep(naive.BaseDelay << attempt)
		}
		return saidFailed
	}
}

// post sends one POST and reports success, and whether a naive client
// would retry.
func post(ctx context.Context, hc *http.Client, url string, body []byte) (ok, retry bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return false, false
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return false, true
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	c := resp.StatusCode
	return c >= 200 && c < 300, c >= 500 || c == http.StatusTooManyRequests
}

// idemClient runs each payment as an idem intent with the default policy.
func idemClient(srv *idemtest.Server, cfg config) sendFunc {
	c := &idem.Client{
		HTTPClient: &http.Client{Transport: transport(srv, cfg)},
		Policy:     idem.Policy{AttemptTimeout: cfg.timeout},
	}
	return func(ctx context.Context, url string, body []byte) verdict {
		in, err := idem.NewIntent(http.MethodPost, url, body, idem.WithHeader("Content-Type", "application/json"))
		if err != nil {
			return saidFailed
		}
		res, err := c.Do(ctx, in)
		if err == nil {
			io.Copy(io.Discard, res.Response.Body)
			res.Response.Body.Close()
			if res.Outcome.Succeeded() {
				return saidApplied
			}
			return saidFailed
		}
		if errors.Is(err, idem.ErrOutcomeUnknown) {
			return saidUnknown
		}
		return saidFailed
	}
}
