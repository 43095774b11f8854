package idem

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTry: one attempt and the table's verdict on it, in the light of prior.
func TestTry(t *testing.T) {
	tests := []struct {
		name       string
		method     string
		prior      Outcome
		steps      []step
		refuse     int
		class      Class
		action     Action
		outcome    Outcome
		inDoubt    bool
		retryAfter string // the header, for the caller's retry rule to judge
	}{
		{"applied", "POST", NoOutcome, []step{answer(201)}, 0, ClassApplied, ActionDone, Applied, false, ""},
		{"DELETE 404 after an earlier attempt in doubt", "DELETE", Unknown, []step{answer(404)}, 0, ClassAlreadyApplied, ActionDone, AlreadyApplied, false, ""},
		{"DELETE 404 with no history", "DELETE", NoOutcome, []step{answer(404)}, 0, ClassRejected, ActionStop, NotApplied, false, ""},
		{"a prior NotApplied is no doubt", "DELETE", NotApplied, []step{answer(404)}, 0, ClassRejected, ActionStop, NotApplied, false, ""},
		{"Retry-After is passed on unjudged", "POST", NoOutcome, []step{answer(429, "Retry-After", "7200")}, 0, ClassNotProcessed, ActionRetry, NotApplied, false, "7200"},
		{"history makes a 429 unknown", "POST", Unknown, []step{answer(429)}, 0, ClassNotProcessed, ActionRetry, Unknown, false, ""},
		{"history makes a 400 unknown", "POST", Unknown, []step{answer(400)}, 0, ClassRejected, ActionStop, Unknown, false, ""},
		{"a lost answer leaves it in doubt", "POST", NoOutcome, []step{hangup}, 0, ClassAmbiguous, ActionRetry, Unknown, true, ""},
		{"never sent", "POST", NoOutcome, nil, 1, ClassNeverSent, ActionRetry, NotApplied, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newScripted(t, tt.steps...)
			d := &refusingDialer{}
			d.left.Store(int32(tt.refuse))
			c, clk := testClient(t, httpClient(t, d.DialContext))
			in := mustIntent(t, tt.method, srv.URL+"/r", "x")
			s, err := c.Try(context.Background(), in, tt.prior, 0)
			require.NoError(t, err)
			require.NotNil(t, s.Report)
			s.Report(s.Action, 0)
			retryAfter := ""
			if s.Response != nil {
				retryAfter = s.Response.Header.Get("Retry-After")
				s.Response.Body.Close()
			}
			assert.Equal(t, tt.class, s.Attempt.Class)
			assert.Equal(t, tt.action, s.Action)
			assert.Equal(t, tt.outcome, s.Outcome)
			assert.Equal(t, tt.inDoubt, s.InDoubt)
			assert.Equal(t, tt.retryAfter, retryAfter)
			answered := tt.class != ClassNeverSent && tt.class != ClassAmbiguous
			assert.Equal(t, answered, s.Response != nil)
			assert.Equal(t, !answered, s.Attempt.Err != nil)
			assert.Empty(t, clk.Sleeps(), "a single attempt never waits")
			wantReqs := 1
			if tt.refuse > 0 {
				wantReqs = 0
			}
			assert.Len(t, srv.Requests(), wantReqs, "exactly one attempt")
		})
	}
}

// TestTryBadInput: an error, and nothing sent, for what no attempt can be
// made of.
func TestTryBadInput(t *testing.T) {
	srv := newScripted(t)
	c, _ := testClient(t, nil)
	in := mustIntent(t, "POST", srv.URL, "x")
	_, err := c.Try(context.Background(), nil, NoOutcome, 0)
	assert.ErrorIs(t, err, ErrInvalidIntent)
	//lint:ignore SA1012 testing the nil-context guard
	_, err = c.Try(nil, in, NoOutcome, 0) //nolint:staticcheck
	assert.ErrorContains(t, err, "nil context")
	_, err = c.Try(context.Background(), in, NoOutcome, -1)
	assert.ErrorIs(t, err, ErrInvalidPolicy)
	assert.ErrorContains(t, err, "timeout is negative")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = c.Try(ctx, in, NoOutcome, 0)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Empty(t, srv.Requests())
}

// TestTryReportsOnce: the Client's observers hear of an attempt when Report
// tells what followed it, once however often it is called.
func TestTryReportsOnce(t *testing.T) {
	srv := newScripted(t, answer(503))
	c, _ := testClient(t, nil)
	var mu sync.Mutex // guards heard
	var heard []AttemptInfo
	c.OnAttempt = func(_ context.Context, ai AttemptInfo) {
		mu.Lock()
		defer mu.Unlock()
		heard = append(heard, ai)
	}
	s, err := c.Try(context.Background(), mustIntent(t, "POST", srv.URL, "x"), NoOutcome, 0)
	require.NoError(t, err)
	s.Response.Body.Close()
	require.Equal(t, ActionRetry, s.Action)
	assert.Empty(t, heard, "not reported before the caller decides")
	assert.Zero(t, c.Stats().Requests, "not counted before the caller decides")

	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() { s.Report(ActionExpire, time.Hour) })
	}
	wg.Wait()
	s.Report(ActionRetry, time.Minute)
	require.Len(t, heard, 1, "reported once")
	assert.Equal(t, ActionExpire, heard[0].Action, "what the caller did, not the table's advice")
	assert.Equal(t, time.Hour, heard[0].Attempt.Wait)
	assert.Equal(t, ClassAmbiguous, heard[0].Attempt.Class)
	assert.Equal(t, uint64(1), c.Stats().Requests)
	assert.Zero(t, c.Stats().Retries, "the caller's schedule retries, not the Client")
}

// TestTryNoBudgetNoWait: Try attempts whatever the retry budget holds,
// neither spends nor refills it, and never waits, whatever the answer asks.
func TestTryNoBudgetNoWait(t *testing.T) {
	srv := newScripted(t, answer(503), answer(429, "Retry-After", "60"), answer(500), answer(201))
	c, clk := testClient(t, nil)
	c.Budget = NewBudget(1)
	in := mustIntent(t, "POST", srv.URL, "x")
	require.True(t, c.Budget.take(originOf(in.u)), "the budget's one token taken")
	prior := NoOutcome
	var actions []Action
	for range 4 {
		s, err := c.Try(context.Background(), in, prior, time.Minute)
		require.NoError(t, err)
		if s.Response != nil {
			s.Response.Body.Close()
		}
		s.Report(s.Action, 0)
		actions = append(actions, s.Action)
		prior = s.Outcome
	}
	assert.Equal(t, []Action{ActionRetry, ActionRetry, ActionRetry, ActionDone}, actions, "an empty budget refuses no attempt")
	assert.Len(t, srv.Requests(), 4)
	assert.Zero(t, c.Budget.left(), "a served answer refills nothing")
	assert.Zero(t, c.Stats().BudgetRefusals)
	assert.Empty(t, clk.Sleeps(), "Try never waits")
}
