package idem

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPolicyDefaults(t *testing.T) {
	p, err := Policy{}.withDefaults()
	require.NoError(t, err)
	assert.Equal(t, Policy{MaxAttempts: 4, BaseDelay: 200 * time.Millisecond, MaxDelay: 10 * time.Second, MaxRetryAfter: time.Minute, InFlightWindow: 30 * time.Second}, p)
	assert.Equal(t, defaultPolicy(), p, "the zero Policy is the default policy")

	kept, err := Policy{MaxAttempts: 1, BaseDelay: time.Millisecond, MaxDelay: time.Second, MaxElapsed: time.Hour, AttemptTimeout: 3 * time.Second, MaxRetryAfter: 5 * time.Second, InFlightWindow: time.Minute}.withDefaults()
	require.NoError(t, err)
	assert.Equal(t, 1, kept.MaxAttempts)
	assert.Equal(t, time.Hour, kept.MaxElapsed)
	assert.Equal(t, 3*time.Second, kept.AttemptTimeout)
	assert.Equal(t, Policy{MaxAttempts: 1, BaseDelay: time.Millisecond, MaxDelay: time.Second, MaxElapsed: time.Hour, AttemptTimeout: 3 * time.Second, MaxRetryAfter: 5 * time.Second, InFlightWindow: time.Minute}, kept, "set fields are kept")

	for _, bad := range []Policy{{MaxAttempts: -1}, {BaseDelay: -1}, {MaxDelay: -1}, {MaxElapsed: -1}, {AttemptTimeout: -1}, {MaxRetryAfter: -1}, {InFlightWindow: -1}} {
		_, err := bad.withDefaults()
		assert.ErrorIs(t, err, ErrInvalidPolicy, "%+v", bad)
		assert.Contains(t, err.Error(), "is negative")
	}
}

func TestBudget(t *testing.T) {
	b := NewBudget(3)
	steps := []struct {
		op     string // "take" or "answered"
		ok     bool   // take's result
		tokens int    // after the step
	}{
		{"take", true, 2},
		{"take", true, 1},
		{"take", true, 0},
		{"take", false, 0}, // a refusal costs nothing
		{"answered", true, 1},
		{"take", true, 0},
		{"answered", true, 1},
		{"answered", true, 2},
		{"answered", true, 3},
		{"answered", true, 3}, // never above capacity
	}
	for i, st := range steps {
		ok := true
		if st.op == "take" {
			ok = b.take(origin{})
		} else {
			b.answered(origin{})
		}
		if ok != st.ok || b.left() != st.tokens {
			t.Errorf("step %d %s: ok %v, tokens %d; want %v, %d", i, st.op, ok, b.left(), st.ok, st.tokens)
		}
	}
}

func TestBudgetUnlimited(t *testing.T) {
	b := NewBudget(0)
	assert.Equal(t, -1, b.left())
	for range 1000 {
		require.True(t, b.take(origin{}))
	}
	b.answered(origin{})
	assert.Equal(t, -1, b.left(), "a success leaves an unlimited budget unlimited")
	assert.Equal(t, -1, NewBudget(-5).left())
}

func TestBudgetConcurrent(t *testing.T) {
	b := NewBudget(DefaultBudgetTokens)
	var wg sync.WaitGroup
	var mu sync.Mutex
	granted := 0
	for range 16 {
		wg.Go(func() {
			for range 100 {
				if b.take(origin{}) {
					mu.Lock()
					granted++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	assert.Equal(t, DefaultBudgetTokens, granted, "a full budget allows exactly capacity retries")
	assert.Equal(t, 0, b.left())
}

// TestBudgetRefilledOnlyByServedAnswers: a 429 the server says not to retry
// ends the operation but is no served answer; a 404 is.
func TestBudgetRefilledOnlyByServedAnswers(t *testing.T) {
	tests := []struct {
		name   string
		steps  []step
		tokens int // left of a budget of 2 after one retry
	}{
		{"429 then 429 with Stripe-Should-Retry false", []step{answer(429), answer(429, "Stripe-Should-Retry", "false")}, 1},
		{"503 then 404", []step{answer(503), answer(404)}, 2},
		{"503 then 201", []step{answer(503), answer(201)}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newScripted(t, tt.steps...)
			c, _ := testClient(t, nil)
			c.Budget = NewBudget(2)
			res, err := c.Do(context.Background(), mustIntent(t, "PUT", srv.URL, "x"))
			if err == nil {
				res.Response.Body.Close()
			}
			assert.Equal(t, tt.tokens, c.Budget.left())
		})
	}
}
