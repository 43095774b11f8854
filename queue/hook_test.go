package queue

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
)

// hookLog collects what an OnAttempt hook is told.
type hookLog struct {
	mu  sync.Mutex // guards got
	got []idem.AttemptInfo
}

func (h *hookLog) hook(_ context.Context, ai idem.AttemptInfo) {
	h.mu.Lock()
	h.got = append(h.got, ai)
	h.mu.Unlock()
}

func (h *hookLog) infos() []idem.AttemptInfo {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]idem.AttemptInfo(nil), h.got...)
}

func (h *hookLog) actions() []idem.Action {
	var out []idem.Action
	for _, ai := range h.infos() {
		out = append(out, ai.Action)
	}
	return out
}

// TestQueueHookTellsWhatFollowed: the OnAttempt hook of the queue's Client
// hears what the queue does after each attempt, not what the decision table
// advised: a 503 on the last attempt allowed fails the record (stop), a
// retry past the horizon expires it (expire), a second 401 holds its lane
// (hold), and a retry carries the wait the queue scheduled.
func TestQueueHookTellsWhatFollowed(t *testing.T) {
	tests := []struct {
		name    string
		status  int // every answer
		opts    Options
		settled bool // the record settles; else it waits, held
		state   State
		want    []idem.Action
	}{
		{"201: done", http.StatusCreated, Options{}, true, Done, []idem.Action{idem.ActionDone}},
		{"422: stop", http.StatusUnprocessableEntity, Options{}, true, Failed, []idem.Action{idem.ActionStop}},
		{"503 on the last attempt: stop, not retry", http.StatusServiceUnavailable,
			Options{MaxAttempts: 1}, true, Failed, []idem.Action{idem.ActionStop}},
		{"503 with no time left before the horizon: expire, not retry", http.StatusServiceUnavailable,
			Options{Retention: 2 * time.Hour, Margin: time.Minute, Policy: idem.Policy{BaseDelay: 3 * time.Hour, MaxDelay: 3 * time.Hour}},
			true, Expired, []idem.Action{idem.ActionExpire}},
		{"401 twice: retry at once, then hold, not stop", http.StatusUnauthorized,
			Options{}, false, Pending, []idem.Action{idem.ActionRetry, idem.ActionHold}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request, body string, seen int) { w.WriteHeader(tt.status) })
			var log hookLog
			var ev events
			client := &idem.Client{OnAttempt: log.hook}
			opts := tt.opts
			opts.Client, opts.Notify, opts.now = client, ev.notify, newClock().Now
			q, _ := openTest(t, opts)
			ctx := waitCtx(t)
			id, err := q.Enqueue(ctx, post(t, srv.URL, 1))
			require.NoError(t, err)
			run(t, q)
			var r *Record
			if tt.settled {
				r, err = q.Wait(ctx, id)
				require.NoError(t, err)
			} else {
				require.Eventually(t, func() bool { return ev.count(EventLaneHeld) == 1 }, 5*time.Second, time.Millisecond)
				r, err = q.Get(context.Background(), id)
				require.NoError(t, err)
			}
			assert.Equal(t, tt.state, r.State, "record state")
			assert.Equal(t, tt.want, log.actions(), "actions the hook heard")
			assert.Equal(t, uint64(len(tt.want)), client.Stats().Requests, "each attempt counted once")
			for i, ai := range log.infos() {
				assert.Zero(t, ai.Attempt.Wait, "%s: no wait after an attempt nothing follows at a later time", ai.Action)
				assert.Equal(t, i+1, ai.N, "the attempt's number in its record, for http.request.resend_count")
			}
		})
	}

	t.Run("retry: the wait the queue scheduled", func(t *testing.T) {
		srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request, body string, seen int) {
			w.WriteHeader(http.StatusServiceUnavailable)
		})
		var log hookLog
		clk := newClock()
		q, _ := openTest(t, Options{now: clk.Now, Client: &idem.Client{OnAttempt: log.hook}, Policy: idem.Policy{BaseDelay: time.Hour, MaxDelay: time.Hour}})
		ctx := waitCtx(t)
		id, err := q.Enqueue(ctx, post(t, srv.URL, 1))
		require.NoError(t, err)
		run(t, q)
		var r *Record
		require.Eventually(t, func() bool {
			r, err = q.Get(context.Background(), id)
			return err == nil && r.State == Pending && r.NumAttempts == 1
		}, 5*time.Second, time.Millisecond)
		infos := log.infos()
		require.Len(t, infos, 1)
		assert.Equal(t, idem.ActionRetry, infos[0].Action)
		want := r.NextAttempt.Sub(r.LastAttemptAt)
		assert.Positive(t, want)
		assert.Equal(t, want, infos[0].Attempt.Wait, "Wait, against the record's schedule")
	})
}
