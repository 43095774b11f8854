package idem

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
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
			srv := newScripted(t, script(tt.trips, func(tr trip) step { return tr.step })...)
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

// memorySide makes calls under keys 0, 1, 2 ... to url through a
// Transport's RoundTrips or a Client's Try, whose memory of doubts is
// bounded by window and keys, on a fake clock. Each call is one request.
type memorySide struct {
	name string
	make func(t *testing.T, url string, window time.Duration, keys int) (call func(key int) Outcome, clk *fakeClock)
}

func memorySides() []memorySide {
	return []memorySide{
		{"Transport", func(t *testing.T, url string, window time.Duration, keys int) (func(int) Outcome, *fakeClock) {
			tr, clk := testTransport(t, nil)
			tr.Policy, tr.DoubtWindow, tr.DoubtKeys = Policy{MaxAttempts: 1}, window, keys
			hc := &http.Client{Transport: tr}
			return func(key int) Outcome { return keyedTrip(t, hc, "POST", url, "k-"+itoa(key)).Outcome }, clk
		}},
		{"Client", func(t *testing.T, url string, window time.Duration, keys int) (func(int) Outcome, *fakeClock) {
			c, clk := testClient(t, nil)
			c.Policy, c.DoubtWindow, c.DoubtKeys = Policy{MaxAttempts: 1}, window, keys
			intents := map[int]*Intent{}
			return func(key int) Outcome {
				if intents[key] == nil {
					intents[key] = mustIntent(t, "POST", url, "x", WithKey("k-"+itoa(key)))
				}
				out, _ := doorTry.call(t, c, intents[key])
				return out
			}, clk
		}},
	}
}

// TestDoubtWindow: a Transport or a Client forgets a key's doubt
// DoubtWindow after the last call that left it in doubt; zero means
// DefaultDoubtWindow, a negative window remembers nothing.
func TestDoubtWindow(t *testing.T) {
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
	for _, side := range memorySides() {
		for _, tt := range tests {
			t.Run(fmt.Sprintf("%s, window %v, %v later", side.name, tt.window, tt.later), func(t *testing.T) {
				srv := newScripted(t, hangup, answer(401))
				call, clk := side.make(t, srv.URL, tt.window, 0)
				require.Equal(t, Unknown, call(1))
				clk.advance(tt.later)
				got := call(1)
				assert.Equal(t, tt.want, got, "401 %v after the doubt: outcome = %v, want %v", tt.later, got, tt.want)
			})
		}

		t.Run(side.name+", each doubt restarts the window", func(t *testing.T) {
			srv := newScripted(t, hangup, answer(401), answer(401), answer(401))
			call, clk := side.make(t, srv.URL, time.Minute, 0)
			for i, want := range []Outcome{Unknown, Unknown, Unknown, NotApplied} {
				got := call(1)
				assert.Equal(t, want, got, "call %d: outcome = %v, want %v", i+1, got, want)
				clk.advance(40 * time.Second) // within a minute of the last doubt, twice; then past it
				if i == 2 {
					clk.advance(20 * time.Second)
				}
			}
		})
	}
}

// TestDoubtKeys: past DoubtKeys keys in doubt, the one least recently left
// in doubt is forgotten first, by a Transport or a Client.
func TestDoubtKeys(t *testing.T) {
	for _, side := range memorySides() {
		t.Run(side.name, func(t *testing.T) {
			srv := newScripted(t, hangup, hangup, hangup, hangup, answer(401), answer(401), answer(401))
			call, clk := side.make(t, srv.URL, 0, 2)
			for _, key := range []int{1, 2, 1, 3} { // 1 again: 2 is the oldest
				require.Equal(t, Unknown, call(key))
				clk.advance(time.Second)
			}
			for _, tt := range []struct {
				key  int
				want Outcome
			}{{2, NotApplied}, {1, Unknown}, {3, Unknown}} {
				got := call(tt.key)
				assert.Equal(t, tt.want, got, "401 under k-%d: outcome = %v, want %v", tt.key, got, tt.want)
			}
		})
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

// door is how a test's call reaches a Client: Do, Resume without a prior
// error, or Try without a prior, as a caller that lost what the earlier call
// said makes it.
type door string

const (
	doorDo     door = "Do"
	doorResume door = "Resume"
	doorTry    door = "Try"
)

// call makes one call of in through c by door and returns its outcome, and
// the reason the call gives for stopping short of success ("" if none).
func (d door) call(t *testing.T, c *Client, in *Intent) (Outcome, string) {
	t.Helper()
	ctx := context.Background()
	if d == doorTry {
		s, err := c.Try(ctx, in, NoOutcome, 0)
		require.NoError(t, err)
		s.Report(s.Action, 0)
		if s.Response != nil {
			s.Response.Body.Close()
		}
		return s.Outcome, s.Reason
	}
	var (
		res *Result
		err error
	)
	if d == doorDo {
		res, err = c.Do(ctx, in)
	} else {
		res, err = c.Resume(ctx, in, nil)
	}
	if err != nil {
		e := asError(t, err)
		return e.Outcome, e.Reason
	}
	res.Response.Body.Close()
	return res.Outcome, ""
}

// TestClientDoubtOutlivesCall: a Client remembers the keys its calls left in
// doubt, as a Transport does, whichever of Do, Resume and Try made them: a
// later call under the key that was told nothing of it (Do, Resume without
// a prior error, Try with no prior, as a job runner that restarted makes)
// reads a 4xx as Unknown, never NotApplied. A success settles the doubt;
// another key has none.
func TestClientDoubtOutlivesCall(t *testing.T) {
	type call struct {
		door   door
		intent int // which of the test's two intents
		step   step
		want   Outcome
	}
	tests := []struct {
		name   string
		method string
		calls  []call
	}{
		{"Try in doubt, then Try 422", "POST", []call{{doorTry, 0, hangup, Unknown}, {doorTry, 0, answer(422), Unknown}}},
		{"Try in doubt, then Try 401", "POST", []call{{doorTry, 0, hangup, Unknown}, {doorTry, 0, answer(401), Unknown}}},
		{"Do in doubt, then Try 401", "POST", []call{{doorDo, 0, hangup, Unknown}, {doorTry, 0, answer(401), Unknown}}},
		{"Do in doubt, then Try 422", "POST", []call{{doorDo, 0, answer(503), Unknown}, {doorTry, 0, answer(422), Unknown}}},
		{"Try in doubt, then Do 401", "POST", []call{{doorTry, 0, hangup, Unknown}, {doorDo, 0, answer(401), Unknown}}},
		{"Do in doubt, then Resume 403", "POST", []call{{doorDo, 0, hangup, Unknown}, {doorResume, 0, answer(403), Unknown}}},
		{"keyed 409, then Do 400", "POST", []call{{doorTry, 0, answer(409), Unknown}, {doorDo, 0, answer(400), Unknown}}},
		{"a doubt stays until settled", "POST", []call{{doorTry, 0, hangup, Unknown}, {doorTry, 0, answer(401), Unknown}, {doorDo, 0, answer(401), Unknown}}},
		{"DELETE in doubt, then 404", "DELETE", []call{{doorDo, 0, hangup, Unknown}, {doorTry, 0, answer(404), AlreadyApplied}}},
		{"Try's success settles the doubt", "POST", []call{{doorDo, 0, hangup, Unknown}, {doorTry, 0, answer(201), Applied}, {doorTry, 0, answer(401), NotApplied}}},
		{"Do's success settles the doubt", "POST", []call{{doorTry, 0, hangup, Unknown}, {doorDo, 0, answer(201), Applied}, {doorDo, 0, answer(401), NotApplied}}},
		{"another key is not in doubt", "POST", []call{{doorTry, 0, hangup, Unknown}, {doorTry, 1, answer(401), NotApplied}}},
		{"a 401 first is NotApplied", "POST", []call{{doorTry, 0, answer(401), NotApplied}, {doorDo, 0, answer(422), NotApplied}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newScripted(t, script(tt.calls, func(c call) step { return c.step })...)
			c, _ := testClient(t, nil)
			c.Policy = Policy{MaxAttempts: 1} // one request per call
			intents := []*Intent{mustIntent(t, tt.method, srv.URL+"/r/1", "x"), mustIntent(t, tt.method, srv.URL+"/r/1", "x")}
			for i, call := range tt.calls {
				got, reason := call.door.call(t, c, intents[call.intent])
				assert.Equal(t, call.want, got, "call %d, %s answered %d: outcome = %v, want %v", i+1, call.door, call.step.status, got, call.want)
				if i > 0 && call.want == Unknown && call.step.status >= 400 && call.step.status < 500 {
					assert.True(t, strings.HasSuffix(reason, doubtNote), "call %d: the reason says why: %q", i+1, reason)
				}
			}
			assert.Len(t, srv.Requests(), len(tt.calls), "one request per call")
		})
	}
}

// TestClientDoubtRunner is the job runner of the README: it keeps a job's
// intent and runs it with Try on its own schedule; on NotApplied it makes a
// new intent, as is safe; on Unknown it sends the same intent again. It
// restarts after the first attempt, whose answer was lost after the server
// applied the payment, and has lost that attempt's Outcome, its next prior.
// The next answer under the key is a 401 (a gateway's expired token) or a
// 422 (a server that takes the resend for another payload): the Client
// remembers the key it left in doubt, so the runner reads Unknown and the
// payment is applied once.
func TestClientDoubtRunner(t *testing.T) {
	for _, status := range []int{http.StatusUnauthorized, http.StatusUnprocessableEntity} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			var calls int
			srv := newStoreServer(t, func(string) (int, bool) {
				calls++
				switch calls {
				case 1:
					return 0, true // applied, answer lost
				case 2:
					return status, false
				}
				return 0, false
			})
			c, _ := testClient(t, nil)
			in := mustIntent(t, "POST", srv.URL+"/payments", `{"amount":100}`)
			prior, outcomes := NoOutcome, []Outcome{}
			for n := 1; n <= 6; n++ {
				s, err := c.Try(context.Background(), in, prior, 0)
				require.NoError(t, err)
				s.Report(s.Action, 0)
				if s.Response != nil {
					s.Response.Body.Close()
				}
				outcomes = append(outcomes, s.Outcome)
				if s.Action == ActionDone {
					break
				}
				prior = s.Outcome
				if s.Action == ActionStop && s.Outcome == NotApplied {
					// The README: nothing took effect, a new intent is safe.
					in, prior = mustIntent(t, "POST", srv.URL+"/payments", `{"amount":100}`), NoOutcome
				}
				if n == 1 {
					prior = NoOutcome // the runner restarted and lost it
				}
			}
			srv.mu.Lock()
			effects := len(srv.store)
			srv.mu.Unlock()
			t.Logf("%d after a lost answer: outcomes %v, %d payments applied", status, outcomes, effects)
			require.GreaterOrEqual(t, len(outcomes), 2)
			assert.Equal(t, Unknown, outcomes[1], "the %d after the doubt, with no prior: Unknown, not NotApplied", status)
			assert.Equal(t, Applied, outcomes[len(outcomes)-1], "the runner ends Applied")
			assert.Equal(t, 1, effects, "payments applied")
		})
	}
}
