package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/idemtest"
	"github.com/idem-go/idem/queue"
)

// The queue's backoff between attempts of one record, shortened like the
// retention.
const (
	retryBase = 50 * time.Millisecond
	retryMax  = 500 * time.Millisecond
)

// device is the device's queue with its drainer running.
type device struct {
	q    *queue.Queue
	done chan error // Run's result
}

// boot opens the queue file at path and starts draining it, as the device's
// program does each time it starts.
func boot(ctx context.Context, path string, srv *idemtest.Server, cfg config, n *narrator) (*device, error) {
	// Without keep-alives every attempt dials, so an outage (srv.SetDown)
	// reaches every attempt, as it would a device whose uplink is gone.
	tr := &http.Transport{DialContext: srv.DialContext, DisableKeepAlives: true}
	q, err := queue.Open(path, queue.Options{
		Client:    &idem.Client{HTTPClient: &http.Client{Transport: tr}},
		Retention: cfg.retention,
		Margin:    cfg.margin,
		Policy:    idem.Policy{AttemptTimeout: attemptTimeout, BaseDelay: retryBase, MaxDelay: retryMax},
		Notify:    n.event,
	})
	if err != nil {
		return nil, fmt.Errorf("edge: opening the queue: %w", err)
	}
	d := &device{q: q, done: make(chan error, 1)}
	go func() { d.done <- q.Run(ctx) }()
	return d, nil
}

// shutdown closes the queue once the attempts under way are recorded, as the
// device's program does when it stops.
func (d *device) shutdown() error {
	err := d.q.Close()
	// Run says ErrClosed if Close came first; that is no failure here.
	if rerr := <-d.done; !errors.Is(rerr, queue.ErrClosed) {
		err = errors.Join(err, rerr)
	}
	if err != nil {
		return fmt.Errorf("edge: closing the queue: %w", err)
	}
	return nil
}

// newReading takes reading i: its intent is born here, with its key, and
// goes in its sensor's lane, which the queue delivers in order.
func newReading(url string, i int) (*idem.Intent, error) {
	s := sensor(i)
	body := fmt.Appendf(nil, `{"reading":"r-%02d","sensor":%q,"value":%d}`, i, s, 20+i*7%30)
	in, err := idem.NewIntent(http.MethodPost, url, body,
		idem.WithHeader("Content-Type", "application/json"), idem.WithLane(s))
	if err != nil {
		return nil, fmt.Errorf("edge: reading %d: %w", i, err)
	}
	return in, nil
}

func sensor(i int) string { return [...]string{"door", "temp", "power"}[i%3] }

// nameOf is the reading's name, from its body.
func nameOf(in *idem.Intent) string {
	var v struct{ Reading string }
	if json.Unmarshal(in.Body(), &v) != nil || v.Reading == "" {
		return "intent " + in.Key()
	}
	return v.Reading
}

// serverLog is the server's side of the story: it takes the server down as
// it answers the first request of one key, injects a fault into the first
// request of a few others, and notes when every request arrived.
type serverLog struct {
	mu       sync.Mutex // guards the fields below
	srv      *idemtest.Server
	cut      string                    // the key whose first request takes the server down
	down     chan struct{}             // closed when it has
	faults   map[string]idemtest.Fault // for a key's first request
	arrivals map[string][]time.Time    // by key
}

func newServerLog() *serverLog {
	return &serverLog{down: make(chan struct{}), faults: map[string]idemtest.Fault{}, arrivals: map[string][]time.Time{}}
}

// fault is the server's Options.Faults.
func (l *serverLog) fault(_ *http.Request, key string, seen int) idemtest.Fault {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.arrivals[key] = append(l.arrivals[key], time.Now())
	switch {
	case seen > 0:
		return idemtest.FaultNone
	case key == l.cut:
		// Applied and stored, the answer never sent, and no dial succeeds
		// from now on: the device cannot learn what happened.
		l.srv.SetDown(true)
		close(l.down)
		return idemtest.FaultCommitThenDrop
	}
	return l.faults[key]
}

// cutOn makes the first request with key take the server down.
func (l *serverLog) cutOn(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cut = key
}

// plan injects f into the first request with key.
func (l *serverLog) plan(key string, f idemtest.Fault) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.faults[key] = f
}

// lateArrivals counts the requests with key that arrived after limit.
func (l *serverLog) lateArrivals(key string, limit time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, t := range l.arrivals[key] {
		if t.After(limit) {
			n++
		}
	}
	return n
}

// narrator prints the story with the time since it began; the queue's
// drainer tells it events from its own goroutines.
type narrator struct {
	start time.Time
	mu    sync.Mutex // guards w
	w     io.Writer
}

func (n *narrator) say(format string, args ...any) {
	line := fmt.Sprintf("%6.2fs  %s\n", time.Since(n.start).Seconds(), fmt.Sprintf(format, args...))
	n.mu.Lock()
	defer n.mu.Unlock()
	io.WriteString(n.w, line)
}

// at is t as a time of the story.
func (n *narrator) at(t time.Time) string { return fmt.Sprintf("%.2fs", t.Sub(n.start).Seconds()) }

// event is the queue's Options.Notify. Done records are left to the table
// at the end.
func (n *narrator) event(e queue.Event) {
	switch e.Kind {
	case queue.EventOffline:
		n.say("queue: offline: attempts stop short of the server; it probes now and then")
	case queue.EventOnline:
		n.say("queue: online")
	case queue.EventSettled:
		if r := e.Record; r.State != queue.Done {
			n.say("queue: %s %s, %s: %s", nameOf(r.Intent), r.State, r.Outcome, r.Reason)
		}
	default:
		n.say("queue: %s: %v", e.Kind, e.Err)
	}
}
