package main

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// shop is the server: while failing it answers 503 before acting, as an
// overloaded service does; otherwise it applies each keyed payment once and
// replays its answer to a request under the same key. It is safe for
// concurrent use.
type shop struct {
	failing atomic.Bool

	mu       sync.Mutex     // guards requests and applied
	requests map[string]int // requests that arrived, by key ("" for none)
	applied  map[string]int // payments applied, by key
}

func newShop() *shop {
	return &shop{requests: map[string]int{}, applied: map[string]int{}}
}

func (s *shop) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	key := r.Header.Get("Idempotency-Key")
	s.mu.Lock()
	s.requests[key]++
	s.mu.Unlock()
	if s.failing.Load() {
		http.Error(w, "overloaded", http.StatusServiceUnavailable)
		return
	}
	s.mu.Lock()
	replay := s.applied[key] > 0
	if !replay {
		s.applied[key]++
	}
	s.mu.Unlock()
	if replay {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	w.WriteHeader(http.StatusCreated)
}

// arrived returns how many requests arrived under key, all keys if key is
// "*".
func (s *shop) arrived(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if key != "*" {
		return s.requests[key]
	}
	n := 0
	for _, c := range s.requests {
		n += c
	}
	return n
}

// appliedFor returns how many times the payment under key was applied.
func (s *shop) appliedFor(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.applied[key]
}

// effects says how many payments were applied and whether each was applied
// once.
func (s *shop) effects() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	counts := make([]int, 0, len(s.applied))
	for _, n := range s.applied {
		counts = append(counts, n)
	}
	once := !slices.ContainsFunc(counts, func(n int) bool { return n != 1 })
	var b strings.Builder
	fmt.Fprintf(&b, "%d payments applied", len(counts))
	if once {
		b.WriteString(", each once")
	}
	return b.String()
}
