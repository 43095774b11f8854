package queue

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/idem-go/idem"
)

// Option defaults.
const (
	DefaultWorkers        = 64
	DefaultRetention      = 24 * time.Hour
	DefaultMargin         = time.Hour
	DefaultMaxItems       = 1_000_000
	DefaultMaxBytes       = 1 << 30
	DefaultMaxResultBody  = 64 << 10
	DefaultKeepSettled    = 7 * 24 * time.Hour
	DefaultLockTimeout    = time.Second
	DefaultClockTolerance = 5 * time.Minute
	DefaultProbeInterval  = time.Second
)

// DefaultPolicy returns the backoff and attempt timeout a Queue gives the
// zero fields of Options.Policy: made for a schedule of minutes and hours,
// where a Client's is made for one of seconds. A record's limits are not in
// it: they are Options.MaxAttempts and Options.MaxRetryAfter.
func DefaultPolicy() idem.Policy {
	return idem.Policy{BaseDelay: time.Second, MaxDelay: 5 * time.Minute, AttemptTimeout: 30 * time.Second}
}

// Options configure a Queue. The zero Options are the defaults; each zero
// field takes its default. Negative values are invalid.
type Options struct {
	// Client sends the attempts: its HTTPClient, Authorize hook, key header
	// and format, DeletePolicy, Logger and OnAttempt apply, and its Stats
	// count the attempts. Its Policy and Budget do not: the queue keeps its
	// own schedule, by Policy. If nil, the Queue makes its own: a zero
	// idem.Client whose HTTPClient has http.DefaultTransport's settings
	// but keeps Workers idle connections a host (see Workers), closed by
	// Close; or, if the application replaced http.DefaultTransport with
	// another kind of RoundTripper, a zero idem.Client, which sends
	// through it.
	Client *idem.Client
	// Policy shapes the attempts of each record as a Client's Policy shapes
	// a call's, spread over minutes and hours: BaseDelay and MaxDelay the
	// backoff between attempts (a server's longer Retry-After is waited
	// instead), AttemptTimeout each attempt (it is counted by the horizon).
	// A zero field takes its value from DefaultPolicy: 1 s and 5 min
	// backoff, 30 s per attempt. Its limits, MaxAttempts, MaxRetryAfter,
	// MaxElapsed and InFlightWindow, are a call's, whose zero means
	// DefaultPolicy's 4 attempts, 60 s and 30 s: Open refuses them when
	// set. A record's limits are MaxAttempts and MaxRetryAfter below, the
	// horizon and MaxAge. Open refuses HedgeAfter too: a queue's attempts
	// are never hedged. Its Veto, if set, is asked before each retry the
	// decision table advises, on the drainer's goroutine (not before the
	// one more attempt a 401 gets with fresh credentials, a retry the
	// table does not advise): a vetoed record fails at once, its Outcome
	// the table's at that point (Unknown if an attempt left it in doubt,
	// NotApplied otherwise), its Reason naming the veto.
	Policy idem.Policy
	// MaxAttempts is how many attempts a record gets, the first included,
	// before it fails; 0 means no limit but the horizon and MaxAge.
	MaxAttempts int
	// MaxRetryAfter is the longest wait a server may ask for with
	// Retry-After; a longer demand fails the record. 0 means no limit but
	// the horizon, which expires a record that could not be sent in time.
	MaxRetryAfter time.Duration
	// Workers bounds how many records are sent at once. The drainer sends
	// the head of every due lane at once, up to Workers: a worker is a
	// goroutine started for a due lane, not one of a pool, so three due
	// lanes make three requests at once, and a lane sends one record at a
	// time whatever Workers is. 0 means DefaultWorkers (64). A Client the
	// caller gives should keep as many idle connections to the API
	// (http.Transport's MaxIdleConnsPerHost, 2 in http.DefaultTransport):
	// else most of them are closed after each attempt and dialled again.
	Workers int
	// Retention is how long the server keeps an idempotency key; 0 means
	// DefaultRetention (24 hours, Stripe's minimum). Ask the server's
	// documentation: a wrong value here is a duplicate there.
	Retention time.Duration
	// Margin is kept off Retention against clock skew and slow attempts; 0
	// means DefaultMargin. It must be less than Retention.
	Margin time.Duration
	// MaxAge limits how long after its CreatedAt an intent may be sent at
	// all, for operations that go stale (an order from yesterday); 0 means
	// no limit.
	MaxAge time.Duration
	// MaxItems and MaxBytes bound the unsettled records and their encoded
	// size; Enqueue past them returns ErrQueueFull. 0 means DefaultMaxItems
	// and DefaultMaxBytes.
	MaxItems int
	MaxBytes int64
	// MaxResultBody caps the response body stored with a settled record; 0
	// means DefaultMaxResultBody.
	MaxResultBody int
	// KeepSettled is how long settled records are kept before removal; 0
	// means DefaultKeepSettled.
	KeepSettled time.Duration
	// LockTimeout is how long Open waits for a file another process holds;
	// 0 means DefaultLockTimeout.
	LockTimeout time.Duration
	// ClockTolerance is how far the clock may read before the latest time
	// the queue has seen before sends are held; 0 means
	// DefaultClockTolerance.
	ClockTolerance time.Duration
	// ProbeInterval is how often the drainer probes while the device is
	// offline: one attempt, that of a due lane's head, each interval, for
	// the whole queue, so at most one dial per origin; the first record
	// goes out within about an interval of the API answering again. 0
	// means DefaultProbeInterval, 1 s: an hour offline costs 3,600 dials,
	// and the lease and release of each probe, two commits (see the
	// package doc).
	ProbeInterval time.Duration
	// ReadOnly opens the file only to read it, as an operator's tool does:
	// the file must exist; nothing in it changes (records left in flight by
	// a crash are shown in flight, damaged records are not quarantined,
	// nothing is swept or compacted); Get, List, Counts and OldestPending
	// work and every call that would write returns ErrReadOnly. Several
	// read-only Queues may share a file, but not with a Queue that writes:
	// each waits Options.LockTimeout for the other, then gives ErrLocked.
	// False opens the file to read and write, creating it if need be.
	ReadOnly bool
	// Notify, if not nil, is called for every Event, one call at a time, in
	// the order the events were made, from a goroutine of the Queue's own,
	// with no lock held; the events Wake and ResetClock cause may reach it
	// after they return. The drainer does not wait for it: while Notify is
	// slow, events wait in memory, none is dropped; Run and Close return once
	// it has returned for their events. A Wait blocked on a record returns
	// once Notify has returned for its EventSettled (one that finds it settled
	// returns at once), so a Wait inside Notify for a record not yet settled
	// waits until its context ends or Close. Notify may call any method, Close
	// included (see Close for what it waits for). Nil means no events are
	// delivered; Wait still works.
	Notify func(Event)
	// NotifyRemote, for a store that several processes share (package
	// pgqueue's), makes a running drainer also report the records the
	// other processes settled, as EventSettled with Event.Remote set, and
	// announce its own settles to them: set it on every replica. Every
	// settle is then reported by each replica: the one that settled it
	// (Remote false) and the others (Remote true). Count from events with
	// Remote false only, and a fleet counts each record once. Remote
	// events are best effort (see StoreInfo.Settles); the store itself is the
	// record. A store of one process has no remote events. False means a
	// drainer reports only the records its own Queue settled.
	NotifyRemote bool
	// SalvageDamaged, if not nil, makes Open recover a file whose structure
	// is damaged, or that lacks commits the queue acknowledged, instead of
	// refusing it with ErrDamaged: Open salvages it (see Salvage), calls
	// SalvageDamaged with the report, and opens the fresh file. The damaged file is kept beside it. Nil means Open
	// refuses the file and leaves it as it is. Not read with ReadOnly.
	SalvageDamaged func(SalvageReport)
	// Tracer, if not nil, links the drain of each record to the code that
	// enqueued it: Enqueue stores what its Inject returns in Record.Trace,
	// and every attempt runs under the context its StartDrain returns (see
	// Tracer). Nil means none, at no cost.
	Tracer Tracer

	// Seams for tests: nil means the real clock, math/rand/v2, os.OpenFile.
	now      func() time.Time
	rand     func() float64
	openFile func(string, int, os.FileMode) (*os.File, error)
	idle     time.Duration // longest drainer sleep; 0 means one second

	// transport is the one of the Client withDefaults made, nil if the
	// caller gave one: the Queue closes its idle connections.
	transport *http.Transport
}

func (o Options) withDefaults() (Options, error) {
	for _, f := range [...]struct {
		name string
		v    int64
	}{
		{"Workers", int64(o.Workers)}, {"Retention", int64(o.Retention)}, {"Margin", int64(o.Margin)},
		{"MaxAge", int64(o.MaxAge)}, {"MaxAttempts", int64(o.MaxAttempts)}, {"MaxRetryAfter", int64(o.MaxRetryAfter)},
		{"Policy.MaxAttempts", int64(o.Policy.MaxAttempts)},
		{"Policy.BaseDelay", int64(o.Policy.BaseDelay)}, {"Policy.MaxDelay", int64(o.Policy.MaxDelay)},
		{"Policy.MaxElapsed", int64(o.Policy.MaxElapsed)}, {"Policy.AttemptTimeout", int64(o.Policy.AttemptTimeout)},
		{"Policy.MaxRetryAfter", int64(o.Policy.MaxRetryAfter)}, {"Policy.InFlightWindow", int64(o.Policy.InFlightWindow)},
		{"MaxItems", int64(o.MaxItems)}, {"MaxBytes", o.MaxBytes}, {"MaxResultBody", int64(o.MaxResultBody)},
		{"KeepSettled", int64(o.KeepSettled)}, {"LockTimeout", int64(o.LockTimeout)}, {"ClockTolerance", int64(o.ClockTolerance)},
		{"ProbeInterval", int64(o.ProbeInterval)},
	} {
		if f.v < 0 {
			return o, fmt.Errorf("%w: %s is negative (%d)", ErrInvalidOptions, f.name, f.v)
		}
	}
	if err := o.refuseCallLimits(); err != nil {
		return o, err
	}
	set := func(d *time.Duration, def time.Duration) {
		if *d == 0 {
			*d = def
		}
	}
	set(&o.Retention, DefaultRetention)
	set(&o.Margin, DefaultMargin)
	def := DefaultPolicy()
	set(&o.Policy.BaseDelay, def.BaseDelay)
	set(&o.Policy.MaxDelay, def.MaxDelay)
	set(&o.Policy.AttemptTimeout, def.AttemptTimeout)
	set(&o.KeepSettled, DefaultKeepSettled)
	set(&o.LockTimeout, DefaultLockTimeout)
	set(&o.ClockTolerance, DefaultClockTolerance)
	set(&o.ProbeInterval, DefaultProbeInterval)
	set(&o.idle, time.Second)
	if o.Margin >= o.Retention {
		return o, fmt.Errorf("%w: Margin %v must be less than Retention %v", ErrInvalidOptions, o.Margin, o.Retention)
	}
	if o.Policy.AttemptTimeout >= o.Retention-o.Margin {
		return o, fmt.Errorf("%w: Policy.AttemptTimeout %v leaves no time within Retention %v less Margin %v", ErrInvalidOptions, o.Policy.AttemptTimeout, o.Retention, o.Margin)
	}
	if o.Workers == 0 {
		o.Workers = DefaultWorkers
	}
	if o.MaxItems == 0 {
		o.MaxItems = DefaultMaxItems
	}
	if o.MaxBytes == 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.MaxResultBody == 0 {
		o.MaxResultBody = DefaultMaxResultBody
	}
	if o.Client == nil {
		o.Client = &idem.Client{}
		if o.transport = workersTransport(o.Workers); o.transport != nil {
			o.Client.HTTPClient = &http.Client{Transport: o.transport}
		}
	}
	if o.now == nil {
		o.now = time.Now
	}
	if o.rand == nil {
		o.rand = rand.Float64
	}
	return o, nil
}

// workersTransport returns a transport with http.DefaultTransport's
// settings that keeps an idle connection a host for each of workers: with
// DefaultTransport's two, the drainer's workers sending to one API at once
// would close most connections after each attempt and dial them again.
// It returns nil when http.DefaultTransport is not an *http.Transport: an
// application that replaced it (to instrument it, say) keeps it.
func workersTransport(workers int) *http.Transport {
	d, ok := http.DefaultTransport.(*http.Transport)
	if !ok {
		return nil
	}
	tr := d.Clone()
	tr.MaxIdleConnsPerHost = workers
	tr.MaxIdleConns = max(tr.MaxIdleConns, workers)
	return tr
}

// refuseCallLimits names a limit of idem.Policy that is set in o.Policy: a
// Client's zero there means DefaultPolicy's limit, a queue's would mean
// none, so the queue takes its own (Options.MaxAttempts, MaxRetryAfter)
// rather than read the same field another way.
func (o Options) refuseCallLimits() error {
	p := o.Policy
	switch {
	case p.MaxAttempts != 0:
		return fmt.Errorf("%w: Policy.MaxAttempts is a call's limit, not read by a queue: set Options.MaxAttempts", ErrInvalidOptions)
	case p.MaxRetryAfter != 0:
		return fmt.Errorf("%w: Policy.MaxRetryAfter is a call's limit, not read by a queue: set Options.MaxRetryAfter", ErrInvalidOptions)
	case p.MaxElapsed != 0:
		return fmt.Errorf("%w: Policy.MaxElapsed is a call's limit, not read by a queue: the horizon and Options.MaxAge bound a record", ErrInvalidOptions)
	case p.InFlightWindow != 0:
		return fmt.Errorf("%w: Policy.InFlightWindow is a call's limit, not read by a queue: a record's keyed 409 is an attempt, counted by Options.MaxAttempts", ErrInvalidOptions)
	case p.HedgeAfter != 0:
		return fmt.Errorf("%w: Policy.HedgeAfter hedges a call's safe reads, not read by a queue, whose records are writes: leave it zero", ErrInvalidOptions)
	}
	return nil
}

// Queue is a durable queue of intents in one bbolt file. Enqueue persists an
// intent before its first attempt; Run drains the queue. A Queue is safe for
// concurrent use.
type Queue struct {
	// The Queue owns the drainer, the events and the waiters; its store
	// owns the records, their lanes and the schedule of due lanes. No
	// store method is called with mu held: a store may wait on its disk
	// or network, and mu guards only the fields below.
	st   Store
	info StoreInfo // st's, read once by New; Damaged is damaged's
	opts Options
	h    horizon

	// drainCtx is the context of the drainer's store calls: Run's,
	// without its cancellation, since what an attempt did is recorded
	// after Run is told to stop. Run sets it before its workers start.
	drainCtx context.Context

	// ev delivers the events to Options.Notify.
	ev *deliverer
	// shut is closed once Close has closed the file.
	shut chan struct{}
	// sig are the points tests wait on; silent unless a test inits them.
	sig signals

	mu       sync.Mutex // guards the fields below
	waiters  map[ID][]chan *Record
	offline  offlineState
	woken    time.Time // when Wake was last called
	held     bool      // sends are held for the clock: EventClockHeld was sent
	dateHold certHolds // hosts whose certificate the clock put out of its dates
	damaged  []*Record // found damaged by the store's opening, until Run reports them
	closing  bool      // Close has begun: Run stops
	running  bool
	stop     context.CancelFunc // ends a running drainer
	closed   bool
	kick     chan struct{} // wakes the drainer; buffered, never closed
	draining sync.WaitGroup
}

// Open opens the queue file at path, creating it (mode 0600) if it does not
// exist, and locks it for the Queue's life through a lock file beside it,
// path + ".lock", which stays there. A file another Queue holds, in this
// process or another, gives ErrLocked after Options.LockTimeout; a damaged
// file gives ErrDamaged and is left as it is. Records left in flight by a
// crash return to pending: their next attempt presents the same key, so a
// server that saw the first one answers from its store. A file mostly of
// free space is compacted.
func Open(path string, opts Options) (*Queue, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if o.ReadOnly {
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("queue: read-only: %w", err)
		}
	}
	lf, err := lock(path, o)
	if err != nil {
		return nil, err
	}
	q, err := openLocked(path, o, lf)
	if err != nil {
		lf.Close()
		return nil, err
	}
	return q, nil
}

// openLocked is Open once the lock file lf is locked.
func openLocked(path string, o Options, lf *os.File) (*Queue, error) {
	st, err := openBolt(path, o, lf)
	if errors.Is(err, ErrDamaged) && o.SalvageDamaged != nil && !o.ReadOnly {
		rep, serr := salvageLocked(path, o, lf)
		if serr != nil || rep.Sound() {
			return nil, err // nothing salvage can mend: as it was
		}
		o.SalvageDamaged(rep)
		st, err = openBolt(path, o, lf)
	}
	if err != nil {
		return nil, err
	}
	return newQueue(st, o), nil
}

// New returns a Queue over st, a store other than Open's bbolt file, such as
// package pgqueue's. The Queue owns st from then on and closes it in Close.
// The options that concern a file (LockTimeout, ReadOnly's file rules) are
// the store's to honour; the rest mean what they mean for Open.
func New(st Store, opts Options) (*Queue, error) {
	if st == nil {
		return nil, fmt.Errorf("%w: nil Store", ErrInvalidOptions)
	}
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	return newQueue(st, o), nil
}

// newQueue returns a Queue over st with o, whose defaults are set.
func newQueue(st Store, o Options) *Queue {
	info := st.Info()
	return &Queue{
		st: st, info: info, opts: o, damaged: info.Damaged, drainCtx: context.Background(),
		h: horizon{
			retention: o.Retention, margin: o.Margin, maxAge: o.MaxAge,
			attemptTimeout: o.Policy.AttemptTimeout, clockTolerance: o.ClockTolerance,
		},
		ev:      newDeliverer(o.Notify),
		waiters: map[ID][]chan *Record{},
		kick:    make(chan struct{}, 1),
		shut:    make(chan struct{}),
	}
}

// Close stops Run, waits for the attempts under way to be recorded, closes
// the file, then waits for every event to be delivered: when it returns,
// Options.Notify has returned for each event, save a Notify call that was
// already under way when Close was called, which may be Close's caller.
// Later calls wait for the file to be closed, then return ErrClosed.
//
// Run stops taking work at once, and no other call waits behind Close; but
// what Close waits for includes the store calls under way (the drainer's,
// a read a Wait gave up on): a store stalled on its disk or network holds
// Close until it answers (the bbolt store's calls end with the disk's;
// pgqueue's with its per-operation bound and retries).
//
// Notify may call Close: events are delivered from a goroutine of their
// own, which Close does not need to stop.
func (q *Queue) Close() error {
	under := q.ev.underWay() // Close's caller, if Notify, is among them
	q.mu.Lock()
	if q.closing {
		q.mu.Unlock()
		<-q.shut
		return ErrClosed
	}
	q.closing = true
	stop := q.stop
	q.mu.Unlock()
	if stop != nil {
		stop() // ends attempts under way; their results are still committed
	}
	q.poke()
	err := q.shutDown()
	q.ev.drain(under)
	return err
}

// shutDown waits for the drainers, wakes the waiters and closes the file.
func (q *Queue) shutDown() error {
	defer close(q.shut)
	q.draining.Wait()

	q.mu.Lock()
	q.closed = true
	for id, ws := range q.waiters {
		for _, w := range ws {
			close(w)
		}
		delete(q.waiters, id)
	}
	q.mu.Unlock()
	if tr := q.opts.transport; tr != nil {
		tr.CloseIdleConnections()
	}
	return q.st.Close()
}

// Path returns where the records are kept: the file's path, or what the
// store names its place.
func (q *Queue) Path() string { return q.info.Location }

// now reads the store's clock.
func (q *Queue) now() time.Time {
	now, _ := q.st.Clock()
	return now
}

func (q *Queue) isClosing() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.closing
}

func (q *Queue) isClosed() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.closed
}

// poke wakes the drainer without blocking.
func (q *Queue) poke() {
	select {
	case q.kick <- struct{}{}:
	default:
	}
}
