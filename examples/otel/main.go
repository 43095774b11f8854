// Command otel exports idem's metrics with OpenTelemetry, through the
// companion module github.com/idem-go/idem/otel (package idemotel).
//
// It starts a loopback server that answers every third request 503 (after
// placing the order, as a server whose answer is lost would), sends a few
// intents through an idem.Client and a queue, collects with the SDK's
// ManualReader and prints the metrics. An application calls
// idemotel.Instrument and idemotel.ObserveQueue as run does, with a periodic
// reader and an OTLP exporter in the ManualReader's place.
//
// A retry is an attempt with idem.action=retry: the two Do made, and the one
// the queue scheduled after its first 503. idemotel exports no second count
// of retries: Stats.Retries counts only the retries of Do and RoundTrip, so
// such a count disagreed with the attempts as soon as a queue shared the
// client.
//
// It lives in its own module so that idem itself does not depend on
// OpenTelemetry.
package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/idem-go/idem"
	idemotel "github.com/idem-go/idem/otel"
	"github.com/idem-go/idem/queue"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := run(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "otel:", err)
		os.Exit(1)
	}
}

// run sends the intents and prints the metrics to w.
func run(ctx context.Context, w io.Writer) error {
	srv := httptest.NewServer(&shop{placed: map[string]bool{}})
	defer srv.Close()

	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer provider.Shutdown(context.Background())
	withProvider := idemotel.WithMeterProvider(provider)

	client := &idem.Client{
		HTTPClient: srv.Client(),
		Policy:     idem.Policy{BaseDelay: 5 * time.Millisecond, MaxDelay: 20 * time.Millisecond},
	}
	reg, err := idemotel.Instrument(client, withProvider)
	if err != nil {
		return err
	}
	defer reg.Unregister()

	if err := sendOrders(ctx, client, srv.URL); err != nil {
		return err
	}
	// The queue's attempts go through the same client, so idem.attempts
	// counts them; its records settle in the queue (idem.queue.records), not
	// in the client's idem.operations and idem.replays, which count what Do
	// finished.
	dir, err := os.MkdirTemp("", "idem-otel-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	q, err := queue.Open(filepath.Join(dir, "intents.db"), queue.Options{
		Client: client, Policy: idem.Policy{BaseDelay: 10 * time.Millisecond, MaxDelay: 50 * time.Millisecond},
	})
	if err != nil {
		return err
	}
	defer q.Close()
	qreg, err := idemotel.ObserveQueue(q, withProvider)
	if err != nil {
		return err
	}
	defer qreg.Unregister() // deferred after q.Close, so it runs first
	if err := drainOrders(ctx, q, srv.URL); err != nil {
		return err
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		return err
	}
	printMetrics(w, rm)
	return nil
}

// sendOrders places five orders with Client.Do, then posts to a path the
// shop does not have: one rejection.
func sendOrders(ctx context.Context, c *idem.Client, base string) error {
	for i := range 5 {
		if err := send(ctx, c, base+"/orders", fmt.Sprintf(`{"order":%d}`, i)); err != nil {
			return err
		}
	}
	return send(ctx, c, base+"/refunds", `{"order":0}`)
}

func send(ctx context.Context, c *idem.Client, url, body string) error {
	in, err := idem.NewIntent(http.MethodPost, url, []byte(body))
	if err != nil {
		return err
	}
	res, err := c.Do(ctx, in)
	if err != nil {
		return err
	}
	return res.Response.Body.Close()
}

// drainOrders places two orders through q and waits until both are settled.
func drainOrders(ctx context.Context, q *queue.Queue, base string) error {
	ctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = q.Run(ctx) }) // returns nil once stopped
	defer func() { stop(); wg.Wait() }()

	var ids []queue.ID
	for i := range 2 {
		in, err := idem.NewIntent(http.MethodPost, base+"/orders", fmt.Appendf(nil, `{"queued":%d}`, i))
		if err != nil {
			return err
		}
		id, err := q.Enqueue(ctx, in)
		if err != nil {
			return err
		}
		ids = append(ids, id)
	}
	for _, id := range ids {
		r, err := q.Wait(ctx, id)
		if err != nil {
			return err
		}
		if r.State != queue.Done {
			return fmt.Errorf("record %d is %s: %s", id, r.State, r.Reason)
		}
	}
	return nil
}

// shop is an order server that implements idempotency keys and answers
// every third request 503 after placing the order: the retry, with the same
// key, gets the stored answer. A shop is safe for concurrent use.
type shop struct {
	mu       sync.Mutex      // guards the fields below
	requests int             // requests so far
	placed   map[string]bool // keys of the orders placed
}

func (s *shop) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get(idem.DefaultKeyHeader)
	s.mu.Lock()
	s.requests++
	n, replay := s.requests, s.placed[key]
	if r.URL.Path == "/orders" && key != "" {
		s.placed[key] = true
	}
	s.mu.Unlock()
	switch {
	case r.URL.Path != "/orders":
		http.NotFound(w, r)
	case key == "":
		http.Error(w, "Idempotency-Key required", http.StatusBadRequest)
	case replay:
		w.Header().Set("Idempotent-Replayed", "true")
		w.WriteHeader(http.StatusCreated)
	case n%3 == 0:
		http.Error(w, "order placed, answer lost", http.StatusServiceUnavailable)
	default:
		w.WriteHeader(http.StatusCreated)
	}
}

// printMetrics writes one line per data point, value first, sorted by
// attributes, so that runs can be compared; timings vary.
func printMetrics(w io.Writer, rm metricdata.ResourceMetrics) {
	for _, sm := range rm.ScopeMetrics {
		slices.SortFunc(sm.Metrics, func(a, b metricdata.Metrics) int { return strings.Compare(a.Name, b.Name) })
		for _, m := range sm.Metrics {
			fmt.Fprintf(w, "%s (%s)\n", m.Name, m.Unit)
			var lines [][2]string // attributes, value
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					lines = append(lines, [2]string{attrs(p.Attributes), fmt.Sprint(p.Value)})
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					lines = append(lines, [2]string{attrs(p.Attributes), fmt.Sprint(p.Value)})
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					lines = append(lines, [2]string{attrs(p.Attributes), fmt.Sprintf("%.3f", p.Value)})
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					lines = append(lines, [2]string{attrs(p.Attributes), fmt.Sprintf("count=%d sum=%.4f", p.Count, p.Sum)})
				}
			default:
				lines = append(lines, [2]string{fmt.Sprintf("(%T not printed)", d), ""})
			}
			slices.SortFunc(lines, func(a, b [2]string) int { return strings.Compare(a[0], b[0]) })
			for _, l := range lines {
				fmt.Fprintf(w, "  %-22s %s\n", l[1], l[0])
			}
		}
	}
}

// attrs formats an attribute set as "k=v k=v", or "-" when it is empty.
func attrs(s attribute.Set) string {
	if s.Len() == 0 {
		return "-"
	}
	var parts []string
	for _, kv := range s.ToSlice() {
		parts = append(parts, string(kv.Key)+"="+kv.Value.Emit())
	}
	return strings.Join(parts, " ")
}
