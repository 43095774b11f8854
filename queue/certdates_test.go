package queue

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/certtest"
)

// certServer starts a TLS server answering 201 with cert, whose client
// judges dates by clk, and counts the connections that client dials to it.
func certServer(t *testing.T, cert certtest.Cert, clk *clock) (url string, hc *http.Client, dials *atomic.Int32) {
	t.Helper()
	srv, tr := certtest.Server(t, cert, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}), clk.Now)
	dials = new(atomic.Int32)
	var d net.Dialer
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if addr == srv.Listener.Addr().String() {
			dials.Add(1)
		}
		return d.DialContext(ctx, network, addr)
	}
	return srv.URL + "/payments", &http.Client{Transport: tr}, dials
}

// certQueue opens a running queue whose Client reaches a certServer with
// cert, dates judged by clk, events in ev, and enqueues one intent for it.
func certQueue(t *testing.T, clk *clock, cert certtest.Cert, ev *events) (*Queue, ID, *atomic.Int32) {
	t.Helper()
	target, hc, dials := certServer(t, cert, clk)
	opts := fast(&idem.Client{HTTPClient: hc})
	opts.now, opts.Notify = clk.Now, ev.notify
	q, _ := openTest(t, opts)
	id, err := q.Enqueue(waitCtx(t), post(t, target, 1))
	require.NoError(t, err)
	run(t, q)
	return q, id, dials
}

// clockHeld returns the errors of the EventClockHeld events.
func (e *events) clockHeld() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, ev := range e.got {
		if ev.Kind == EventClockHeld {
			out = append(out, ev.Err.Error())
		}
	}
	return out
}

// TestQueueCertificateDatesHold: on a device whose clock reads before a
// certificate's validity, the record is not failed: sends to that host are
// held and reported (EventClockHeld), the attempt is not counted, nothing
// marks the key as seen, other hosts' lanes drain, and once the clock reads
// within the certificate's dates the record is sent.
func TestQueueCertificateDatesHold(t *testing.T) {
	clk := newClock()
	t0 := clk.Now()
	target, hc, dials := certServer(t, certtest.Cert{NotBefore: t0.Add(time.Hour), NotAfter: t0.Add(year)}, clk)
	plain := newRecorder(t, func(w http.ResponseWriter, r *http.Request, body string, seen int) { w.WriteHeader(http.StatusCreated) })

	var ev events
	var log hookLog
	opts := fast(&idem.Client{HTTPClient: hc, OnAttempt: log.hook})
	opts.now, opts.Notify = clk.Now, ev.notify
	q, _ := openTest(t, opts)
	ctx := waitCtx(t)
	id, err := q.Enqueue(ctx, post(t, target, 1, idem.WithLane("tls")))
	require.NoError(t, err)
	run(t, q)
	require.Eventually(t, func() bool { return ev.count(EventClockHeld) == 1 }, 5*time.Second, time.Millisecond)

	r, err := q.Get(context.Background(), id)
	require.NoError(t, err)
	assert.Equal(t, Pending, r.State, "held, not failed")
	assert.Zero(t, r.NumAttempts, "an attempt the clock refused is not counted")
	assert.True(t, r.FirstSentAt.IsZero(), "nothing reached the server: its key's retention has not begun")
	assert.Equal(t, idem.ClassInvalid, r.LastClass)
	assert.Contains(t, r.LastError, "certificate")
	held := ev.clockHeld()
	require.Len(t, held, 1)
	assert.Contains(t, held[0], strings.TrimPrefix(strings.TrimSuffix(target, "/payments"), "https://"), "names the host")
	assert.Contains(t, held[0], t0.Add(time.Hour).UTC().Format(time.RFC3339), "names the certificate's dates")
	assert.Equal(t, []idem.Action{idem.ActionHold}, log.actions(), "the hook hears the hold")

	other, err := q.Enqueue(ctx, post(t, plain.URL, 2, idem.WithLane("plain")))
	require.NoError(t, err)
	ro, err := q.Wait(ctx, other)
	require.NoError(t, err)
	assert.Equal(t, Done, ro.State, "another host is not held")

	clk.Add(2 * time.Hour) // the clock set right: within the certificate's dates
	r, err = q.Wait(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, Done, r.State)
	assert.Equal(t, 1, r.NumAttempts)
	assert.Equal(t, int32(2), dials.Load(), "one refused handshake, then the send")
	assert.Equal(t, 1, ev.count(EventClockHeld))
}

// TestQueueCertificateDatesWake: a hold on a certificate the clock still
// finds expired ends with Wake or ResetClock, an operator's word: the
// record is tried again and, its certificate refused again, held again;
// never failed.
func TestQueueCertificateDatesWake(t *testing.T) {
	clk := newClock()
	t0 := clk.Now()
	var ev events
	q, id, dials := certQueue(t, clk, certtest.Cert{NotBefore: t0.Add(-year), NotAfter: t0.Add(-time.Hour)}, &ev)
	ctx := waitCtx(t)
	require.Eventually(t, func() bool { return ev.count(EventClockHeld) == 1 }, 5*time.Second, time.Millisecond)
	assert.Equal(t, int32(1), dials.Load())

	// The worker that held the host may not have handed its lane back yet,
	// and a busy lane is not made due by Wake: it is judged again an idle
	// period later, by this clock. The hold, which only Wake ends here (the
	// certificate stays expired), is what the second attempt proves gone.
	q.Wake()
	clk.Add(time.Second)
	require.Eventually(t, func() bool { return ev.count(EventClockHeld) == 2 }, 5*time.Second, time.Millisecond)
	require.NoError(t, q.ResetClock(ctx))
	clk.Add(time.Second)
	require.Eventually(t, func() bool { return ev.count(EventClockHeld) == 3 }, 5*time.Second, time.Millisecond)
	assert.Equal(t, int32(3), dials.Load(), "one attempt per Wake or ResetClock, none between")

	r, err := q.Get(context.Background(), id)
	require.NoError(t, err)
	assert.Equal(t, Pending, r.State)
	assert.Zero(t, r.NumAttempts)
	assert.Zero(t, ev.count(EventSettled))
}

// TestQueueCertificateRefusedWhateverTheClock: a certificate for another
// host is refused whatever the clock reads: the record fails at once, as
// before, and nothing is held.
func TestQueueCertificateRefusedWhateverTheClock(t *testing.T) {
	clk := newClock()
	t0 := clk.Now()
	var ev events
	q, id, _ := certQueue(t, clk, certtest.Cert{NotBefore: t0.Add(-year), NotAfter: t0.Add(year), Host: "other.invalid"}, &ev)
	r, err := q.Wait(waitCtx(t), id)
	require.NoError(t, err)
	assert.Equal(t, Failed, r.State)
	assert.Equal(t, idem.NotApplied, r.Outcome)
	assert.Equal(t, idem.ClassInvalid, r.LastClass)
	assert.Zero(t, ev.count(EventClockHeld))
}
