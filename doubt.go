package idem

import (
	"container/list"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultDoubtWindow is how long a Client or Transport remembers a key
// that a call left in doubt when its DoubtWindow is zero: 24 hours, the least
// time Stripe keeps a key, within which a resend under it can still meet the
// first request's record.
const DefaultDoubtWindow = 24 * time.Hour

// DefaultDoubtKeys is how many keys in doubt a Client or Transport remembers
// when its DoubtKeys is zero or negative; each costs about 200 bytes.
const DefaultDoubtKeys = 10000

// doubtNote ends the reason of a call that ended short of success under a
// key an earlier call left in doubt: its own attempts may show none.
const doubtNote = "; an earlier request under this key was left in doubt"

// doubts remembers the keys that the calls of a Client (Do, Resume, Try) or
// of a Transport (RoundTrip) left in doubt, so that a later call under the
// same key starts in doubt: an SDK that retries on top of the Transport
// resends the same request, a job runner that restarted tries its job again
// without the prior it lost, and a 4xx to the resend proves only that the
// resend was not applied, not the first.
//
// It is bounded in time (a key is forgotten a window after the last call
// that left it in doubt) and in entries (the oldest is forgotten first). A
// key forgotten too early errs as a call without the memory would: a later
// 4xx under it reads NotApplied. The zero value is empty and ready to use.
type doubts struct {
	// n is the number of keys held, read without the lock: a Client or
	// Transport with nothing in doubt, the usual case, pays one atomic load
	// per call.
	n     atomic.Int64
	mu    sync.Mutex               // guards keys and order
	keys  map[string]*list.Element // of *doubt, by key
	order list.List                // of *doubt, least recently left in doubt first
}

// doubt is one key in doubt and when a call last left it so.
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

// add records that a call under key ended in doubt at now, forgetting
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

// drop forgets key: a call under it succeeded, which settles the doubt.
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

// doubtLimits are the bounds of a memory of doubts, as a Client's or
// Transport's DoubtWindow and DoubtKeys set them.
type doubtLimits struct {
	window time.Duration // 0: DefaultDoubtWindow; negative: remember nothing
	keys   int           // zero or negative: DefaultDoubtKeys
}

// doubtCall is one call's use of a memory of doubts: a Do, Resume or Try
// of a Client, a RoundTrip of a Transport. It is the one place where a call
// asks the memory and tells it what the call concluded.
type doubtCall struct {
	m          *doubts
	key        string // "" when the call has no key or the memory is off
	window     time.Duration
	keys       int
	clock      clock
	remembered bool // an earlier call left key in doubt
}

// begin starts r's call under key: r starts in doubt when an earlier call
// left key in doubt within the window.
func (m *doubts) begin(r *run, key string, lim doubtLimits) doubtCall {
	dc := doubtCall{m: m, key: key, window: lim.window, keys: lim.keys, clock: r.clock}
	switch {
	case lim.window < 0:
		dc.key = "" // the memory is off
	case lim.window == 0:
		dc.window = DefaultDoubtWindow
	}
	if dc.keys <= 0 {
		dc.keys = DefaultDoubtKeys
	}
	dc.remembered = m.has(dc.key, dc.clock, dc.window)
	r.inDoubt = r.inDoubt || dc.remembered
	return dc
}

// end records what the call concluded, out being its outcome: Unknown
// leaves the key in doubt for a window from now, a success settles it, and
// NotApplied, which only a call that did not start in doubt concludes,
// changes nothing.
func (dc doubtCall) end(out Outcome) {
	if dc.key == "" {
		return
	}
	switch out {
	case Unknown:
		dc.m.add(dc.key, dc.clock.Now(), dc.window, dc.keys)
	case Applied, AlreadyApplied:
		dc.m.drop(dc.key)
	}
}

// note returns reason, the call's reason to stop short of success, saying
// that an earlier call left the key in doubt when the memory put the call in
// doubt: its own attempts may show no doubt.
func (dc doubtCall) note(reason string) string {
	if dc.remembered && reason != "" {
		return reason + doubtNote
	}
	return reason
}
