package latproxy

import (
	"bufio"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// echoServer answers each line it reads with the same line, on every
// connection, until the test ends.
func echoServer(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func start(t *testing.T, delay time.Duration, target string) *Proxy {
	t.Helper()
	p, err := Start(delay, To("tcp", target))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// echo sends one line through a new connection to addr and returns what
// came back and how long the round trip took, the connection made.
func echo(addr, line string) (string, time.Duration, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return "", 0, err
	}
	defer c.Close()
	return echoOn(c, line)
}

func echoOn(c net.Conn, line string) (string, time.Duration, error) {
	start := time.Now()
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		return "", 0, err
	}
	got, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSuffix(got, "\n"), time.Since(start), err
}

func TestRoundTripTakesTwiceTheDelay(t *testing.T) {
	const delay = 20 * time.Millisecond
	p := start(t, delay, echoServer(t))
	for _, line := range []string{"one", strings.Repeat("x", 100_000)} {
		got, took, err := echo(p.Addr(), line)
		if err != nil {
			t.Fatal(err)
		}
		if got != line {
			t.Errorf("echo of %d bytes came back as %d bytes", len(line), len(got))
		}
		if took < 2*delay {
			t.Errorf("round trip of %d bytes took %v, want at least %v", len(line), took, 2*delay)
		}
	}
}

// TestConcurrentRoundTrips: chunks are in flight together, so 100 round
// trips at once through a 5 ms proxy take about 10 ms, not 100 x 10 ms as
// through a proxy that forwarded one chunk at a time.
func TestConcurrentRoundTrips(t *testing.T) {
	const delay, n = 20 * time.Millisecond, 100
	p := start(t, delay, echoServer(t))
	conns := make([]net.Conn, n)
	for i := range conns {
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns[i] = c
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i, c := range conns {
		wg.Go(func() {
			line := strings.Repeat("y", i+1)
			got, took, err := echoOn(c, line)
			switch {
			case err != nil:
				errs <- err
			case got != line:
				errs <- io.ErrUnexpectedEOF
			case took < 2*delay:
				t.Errorf("a round trip took %v, want at least %v", took, 2*delay)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// Serial forwarding would take n x 2 x delay = 4 s at the least; a
	// quarter of that, 25 round trips' worth, leaves room for a loaded
	// machine (the race detector, late timers) where concurrent forwarding
	// takes about one round trip.
	if took, most := time.Since(start), n*2*delay/4; took > most {
		t.Errorf("%d concurrent round trips took %v, want under %v", n, took, most)
	}
}

func TestZeroDelayForwards(t *testing.T) {
	p := start(t, 0, echoServer(t))
	got, _, err := echo(p.Addr(), "now")
	if err != nil || got != "now" {
		t.Fatalf("echo = %q, %v, want %q", got, err, "now")
	}
}

func TestCloseEndsConnections(t *testing.T) {
	p, err := Start(time.Millisecond, To("tcp", echoServer(t)))
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "x\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Read(make([]byte, 1)); err == nil {
		t.Errorf("Read after Close = %d, nil, want an error", n)
	}
	if _, err := net.Dial("tcp", p.Addr()); err == nil {
		t.Error("Dial after Close succeeded, want refused")
	}
}

func TestBadInput(t *testing.T) {
	if _, err := Start(-time.Millisecond, To("tcp", "127.0.0.1:1")); err == nil || !strings.Contains(err.Error(), "negative") {
		t.Errorf("Start(-1ms) error = %v, want one saying negative", err)
	}
	if _, err := Start(time.Millisecond, nil); err == nil || !strings.Contains(err.Error(), "dial") {
		t.Errorf("Start(nil dial) error = %v, want one naming dial", err)
	}
	p := start(t, 0, "127.0.0.1:1") // nothing listens there: the client's connection just ends
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Error("Read through a proxy whose dial failed succeeded, want an error")
	}
}

// BenchmarkRoundTrip: one small round trip at a time through a proxy of
// 0.25 ms each way (a 0.5 ms round trip); rtt-us is its time, delay
// included, to compare with the delay asked for.
func BenchmarkRoundTrip(b *testing.B) {
	const delay = 250 * time.Microsecond
	p, err := Start(delay, To("tcp", echoServer(b)))
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	start := time.Now()
	for b.Loop() {
		if _, err := io.WriteString(c, "ping\n"); err != nil {
			b.Fatal(err)
		}
		if _, err := r.ReadString('\n'); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(time.Since(start).Microseconds())/float64(b.N), "rtt-us")
}
