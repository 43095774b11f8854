package idemtest

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestRandomFaultsDeterministic(t *testing.T) {
	rates := map[Fault]float64{Fault503: 0.2, FaultCommitThenDrop: 0.1, FaultDelay: 0.1}
	draw := func(seed int64) []Fault {
		f := RandomFaults(seed, rates)
		out := make([]Fault, 500)
		for i := range out {
			out[i] = f(nil, "", 0)
		}
		return out
	}
	a, b, other := draw(7), draw(7), draw(8)
	assert.Equal(t, a, b, "same seed gave different faults")
	assert.NotEqual(t, a, other, "different seeds gave the same faults")

	counts := map[Fault]int{}
	for _, f := range a {
		counts[f]++
	}
	// Loose bounds: the point is that each rate is honoured roughly.
	for f, rate := range rates {
		want := rate * float64(len(a))
		got := float64(counts[f])
		assert.InDelta(t, want, got, want/2+10, "%v drawn %v times, want about %v", f, got, want)
	}
}

func TestRandomFaultsExtremes(t *testing.T) {
	tests := []struct {
		name  string
		rates map[Fault]float64
		want  Fault
	}{
		{"nil rates", nil, FaultNone},
		{"zero rate", map[Fault]float64{Fault503: 0}, FaultNone},
		{"certain", map[Fault]float64{Fault429: 1}, Fault429},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := RandomFaults(1, tt.rates)
			for i := range 100 {
				if got := f(nil, "", i); got != tt.want {
					t.Fatalf("call %d: got %v, want %v", i, got, tt.want)
				}
			}
		})
	}
}

func TestRandomFaultsPanicsOnBadRates(t *testing.T) {
	tests := []struct {
		name  string
		rates map[Fault]float64
	}{
		{"negative", map[Fault]float64{Fault503: -0.1}},
		{"sum over one", map[Fault]float64{Fault503: 0.6, Fault429: 0.6}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Panics(t, func() { RandomFaults(1, tt.rates) })
		})
	}
}

func TestRandomRefusals(t *testing.T) {
	draw := func(seed int64, rate float64) []bool {
		f := RandomRefusals(seed, rate)
		out := make([]bool, 200)
		for i := range out {
			out[i] = f()
		}
		return out
	}
	assert.Equal(t, draw(3, 0.5), draw(3, 0.5), "same seed gave different refusals")
	assert.NotContains(t, draw(3, 0), true, "rate 0 refused")
	assert.NotContains(t, draw(3, 1), false, "rate 1 accepted")
}
