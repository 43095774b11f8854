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
type sendFunc func(ctx context.Context, url string, body []byte) report

// clientKind is one way of sending payments.
type clientKind struct {
	name string
	// send sends the payments to srv and returns what the client told its
	// caller about each, in payment order.
	send func(ctx context.Context, srv *idemtest.Server, cfg config) ([]report, error)
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
func eachPayment(build func(*idemtest.Server, config) sendFunc) func(context.Context, *idemtest.Server, config) ([]report, error) {
	return func(ctx context.Context, srv *idemtest.Server, cfg config) ([]report, error) {
		send := build(srv, cfg)
		reports := make([]report, cfg.n)
		inParallel(cfg.n, cfg.workers, func(i int) {
			reports[i] = send(ctx, srv.URL()+"/payments", payment(i))
		})
		return reports, nil
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
	return func(ctx context.Context, url string, body []byte) report {
		if ok, _ := post(ctx, hc, url, body); ok {
			return report{verdict: saidApplied}
		}
		return report{verdict: saidFailed}
	}
}

// naiveRetries resends on any transport error, 5xx or 429, without a key:
// the default of popular retry libraries.
func naiveRetries(srv *idemtest.Server, cfg config) sendFunc {
	hc := &http.Client{Transport: transport(srv, cfg), Timeout: cfg.timeout}
	return func(ctx context.Context, url string, body []byte) report {
		// idem's default policy (see idem.Policy): the rows differ in what is
		// retried, not in how often.
		naive := idem.Policy{MaxAttempts: 4, BaseDelay: 200 * time.Millisecond}
		for attempt := range naive.MaxAttempts {
			ok, retry := post(ctx, hc, url, body)
			if ok {
				return report{verdict: saidApplied}
			}
			if !retry || attempt == naive.MaxAttempts-1 {
				break
			}
			time.Sleep(naive.BaseDelay << attempt)
		}
		return report{verdict: saidFailed}
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

// The application's rounds after idem's own retries, as README's outcome
// contract tells it to act: a NotApplied payment is sent again as a new
// intent, an Unknown one is resumed under its key. Both are bounded, as an
// application's would be; what is left after them is reported as it is.
const (
	maxResends = 3 // new intents after the first, for a payment that stays NotApplied
	maxResumes = 3 // Resume calls per intent that stays Unknown
	// roundPause is the wait before each resend or Resume: idem's own
	// retries have just ended, and a resend at once would spend what the
	// retry budget keeps for a server in trouble.
	roundPause = 250 * time.Millisecond
)

// idemClient runs each payment as an idem intent with the default policy,
// and acts on each outcome as README says an application should: Applied
// is done; NotApplied that may pass (attempts never got through) is sent
// again as a new intent; Unknown is resumed under the same key with
// Client.Resume.
func idemClient(srv *idemtest.Server, cfg config) sendFunc {
	c := &idem.Client{
		HTTPClient: &http.Client{Transport: transport(srv, cfg)},
		Policy:     idem.Policy{AttemptTimeout: cfg.timeout},
	}
	return func(ctx context.Context, url string, body []byte) report {
		var rep report
		for round := 0; ; round++ {
			in, err := idem.NewIntent(http.MethodPost, url, body, idem.WithHeader("Content-Type", "application/json"))
			if err != nil {
				rep.verdict = saidFailed
				return rep
			}
			res, err := c.Do(ctx, in)
			for r := 0; r < maxResumes && errors.Is(err, idem.ErrOutcomeUnknown) && pause(ctx); r++ {
				rep.resumed = true
				res, err = c.Resume(ctx, in, err)
			}
			rep.verdict = verdictOfRun(res, err)
			if rep.verdict == saidFailed {
				rep.notApplied = append(rep.notApplied, in.Key())
			}
			if !resendable(err) || round == maxResends || !pause(ctx) {
				return rep
			}
			rep.resent = true
		}
	}
}

// pause waits roundPause, and reports false if ctx ended first.
func pause(ctx context.Context) bool {
	t := time.NewTimer(roundPause)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// verdictOfRun is what a run of Do or Resume tells the application; it
// closes the Result's body.
func verdictOfRun(res *idem.Result, err error) verdict {
	switch {
	case err == nil:
		io.Copy(io.Discard, res.Response.Body)
		res.Response.Body.Close()
		if res.Outcome.Succeeded() {
			return saidApplied
		}
		return saidFailed // NotApplied: the server refused before acting
	case errors.Is(err, idem.ErrOutcomeUnknown):
		return saidUnknown
	}
	return saidFailed
}

// resendable reports whether a run's error is a NotApplied that sending
// again may cure: the attempts never got through before attempts, budget or
// the wait the server asked for ran out. Other NotApplied runs (a 4xx
// rejection, which comes back as a Result; ErrInvalidRequest, ErrRedirected,
// ErrServerSaidStop) would end the same way until the request changes.
func resendable(err error) bool {
	return errors.Is(err, idem.ErrNotApplied) &&
		(errors.Is(err, idem.ErrAttemptsExhausted) || errors.Is(err, idem.ErrBudgetExhausted) || errors.Is(err, idem.ErrRetryAfterTooLong))
}
