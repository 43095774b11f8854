package idem_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/idemtest"
)

// lossyServer does the work, then drops the connection before answering the
// first time it sees a key; a repeat gets the stored answer.
func lossyServer() *httptest.Server {
	var mu sync.Mutex
	done := map[string]bool{}
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		mu.Lock()
		replay := key != "" && done[key]
		done[key] = true
		mu.Unlock()
		if replay {
			w.Header().Set("Idempotent-Replayed", "true")
			w.WriteHeader(http.StatusCreated)
			return
		}
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close() // the payment is made; its answer is lost
		}
	}))
}

func ExampleClient_Do() {
	srv := lossyServer()
	defer srv.Close()

	in, err := idem.NewIntent("POST", srv.URL+"/payments", []byte(`{"amount":100}`),
		idem.WithHeader("Content-Type", "application/json"))
	if err != nil {
		panic(err)
	}
	c := &idem.Client{Policy: idem.Policy{BaseDelay: time.Millisecond}}
	res, err := c.Do(context.Background(), in)
	if err != nil {
		panic(err)
	}
	defer res.Response.Body.Close()
	fmt.Println(res.Outcome, res.Response.StatusCode, "replayed:", res.Replayed)
	for i, a := range res.Attempts {
		fmt.Println("attempt", i+1, a.Class)
	}
	// Output:
	// applied 201 replayed: true
	// attempt 1 ambiguous
	// attempt 2 applied
}

// A caller that keeps its own schedule, as a job runner that runs a job
// again later, makes one attempt a run: it keeps the operation's Outcome so
// far as the next attempt's prior, beside the intent, and decides itself
// what follows each attempt.
func ExampleClient_Try() {
	srv := lossyServer()
	defer srv.Close()

	in, err := idem.NewIntent("POST", srv.URL+"/payments", []byte(`{"amount":100}`))
	if err != nil {
		panic(err)
	}
	var c idem.Client
	waits := []time.Duration{time.Millisecond, 10 * time.Millisecond} // the caller's schedule
	prior := idem.NoOutcome
	for n := 0; ; n++ {
		s, err := c.Try(context.Background(), in, prior, 10*time.Second)
		if err != nil {
			panic(err) // no attempt was made
		}
		if s.Response != nil {
			s.Response.Body.Close()
		}
		prior = s.Outcome
		fmt.Println("attempt", n+1, s.Attempt.Class, "- advice:", s.Action)
		if s.Action != idem.ActionRetry {
			s.Report(s.Action, 0)
			break
		}
		if n == len(waits) { // the schedule is over: the operation ends with prior
			s.Report(idem.ActionStop, 0)
			break
		}
		s.Report(idem.ActionRetry, waits[n])
		time.Sleep(waits[n])
	}
	fmt.Println(prior)
	// Output:
	// attempt 1 ambiguous - advice: retry
	// attempt 2 applied - advice: done
	// applied
}

func ExampleError() {
	srv := lossyServer()
	defer srv.Close()

	// A POST without a key cannot be retried after an ambiguous attempt.
	in, _ := idem.NewIntent("POST", srv.URL+"/payments", []byte(`{"amount":100}`), idem.WithoutKey())
	var c idem.Client
	_, err := c.Do(context.Background(), in)

	var e *idem.Error
	if errors.As(err, &e) {
		fmt.Println(e.Outcome, "-", e.Reason)
	}
	fmt.Println(errors.Is(err, idem.ErrOutcomeUnknown), errors.Is(err, idem.ErrNoKey))
	// Output:
	// unknown - not retried: POST without key
	// true true
}

func ExampleTransport() {
	// The payment API answers the first attempt 503. A 503 may come after
	// the work, so the attempt is ambiguous: the Transport retries it only
	// because the request carries an idempotency key.
	api := idemtest.New(idemtest.Options{
		Faults: func(_ *http.Request, _ string, seen int) idemtest.Fault {
			if seen == 0 {
				return idemtest.Fault503
			}
			return idemtest.FaultNone
		},
	})
	if err := api.Start(); err != nil {
		panic(err)
	}
	defer api.Close()

	// Any code that takes an *http.Client gets idem's retries.
	hc := &http.Client{Transport: &idem.Transport{Policy: idem.Policy{BaseDelay: time.Millisecond}}}

	var rep idem.Report
	ctx := idem.WithReport(context.Background(), &rep)
	req, _ := http.NewRequestWithContext(ctx, "POST", api.URL()+"/payments", strings.NewReader(`{"amount":100}`))
	req.Header.Set("Idempotency-Key", "order-42") // born with the order, not in the transport
	resp, err := hc.Do(req)
	if err != nil {
		panic(err)
	}
	resp.Body.Close()

	fmt.Println(resp.StatusCode, rep.Outcome, "after", len(rep.Attempts), "attempts")
	for i, a := range rep.Attempts {
		fmt.Println("attempt", i+1, a.Status, a.Class)
	}
	fmt.Println("payments made:", api.EffectsForKey("order-42"))
	// Output:
	// 201 applied after 2 attempts
	// attempt 1 503 ambiguous
	// attempt 2 201 applied
	// payments made: 1
}

func ExampleDeriveKey() {
	// The downstream API; its /payments route stands in for both phases.
	api := idemtest.New(idemtest.Options{RequireKey: true})
	if err := api.Start(); err != nil {
		panic(err)
	}
	defer api.Close()
	c := &idem.Client{}

	// handleOrder runs the phases of an order handler. Each phase presents
	// downstream a key derived from the order's own key, so a handler
	// resumed after a crash presents the same keys and repeats no phase.
	handleOrder := func(ctx context.Context, orderKey string, phases []string) {
		for _, phase := range phases {
			in, err := idem.NewIntent("POST", api.URL()+"/payments", []byte(`{"phase":"`+phase+`"}`),
				idem.WithKey(idem.DeriveKey(orderKey, phase)))
			if err != nil {
				panic(err)
			}
			res, err := c.Do(ctx, in)
			if err != nil {
				panic(err)
			}
			res.Response.Body.Close()
			fmt.Println(phase, res.Outcome, "replayed:", res.Replayed)
		}
	}

	ctx := context.Background()
	orderKey := "order-7f3a" // the Idempotency-Key the order arrived with
	phases := []string{"reserve", "charge"}

	fmt.Println("first run, crashes after reserve:")
	handleOrder(ctx, orderKey, phases[:1])
	fmt.Println("resumed with the same order key:")
	handleOrder(ctx, orderKey, phases)

	for _, phase := range phases {
		fmt.Println(phase, "applied downstream:", api.EffectsForKey(idem.DeriveKey(orderKey, phase)))
	}
	fmt.Println("phases share a key:", idem.DeriveKey(orderKey, "reserve") == idem.DeriveKey(orderKey, "charge"))
	// Output:
	// first run, crashes after reserve:
	// reserve applied replayed: false
	// resumed with the same order key:
	// reserve applied replayed: true
	// charge applied replayed: false
	// reserve applied downstream: 1
	// charge applied downstream: 1
	// phases share a key: false
}

// Example_quickStart runs the README's quick start through each outcome.
func Example_quickStart() {
	token := func() string { return "t0ken" } // the application's credentials

	// quickStart is the README's quick start, line for line, but for the URL
	// and the fmt lines that show which branch ran; TestREADMEQuickStart
	// keeps them so.
	quickStart := func(ctx context.Context, url string, body []byte) error {
		client := &idem.Client{Authorize: func(ctx context.Context, req *http.Request) error {
			req.Header.Set("Authorization", "Bearer "+token()) // fresh on every attempt, never stored
			return nil
		}}
		// Create the intent where it is born: its idempotency key is generated now, once.
		in, err := idem.NewIntent("POST", url, body,
			idem.WithHeader("Content-Type", "application/json"))
		if err != nil {
			return err // the message names the bad method, URL, header or body
		}
		res, err := client.Do(ctx, in)
		switch {
		case err == nil && res.Outcome.Succeeded(): // Applied (res.Replayed: answered from the server's store) or AlreadyApplied
			defer res.Response.Body.Close()
			fmt.Println(res.Outcome, res.Response.StatusCode)
		case err == nil: // NotApplied: the server refused (a 4xx) before acting; res.Response says why
			defer res.Response.Body.Close()
			fmt.Println(res.Outcome, res.Response.StatusCode)
		case errors.Is(err, idem.ErrOutcomeUnknown): // the server may have acted: reconcile, never resubmit under a new key
			fmt.Println("outcome unknown: reconcile")
		case errors.Is(err, idem.ErrNotApplied): // the server did not act: safe to try again
			fmt.Println("not applied: safe to try again")
		default: // not an outcome: a nil intent or context, or an invalid Policy
			return err
		}
		return nil
	}

	api := idemtest.New(idemtest.Options{})
	lossy := idemtest.New(idemtest.Options{ // makes the payment, then drops every answer
		Faults: func(*http.Request, string, int) idemtest.Fault { return idemtest.FaultCommitThenDrop },
	})
	for _, s := range []*idemtest.Server{api, lossy} {
		if err := s.Start(); err != nil {
			panic(err)
		}
		defer s.Close()
	}
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close() // its port now refuses connections

	for _, call := range []struct {
		url     string
		timeout time.Duration
	}{
		{api.URL() + "/payments", time.Minute},
		{api.URL() + "/refunds", time.Minute},    // no such route: 404
		{lossy.URL() + "/payments", time.Minute}, // four attempts, every answer lost
		{down.URL + "/payments", 100 * time.Millisecond},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), call.timeout)
		err := quickStart(ctx, call.url, []byte(`{"amount":100}`))
		cancel()
		if err != nil {
			panic(err)
		}
	}
	// Output:
	// applied 201
	// not_applied 404
	// outcome unknown: reconcile
	// not applied: safe to try again
}

// A payment whose answer was lost ends Unknown; the caller reconciling it
// later runs the same intent, under the same key, with Resume, and the
// server replays the answer it stored: the payment was made once.
func ExampleClient_Resume() {
	// The payment API makes the first payment but drops its answer.
	api := idemtest.New(idemtest.Options{
		Faults: func(_ *http.Request, _ string, seen int) idemtest.Fault {
			if seen == 0 {
				return idemtest.FaultCommitThenDrop
			}
			return idemtest.FaultNone
		},
	})
	if err := api.Start(); err != nil {
		panic(err)
	}
	defer api.Close()

	in, err := idem.NewIntent("POST", api.URL()+"/payments", []byte(`{"amount":100}`),
		idem.WithKey("order-42")) // kept with the order, as the intent is
	if err != nil {
		panic(err)
	}
	c := &idem.Client{Policy: idem.Policy{MaxAttempts: 1}} // one attempt, to end in doubt
	ctx := context.Background()
	_, err = c.Do(ctx, in)
	fmt.Println("do:", err != nil, errors.Is(err, idem.ErrOutcomeUnknown))

	// Later, reconciling: the same intent, and the error it ended with.
	res, err := c.Resume(ctx, in, err)
	if err != nil {
		panic(err)
	}
	res.Response.Body.Close()
	fmt.Println("resume:", res.Outcome, res.Response.StatusCode, "replayed:", res.Replayed)
	fmt.Println("payments made:", api.EffectsForKey("order-42"))
	// Output:
	// do: true true
	// resume: applied 201 replayed: true
	// payments made: 1
}

// A server that releases a key when its handler fails with a 500 runs the
// handler again on a keyed retry: the first run may have charged the card
// before it failed. Policy.Veto narrows the decision table for it: no keyed
// retry of a 500, which then ends Unknown, to be reconciled.
func Example_vetoReleasedKey() {
	var runs atomic.Int32 // the handler's runs: each may charge the card
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if runs.Add(1)%2 == 1 {
			w.WriteHeader(http.StatusInternalServerError) // the key is released
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()

	pay := func(c *idem.Client) {
		runs.Store(0)
		in, err := idem.NewIntent("POST", srv.URL+"/payments", []byte(`{"amount":100}`))
		if err != nil {
			panic(err)
		}
		res, err := c.Do(context.Background(), in)
		var e *idem.Error
		switch {
		case err == nil:
			res.Response.Body.Close()
			fmt.Println(res.Outcome, "after", len(res.Attempts), "attempts; handler runs:", runs.Load())
		case errors.As(err, &e):
			fmt.Println(e.Outcome, "after", len(e.Attempts), "attempt; vetoed:", errors.Is(err, idem.ErrVetoed))
		}
	}
	pay(&idem.Client{Policy: idem.Policy{BaseDelay: time.Millisecond}})
	pay(&idem.Client{Policy: idem.Policy{
		BaseDelay: time.Millisecond,
		Veto: func(_ context.Context, ai idem.AttemptInfo) bool {
			return ai.Keyed && ai.Attempt.Status == http.StatusInternalServerError
		},
	}})
	// Output:
	// applied after 2 attempts; handler runs: 2
	// unknown after 1 attempt; vetoed: true
}
