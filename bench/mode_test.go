package bench

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	closeDepthQueue()
	stopPG()
	os.Exit(code)
}

// smoke reports whether the heavy benchmarks scale down: see the package doc.
var smoke = sync.OnceValue(func() bool {
	switch os.Getenv("IDEM_BENCH_SMOKE") {
	case "1", "true":
		return true
	case "0", "false":
		return false
	}
	f := flag.Lookup("test.benchtime")
	if f == nil {
		return false
	}
	v := f.Value.String()
	if n, ok := strings.CutSuffix(v, "x"); ok {
		if i, err := strconv.Atoi(n); err == nil {
			return i <= 1000
		}
	}
	return false
})

// outageWindow is how long each client faces the outage.
func outageWindow(b *testing.B) time.Duration {
	if v := os.Getenv("IDEM_BENCH_OUTAGE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			b.Fatalf("IDEM_BENCH_OUTAGE=%q: want a positive duration", v)
		}
		return d
	}
	if smoke() {
		return 250 * time.Millisecond
	}
	return 10 * time.Second
}

// depths are the queue depths of BenchmarkEnqueueDepth.
func depths(b *testing.B) []int {
	v := os.Getenv("IDEM_BENCH_DEPTHS")
	if v == "" {
		if smoke() {
			return []int{1_000, 4_000}
		}
		return []int{1_000, 100_000, 1_000_000}
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := parseCount(strings.TrimSpace(f))
		if err != nil {
			b.Fatalf("IDEM_BENCH_DEPTHS=%q: %v", v, err)
		}
		out = append(out, n)
	}
	return out
}

// parseCount reads 1000, 1k or 1M.
func parseCount(s string) (int, error) {
	num, mult := s, 1
	switch {
	case strings.HasSuffix(s, "k"):
		num, mult = s[:len(s)-1], 1_000
	case strings.HasSuffix(s, "M"):
		num, mult = s[:len(s)-1], 1_000_000
	}
	n, err := strconv.Atoi(num)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%q is not a count like 1000, 1k or 1M", s)
	}
	return n * mult, nil
}

// fmtCount writes n as parseCount reads it: 1k, 100k, 1M.
func fmtCount(n int) string {
	switch {
	case n%1_000_000 == 0:
		return strconv.Itoa(n/1_000_000) + "M"
	case n%1_000 == 0:
		return strconv.Itoa(n/1_000) + "k"
	}
	return strconv.Itoa(n)
}

func TestParseCount(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want int
	}{{"1000", 1000}, {"1k", 1000}, {"100k", 100_000}, {"1M", 1_000_000}} {
		got, err := parseCount(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("parseCount(%q) = %d, %v, want %d", tt.in, got, err, tt.want)
		}
		if s := fmtCount(tt.want); s != tt.in && tt.in != "1000" {
			t.Errorf("fmtCount(%d) = %q, want %q", tt.want, s, tt.in)
		}
	}
	for _, in := range []string{"lots", "0", "xk"} {
		if _, err := parseCount(in); err == nil || !strings.Contains(err.Error(), strconv.Quote(in)) {
			t.Errorf("parseCount(%q) error = %v, want one naming %q", in, err, in)
		}
	}
}
