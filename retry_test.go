package idem

import (
	"context"
	"reflect"
	"strings"
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

// TestPolicyNarrow: a per-call policy narrows the Client's, field by field:
// a zero field keeps the Client's, a limit takes the smaller, a delay the
// larger, and hedging is never turned on.
func TestPolicyNarrow(t *testing.T) {
	const ms = time.Millisecond
	def := defaultPolicy()
	with := func(f func(*Policy)) Policy {
		p := defaultPolicy()
		f(&p)
		return p
	}
	tests := []struct {
		name         string
		client, call Policy // client without its defaults
		want         Policy
	}{
		{"zero call keeps the Client's", Policy{MaxAttempts: 1, MaxElapsed: time.Second}, Policy{},
			with(func(p *Policy) { p.MaxAttempts, p.MaxElapsed = 1, time.Second })},
		{"zero call keeps the defaults", Policy{}, Policy{}, def},

		{"MaxAttempts smaller narrows", Policy{MaxAttempts: 3}, Policy{MaxAttempts: 2}, with(func(p *Policy) { p.MaxAttempts = 2 })},
		{"MaxAttempts larger does not widen", Policy{MaxAttempts: 2}, Policy{MaxAttempts: 10}, with(func(p *Policy) { p.MaxAttempts = 2 })},
		{"MaxAttempts larger than the default does not widen", Policy{}, Policy{MaxAttempts: 10}, def},

		{"MaxElapsed where the Client has none", Policy{}, Policy{MaxElapsed: time.Second}, with(func(p *Policy) { p.MaxElapsed = time.Second })},
		{"MaxElapsed smaller narrows", Policy{MaxElapsed: time.Hour}, Policy{MaxElapsed: time.Second}, with(func(p *Policy) { p.MaxElapsed = time.Second })},
		{"MaxElapsed larger does not widen", Policy{MaxElapsed: time.Second}, Policy{MaxElapsed: time.Hour}, with(func(p *Policy) { p.MaxElapsed = time.Second })},

		{"AttemptTimeout where the Client has none", Policy{}, Policy{AttemptTimeout: time.Second}, with(func(p *Policy) { p.AttemptTimeout = time.Second })},
		{"AttemptTimeout smaller narrows", Policy{AttemptTimeout: time.Minute}, Policy{AttemptTimeout: time.Second}, with(func(p *Policy) { p.AttemptTimeout = time.Second })},
		{"AttemptTimeout larger does not widen", Policy{AttemptTimeout: time.Second}, Policy{AttemptTimeout: time.Minute}, with(func(p *Policy) { p.AttemptTimeout = time.Second })},

		{"MaxRetryAfter smaller narrows", Policy{}, Policy{MaxRetryAfter: time.Second}, with(func(p *Policy) { p.MaxRetryAfter = time.Second })},
		{"MaxRetryAfter larger does not widen", Policy{MaxRetryAfter: time.Second}, Policy{MaxRetryAfter: time.Hour}, with(func(p *Policy) { p.MaxRetryAfter = time.Second })},
		{"MaxRetryAfter larger than the default does not widen", Policy{}, Policy{MaxRetryAfter: time.Hour}, def},

		{"InFlightWindow smaller narrows", Policy{}, Policy{InFlightWindow: time.Second}, with(func(p *Policy) { p.InFlightWindow = time.Second })},
		{"InFlightWindow larger does not widen", Policy{InFlightWindow: time.Second}, Policy{InFlightWindow: time.Hour}, with(func(p *Policy) { p.InFlightWindow = time.Second })},

		{"BaseDelay shorter does not hasten", Policy{}, Policy{BaseDelay: ms}, def},
		{"BaseDelay longer slows", Policy{BaseDelay: ms}, Policy{BaseDelay: time.Second}, with(func(p *Policy) { p.BaseDelay = time.Second })},
		{"MaxDelay shorter does not hasten", Policy{}, Policy{MaxDelay: ms}, def},
		{"MaxDelay longer slows", Policy{}, Policy{MaxDelay: time.Minute}, with(func(p *Policy) { p.MaxDelay = time.Minute })},

		{"HedgeAfter cannot turn hedging on", Policy{}, Policy{HedgeAfter: 20 * ms}, def},
		{"HedgeAfter sooner does not hedge more", Policy{HedgeAfter: time.Second}, Policy{HedgeAfter: 20 * ms}, with(func(p *Policy) { p.HedgeAfter = time.Second })},
		{"HedgeAfter later hedges less", Policy{HedgeAfter: 20 * ms}, Policy{HedgeAfter: time.Second}, with(func(p *Policy) { p.HedgeAfter = time.Second })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client, err := tt.client.withDefaults()
			require.NoError(t, err)
			got := client.narrow(tt.call)
			assert.Equal(t, tt.want, got, "%+v.narrow(%+v)", client, tt.call)
		})
	}
	// A field added to Policy must be narrowed too: each has rows above
	// (Veto has TestPolicyNarrowVeto).
	for f := range reflect.TypeFor[Policy]().Fields() {
		covered := f.Name == "Veto"
		for _, tt := range tests {
			covered = covered || strings.HasPrefix(tt.name, f.Name+" ")
		}
		assert.True(t, covered, "Policy.%s has no row in TestPolicyNarrow: how does a per-call policy narrow it?", f.Name)
	}
}

// TestPolicyNarrowVeto: both vetoes apply, the Client's first; either
// alone is kept.
func TestPolicyNarrowVeto(t *testing.T) {
	var asked []string
	veto := func(name string, says bool) func(context.Context, AttemptInfo) bool {
		return func(context.Context, AttemptInfo) bool {
			asked = append(asked, name)
			return says
		}
	}
	tests := []struct {
		name         string
		client, call func(context.Context, AttemptInfo) bool
		want         bool
		asked        []string
	}{
		{"neither", nil, nil, false, nil},
		{"the Client's alone", veto("client", true), nil, true, []string{"client"}},
		{"the call's alone", nil, veto("call", true), true, []string{"call"}},
		{"the Client's vetoes", veto("client", true), veto("call", false), true, []string{"client"}},
		{"the call's vetoes", veto("client", false), veto("call", true), true, []string{"client", "call"}},
		{"neither vetoes", veto("client", false), veto("call", false), false, []string{"client", "call"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			asked = nil
			got := defaultPolicy()
			got.Veto = tt.client
			got = got.narrow(Policy{Veto: tt.call})
			if tt.client == nil && tt.call == nil {
				assert.Nil(t, got.Veto)
				return
			}
			require.NotNil(t, got.Veto)
			assert.Equal(t, tt.want, got.Veto(context.Background(), AttemptInfo{}))
			assert.Equal(t, tt.asked, asked, "vetoes asked, in order")
		})
	}
}
