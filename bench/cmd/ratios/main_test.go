package main

import (
	"bytes"
	"strings"
	"testing"
)

const sample = `goos: linux
BenchmarkOverhead/op=POST/client=raw-2         	   10000	    100 ns/op	  7000 B/op	  84 allocs/op
BenchmarkOverhead/op=POST/client=raw-2         	   10000	    300 ns/op	  7000 B/op	  84 allocs/op
BenchmarkOverhead/op=POST/client=raw-2         	   10000	    200 ns/op	  7000 B/op	  84 allocs/op
BenchmarkOverhead/op=POST/client=idem-do-2     	   10000	    220 ns/op	  9000 B/op	 112 allocs/op
BenchmarkEnqueue/impl=bolt-update/producers=1-2	     100	   1000 ns/op
BenchmarkEnqueue/impl=queue/producers=1-2      	     100	   2000 ns/op
--- BENCH: BenchmarkEnqueueDepth/depth=1k-2
    queue_test.go:261: queued 1k intents with 64 producers in 222ms (4497/s)
BenchmarkEnqueueDepth/depth=1k-2  	     300	   1000 ns/op	         1.000 file-MB
BenchmarkEnqueueDepth/depth=1M-2  	     300	   1400 ns/op	       500.0 file-MB
BenchmarkEnqueue/impl=queue/producers=64-2     	     100	   1000 ns/op
BenchmarkDrain/lanes=64-2     	     100	   1000 ns/op	  250000 intents/s
BenchmarkDrain/lanes=64/workers=4-2     	     100	   4000 ns/op	  50000 intents/s
BenchmarkDrainLatency/lanes=64/records=100/workers=4-2	1	80000000000 ns/op	80.0 drain-s	16.0 ideal-x	80 intents/s
BenchmarkDrainLatency/lanes=64/records=100/workers=default-2	1	6000000000 ns/op	6.0 drain-s	1.2 ideal-x	1066 intents/s
BenchmarkBusinessTx-2   	    1000	   1264883 ns/op	       500.0 intent-us	       200.0 plain-us	         1.000 round-trips/op	       300.0 roundtrip-us
BenchmarkEnqueueMany/many=1000-2	1	1 ns/op	10.0 record-us
BenchmarkEnqueueMany/many=100000-2	1	1 ns/op	20.0 record-us
BenchmarkEnqueueMany/single=1000-2	1	1 ns/op	40.0 record-us
BenchmarkFleetDrain/bbolt-2         	    3000	   1 ns/op	      2000 intents/s
BenchmarkFleetDrain/postgres-1-2    	    3000	   2 ns/op	      1000 intents/s
BenchmarkFleetLatency/latency=db1ms-api5ms/impl=bbolt/lanes=200-2	100	1 ns/op	400 intents/s
BenchmarkFleetLatency/latency=db1ms-api5ms/impl=postgres/replicas=1/lanes=200-2	100	1 ns/op	100 intents/s
BenchmarkFleetLatency/latency=db1ms-api5ms/impl=postgres/replicas=3/lanes=200-2	100	1 ns/op	300 intents/s
BenchmarkFleetLatency/latency=db1ms-api5ms/impl=postgres/replicas=1/lanes=each-2	100	1 ns/op	90 intents/s
BenchmarkFleetLatency/latency=db1ms-api5ms/impl=river/replicas=1-2	100	1 ns/op	180 intents/s
BenchmarkFleetTx/latency=db1ms-api5ms-2	100	1 ns/op	2.0 enqueue-batch-ms	500 enqueue-us	200 plain-us	1.0 river-batch-ms	400 river-us
PASS
`

func TestRead(t *testing.T) {
	s := samples{}
	if err := s.read(strings.NewReader(sample)); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, unit string
		want       float64
	}{
		{"BenchmarkOverhead/op=POST/client=raw", "ns/op", 200},
		{"BenchmarkOverhead/op=POST/client=raw", "allocs/op", 84},
		{"BenchmarkEnqueueDepth/depth=1M", "file-MB", 500},
	} {
		if got, ok := s.median(tt.name, tt.unit); !ok || got != tt.want {
			t.Errorf("median(%s, %s) = %v, %v, want %v", tt.name, tt.unit, got, ok, tt.want)
		}
	}
	if got, want := depths(s), []string{"1k", "1M"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("depths = %v, want %v", got, want)
	}
}

func TestReport(t *testing.T) {
	s := samples{}
	if err := s.read(strings.NewReader(sample)); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	report(&out, s)
	for _, want := range [][]string{
		{"idem", "Do", "/", "raw,", "POST", "time", "1.100x", "<=", "1.05", "MISSED"},
		{"idem", "Do", "/", "raw,", "GET", "time", "n/a", "<=", "1.05"},
		{"idem", "Do", "/", "retryablehttp", "sending", "a", "key,", "POST", "time", "n/a", "<=", "1.00"},
		{"Transport", "/", "raw,", "POST", "time", "n/a", "<=", "1.03"},
		{"queue", "enqueue", "rate,", "1", "producer", "/", "raw", "bolt", "Update", "0.500x", ">=", "0.90", "MISSED"},
		{"enqueue", "time", "at", "1M", "/", "at", "1k", "queued", "1.400x", "<=", "1.50", "met"},
		{"drain", "rate,", "1", "lane", "/", "1-producer", "enqueue", "rate", "n/a"},
		{"drain", "rate,", "64", "lanes", "/", "64-producer", "enqueue", "rate", "0.250x", ">=", "0.50", "MISSED"},
		{"drain", "rate,", "64", "lanes,", "4", "workers", "(old", "default)", "/", "64-producer", "enqueue", "rate", "0.050x"},
		{"drain", "rate,", "64", "lanes,", "default", "/", "4", "workers", "5.000x"},
		{"drain", "64x100", "behind", "a", "50", "ms", "API,", "default:", "time", "/", "ideal", "1.200x", "<=", "2.00", "met"},
		{"drain", "64x100", "behind", "a", "50", "ms", "API,", "time,", "4", "workers", "/", "default", "13.333x"},
		{"fleet:", "EnqueueTx", "round", "trips", "added", "to", "a", "business", "tx", "1.0000", "<=", "1.00", "met"},
		{"fleet:", "EnqueueTx", "time", "added", "/", "one", "round", "trip's", "3.000x"},
		{"fleet:", "business", "tx", "with", "intent", "/", "plain,", "time", "2.500x"},
		{"fleet:", "drain", "rate,", "postgres", "1", "replica", "/", "bbolt", "0.500x"},
		{"fleet:", "EnqueueManyTx", "time", "a", "record,", "100,000", "/", "1,000", "in", "one", "lane", "2.000x", "<=", "1.50", "MISSED"},
		{"fleet:", "EnqueueManyTx", "/", "1,000", "EnqueueTx", "calls,", "time", "a", "record", "0.250x"},
		{"idem", "Do", "/", "retryablehttp", "sending", "a", "key,", "POST", "in-memory", "time", "n/a", "<=", "1.00"},
		{"fleet:", "drain", "rate,", "postgres", "3", "replicas", "/", "bbolt", "n/a"},
		{"fleet", "db1ms-api5ms:", "pgqueue", "1", "replica", "/", "bbolt,", "drain", "rate,", "200", "lanes", "0.250x", ">=", "0.80", "MISSED"},
		{"fleet", "db1ms-api5ms:", "pgqueue", "3", "replicas", "/", "1,", "drain", "rate,", "200", "lanes", "3.000x", ">=", "2.70", "met"},
		{"fleet", "db1ms-api5ms:", "pgqueue", "/", "River,", "1", "replica,", "a", "lane", "per", "intent", "0.500x", ">=", "1.00", "MISSED"},
		{"fleet", "db1ms-api5ms:", "pgqueue", "200", "hot", "lanes", "/", "River,", "1", "replica", "0.556x"},
		{"fleet", "db1ms-api5ms:", "business", "tx", "with", "EnqueueTx", "/", "with", "River", "InsertTx,", "time", "1.250x", "<=", "1.00", "MISSED"},
		{"fleet", "db1ms-api5ms:", "batch", "tx,", "EnqueueManyTx", "/", "River", "InsertManyTx,", "time", "2.000x"},
		{"fleet", "none:", "pgqueue", "1", "replica", "/", "bbolt,", "drain", "rate,", "200", "lanes", "n/a", ">=", "0.60"},
	} {
		found := false
		for _, line := range strings.Split(out.String(), "\n") {
			if f := strings.Fields(line); len(f) >= len(want) && strings.Join(f[:len(want)], " ") == strings.Join(want, " ") {
				found = true
			}
		}
		if !found {
			t.Errorf("report lacks %q; got:\n%s", strings.Join(want, " "), out.String())
		}
	}
}

// TestPaired: when both benchmarks ran once a round, a ratio is the median of
// the rounds' ratios, not the ratio of the medians.
func TestPaired(t *testing.T) {
	const rounds = `BenchmarkClientCost/op=GET/client=raw-2 	 1	 100 ns/op
BenchmarkClientCost/op=GET/client=idem-do-2 	 1	 200 ns/op
BenchmarkClientCost/op=GET/client=raw-2 	 1	 300 ns/op
BenchmarkClientCost/op=GET/client=idem-do-2 	 1	 310 ns/op
BenchmarkClientCost/op=GET/client=raw-2 	 1	 200 ns/op
BenchmarkClientCost/op=GET/client=idem-do-2 	 1	 150 ns/op
`
	s := samples{}
	if err := s.read(strings.NewReader(rounds)); err != nil {
		t.Fatal(err)
	}
	got, ok := s.paired("BenchmarkClientCost/op=GET/client=idem-do", "BenchmarkClientCost/op=GET/client=raw", "ns/op")
	if !ok || got < 1.033 || got > 1.034 { // ratios 2, 1.033, 0.75; medians 200/200
		t.Errorf("paired = %v, %v; want 1.033", got, ok)
	}
	if _, ok := s.paired("BenchmarkClientCost/op=GET/client=idem-do", "BenchmarkClientCost/op=GET/client=none", "ns/op"); ok {
		t.Error("paired with a missing benchmark")
	}
	var out bytes.Buffer
	report(&out, s)
	if !strings.Contains(out.String(), "1.033x") {
		t.Errorf("report does not use the paired ratio:\n%s", out.String())
	}
}

// TestQueueOutageRow: BenchmarkQueueOutage's median time back is judged
// against 2 s, with the probes it cost beside it.
func TestQueueOutageRow(t *testing.T) {
	const rounds = `BenchmarkQueueOutage-2 	 1	 0 ns/op	 400 back-ms	 150 drain-ms	 60.00 probes/min
BenchmarkQueueOutage-2 	 1	 0 ns/op	 4000 back-ms	 4100 drain-ms	 18.00 probes/min
BenchmarkQueueOutage-2 	 1	 0 ns/op	 3000 back-ms	 3100 drain-ms	 18.00 probes/min
`
	s := samples{}
	if err := s.read(strings.NewReader(rounds)); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	report(&out, s)
	want := "queue outage: first send after the API is back, ms 3000 <= 2000.00 MISSED 18"
	if !strings.Contains(strings.Join(strings.Fields(out.String()), " "), want) {
		t.Errorf("report lacks %q; got:\n%s", want, out.String())
	}
}
