package queue

import (
	"context"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/binenc"
)

const year = 365 * 24 * time.Hour

// storedMark reads the clock's high-water mark from the closed file at path.
func storedMark(t *testing.T, path string) time.Time {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second, ReadOnly: true})
	require.NoError(t, err)
	defer db.Close()
	var mark time.Time
	require.NoError(t, db.View(func(tx *bolt.Tx) error {
		mark = binenc.FromNanos(int64(getUint(tx.Bucket(bucketMeta), metaHWM)))
		return nil
	}))
	return mark
}

// setStoredMark writes the clock's high-water mark into the closed file at
// path, as a run with a clock that read mark would have left it.
func setStoredMark(t *testing.T, path string, mark time.Time) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		return putUint(tx.Bucket(bucketMeta), metaHWM, uint64(binenc.Nanos(mark)))
	}))
}

// TestResetClock: a mark left a year ahead by a wrong clock holds every
// send; ResetClock, an operator's call, sets it to the clock's reading,
// persisted, reports both marks, and the record drains.
func TestResetClock(t *testing.T) {
	clk := newClock()
	srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request, body string, seen int) { w.WriteHeader(http.StatusCreated) })
	path := filepath.Join(t.TempDir(), "q.db")
	require.NoError(t, reopen(t, path, Options{now: clk.Now}).Close())
	ahead := clk.Now().Add(year)
	setStoredMark(t, path, ahead)

	var ev events
	q := reopen(t, path, Options{now: clk.Now, Client: &idem.Client{}, Notify: ev.notify})
	q.sig.init()
	ctx := waitCtx(t)
	id, err := q.Enqueue(ctx, post(t, srv.URL, 1))
	require.NoError(t, err)
	run(t, q)
	require.Eventually(t, func() bool { return ev.count(EventClockHeld) == 1 }, 5*time.Second, time.Millisecond)
	clk.Add(time.Hour) // still far behind the mark: the hold lasts
	waitRest(t, q, clk.Now())
	assert.Empty(t, srv.requests(), "no send while the mark is ahead of the clock")

	require.NoError(t, q.ResetClock(ctx))
	r, err := q.Wait(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, Done, r.State)
	assert.Len(t, srv.requests(), 1)

	var reset []Event
	ev.mu.Lock()
	for _, e := range ev.got {
		if e.Kind == EventClockReset {
			reset = append(reset, e)
		}
	}
	ev.mu.Unlock()
	require.Len(t, reset, 1, "the reset is reported, for the application to log")
	assert.True(t, reset[0].OldMark.Equal(ahead), "OldMark %v, want %v", reset[0].OldMark, ahead)
	assert.True(t, reset[0].NewMark.Equal(clk.Now()), "NewMark %v, want %v", reset[0].NewMark, clk.Now())
	require.Error(t, reset[0].Err)
	assert.Contains(t, reset[0].Err.Error(), ahead.UTC().Format(time.RFC3339))

	require.NoError(t, q.Close())
	got := storedMark(t, path)
	assert.True(t, got.Equal(clk.Now()), "stored mark %v, want %v: the reset is persisted", got, clk.Now())
	assert.ErrorIs(t, q.ResetClock(ctx), ErrClosed)
}

// TestResetClockExpiresFutureFirstSent: a record first sent while the
// clock read a year ahead has a FirstSentAt the clock, set right and its
// mark reset, will not reach for a year: its horizon cannot be judged, so it
// expires rather than being sent again past the server's retention.
func TestResetClockExpiresFutureFirstSent(t *testing.T) {
	clk := newClock()
	right := clk.Now()
	srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request, body string, seen int) {
		w.WriteHeader(http.StatusServiceUnavailable) // ambiguous: retried
	})
	var ev events
	q, path := openTest(t, Options{now: clk.Now, Client: &idem.Client{}, Notify: ev.notify, Policy: idem.Policy{BaseDelay: time.Hour, MaxDelay: time.Hour}})
	ctx := waitCtx(t)
	clk.Add(year) // the wrong clock
	id, err := q.Enqueue(ctx, post(t, srv.URL, 1))
	require.NoError(t, err)
	run(t, q)
	require.Eventually(t, func() bool { return len(srv.requests()) == 1 }, 5*time.Second, time.Millisecond)
	require.Eventually(t, func() bool {
		r, err := q.Get(context.Background(), id)
		return err == nil && r.State == Pending && r.NumAttempts == 1
	}, 5*time.Second, time.Millisecond)
	require.NoError(t, q.Close())

	clk.Set(right.Add(2 * time.Hour)) // set right
	q = reopen(t, path, Options{now: clk.Now, Client: &idem.Client{}, Notify: ev.notify})
	run(t, q)
	require.NoError(t, q.ResetClock(ctx))
	r, err := q.Wait(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, Expired, r.State)
	assert.Equal(t, idem.Unknown, r.Outcome, "its attempt was ambiguous")
	assert.Contains(t, r.Reason, "first sent")
	assert.Len(t, srv.requests(), 1, "not sent again")
}

// TestClockJumpCapped: one reading far ahead of the mark moves it by
// MaxClockStep at most, so that a clock set right again is held for a day
// at most, not for the year the wrong clock was ahead.
func TestClockJumpCapped(t *testing.T) {
	clk := newClock()
	t0 := clk.Now()
	srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request, body string, seen int) { w.WriteHeader(http.StatusCreated) })
	q, path := openTest(t, Options{now: clk.Now, Client: &idem.Client{}})
	ctx := waitCtx(t)
	run(t, q)
	id, err := q.Enqueue(ctx, post(t, srv.URL, 1))
	require.NoError(t, err)
	_, err = q.Wait(ctx, id)
	require.NoError(t, err)

	clk.Add(year) // a wrong reading
	id, err = q.Enqueue(ctx, post(t, srv.URL, 2))
	require.NoError(t, err)
	r, err := q.Wait(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, Done, r.State, "a clock ahead is not held: a device may have been off for long")
	require.NoError(t, q.Close())

	got := storedMark(t, path)
	assert.False(t, got.After(t0.Add(MaxClockStep)), "stored mark %v, more than MaxClockStep past %v", got, t0)
	assert.False(t, got.Before(t0), "stored mark %v went back", got)

	// Set right again, the clock is held only until it passes the capped
	// mark, less the tolerance.
	clk.Set(t0.Add(MaxClockStep - DefaultClockTolerance + time.Minute))
	q = reopen(t, path, Options{now: clk.Now, Client: &idem.Client{}})
	run(t, q)
	id, err = q.Enqueue(ctx, post(t, srv.URL, 3))
	require.NoError(t, err)
	r, err = q.Wait(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, Done, r.State)
}
