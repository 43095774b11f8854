package bench

import (
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idem-go/idem"
)

// faultServer applies every POST (counting its effect per operation), then
// drops the response of a share of them: it hijacks the connection and
// closes it, so the client sees the connection end after its request went
// out. It honours idempotency keys as the IETF draft says: a key it has
// seen is answered from its store, with no new effect; a request without a
// key is a new effect every time.
type faultServer struct {
	drop float64

	mu       sync.Mutex // guards the fields below
	rnd      *rand.Rand
	effects  map[string]int  // operation -> effects applied
	keys     map[string]bool // keys applied
	requests int             // requests received, dropped ones included
	dropped  int
}

func newFaultServer(drop float64) *faultServer {
	return &faultServer{
		drop:    drop,
		rnd:     rand.New(rand.NewPCG(1, 2)), // the same faults for every client
		effects: map[string]int{},
		keys:    map[string]bool{},
	}
}

func (s *faultServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	op, key := r.Header.Get(opHeader), r.Header.Get(idem.DefaultKeyHeader)
	s.mu.Lock()
	s.requests++
	replay := key != "" && s.keys[key]
	if !replay {
		s.effects[op]++ // committed before the response is written, or lost
		if key != "" {
			s.keys[key] = true
		}
	}
	drop := s.rnd.Float64() < s.drop
	if drop {
		s.dropped++
	}
	s.mu.Unlock()
	if drop {
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			_ = conn.Close()
			return
		}
		panic("bench: fault server cannot hijack")
	}
	w.Header().Set("Content-Type", "application/json")
	if replay {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, createdBody)
}

// totals returns the effects applied more than once per operation, the
// operations never applied (of n, numbered 1 to n) and the requests received.
func (s *faultServer) totals(n int) (dups, lost, requests int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := 1; i <= n; i++ {
		switch e := s.effects[strconv.Itoa(i)]; {
		case e == 0:
			lost++
		case e > 1:
			dups += e - 1
		}
	}
	return dups, lost, s.requests
}

// faultWorkers is how many goroutines send operations in BenchmarkFault.
const faultWorkers = 8

// BenchmarkFault sends b.N POSTs, each a distinct operation, to a server
// that applies every request and then drops 20% of the responses. It
// reports duplicated effects per 10,000 operations, requests the server saw
// per operation, and errors the caller saw per 10,000 operations. Use
// -benchtime=10000x to count over exactly 10,000 operations.
func BenchmarkFault(b *testing.B) {
	for _, m := range peers() {
		b.Run("client="+m.name, func(b *testing.B) {
			fs := newFaultServer(0.2)
			srv := httptest.NewServer(fs)
			defer srv.Close()
			url := srv.URL + "/payments"
			p := newPeer(b, m, nil)
			var next, errs atomic.Int64
			ctx := context.Background()
			b.ResetTimer()
			var wg sync.WaitGroup
			for range faultWorkers {
				wg.Go(func() {
					for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
						if _, err := p.do(ctx, http.MethodPost, url, payload, strconv.FormatInt(i, 10)); err != nil {
							errs.Add(1)
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			dups, lost, requests := fs.totals(b.N)
			if lost > 0 {
				b.Errorf("%d operations never reached the server", lost)
			}
			n := float64(b.N)
			b.ReportMetric(float64(dups)*1e4/n, "dups/10k")
			b.ReportMetric(float64(requests)/n, "attempts/op")
			b.ReportMetric(float64(errs.Load())*1e4/n, "errors/10k")
			if p.stats != nil {
				// Requests idem counted itself: fewer than the server saw when
				// net/http resent a keyed request on its own.
				b.ReportMetric(float64(p.stats().Requests)/n, "client-attempts/op")
			}
		})
	}
}
