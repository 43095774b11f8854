// Package latproxy is a TCP proxy that delays each direction of every
// connection by a fixed one-way delay, to put a network's latency between
// two programs on one machine (a queue and its database, a queue and an
// HTTP server) without limiting their throughput.
//
// Each direction of a connection is a pair of goroutines and a timed queue:
// one reads chunks as they come and stamps each with the time it may leave
// (read time plus the delay), the other writes each chunk when its time
// comes. So many chunks are in flight at once, as on a network, and a round
// trip through the proxy takes at least twice the delay. A zero delay
// forwards at once.
//
// # Caveats
//
// The delay is a floor, not an exact figure: on Linux the writer waits on
// a timerfd (see sleeper), tens of microseconds late, more on a loaded
// machine; elsewhere on the runtime's timers, a millisecond or more late.
// Measure the round trip through the proxy when it matters
// (BenchmarkRoundTrip, and BenchmarkFleetTx's select1-us).
// Chunks queue in memory without a bound while the receiver keeps up; a
// receiver that stops reading stops the proxy's writer, and the queue of
// that direction then holds at most queueLen chunks before the reader
// waits too.
package latproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// queueLen is how many chunks one direction holds in flight before its
// reader waits for its writer.
const queueLen = 4096

// chunkSize is the most one read takes.
const chunkSize = 32 << 10

// Proxy listens on a loopback TCP address and forwards each connection,
// delayed, to what its dial function connects to. It is safe for
// concurrent use.
type Proxy struct {
	ln    net.Listener
	delay time.Duration
	dial  func(ctx context.Context) (net.Conn, error)
	ctx   context.Context // cancelled by Close: stops dials in progress
	stop  context.CancelFunc

	mu     sync.Mutex // guards conns and closed
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup // the accept loop and every connection's goroutines
}

// Start listens on 127.0.0.1 at a free port and forwards every connection
// it accepts to a connection from dial, each direction delayed by delay.
// Close stops it. A negative delay or a nil dial is refused.
func Start(delay time.Duration, dial func(ctx context.Context) (net.Conn, error)) (*Proxy, error) {
	if delay < 0 {
		return nil, fmt.Errorf("latproxy: delay %v is negative", delay)
	}
	if dial == nil {
		return nil, errors.New("latproxy: dial is nil")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("latproxy: %w", err)
	}
	ctx, stop := context.WithCancel(context.Background())
	p := &Proxy{ln: ln, delay: delay, dial: dial, ctx: ctx, stop: stop, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// To returns a dial function for Start that connects to address on
// network ("tcp", "unix").
func To(network, address string) func(ctx context.Context) (net.Conn, error) {
	var d net.Dialer
	return func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, network, address) }
}

// Addr returns the address the proxy listens on, host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Delay returns the one-way delay.
func (p *Proxy) Delay() time.Duration { return p.delay }

// Close stops listening and closes every connection through the proxy, and
// returns when all its goroutines have ended.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.stop()
	err := p.ln.Close()
	p.wg.Wait()
	return err
}

// track notes c as open, to be closed by Close; it reports false, and
// closes c, when the proxy is closed already.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		if !p.track(c) {
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// serve connects c to a new upstream connection and runs both directions
// until both have ended.
func (p *Proxy) serve(c net.Conn) {
	defer p.wg.Done()
	defer p.untrack(c)
	up, err := p.dial(p.ctx)
	if err != nil {
		return
	}
	if !p.track(up) {
		return
	}
	defer p.untrack(up)
	var both sync.WaitGroup
	both.Add(2)
	go func() { defer both.Done(); p.pipe(up, c) }()
	go func() { defer both.Done(); p.pipe(c, up) }()
	both.Wait()
}

// chunk is bytes read at a time; nil data with err set ends the direction.
type chunk struct {
	due  time.Time
	data []byte
	err  error
}

// pipe forwards what src sends to dst, each chunk delay after it was read.
// At src's end it half-closes dst, when dst can, so that the other
// direction carries on; on an error it closes both.
func (p *Proxy) pipe(dst, src net.Conn) {
	q := make(chan chunk, queueLen)
	done := make(chan struct{})
	go func() { // the writer
		defer close(done)
		s := newSleeper()
		defer s.close()
		for ch := range q {
			if wait := time.Until(ch.due); wait > 0 {
				s.sleep(wait)
			}
			if ch.err != nil {
				if cw, ok := dst.(interface{ CloseWrite() error }); ok && errors.Is(ch.err, io.EOF) {
					_ = cw.CloseWrite()
				} else {
					dst.Close()
				}
				return
			}
			if _, err := dst.Write(ch.data); err != nil {
				dst.Close()
				src.Close()
				return
			}
		}
	}()
	buf := make([]byte, chunkSize)
	for {
		n, err := src.Read(buf)
		now := time.Now()
		if n > 0 {
			select {
			case q <- chunk{due: now.Add(p.delay), data: append([]byte(nil), buf[:n]...)}:
			case <-done: // the writer gave up
				src.Close()
				return
			}
		}
		if err != nil {
			select {
			case q <- chunk{due: now.Add(p.delay), err: err}:
			case <-done:
			}
			close(q)
			<-done
			return
		}
	}
}
