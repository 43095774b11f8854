package queue

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/idemtest"
	"github.com/idem-go/idem/internal/delay"
)

// link is a device's network to one idemtest API: while down every dial is
// refused, as when the device has no network; it counts the dials.
type link struct {
	down  atomic.Bool
	dials atomic.Int64
	hc    *http.Client // the API's client, whose idle connections an outage ends
}

func (l *link) refuse() bool {
	l.dials.Add(1)
	return l.down.Load()
}

func (l *link) setDown(down bool) {
	l.down.Store(down)
	if down {
		l.hc.CloseIdleConnections()
	}
}

// offlineAPI starts an idemtest API behind a link, answering by faults, and
// opens a queue that sends to it with opts, on clk.
func offlineAPI(t *testing.T, clk *clock, opts Options, faults func(*http.Request, string, int) idemtest.Fault) (*Queue, *idemtest.Server, *link) {
	t.Helper()
	l := &link{}
	s := startServer(t, idemtest.Options{RefuseDial: l.refuse, Faults: faults})
	l.hc = s.Client()
	opts.now, opts.Client = clk.Now, &idem.Client{HTTPClient: l.hc}
	q, _ := openTest(t, opts)
	q.sig.init()
	return q, s, l
}

// advance moves clk on by d in steps of step, and at each waits for the
// drainer to rest: what it sends meanwhile, it sends at the step's time.
func advance(t *testing.T, q *Queue, clk *clock, d, step time.Duration) {
	t.Helper()
	for end := clk.Now().Add(d); clk.Now().Before(end); {
		clk.Add(min(step, end.Sub(clk.Now())))
		q.poke()
		waitRest(t, q, clk.Now())
	}
}

// untilSent moves clk on in steps of 100 ms until the API has seen more
// than seen requests, and returns how long that took; it fails the test
// past limit.
func untilSent(t *testing.T, q *Queue, clk *clock, s *idemtest.Server, seen int, limit time.Duration) time.Duration {
	t.Helper()
	start := clk.Now()
	for s.Requests() <= seen {
		require.Less(t, clk.Now().Sub(start), limit, "nothing sent %v after the API came back", limit)
		advance(t, q, clk, 100*time.Millisecond, 100*time.Millisecond)
	}
	return clk.Now().Sub(start)
}

// goesOffline waits for EventOffline, then for the drainer to rest.
func goesOffline(t *testing.T, q *Queue, clk *clock, ev *events) {
	t.Helper()
	for ev.count(EventOffline) == 0 {
		advance(t, q, clk, time.Second, time.Second)
	}
	waitRest(t, q, clk.Now())
}

func (q *Queue) mustGet(t *testing.T, id ID) *Record {
	t.Helper()
	r, err := q.Get(context.Background(), id)
	require.NoError(t, err)
	return r
}

// TestOfflineProbesCostNoAttempt: offline is the device's state, not a
// record's. The head of a lane met a 503, then the network went for nine
// minutes: the probes of the outage leave its attempts and its schedule as
// they were when the queue went offline, and the 503 it meets once the API
// is back is followed by the backoff of its attempts before the outage and
// that one, not of the probes.
func TestOfflineProbesCostNoAttempt(t *testing.T) {
	clk := newClock()
	var ev events
	opts := Options{Notify: ev.notify, Workers: 1}
	q, s, l := offlineAPI(t, clk, opts, func(_ *http.Request, _ string, seen int) idemtest.Fault {
		if seen < 2 {
			return idemtest.Fault503
		}
		return idemtest.FaultNone
	})
	ctx := waitCtx(t)
	var ids []ID
	for i := range 3 {
		id, err := q.Enqueue(ctx, post(t, s.URL()+"/payments", i, idem.WithLane("a")))
		require.NoError(t, err)
		ids = append(ids, id)
	}
	run(t, q)
	waitRest(t, q, clk.Now())
	require.Equal(t, 1, s.Requests(), "the head's first attempt reached the API")
	require.Equal(t, 1, q.mustGet(t, ids[0]).NumAttempts)

	l.setDown(true)
	goesOffline(t, q, clk, &ev)
	atOffline := q.mustGet(t, ids[0])
	require.Equal(t, Pending, atOffline.State)

	advance(t, q, clk, 9*time.Minute, 10*time.Second)
	head := q.mustGet(t, ids[0])
	assert.Equal(t, atOffline.NumAttempts, head.NumAttempts, "probes cost the head no attempt")
	assert.True(t, head.NextAttempt.Equal(atOffline.NextAttempt), "probes leave the head's schedule: next %v, want %v", head.NextAttempt, atOffline.NextAttempt)
	assert.Equal(t, Pending, head.State)
	for _, id := range ids[1:] {
		assert.Zero(t, q.mustGet(t, id).NumAttempts, "record %d waits behind its head", id)
	}

	l.setDown(false)
	back := untilSent(t, q, clk, s, 1, 2*time.Minute)
	t.Logf("after a 9 min outage: first send %v after the API came back; head attempts %d at offline, %d before the 503 after it",
		back, atOffline.NumAttempts, head.NumAttempts)
	sentAt := clk.Now()
	head = q.mustGet(t, ids[0])
	require.Equal(t, 2, s.Requests(), "the head's second real attempt, a 503")
	assert.Equal(t, atOffline.NumAttempts+1, head.NumAttempts)
	p := DefaultPolicy()
	want := sentAt.Add(delay.Backoff(p.BaseDelay, p.MaxDelay, atOffline.NumAttempts+1, 0.5))
	assert.True(t, head.NextAttempt.Equal(want), "after the 503 the head is next due at %v, want %v (backoff of %d attempts)",
		head.NextAttempt, want, atOffline.NumAttempts+1)
}

// TestOfflineBackWithinSeconds: whatever the outage's length, the first
// record goes out within 2 s of the API answering again, without Wake, and
// the probe that gets through wakes every lane at once. The probes of the
// outage cost the records no attempts.
func TestOfflineBackWithinSeconds(t *testing.T) {
	for _, outage := range []time.Duration{10 * time.Second, 2 * time.Minute, 30 * time.Minute} {
		t.Run(outage.String(), func(t *testing.T) {
			clk := newClock()
			var ev events
			q, s, l := offlineAPI(t, clk, Options{Notify: ev.notify, Workers: 4}, nil)
			l.setDown(true)
			ctx := waitCtx(t)
			const lanes, perLane = 4, 2
			var ids []ID
			for i := range lanes * perLane {
				id, err := q.Enqueue(ctx, post(t, s.URL()+"/payments", i, idem.WithLane(fmt.Sprint(i%lanes))))
				require.NoError(t, err)
				ids = append(ids, id)
			}
			run(t, q)
			advance(t, q, clk, outage, max(outage/40, 250*time.Millisecond))
			require.Equal(t, 1, ev.count(EventOffline))
			require.Zero(t, s.Requests())

			l.setDown(false)
			back := untilSent(t, q, clk, s, 0, 5*time.Minute)
			t.Logf("outage %v: first send %v after the API came back", outage, back)
			assert.LessOrEqual(t, back, 2*time.Second, "first send after the API came back")
			attempts := 0
			for _, id := range ids {
				r := q.mustGet(t, id)
				assert.Equal(t, Done, r.State, "record %d: every lane drains at the time the probe got through", id)
				attempts += r.NumAttempts
			}
			assert.LessOrEqual(t, attempts, len(ids)+offlineAfter-1,
				"attempts: one each, and those that found the device offline, not the probes")
			assert.Equal(t, 1, ev.count(EventOnline))
		})
	}
}

// TestOfflineProbesPerMinute: offline, the drainer dials once per
// Options.ProbeInterval, what the package doc states an outage costs:
// neither more, whatever the lanes waiting, nor fewer, which would delay
// the return.
func TestOfflineProbesPerMinute(t *testing.T) {
	clk := newClock()
	var ev events
	q, s, l := offlineAPI(t, clk, Options{Notify: ev.notify, Workers: 4}, nil)
	l.setDown(true)
	ctx := waitCtx(t)
	for i := range 8 {
		_, err := q.Enqueue(ctx, post(t, s.URL()+"/payments", i, idem.WithLane(fmt.Sprint(i))))
		require.NoError(t, err)
	}
	run(t, q)
	goesOffline(t, q, clk, &ev)
	before := l.dials.Load()
	advance(t, q, clk, time.Minute, 250*time.Millisecond)
	got := l.dials.Load() - before
	t.Logf("dials in a minute offline: %d", got)
	want := int64(time.Minute / DefaultProbeInterval)
	assert.InDelta(t, want, got, 1, "dials in a minute offline, at one per probe interval (%v)", DefaultProbeInterval)
}
