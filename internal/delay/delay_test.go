package delay

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/stretchr/testify/assert"
)

const ms = time.Millisecond

// TestNext is the retry rule as a table: every input is a parameter, so
// each wait is exact.
func TestNext(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	client := Policy{MaxAttempts: 4, BaseDelay: 200 * ms, MaxDelay: 10 * time.Second, MaxRetryAfter: time.Minute}
	queue := Policy{BaseDelay: time.Second, MaxDelay: 5 * time.Minute} // no limits but the horizon
	elapsed := client
	elapsed.MaxElapsed = time.Second
	tests := []struct {
		name       string
		p          Policy
		n          int
		first      time.Time
		retryAfter string
		now        time.Time
		r          float64
		want       Verdict
	}{
		{"first retry, middle of the jitter", client, 1, t0, "", t0, 0.5, Verdict{Wait: 200 * ms}},
		{"first retry, lowest", client, 1, t0, "", t0, 0, Verdict{Wait: 100 * ms}},
		{"third retry doubles twice", client, 3, t0, "", t0, 0.5, Verdict{Wait: 800 * ms}},
		{"last attempt made", client, 4, t0, "", t0, 0.5,
			Verdict{Stop: AttemptsExhausted, Reason: "attempts exhausted (4 of 4)"}},
		{"attempts judged before Retry-After", client, 4, t0, "3600", t0, 0.5,
			Verdict{Stop: AttemptsExhausted, Reason: "attempts exhausted (4 of 4)"}},
		{"Retry-After longer than the backoff", client, 1, t0, "2", t0, 0.5, Verdict{Wait: 2 * time.Second, RetryAfter: 2 * time.Second}},
		{"Retry-After shorter than the backoff", client, 3, t0, "0", t0, 0.5, Verdict{Wait: 800 * ms}},
		{"Retry-After as a date", client, 1, t0, "Wed, 02 Dec 2026 10:00:30 GMT", t0, 0.5,
			Verdict{Wait: 30 * time.Second, RetryAfter: 30 * time.Second}},
		{"malformed Retry-After is none", client, 1, t0, "soon", t0, 0.5, Verdict{Wait: 200 * ms}},
		{"Retry-After over the cap", client, 1, t0, "3600", t0, 0.5, Verdict{Stop: RetryAfterTooLong, RetryAfter: time.Hour,
			Reason: "server asked to wait 1h0m0s (Retry-After), over the 1m0s cap"}},
		{"Retry-After at the cap", client, 1, t0, "60", t0, 0.5, Verdict{Wait: time.Minute, RetryAfter: time.Minute}},
		{"within max elapsed", elapsed, 2, t0, "", t0.Add(500 * ms), 0.5, Verdict{Wait: 400 * ms}},
		{"past max elapsed", elapsed, 2, t0, "", t0.Add(700 * ms), 0.5,
			Verdict{Stop: ElapsedExhausted, Reason: "max elapsed time 1s reached"}},
		{"an unknown first start is not bounded", elapsed, 2, time.Time{}, "", t0, 0.5, Verdict{Wait: 400 * ms}},
		{"no attempt limit", queue, 1000, t0, "", t0, 0.5, Verdict{Wait: 5 * time.Minute}},
		{"no Retry-After limit", queue, 1, t0, "90000", t0, 0.5, Verdict{Wait: 25 * time.Hour, RetryAfter: 25 * time.Hour}},
		{"queue backoff", queue, 3, t0, "", t0, 0, Verdict{Wait: 2 * time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Next(tt.p, tt.n, tt.first, tt.retryAfter, tt.now, tt.r)
			assert.Equal(t, tt.want, got, "Next(%+v, %d, %v, %q, %v, %v)", tt.p, tt.n, tt.first, tt.retryAfter, tt.now, tt.r)
		})
	}
}

func TestBackoff(t *testing.T) {
	base, max := 200*ms, 10*time.Second
	tests := []struct {
		n    int
		r    float64
		want time.Duration
	}{
		{1, 0.5, 200 * ms}, // the middle of [d/2, 3d/2)
		{2, 0.5, 400 * ms}, // doubles
		{3, 0.5, 800 * ms},
		{0, 0.5, 200 * ms}, // less than 1 counts as 1
		{1, 0, 100 * ms},   // lowest
		{1, 0.999, 299800 * time.Microsecond},
		{6, 0.5, 6400 * ms},
		{7, 0.5, 10 * time.Second},           // capped before jitter
		{7, 0.0, 5 * time.Second},            // jitter below the cap stays
		{7, 0.99, 10 * time.Second},          // and above is capped
		{1000, 0.5, 10 * time.Second},        // no overflow for large counts
		{math.MaxInt, 0.5, 10 * time.Second}, // nor a long loop (on 32-bit too)
	}
	for _, tt := range tests {
		got := Backoff(base, max, tt.n, tt.r)
		assert.Equal(t, tt.want, got, "Backoff(%v, %v, %d, %v)", base, max, tt.n, tt.r)
	}
	assert.Equal(t, 2*time.Second, Backoff(time.Second, 3*time.Second, 2, 0.5))
	assert.Equal(t, 3*time.Second, Backoff(time.Second, 3*time.Second, 3, 0.5))
	assert.Equal(t, 3*time.Second, Backoff(5*time.Second, 3*time.Second, 1, 0.5), "a base over the cap is capped")
	assert.Zero(t, Backoff(0, time.Second, math.MaxInt, 0.5), "a zero base stays zero, without a long loop")
}

// TestBackoffIsBackoffV4: Backoff's step n is the n-th value of the
// backoff/v4 schedule the run loop used to hold, for bases and caps drawn
// at random, so that replacing the schedule changed no wait.
func TestBackoffIsBackoffV4(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 300 {
		base := time.Duration(1 + rng.Int64N(int64(time.Minute)))
		max := time.Duration(1 + rng.Int64N(int64(time.Hour)))
		b := backoff.NewExponentialBackOff(
			backoff.WithInitialInterval(base), backoff.WithMaxInterval(max), backoff.WithMultiplier(2),
			backoff.WithRandomizationFactor(0), backoff.WithMaxElapsedTime(0),
		)
		for n := 1; n <= 40; n++ {
			want := b.NextBackOff()
			// r = 0.5 is the middle of the jitter: the step itself, capped.
			assert.Equal(t, min(want, max), Backoff(base, max, n, 0.5), "Backoff(%v, %v, %d, 0.5)", base, max, n)
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		in     string
		want   time.Duration
		wantOK bool
	}{
		{"0", 0, true},
		{"1", time.Second, true},
		{" 120 ", 2 * time.Minute, true},
		{"Wed, 02 Dec 2026 10:00:30 GMT", 30 * time.Second, true},
		{"Wednesday, 02-Dec-26 10:01:00 GMT", time.Minute, true}, // RFC 850
		{"Wed Dec  2 10:00:05 2026", 5 * time.Second, true},      // asctime
		{"Wed, 02 Dec 2026 09:00:00 GMT", 0, true},               // past: no wait
		{"99999999999999999999", time.Duration(1<<63-1) / time.Second * time.Second, true},
		{"", 0, false},
		{"-1", 0, false},
		{"1.5", 0, false},
		{"soon", 0, false},
		{"1e3", 0, false},
		{"0x10", 0, false},
		{"Wed, 32 Dec 2026 10:00:00 GMT", 0, false},
	}
	for _, tt := range tests {
		got, ok := ParseRetryAfter(tt.in, now)
		assert.Equal(t, tt.wantOK, ok, "ParseRetryAfter(%q) ok", tt.in)
		assert.Equal(t, tt.want, got, "ParseRetryAfter(%q)", tt.in)
	}
}

// BenchmarkNext is the rule's cost on a retry: no allocation unless it
// stops (the reason is formatted then).
func BenchmarkNext(b *testing.B) {
	p := Policy{MaxAttempts: 4, BaseDelay: 200 * ms, MaxDelay: 10 * time.Second, MaxRetryAfter: time.Minute}
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	b.ReportAllocs()
	for b.Loop() {
		if v := Next(p, 3, t0, "", t0, 0.5); v.Stop != Retry {
			b.Fatal(v.Reason)
		}
	}
}
