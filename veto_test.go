package idem

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem/idemtest"
)

// vetoRecorder is a Policy.Veto that records what it was shown and vetoes
// what stop says.
type vetoRecorder struct {
	mu   sync.Mutex // guards seen
	seen []AttemptInfo
	stop func(AttemptInfo) bool
}

func (v *vetoRecorder) veto(_ context.Context, ai AttemptInfo) bool {
	v.mu.Lock()
	v.seen = append(v.seen, ai)
	v.mu.Unlock()
	return v.stop != nil && v.stop(ai)
}

func (v *vetoRecorder) Seen() []AttemptInfo {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]AttemptInfo(nil), v.seen...)
}

// releasedKey is the recipe of the README for a server that releases a key
// when its handler fails with a 5xx: no keyed retry of a 500.
func releasedKey(_ context.Context, ai AttemptInfo) bool {
	return ai.Keyed && ai.Attempt.Status == http.StatusInternalServerError
}

// panicVeto fails the test if the table's stop or success ever reaches a
// veto.
func panicVeto(context.Context, AttemptInfo) bool {
	panic("Veto called where the table does not retry")
}

// TestVetoCannotWiden: the veto is never asked where the table stops or
// succeeds, so a veto that would allow everything changes nothing there.
func TestVetoCannotWiden(t *testing.T) {
	tests := []struct {
		name     string
		opts     []IntentOption
		steps    []step
		veto     func(context.Context, AttemptInfo) bool
		outcome  Outcome
		cause    error // nil for a Result
		requests int
	}{
		{"POST without key 503, veto allows all", []IntentOption{WithoutKey()}, []step{answer(503), answer(201)},
			func(context.Context, AttemptInfo) bool { return false }, Unknown, ErrNoKey, 1},
		{"POST without key 503", []IntentOption{WithoutKey()}, []step{answer(503)}, panicVeto, Unknown, ErrNoKey, 1},
		{"keyed POST 201", nil, []step{answer(201)}, panicVeto, Applied, nil, 1},
		{"keyed POST 400", nil, []step{answer(400)}, panicVeto, NotApplied, nil, 1},
		{"keyed POST 422", nil, []step{answer(422)}, panicVeto, NotApplied, ErrKeyReused, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newScripted(t, tt.steps...)
			c, _ := testClient(t, nil)
			c.Policy.Veto = tt.veto
			res, err := c.Do(context.Background(), mustIntent(t, "POST", srv.URL, "{}", tt.opts...))
			assert.Len(t, srv.Requests(), tt.requests, "requests")
			if tt.cause == nil {
				require.NoError(t, err)
				res.Response.Body.Close()
				assert.Equal(t, tt.outcome, res.Outcome, "Outcome = %v, want %v", res.Outcome, tt.outcome)
				return
			}
			e := asError(t, err)
			assert.ErrorIs(t, err, tt.cause)
			assert.NotErrorIs(t, err, ErrVetoed)
			assert.Equal(t, tt.outcome, e.Outcome, "Outcome = %v, want %v", e.Outcome, tt.outcome)
		})
	}
}

// TestVetoStopsRetry: a veto stops a retry the table allows, at once,
// with the table's outcome for an end there, ErrVetoed, and no budget
// token spent.
func TestVetoStopsRetry(t *testing.T) {
	tests := []struct {
		name    string
		method  string
		status  int
		outcome Outcome
	}{
		// A 500 is ambiguous: whatever the method, it leaves the operation in doubt.
		{"keyed POST 500", "POST", 500, Unknown},
		{"GET 503", "GET", 503, Unknown},
		// A 429 is not processed: nothing is in doubt.
		{"keyed POST 429", "POST", 429, NotApplied},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newScripted(t, answer(tt.status), answer(tt.status), answer(201))
			c, clk := testClient(t, nil)
			c.Budget = NewBudget(1)
			var actions []Action
			c.OnAttempt = func(_ context.Context, ai AttemptInfo) { actions = append(actions, ai.Action) }
			v := &vetoRecorder{stop: func(AttemptInfo) bool { return true }}
			c.Policy.Veto = v.veto
			body := "{}"
			if tt.method == "GET" {
				body = ""
			}
			res, err := c.Do(context.Background(), mustIntent(t, tt.method, srv.URL, body))
			require.Nil(t, res)
			e := asError(t, err)
			assert.ErrorIs(t, err, ErrVetoed)
			assert.Equal(t, tt.outcome, e.Outcome, "Outcome = %v, want %v", e.Outcome, tt.outcome)
			assert.Contains(t, e.Reason, "veto")
			assert.Equal(t, tt.status, e.Status)
			assert.Len(t, srv.Requests(), 1, "requests")
			assert.Len(t, v.Seen(), 1, "veto calls")
			assert.Empty(t, clk.Sleeps(), "waits")
			assert.Equal(t, []Action{ActionStop}, actions, "OnAttempt actions")
			st := c.Stats()
			assert.Equal(t, 1, st.BudgetTokens, "budget tokens left")
			assert.Zero(t, st.Retries, "retries")
			assert.Equal(t, uint64(1), st.Outcomes[tt.outcome])
		})
	}
}

// TestVetoSeesAttempt: the veto sees the attempt's method, URL without its
// query, number, status and whether it was keyed, before each retry the
// table allows and never after the last attempt.
func TestVetoSeesAttempt(t *testing.T) {
	tests := []struct {
		name   string
		method string
		opts   []IntentOption
		keyed  bool
	}{
		{"keyed POST", "POST", nil, true},
		{"PUT without key", "PUT", []IntentOption{WithoutKey()}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newScripted(t, answer(503), answer(502), answer(201))
			c, _ := testClient(t, nil)
			v := &vetoRecorder{}
			c.Policy.Veto = v.veto
			res, err := c.Do(context.Background(), mustIntent(t, tt.method, srv.URL+"/p?token=s3cret", "{}", tt.opts...))
			require.NoError(t, err)
			res.Response.Body.Close()
			seen := v.Seen()
			require.Len(t, seen, 2, "veto calls")
			for i, ai := range seen {
				assert.Equal(t, tt.method, ai.Method)
				assert.Equal(t, srv.URL+"/p", ai.URL)
				assert.Equal(t, i+1, ai.N, "N")
				assert.Equal(t, []int{503, 502}[i], ai.Attempt.Status, "Attempt.Status")
				assert.Equal(t, ClassAmbiguous, ai.Attempt.Class)
				assert.Equal(t, tt.keyed, ai.Keyed, "Keyed")
				assert.Equal(t, ActionRetry, ai.Action, "Action")
			}
		})
	}
}

// TestVetoKeyInFlight: the veto may stop the polling of a key in flight,
// which then ends Unknown: a request under the key may still apply.
func TestVetoKeyInFlight(t *testing.T) {
	srv := newScripted(t, answer(409), answer(409), answer(201))
	c, _ := testClient(t, nil)
	c.Policy.Veto = func(_ context.Context, ai AttemptInfo) bool { return ai.Attempt.Status == http.StatusConflict }
	_, err := c.Do(context.Background(), mustIntent(t, "POST", srv.URL, "{}"))
	e := asError(t, err)
	assert.ErrorIs(t, err, ErrVetoed)
	assert.Equal(t, Unknown, e.Outcome)
	assert.Len(t, srv.Requests(), 1, "requests")
}

// TestVetoTransport: a Transport's Policy.Veto stops a retry too; the last
// response is handed back and the Report says why.
func TestVetoTransport(t *testing.T) {
	srv := newScripted(t, answer(500), answer(201))
	tr, _ := testTransport(t, nil)
	tr.Budget = NewBudget(1)
	tr.Policy.Veto = releasedKey
	var rep Report
	req, err := http.NewRequestWithContext(WithReport(context.Background(), &rep), "POST", srv.URL, strings.NewReader("{}"))
	require.NoError(t, err)
	req.Header.Set("Idempotency-Key", "k-veto")
	resp, err := (&http.Client{Transport: tr}).Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 500, resp.StatusCode)
	assert.Len(t, srv.Requests(), 1, "requests")
	assert.Equal(t, Unknown, rep.Outcome)
	require.NotNil(t, rep.Err)
	assert.ErrorIs(t, rep.Err, ErrVetoed)
	assert.Equal(t, 1, tr.Stats().BudgetTokens, "budget tokens left")

	// Without a key the table itself retries a PUT's 500; the recipe lets it.
	srv = newScripted(t, answer(500), answer(200))
	req, err = http.NewRequest("PUT", srv.URL, strings.NewReader("{}"))
	require.NoError(t, err)
	resp, err = (&http.Client{Transport: tr}).Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 200, resp.StatusCode)
	assert.Len(t, srv.Requests(), 2, "requests")
}

// TestWithPolicy: Do and Resume run an intent made WithPolicy by its
// policy narrowing the Client's.
func TestWithPolicy(t *testing.T) {
	t.Run("MaxAttempts 1 on a default Client", func(t *testing.T) {
		srv := newScripted(t, answer(503), answer(503), answer(503), answer(503))
		c, _ := testClient(t, nil)
		_, err := c.Do(context.Background(), mustIntent(t, "POST", srv.URL, "{}", WithPolicy(Policy{MaxAttempts: 1})))
		assert.ErrorIs(t, err, ErrAttemptsExhausted)
		assert.Len(t, srv.Requests(), 1, "requests")
	})
	t.Run("zero fields keep the Client's", func(t *testing.T) {
		srv := newScripted(t, answer(503), answer(503), answer(503), answer(503))
		c, _ := testClient(t, nil)
		c.Policy = Policy{MaxAttempts: 1}
		_, err := c.Do(context.Background(), mustIntent(t, "POST", srv.URL, "{}", WithPolicy(Policy{})))
		assert.ErrorIs(t, err, ErrAttemptsExhausted)
		assert.Len(t, srv.Requests(), 1, "requests")
	})
	t.Run("Veto", func(t *testing.T) {
		srv := newScripted(t, answer(500), answer(201))
		c, _ := testClient(t, nil)
		_, err := c.Do(context.Background(), mustIntent(t, "POST", srv.URL, "{}", WithPolicy(Policy{Veto: releasedKey})))
		assert.ErrorIs(t, err, ErrVetoed)
		assert.Len(t, srv.Requests(), 1, "requests")
	})
	t.Run("Resume", func(t *testing.T) {
		srv := newScripted(t, answer(503), answer(503), answer(503), answer(503))
		c, _ := testClient(t, nil)
		in := mustIntent(t, "POST", srv.URL, "{}", WithPolicy(Policy{MaxAttempts: 1}))
		prior := &Error{Outcome: Unknown}
		_, err := c.Resume(context.Background(), in, prior)
		e := asError(t, err)
		assert.ErrorIs(t, err, ErrAttemptsExhausted)
		assert.Equal(t, Unknown, e.Outcome)
		assert.Len(t, srv.Requests(), 1, "requests")
	})
}

// TestWithPolicyNarrows: a per-call policy only tightens the Client's. With
// the README's recipe on the Client (no keyed retry of a 500, for a server
// that releases the key after a 5xx), an intent whose policy says only
// BaseDelay: 1 ms still runs the handler once; a Client's MaxAttempts: 1
// still makes one request; a larger MaxAttempts does not add attempts.
func TestWithPolicyNarrows(t *testing.T) {
	fast := WithPolicy(Policy{BaseDelay: time.Millisecond})
	t.Run("the Client's Veto stays", func(t *testing.T) {
		for _, tt := range []struct {
			name string
			opts []IntentOption
		}{{"plain intent", nil}, {"WithPolicy", []IntentOption{fast}}} {
			t.Run(tt.name, func(t *testing.T) {
				api := idemtest.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
					w.WriteHeader(http.StatusInternalServerError) // charged the card, then failed
				}), idemtest.Options{ServerErrors: idemtest.ReleaseServerErrors})
				srv := httptest.NewServer(api)
				t.Cleanup(srv.Close)
				c, _ := testClient(t, nil)
				c.Policy = Policy{Veto: releasedKey}
				in := mustIntent(t, "POST", srv.URL, "{}", tt.opts...)
				_, err := c.Do(context.Background(), in)
				assert.ErrorIs(t, err, ErrVetoed)
				assert.Equal(t, Unknown, asError(t, err).Outcome)
				assert.Equal(t, 1, api.EffectsForKey(in.Key()), "the handler's runs: effects of one payment")
			})
		}
	})
	for _, tt := range []struct {
		name     string
		client   Policy
		call     Policy
		requests int
	}{
		{"the Client's MaxAttempts 1 stays", Policy{MaxAttempts: 1}, Policy{BaseDelay: time.Millisecond}, 1},
		{"a larger MaxAttempts does not widen", Policy{MaxAttempts: 2}, Policy{MaxAttempts: 10}, 2},
		{"a smaller MaxAttempts narrows", Policy{MaxAttempts: 3}, Policy{MaxAttempts: 2}, 2},
		{"a MaxElapsed narrows", Policy{MaxElapsed: time.Hour}, Policy{MaxElapsed: 500 * time.Millisecond}, 2}, // 0.2 s, then 0.4 s would pass 0.5 s
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := newScripted(t, answer(503), answer(503), answer(503), answer(503))
			c, _ := testClient(t, nil)
			c.Policy = tt.client
			_, err := c.Do(context.Background(), mustIntent(t, "POST", srv.URL, "{}", WithPolicy(tt.call)))
			assert.ErrorIs(t, err, ErrAttemptsExhausted)
			assert.Equal(t, tt.requests, len(srv.Requests()), "requests")
		})
	}
}

// TestWithPolicyIntent: WithPolicy refuses a negative field, leaves
// SameOperation alone, and gives the intent no binary form.
func TestWithPolicyIntent(t *testing.T) {
	_, err := NewIntent("POST", "https://pay.example/p", nil, WithPolicy(Policy{BaseDelay: -1}))
	assert.ErrorIs(t, err, ErrInvalidPolicy)
	assert.Contains(t, err.Error(), "BaseDelay")

	with, err := NewIntent("POST", "https://pay.example/p", []byte("{}"), WithKey("k-1"), WithPolicy(Policy{MaxAttempts: 1}))
	require.NoError(t, err)
	without, err := NewIntent("POST", "https://pay.example/p", []byte("{}"), WithKey("k-1"))
	require.NoError(t, err)
	assert.True(t, with.SameOperation(without), "SameOperation ignores the policy")
	assert.True(t, without.SameOperation(with), "SameOperation ignores the policy")

	_, err = with.MarshalBinary()
	require.ErrorIs(t, err, ErrInvalidIntent)
	assert.Contains(t, err.Error(), "an intent with WithPolicy cannot be queued: the queue's Options.Policy applies")
	_, err = without.MarshalBinary()
	assert.NoError(t, err)
}

// TestVetoNotOnTry: Client.Try reads no policy, the intent's neither.
func TestVetoNotOnTry(t *testing.T) {
	srv := newScripted(t, answer(500))
	c, _ := testClient(t, nil)
	c.Policy.Veto = panicVeto
	s, err := c.Try(context.Background(), mustIntent(t, "POST", srv.URL, "{}", WithPolicy(Policy{Veto: panicVeto})), NoOutcome, 0)
	require.NoError(t, err)
	s.Response.Body.Close()
	s.Report(ActionRetry, 0)
	assert.Equal(t, ActionRetry, s.Action)
	assert.False(t, errors.Is(s.Cause, ErrVetoed))
}
