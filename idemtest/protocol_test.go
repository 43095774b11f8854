package idemtest

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestClaimThenReplay(t *testing.T) {
	s := startServer(t, Options{})
	c := testClient(t, s)
	url := s.URL() + "/payments"

	first := mustSend(t, c, "POST", url, "k1", `{"amount":100}`)
	assert.Equal(t, http.StatusCreated, first.status)
	assert.JSONEq(t, `{"id":"pay_1","seq":1}`, first.body)
	assert.Equal(t, "application/json", first.header.Get("Content-Type"))
	assert.Empty(t, first.header.Get("Idempotent-Replayed"), "first response marked as replay")

	// The sf-string form names the same key as the bare form.
	for i, key := range []string{"k1", `"k1"`} {
		again := mustSend(t, c, "POST", url, key, `{"amount":100}`)
		assert.Equal(t, http.StatusCreated, again.status, "replay %d status", i)
		assert.Equal(t, first.body, again.body, "replay %d body", i)
		assert.Equal(t, "application/json", again.header.Get("Content-Type"), "replay %d Content-Type", i)
		assert.Equal(t, "true", again.header.Get("Idempotent-Replayed"), "replay %d header", i)
	}

	assert.Equal(t, 1, s.EffectsForKey("k1"), "EffectsForKey")
	assert.Equal(t, 1, s.EffectsForPayload([]byte(`{"amount":100}`)), "EffectsForPayload")
	assert.Equal(t, 3, s.RequestsForKey("k1"), "RequestsForKey")
	st := s.Stats()
	assert.Equal(t, 2, st.Replays, "Stats.Replays")
	assert.Equal(t, 3, st.Requests, "Stats.Requests")
}

func TestInProgressConflict(t *testing.T) {
	s, gate := startGated(t, Options{Faults: faultOnFirst(FaultDelay)})
	c := testClient(t, s)
	url := s.URL() + "/payments"

	var wg sync.WaitGroup
	var first reply
	var firstErr error
	wg.Go(func() { first, firstErr = send(c, "POST", url, "k", "body") })
	wake := <-gate // the first request holds the claim until the test lets it go
	before, _ := owner(s, "k")

	second := mustSend(t, c, "POST", url, "k", "body")
	assert.Equal(t, http.StatusConflict, second.status)
	assert.JSONEq(t, `{"error":"a request with this key is in progress"}`, second.body)
	after, _ := owner(s, "k")
	assert.Equal(t, before, after, "owner token changed by a 409")

	close(wake)
	wg.Wait()
	require.NoError(t, firstErr)
	assert.Equal(t, http.StatusCreated, first.status, "first request")
	third := mustSend(t, c, "POST", url, "k", "body")
	assert.Equal(t, "true", third.header.Get("Idempotent-Replayed"), "after completion")
	assert.Equal(t, first.body, third.body)
	assert.Equal(t, 1, s.EffectsForKey("k"))
	assert.Equal(t, 1, s.Stats().Conflicts, "Stats.Conflicts")
}

func TestConcurrentSameKeyAppliesOnce(t *testing.T) {
	s := startServer(t, Options{})
	c := testClient(t, s)
	url := s.URL() + "/payments"

	const n = 20
	replies := make([]reply, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { replies[i], errs[i] = send(c, "POST", url, "same", "x") })
	}
	wg.Wait()
	for i, r := range replies {
		require.NoError(t, errs[i], "request %d", i)
		// A late request may also be a replay, which is a 201 too.
		if r.status != http.StatusCreated && r.status != http.StatusConflict {
			t.Errorf("request %d: got status %d, want 201 or 409", i, r.status)
		}
	}
	assert.Equal(t, 1, s.EffectsForKey("same"), "EffectsForKey")
	assert.Equal(t, 1, s.TotalEffects(), "TotalEffects")
}

func TestFingerprintMismatch(t *testing.T) {
	tests := []struct {
		name   string
		method string
		path   string
		body   string
	}{
		{"other body", "POST", "/payments", `{"amount":200}`},
		{"other method and path", "PATCH", "/payments/pay_1", `{"amount":100}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := startServer(t, Options{})
			c := testClient(t, s)
			mustSend(t, c, "POST", s.URL()+"/payments", "k", `{"amount":100}`)

			got := mustSend(t, c, tt.method, s.URL()+tt.path, "k", tt.body)
			assert.Equal(t, http.StatusUnprocessableEntity, got.status)
			assert.JSONEq(t, `{"error":"idempotency key reused with a different payload"}`, got.body)
			assert.Equal(t, 1, s.EffectsForKey("k"), "EffectsForKey")
			assert.Equal(t, 1, s.Stats().Mismatches, "Stats.Mismatches")
		})
	}
}

func TestKeyValidation(t *testing.T) {
	tests := []struct {
		name        string
		opts        Options
		header      string // "" sends no key header
		key         string
		wantStatus  int
		wantError   string
		wantEffects int
	}{
		{"required and missing", Options{RequireKey: true}, "", "", 400, "idempotency key required", 0},
		{"malformed sf-string", Options{}, "Idempotency-Key", `"abc`, 400, "malformed idempotency key", 0},
		{"empty sf-string", Options{}, "Idempotency-Key", `""`, 400, "idempotency key is empty", 0},
		{"too long", Options{}, "Idempotency-Key", strings.Repeat("k", 256), 400, "idempotency key is longer than 255 characters", 0},
		{"optional and missing", Options{}, "", "", 201, "", 1},
		{"bare key, sf-string only", Options{SFStringOnly: true}, "Idempotency-Key", "abc", 400, "idempotency key is not an sf-string", 0},
		{"sf-string key, sf-string only", Options{SFStringOnly: true}, "Idempotency-Key", `"abc"`, 201, "", 1},
		{"custom header", Options{KeyHeader: "X-Request-Key", RequireKey: true}, "X-Request-Key", "abc", 201, "", 1},
		{"custom header, default one ignored", Options{KeyHeader: "X-Request-Key", RequireKey: true}, "Idempotency-Key", "abc", 400, "idempotency key required", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := startServer(t, tt.opts)
			req, err := http.NewRequest("POST", s.URL()+"/payments", strings.NewReader("x"))
			require.NoError(t, err)
			if tt.header != "" {
				req.Header.Set(tt.header, tt.key)
			}
			resp, err := testClient(t, s).Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			assert.Equal(t, tt.wantStatus, resp.StatusCode, "status")
			if tt.wantError != "" {
				var got struct{ Error string }
				require.NoError(t, decodeJSON(resp, &got))
				assert.Equal(t, tt.wantError, got.Error, "error message")
			}
			assert.Equal(t, tt.wantEffects, s.TotalEffects(), "TotalEffects")
		})
	}
}

func TestKeylessPostIsNewEffectEachTime(t *testing.T) {
	s := startServer(t, Options{})
	c := testClient(t, s)
	a := mustSend(t, c, "POST", s.URL()+"/payments", "", "same body")
	b := mustSend(t, c, "POST", s.URL()+"/payments", "", "same body")
	assert.NotEqual(t, a.body, b.body, "keyless requests shared a response")
	assert.Equal(t, 2, s.EffectsForPayload([]byte("same body")), "EffectsForPayload")
}

func TestReleaseAfterPreEffectFailure(t *testing.T) {
	tests := []struct {
		fault          Fault
		retryAfter     time.Duration
		wantStatus     int
		wantRetryAfter string
	}{
		{Fault503, 0, 503, ""},
		{Fault503, 2 * time.Second, 503, "2"},
		{Fault429, 0, 429, "1"},
		{Fault429, 1500 * time.Millisecond, 429, "2"},
	}
	for _, tt := range tests {
		t.Run(tt.fault.String()+"/"+tt.retryAfter.String(), func(t *testing.T) {
			s := startServer(t, Options{Faults: faultOnFirst(tt.fault), RetryAfter: tt.retryAfter})
			c := testClient(t, s)
			url := s.URL() + "/payments"

			failed := mustSend(t, c, "POST", url, "k", "x")
			assert.Equal(t, tt.wantStatus, failed.status, "first status")
			assert.Equal(t, tt.wantRetryAfter, failed.header.Get("Retry-After"), "Retry-After")
			assert.Equal(t, 0, s.EffectsForKey("k"), "effects after the failure")
			_, held := owner(s, "k")
			assert.False(t, held, "claim kept after a pre-effect failure")

			retry := mustSend(t, c, "POST", url, "k", "x")
			assert.Equal(t, http.StatusCreated, retry.status, "retry status")
			assert.Empty(t, retry.header.Get("Idempotent-Replayed"), "retry was a replay")
			assert.Equal(t, 1, s.EffectsForKey("k"), "effects after the retry")
			assert.Equal(t, 1, s.Stats().Released, "Stats.Released")
		})
	}
}

func TestFencedCompletionAfterTakeover(t *testing.T) {
	tests := []struct {
		name string
		// takerDelayed makes the taker still hold the claim when the slow
		// request wakes, so only the owner token can fence it; otherwise
		// the record is already completed by then.
		takerDelayed bool
	}{
		{"takeover completed first", false},
		{"takeover still running", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			delayed := 1
			if tt.takerDelayed {
				delayed = 2
			}
			clock := newFakeClock()
			s := New(Options{
				Now:   clock.Now,
				Lease: 10 * time.Second,
				Faults: func(_ *http.Request, _ string, seen int) Fault {
					if seen < delayed {
						return FaultDelay
					}
					return FaultNone
				},
			})
			gate := make(pauseGate)
			s.gate = gate // the test ends each pause: no real-time ordering
			require.NoError(t, s.Start())
			t.Cleanup(s.Close)
			c := testClient(t, s)
			url := s.URL() + "/payments"

			var slow reply
			var slowErr error
			slowDone := make(chan struct{})
			go func() {
				defer close(slowDone)
				slow, slowErr = send(c, "POST", url, "k", "x")
			}()
			wakeSlow := <-gate // the slow request holds the claim
			first, _ := owner(s, "k")

			// The slow request's lease expires while it sleeps; the next
			// request with the key takes the claim over.
			clock.Advance(11 * time.Second)
			var taker reply
			var takerErr error
			takerDone := make(chan struct{})
			go func() {
				defer close(takerDone)
				taker, takerErr = send(c, "POST", url, "k", "x")
			}()
			wakeTaker := make(chan struct{})
			if tt.takerDelayed {
				wakeTaker = <-gate // the taker holds the claim it took over
			} else {
				close(wakeTaker)
				<-takerDone // the taker has completed the record
			}

			close(wakeSlow)
			<-slowDone
			require.NoError(t, slowErr)
			assert.Equal(t, http.StatusConflict, slow.status, "fenced request status")
			if tt.takerDelayed {
				second, _ := owner(s, "k")
				assert.NotEqual(t, first, second, "owner token unchanged by takeover")
				assert.Equal(t, 0, s.EffectsForKey("k"), "fenced request applied its effect")
				close(wakeTaker)
			}
			<-takerDone
			require.NoError(t, takerErr)
			assert.Equal(t, http.StatusCreated, taker.status, "takeover status")
			assert.Empty(t, taker.header.Get("Idempotent-Replayed"), "takeover was a replay")
			assert.Equal(t, 1, s.EffectsForKey("k"), "EffectsForKey")
			assert.Equal(t, 1, s.Stats().Fenced, "Stats.Fenced")

			replay := mustSend(t, c, "POST", url, "k", "x")
			assert.Equal(t, taker.body, replay.body, "replay is not the takeover's response")
		})
	}
}

func TestRetentionExpiry(t *testing.T) {
	clock := newFakeClock()
	s := startServer(t, Options{Now: clock.Now, Retention: time.Hour})
	c := testClient(t, s)
	url := s.URL() + "/payments"

	steps := []struct {
		advance      time.Duration
		wantReplayed bool
		wantEffects  int
	}{
		{0, false, 1},
		{59 * time.Minute, true, 1},
		{time.Minute, false, 2}, // exactly at the horizon: forgotten
		{30 * time.Minute, true, 2},
	}
	for i, step := range steps {
		clock.Advance(step.advance)
		got := mustSend(t, c, "POST", url, "k", "x")
		assert.Equal(t, http.StatusCreated, got.status, "step %d status", i)
		replayed := got.header.Get("Idempotent-Replayed") == "true"
		assert.Equal(t, step.wantReplayed, replayed, "step %d replayed: got %v, want %v", i, replayed, step.wantReplayed)
		assert.Equal(t, step.wantEffects, s.EffectsForKey("k"), "step %d EffectsForKey", i)
	}
}

// TestRetentionCountsFromFirstClaim: a key's age runs from when the server
// first saw it, not from when its effect completed, so a slow first request
// does not stretch the horizon a client relies on.
func TestRetentionCountsFromFirstClaim(t *testing.T) {
	clock := newFakeClock()
	s, gate := startGated(t, Options{
		Now:       clock.Now,
		Retention: time.Hour,
		Lease:     2 * time.Hour,
		Faults:    faultOnFirst(FaultDelay),
	})
	c := testClient(t, s)
	url := s.URL() + "/payments"

	var wg sync.WaitGroup
	var first reply
	var firstErr error
	wg.Go(func() { first, firstErr = send(c, "POST", url, "k", "x") })
	wake := <-gate                  // the claim is made; the effect waits for the test
	clock.Advance(40 * time.Minute) // the effect completes 40 minutes after the claim
	close(wake)
	wg.Wait()
	require.NoError(t, firstErr)
	require.Equal(t, http.StatusCreated, first.status, "first request")

	steps := []struct {
		advance      time.Duration
		wantReplayed bool
		wantEffects  int
	}{
		{19 * time.Minute, true, 1},
		{time.Minute, false, 2}, // an hour after the claim, 20 minutes after completion
	}
	for i, step := range steps {
		clock.Advance(step.advance)
		got := mustSend(t, c, "POST", url, "k", "x")
		assert.Equal(t, http.StatusCreated, got.status, "step %d status", i)
		replayed := got.header.Get("Idempotent-Replayed") == "true"
		assert.Equal(t, step.wantReplayed, replayed, "step %d replayed: got %v, want %v", i, replayed, step.wantReplayed)
		assert.Equal(t, step.wantEffects, s.EffectsForKey("k"), "step %d EffectsForKey", i)
	}
}

func TestExpiredLeaseWithoutTakeoverCompletes(t *testing.T) {
	clock := newFakeClock()
	s, gate := startGated(t, Options{
		Now:    clock.Now,
		Lease:  time.Second,
		Faults: faultOnFirst(FaultDelay),
	})
	c := testClient(t, s)

	var wg sync.WaitGroup
	var got reply
	var err error
	wg.Go(func() { got, err = send(c, "POST", s.URL()+"/payments", "k", "x") })
	wake := <-gate             // the claim is made; the effect waits for the test
	clock.Advance(time.Minute) // nobody takes over, so nothing fences
	close(wake)
	wg.Wait()
	require.NoError(t, err)
	assert.Equal(t, http.StatusCreated, got.status)
	assert.Equal(t, 1, s.EffectsForKey("k"))
	assert.Equal(t, 0, s.Stats().Fenced, "Stats.Fenced")
}
