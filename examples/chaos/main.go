// Command chaos sends the same payments through a faulty server four ways:
// with no retries, with naive retries (resend on any error, as popular retry
// libraries do), with idem's Client, and through idem's durable queue across
// an outage and a restart. It then asks the server how many times each
// payment took effect and compares that with what each client reported.
//
// idem's rows act on each outcome as README's outcome contract tells an
// application to: a NotApplied payment is sent again as a new intent, an
// Unknown one is resumed under its key (Client.Resume), each a bounded number
// of times. The table counts the payments that needed either, and judges
// every NotApplied idem reported on the way against the server's effects
// under that key.
//
// Run it with no arguments; flags change the size, seed and fault rates:
//
//	go run ./examples/chaos
//	go run ./examples/chaos -n 2000 -seed 7 -drop 0.2
//
// The last line sums idem's two rows. The command exits 1 if idem
// duplicated or misreported a payment.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/idem-go/idem/idemtest"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// config is the demo's flags.
type config struct {
	n, workers int
	seed       int64
	timeout    time.Duration // per attempt, for every client
	delay      time.Duration // how long a slow request holds the server
	refuse     float64       // share of dials refused
	faults     []faultRate   // in flag order
	// queueAttempts is the queue's Options.MaxAttempts: 0, no limit but
	// the horizon, as a device's queue would run.
	queueAttempts int
	// roughStart, above 0, makes each scene's server start rough: it
	// answers its first roughStart requests 429, then applies the next
	// roughStart and answers them 500, before the random faults take
	// over. No flag sets it: a test does, so that some payments certainly
	// end NotApplied and some Unknown.
	roughStart int
}

// faultRate is the share of requests that meet one fault.
type faultRate struct {
	fault idemtest.Fault
	rate  float64
}

func (c config) rates() map[idemtest.Fault]float64 {
	m := make(map[idemtest.Fault]float64, len(c.faults))
	for _, f := range c.faults {
		m[f.fault] = f.rate
	}
	return m
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config
	fs.IntVar(&c.n, "n", 500, "payments per client")
	fs.IntVar(&c.workers, "workers", 16, "payments in flight at once")
	fs.Int64Var(&c.seed, "seed", 1, "seed of the fault sequence")
	fs.DurationVar(&c.timeout, "timeout", 250*time.Millisecond, "per-attempt timeout of every client")
	fs.DurationVar(&c.delay, "delay", 600*time.Millisecond, "how long a slow request holds the server")
	fs.Float64Var(&c.refuse, "refuse", 0.10, "share of connections refused")
	fs.IntVar(&c.queueAttempts, "queue-attempts", 0, "attempts per queued payment before its record fails (0: no limit)")
	flags := []struct {
		fault idemtest.Fault
		name  string
		def   float64
		usage string
	}{
		{idemtest.FaultCommitThenDrop, "drop", 0.08, "share of requests applied, then the connection dropped before the answer"},
		{idemtest.FaultCloseBeforeRead, "close", 0.04, "share of requests whose connection is closed before the server reads them"},
		{idemtest.FaultDelay, "slow", 0.03, "share of requests held -delay by the server, past the client's timeout"},
		{idemtest.Fault503, "e503", 0.05, "share of requests answered 503 before any effect"},
		{idemtest.Fault500AfterEffect, "e500", 0.03, "share of requests applied, then answered 500"},
		{idemtest.Fault429, "e429", 0.02, "share of requests answered 429 with Retry-After"},
	}
	vals := make([]float64, len(flags))
	for i, f := range flags {
		fs.Float64Var(&vals[i], f.name, f.def, f.usage)
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	total := 0.0
	for i, f := range flags {
		if vals[i] < 0 || vals[i] > 1 {
			return c, fmt.Errorf("chaos: -%s is %v, want 0 to 1", f.name, vals[i])
		}
		c.faults = append(c.faults, faultRate{f.fault, vals[i]})
		total += vals[i]
	}
	switch {
	case total > 1:
		return c, fmt.Errorf("chaos: fault rates add up to %.2f, more than 1", total)
	case c.refuse < 0 || c.refuse >= 1:
		return c, fmt.Errorf("chaos: -refuse is %v, want 0 to less than 1", c.refuse)
	case c.n < 1:
		return c, fmt.Errorf("chaos: -n is %d, want at least 1", c.n)
	case c.workers < 1:
		return c, fmt.Errorf("chaos: -workers is %d, want at least 1", c.workers)
	case c.queueAttempts < 0:
		return c, fmt.Errorf("chaos: -queue-attempts is %d, want 0 or more", c.queueAttempts)
	case c.timeout <= 0:
		return c, fmt.Errorf("chaos: -timeout is %v, want more than 0", c.timeout)
	case c.delay <= 0:
		return c, fmt.Errorf("chaos: -delay is %v, want more than 0", c.delay)
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
	fmt.Fprintf(stdout, "idem chaos: %d payments per client, seed %d, %s\n\n", cfg.n, cfg.seed, describe(cfg))
	var rows []row
	var total row // idem's rows, for the last line
	for _, k := range clientKinds() {
		r, err := scene(context.Background(), cfg, k)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 2
		}
		rows = append(rows, r)
		if k.idem {
			total = total.plus(r)
		}
	}
	printTable(stdout, rows)
	fmt.Fprintf(stdout, "\n(%.1fs)\n", time.Since(start).Seconds())
	fmt.Fprintf(stdout, "idem: intents=%d applied=%d duplicates=%d lost=%d misreported=%d unknown=%d resumed=%d resent=%d\n",
		total.intents, total.applied, total.duplicates, total.lost, total.misreported, total.unknown, total.resumed, total.resent)
	if total.duplicates > 0 || total.misreported > 0 {
		return 1
	}
	return 0
}

func describe(cfg config) string {
	parts := []string{fmt.Sprintf("refused dials %.0f%%", 100*cfg.refuse)}
	for _, f := range cfg.faults {
		parts = append(parts, fmt.Sprintf("%v %.0f%%", f.fault, 100*f.rate))
	}
	return "faults: " + strings.Join(parts, ", ")
}

// verdict is what a client told its caller about one payment.
type verdict uint8

const (
	saidApplied verdict = iota
	saidFailed
	saidUnknown
)

// report is what a client told its caller about one payment, and what the
// application did on the way there.
type report struct {
	verdict verdict // the last word
	// resumed and resent report that the application called Client.Resume
	// after an Unknown, or sent the payment again as a new intent after a
	// NotApplied.
	resumed, resent bool
	// notApplied holds the key of every intent idem said NotApplied of, the
	// last word or not: the server must have no effect under any of them.
	notApplied []string
}

// row is one client's line in the table.
type row struct {
	name                                                           string
	intents, applied, duplicates, lost, misreported, unknown, sent int
	// resumed and resent count the payments that needed a Resume or a
	// resend; idiom marks the rows whose application does either.
	resumed, resent int
	idiom           bool
}

// plus returns r with o's counts added.
func (r row) plus(o row) row {
	r.intents += o.intents
	r.applied += o.applied
	r.duplicates += o.duplicates
	r.lost += o.lost
	r.misreported += o.misreported
	r.unknown += o.unknown
	r.sent += o.sent
	r.resumed += o.resumed
	r.resent += o.resent
	return r
}

// scene runs every payment through one client against a fresh faulty
// server, then compares the client's verdicts with the server's counts.
func scene(ctx context.Context, cfg config, k clientKind) (row, error) {
	faults := idemtest.RandomFaults(cfg.seed, cfg.rates())
	if cfg.roughStart > 0 {
		faults = roughly(cfg.roughStart, faults)
	}
	srv := idemtest.New(idemtest.Options{
		Delay:      cfg.delay,
		Faults:     faults,
		RefuseDial: idemtest.RandomRefusals(cfg.seed, cfg.refuse),
	})
	if err := srv.Start(); err != nil {
		return row{}, fmt.Errorf("chaos: starting the server: %w", err)
	}
	defer srv.Close()
	reports, err := k.send(ctx, srv, cfg)
	if err != nil {
		return row{}, err
	}

	r := row{name: k.name, intents: cfg.n, sent: srv.Requests(), idiom: k.idem}
	for i, rep := range reports {
		effects := srv.EffectsForPayload(payment(i))
		switch {
		case effects == 1:
			r.applied++
		case effects > 1:
			r.duplicates++
		default:
			r.lost++
		}
		switch v := rep.verdict; {
		case v == saidUnknown:
			r.unknown++
		case v == saidApplied && effects == 0, v == saidFailed && effects > 0, appliedUnder(srv, rep.notApplied):
			r.misreported++
		}
		if rep.resumed {
			r.resumed++
		}
		if rep.resent {
			r.resent++
		}
	}
	return r, nil
}

// faultFunc is the type of idemtest.Options.Faults.
type faultFunc = func(r *http.Request, key string, seen int) idemtest.Fault

// roughly returns faults preceded by a rough start: the first n requests
// answered 429, the next n applied and answered 500.
func roughly(n int, faults faultFunc) faultFunc {
	var requests atomic.Int64
	return func(r *http.Request, key string, seen int) idemtest.Fault {
		switch i := requests.Add(1); {
		case i <= int64(n):
			return idemtest.Fault429
		case i <= 2*int64(n):
			return idemtest.Fault500AfterEffect
		}
		return faults(r, key, seen)
	}
}

// appliedUnder reports whether srv took effect under any of keys.
func appliedUnder(srv *idemtest.Server, keys []string) bool {
	for _, k := range keys {
		if srv.EffectsForKey(k) > 0 {
			return true
		}
	}
	return false
}

func payment(i int) []byte {
	return fmt.Appendf(nil, `{"payment":"p-%05d","amount_cents":%d}`, i, 100+i%900)
}

func printTable(w io.Writer, rows []row) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "client\tintents\tapplied once\tduplicated\tlost\tmisreported\tunknown\tresumed\tresent\trequests\t")
	for _, r := range rows {
		resumed, resent := "-", "-"
		if r.idiom {
			resumed, resent = strconv.Itoa(r.resumed), strconv.Itoa(r.resent)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%d\t\n",
			r.name, r.intents, r.applied, r.duplicates, r.lost, r.misreported, r.unknown, resumed, resent, r.sent)
	}
	tw.Flush()
}
