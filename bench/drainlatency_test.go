package bench

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/idem-go/idem/bench/internal/latproxy"
)

// drainLatencyRTT is the API's round trip in BenchmarkDrainLatency.
const drainLatencyRTT = 50 * time.Millisecond

// BenchmarkDrainLatency drains a backlog queued beforehand, 64 lanes of 100
// records, to a server behind a latency proxy 50 ms away, with 4 workers
// (the default before issue 34) and with the default options, side by
// side. Each iteration is one whole drain on a fresh queue (run.sh runs
// one, -benchtime 1x); smoke mode drains 5 records a lane, once whatever
// b.N, so that CI's -benchtime 100x stays short. drain-s is its time; ideal-x is that time over the least a lane's
// records one after another can take, records a lane x the round trip
// (issue 34: at most 2 with the default options); intents/s the rate.
func BenchmarkDrainLatency(b *testing.B) {
	const lanes = 64
	perLane, drains := 100, func(b *testing.B) int { return b.N }
	if smoke() {
		perLane, drains = 5, func(*testing.B) int { return 1 }
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
			n := drains(b)
			for range n {
				total += drainBacklog(b, url, lanes, perLane, workers)
			}
			mean := total / time.Duration(n)
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
	q, settled := openDrainQueue(b, workers, n)
	defer q.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	err := enqueueAll(ctx, q, n, url, func(i int) string { return "lane-" + strconv.Itoa(i%lanes) })
	if err != nil {
		b.Fatal(err)
	}
	b.StartTimer()
	start := time.Now()
	go func() { _ = q.Run(ctx) }()
	settled()
	elapsed := time.Since(start)
	b.StopTimer()
	return elapsed
}
