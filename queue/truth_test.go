package queue

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/idemtest"
)

// These tests pin the queue's side of the outcome contract: the same
// decision as Client.Do, settled and surfaced, never retried without end.

// TestQueueKeyed409IsUnknown: a record whose attempts meet only 409s (its
// key is in flight elsewhere) fails as Unknown, never NotApplied: the
// request holding the key may still apply, and does. The server holds that
// request until the test lets it go, with a lease on a clock that never
// moves, so the record meets the claim however slow the machine is.
func TestQueueKeyed409IsUnknown(t *testing.T) {
	held, let := make(chan struct{}), make(chan struct{})
	var heldOnce, letOnce sync.Once
	epoch := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	w := idemtest.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		heldOnce.Do(func() { close(held) })
		<-let
		w.WriteHeader(http.StatusCreated)
	}), idemtest.Options{RequireKey: true, Now: func() time.Time { return epoch }})
	srv := httptest.NewServer(w)
	t.Cleanup(srv.Close)
	release := func() { letOnce.Do(func() { close(let) }) }
	t.Cleanup(release) // before srv.Close, which waits for the handler
	key := idem.DeriveKey("order-9", "charge")

	// Another process holds the key: its request is still being worked on.
	holder := &idem.Client{HTTPClient: srv.Client(), Policy: idem.Policy{MaxAttempts: 1}}
	first := post(t, srv.URL+"/payments", 1, idem.WithKey(key))
	holderDone := make(chan error, 1)
	go func() {
		res, err := holder.Do(context.Background(), first)
		if err == nil {
			res.Response.Body.Close()
		}
		holderDone <- err
	}()
	ctx := waitCtx(t)
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("the holder's request never reached the server")
	}

	opts := fast(&idem.Client{HTTPClient: srv.Client()})
	opts.MaxAttempts = 2
	q, _ := openTest(t, opts)
	run(t, q)
	again := post(t, srv.URL+"/payments", 1, idem.WithKey(key))
	id, err := q.Enqueue(ctx, again)
	require.NoError(t, err)
	r, err := q.Wait(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, Failed, r.State)
	assert.Equal(t, http.StatusConflict, r.LastStatus)
	assert.Equal(t, idem.Unknown, r.Outcome, "a 409 under our key is not a refusal")

	release()
	select {
	case err := <-holderDone:
		require.NoError(t, err)
	case <-ctx.Done():
		t.Fatal("the holder's request never completed")
	}
	assert.Equal(t, 1, w.EffectsForKey(key), "the holder's request applied")
}

// TestQueueCrossHostRedirectNotFollowed: a keyed POST redirected to another
// host fails NotApplied with the reason, and the other host sees nothing.
func TestQueueCrossHostRedirectNotFollowed(t *testing.T) {
	var other atomic.Int32
	otherSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		other.Add(1)
		w.WriteHeader(201)
	}))
	defer otherSrv.Close()
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, otherSrv.URL+"/payments", http.StatusTemporaryRedirect)
	}))
	defer origin.Close()

	q, _ := openTest(t, fast(&idem.Client{}))
	run(t, q)
	ctx := waitCtx(t)
	id, err := q.Enqueue(ctx, post(t, origin.URL+"/payments", 1))
	require.NoError(t, err)
	r, err := q.Wait(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, Failed, r.State)
	assert.Equal(t, idem.NotApplied, r.Outcome)
	assert.Contains(t, r.Reason, "another host")
	assert.Equal(t, 1, r.NumAttempts)
	assert.Zero(t, other.Load(), "nothing reached the other host")
}

// TestQueueInvalidRequestFails: a request that cannot be sent as it is
// (a certificate that does not verify, a header net/http refuses) fails at
// once, NotApplied, with an event; it is not retried without end.
func TestQueueInvalidRequestFails(t *testing.T) {
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer tlsSrv.Close()
	var plainHits atomic.Int32
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { plainHits.Add(1) }))
	defer plain.Close()

	tests := []struct {
		name      string
		url       string
		authorize func(context.Context, *http.Request) error
	}{
		{"certificate not trusted", tlsSrv.URL + "/payments", nil},
		{"CR LF from Authorize", plain.URL + "/payments", func(_ context.Context, r *http.Request) error {
			r.Header.Set("Authorization", "Bearer t\r\nX-Evil: 1")
			return nil
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ev events
			opts := fast(&idem.Client{Authorize: tt.authorize})
			opts.Notify = ev.notify
			r := settleOne(t, opts, tt.url)
			assert.Equal(t, Failed, r.State)
			assert.Equal(t, idem.NotApplied, r.Outcome)
			assert.Equal(t, idem.ClassInvalid, r.LastClass)
			assert.LessOrEqual(t, r.NumAttempts, 1)
			assert.NotEmpty(t, r.Reason)
			assert.Equal(t, 1, ev.count(EventSettled))
			assert.Zero(t, ev.count(EventOffline), "a local failure is not the network")
			assert.Zero(t, plainHits.Load())
		})
	}
}

// TestQueueOfflineDoesNotFlapOnLocalFailures: one lane's requests fail
// locally (a certificate that does not verify) while another lane's get
// through: the queue never declares itself offline, nor back online.
func TestQueueOfflineDoesNotFlapOnLocalFailures(t *testing.T) {
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer tlsSrv.Close()
	s := startServer(t, idemtest.Options{RequireKey: true})

	var ev events
	opts := fast(&idem.Client{HTTPClient: s.Client()})
	opts.Notify = ev.notify
	opts.Workers = 2
	q, _ := openTest(t, opts)
	ctx := waitCtx(t)
	const n = 12
	var ids []ID
	for i := range n {
		target, lane := s.URL()+"/payments", "good"
		if i%2 == 0 {
			target, lane = tlsSrv.URL+"/payments", "bad"
		}
		id, err := q.Enqueue(ctx, post(t, target, i, idem.WithLane(lane)))
		require.NoError(t, err)
		ids = append(ids, id)
	}
	run(t, q)
	for i, id := range ids {
		r, err := q.Wait(ctx, id)
		require.NoError(t, err)
		want := Done
		if i%2 == 0 {
			want = Failed
		}
		assert.Equal(t, want, r.State, fmt.Sprintf("record %d", i))
	}
	assert.Zero(t, ev.count(EventOffline))
	assert.Zero(t, ev.count(EventOnline))
	assert.Equal(t, n/2, s.TotalEffects())
}

// TestQueueRecordRedacted: a record stores its last error without the URL's
// query, and a pending record has no outcome yet rather than Unknown.
func TestQueueRecordRedacted(t *testing.T) {
	q, _ := openTest(t, Options{Client: &idem.Client{}, Policy: idem.Policy{BaseDelay: time.Hour, MaxDelay: time.Hour}})
	ctx := waitCtx(t)
	id, err := q.Enqueue(ctx, post(t, "http://127.0.0.1:1/p?token=s3cret", 1))
	require.NoError(t, err)
	r, err := q.Get(context.Background(), id)
	require.NoError(t, err)
	assert.Equal(t, idem.NoOutcome, r.Outcome, "pending: no outcome yet")
	assert.Equal(t, "none", r.Outcome.String())

	run(t, q)
	require.Eventually(t, func() bool {
		r, err = q.Get(context.Background(), id)
		return err == nil && r.NumAttempts > 0 && r.State == Pending
	}, 5*time.Second, 5*time.Millisecond)
	assert.NotEmpty(t, r.LastError)
	assert.NotContains(t, r.LastError, "s3cret")
	assert.NotContains(t, r.LastError, "token")
	assert.Equal(t, idem.NoOutcome, r.Outcome)
}
