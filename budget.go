package idem

import (
	"container/list"
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

// MaxBudgetOrigins is how many origins a Budget keeps a bucket of their
// own for at most; the origins that spend tokens while that many others
// hold buckets share one more (see Budget). It bounds the refusal counts of
// Stats too, which forget the origin that refused least recently.
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
// A bucket that is full again is forgotten: its origin starts full, as it
// is. A bucket that is not full is never forgotten, for an origin forgotten
// while its retries are refused would come back full. Past MaxBudgetOrigins
// origins holding buckets, the others share one bucket of capacity tokens:
// their retries take from it and their answers put tokens back in it. So
// when every origin is dead, retries stop after capacity times
// MaxBudgetOrigins+1 in all, however many origins there are, and an origin
// past the bound may be refused for another's outage, as under one budget
// for all. What is left shows in the Stats of a Client or Transport that uses the
// Budget (Stats.BudgetTokens: the fewest tokens left to any origin;
// Stats.BudgetRefusalsByOrigin). A Budget is safe for concurrent use, and
// may be shared by several Clients and Transports.
type Budget struct {
	capacity int // 0: unlimited, and buckets unused

	mu sync.Mutex // guards buckets and shared
	// buckets holds the tokens left to each origin whose bucket is not
	// full, MaxBudgetOrigins of them at most.
	buckets map[origin]int
	// shared counts the tokens taken from the bucket of the origins past
	// MaxBudgetOrigins and not put back: it holds capacity - shared.
	shared int
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
	n := b.capacity - b.shared
	for _, tokens := range b.buckets {
		n = min(n, tokens)
	}
	return n
}

// take spends a token of o's bucket for a retry, or reports false when
// none is left. An origin without a bucket gets a full one while fewer than
// MaxBudgetOrigins origins hold one, and takes from the shared bucket
// otherwise.
func (b *Budget) take(o origin) bool {
	if b.capacity == 0 {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	tokens, ok := b.buckets[o]
	switch {
	case ok && tokens == 0:
		return false
	case ok:
		b.buckets[o] = tokens - 1
	case len(b.buckets) < MaxBudgetOrigins:
		if b.buckets == nil {
			b.buckets = make(map[origin]int)
		}
		b.buckets[o] = b.capacity - 1
	case b.shared == b.capacity:
		return false
	default:
		b.shared++
	}
	return true
}

// answered puts a token back in o's bucket after an answer that ended an
// operation, or in the shared bucket when o has none. Full buckets, most
// often none at all, cost a map lookup.
func (b *Budget) answered(o origin) {
	if b.capacity == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	tokens, ok := b.buckets[o]
	switch {
	case !ok:
		b.shared = max(b.shared-1, 0)
	case tokens+1 >= b.capacity:
		delete(b.buckets, o)
	default:
		b.buckets[o] = tokens + 1
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
// adding one more forgets the least recently used. It keeps what may be
// forgotten (the refusal counts of Stats), never a Budget's buckets. Its
// zero value is ready; it is not safe for concurrent use.
type originLRU[V any] struct {
	m     map[origin]*list.Element // of *lruEntry[V]
	order list.List                // of *lruEntry[V], least recently used first
}

type lruEntry[V any] struct {
	o origin
	v V
}

// get returns o's value, marked used, or nil when o has none.
func (l *originLRU[V]) get(o origin) *V {
	e := l.m[o]
	if e == nil {
		return nil
	}
	l.order.MoveToBack(e)
	return &e.Value.(*lruEntry[V]).v
}

// add sets o's value to v and returns it, forgetting the least recently
// used origin first when the map is full. o must have no value.
func (l *originLRU[V]) add(o origin, v V) *V {
	if l.m == nil {
		l.m = make(map[origin]*list.Element)
	}
	if len(l.m) >= MaxBudgetOrigins {
		oldest := l.order.Front()
		delete(l.m, oldest.Value.(*lruEntry[V]).o)
		l.order.Remove(oldest)
	}
	e := &lruEntry[V]{o: o, v: v}
	l.m[o] = l.order.PushBack(e)
	return &e.v
}

// each calls f with each origin and its value, in no order.
func (l *originLRU[V]) each(f func(origin, V)) {
	for o, e := range l.m {
		f(o, e.Value.(*lruEntry[V]).v)
	}
}
