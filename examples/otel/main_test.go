package main

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/queue"
)

// points maps a data point's attributes, as attrs formats them, to its value.
type points map[string]float64

func TestAttemptHookAndStats(t *testing.T) {
	tests := []struct {
		name     string
		statuses []int // the server's answers in order; nil: nothing listens
		// want holds the expected points per metric; histogram points are
		// counts. Metrics not named are not checked.
		want map[string]points
	}{{
		name:     "503 then 201: the retry is replayed",
		statuses: []int{503, 201},
		want: map[string]points{
			"idem.attempts": {
				"action=retry class=ambiguous method=POST status_code=503": 1,
				"action=done class=applied method=POST status_code=201":    1,
			},
			"idem.attempt.duration": {
				"action=retry class=ambiguous method=POST status_code=503": 1,
				"action=done class=applied method=POST status_code=201":    1,
			},
			"idem.operations": {"outcome=applied": 1},
			"idem.retries":    {"class=ambiguous": 1},
			"idem.replays":    {"-": 1},
		},
	}, {
		name:     "409 then 201: a conflict is not processed",
		statuses: []int{409, 201},
		want: map[string]points{
			"idem.attempts": {
				"action=retry class=not_processed method=POST status_code=409": 1,
				"action=done class=applied method=POST status_code=201":        1,
			},
			"idem.operations": {"outcome=applied": 1},
			"idem.retries":    {"class=not_processed": 1},
			"idem.conflicts":  {"-": 1},
			"idem.replays":    {"-": 1},
		},
	}, {
		name:     "422: key reused",
		statuses: []int{422},
		want: map[string]points{
			"idem.attempts":   {"action=stop class=key_reused method=POST status_code=422": 1},
			"idem.operations": {"outcome=not_applied": 1},
			"idem.key_reused": {"-": 1},
			"idem.replays":    {"-": 0},
		},
	}, {
		name:     "400: rejected",
		statuses: []int{400},
		want: map[string]points{
			"idem.attempts":   {"action=stop class=rejected method=POST status_code=400": 1},
			"idem.operations": {"outcome=not_applied": 1},
		},
	}, {
		name: "refused: never sent, no status attribute",
		want: map[string]points{
			// The last retry is refused by MaxAttempts, after the hook ran.
			"idem.attempts":   {"action=retry class=never_sent method=POST": 1, "action=stop class=never_sent method=POST": 1},
			"idem.operations": {"outcome=not_applied": 1},
			"idem.retries":    {"class=never_sent": 1},
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reader := sdkmetric.NewManualReader()
			meter := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)).Meter(meterName)
			hook, err := NewAttemptHook(meter)
			require.NoError(t, err)
			client := &idem.Client{
				Policy:    idem.Policy{MaxAttempts: 2, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond},
				OnAttempt: hook,
			}
			_, err = RegisterStats(meter, client.Stats)
			require.NoError(t, err)

			attempts := doOne(t, client, scripted(t, tt.statuses).URL+"/orders?customer=c-17")

			got := collect(t, reader)
			for name, want := range tt.want {
				assert.Equal(t, want, got[name], "%s after %v", name, tt.statuses)
			}
			var sum float64
			for _, v := range got["idem.attempts"] {
				sum += v
			}
			assert.Equal(t, float64(attempts), sum, "sum of idem.attempts, want the attempts Do made")
		})
	}
}

func TestRegisterQueue(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	meter := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)).Meter(meterName)
	srv := scripted(t, []int{201, 201})
	q, err := queue.Open(filepath.Join(t.TempDir(), "q.db"), queue.Options{})
	require.NoError(t, err)
	defer q.Close()
	reg, err := RegisterQueue(meter, q)
	require.NoError(t, err)
	defer reg.Unregister()

	var ids []queue.ID
	for range 2 {
		in, err := idem.NewIntent(http.MethodPost, srv.URL+"/orders", []byte("{}"))
		require.NoError(t, err)
		id, err := q.Enqueue(t.Context(), in)
		require.NoError(t, err)
		ids = append(ids, id)
	}
	got := collect(t, reader)
	assert.Equal(t, 2.0, got["idem.queue.records"]["state=pending"], "pending records before Run")
	assert.Positive(t, got["idem.queue.oldest_pending"]["-"], "oldest_pending before Run")

	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() { _ = q.Run(ctx) })
	for _, id := range ids {
		r, err := q.Wait(ctx, id)
		require.NoError(t, err)
		require.Equal(t, queue.Done, r.State, "record %d: %s", id, r.Reason)
	}
	stop()
	wg.Wait()
	got = collect(t, reader)
	assert.Equal(t, 2.0, got["idem.queue.records"]["state=done"], "done records after Run")
	assert.Equal(t, 0.0, got["idem.queue.records"]["state=pending"], "pending records after Run")
	assert.Equal(t, 0.0, got["idem.queue.oldest_pending"]["-"], "oldest_pending after Run")
}

func TestRun(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(t.Context(), &out))
	for _, want := range []string{
		"action=retry class=ambiguous method=POST status_code=503     3",
		"outcome=applied                                              5",
		"state=done                                                   2",
	} {
		assert.Contains(t, out.String(), want)
	}
}

// scripted starts a server that answers with statuses, one per request in
// order, and marks a 2xx to a key it answered before as a replay. With no
// statuses it returns a closed server: connections are refused.
func scripted(t *testing.T, statuses []int) *httptest.Server {
	var mu sync.Mutex // guards next and seen
	next, seen := 0, map[string]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if next == len(statuses) {
			t.Errorf("request %d %s beyond the script %v", next+1, r.URL, statuses)
			w.WriteHeader(http.StatusTeapot)
			return
		}
		status, key := statuses[next], r.Header.Get(idem.DefaultKeyHeader)
		next++
		if status/100 == 2 && seen[key] {
			w.Header().Set("Idempotent-Replayed", "true")
		}
		seen[key] = true
		w.WriteHeader(status)
	}))
	if statuses == nil {
		srv.Close()
	} else {
		t.Cleanup(srv.Close)
	}
	return srv
}

// doOne runs a keyed POST to url and returns how many attempts it made.
func doOne(t *testing.T, c *idem.Client, url string) int {
	t.Helper()
	in, err := idem.NewIntent(http.MethodPost, url, []byte(`{"sku":"x"}`))
	require.NoError(t, err)
	res, err := c.Do(t.Context(), in)
	var e *idem.Error
	switch {
	case errors.As(err, &e):
		return len(e.Attempts)
	case err != nil:
		require.NoError(t, err)
	}
	require.NoError(t, res.Response.Body.Close())
	return len(res.Attempts)
}

// collect gathers every metric from reader: name -> attrs -> value, with a
// histogram point's count as its value.
func collect(t *testing.T, reader sdkmetric.Reader) map[string]points {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(t.Context(), &rm))
	out := map[string]points{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			ps := points{}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					ps[attrs(p.Attributes)] = float64(p.Value)
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					ps[attrs(p.Attributes)] = p.Value
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					ps[attrs(p.Attributes)] = float64(p.Count)
				}
			default:
				t.Fatalf("%s: unexpected data %T", m.Name, d)
			}
			out[m.Name] = ps
		}
	}
	return out
}
