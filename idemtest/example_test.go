package idemtest_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/idemtest"
)

// A retry after a dropped response gets the stored answer, and the payment
// is made once.
func Example() {
	s := idemtest.New(idemtest.Options{
		Faults: func(_ *http.Request, _ string, seen int) idemtest.Fault {
			if seen == 0 {
				return idemtest.FaultCommitThenDrop
			}
			return idemtest.FaultNone
		},
	})
	if err := s.Start(); err != nil {
		panic(err)
	}
	defer s.Close()
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

	for attempt := 1; attempt <= 2; attempt++ {
		req, _ := http.NewRequest("POST", s.URL()+"/payments", strings.NewReader(`{"amount":100}`))
		req.Header.Set("Idempotency-Key", "order-42")
		resp, err := c.Do(req)
		if err != nil {
			fmt.Printf("attempt %d: no response\n", attempt)
			continue
		}
		resp.Body.Close()
		fmt.Printf("attempt %d: %d replayed=%s\n", attempt, resp.StatusCode, resp.Header.Get("Idempotent-Replayed"))
	}
	fmt.Println("payments made:", s.EffectsForKey("order-42"))
	// Output:
	// attempt 1: no response
	// attempt 2: 201 replayed=true
	// payments made: 1
}

// A handler of one's own behind the key layer: the answer to the first
// attempt is lost after the order is made, the client retries under the
// same key and gets the stored answer, and the handler ran once.
func ExampleWrap() {
	var orders atomic.Int64
	api := http.NewServeMux()
	api.HandleFunc("POST /orders", func(w http.ResponseWriter, r *http.Request) {
		n := orders.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"order":%d}`, n)
	})
	wrapped := idemtest.Wrap(api, idemtest.Options{
		RequireKey: true,
		Faults: func(_ *http.Request, _ string, seen int) idemtest.Fault {
			if seen == 0 {
				return idemtest.FaultCommitThenDrop
			}
			return idemtest.FaultNone
		},
	})
	srv := httptest.NewServer(wrapped)
	defer srv.Close()

	in, err := idem.NewIntent("POST", srv.URL+"/orders", []byte(`{"sku":"tea"}`))
	if err != nil {
		panic(err)
	}
	c := &idem.Client{HTTPClient: srv.Client(), Policy: idem.Policy{BaseDelay: time.Millisecond}}
	res, err := c.Do(context.Background(), in)
	if err != nil {
		panic(err)
	}
	defer res.Response.Body.Close()
	body, _ := io.ReadAll(res.Response.Body)
	fmt.Println(res.Outcome, res.Response.StatusCode, string(body), "replayed:", res.Replayed)
	fmt.Println("attempts:", len(res.Attempts), "handler ran:", wrapped.EffectsForKey(in.Key()))
	// Output:
	// applied 201 {"order":1} replayed: true
	// attempts: 2 handler ran: 1
}
