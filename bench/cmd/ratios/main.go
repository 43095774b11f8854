// Command ratios reads the output of the bench benchmarks (go test -bench,
// any number of files, any -count) and prints the ratios the project is
// judged on beside their targets: the median of the ratios within each round
// when both benchmarks ran once a round, else the ratio of their medians.
//
//	go run ./cmd/ratios results/*.txt
//
// It exits 0 whatever the ratios are: it reports, benchstat judges noise.
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: ratios FILE...")
		os.Exit(2)
	}
	s := samples{}
	for _, name := range os.Args[1:] {
		f, err := os.Open(name)
		if err != nil {
			fmt.Fprintln(os.Stderr, "ratios:", err)
			os.Exit(1)
		}
		err = s.read(f)
		f.Close()
		if err != nil {
			fmt.Fprintf(os.Stderr, "ratios: %s: %v\n", name, err)
			os.Exit(1)
		}
	}
	report(os.Stdout, s)
}

// samples maps a benchmark name (without the -GOMAXPROCS suffix) and a unit
// to the values of its runs.
type samples map[string]map[string][]float64

var procs = regexp.MustCompile(`-\d+$`)

// read adds the benchmark lines of r: name, iterations, then value-unit
// pairs.
func (s samples) read(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || len(f)%2 != 0 {
			continue
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue
		}
		name := procs.ReplaceAllString(f[0], "")
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			if s[name] == nil {
				s[name] = map[string][]float64{}
			}
			s[name][f[i+1]] = append(s[name][f[i+1]], v)
		}
	}
	return sc.Err()
}

// median returns the median of name's unit, and whether there is one.
func (s samples) median(name, unit string) (float64, bool) {
	vs := slices.Clone(s[name][unit])
	if len(vs) == 0 {
		return 0, false
	}
	return median(vs), true
}

// paired returns the median of num's value over den's in each round, and
// whether both have one value a round. run.sh runs every benchmark of a
// comparison once per process, a process a round, so the i-th values of two
// benchmarks were measured side by side: the median of their ratios is
// spared the drift between rounds that the ratio of medians carries.
func (s samples) paired(num, den, unit string) (float64, bool) {
	a, b := s[num][unit], s[den][unit]
	if len(a) < 2 || len(a) != len(b) {
		return 0, false
	}
	rs := make([]float64, 0, len(a))
	for i := range a {
		if b[i] == 0 {
			return 0, false
		}
		rs = append(rs, a[i]/b[i])
	}
	return median(rs), true
}

// rounds returns the median over the rounds of f applied to name's units in
// that round: for figures one benchmark reports side by side, such as the
// three transaction times of BenchmarkBusinessTx.
func (s samples) rounds(name string, f func(units []float64) float64, units ...string) (float64, bool) {
	n := len(s[name][units[0]])
	for _, u := range units {
		if len(s[name][u]) != n || n == 0 {
			return 0, false
		}
	}
	vs := make([]float64, n)
	u := make([]float64, len(units))
	for i := range vs {
		for j, unit := range units {
			u[j] = s[name][unit][i]
		}
		vs[i] = f(u)
	}
	return median(vs), true
}

// median returns the median of vs, which it sorts.
func median(vs []float64) float64 {
	slices.Sort(vs)
	n := len(vs)
	if n%2 == 1 {
		return vs[n/2]
	}
	return (vs[n/2-1] + vs[n/2]) / 2
}

// target says what a ratio should be.
type target struct {
	max, min float64 // 0: no bound
}

func (t target) String() string {
	switch {
	case t.max > 0:
		return fmt.Sprintf("<= %.2f", t.max)
	case t.min > 0:
		return fmt.Sprintf(">= %.2f", t.min)
	}
	return ""
}

func (t target) verdict(v float64) string {
	switch {
	case t.max > 0 && v > t.max, t.min > 0 && v < t.min:
		return "MISSED"
	case t.max > 0 || t.min > 0:
		return "met"
	}
	return ""
}

const (
	overhead   = "BenchmarkOverhead/op=%s/client=%s"
	clientCost = "BenchmarkClientCost/op=%s/client=%s"
	enqueue    = "BenchmarkEnqueue/impl=%s/producers=%d"
	depth      = "BenchmarkEnqueueDepth/depth=%s"
	fault      = "BenchmarkFault/client=%s"
	outage     = "BenchmarkOutage/fault=%s/client=%s"
	businessTx = "BenchmarkBusinessTx"
	fleetDrain = "BenchmarkFleetDrain/%s"
	fleetLat   = "BenchmarkFleetLatency/latency=%s/impl=%s"
	fleetTx    = "BenchmarkFleetTx/latency=%s"
	// drainLatency is BenchmarkDrainLatency, outside smoke mode, by its
	// Workers: 4 or default.
	drainLatency = "BenchmarkDrainLatency/lanes=64/records=100/workers="
	// enqueueMany is pgqueue's BenchmarkEnqueueMany: many=N or single=N.
	enqueueMany = "BenchmarkEnqueueMany/%s"
)

// fleetLatencies are BenchmarkFleetLatency's settings: round trips to the
// database and to the API.
var fleetLatencies = []string{"none", "db1ms-api5ms", "db2ms-api20ms"}

var clients = []string{"raw", "retryablehttp", "resty", "idem-do", "idem-transport"}

func report(w io.Writer, s samples) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ratio\tvalue\ttarget\tverdict\tmedians")
	row := func(label string, num, den string, unit string, t target, invert bool) {
		a, okA := s.median(num, unit)
		b, okB := s.median(den, unit)
		if !okA || !okB || b == 0 || a == 0 {
			fmt.Fprintf(tw, "%s\tn/a\t%s\t\tmissing %s or %s\n", label, t, short(num), short(den))
			return
		}
		v := a / b
		if p, ok := s.paired(num, den, unit); ok {
			v = p
		}
		if invert { // a rate ratio from times: den's time over num's
			v = 1 / v
		}
		fmt.Fprintf(tw, "%s\t%.3fx\t%s\t%s\t%s %s / %s %s\n", label, v, t, t.verdict(v), fmtV(a), unit, fmtV(b), unit)
	}
	for _, op := range []string{"POST", "GET"} {
		do := fmt.Sprintf(overhead, op, "idem-do")
		row("idem Do / raw, "+op+" time", do, fmt.Sprintf(overhead, op, "raw"), "ns/op", target{max: 1.05}, false)
		// Issue 14: below go-retryablehttp sending what idem sends. A GET
		// carries no key, so for GET that is retryablehttp itself; for POST
		// it is retryablehttp-key, and plain retryablehttp, which sends no
		// key, is shown without a target.
		if op == "POST" {
			row("idem Do / retryablehttp (no key), POST time", do, fmt.Sprintf(overhead, op, "retryablehttp"), "ns/op", target{}, false)
			row("idem Do / retryablehttp sending a key, POST time", do, fmt.Sprintf(overhead, op, "retryablehttp-key"), "ns/op", target{max: 1.0}, false)
		} else {
			row("idem Do / retryablehttp, "+op+" time", do, fmt.Sprintf(overhead, op, "retryablehttp"), "ns/op", target{max: 1.0}, false)
		}
		row("idem Do / resty, "+op+" time", do, fmt.Sprintf(overhead, op, "resty"), "ns/op", target{}, false)
		row("Transport / raw, "+op+" time", fmt.Sprintf(overhead, op, "idem-transport"), fmt.Sprintf(overhead, op, "raw"), "ns/op", target{max: 1.03}, false)
		row("idem Do / raw, "+op+" CPU", do, fmt.Sprintf(overhead, op, "raw"), "cpu-ns/op", target{}, false)
		row("idem Do / retryablehttp, "+op+" CPU", do, fmt.Sprintf(overhead, op, "retryablehttp"), "cpu-ns/op", target{}, false)
		// Issue 26: in memory, the stable measure, judged as on loopback.
		cost := fmt.Sprintf(clientCost, op, "idem-do")
		row("idem Do / raw, "+op+" in-memory time", cost, fmt.Sprintf(clientCost, op, "raw"), "ns/op", target{}, false)
		if op == "POST" {
			key := fmt.Sprintf(clientCost, op, "retryablehttp-key")
			row("idem Do / retryablehttp (no key), POST in-memory time", cost, fmt.Sprintf(clientCost, op, "retryablehttp"), "ns/op", target{}, false)
			row("idem Do / retryablehttp sending a key, POST in-memory time", cost, key, "ns/op", target{max: 1.0}, false)
			row("idem Do / retryablehttp sending a key, POST in-memory allocs", cost, key, "allocs/op", target{}, false)
		} else {
			peer := fmt.Sprintf(clientCost, op, "retryablehttp")
			row("idem Do / retryablehttp, "+op+" in-memory time", cost, peer, "ns/op", target{max: 1.0}, false)
			row("idem Do / retryablehttp, "+op+" in-memory allocs", cost, peer, "allocs/op", target{}, false)
		}
		row("idem Do / raw, "+op+" allocs", do, fmt.Sprintf(overhead, op, "raw"), "allocs/op", target{}, false)
		row("idem Do / raw, "+op+" bytes", do, fmt.Sprintf(overhead, op, "raw"), "B/op", target{}, false)
	}
	row("queue enqueue rate, 1 producer / raw bolt Update", fmt.Sprintf(enqueue, "queue", 1), fmt.Sprintf(enqueue, "bolt-update", 1), "ns/op", target{min: 0.9}, true)
	row("queue enqueue rate, 64 producers / 1 producer", fmt.Sprintf(enqueue, "queue", 64), fmt.Sprintf(enqueue, "queue", 1), "ns/op", target{min: 5}, true)
	row("busy producers (50µs each) rate, 64 / 1", fmt.Sprintf(enqueue, "queue-busy", 64), fmt.Sprintf(enqueue, "queue-busy", 1), "ns/op", target{min: 10}, true)
	row("raw bolt rate, Batch 64 / Update 1", fmt.Sprintf(enqueue, "bolt-batch", 64), fmt.Sprintf(enqueue, "bolt-update", 1), "ns/op", target{}, true)
	row("queue keyed enqueue rate, 1 producer / raw bolt Update", fmt.Sprintf(enqueue, "queue-keyed", 1), fmt.Sprintf(enqueue, "bolt-update", 1), "ns/op", target{}, true)
	for _, l := range []struct {
		lanes, drain string
		producers    int
	}{{"1 lane", "lanes=1", 1}, {"64 lanes", "lanes=64", 64}, {"64 lanes, 4 workers (old default)", "lanes=64/workers=4", 64}} {
		t := target{min: 0.5}
		if strings.Contains(l.drain, "workers") {
			t = target{}
		}
		// a rate against a time: drain intents/s over enqueue's 1e9/(ns/op)
		label := fmt.Sprintf("drain rate, %s / %d-producer enqueue rate", l.lanes, l.producers)
		d, okD := s.median("BenchmarkDrain/"+l.drain, "intents/s")
		e, okE := s.median(fmt.Sprintf(enqueue, "queue", l.producers), "ns/op")
		if !okD || !okE || e == 0 {
			fmt.Fprintf(tw, "%s\tn/a\t%s\t\tmissing Drain/%s or %s\n", label, t, l.drain, short(fmt.Sprintf(enqueue, "queue", l.producers)))
			continue
		}
		v := d / (1e9 / e)
		fmt.Fprintf(tw, "%s\t%.3fx\t%s\t%s\t%s intents/s / %s intents/s\n", label, v, t, t.verdict(v), fmtV(d), fmtV(1e9/e))
	}
	// Issue 34: a worker a due lane by default, against the 4 of before.
	row("drain rate, 64 lanes, default / 4 workers", "BenchmarkDrain/lanes=64", "BenchmarkDrain/lanes=64/workers=4", "intents/s", target{}, false)
	if v, ok := s.median(drainLatency+"default", "ideal-x"); ok {
		t := target{max: 2}
		fmt.Fprintf(tw, "drain 64x100 behind a 50 ms API, default: time / ideal\t%.3fx\t%s\t%s\t%s s / (100 x 50 ms)\n", v, t, t.verdict(v), med(s, drainLatency+"default", "drain-s"))
	} else {
		fmt.Fprintf(tw, "drain 64x100 behind a 50 ms API, default: time / ideal\tn/a\t<= 2.00\t\tmissing %s\n", short(drainLatency+"default"))
	}
	row("drain 64x100 behind a 50 ms API, time, 4 workers / default", drainLatency+"4", drainLatency+"default", "drain-s", target{}, false)
	for _, d := range depths(s) {
		if d == "1k" {
			continue
		}
		t := target{}
		if d == "1M" {
			t = target{max: 1.5}
		}
		row("enqueue time at "+d+" / at 1k queued", fmt.Sprintf(depth, d), fmt.Sprintf(depth, "1k"), "ns/op", t, false)
	}
	if v, ok := s.median(businessTx, "round-trips/op"); ok {
		t := target{max: 1}
		fmt.Fprintf(tw, "fleet: EnqueueTx round trips added to a business tx\t%s\t%s\t%s\tstatements EnqueueTx sent a call\n", fmtV(v), t, t.verdict(v))
	} else {
		fmt.Fprintf(tw, "fleet: EnqueueTx round trips added to a business tx\tn/a\t<= 1.00\t\tmissing %s\n", short(businessTx))
	}
	if v, ok := s.rounds(businessTx, func(u []float64) float64 { return (u[0] - u[2]) / (u[1] - u[2]) }, "intent-us", "roundtrip-us", "plain-us"); ok {
		fmt.Fprintf(tw, "fleet: EnqueueTx time added / one round trip's\t%.3fx\t\t\t(intent - plain) / (SELECT 1 - plain), medians %s / %s / %s us\n",
			v, med(s, businessTx, "intent-us"), med(s, businessTx, "roundtrip-us"), med(s, businessTx, "plain-us"))
	}
	if v, ok := s.rounds(businessTx, func(u []float64) float64 { return u[0] / u[1] }, "intent-us", "plain-us"); ok {
		fmt.Fprintf(tw, "fleet: business tx with intent / plain, time\t%.3fx\t\t\t%s us / %s us\n", v, med(s, businessTx, "intent-us"), med(s, businessTx, "plain-us"))
	}
	// Issue 26: EnqueueManyTx linear in N, all in one lane.
	row("fleet: EnqueueManyTx time a record, 100,000 / 1,000 in one lane", fmt.Sprintf(enqueueMany, "many=100000"), fmt.Sprintf(enqueueMany, "many=1000"), "record-us", target{max: 1.5}, false)
	row("fleet: EnqueueManyTx / 1,000 EnqueueTx calls, time a record", fmt.Sprintf(enqueueMany, "many=1000"), fmt.Sprintf(enqueueMany, "single=1000"), "record-us", target{}, false)
	row("fleet: drain rate, postgres 1 replica / bbolt", fmt.Sprintf(fleetDrain, "postgres-1"), fmt.Sprintf(fleetDrain, "bbolt"), "intents/s", target{}, false)
	row("fleet: drain rate, postgres 3 replicas / bbolt", fmt.Sprintf(fleetDrain, "postgres-3"), fmt.Sprintf(fleetDrain, "bbolt"), "intents/s", target{}, false)
	fleetRows(tw, s, row)
	queueOutageRow(tw, s)
	tw.Flush()

	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "client\tfault: dups/10k\tfault: attempts/op\tfault: errors/10k\trefused: attempts/op\t503: attempts/op\trefused: retries/op\t503: retries/op\t")
	for _, c := range clients {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", c,
			med(s, fmt.Sprintf(fault, c), "dups/10k"), med(s, fmt.Sprintf(fault, c), "attempts/op"),
			med(s, fmt.Sprintf(fault, c), "errors/10k"),
			med(s, fmt.Sprintf(outage, "refused", c), "attempts/op"), med(s, fmt.Sprintf(outage, "503", c), "attempts/op"),
			med(s, fmt.Sprintf(outage, "refused", c), "retries/op"), med(s, fmt.Sprintf(outage, "503", c), "retries/op"))
	}
	tw.Flush()

	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "queue\tenqueue ns/op\tRSS MB\theap in use MB\tGo sys MB\tfile MB\t")
	for _, d := range depths(s) {
		n := fmt.Sprintf(depth, d)
		fmt.Fprintf(tw, "%s queued\t%s\t%s\t%s\t%s\t%s\t\n", d, med(s, n, "ns/op"), med(s, n, "rss-MB"), med(s, n, "heap-MB"), med(s, n, "sys-MB"), med(s, n, "file-MB"))
	}
	for _, l := range []string{"1", "64", "64/workers=4"} {
		n := "BenchmarkDrain/lanes=" + l
		if _, ok := s.median(n, "intents/s"); ok {
			fmt.Fprintf(tw, "drain, %s lane(s)\t%s\t%s intents/s\t\t\t\t\n", l, med(s, n, "ns/op"), med(s, n, "intents/s"))
		}
	}
	tw.Flush()
}

// queueOutage is a device's queue behind an outage (issue 34).
const queueOutage = "BenchmarkQueueOutage"

// queueOutageRow adds BenchmarkQueueOutage's figures (issue 34): how soon
// after its API answers again a device's queue sends, which should be
// within 2 s, and what the outage cost in probes.
func queueOutageRow(tw io.Writer, s samples) {
	const label = "queue outage: first send after the API is back, ms"
	t := target{max: 2000}
	v, ok := s.median(queueOutage, "back-ms")
	if !ok {
		fmt.Fprintf(tw, "%s\tn/a\t%s\t\tmissing %s\n", label, t, short(queueOutage))
		return
	}
	fmt.Fprintf(tw, "%s\t%.0f\t%s\t%s\t%s probes/min offline, backlog drained in %s ms\n",
		label, v, t, t.verdict(v), med(s, queueOutage, "probes/min"), med(s, queueOutage, "drain-ms"))
}

// fleetRows adds the ratios of BenchmarkFleetLatency and BenchmarkFleetTx
// (issue 26): pgqueue beside the bbolt queue and River, at each latency.
func fleetRows(tw io.Writer, s samples, row func(label, num, den, unit string, t target, invert bool)) {
	const rate = "intents/s"
	for _, l := range fleetLatencies {
		at := func(impl string) string { return fmt.Sprintf(fleetLat, l, impl) }
		one, three := at("postgres/replicas=1/lanes=200"), at("postgres/replicas=3/lanes=200")
		vsBolt, scale := target{min: 0.8}, target{min: 2.7}
		if l == "none" {
			vsBolt, scale = target{min: 0.6}, target{}
		}
		row("fleet "+l+": pgqueue 1 replica / bbolt, drain rate, 200 lanes", one, at("bbolt/lanes=200"), rate, vsBolt, false)
		row("fleet "+l+": pgqueue 3 replicas / 1, drain rate, 200 lanes", three, one, rate, scale, false)
		row("fleet "+l+": pgqueue / River, 1 replica, a lane per intent", at("postgres/replicas=1/lanes=each"), at("river/replicas=1"), rate, target{min: 1}, false)
		row("fleet "+l+": pgqueue / River, 3 replicas, a lane per intent", at("postgres/replicas=3/lanes=each"), at("river/replicas=3"), rate, target{}, false)
		row("fleet "+l+": pgqueue 200 hot lanes / River, 1 replica", one, at("river/replicas=1"), rate, target{}, false)
		tx := fmt.Sprintf(fleetTx, l)
		if v, ok := s.rounds(tx, func(u []float64) float64 { return u[0] / u[1] }, "enqueue-us", "river-us"); ok {
			t := target{max: 1}
			fmt.Fprintf(tw, "fleet %s: business tx with EnqueueTx / with River InsertTx, time\t%.3fx\t%s\t%s\t%s us / %s us (plain %s us)\n",
				l, v, t, t.verdict(v), med(s, tx, "enqueue-us"), med(s, tx, "river-us"), med(s, tx, "plain-us"))
		} else {
			fmt.Fprintf(tw, "fleet %s: business tx with EnqueueTx / with River InsertTx, time\tn/a\t<= 1.00\t\tmissing %s\n", l, short(tx))
		}
		if v, ok := s.rounds(tx, func(u []float64) float64 { return u[0] / u[1] }, "enqueue-batch-ms", "river-batch-ms"); ok {
			fmt.Fprintf(tw, "fleet %s: batch tx, EnqueueManyTx / River InsertManyTx, time\t%.3fx\t\t\t%s ms / %s ms\n",
				l, v, med(s, tx, "enqueue-batch-ms"), med(s, tx, "river-batch-ms"))
		}
	}
}

// depths lists the depths measured, shallowest first.
func depths(s samples) []string {
	type d struct {
		name string
		n    float64
	}
	var ds []d
	for name := range s {
		v, ok := strings.CutPrefix(name, "BenchmarkEnqueueDepth/depth=")
		if !ok {
			continue
		}
		mult := 1.0
		num := v
		switch {
		case strings.HasSuffix(v, "k"):
			num, mult = v[:len(v)-1], 1e3
		case strings.HasSuffix(v, "M"):
			num, mult = v[:len(v)-1], 1e6
		}
		n, err := strconv.ParseFloat(num, 64)
		if err == nil {
			ds = append(ds, d{v, n * mult})
		}
	}
	slices.SortFunc(ds, func(a, b d) int {
		switch {
		case a.n < b.n:
			return -1
		case a.n > b.n:
			return 1
		}
		return 0
	})
	out := make([]string, len(ds))
	for i, x := range ds {
		out[i] = x.name
	}
	return out
}

func med(s samples, name, unit string) string {
	v, ok := s.median(name, unit)
	if !ok {
		return "-"
	}
	return fmtV(v)
}

func fmtV(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 1000:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case v >= 0.01:
		return strconv.FormatFloat(v, 'f', 4, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

func short(name string) string { return strings.TrimPrefix(name, "Benchmark") }
