package queue_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/idemtest"
	"github.com/idem-go/idem/queue"
)

// The crash test re-executes the test binary as a child process that
// enqueues and drains; these variables carry its instructions. With
// crashChildEnv set, TestMain runs the child instead of the tests.
const (
	crashChildEnv = "IDEM_QUEUE_CRASH_CHILD"
	crashURLEnv   = "IDEM_QUEUE_CRASH_URL"
	crashPathEnv  = "IDEM_QUEUE_CRASH_PATH"
	crashNEnv     = "IDEM_QUEUE_CRASH_N"
)

// Lines the child prints as it goes, so the parent knows where a kill landed.
const (
	crashOpened   = "opened"
	crashEnqueued = "enqueued"
	crashSettled  = "settled"
	// crashEventPrefix starts the child's report of an EventError: no
	// commit or read should fail in this test.
	crashEventPrefix = "drainer error:"
)

// Exit codes of the child, so the parent can say what went wrong.
const (
	crashExitSetup   = 3 // bad instructions, or the file did not open or close
	crashExitEnqueue = 4 // an Enqueue failed
	crashExitSettle  = 5 // a record settled other than Done, or never did
)

const (
	crashPerRun   = 40 // intents the producer adds on each start: it keeps producing across restarts
	crashLanes    = 8  // lanes they are spread over, one producer each
	crashWorkers  = 4  // lanes the child drains at once
	crashMinKills = 30 // SIGKILLs before the run that may finish
	crashMaxRuns  = 90 // child runs allowed before the drain must be over

	// crashRunLimit is the longest a child may run, its own deadline 5 s
	// less: some fifty times a quiet final run (settled in under 4 s), so
	// that only a child that cannot finish meets it.
	crashRunLimit = 3 * time.Minute
)

func TestMain(m *testing.M) {
	if os.Getenv(crashChildEnv) == "1" {
		os.Exit(crashChild())
	}
	os.Exit(m.Run())
}

// TestCrashKillRestart kills a child process that enqueues and drains with
// SIGKILL at random moments, restarts it on the same file each time, and
// checks that the file opens cleanly after every kill and that, once the
// queue has drained, the server applied every intent exactly once. Kills
// land during Open's recovery, Enqueue's commits, between a lease and its
// result, and while the server holds a claim; a record left in flight comes
// back pending and is resent with its key, which the server must answer
// with a replay.
func TestCrashKillRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("re-executes the test binary dozens of times")
	}
	start := time.Now()
	srv := idemtest.New(idemtest.Options{
		RequireKey: true,
		Faults:     crashFaults,
		Delay:      100 * time.Millisecond,
	})
	require.NoError(t, srv.Start())
	t.Cleanup(srv.Close)
	path := filepath.Join(t.TempDir(), "crash.db")

	// A fixed seed: the kill moments repeat, the interleavings need not.
	rng := rand.New(rand.NewPCG(20260101, 42))
	var kills, runs, unsettled, n int
	phases := map[string]int{}
	for kills < crashMinKills {
		require.Less(t, runs, crashMaxRuns, "the child kept finishing before its kill: %d kills in %d runs", kills, runs)
		runs++
		n += crashPerRun
		k := crashSchedule(rng)
		killed, out := crashRun(t, srv.URL(), path, n, k)
		got := crashCheckFile(t, path, runs, n)
		if !killed {
			// The queue had drained: the child only re-enqueued settled
			// intents, waited and closed within its time.
			t.Logf("run %d: the child finished before %v: %s", runs, k, crashOneLine(out))
			continue
		}
		kills++
		phase := crashPhase(out)
		phases[phase]++
		if got.unsettled > 0 {
			unsettled++
		}
		t.Logf("kill %d at %v, %s: %d records, %d unsettled", kills, k, phase, got.records, got.unsettled)
	}

	// The last run is not killed and must finish on its own.
	runs++
	killed, out := crashRun(t, srv.URL(), path, n, crashKill{})
	require.False(t, killed, "the final run was killed:\n%s", out)
	t.Logf("final run: %s", crashOneLine(out))

	q, err := queue.Open(path, queue.Options{})
	require.NoError(t, err)
	defer q.Close()
	recs, err := q.List(context.Background(), 0, 0, n+10)
	require.NoError(t, err)
	assert.Len(t, recs, n, "records in the file")
	ambiguous, attempts := 0, 0
	for _, r := range recs {
		assert.Equal(t, queue.Done, r.State, "record %d (%s): %s %s", r.ID, r.Intent.Key(), r.Reason, r.LastError)
		if r.InDoubt {
			ambiguous++
		}
		attempts += r.NumAttempts
	}
	for i := range n {
		assert.Equal(t, 1, srv.EffectsForPayload(crashBody(i)), "effects of intent %d (%s)", i, crashKey(i))
	}
	st := srv.Stats()
	assert.Equal(t, n, st.Effects, "effects at the server")
	assert.Positive(t, unsettled, "kills that landed with records unsettled")
	t.Logf("%d intents, %d kills (%d with records unsettled; by phase %v), %d child runs, %.1fs",
		n, kills, unsettled, phases, runs, time.Since(start).Seconds())
	t.Logf("server: %d requests, %d effects, %d replays, %d conflicts, %d fenced, %d released, faults %v",
		st.Requests, st.Effects, st.Replays, st.Conflicts, st.Fenced, st.Released, st.Faults)
	t.Logf("queue: %d attempts leased, %d records ambiguous at some point", attempts, ambiguous)
}

// crashKill says when the parent kills a run of the child.
type crashKill struct {
	after     time.Duration // 0: never
	fromStart bool          // counted from the process start, not from crashOpened
}

func (k crashKill) String() string {
	from := "open"
	if k.fromStart {
		from = "start"
	}
	return fmt.Sprintf("%s+%v", from, k.after.Round(time.Millisecond))
}

// crashSchedule draws the next kill. Counting from the child's "opened"
// line keeps the kills mid-work however slowly the binary starts; one kill
// in five counts from the start, 20-250ms, to land in Open's recovery too.
func crashSchedule(rng *rand.Rand) crashKill {
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo))) }
	switch n := rng.IntN(15); {
	case n < 3:
		return crashKill{after: between(20*time.Millisecond, 250*time.Millisecond), fromStart: true}
	case n < 11: // during the re-enqueue of earlier intents, mostly
		return crashKill{after: between(time.Millisecond, 250*time.Millisecond)}
	default: // when the child may be only draining
		return crashKill{after: between(250*time.Millisecond, 900*time.Millisecond)}
	}
}

// crashPhase says where the child was when it was killed, by its output.
func crashPhase(out string) string {
	switch {
	case !strings.Contains(out, crashOpened):
		return "opening"
	case !strings.Contains(out, crashEnqueued):
		return "enqueuing"
	case !strings.Contains(out, crashSettled):
		return "draining"
	}
	return "closing"
}

func crashOneLine(out string) string { return strings.ReplaceAll(strings.TrimSpace(out), "\n", "; ") }

// crashFaults injects faults on a key's first requests: ambiguous drops
// after the commit, 503s and closes before the effect, and delays that hold
// the claim so that a resend meets a 409. The choice depends on the key and
// how often the server has seen it, not on timing, and stops after a few
// requests so that every key settles.
func crashFaults(_ *http.Request, key string, seen int) idemtest.Fault {
	if seen >= 6 {
		return idemtest.FaultNone
	}
	h := fnv.New64a()
	h.Write([]byte(key))
	h.Write(binary.BigEndian.AppendUint64(nil, uint64(seen)))
	switch x := h.Sum64() % 100; {
	case x < 10:
		return idemtest.FaultCommitThenDrop
	case x < 15:
		return idemtest.Fault503
	case x < 20:
		return idemtest.FaultCloseBeforeRead
	case x < 35:
		return idemtest.FaultDelay
	}
	return idemtest.FaultNone
}

// crashRun runs the child once and kills it as k says unless it exits
// first; a run that has not ended after crashRunLimit is killed and fails
// the test. It reports whether the kill ended it, and the child's output. A
// child that exits with an error, or reports a race, a panic or a drainer
// error before its kill, fails the test.
func crashRun(t *testing.T, url, path string, n int, k crashKill) (bool, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(),
		crashChildEnv+"=1", crashURLEnv+"="+url, crashPathEnv+"="+path,
		crashNEnv+"="+strconv.Itoa(n),
		// Under -race a child sleeps a second at exit to catch late
		// races; this one has none left to run.
		"GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())

	opened := make(chan struct{})
	exited := make(chan error, 1)
	var lines []string // the reader's until exited, then ours
	go func() {
		sc := bufio.NewScanner(stdout)
		for seen := false; sc.Scan(); {
			lines = append(lines, sc.Text())
			if sc.Text() == crashOpened && !seen {
				seen = true
				close(opened)
			}
		}
		io.Copy(io.Discard, stdout) // a line too long: keep the child unblocked
		exited <- cmd.Wait()        // after reading: Wait closes the pipe
	}()

	kill := func() {
		// The child may have exited and been reaped a moment ago.
		if err := cmd.Process.Kill(); !errors.Is(err, os.ErrProcessDone) {
			require.NoError(t, err)
		}
	}
	var timer <-chan time.Time
	if k.fromStart {
		timer = time.After(k.after)
	}
	limit := time.NewTimer(crashRunLimit)
	defer limit.Stop()
	sentKill, overdue := false, false
	for waitOpen := opened; ; {
		select {
		case err = <-exited:
		case <-waitOpen:
			waitOpen = nil
			if !k.fromStart && k.after > 0 {
				timer = time.After(k.after)
			}
			continue
		case <-timer:
			timer, sentKill = nil, true
			kill()
			continue
		case <-limit.C:
			overdue = true
			kill()
			continue
		}
		break
	}
	out := strings.Join(lines, "\n") + "\n" + stderr.String()
	require.False(t, overdue, "the child ran past %v:\n%s", crashRunLimit, out)
	for _, bad := range [...]string{"WARNING: DATA RACE", "panic:", "fatal error:", crashEventPrefix} {
		require.NotContains(t, out, bad, "child output:\n%s", out)
	}
	// Killed by a signal, the exit code is -1; a child that exits on its
	// own says why.
	if sentKill && cmd.ProcessState.ExitCode() == -1 {
		return true, out
	}
	require.NoError(t, err, "child %s:\n%s", cmd.ProcessState, out)
	return false, out
}

// crashState is what the file held after a run.
type crashState struct {
	records   int // records in the file
	unsettled int // pending records, counting those left in flight
}

// crashCheckFile checks the file after a run: bbolt finds its pages
// consistent, and it opens as the next run will open it, with counters that
// match its records, every record decoding, no key twice and no record that
// failed or expired.
func crashCheckFile(t *testing.T, path string, run, n int) crashState {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	require.NoError(t, err, "bbolt open after run %d", run)
	require.NoError(t, db.View(func(tx *bolt.Tx) error {
		var errs []error
		for err := range tx.Check() {
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	}), "bbolt check after run %d", run)
	require.NoError(t, db.Close())

	q, err := queue.Open(path, queue.Options{})
	require.NoError(t, err, "open after run %d", run)
	defer func() { require.NoError(t, q.Close(), "close after run %d", run) }()
	counts, err := q.Counts(context.Background())
	require.NoError(t, err, "counts after run %d", run)
	recs, err := q.List(context.Background(), 0, 0, n+10)
	require.NoError(t, err, "list after run %d", run)
	require.LessOrEqual(t, len(recs), n, "records after run %d", run)
	keys := map[string]queue.ID{}
	byState := map[queue.State]int{}
	for _, r := range recs {
		prev, dup := keys[r.Intent.Key()]
		require.False(t, dup, "after run %d key %s is records %d and %d", run, r.Intent.Key(), prev, r.ID)
		keys[r.Intent.Key()] = r.ID
		require.Contains(t, []queue.State{queue.Pending, queue.Done}, r.State,
			"after run %d record %d (%s) is %s: %s %s", run, r.ID, r.Intent.Key(), r.State, r.Reason, r.LastError)
		byState[r.State]++
	}
	require.Zero(t, counts[queue.InFlight], "in flight after Open, run %d", run)
	for _, s := range []queue.State{queue.Pending, queue.Done} {
		require.Equal(t, byState[s], counts[s], "Counts()[%s] after run %d", s, run)
	}
	return crashState{records: len(recs), unsettled: counts[queue.Pending]}
}

func crashKey(i int) string        { return fmt.Sprintf("crash-%d", i) }
func crashBody(i int) []byte       { return fmt.Appendf(nil, `{"payment":"p-%d"}`, i) }
func crashLane(i int) string       { return "lane-" + strconv.Itoa(i%crashLanes) }
func crashFail(f string, a ...any) { fmt.Fprintf(os.Stderr, "crash child: "+f+"\n", a...) }

// crashChild is the child process: it opens the queue, starts the drainer,
// enqueues every intent (those enqueued by an earlier run come back with
// their IDs: the crash-safe producer), waits until each is settled and
// exits 0 if each is Done.
func crashChild() int {
	url, path := os.Getenv(crashURLEnv), os.Getenv(crashPathEnv)
	n, err := strconv.Atoi(os.Getenv(crashNEnv))
	if url == "" || path == "" || err != nil || n <= 0 {
		crashFail("bad instructions: url %q path %q n %q", url, path, os.Getenv(crashNEnv))
		return crashExitSetup
	}
	hc := &http.Client{
		Timeout:   time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: crashWorkers * 2, IdleConnTimeout: 10 * time.Second},
	}
	q, err := queue.Open(path, queue.Options{
		Client:  &idem.Client{HTTPClient: hc},
		Workers: crashWorkers,
		Policy:  idem.Policy{AttemptTimeout: time.Second, BaseDelay: 15 * time.Millisecond, MaxDelay: 200 * time.Millisecond},
		Notify: func(e queue.Event) {
			if e.Kind == queue.EventError {
				crashFail("%s %v", crashEventPrefix, e.Err)
			}
		},
	})
	if err != nil {
		crashFail("open: %v", err)
		return crashExitSetup
	}
	ctx, cancel := context.WithTimeout(context.Background(), crashRunLimit-5*time.Second)
	defer cancel()
	go q.Run(ctx)
	start := time.Now()
	fmt.Println(crashOpened)

	ids := make([]queue.ID, n)
	errs := make([]error, crashLanes)
	var wg sync.WaitGroup
	for l := range crashLanes {
		wg.Go(func() { // one producer per lane keeps each lane's order
			for i := l; i < n && errs[l] == nil; i += crashLanes {
				in, err := idem.NewIntent(http.MethodPost, url+"/payments", crashBody(i),
					idem.WithKey(crashKey(i)), idem.WithLane(crashLane(i)))
				if err == nil {
					ids[i], err = q.Enqueue(ctx, in)
				}
				errs[l] = err
			}
		})
	}
	wg.Wait()
	for l, err := range errs {
		if err != nil {
			crashFail("enqueue, lane %d: %v", l, err)
			return crashExitEnqueue
		}
	}
	fmt.Println(crashEnqueued, n, "in", time.Since(start).Round(time.Millisecond))
	var bad []string
	for i, id := range ids {
		r, err := q.Wait(ctx, id)
		switch {
		case err != nil:
			counts, _ := q.Counts(context.Background())
			crashFail("wait for intent %d (record %d): %v; counts %v", i, id, err, counts)
			return crashExitSettle
		case r.State != queue.Done:
			bad = append(bad, fmt.Sprintf("intent %d (record %d) %s: %s", i, id, r.State, r.Reason))
		}
	}
	fmt.Println(crashSettled, "in", time.Since(start).Round(time.Millisecond))
	if err := q.Close(); err != nil {
		crashFail("close: %v", err)
		return crashExitSetup
	}
	if len(bad) > 0 {
		crashFail("%d not done:\n%s", len(bad), strings.Join(bad, "\n"))
		return crashExitSettle
	}
	return 0
}
