package idemtest_test

import (
	"fmt"
	"net/http"
	"strings"

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
