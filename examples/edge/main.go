// Command edge is a device that keeps its writes through an outage and a
// restart with idem's durable queue (package queue).
//
// The device posts sensor readings to a server that keeps idempotency keys
// for a few seconds (a real one keeps them for a day or more; the times are
// shortened so that the story plays in seconds). The server goes down while
// it answers the first reading, so the device cannot know whether that one
// was applied; the device queues more readings while the server is down, is
// restarted (the queue is closed and opened again on the same file), and
// drains when the server returns. The first reading has by then passed its
// horizon, the last moment a resend could still meet the server's memory of
// its key: the queue reports it as expired with outcome unknown instead of
// sending it.
//
// Run it with no arguments; it needs only loopback and a temporary directory,
// which it removes:
//
//	go run ./examples/edge
//	go run ./examples/edge -readings 30 -retention 5s -margin 2s
//
// The last line sums the run up. The command exits 1 if a reading was
// applied twice, misreported, left unreported, or sent past its horizon, or
// if the first reading did not expire.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// attemptTimeout bounds each attempt; the horizon counts it.
const attemptTimeout = 250 * time.Millisecond

// config is the program's flags.
type config struct {
	readings  int           // queued while the server is down
	retention time.Duration // how long the server keeps a key, as the queue is told
	margin    time.Duration // kept off retention by the queue
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("edge", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config
	fs.IntVar(&c.readings, "readings", 12, "readings queued while the server is down")
	fs.DurationVar(&c.retention, "retention", 3*time.Second, "how long the server keeps an idempotency key")
	fs.DurationVar(&c.margin, "margin", time.Second, "kept off the retention by the queue's horizon")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	switch {
	case fs.NArg() > 0:
		return c, fmt.Errorf("edge: unexpected arguments %q", fs.Args())
	case c.readings < 1 || c.readings > 999:
		return c, fmt.Errorf("edge: -readings is %d, want 1 to 999", c.readings)
	case c.margin <= 0 || c.margin >= c.retention:
		return c, fmt.Errorf("edge: -margin is %v, want more than 0 and less than -retention (%v)", c.margin, c.retention)
	case c.retention-c.margin < 2*attemptTimeout:
		return c, fmt.Errorf("edge: -retention less -margin is %v, want at least %v (two attempts)", c.retention-c.margin, 2*attemptTimeout)
	case c.retention > time.Minute:
		return c, fmt.Errorf("edge: -retention is %v; the story waits longer than that, so keep it under a minute", c.retention)
	}
	return c, nil
}

func run(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	start := time.Now()
	rep, err := play(context.Background(), cfg, stdout)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	fmt.Fprintf(stdout, "\n(%.1fs)\n%s\n", time.Since(start).Seconds(), rep)
	if problems := rep.problems(); len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintln(stderr, "edge:", p)
		}
		return 1
	}
	return 0
}

// report counts what happened to the readings, by the server's effect
// counts and by what the queue reported.
type report struct {
	readings int // readings taken
	// By the server's counts: applied exactly once, more than once, never.
	applied, duplicates, lost int
	// By the queue's report: said done with no effect, or not applied with
	// one; said the outcome is unknown; still queued at the end.
	misreported, unknown, unsettled int
	// expired counts readings the queue would not send again past their
	// horizon; horizonExpired reports that the first reading is one.
	expired        int
	horizonExpired bool
	// late counts requests that reached the server after their key's
	// horizon: first sent + retention - margin.
	late int
}

func (r report) String() string {
	return fmt.Sprintf("edge: readings=%d applied=%d duplicates=%d lost=%d misreported=%d unknown=%d expired=%d unsettled=%d late=%d",
		r.readings, r.applied, r.duplicates, r.lost, r.misreported, r.unknown, r.expired, r.unsettled, r.late)
}

// problems lists what the device got wrong, or that the story did not show
// the horizon; none means success.
func (r report) problems() []string {
	var out []string
	for _, c := range []struct {
		n    int
		what string
	}{
		{r.duplicates, "readings applied more than once"},
		{r.misreported, "readings misreported"},
		{r.unsettled, "readings neither settled nor reported"},
		{r.late, "requests sent past their key's horizon"},
	} {
		if c.n > 0 {
			out = append(out, fmt.Sprintf("%d %s", c.n, c.what))
		}
	}
	if !r.horizonExpired {
		out = append(out, "the first reading did not expire: the run did not show the horizon")
	}
	return out
}
