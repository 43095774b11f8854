package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/queue"
)

// drainPoll is how often drain looks at the counts between settlements.
const drainPoll = 200 * time.Millisecond

// drainFlags configure drain. The queue file holds no configuration: the
// flags that decide what is sent (horizon, age, attempts, key header) must
// say what the application's queue.Options and idem.Client say.
type drainFlags struct {
	horizon     horizonFlags
	maxAge      time.Duration
	maxAttempts int
	workers     int
	timeout     time.Duration
	keyHeader   string
	keyFormat   string
	authEnv     string
	progress    string
}

func (a *app) drainCommand() *cobra.Command {
	var f drainFlags
	cmd := &cobra.Command{
		Use:   "drain",
		Short: "Send the pending records now, with a progress bar and a summary",
		Long: `drain sends the pending records now, as the application's drainer would, until
none is pending or --timeout passes, then prints how many settled done, failed
and expired. Records that must still wait (a server's Retry-After, a backoff)
keep the drain going until the timeout; it then exits 1 and the queue keeps
them. Attempts under way at the timeout are cut and recorded (ambiguous if the
request went out), to be sent again later with the same key.

The file holds no configuration: give --retention, --margin, --max-age,
--max-attempts and --key-header as the application sets them, or drain may send
what the application would have expired, or send the key under a header the
server ignores. The queue stores no credentials; --auth-env names an
environment variable whose value is sent as the Authorization header of every
attempt. A custom transport (mTLS, a proxy other than $HTTPS_PROXY) needs the
application's own drainer.

A progress bar goes to stderr when it is a terminal (--progress), a plain line
otherwise; the summary goes to stdout.`,
		Example: `  idemq -f intents.db drain
  API_AUTH="Bearer $TOKEN" idemq -f intents.db drain --auth-env API_AUTH --timeout 2m`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts, err := f.options()
			if err != nil {
				return err
			}
			return a.drain(cmd.Context(), f, opts)
		},
	}
	fl := cmd.Flags()
	f.horizon.add(fl)
	fl.DurationVar(&f.maxAge, "max-age", 0, "the application's Options.MaxAge (0: no limit)")
	fl.IntVar(&f.maxAttempts, "max-attempts", 0, "the application's Options.MaxAttempts (0: no limit but the horizon)")
	fl.IntVar(&f.workers, "workers", queue.DefaultWorkers, "most records sent at once, one a due lane")
	fl.DurationVar(&f.timeout, "timeout", queue.DefaultPolicy().MaxDelay, "give up after this long (the default lets a record at the longest backoff go once more)")
	fl.StringVar(&f.keyHeader, "key-header", idem.DefaultKeyHeader, "the header carrying the key: the application's Client.KeyHeader")
	fl.StringVar(&f.keyFormat, "key-format", "plain", "how the key is written: plain or sf-string (the application's Client.KeySFString)")
	fl.StringVar(&f.authEnv, "auth-env", "", "send the value of this environment variable as the Authorization header")
	fl.StringVar(&f.progress, "progress", "auto", "auto (a bar on a terminal), bar or plain")
	return cmd
}

// options checks the flags and returns the queue's options, without Notify.
func (f drainFlags) options() (queue.Options, error) {
	if err := f.horizon.check(); err != nil {
		return queue.Options{}, err
	}
	switch {
	case f.maxAge < 0:
		return queue.Options{}, usagef("--max-age %v: want 0 or more", f.maxAge)
	case f.maxAttempts < 0:
		return queue.Options{}, usagef("--max-attempts %d: want 0 or more", f.maxAttempts)
	case f.workers < 0:
		return queue.Options{}, usagef("--workers %d: want 0 or more", f.workers)
	case f.timeout <= 0:
		return queue.Options{}, usagef("--timeout %v: want a positive duration", f.timeout)
	case f.progress != "auto" && f.progress != "bar" && f.progress != "plain":
		return queue.Options{}, usagef("--progress %q: want auto, bar or plain", f.progress)
	}
	c := &idem.Client{KeyHeader: f.keyHeader}
	switch f.keyFormat {
	case "plain":
	case "sf-string":
		c.KeySFString = true
	default:
		return queue.Options{}, usagef("--key-format %q: want plain or sf-string", f.keyFormat)
	}
	if name := f.authEnv; name != "" {
		if os.Getenv(name) == "" {
			return queue.Options{}, fmt.Errorf("--auth-env %s: $%s is not set", name, name)
		}
		// Read on every attempt, as the application's Authorize would fetch
		// fresh credentials.
		c.Authorize = func(_ context.Context, req *http.Request) error {
			req.Header.Set("Authorization", os.Getenv(name))
			return nil
		}
	}
	return queue.Options{
		Client: c, Retention: f.horizon.retention, Margin: f.horizon.margin,
		MaxAge: f.maxAge, MaxAttempts: f.maxAttempts, Workers: f.workers,
	}, nil
}

// tally counts what settled during a drain. Notify writes it from the
// queue's delivery goroutine; mu guards the counts.
type tally struct {
	mu      sync.Mutex
	states  map[queue.State]int
	damaged int
	changed chan struct{} // a settlement happened; buffered, never closed
}

func newTally() *tally {
	return &tally{states: map[queue.State]int{}, changed: make(chan struct{}, 1)}
}

func (t *tally) settled(r *queue.Record) {
	t.mu.Lock()
	if r.Damaged {
		t.damaged++ // found by Open, not settled by this drain
	} else {
		t.states[r.State]++
	}
	t.mu.Unlock()
	select {
	case t.changed <- struct{}{}:
	default:
	}
}

// snapshot returns the settlements so far and how many there were.
func (t *tally) snapshot() (map[queue.State]int, int, int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[queue.State]int, len(t.states))
	n := 0
	for s, c := range t.states {
		out[s] = c
		n += c
	}
	return out, n, t.damaged
}

func (a *app) drain(ctx context.Context, f drainFlags, opts queue.Options) error {
	t := newTally()
	rep := newReporter(a.stderr, a.rawStderr, f.progress)
	opts.Notify = func(e queue.Event) {
		switch e.Kind {
		case queue.EventSettled:
			t.settled(e.Record)
			if e.Record.Damaged {
				rep.note("record %d was found damaged and is quarantined (failed)", e.Record.ID)
			}
		case queue.EventLaneHeld:
			rep.note("lane %q held: %v", e.Lane, e.Err)
		case queue.EventOffline:
			rep.note("offline: attempts do not reach the network; probing")
		case queue.EventOnline:
			rep.note("online again")
		case queue.EventClockHeld:
			rep.note("sends held: %v (see reset-clock)", e.Err)
		case queue.EventError:
			rep.note("%v", e.Err)
		}
	}
	a.drains = true
	return a.withQueue(opts, func(q *queue.Queue) error {
		c, err := q.Counts(ctx)
		if err != nil {
			return err
		}
		total := c[queue.Pending] + c[queue.InFlight]
		if total == 0 {
			fmt.Fprintf(a.stdout, "nothing to drain in %s\n", a.queueName())
			return nil
		}
		start := time.Now()
		rep.start(total, fmt.Sprintf("draining %d records from %s (timeout %v)", total, a.queueName(), f.timeout))
		runCtx, cancel := context.WithTimeout(ctx, f.timeout)
		defer cancel()
		ran := make(chan error, 1)
		go func() { ran <- q.Run(runCtx) }()
		q.Wake() // send now: records that waited for the network are due
		remaining, err := a.waitDrained(runCtx, q, t, rep)
		cancel()
		if rerr := <-ran; err == nil {
			err = rerr
		}
		rep.finish()
		if err != nil {
			return err
		}
		if c, err := q.Counts(context.WithoutCancel(ctx)); err == nil { // after Run: attempts cut by the timeout are recorded
			remaining = c[queue.Pending] + c[queue.InFlight]
		}
		a.summary(t, remaining, time.Since(start))
		switch {
		case remaining == 0:
			return nil
		case ctx.Err() != nil:
			return fmt.Errorf("drain interrupted; %d records still pending, kept in the queue", remaining)
		}
		return fmt.Errorf("drain: %d records still pending after %v, kept in the queue (idemq %s ls --state pending)", remaining, f.timeout, a.sourceFlag())
	})
}

// waitDrained waits until no record is pending or in flight, or ctx ends,
// and returns how many are.
func (a *app) waitDrained(ctx context.Context, q *queue.Queue, t *tally, rep *reporter) (int, error) {
	tick := time.NewTicker(drainPoll)
	defer tick.Stop()
	remaining := 0
	for {
		_, n, _ := t.snapshot()
		rep.set(n)
		c, err := q.Counts(ctx)
		switch {
		case ctx.Err() != nil: // the drain's time is up: the caller counts again
			return remaining, nil
		case err != nil:
			return 0, err
		}
		remaining = c[queue.Pending] + c[queue.InFlight]
		if remaining == 0 {
			return 0, nil
		}
		select {
		case <-t.changed:
		case <-tick.C:
		case <-ctx.Done():
			return remaining, nil
		}
	}
}

func (a *app) summary(t *tally, remaining int, took time.Duration) {
	states, n, damaged := t.snapshot()
	var b strings.Builder
	fmt.Fprintf(&b, "drained %s in %v: %d settled (%d done, %d failed, %d expired), %d pending",
		a.queueName(), took.Round(time.Millisecond), n,
		states[queue.Done], states[queue.Failed], states[queue.Expired], remaining)
	if damaged > 0 {
		fmt.Fprintf(&b, "; %d damaged records quarantined", damaged)
	}
	fmt.Fprintln(a.stdout, b.String())
}
