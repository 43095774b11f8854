package interop

import (
	"context"
	"sync"
	"time"
)

// clockStore is a fiber.Storage in memory whose entries expire by a clock
// the test moves, where fiber's own memory storage reads a clock that ticks
// in whole seconds of real time. It records the lifetime each entry was
// given.
type clockStore struct {
	mu   sync.Mutex // guards the fields below
	now  time.Time
	vals map[string]storedVal
	exps []time.Duration // the lifetime of each Set, in order
}

type storedVal struct {
	val   []byte
	until time.Time // zero: never expires
}

func newClockStore() *clockStore {
	return &clockStore{now: time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC), vals: map[string]storedVal{}}
}

// Advance moves the store's clock on by d.
func (s *clockStore) Advance(d time.Duration) {
	s.mu.Lock()
	s.now = s.now.Add(d)
	s.mu.Unlock()
}

// Lifetimes returns the lifetime each Set gave its entry.
func (s *clockStore) Lifetimes() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.exps...)
}

func (s *clockStore) Get(key string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.vals[key]
	if !ok || (!v.until.IsZero() && !s.now.Before(v.until)) {
		return nil, nil // fiber's storages answer a missing key with nil, nil
	}
	return v.val, nil
}

func (s *clockStore) Set(key string, val []byte, exp time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := storedVal{val: append([]byte(nil), val...)}
	if exp > 0 {
		v.until = s.now.Add(exp)
	}
	s.vals[key] = v
	s.exps = append(s.exps, exp)
	return nil
}

func (s *clockStore) Delete(key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.vals, key)
	return nil
}

func (s *clockStore) Reset() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.vals = map[string]storedVal{}
	return nil
}

func (s *clockStore) Close() error { return nil }

func (s *clockStore) GetWithContext(_ context.Context, key string) ([]byte, error) {
	return s.Get(key)
}

func (s *clockStore) SetWithContext(_ context.Context, key string, val []byte, exp time.Duration) error {
	return s.Set(key, val, exp)
}

func (s *clockStore) DeleteWithContext(_ context.Context, key string) error { return s.Delete(key) }

func (s *clockStore) ResetWithContext(context.Context) error { return s.Reset() }
