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

// The allocations of the success path, net/http's included (Go 1.26), each
// a keyed POST with a Content-Type answered 201 at once, or a GET answered
// so: the run and its trail stay on the stack; the operation's sender, the
// first attempt's recorder and URL, and the Result of its one attempt share
// one block (doState).
const (
	// successAllocs are those of one Do of the POST. Of them, net/http's
	// Client makes 6 and the recorder's hooks and context 5.
	successAllocs = 17
	// getAllocs are those of one Do of the GET, whose request has no body
	// and whose header holds nothing.
	getAllocs = 12
	// tryAllocs are those of one Try of the POST and its Report: the run,
	// kept for Report, is in the block.
	tryAllocs = 18
	// intentAllocs are those of NewIntent for the POST: the parsed URL,
	// the intent with its config and header, and one string of the body
	// and the key. The race detector makes one more, of the key's random
	// bytes (raceIntentAllocs).
	intentAllocs     = 3
	raceIntentAllocs = 4
)

// TestSuccessAllocs: the success path allocates no more than the counts
// above; a run that escapes to the heap (a hedge's goroutine that captures
// it), or a part of the block allocated on its own, fails it.
func TestSuccessAllocs(t *testing.T) {
	resp := &http.Response{StatusCode: http.StatusCreated, Header: http.Header{}, Body: http.NoBody}
	c := &Client{HTTPClient: &http.Client{Transport: staticTransport{resp}}}
	const url = "http://api.example/payments"
	body, ct := []byte(`{"amount":1}`), WithHeader("Content-Type", "application/json")
	post, err := NewIntent(http.MethodPost, url, body, ct)
	if err != nil {
		t.Fatal(err)
	}
	get, err := NewIntent(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	do := func(in *Intent) func() {
		return func() {
			if res, err := c.Do(ctx, in); err != nil || res.Outcome != Applied {
				t.Fatalf("Do = %v, %v, want Applied", res, err)
			}
		}
	}
	wantIntent := intentAllocs
	if raceEnabled {
		wantIntent = raceIntentAllocs
	}
	for _, tc := range []struct {
		name string
		f    func()
		want int
	}{
		{"Do POST", do(post), successAllocs},
		{"Do GET", do(get), getAllocs},
		{"Try POST", func() {
			step, err := c.Try(ctx, post, NoOutcome, 0)
			if err != nil || step.Action != ActionDone {
				t.Fatalf("Try = %v, %v, want ActionDone", step, err)
			}
			step.Report(ActionDone, 0)
		}, tryAllocs},
		{"NewIntent POST", func() {
			if _, err := NewIntent(http.MethodPost, url, body, ct); err != nil {
				t.Fatal(err)
			}
		}, wantIntent},
	} {
		if got := testing.AllocsPerRun(100, tc.f); got > float64(tc.want) {
			t.Errorf("%s allocates %v times, want at most %d", tc.name, got, tc.want)
		}
	}
}
