package interop

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
)

// toxicURL is the URL of the intents in the toxiproxy tests; the lab's dial
// function decides where a connection really goes.
const toxicURL = "http://toxiproxy.test/pay"

// toxicPolicy is idem's policy against the toxics: attempts time out after
// attemptTimeout, retries come quickly.
func toxicPolicy(attemptTimeout time.Duration) idem.Policy {
	return idem.Policy{MaxAttempts: 8, BaseDelay: 10 * time.Millisecond, MaxDelay: 100 * time.Millisecond, AttemptTimeout: attemptTimeout}
}

// TestToxicsOneAtATime sends one payment whose first connection goes through
// one toxiproxy toxic, its retries through a clean proxy, to DraftServer.
// Every case ends Applied with exactly one effect; where the toxic struck
// after the effect, the answer is the server's replay.
func TestToxicsOneAtATime(t *testing.T) {
	t.Parallel()
	// Generous against a loaded machine: a clean attempt must not time out.
	const attemptTimeout = time.Second
	type want struct {
		replayed string // "yes", "no", or "any" where timing decides
		attempts int    // exactly; 0 means two or more, the first ambiguous
		bodyCut  bool   // the final body ends early
	}
	wants := map[string]want{
		// The request reaches the server after the client gave up: the
		// retry, or the late original, executes; the other gets the replay
		// or a 409.
		"latency-up":        {replayed: "any"},
		"latency-down":      {replayed: "yes"},
		"timeout-up":        {replayed: "no"},
		"timeout-down":      {replayed: "yes"},
		"reset-up":          {replayed: "no"},
		"reset-down":        {replayed: "yes"},
		"limit-up":          {replayed: "no"},
		"limit-down-status": {replayed: "yes"},
		// The status line and headers arrived: the payment is applied, the
		// caller's body read fails.
		"limit-down-body": {replayed: "no", attempts: 1, bodyCut: true},
		"slow-close-up":   {replayed: "no", attempts: 1},
		"slow-close-down": {replayed: "no", attempts: 1},
	}
	routes := toxicRoutes(attemptTimeout)
	require.Len(t, wants, len(routes), "an expectation per route")
	for _, r := range routes {
		w, ok := wants[r.name]
		require.True(t, ok, "no expectation for %s", r.name)
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			srv := new(DraftServer)
			ts, conns := startCounted(t, srv)
			lab := startToxicLab(t, ts.Listener.Addr().String(), []route{r})
			c := &idem.Client{
				HTTPClient: newHTTPClient(t, lab.transport(firstDialThrough(r.name))),
				Policy:     toxicPolicy(attemptTimeout), Budget: idem.NewBudget(0), KeySFString: true,
			}
			d := do(t, c, payment(t, toxicURL, "p1"))

			require.Equal(t, idem.Applied, d.outcome, "outcome (err: %v; attempts %v)", d.err, d.attempts)
			switch w.replayed {
			case "yes":
				assert.True(t, d.replayed, "the answer is a replay")
			case "no":
				assert.False(t, d.replayed, "the answer is not a replay")
			}
			if w.attempts > 0 {
				assert.Len(t, d.attempts, w.attempts, "attempts: %v", d.attempts)
			} else if assert.GreaterOrEqual(t, len(d.attempts), 2, "attempts: %v", d.attempts) {
				assert.Equal(t, idem.ClassAmbiguous, d.attempts[0].Class, "first attempt: %v", d.attempts[0])
			}
			if w.bodyCut {
				assert.ErrorIs(t, d.bodyErr, io.ErrUnexpectedEOF, "reading the cut body")
			} else {
				assert.NoError(t, d.bodyErr, "reading the body")
			}
			waitRelayed(t, lab, conns) // a late request may still be on its way
			assert.Equal(t, 1, srv.Ledger.Effects("p1"), "effects")
		})
	}
}

// mixConfig configures runToxicMix.
type mixConfig struct {
	intents, workers int
	seed             uint64
	// toxicShare is the share of connections sent through a toxic route.
	toxicShare float64
	// failBeforeEffect is the percentage of arrivals DraftServer fails
	// before the effect (503, claim released).
	failBeforeEffect int
	attemptTimeout   time.Duration
}

// mixReport is what runToxicMix found.
type mixReport struct {
	// counts compares the outcomes idem reported with the ledger.
	counts Counts
	// reconciled counts intents not reported Applied that were sent again,
	// same intent, same key, through the clean proxy; reconciledApplied and
	// reconciledReplayed count how those ended.
	reconciled, reconciledApplied, reconciledReplayed int
	// duplicates and losses are counted on the ledger after reconciliation:
	// payments applied more than once, and payments never applied.
	duplicates, losses int
	// dials counts connections per route ("clean" for none).
	dials map[string]int64
	// reasons counts why intents that did not end Applied stopped.
	reasons map[string]int
	// classes counts the attempts by class.
	classes map[idem.Class]int
	elapsed time.Duration
}

func (r mixReport) String() string {
	names := make([]string, 0, len(r.dials))
	for n := range r.dials {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, " %s=%d", n, r.dials[n])
	}
	reasons := make([]string, 0, len(r.reasons))
	for why, n := range r.reasons {
		reasons = append(reasons, fmt.Sprintf("\n  %d x %s", n, why))
	}
	sort.Strings(reasons)
	var cl strings.Builder
	for c := idem.ClassApplied; c <= idem.ClassRejected; c++ {
		if n := r.classes[c]; n > 0 {
			fmt.Fprintf(&cl, " %s=%d", strings.ReplaceAll(c.String(), " ", "-"), n)
		}
	}
	return fmt.Sprintf("%v\nreconciled=%d (applied %d, replayed %d); after reconciliation: duplicates=%d losses=%d; time=%v\nconnections:%s\nattempts by class:%s\nnot applied, why:%s",
		r.counts, r.reconciled, r.reconciledApplied, r.reconciledReplayed, r.duplicates, r.losses, r.elapsed.Round(time.Millisecond),
		b.String(), cl.String(), strings.Join(reasons, ""))
}

// runToxicMix sends cfg.intents payments from cfg.workers goroutines through
// toxiproxy, each connection through a random toxic route or the clean
// proxy, to a DraftServer that also fails some arrivals before the effect.
// It then compares every outcome with the ledger, sends every intent not
// reported Applied again (same key) through the clean proxy, and counts
// duplicates and losses.
func runToxicMix(t testing.TB, cfg mixConfig) mixReport {
	t.Helper()
	srv := new(DraftServer)
	srv.BeforeEffect = func(id string) error {
		if hashPick(cfg.seed, id, srv.Ledger.Arrivals(id)) < cfg.failBeforeEffect {
			return errors.New("failed before the effect")
		}
		return nil
	}
	ts, conns := startCounted(t, srv)
	routes := toxicRoutes(cfg.attemptTimeout)
	lab := startToxicLab(t, ts.Listener.Addr().String(), routes)

	dials := make(map[string]*atomic.Int64, len(routes)+1)
	for _, r := range append(routes, route{name: "clean"}) {
		dials[r.name] = new(atomic.Int64)
	}
	pick := randomPick(cfg.seed, routes, cfg.toxicShare)
	counted := func() string {
		name := pick()
		if name == "" {
			dials["clean"].Add(1)
		} else {
			dials[name].Add(1)
		}
		return name
	}
	newIdem := func(pick func() string) *idem.Client {
		tr := lab.transport(pick)
		t.Cleanup(tr.CloseIdleConnections)
		return &idem.Client{
			HTTPClient: &http.Client{Transport: tr}, Policy: toxicPolicy(cfg.attemptTimeout),
			Budget: idem.NewBudget(0), KeySFString: true,
		}
	}
	client := newIdem(counted)

	type sent struct {
		in       *idem.Intent
		id       string
		outcome  idem.Outcome
		replayed bool
		attempts []idem.Attempt
		why      string
	}
	all := make([]sent, cfg.intents)
	for i := range all {
		id := fmt.Sprintf("pay-%07d", i)
		in, err := idem.NewIntent(http.MethodPost, toxicURL, paymentBody(t, id, i), idem.WithHeader("Content-Type", "application/json"))
		require.NoError(t, err)
		all[i] = sent{in: in, id: id}
	}

	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range cfg.workers {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < len(all); i = int(next.Add(1) - 1) {
				s := &all[i]
				d, err := tryDo(context.Background(), client, s.in)
				if err != nil {
					t.Errorf("%s: %v", s.id, err)
					continue
				}
				s.outcome, s.replayed, s.attempts = d.outcome, d.replayed, d.attempts
				if e := (*idem.Error)(nil); errors.As(d.err, &e) {
					s.why = fmt.Sprintf("%s: %s", e.Outcome, e.Reason)
				}
			}
		})
	}
	wg.Wait()
	rep := mixReport{
		elapsed: time.Since(start), dials: make(map[string]int64, len(dials)),
		reasons: make(map[string]int), classes: make(map[idem.Class]int),
	}
	for n, c := range dials {
		rep.dials[n] = c.Load()
	}

	waitRelayed(t, lab, conns) // requests delayed by a latency toxic may still be on their way

	var tally Tally
	for _, s := range all {
		tally.Add(s.outcome, s.replayed, len(s.attempts), srv.Ledger.Effects(s.id))
		for _, a := range s.attempts {
			rep.classes[a.Class]++
		}
		if s.why != "" {
			rep.reasons[s.why]++
		}
	}
	rep.counts = tally.Counts()

	clean := newIdem(func() string { return "" })
	for _, s := range all {
		if s.outcome == idem.Applied {
			continue
		}
		rep.reconciled++
		res, err := clean.Do(context.Background(), s.in)
		if err != nil {
			t.Errorf("reconciling %s: %v", s.id, err)
			continue
		}
		_, _ = io.Copy(io.Discard, res.Response.Body)
		res.Response.Body.Close()
		if res.Outcome == idem.Applied {
			rep.reconciledApplied++
		}
		if res.Replayed {
			rep.reconciledReplayed++
		}
	}
	for _, s := range all {
		switch n := srv.Ledger.Effects(s.id); {
		case n > 1:
			rep.duplicates++
		case n == 0:
			rep.losses++
		}
	}
	return rep
}

// checkMix asserts that a mix run kept idem's contract.
func checkMix(t testing.TB, cfg mixConfig, rep mixReport) {
	t.Helper()
	c := rep.counts
	assert.Equal(t, cfg.intents, c.Intents, "intents")
	assert.Zero(t, c.Duplicates, "duplicated effects")
	assert.Zero(t, c.FalseSuccess, "reported applied, never applied")
	assert.Zero(t, c.FalseFailure, "reported not applied, applied")
	assert.Equal(t, rep.reconciled, rep.reconciledApplied, "every reconciled intent ends Applied")
	assert.Zero(t, rep.duplicates, "duplicates after reconciliation")
	assert.Zero(t, rep.losses, "losses after reconciliation")
	for name, n := range rep.dials {
		assert.Positive(t, n, "connections through %s", name)
	}
}

// TestToxicsRandomMix is the short default run of the mix: a few hundred
// payments through random toxics, a few seconds.
func TestToxicsRandomMix(t *testing.T) {
	t.Parallel()
	cfg := mixConfig{intents: 300, workers: 16, seed: 1, toxicShare: 0.5, failBeforeEffect: 5, attemptTimeout: 200 * time.Millisecond}
	rep := runToxicMix(t, cfg)
	t.Logf("toxiproxy mix:\n%v", rep)
	checkMix(t, cfg, rep)
}

// TestToxicsSoak is the long run of the mix, skipped unless IDEM_SOAK=1.
// IDEM_SOAK_N sets the number of payments (default 100000), IDEM_SOAK_WORKERS
// the concurrency (default 64), IDEM_SOAK_SEED the seed (default 1). Run it
// with -v to see the figures:
//
//	IDEM_SOAK=1 go test -run TestToxicsSoak -v -timeout 60m .
func TestToxicsSoak(t *testing.T) {
	if os.Getenv("IDEM_SOAK") != "1" {
		t.Skip("set IDEM_SOAK=1 to run the soak")
	}
	cfg := mixConfig{
		intents: envInt(t, "IDEM_SOAK_N", 100000), workers: envInt(t, "IDEM_SOAK_WORKERS", 64),
		seed: uint64(envInt(t, "IDEM_SOAK_SEED", 1)), toxicShare: 0.5, failBeforeEffect: 5,
		attemptTimeout: 200 * time.Millisecond,
	}
	rep := runToxicMix(t, cfg)
	t.Logf("toxiproxy soak:\n%v", rep)
	checkMix(t, cfg, rep)
}

// envInt reads a positive integer from the environment, or returns def.
func envInt(t testing.TB, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	require.NoError(t, err, "%s", name)
	require.Positive(t, n, "%s", name)
	return n
}
