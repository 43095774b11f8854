package idem

import (
	"container/list"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultDoubtWindow is how long a Transport remembers a key that a
// RoundTrip left in doubt when Transport.DoubtWindow is zero: 24 hours, the
// least time Stripe keeps a key, within which a resend under it can still
// meet the first request's record.
const DefaultDoubtWindow = 24 * time.Hour

// DefaultDoubtKeys is how many keys in doubt a Transport remembers when
// Transport.DoubtKeys is zero or negative; each costs about 200 bytes.
const DefaultDoubtKeys = 10000

// doubtNote ends the reason of a RoundTrip that ended short of success
// under a key an earlier one left in doubt: its own attempts may show none.
const doubtNote = "; an earlier request under this key was left in doubt"

// doubts remembers the keys that a Transport's RoundTrips left in doubt, so
// that a later RoundTrip under the same key starts in doubt: an SDK that
// retries on top of the Transport resends the same request, and a 4xx to
// the resend proves only that the resend was not applied, not the first.
//
// It is bounded in time (a key is forgotten a window after the last
// RoundTrip that left it in doubt) and in entries (the oldest is forgotten
// first). A key forgotten too early errs as a Transport without the memory
// would: a later 4xx under it reads NotApplied. The zero value is empty and
// ready to use.
type doubts struct {
	// n is the number of keys held, read without the lock: a Transport with
	// nothing in doubt, the usual case, pays one atomic load per RoundTrip.
	n     atomic.Int64
	mu    sync.Mutex               // guards keys and order
	keys  map[string]*list.Element // of *doubt, by key
	order list.List                // of *doubt, least recently left in doubt first
}

// doubt is one key in doubt and when a RoundTrip last left it so.
type doubt struct {
	key string
	at  time.Time
}

// has reports whether key was left in doubt less than window ago.
// An empty key is never in doubt.
func (m *doubts) has(key string, c clock, window time.Duration) bool {
	if key == "" || m.n.Load() == 0 {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.keys[key]
	if !ok {
		return false
	}
	if c.Since(e.Value.(*doubt).at) >= window {
		m.remove(e)
		return false
	}
	return true
}

// add records that a RoundTrip under key ended in doubt at now, forgetting
// the keys whose window has passed and then the oldest beyond max.
func (m *doubts) add(key string, now time.Time, window time.Duration, max int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for e := m.order.Front(); e != nil && now.Sub(e.Value.(*doubt).at) >= window; e = m.order.Front() {
		m.remove(e)
	}
	if e, ok := m.keys[key]; ok {
		e.Value.(*doubt).at = now
		m.order.MoveToBack(e)
		return
	}
	if m.keys == nil {
		m.keys = make(map[string]*list.Element)
	}
	m.keys[key] = m.order.PushBack(&doubt{key: key, at: now})
	for m.order.Len() > max {
		m.remove(m.order.Front())
	}
	m.n.Store(int64(m.order.Len()))
}

// drop forgets key: a RoundTrip under it succeeded, which settles the doubt.
func (m *doubts) drop(key string) {
	if key == "" || m.n.Load() == 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.keys[key]; ok {
		m.remove(e)
	}
}

// remove forgets the key of e. m.mu must be held.
func (m *doubts) remove(e *list.Element) {
	delete(m.keys, e.Value.(*doubt).key)
	m.order.Remove(e)
	m.n.Store(int64(m.order.Len()))
}

// inDoubt reports whether an earlier RoundTrip left key in doubt within
// the Transport's window.
func (t *Transport) inDoubt(key string, c clock) bool {
	return t.doubts.has(key, c, t.doubtWindow())
}

// settle records what a RoundTrip under key concluded, out being its
// outcome: Unknown leaves key in doubt for a window from now, a success
// settles it, and NotApplied, which only a RoundTrip that did not start in
// doubt concludes, changes nothing. The GET that a redirect made of a write
// (changed) settles nothing: its answer says nothing of the write.
func (t *Transport) settle(key string, out Outcome, changed bool, c clock) {
	if key == "" || changed {
		return
	}
	switch out {
	case Unknown:
		max := t.DoubtKeys
		if max <= 0 {
			max = DefaultDoubtKeys
		}
		t.doubts.add(key, c.Now(), t.doubtWindow(), max)
	case Applied, AlreadyApplied:
		t.doubts.drop(key)
	}
}

func (t *Transport) doubtWindow() time.Duration {
	if t.DoubtWindow == 0 {
		return DefaultDoubtWindow
	}
	return t.DoubtWindow
}
