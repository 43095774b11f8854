package queue

import "time"

// testSignal lets a test wait for a point the code reaches, instead of
// sleeping and hoping it got there. Its zero value drops every signal, so
// outside tests a signal costs a nil check; a test calls init before the
// code it watches starts. A full buffer drops the signal rather than block
// the code.
type testSignal[T any] struct {
	c chan T
}

func (s *testSignal[T]) init() { s.c = make(chan T, 64) }

func (s *testSignal[T]) signal(v T) {
	if s.c == nil {
		return
	}
	select {
	case s.c <- v:
	default:
	}
}

// signals are the points tests wait on.
type signals struct {
	idle    testSignal[idlePass] // Run found nothing to start and waits
	waiting testSignal[ID]       // Wait is blocked on the record's settle
}

// init makes every signal deliver.
func (s *signals) init() {
	s.idle.init()
	s.waiting.init()
}

// idlePass is a drainer pass that started nothing: at now, with free of the
// workers free.
type idlePass struct {
	now  time.Time
	free int
}
