package interop

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
)

// answer is one scripted response: a status and headers.
type answer struct {
	status int
	header map[string]string
}

// script answers the n-th request (from 0) with answers[n], repeating the
// last answer for ever after.
func script(answers ...answer) http.Handler {
	var n atomic.Int64
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := int(n.Add(1) - 1)
		a := answers[min(i, len(answers)-1)]
		for k, v := range a.header {
			w.Header().Set(k, v)
		}
		w.WriteHeader(a.status)
		_, _ = w.Write([]byte(http.StatusText(a.status)))
	})
}

func status(code int) answer { return answer{status: code} }

func replayed(code int, header, value string) answer {
	return answer{status: code, header: map[string]string{header: value}}
}

// TestToleratesDisagreeingServers runs idem against servers that read the
// protocol differently, as deployed ones do: replay headers under three
// names, a 409 that never clears, 409 for a payload mismatch, 5xx answers
// stored and replayed. Every case ends within its time bound, with the
// outcome the caller can act on.
func TestToleratesDisagreeingServers(t *testing.T) {
	t.Parallel()
	// The bounds below are generous multiples of what the policies allow (a
	// few hundred milliseconds), so that a loaded machine does not fail them;
	// a server that never clears would otherwise hold Do for ever.
	small := idem.Policy{MaxAttempts: 6, BaseDelay: 5 * time.Millisecond, MaxDelay: 20 * time.Millisecond, AttemptTimeout: time.Second}
	elapsedBound := small
	elapsedBound.MaxAttempts, elapsedBound.MaxElapsed = 1000, 250*time.Millisecond
	endless := small
	endless.MaxAttempts = 1000
	windowBound := small // a keyed 409 is polled, not an attempt
	windowBound.InFlightWindow = 100 * time.Millisecond

	tests := []struct {
		name         string
		answers      []answer
		policy       idem.Policy
		ctxTimeout   time.Duration // 0: none
		wantOutcome  idem.Outcome
		wantReplayed bool
		wantAttempts int // 0: not checked
		wantErr      []error
		within       time.Duration
	}{
		{name: "Idempotent-Replayed after a 503", answers: []answer{status(503), replayed(201, "Idempotent-Replayed", "true")},
			policy: small, wantOutcome: idem.Applied, wantReplayed: true, wantAttempts: 2, within: 4 * time.Second},
		{name: "Idempotency-Replayed after a 503", answers: []answer{status(503), replayed(201, "Idempotency-Replayed", "true")},
			policy: small, wantOutcome: idem.Applied, wantReplayed: true, wantAttempts: 2, within: 4 * time.Second},
		{name: "X-Idempotent-Replayed after a 503", answers: []answer{status(503), replayed(200, "X-Idempotent-Replayed", "TRUE")},
			policy: small, wantOutcome: idem.Applied, wantReplayed: true, wantAttempts: 2, within: 4 * time.Second},
		{name: "Idempotent-Replayed: false", answers: []answer{replayed(201, "Idempotent-Replayed", "false")},
			policy: small, wantOutcome: idem.Applied, wantAttempts: 1, within: 4 * time.Second},

		// A server stuck after a 5xx (its claim never released) answers 409
		// for ever: the 5xx may have applied, so the end is Unknown, bounded
		// by the polling window, elapsed time, the context, or the
		// Retry-After cap.
		{name: "409 for ever after a 500, window bound", answers: []answer{status(500), status(409)},
			policy: windowBound, wantOutcome: idem.Unknown,
			wantErr: []error{idem.ErrOutcomeUnknown, idem.ErrAttemptsExhausted}, within: 4 * time.Second},
		{name: "409 for ever after a 502, elapsed bound", answers: []answer{status(502), status(409)},
			policy: elapsedBound, wantOutcome: idem.Unknown,
			wantErr: []error{idem.ErrOutcomeUnknown, idem.ErrAttemptsExhausted}, within: 2 * time.Second},
		{name: "409 for ever after a 503, context bound", answers: []answer{status(503), status(409)},
			policy: endless, ctxTimeout: 200 * time.Millisecond, wantOutcome: idem.Unknown,
			wantErr: []error{idem.ErrOutcomeUnknown, context.DeadlineExceeded}, within: 2 * time.Second},
		{name: "409 for ever after a 504, Retry-After an hour", answers: []answer{status(504), replayed(409, "Retry-After", "3600")},
			policy: endless, wantOutcome: idem.Unknown, wantAttempts: 2,
			wantErr: []error{idem.ErrOutcomeUnknown, idem.ErrRetryAfterTooLong}, within: 2 * time.Second},

		// 409 used for a payload mismatch reads exactly as the draft's 409
		// "a request with this key is in flight", which may still apply: the
		// client cannot tell them apart, so the end is Unknown, never
		// NotApplied (a caller told NotApplied would resend under a new key).
		{name: "409 for a payload mismatch", answers: []answer{status(409)},
			policy: windowBound, wantOutcome: idem.Unknown,
			wantErr: []error{idem.ErrOutcomeUnknown, idem.ErrAttemptsExhausted}, within: 4 * time.Second},
		{name: "409 for a payload mismatch, elapsed bound", answers: []answer{status(409)},
			policy: elapsedBound, wantOutcome: idem.Unknown,
			wantErr: []error{idem.ErrOutcomeUnknown, idem.ErrAttemptsExhausted}, within: 2 * time.Second},
		{name: "422 for a payload mismatch", answers: []answer{status(422)},
			policy: small, wantOutcome: idem.NotApplied, wantAttempts: 1,
			wantErr: []error{idem.ErrNotApplied, idem.ErrKeyReused}, within: 2 * time.Second},

		// A 5xx stored and replayed, marked or not: the first 5xx may have
		// applied, no later answer settles it.
		{name: "503 stored and replayed", answers: []answer{status(503)},
			policy: small, wantOutcome: idem.Unknown, wantAttempts: 6,
			wantErr: []error{idem.ErrOutcomeUnknown, idem.ErrAttemptsExhausted}, within: 4 * time.Second},
		// Marked replayed, the stored 500 is final: no retry can change it.
		{name: "500 stored and replayed with Idempotent-Replayed", answers: []answer{status(500), replayed(500, "Idempotent-Replayed", "true")},
			policy: small, wantOutcome: idem.Unknown, wantAttempts: 2,
			wantErr: []error{idem.ErrOutcomeUnknown, idem.ErrServerSaidStop}, within: 4 * time.Second},
		{name: "500 stored and replayed, elapsed bound", answers: []answer{status(500)},
			policy: elapsedBound, wantOutcome: idem.Unknown,
			wantErr: []error{idem.ErrOutcomeUnknown, idem.ErrAttemptsExhausted}, within: 2 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(script(tt.answers...))
			t.Cleanup(srv.Close)
			c := newClient(t, tt.policy)
			in := payment(t, srv.URL+"/pay", "p1")

			ctx := context.Background()
			if tt.ctxTimeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.ctxTimeout)
				defer cancel()
			}
			d, err := tryDo(ctx, c, in)
			require.NoError(t, err)

			assert.Equal(t, tt.wantOutcome, d.outcome, "outcome (err: %v)", d.err)
			assert.Less(t, d.elapsed, tt.within, "Do took %v, bound %v", d.elapsed, tt.within)
			for _, want := range tt.wantErr {
				assert.ErrorIs(t, d.err, want)
			}
			assert.Equal(t, tt.wantReplayed, d.replayed, "Result.Replayed")
			if tt.wantAttempts > 0 {
				assert.Len(t, d.attempts, tt.wantAttempts, "attempts: %v", statuses(d.attempts))
			}
		})
	}
}
