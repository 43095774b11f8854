package queueweb_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/queue"
	"github.com/idem-go/idem/queue/queueweb"
)

// TestReadStatsHorizon: a pending record an attempt reached the server with
// is at risk once its horizon, FirstSentAt + Retention - Margin, comes
// within Within; a record never sent never is.
func TestReadStatsHorizon(t *testing.T) {
	hit := make(chan struct{}, 1)
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "3600")
		w.WriteHeader(http.StatusServiceUnavailable)
		select {
		case hit <- struct{}{}:
		default:
		}
	}))
	t.Cleanup(app.Close)
	q, err := queue.Open(filepath.Join(t.TempDir(), "q.db"), queue.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { q.Close() })
	ctx := context.Background()
	in, err := idem.NewIntent("POST", app.URL+"/pay", []byte("x"))
	require.NoError(t, err)
	sent, err := q.Enqueue(ctx, in)
	require.NoError(t, err)

	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- q.Run(runCtx) }()
	select {
	case <-hit:
	case <-time.After(20 * time.Second):
		t.Fatal("the attempt never reached the server")
	}
	stop()
	require.NoError(t, <-ran) // records the attempt under way
	in, err = idem.NewIntent("POST", "http://127.0.0.1:1/later", []byte("x"))
	require.NoError(t, err)
	_, err = q.Enqueue(ctx, in)
	require.NoError(t, err)

	r, err := q.Get(ctx, sent)
	require.NoError(t, err)
	require.Equal(t, queue.Pending, r.State)
	require.False(t, r.FirstSentAt.IsZero(), "the attempt reached the server")
	deadline := r.FirstSentAt.Add(queue.DefaultRetention - queue.DefaultMargin)

	tests := []struct {
		name   string
		now    time.Time
		within time.Duration
		want   []queue.ID
	}{
		{"far", r.FirstSentAt, 0, []queue.ID{}},
		{"within the hour", deadline.Add(-30 * time.Minute), 0, []queue.ID{sent}},
		{"within none, not passed", deadline.Add(-time.Second), -1, []queue.ID{}},
		{"passed", deadline.Add(time.Second), -1, []queue.ID{sent}},
		{"within a day", r.FirstSentAt, 24 * time.Hour, []queue.ID{sent}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, err := queueweb.ReadStats(ctx, q, queueweb.Options{Within: tt.within}, tt.now)
			require.NoError(t, err)
			assert.Equal(t, tt.want, st.Horizon.AtRisk)
			assert.Equal(t, 2, st.Counts["pending"])
			if len(tt.want) > 0 {
				require.NotNil(t, st.Horizon.Soonest)
				assert.True(t, deadline.Equal(*st.Horizon.Soonest), "soonest %v, want %v", *st.Horizon.Soonest, deadline)
			} else {
				assert.Nil(t, st.Horizon.Soonest)
			}
		})
	}
	st, err := queueweb.ReadStats(ctx, q, queueweb.Options{Within: -1}, r.FirstSentAt)
	require.NoError(t, err)
	assert.Equal(t, "0s", st.Horizon.Within)
	_, err = queueweb.ReadStats(ctx, q, queueweb.Options{Retention: time.Hour, Margin: 2 * time.Hour}, r.FirstSentAt)
	assert.ErrorContains(t, err, "want 0 <= Margin < Retention")
}
