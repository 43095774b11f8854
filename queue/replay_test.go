package queue

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/idem-go/idem"
)

// TestDrainReplayedAnswerIsFinal: a record answered with a 500 that the
// server marks replayed, its stored answer for the key, fails Unknown after
// that one request: the decision table (idem's, through Client.Try) makes
// a replayed answer final, and the drainer follows it.
func TestDrainReplayedAnswerIsFinal(t *testing.T) {
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		requests.Add(1)
		w.Header().Set("Idempotency-Replayed", "true")
		w.WriteHeader(http.StatusInternalServerError)
	}))
	t.Cleanup(srv.Close)
	r := settleOne(t, fast(&idem.Client{HTTPClient: srv.Client()}), srv.URL)
	assert.Equal(t, Failed, r.State)
	assert.Equal(t, idem.Unknown, r.Outcome)
	assert.Contains(t, r.Reason, "replayed its stored answer")
	assert.Equal(t, int32(1), requests.Load(), "requests")
}
