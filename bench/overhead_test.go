package bench

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The small JSON bodies of every success answer: createdBody with a 201 to a
// POST, okBody with a 200 to anything else.
const (
	createdBody = `{"id":"pay_1","status":"created"}`
	okBody      = `{"id":"pay_1","status":"succeeded"}`
)

// okHandler answers every request at once: createdBody to a POST, okBody to
// anything else.
func okHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		if r.Method == http.MethodPost {
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, createdBody)
			return
		}
		_, _ = io.WriteString(w, okBody)
	})
}

// eachSuccessCase runs fn as one sub-benchmark per operation and client of
// the success path: POST and GET for every peer, and the keyed peers for
// POST.
func eachSuccessCase(b *testing.B, fn func(b *testing.B, m peerMaker, method string, body []byte)) {
	ops := []struct {
		method string
		body   []byte
	}{{http.MethodPost, payload}, {http.MethodGet, nil}}
	for _, op := range ops {
		ms := peers()
		if op.method == http.MethodPost {
			ms = append(ms, keyedPeers()...)
		}
		for _, m := range ms {
			b.Run("op="+op.method+"/client="+m.name, func(b *testing.B) { fn(b, m, op.method, op.body) })
		}
	}
}

// BenchmarkOverhead is the success path of each client on one loopback
// server, one operation at a time. The difference to raw is what the client
// adds per operation; compare with benchstat -col /client. Besides ns/op it
// reports cpu-ns/op, the process's CPU time per operation.
func BenchmarkOverhead(b *testing.B) {
	srv := httptest.NewServer(okHandler())
	defer srv.Close()
	url := srv.URL + "/payments"
	eachSuccessCase(b, func(b *testing.B, m peerMaker, method string, body []byte) {
		p := newPeer(b, m, nil)
		ctx := context.Background()
		if _, err := p.do(ctx, method, url, body, ""); err != nil { // open the connection
			b.Fatal(err)
		}
		b.ReportAllocs()
		cpu0, cpuOK := cpuTime()
		for b.Loop() {
			status, err := p.do(ctx, method, url, body, "")
			if err != nil {
				b.Fatal(err)
			}
			if status >= 300 {
				b.Fatalf("status %d", status)
			}
		}
		// CPU time, the server's included (the same for every client), is
		// steadier than wall time on a shared machine.
		if cpu1, ok := cpuTime(); ok && cpuOK {
			b.ReportMetric(float64(cpu1-cpu0)/float64(b.N), "cpu-ns/op")
		}
	})
}

// memoryTransport answers every request at once without a network, as
// okHandler would: it isolates what each client costs per operation from
// the loopback round trip, whose noise on a shared machine hides a few
// microseconds.
type memoryTransport struct{}

func (memoryTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		_ = req.Body.Close()
	}
	status, body := http.StatusOK, okBody
	if req.Method == http.MethodPost {
		status, body = http.StatusCreated, createdBody
	}
	return &http.Response{
		Status: http.StatusText(status), StatusCode: status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": {"application/json"}},
		Body:          io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       req,
	}, nil
}

// BenchmarkClientCost is BenchmarkOverhead over memoryTransport: the time
// and allocations each client adds to an operation, without the network.
func BenchmarkClientCost(b *testing.B) {
	const url = "http://api.example/payments"
	eachSuccessCase(b, func(b *testing.B, m peerMaker, method string, body []byte) {
		p := m.make(memoryTransport{}, equalRetries)
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			status, err := p.do(ctx, method, url, body, "")
			if err != nil {
				b.Fatal(err)
			}
			if status >= 300 {
				b.Fatalf("status %d", status)
			}
		}
	})
}
