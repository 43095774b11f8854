package idemtest

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
)

// RandomFaults returns an Options.Faults function that injects each fault
// f with probability rates[f], independently of the request, and FaultNone
// otherwise. The sequence of faults is determined by seed and the order of
// calls, so a chaos run can be repeated; concurrent requests make that order
// depend on scheduling. rates is copied. It panics if a rate is negative or
// NaN, or if the rates sum to more than 1.
func RandomFaults(seed int64, rates map[Fault]float64) func(*http.Request, string, int) Fault {
	// Walk faults in a fixed order: map iteration order would make the
	// same seed give different faults.
	faults := slices.Sorted(maps.Keys(rates))
	cum := make([]float64, len(faults))
	total := 0.0
	for i, f := range faults {
		r := rates[f]
		if r < 0 || math.IsNaN(r) {
			panic(fmt.Sprintf("idemtest: RandomFaults: rate %v for %v", r, f))
		}
		total += r
		cum[i] = total
	}
	// A small tolerance lets rates like 0.1+0.2+0.7 through despite rounding.
	if total > 1+1e-9 {
		panic(fmt.Sprintf("idemtest: RandomFaults: rates sum to %v, more than 1", total))
	}
	var mu sync.Mutex // guards rng
	rng := newRand(seed)
	return func(*http.Request, string, int) Fault {
		mu.Lock()
		p := rng.Float64()
		mu.Unlock()
		for i, c := range cum {
			if p < c {
				return faults[i]
			}
		}
		return FaultNone
	}
}

// RandomRefusals returns an Options.RefuseDial function that refuses each
// dial with probability rate, deterministically for a seed and call order.
func RandomRefusals(seed int64, rate float64) func() bool {
	var mu sync.Mutex // guards rng
	rng := newRand(seed)
	return func() bool {
		mu.Lock()
		defer mu.Unlock()
		return rng.Float64() < rate
	}
}

// newRand returns a generator seeded only by seed, never by global state.
func newRand(seed int64) *rand.Rand {
	return rand.New(rand.NewPCG(uint64(seed), 0x9e3779b97f4a7c15))
}
