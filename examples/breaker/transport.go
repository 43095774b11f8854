package main

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/sony/gobreaker/v2"
	"golang.org/x/time/rate"
)

// newTransport returns base behind the limiter lim behind the breaker cb.
// The breaker comes first, so that a request it refuses spends no token.
func newTransport(cb *gobreaker.CircuitBreaker[*http.Response], lim *rate.Limiter, base http.RoundTripper) http.RoundTripper {
	return breakerTransport{cb: cb, base: limitTransport{lim: lim, base: base}}
}

// newBreaker returns a breaker that opens after trips failures in a row and
// half-opens open later, letting one request through to try the server.
// onChange, if not nil, hears of every change of state.
func newBreaker(trips uint32, open time.Duration, onChange func(name string, from, to gobreaker.State)) *gobreaker.CircuitBreaker[*http.Response] {
	return gobreaker.NewCircuitBreaker[*http.Response](gobreaker.Settings{
		Name:          "payments",
		MaxRequests:   1,
		Timeout:       open,
		ReadyToTrip:   func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= trips },
		OnStateChange: onChange,
		// A request the limiter refused never reached the server: it says
		// nothing of the server's health.
		IsExcluded: func(err error) bool { return errors.Is(err, errRateLimited) },
	})
}

// errServerFailed tells the breaker that the server answered 5xx: a failure
// to count, though the answer itself goes back to idem, which judges it.
var errServerFailed = errors.New("breaker: server answered 5xx")

// breakerTransport sends requests through base while cb allows them. It is
// safe for concurrent use, as cb and base are.
//
// A request cb refuses (gobreaker.ErrOpenState, or ErrTooManyRequests while
// half-open) returns that error before anything is dialled or written: idem
// classifies the attempt as never sent. A 5xx counts as a failure for cb
// but is returned as the response it is: turned into an error, its body
// would leak, and idem would lose the answer it judges by.
type breakerTransport struct {
	cb   *gobreaker.CircuitBreaker[*http.Response]
	base http.RoundTripper
}

// RoundTrip implements http.RoundTripper.
func (t breakerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	sent := false
	resp, err := t.cb.Execute(func() (*http.Response, error) {
		sent = true
		resp, err := t.base.RoundTrip(req)
		if err == nil && resp.StatusCode >= 500 {
			return resp, errServerFailed
		}
		return resp, err
	})
	if !sent {
		closeBody(req) // a RoundTripper closes the body, even when it refuses
	}
	if errors.Is(err, errServerFailed) {
		return resp, nil
	}
	return resp, err
}

// errRateLimited wraps the limiter's refusal.
var errRateLimited = errors.New("rate limited")

// limitTransport sends each request through base once lim grants it a
// token, waiting as long as the request's context allows. It is safe for
// concurrent use, as lim and base are.
//
// When the token would come after the context's deadline, or the context
// ends first, it refuses the request before anything is sent, with an error
// wrapping errRateLimited: idem classifies the attempt as never sent.
type limitTransport struct {
	lim  *rate.Limiter
	base http.RoundTripper
}

// RoundTrip implements http.RoundTripper.
func (t limitTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := t.lim.Wait(req.Context()); err != nil {
		closeBody(req)
		return nil, fmt.Errorf("%w: %w", errRateLimited, err)
	}
	return t.base.RoundTrip(req)
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}
