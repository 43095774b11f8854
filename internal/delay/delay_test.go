package delay

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestNth(t *testing.T) {
	base, max := 200*time.Millisecond, 10*time.Second
	tests := []struct {
		retry int
		r     float64
		want  time.Duration
	}{
		{1, 0.5, 200 * time.Millisecond}, // the middle of [d/2, 3d/2)
		{2, 0.5, 400 * time.Millisecond}, // doubles
		{3, 0.5, 800 * time.Millisecond}, //
		{1, 0, 100 * time.Millisecond},   // lowest
		{1, 0.999, 299800 * time.Microsecond},
		{6, 0.5, 6400 * time.Millisecond}, //
		{7, 0.5, 10 * time.Second},        // capped before jitter
		{7, 0.0, 5 * time.Second},         // jitter below the cap stays
		{7, 0.99, 10 * time.Second},       // and above is capped
		{1000, 0.5, 10 * time.Second},     // no overflow for large counts
	}
	for _, tt := range tests {
		got := Nth(base, max, tt.retry, tt.r)
		assert.Equal(t, tt.want, got, "Nth(%v, %v, %d, %v)", base, max, tt.retry, tt.r)
	}
	assert.Equal(t, 2*time.Second, Nth(time.Second, 3*time.Second, 2, 0.5))
	assert.Equal(t, 3*time.Second, Nth(time.Second, 3*time.Second, 3, 0.5))
}
