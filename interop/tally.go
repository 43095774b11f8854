package interop

import (
	"errors"
	"fmt"
	"sync"

	"github.com/idem-go/idem"
)

// OutcomeOf returns the outcome Client.Do reported: the Result's, or the
// *idem.Error's. It returns false when err is neither nil nor an *idem.Error
// (an invalid intent or policy: no attempt was made).
func OutcomeOf(res *idem.Result, err error) (idem.Outcome, bool) {
	if err == nil {
		return res.Outcome, true
	}
	var e *idem.Error
	if errors.As(err, &e) {
		return e.Outcome, true
	}
	return 0, false
}

// Counts is what a Tally found.
type Counts struct {
	// Intents counts the intents added.
	Intents int
	// Outcomes counts them by reported outcome; Replayed counts Applied
	// answers the server marked as replays.
	Outcomes map[idem.Outcome]int
	Replayed int
	// Duplicates counts intents whose effect took place more than once.
	Duplicates int
	// FalseSuccess counts intents reported Applied or AlreadyApplied whose
	// effect never took place: silent losses.
	FalseSuccess int
	// FalseFailure counts intents reported NotApplied whose effect took
	// place: the caller, told it may try again, would pay twice.
	FalseFailure int
	// UnknownDone and UnknownNotDone split the Unknown outcomes by whether
	// the effect had in fact taken place.
	UnknownDone, UnknownNotDone int
	// Attempts sums the attempts reported.
	Attempts int
}

// Wrong returns the number of intents whose report broke idem's contract or
// whose effect was duplicated.
func (c Counts) Wrong() int { return c.Duplicates + c.FalseSuccess + c.FalseFailure }

// String summarizes the counts on one line.
func (c Counts) String() string {
	return fmt.Sprintf("intents=%d applied=%d (replayed %d) already-applied=%d not-applied=%d unknown=%d (effect done %d, not done %d) duplicates=%d false-success=%d false-failure=%d attempts=%d",
		c.Intents, c.Outcomes[idem.Applied], c.Replayed, c.Outcomes[idem.AlreadyApplied], c.Outcomes[idem.NotApplied],
		c.Outcomes[idem.Unknown], c.UnknownDone, c.UnknownNotDone, c.Duplicates, c.FalseSuccess, c.FalseFailure, c.Attempts)
}

// Tally compares what a client reported for each intent with what a Ledger
// says happened. A Tally is safe for concurrent use; its zero value is ready.
type Tally struct {
	mu sync.Mutex // guards c
	c  Counts
}

// Add records one intent: the outcome reported, whether the server marked it
// replayed, the attempts made, and the effects the ledger counted.
func (t *Tally) Add(o idem.Outcome, replayed bool, attempts, effects int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := &t.c
	if c.Outcomes == nil {
		c.Outcomes = make(map[idem.Outcome]int)
	}
	c.Intents++
	c.Outcomes[o]++
	c.Attempts += attempts
	if replayed {
		c.Replayed++
	}
	if effects > 1 {
		c.Duplicates++
	}
	switch {
	case o.Succeeded() && effects == 0:
		c.FalseSuccess++
	case o == idem.NotApplied && effects > 0:
		c.FalseFailure++
	case o == idem.Unknown && effects > 0:
		c.UnknownDone++
	case o == idem.Unknown:
		c.UnknownNotDone++
	}
}

// Counts returns a copy of the counts so far.
func (t *Tally) Counts() Counts {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.c
	c.Outcomes = make(map[idem.Outcome]int, len(t.c.Outcomes))
	for o, n := range t.c.Outcomes {
		c.Outcomes[o] = n
	}
	return c
}
