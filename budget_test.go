package idem

import (
	"context"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// storeServer is a loopback server that applies keyed writes once and
// answers a retry of a key it holds from its store, with Idempotent-Replayed.
// fault, called under mu for a key's first request, may make that request
// fail after it was stored: 503, or a hang-up (ambiguous).
type storeServer struct {
	*httptest.Server
	mu    sync.Mutex // guards store and calls to fault
	store map[string]bool
	fault func(key string) (status int, hangup bool)
}

func newStoreServer(t *testing.T, fault func(key string) (int, bool)) *storeServer {
	t.Helper()
	s := &storeServer{store: map[string]bool{}, fault: fault}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

func (s *storeServer) serve(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	s.mu.Lock()
	held := s.store[key]
	s.store[key] = true
	status, hang := 0, false
	if s.fault != nil {
		status, hang = s.fault(key)
	}
	s.mu.Unlock()
	switch {
	case hang:
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close()
		}
	case status != 0:
		w.WriteHeader(status)
	case held:
		w.Header().Set("Idempotent-Replayed", "true")
		w.WriteHeader(http.StatusCreated)
	default:
		w.WriteHeader(http.StatusCreated)
	}
}

// TestBudgetDeadOriginSparesHealthyOne: through one Client, 300 intents to a
// dead origin (503 to everything) and 100 to a healthy one whose first
// answer to a quarter of its keys is a 503 after storing the write. The dead
// origin spends only its own budget: every intent to the healthy one ends
// Applied, and only the dead origin's retries are refused.
func TestBudgetDeadOriginSparesHealthyOne(t *testing.T) {
	dead := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(dead.Close)
	rng := rand.New(rand.NewPCG(1, 2))
	healthy := newStoreServer(t, func(string) (int, bool) {
		if rng.Float64() < 0.25 {
			return http.StatusServiceUnavailable, false
		}
		return 0, false
	})
	c, _ := testClient(t, nil)
	ctx := context.Background()
	applied, failedHealthy := 0, 0
	for i := range 400 {
		if i%4 != 3 {
			_, err := c.Do(ctx, mustIntent(t, "POST", dead.URL, "x"))
			require.Error(t, err)
			continue
		}
		res, err := c.Do(ctx, mustIntent(t, "POST", healthy.URL, "x"))
		if err != nil {
			failedHealthy++
			continue
		}
		res.Response.Body.Close()
		if res.Outcome == Applied {
			applied++
		}
	}
	st := c.Stats()
	deadOrigin, healthyOrigin := dead.URL, healthy.URL // http://127.0.0.1:port
	t.Logf("healthy origin: %d Applied, %d failed; refusals by origin: %v; total %d", applied, failedHealthy, st.BudgetRefusalsByOrigin, st.BudgetRefusals)
	assert.Equal(t, 100, applied, "every intent to the healthy origin ends Applied")
	assert.Zero(t, st.BudgetRefusalsByOrigin[healthyOrigin], "no refusal at the healthy origin")
	assert.Positive(t, st.BudgetRefusalsByOrigin[deadOrigin], "the dead origin's retries are refused")
	assert.Equal(t, st.BudgetRefusals, st.BudgetRefusalsByOrigin[deadOrigin], "every refusal is the dead origin's")
	assert.Equal(t, 0, st.BudgetTokens, "the fewest tokens left to an origin: the dead one's, none")
}

// TestResumeSpendsNoBudget: 20 keyed POSTs end Unknown in an outage that
// leaves their origin's budget empty; the server recovers, and answers each
// first Resume attempt 503 and the next from its store. Every Resume ends
// Applied, its retry free; a Do's retry is still refused.
func TestResumeSpendsNoBudget(t *testing.T) {
	var outage bool
	resumed := map[string]bool{}
	srv := newStoreServer(t, func(key string) (int, bool) {
		if outage {
			return 0, true
		}
		if !resumed[key] {
			resumed[key] = true
			return http.StatusServiceUnavailable, false
		}
		return 0, false
	})
	c, _ := testClient(t, nil)
	c.Budget = NewBudget(2)
	ctx := context.Background()
	srv.mu.Lock()
	outage = true
	srv.mu.Unlock()
	type unknown struct {
		in  *Intent
		err error
	}
	var doubts []unknown
	for range 20 {
		in := mustIntent(t, "POST", srv.URL, "x")
		_, err := c.Do(ctx, in)
		require.ErrorIs(t, err, ErrOutcomeUnknown)
		doubts = append(doubts, unknown{in, err})
	}
	require.Equal(t, 0, c.Budget.left(), "the outage spent the budget")
	srv.mu.Lock()
	outage = false
	srv.mu.Unlock()

	applied, exhausted := 0, 0
	for _, u := range doubts {
		res, err := c.Resume(ctx, u.in, u.err)
		switch {
		case err == nil:
			res.Response.Body.Close()
			if res.Outcome == Applied && res.Replayed {
				applied++
			}
		case assert.ErrorIs(t, err, ErrBudgetExhausted):
			exhausted++
		}
	}
	t.Logf("Resume of 20 Unknowns on an empty budget: %d Applied, %d ErrBudgetExhausted", applied, exhausted)
	assert.Equal(t, 20, applied, "every Resume ends Applied, from the server's store")
	assert.Zero(t, exhausted)

	// Do, and Resume after an error that left nothing in doubt, still spend.
	c.Budget = NewBudget(1)
	require.True(t, c.Budget.take(originOf(mustIntent(t, "POST", srv.URL, "x").u)))
	_, err := c.Do(ctx, mustIntent(t, "POST", srv.URL, "x")) // first attempt 503
	assert.ErrorIs(t, err, ErrBudgetExhausted, "a Do's retry spends a token")
	_, err = c.Resume(ctx, mustIntent(t, "POST", srv.URL, "x"), ErrNotApplied)
	assert.ErrorIs(t, err, ErrBudgetExhausted, "a Resume after no doubt is a Do")
}

func TestOriginOf(t *testing.T) {
	tests := []struct {
		url  string
		want origin
		str  string
	}{
		{"https://API.Example/pay?x=1", origin{"https", "api.example", "443"}, "https://api.example:443"},
		{"http://h:8080/", origin{"http", "h", "8080"}, "http://h:8080"},
		{"http://h/", origin{"http", "h", "80"}, "http://h:80"},
		{"http://[::1]/", origin{"http", "::1", "80"}, "http://[::1]:80"},
		{"ws://h/", origin{"ws", "h", ""}, "ws://h"},
	}
	for _, tt := range tests {
		u, err := url.Parse(tt.url)
		require.NoError(t, err)
		got := originOf(u)
		assert.Equal(t, tt.want, got, "originOf(%q)", tt.url)
		assert.Equal(t, tt.str, got.String(), "originOf(%q).String()", tt.url)
	}
	assert.Equal(t, origin{}, originOf(nil))
}

// budgetStep is a take or an answer (answered) of o's, what take returned
// (true for an answer), and what the Budget holds after it: the fewest
// tokens of any origin (left), the tokens of the shared bucket and the
// number of buckets of their own.
type budgetStep struct {
	op                    string
	o                     origin
	ok                    bool
	left, shared, buckets int
}

// playBudget plays steps on bud, checking each.
func playBudget(t *testing.T, bud *Budget, steps []budgetStep) {
	t.Helper()
	for i, st := range steps {
		ok := true
		if st.op == "take" {
			ok = bud.take(st.o)
		} else {
			bud.answered(st.o)
		}
		left, shared := bud.left(), bud.capacity-bud.shared
		if ok != st.ok || left != st.left || shared != st.shared || len(bud.buckets) != st.buckets {
			t.Errorf("step %d %s(%s): ok %v, left %d, shared %d, buckets %d; want %v, %d, %d, %d",
				i, st.op, st.o, ok, left, shared, len(bud.buckets), st.ok, st.left, st.shared, st.buckets)
		}
	}
}

// TestBudgetPerOrigin: each origin has a bucket of the capacity; a bucket
// full again is forgotten; left is the fewest tokens of any origin.
func TestBudgetPerOrigin(t *testing.T) {
	a, b := origin{"https", "a", "443"}, origin{"https", "b", "443"}
	playBudget(t, NewBudget(2), []budgetStep{
		{"take", a, true, 1, 2, 1},
		{"take", a, true, 0, 2, 1},
		{"take", a, false, 0, 2, 1},
		{"take", b, true, 0, 2, 2}, // a dead a spends nothing of b's
		{"answered", a, true, 1, 2, 2},
		{"answered", b, true, 1, 2, 1}, // b full: forgotten
		{"answered", a, true, 2, 2, 0},
		{"answered", a, true, 2, 2, 0}, // never above capacity
	})
}

// TestBudgetPastMaxOrigins: a bucket that is not full is never forgotten;
// past MaxBudgetOrigins origins holding buckets, the others share one, which
// their answers fill again; an answer that fills an origin's bucket makes
// room for another.
func TestBudgetPastMaxOrigins(t *testing.T) {
	host := func(i int) origin { return origin{"https", "h" + itoa(i), "443"} }
	bud := NewBudget(2)
	for i := range MaxBudgetOrigins {
		require.True(t, bud.take(host(i)))
		require.True(t, bud.take(host(i)))
	}
	past, other, n := host(MaxBudgetOrigins), host(MaxBudgetOrigins+1), MaxBudgetOrigins
	// Every row's left is 0: origins 1 to 1023 stay empty.
	playBudget(t, bud, []budgetStep{
		{"take", host(0), false, 0, 2, n}, // empty, and kept
		{"take", past, true, 0, 1, n},     // past the bound: the shared bucket
		{"take", other, true, 0, 0, n},
		{"take", past, false, 0, 0, n},
		{"take", host(n + 2), false, 0, 0, n}, // a new origin past the bound
		{"answered", other, true, 0, 1, n},
		{"take", past, true, 0, 0, n},
		{"answered", host(0), true, 0, 0, n},
		{"answered", host(0), true, 0, 0, n - 1}, // full: forgotten, room for one
		{"take", past, true, 0, 0, n},            // a bucket of its own, full
		{"take", past, true, 0, 0, n},
		{"take", past, false, 0, 0, n},
		{"take", host(0), false, 0, 0, n},       // forgotten full, the room taken: the shared bucket, empty
		{"answered", host(5000), true, 0, 1, n}, // an answer to an origin without a bucket
		{"take", host(0), true, 0, 0, n},
		{"take", host(1), false, 0, 0, n}, // empty, and kept
		{"answered", host(0), true, 0, 1, n},
		{"answered", host(0), true, 0, 2, n},
		{"answered", host(0), true, 0, 2, n}, // never above capacity
	})
}

// TestStatsRefusalsByOrigin: refusals are counted by origin, for the
// MaxBudgetOrigins origins that refused most recently.
func TestStatsRefusalsByOrigin(t *testing.T) {
	var m metrics
	host := func(i int) origin { return origin{"http", "h" + itoa(i), "80"} }
	m.refusedAt(host(0))
	m.refusedAt(host(0))
	st := m.stats(NewBudget(0))
	assert.Equal(t, map[string]uint64{"http://h0:80": 2}, st.BudgetRefusalsByOrigin)
	assert.Equal(t, -1, st.BudgetTokens)
	for i := 1; i <= MaxBudgetOrigins; i++ {
		m.refusedAt(host(i))
	}
	st = m.stats(NewBudget(3))
	assert.Len(t, st.BudgetRefusalsByOrigin, MaxBudgetOrigins)
	assert.NotContains(t, st.BudgetRefusalsByOrigin, "http://h0:80", "the origin that refused least recently is forgotten")
	assert.Equal(t, uint64(1), st.BudgetRefusalsByOrigin["http://h1:80"])
	assert.Equal(t, 3, st.BudgetTokens, "a budget no origin spent")
	assert.NotNil(t, (&metrics{}).stats(NewBudget(1)).BudgetRefusalsByOrigin)
}

// TestResumeFreeRetriesKeepTheirLimits: a Resume's free retries still stop
// at MaxAttempts, and count no refusal.
func TestResumeFreeRetriesKeepTheirLimits(t *testing.T) {
	srv := newScripted(t, answer(503), answer(503), answer(503), answer(503), answer(503))
	c, clk := testClient(t, nil)
	c.Budget = NewBudget(1)
	in := mustIntent(t, "POST", srv.URL, "x")
	require.True(t, c.Budget.take(originOf(in.u)))
	prior := &Error{Outcome: Unknown}
	_, err := c.Resume(context.Background(), in, prior)
	require.ErrorIs(t, err, ErrAttemptsExhausted)
	assert.Len(t, srv.Requests(), 4)
	assert.Len(t, clk.Sleeps(), 3, "backoff before each retry")
	assert.Zero(t, c.Stats().BudgetRefusals)
	assert.Equal(t, 0, c.Budget.left(), "no token spent, none put back")
}

// TestTransportBudgetPerOrigin: a Transport keeps its budget per origin too.
func TestTransportBudgetPerOrigin(t *testing.T) {
	dead := newScripted(t, answer(503), answer(503), answer(503))
	sick := newScripted(t, answer(503), answer(200))
	tr := &Transport{Base: httpClient(t, nil).Transport, Budget: NewBudget(1), clock: newFakeClock(), rand: func() float64 { return 0.5 }}
	hc := &http.Client{Transport: tr}
	resp, err := hc.Get(dead.URL)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	resp, err = hc.Get(sick.URL)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "the dead origin spent none of this one's budget")
	st := tr.Stats()
	assert.Equal(t, map[string]uint64{dead.URL: 1}, st.BudgetRefusalsByOrigin)
	assert.Equal(t, 0, st.BudgetTokens)
}

// refusedDials is an http.RoundTripper for which every origin is dead: it
// fails each request as a refused dial fails, before anything is sent
// (never sent), and counts them.
type refusedDials struct{ n atomic.Int64 }

func (d *refusedDials) RoundTrip(req *http.Request) (*http.Response, error) {
	d.n.Add(1)
	return nil, &net.OpError{Op: "dial", Net: "tcp", Err: &net.AddrError{Err: syscall.ECONNREFUSED.Error(), Addr: req.URL.Host}}
}

// TestBudgetManyDeadOrigins: with every origin dead, a Client sends intents
// to 2,000 origins in turn, 40 to each. Forgetting an origin must not refill
// its bucket: retries stay near the reserve of the origins the Budget
// keeps, and the intents cost at most 1.5 requests each, not 4 (one attempt
// and three retries each, when every origin is forgotten before it comes
// back, full).
func TestBudgetManyDeadOrigins(t *testing.T) {
	const origins, rounds = 2000, 40
	dials := &refusedDials{}
	c, _ := testClient(t, &http.Client{Transport: dials})
	ctx := context.Background()
	for range rounds {
		for o := range origins {
			_, err := c.Do(ctx, mustIntent(t, "POST", "http://o"+itoa(o)+".test/payments", "x"))
			require.ErrorIs(t, err, ErrNotApplied)
		}
	}
	const n = origins * rounds
	perIntent := float64(dials.n.Load()) / float64(n)
	st := c.Stats()
	t.Logf("%d dead origins, %d intents each: %d requests, %.2f per intent, %d budget refusals",
		origins, rounds, dials.n.Load(), perIntent, st.BudgetRefusals)
	assert.LessOrEqual(t, perIntent, 1.5, "requests per intent")
	assert.LessOrEqual(t, dials.n.Load()-n, int64((MaxBudgetOrigins+1)*DefaultBudgetTokens), "retries in all")
	assert.Positive(t, st.BudgetRefusals)
}
