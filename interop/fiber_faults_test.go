package interop

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"

	"github.com/idem-go/idem"
)

// TestFiberExactlyOnceUnderFaults runs idem against a fiber app configured
// to cooperate (Idempotency-Key, 400 for refused keys, replays marked), with
// one fault injected into the first arrival of the payment.
func TestFiberExactlyOnceUnderFaults(t *testing.T) {
	t.Parallel()
	p := quickPolicy()
	p.MaxAttempts, p.AttemptTimeout = 6, 500*time.Millisecond
	tests := []struct {
		fault        fiberFault
		wantOutcome  idem.Outcome
		wantReplayed bool
		wantEffects  int
		wantErr      error
	}{
		{fault: fiberOK, wantOutcome: idem.Applied, wantEffects: 1},
		// The answer was stored, then the connection dropped: the retry gets it.
		{fault: fiberCommitThenDrop, wantOutcome: idem.Applied, wantReplayed: true, wantEffects: 1},
		// Not stored: the retry executes.
		{fault: fiberReturn503, wantOutcome: idem.Applied, wantEffects: 1},
		// The retries wait on fiber's lock, then get the stored answer.
		{fault: fiberSlow, wantOutcome: idem.Applied, wantReplayed: true, wantEffects: 1},
		// Stored and replayed: the retry gets the stored 503, marked replayed,
		// which every later attempt would get again: final, and the outcome
		// can only be Unknown.
		{fault: fiberWrite503, wantOutcome: idem.Unknown, wantEffects: 0, wantErr: idem.ErrServerSaidStop},
		// Stored and replayed: the retry gets the stored 429, final; nothing
		// was done.
		{fault: fiberWrite429, wantOutcome: idem.NotApplied, wantEffects: 0, wantErr: idem.ErrServerSaidStop},
		// Not stored although the effect happened: fiber executes the retry
		// again. idem reports Applied truthfully; the duplicate is the
		// server's (a fiber handler must not return an error after its
		// effect).
		{fault: fiberErrorAfterEffect, wantOutcome: idem.Applied, wantEffects: 2},
	}
	for _, tt := range tests {
		t.Run(tt.fault.String(), func(t *testing.T) {
			t.Parallel()
			shop := startShop(t, shopConfig{
				idem: withKeyHeader(), errorHandler: rejectBadKeys, markReplays: true,
				plan: firstArrival(tt.fault), slow: 1200 * time.Millisecond,
			})
			c := newClient(t, p)
			d := do(t, c, payment(t, shop.URL+"/pay", "p1"))

			assert.Equal(t, tt.wantOutcome, d.outcome, "outcome (err: %v, attempts %v %v)", d.err, classes(d.attempts), statuses(d.attempts))
			if tt.wantReplayed { // a loaded machine may turn any first attempt into a timeout and a replay
				assert.True(t, d.replayed, "replayed")
			}
			assert.Less(t, d.elapsed, 5*time.Second, "Do must end in bounded time")
			if tt.wantErr != nil {
				assert.ErrorIs(t, d.err, tt.wantErr)
			}
			assert.Equal(t, tt.wantEffects, shop.Ledger.Effects("p1"), "effects")
		})
	}
}

// TestFiberRandomFaults runs 200 concurrent intents against the cooperating
// fiber app with faults drawn per arrival, and checks every outcome against
// the ledger: no duplicate, no success that did not happen, no failure that
// did.
func TestFiberRandomFaults(t *testing.T) {
	t.Parallel()
	const intents, workers, seed = 200, 16, 7
	plan := func(id string, seen int) fiberFault {
		if seen >= 2 {
			return fiberOK
		}
		switch n := hashPick(seed, id, seen); {
		case n < 8:
			return fiberCommitThenDrop
		case n < 16:
			return fiberReturn503
		case n < 22:
			return fiberSlow
		case n < 25:
			return fiberWrite503
		case n < 27:
			return fiberWrite429
		}
		return fiberOK
	}
	shop := startShop(t, shopConfig{
		idem: withKeyHeader(), errorHandler: rejectBadKeys, markReplays: true, plan: plan, slow: 600 * time.Millisecond,
	})
	p := quickPolicy()
	p.MaxAttempts, p.AttemptTimeout = 6, 300*time.Millisecond
	c := newClient(t, p)

	type result struct {
		id       string
		outcome  idem.Outcome
		replayed bool
		attempts int
	}
	type job struct {
		id string
		in *idem.Intent
	}
	jobs := make(chan job)
	results := make(chan result, intents)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for j := range jobs {
				d, err := tryDo(context.Background(), c, j.in)
				if err != nil {
					t.Errorf("%s: %v", j.id, err)
					continue
				}
				results <- result{id: j.id, outcome: d.outcome, replayed: d.replayed, attempts: len(d.attempts)}
			}
		})
	}
	for i := range intents {
		id := fmt.Sprintf("r%03d", i)
		jobs <- job{id: id, in: payment(t, shop.URL+"/pay", id)}
	}
	close(jobs)
	wg.Wait()
	close(results)
	shop.Close() // slow handlers still holding answers finish

	var tally Tally
	for r := range results {
		tally.Add(r.outcome, r.replayed, r.attempts, shop.Ledger.Effects(r.id))
	}
	got := tally.Counts()
	t.Logf("fiber random faults: %v", got)
	assert.Equal(t, intents, got.Intents)
	assert.Zero(t, got.Wrong(), "duplicates, false successes and false failures: %v", got)
	assert.Greater(t, got.Outcomes[idem.Applied], intents/2, "most intents settle")
	assert.Positive(t, got.Replayed, "some answers were replays")
}

// TestFiberThroughTransport: an existing *http.Client given idem's Transport
// gets the same protection from fiber, as long as the application sets the
// key where the payment is born.
func TestFiberThroughTransport(t *testing.T) {
	t.Parallel()
	tests := []struct {
		fault        fiberFault
		wantStatus   int
		wantReplayed bool
		wantEffects  int
	}{
		{fault: fiberCommitThenDrop, wantStatus: 201, wantReplayed: true, wantEffects: 1},
		{fault: fiberReturn503, wantStatus: 201, wantEffects: 1},
		// The stored 503 comes back, replayed, as the last response: a
		// RoundTripper hands back any answer.
		{fault: fiberWrite503, wantStatus: 503, wantReplayed: true, wantEffects: 0},
	}
	for _, tt := range tests {
		t.Run(tt.fault.String(), func(t *testing.T) {
			t.Parallel()
			shop := startShop(t, shopConfig{
				idem: withKeyHeader(), errorHandler: rejectBadKeys, markReplays: true, plan: firstArrival(tt.fault),
			})
			base := &http.Transport{}
			t.Cleanup(base.CloseIdleConnections)
			hc := &http.Client{Transport: &idem.Transport{Base: base, Policy: quickPolicy(), Budget: idem.NewBudget(0)}}
			got := send(t, hc, http.MethodPost, shop.URL+"/pay", KeyHeader, uuid.NewString(), string(paymentBody(t, "p1", 1)))

			assert.Equal(t, tt.wantStatus, got.status, "status")
			assert.Equal(t, tt.wantReplayed, got.header.Get(ReplayHeader) == "true", "replayed")
			assert.Equal(t, tt.wantEffects, shop.Ledger.Effects("p1"), "effects")
		})
	}
}
