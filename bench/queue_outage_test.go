package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/queue"
)

// queueOutageLanes and queueOutagePerLane are the backlog a device builds
// while its API is unreachable in BenchmarkQueueOutage.
const queueOutageLanes, queueOutagePerLane = 16, 4

// BenchmarkQueueOutage is a device behind a network that goes for a window
// (outageWindow: 10 s, 250 ms in smoke mode) with the bbolt queue on the
// default options: every dial is refused, as with no route, from the start
// until the window ends, then the API answers at once. It reports how long
// after the API came back the first record reached it (back-ms), without
// Wake, how many dials the drainer made per minute offline (probes/min),
// and how long the backlog took to drain from the return (drain-ms). ns/op
// is not meaningful; run it with -benchtime=1x.
func BenchmarkQueueOutage(b *testing.B) {
	window := outageWindow(b)
	var down atomic.Bool
	var dials atomic.Int64
	var first atomic.Int64 // unix ns of the first request the API saw
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		first.CompareAndSwap(0, time.Now().UnixNano())
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	var d net.Dialer
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		if down.Load() {
			return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
		}
		return d.DialContext(ctx, network, addr)
	}}
	defer tr.CloseIdleConnections()
	offline := make(chan struct{}, 1)
	notify := func(ev queue.Event) {
		if ev.Kind == queue.EventOffline {
			select {
			case offline <- struct{}{}:
			default:
			}
		}
	}
	var back, perMin, drain float64
	for range b.N {
		down.Store(true)
		first.Store(0)
		q := openQueue(b, filepath.Join(b.TempDir(), "q.db"), queue.Options{
			Client: &idem.Client{HTTPClient: &http.Client{Transport: tr}}, Notify: notify,
		})
		ctx, cancel := context.WithCancel(context.Background())
		var ids []queue.ID
		for i := range queueOutageLanes * queueOutagePerLane {
			id, err := q.Enqueue(ctx, newIntent(b, srv.URL+"/payments", fmt.Sprint(i%queueOutageLanes)))
			if err != nil {
				b.Fatal(err)
			}
			ids = append(ids, id)
		}
		ran := make(chan error, 1)
		start := time.Now()
		go func() { ran <- q.Run(ctx) }()
		select {
		case <-offline:
		case <-time.After(window):
			b.Fatalf("not offline %v into the outage", window)
		}
		offAt, offDials := time.Now(), dials.Load()
		time.Sleep(window - time.Since(start)) // the outage itself
		probes := dials.Load() - offDials
		up := time.Now()
		down.Store(false)
		wctx, wcancel := context.WithTimeout(ctx, time.Minute)
		for _, id := range ids {
			if _, err := q.Wait(wctx, id); err != nil {
				b.Fatalf("record %d after the return: %v", id, err)
			}
		}
		wcancel()
		done := time.Now()
		back += float64(time.Unix(0, first.Load()).Sub(up)) / float64(time.Millisecond)
		perMin += float64(probes) / up.Sub(offAt).Minutes()
		drain += float64(done.Sub(up)) / float64(time.Millisecond)
		cancel()
		if err := <-ran; err != nil && !errors.Is(err, queue.ErrClosed) {
			b.Fatal(err)
		}
		if err := q.Close(); err != nil {
			b.Fatal(err)
		}
	}
	n := float64(b.N)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(back/n, "back-ms")
	b.ReportMetric(perMin/n, "probes/min")
	b.ReportMetric(drain/n, "drain-ms")
}
