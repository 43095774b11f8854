package bench

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/bench/internal/latproxy"
	"github.com/idem-go/idem/queue"
)

// drainLatencyRTT is the API's round trip in BenchmarkDrainLatency.
const drainLatencyRTT = 50 * time.Millisecond

// BenchmarkDrainLatency drains a backlog queued beforehand, 64 lanes of 100
// records (5 in smoke mode), to a server behind a latency proxy 50 ms away,
// with 4 workers (the default before issue 34) and with the default
// options, side by side. Each iteration is one whole drain on a fresh
// queue. drain-s is its time; ideal-x is that time over the least a lane's
// records one after another can take, records a lane x the round trip
// (issue 34: at most 2 with the default options); intents/s the rate.
func BenchmarkDrainLatency(b *testing.B) {
	const lanes = 64
	perLane := 100
	if smoke() {
		perLane = 5
	}
	srv := httptest.NewServer(okHandler())
	defer srv.Close()
	p, err := latproxy.Start(drainLatencyRTT/2, latproxy.To("tcp", srv.Listener.Addr().String()))
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	url := "http://" + p.Addr() + "/payments"
	for _, workers := range []int{4, 0} {
		name := "workers=default"
		if workers > 0 {
			name = "workers=" + strconv.Itoa(workers)
		}
		b.Run(fmt.Sprintf("lanes=%d/records=%d/%s", lanes, perLane, name), func(b *testing.B) {
			var total time.Duration
			for range b.N {
				total += drainBacklog(b, url, lanes, perLane, workers)
			}
			mean := total / time.Duration(b.N)
			b.ReportMetric(mean.Seconds(), "drain-s")
			b.ReportMetric(mean.Seconds()/(float64(perLane)*drainLatencyRTT.Seconds()), "ideal-x")
			b.ReportMetric(float64(lanes*perLane)/mean.Seconds(), "intents/s")
		})
	}
}

// drainBacklog queues lanes x perLane records to url on a fresh queue with
// workers (0: the default), then drains them and returns the drain's time.
func drainBacklog(b *testing.B, url string, lanes, perLane, workers int) time.Duration {
	b.StopTimer()
	n := lanes * perLane
	var settled, failed atomic.Int64
	all := make(chan struct{})
	tr := newTransport(nil)
	defer tr.CloseIdleConnections()
	q := openQueue(b, filepath.Join(b.TempDir(), "q.db"), queue.Options{
		Workers: workers,
		Client:  &idem.Client{HTTPClient: &http.Client{Transport: tr}},
		Notify: func(e queue.Event) {
			if e.Kind != queue.EventSettled {
				return
			}
			if e.Record.State != queue.Done {
				failed.Add(1)
			}
			if settled.Add(1) == int64(n) {
				close(all)
			}
		},
	})
	defer q.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	err := produce(64, n, func(i int) error {
		in, err := buildIntent(url, idem.WithLane("lane-"+strconv.Itoa(i%lanes)))
		if err != nil {
			return err
		}
		_, err = q.Enqueue(ctx, in)
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	b.StartTimer()
	start := time.Now()
	go func() { _ = q.Run(ctx) }()
	select {
	case <-all:
	case <-time.After(10 * time.Minute):
		b.Fatalf("%d of %d settled after 10 minutes", settled.Load(), n)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	if f := failed.Load(); f > 0 {
		b.Fatalf("%d records settled other than done", f)
	}
	return elapsed
}
