package interop

import "sync"

// Ledger counts, per payment id, how many requests arrived at a handler and
// how many times the business effect took place. It is the ground truth the
// tests compare idem's outcomes with: a client may say anything, the ledger
// says what happened. A Ledger is safe for concurrent use; its zero value is
// ready.
type Ledger struct {
	mu       sync.Mutex // guards arrivals and effects
	arrivals map[string]int
	effects  map[string]int
}

// Arrive records that a request for id reached the handler and returns how
// many had arrived before it (0 for the first).
func (l *Ledger) Arrive(id string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.arrivals == nil {
		l.arrivals = make(map[string]int)
	}
	n := l.arrivals[id]
	l.arrivals[id] = n + 1
	return n
}

// Apply performs the effect for id, once more, and returns how many times it
// has now taken place.
func (l *Ledger) Apply(id string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.effects == nil {
		l.effects = make(map[string]int)
	}
	l.effects[id]++
	return l.effects[id]
}

// Effects returns how many times the effect for id took place.
func (l *Ledger) Effects(id string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.effects[id]
}

// Arrivals returns how many requests for id reached the handler.
func (l *Ledger) Arrivals(id string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.arrivals[id]
}

// Total returns the number of effects over all ids.
func (l *Ledger) Total() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, c := range l.effects {
		n += c
	}
	return n
}
