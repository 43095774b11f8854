package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// outageWorkers is how many goroutines send operations in BenchmarkOutage.
const outageWorkers = 8

// closedAddr returns a loopback address nothing listens on, below the
// ephemeral port range: a closed port inside it can be picked as the source
// port of a dial to itself, and the dial then connects to itself.
func closedAddr(b *testing.B) string {
	low := 32768
	if data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(data)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				low = n
			}
		}
	}
	for p := low - 1; p > low-2000 && p > 1024; p-- {
		addr := fmt.Sprintf("127.0.0.1:%d", p)
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		_ = ln.Close()
		return addr
	}
	b.Fatal("no free port below the ephemeral range")
	return ""
}

// BenchmarkOutage faces each client with a total outage for a window
// (outageWindow: 10 s, 250 ms in smoke mode) from outageWorkers goroutines,
// each sending POSTs one after another: every dial refused, or every attempt
// answered 503. It reports attempts sent per operation: under an outage,
// retries multiply the load on a server that is trying to come back. idem's
// retries are bounded by the retry budget the Client (or Transport) shares
// between all its operations. ns/op is not meaningful here and is not
// reported; run it with -benchtime=1x.
func BenchmarkOutage(b *testing.B) {
	window := outageWindow(b)
	for _, fault := range []string{"refused", "503"} {
		for _, m := range peers() {
			b.Run("fault="+fault+"/client="+m.name, func(b *testing.B) {
				var dials, answered atomic.Int64
				var url string
				switch fault {
				case "refused":
					url = "http://" + closedAddr(b) + "/payments"
				case "503":
					srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						_, _ = io.Copy(io.Discard, r.Body)
						answered.Add(1)
						http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
					}))
					defer srv.Close()
					url = srv.URL + "/payments"
				}
				p := newPeer(b, m, &dials)
				var stop atomic.Bool
				var ops, succeeded atomic.Int64
				ctx := context.Background()
				b.ResetTimer()
				timer := time.AfterFunc(window, func() { stop.Store(true) })
				defer timer.Stop()
				var wg sync.WaitGroup
				for range outageWorkers {
					wg.Go(func() {
						for !stop.Load() {
							ops.Add(1)
							// Operations under way when the window ends finish as they would.
							if status, err := p.do(ctx, http.MethodPost, url, payload, ""); err == nil && status < 300 {
								succeeded.Add(1)
							}
						}
					})
				}
				wg.Wait()
				b.StopTimer()
				if succeeded.Load() > 0 {
					b.Fatalf("%d operations succeeded during a total outage", succeeded.Load())
				}
				attempts := answered.Load()
				if fault == "refused" {
					attempts = dials.Load() // each attempt dials, and each dial is refused
				}
				n := float64(ops.Load())
				b.ReportMetric(0, "ns/op")
				b.ReportMetric(float64(attempts)/n, "attempts/op")
				b.ReportMetric(float64(attempts-ops.Load())/n, "retries/op") // printed with more digits near 0
				b.ReportMetric(n/window.Seconds(), "ops/s")
				if p.stats != nil {
					b.ReportMetric(float64(p.stats().BudgetRefusals)/n, "budget-refusals/op")
				}
			})
		}
	}
}
