package queue

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
)

// TestDrainVeto: Options.Policy.Veto is asked before each retry the table
// advises; a vetoed record fails with the table's outcome at that point and
// a reason naming the veto, after one request.
func TestDrainVeto(t *testing.T) {
	tests := []struct {
		name    string
		status  int
		outcome idem.Outcome
	}{
		{"500 leaves it in doubt", http.StatusInternalServerError, idem.Unknown},
		{"429 does not", http.StatusTooManyRequests, idem.NotApplied},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var requests atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				if requests.Add(1) == 1 {
					w.WriteHeader(tt.status)
					return
				}
				w.WriteHeader(http.StatusCreated)
			}))
			t.Cleanup(srv.Close)
			var (
				mu   sync.Mutex // guards seen
				seen []idem.AttemptInfo
			)
			opts := fast(&idem.Client{HTTPClient: srv.Client()})
			opts.Policy.Veto = func(_ context.Context, ai idem.AttemptInfo) bool {
				mu.Lock()
				seen = append(seen, ai)
				mu.Unlock()
				return ai.Keyed && ai.Attempt.Status == tt.status
			}
			r := settleOne(t, opts, srv.URL+"/payments?token=s3cret")
			assert.Equal(t, Failed, r.State)
			assert.Equal(t, tt.outcome, r.Outcome, "Outcome = %v, want %v", r.Outcome, tt.outcome)
			assert.Contains(t, r.Reason, "veto")
			assert.Equal(t, int32(1), requests.Load(), "requests")
			mu.Lock()
			defer mu.Unlock()
			require.Len(t, seen, 1, "veto calls")
			ai := seen[0]
			assert.Equal(t, "POST", ai.Method)
			assert.Equal(t, srv.URL+"/payments", ai.URL)
			assert.Equal(t, 1, ai.N)
			assert.Equal(t, tt.status, ai.Attempt.Status)
			assert.True(t, ai.Keyed)
			assert.Equal(t, idem.ActionRetry, ai.Action)
		})
	}
}

// TestDrainVetoAllows: a veto that lets a retry pass changes nothing.
func TestDrainVetoAllows(t *testing.T) {
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if requests.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(srv.Close)
	opts := fast(&idem.Client{HTTPClient: srv.Client()})
	opts.Policy.Veto = func(_ context.Context, ai idem.AttemptInfo) bool {
		return ai.Attempt.Status == http.StatusInternalServerError
	}
	r := settleOne(t, opts, srv.URL)
	assert.Equal(t, Done, r.State, r.Reason)
	assert.Equal(t, int32(2), requests.Load(), "requests")
}

// TestEnqueueRefusesWithPolicy: an intent with a policy of its own is
// refused rather than queued without it: the queue's Options.Policy shapes
// every record.
func TestEnqueueRefusesWithPolicy(t *testing.T) {
	q, _ := openTest(t, Options{})
	in := post(t, url, 1, idem.WithPolicy(idem.Policy{MaxAttempts: 1}))
	_, err := q.Enqueue(context.Background(), in)
	require.ErrorIs(t, err, idem.ErrInvalidIntent)
	assert.Contains(t, err.Error(), "an intent with WithPolicy cannot be queued: the queue's Options.Policy applies")
	_, err = NewRecord(in, newClock().Now())
	assert.ErrorIs(t, err, idem.ErrInvalidIntent)
	counts, err := q.Counts(context.Background())
	require.NoError(t, err)
	assert.Zero(t, counts[Pending], "a refused intent is not stored")
}
