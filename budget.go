package idem

import (
	"net"
	"net/url"
	"strings"
	"sync"
)

// DefaultBudgetTokens is the capacity of the budget a Client or Transport
// makes for itself: in a total outage of an origin it allows 30 retries to
// it in all, however many operations fail (200 concurrent intents cost 1.15
// attempts each), while a server that answers most requests never runs it
// dry.
const DefaultBudgetTokens = 30

// MaxBudgetOrigins is how many origins a Budget, and the refusal counts of
// Stats, keep at most. One more forgets the origin least recently used,
// which starts full again if it comes back: a budget forgets only what it
// would allow anyway, capacity retries to an origin seen again.
const MaxBudgetOrigins = 1024

// Budget is a retry budget shared by every operation of a Client or a
// Transport, kept per origin (scheme, host and port, the port defaulted from
// the scheme), in the manner of gRPC's retry throttling, per channel, and
// Finagle's RetryBudget: retries to an origin may not outnumber its answers
// by more than a reserve. Each origin has a bucket of capacity tokens,
// made full on its first retry; each retry takes a token from its origin's
// bucket and is refused when none is left; each answer that ends an
// operation (a success, a rejection: anything but an outage's refusals,
// timeouts and 5xx) puts one back in its origin's.
//
// So in a total outage of an origin retries to it stop after capacity of
// them, however many operations fail, instead of multiplying the load on a
// sick server, and a dead origin spends only its own tokens: other origins
// of the same Client keep theirs. While a server answers, every operation
// may retry about once, so random faults of up to about half the attempts
// never exhaust its bucket. A Client's Resume of an operation in doubt
// spends no token (see Client.Resume).
//
// A bucket that is full again is forgotten, and so is the least recently
// used one beyond MaxBudgetOrigins origins: a forgotten origin starts full.
// What is left shows in the Stats of a Client or Transport that uses the
// Budget (Stats.BudgetTokens: the fewest tokens left to any origin;
// Stats.BudgetRefusalsByOrigin). A Budget is safe for concurrent use, and
// may be shared by several Clients and Transports.
type Budget struct {
	capacity int // 0: unlimited, and buckets unused

	mu      sync.Mutex     // guards buckets
	buckets originLRU[int] // tokens left to each origin whose bucket is not full
}

// NewBudget returns a budget of capacity tokens per origin. A capacity of 0
// or less gives a budget that never refuses.
func NewBudget(capacity int) *Budget {
	return &Budget{capacity: max(capacity, 0)}
}

// left returns the fewest tokens left to any origin, or -1 for an unlimited
// budget.
func (b *Budget) left() int {
	if b.capacity == 0 {
		return -1
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	n := b.capacity
	for _, e := range b.buckets.m {
		n = min(n, e.v)
	}
	return n
}

// take spends a token of o's bucket for a retry, or reports false when
// none is left.
func (b *Budget) take(o origin) bool {
	if b.capacity == 0 {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	tokens := b.buckets.get(o)
	if tokens == nil {
		tokens = b.buckets.add(o, b.capacity)
	}
	if *tokens == 0 {
		return false
	}
	*tokens--
	return true
}

// answered puts a token back in o's bucket after an answer that ended an
// operation. A full bucket, most often none at all, costs a map lookup.
func (b *Budget) answered(o origin) {
	if b.capacity == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	tokens := b.buckets.get(o)
	if tokens == nil {
		return
	}
	if *tokens++; *tokens >= b.capacity {
		b.buckets.remove(o)
	}
}

// runBudget is one run's part of its owner's Budget: the bucket of the run's
// origin. A free run's retries spend nothing (Client.Resume's, in doubt from
// the start under a key).
type runBudget struct {
	b      *Budget
	origin origin
	free   bool
	m      *metrics // counts a refusal by origin
}

// take spends a token for a retry, or reports false when none is left.
func (rb runBudget) take() bool {
	if rb.free || rb.b.take(rb.origin) {
		return true
	}
	rb.m.refusedAt(rb.origin)
	return false
}

// answered puts a token back after an answer that ended an operation.
func (rb runBudget) answered() { rb.b.answered(rb.origin) }

// ownBudget is the Budget a Client or Transport makes for itself, once, when
// it is given none.
type ownBudget struct {
	once sync.Once
	b    *Budget
}

// or returns set, or, when set is nil, the own Budget.
func (o *ownBudget) or(set *Budget) *Budget {
	if set != nil {
		return set
	}
	o.once.Do(func() { o.b = NewBudget(DefaultBudgetTokens) })
	return o.b
}

// origin is a URL's origin, the key of its budget: scheme and host in lower
// case, and the port, defaulted from the scheme for http and https. Its
// strings are parts of the URL's, so making one allocates nothing unless
// the URL has upper case in its scheme or host.
type origin struct{ scheme, host, port string }

// originOf returns u's origin; the zero origin for a nil u.
func originOf(u *url.URL) origin {
	if u == nil {
		return origin{}
	}
	o := origin{scheme: strings.ToLower(u.Scheme), host: strings.ToLower(u.Hostname()), port: u.Port()}
	if o.port == "" {
		switch o.scheme {
		case "http":
			o.port = "80"
		case "https":
			o.port = "443"
		}
	}
	return o
}

// String returns the origin as scheme://host:port, as Stats shows it.
func (o origin) String() string {
	host := o.host
	if o.port != "" {
		host = net.JoinHostPort(o.host, o.port)
	} else if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	return o.scheme + "://" + host
}

// originLRU maps origins to values, MaxBudgetOrigins of them at most:
// adding one more forgets the least recently used, found by a scan, which
// only a new origin beyond the bound costs. Its zero value is ready; it is
// not safe for concurrent use.
type originLRU[V any] struct {
	m    map[origin]*lruEntry[V]
	tick uint64 // counts uses; an entry's used is the tick of its last
}

type lruEntry[V any] struct {
	v    V
	used uint64
}

// get returns o's value, marked used, or nil when o has none.
func (l *originLRU[V]) get(o origin) *V {
	e := l.m[o]
	if e == nil {
		return nil
	}
	l.tick++
	e.used = l.tick
	return &e.v
}

// add sets o's value to v and returns it, forgetting the least recently
// used origin first when the map is full.
func (l *originLRU[V]) add(o origin, v V) *V {
	if l.m == nil {
		l.m = make(map[origin]*lruEntry[V])
	}
	if _, ok := l.m[o]; !ok && len(l.m) >= MaxBudgetOrigins {
		var (
			oldest origin
			least  = l.tick + 1
		)
		for k, e := range l.m {
			if e.used < least {
				oldest, least = k, e.used
			}
		}
		delete(l.m, oldest)
	}
	l.tick++
	e := &lruEntry[V]{v: v, used: l.tick}
	l.m[o] = e
	return &e.v
}

// remove forgets o.
func (l *originLRU[V]) remove(o origin) { delete(l.m, o) }
