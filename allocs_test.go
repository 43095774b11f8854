package idem

import (
	"context"
	"net/http"
	"testing"
)

// staticTransport answers every request with the same 201 and an empty
// body, allocating nothing itself, so that an allocation count of Do is
// idem's and net/http's alone.
type staticTransport struct{ resp *http.Response }

func (t staticTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
	return t.resp, nil
}

// successAllocs are the allocations of one Do of a keyed POST with a
// Content-Type answered 201 at once, net/http's included (Go 1.26): the run
// and its trail stay on the stack, the Result holds the trail of its one
// attempt.
const successAllocs = 22

// TestDoSuccessAllocs: the success path of Do allocates no more than
// successAllocs; a run that escapes to the heap (a hedge's goroutine that
// captures it) fails it.
func TestDoSuccessAllocs(t *testing.T) {
	resp := &http.Response{StatusCode: http.StatusCreated, Header: http.Header{}, Body: http.NoBody}
	c := &Client{HTTPClient: &http.Client{Transport: staticTransport{resp}}}
	in, err := NewIntent(http.MethodPost, "http://api.example/payments", []byte(`{"amount":1}`),
		WithHeader("Content-Type", "application/json"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	allocs := testing.AllocsPerRun(100, func() {
		res, err := c.Do(ctx, in)
		if err != nil || res.Outcome != Applied {
			t.Fatalf("Do = %v, %v, want Applied", res, err)
		}
	})
	if allocs > successAllocs {
		t.Errorf("Do allocates %v times, want at most %d", allocs, successAllocs)
	}
}
