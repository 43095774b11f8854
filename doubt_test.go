package idem

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// keyedTrip sends one request under key (none when empty) through hc, as an
// SDK sends each of its tries, and returns the Report of its RoundTrip.
func keyedTrip(t *testing.T, hc *http.Client, method, url, key string) Report {
	t.Helper()
	var rep Report
	req, err := http.NewRequestWithContext(WithReport(context.Background(), &rep), method, url, strings.NewReader(`{"n":1}`))
	require.NoError(t, err)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := hc.Do(req)
	if err == nil {
		resp.Body.Close()
	}
	require.NotEqual(t, NoOutcome, rep.Outcome, "the RoundTrip filled the Report")
	return rep
}

// TestTransportDoubtOutlivesRoundTrip: an SDK that retries on top of the
// Transport sends the same request again under the same key. When the first
// RoundTrip left the operation in doubt, a 4xx to the resend proves only that
// the resend was not applied: its Report says Unknown, not NotApplied. A
// success settles the doubt; another key has none.
func TestTransportDoubtOutlivesRoundTrip(t *testing.T) {
	type trip struct {
		key  string
		step step
		want Outcome
	}
	tests := []struct {
		name   string
		method string
		trips  []trip
	}{
		{"lost answer, then 401", "POST", []trip{{"k-1", hangup, Unknown}, {"k-1", answer(401), Unknown}}},
		{"503, then 400", "POST", []trip{{"k-1", answer(503), Unknown}, {"k-1", answer(400), Unknown}}},
		{"keyed 409, then 403", "POST", []trip{{"k-1", answer(409, "Retry-After", "3600"), Unknown}, {"k-1", answer(403), Unknown}}},
		{"a doubt stays until settled", "POST", []trip{{"k-1", hangup, Unknown}, {"k-1", answer(401), Unknown}, {"k-1", answer(401), Unknown}}},
		{"lost answer, then DELETE 404", "DELETE", []trip{{"k-1", hangup, Unknown}, {"k-1", answer(404), AlreadyApplied}}},
		{"success settles the doubt", "POST", []trip{{"k-1", hangup, Unknown}, {"k-1", answer(201), Applied}, {"k-1", answer(401), NotApplied}}},
		{"another key is not in doubt", "POST", []trip{{"k-1", hangup, Unknown}, {"k-2", answer(401), NotApplied}}},
		{"keyless requests share no doubt", "PUT", []trip{{"", hangup, Unknown}, {"", answer(401), NotApplied}}},
		{"a 401 first is NotApplied", "POST", []trip{{"k-1", answer(401), NotApplied}, {"k-1", answer(401), NotApplied}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			steps := make([]step, len(tt.trips))
			for i, tr := range tt.trips {
				steps[i] = tr.step
			}
			srv := newScripted(t, steps...)
			tr, _ := testTransport(t, nil)
			tr.Policy = Policy{MaxAttempts: 1} // the SDK on top does the retrying
			hc := &http.Client{Transport: tr}
			for i, trip := range tt.trips {
				rep := keyedTrip(t, hc, tt.method, srv.URL+"/resources/1", trip.key)
				assert.Equal(t, trip.want, rep.Outcome, "RoundTrip %d (%d): outcome = %v, want %v", i+1, trip.step.status, rep.Outcome, trip.want)
				if i > 0 && trip.want == Unknown {
					require.NotNil(t, rep.Err)
					assert.True(t, strings.HasSuffix(rep.Err.Reason, doubtNote), "the reason says why: %q", rep.Err.Reason)
				}
			}
			assert.Len(t, srv.Requests(), len(tt.trips), "one attempt per RoundTrip")
		})
	}
}

// advance moves the fake clock on by d without recording a sleep.
func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// TestTransportDoubtWindow: a key's doubt is forgotten DoubtWindow after the
// last RoundTrip that left it in doubt; zero means DefaultDoubtWindow, a
// negative window remembers nothing.
func TestTransportDoubtWindow(t *testing.T) {
	tests := []struct {
		window time.Duration
		later  time.Duration
		want   Outcome
	}{
		{0, DefaultDoubtWindow - time.Second, Unknown},
		{0, DefaultDoubtWindow, NotApplied},
		{time.Minute, 59 * time.Second, Unknown},
		{time.Minute, time.Minute, NotApplied},
		{-1, 0, NotApplied},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("window %v, %v later", tt.window, tt.later), func(t *testing.T) {
			srv := newScripted(t, hangup, answer(401))
			tr, clk := testTransport(t, nil)
			tr.Policy, tr.DoubtWindow = Policy{MaxAttempts: 1}, tt.window
			hc := &http.Client{Transport: tr}
			require.Equal(t, Unknown, keyedTrip(t, hc, "POST", srv.URL, "k-1").Outcome)
			clk.advance(tt.later)
			got := keyedTrip(t, hc, "POST", srv.URL, "k-1").Outcome
			assert.Equal(t, tt.want, got, "401 %v after the doubt: outcome = %v, want %v", tt.later, got, tt.want)
		})
	}

	t.Run("each doubt restarts the window", func(t *testing.T) {
		srv := newScripted(t, hangup, answer(401), answer(401), answer(401))
		tr, clk := testTransport(t, nil)
		tr.Policy, tr.DoubtWindow = Policy{MaxAttempts: 1}, time.Minute
		hc := &http.Client{Transport: tr}
		for i, want := range []Outcome{Unknown, Unknown, Unknown, NotApplied} {
			got := keyedTrip(t, hc, "POST", srv.URL, "k-1").Outcome
			assert.Equal(t, want, got, "RoundTrip %d: outcome = %v, want %v", i+1, got, want)
			clk.advance(40 * time.Second) // within a minute of the last doubt, twice; then past it
			if i == 2 {
				clk.advance(20 * time.Second)
			}
		}
	})
}

// TestTransportDoubtKeys: past DoubtKeys keys in doubt, the one least
// recently left in doubt is forgotten first.
func TestTransportDoubtKeys(t *testing.T) {
	srv := newScripted(t, hangup, hangup, hangup, hangup)
	tr, clk := testTransport(t, nil)
	tr.Policy, tr.DoubtKeys = Policy{MaxAttempts: 1}, 2
	hc := &http.Client{Transport: tr}
	for _, key := range []string{"k-1", "k-2", "k-1", "k-3"} { // k-1 again: k-2 is the oldest
		require.Equal(t, Unknown, keyedTrip(t, hc, "POST", srv.URL, key).Outcome)
		clk.advance(time.Second)
	}
	srv.mu.Lock()
	srv.steps = []step{answer(401), answer(401), answer(401)}
	srv.mu.Unlock()
	for _, tt := range []struct {
		key  string
		want Outcome
	}{{"k-2", NotApplied}, {"k-1", Unknown}, {"k-3", Unknown}} {
		got := keyedTrip(t, hc, "POST", srv.URL, tt.key).Outcome
		assert.Equal(t, tt.want, got, "401 under %s: outcome = %v, want %v", tt.key, got, tt.want)
	}
}

// TestDoubtsBounded: the memory holds at most max keys and none past its
// window, however many RoundTrips leave keys in doubt.
func TestDoubtsBounded(t *testing.T) {
	var m doubts
	clk := newFakeClock()
	for i := range 1000 {
		m.add(fmt.Sprintf("k-%d", i), clk.Now(), time.Minute, 100)
		clk.advance(time.Second)
	}
	assert.Equal(t, 60, m.order.Len(), "keys within the window and the cap")
	assert.Len(t, m.keys, m.order.Len())
	assert.Equal(t, int64(m.order.Len()), m.n.Load())
	assert.True(t, m.has("k-999", clk, time.Minute))
	assert.False(t, m.has("k-940", clk, time.Minute), "a minute old")

	clk.advance(time.Minute)
	m.add("k-new", clk.Now(), time.Minute, 100)
	assert.Equal(t, 1, m.order.Len(), "a new doubt sweeps the expired ones")
	m.drop("k-new")
	assert.Equal(t, 0, m.order.Len())
	assert.Equal(t, int64(0), m.n.Load())
	assert.Empty(t, m.keys)
}

// TestDoubtsLookupAllocates nothing: a keyed RoundTrip whose key is not in
// doubt pays a map lookup, no allocation.
func TestDoubtsLookupAllocates(t *testing.T) {
	var m doubts
	clk := newFakeClock()
	m.add("k-1", clk.Now(), time.Minute, 10)
	allocs := testing.AllocsPerRun(100, func() {
		if m.has("k-2", clk, time.Minute) {
			t.Fatal("k-2 is not in doubt")
		}
		m.drop("k-2")
	})
	assert.Zero(t, allocs)
}

// TestDoubtsConcurrent: RoundTrips under the same and other keys at once (run
// with -race).
func TestDoubtsConcurrent(t *testing.T) {
	var m doubts
	clk := newFakeClock()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				key := fmt.Sprintf("k-%d", (g+i)%16)
				m.add(key, clk.Now(), time.Minute, 8)
				m.has(key, clk, time.Minute)
				if i%3 == 0 {
					m.drop(key)
				}
			}
		})
	}
	wg.Wait()
	assert.LessOrEqual(t, m.order.Len(), 8)
	assert.Len(t, m.keys, m.order.Len())
	assert.Equal(t, int64(m.order.Len()), m.n.Load())
}

// BenchmarkDoubtsLookup is what a keyed RoundTrip whose key is not in doubt
// pays for the memory: its lookup at the start and its settling at the end.
func BenchmarkDoubtsLookup(b *testing.B) {
	for _, held := range []int{0, DefaultDoubtKeys} {
		b.Run(fmt.Sprintf("held=%d", held), func(b *testing.B) {
			var m doubts
			clk := newFakeClock()
			for i := range held {
				m.add(fmt.Sprintf("k-%d", i), clk.Now(), time.Minute, DefaultDoubtKeys)
			}
			b.ReportAllocs()
			for b.Loop() {
				if m.has("5f1e0c2a-7a43-4d2e-9d0e-4c1a2b3c4d5e", clk, time.Minute) {
					b.Fatal("not in doubt")
				}
				m.drop("5f1e0c2a-7a43-4d2e-9d0e-4c1a2b3c4d5e")
			}
		})
	}
}
