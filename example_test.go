package idem_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	"github.com/idem-go/idem"
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
	// outcome unknown - not retried: POST without key
	// true true
}

func ExampleDeriveKey() {
	// A handler resuming after a crash derives the same downstream key.
	upstream := "order-7f3a"
	fmt.Println(idem.DeriveKey(upstream, "charge"))
	fmt.Println(idem.DeriveKey(upstream, "charge") == idem.DeriveKey(upstream, "charge"))
	fmt.Println(idem.DeriveKey(upstream, "charge") == idem.DeriveKey(upstream, "ship"))
	// Output:
	// 50ff8472-dc78-5023-8fca-1faf4d5c7d16
	// true
	// false
}
