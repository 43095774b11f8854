package interop

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

// toxic is one toxiproxy toxic, as its JSON API describes it.
type toxic struct {
	Type       string         `json:"type"`
	Stream     string         `json:"stream"` // "upstream" (to the server) or "downstream" (to the client)
	Attributes map[string]int `json:"attributes"`
}

// route is a toxiproxy proxy with its toxics, named for reports.
type route struct {
	name   string
	toxics []toxic
}

// toxicRoutes are the faults of the toxiproxy tests: each of toxiproxy's
// latency, timeout, reset_peer, limit_data and slow_close toxics, on the way
// to the server (the request may be lost) and on the way back (the effect
// took place, the answer is lost or late). Latency is twice the client's
// attempt timeout, so that a delayed request or answer is a timed-out one.
func toxicRoutes(attemptTimeout time.Duration) []route {
	late := int(2 * attemptTimeout / time.Millisecond)
	return []route{
		{name: "latency-up", toxics: []toxic{{"latency", "upstream", map[string]int{"latency": late}}}},
		{name: "latency-down", toxics: []toxic{{"latency", "downstream", map[string]int{"latency": late}}}},
		{name: "timeout-up", toxics: []toxic{{"timeout", "upstream", map[string]int{"timeout": 100}}}},
		{name: "timeout-down", toxics: []toxic{{"timeout", "downstream", map[string]int{"timeout": 100}}}},
		{name: "reset-up", toxics: []toxic{{"reset_peer", "upstream", map[string]int{"timeout": 0}}}},
		{name: "reset-down", toxics: []toxic{{"reset_peer", "downstream", map[string]int{"timeout": 0}}}},
		// 40 bytes: the request line and part of the headers.
		{name: "limit-up", toxics: []toxic{{"limit_data", "upstream", map[string]int{"bytes": 40}}}},
		// 20 bytes: part of the status line.
		{name: "limit-down-status", toxics: []toxic{{"limit_data", "downstream", map[string]int{"bytes": 20}}}},
		// 300 bytes: all the headers (under 250 bytes) and part of the padded
		// body (over 500 bytes): the status arrives, the body is cut.
		{name: "limit-down-body", toxics: []toxic{{"limit_data", "downstream", map[string]int{"bytes": 300}}}},
		{name: "slow-close-up", toxics: []toxic{{"slow_close", "upstream", map[string]int{"delay": 300}}}},
		{name: "slow-close-down", toxics: []toxic{{"slow_close", "downstream", map[string]int{"delay": 300}}}},
	}
}

// toxicLab is toxiproxy's server package, in-process, with one proxy per
// route in front of one upstream, plus a clean proxy without toxics. Its
// dial function sends each new connection through a route its picker
// chooses.
type toxicLab struct {
	clean string            // address of the proxy without toxics
	addrs map[string]string // route name -> proxy address
	dials atomic.Int64      // connections its transports opened to a proxy
}

// startToxicLab starts the proxies in front of upstream (host:port) and
// stops them when the test ends.
func startToxicLab(t testing.TB, upstream string, routes []route) *toxicLab {
	t.Helper()
	api := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	t.Cleanup(func() { require.NoError(t, api.Collection.Clear()) })
	lab := &toxicLab{addrs: make(map[string]string)}
	add := func(name string, toxics []toxic) string {
		p := toxiproxy.NewProxy(api, name, "127.0.0.1:0", upstream)
		require.NoError(t, api.Collection.Add(p, true), "proxy %s", name)
		for _, tx := range toxics {
			b, err := json.Marshal(tx)
			require.NoError(t, err)
			_, err = p.Toxics.AddToxicJson(strings.NewReader(string(b)))
			require.NoError(t, err, "toxic %s on %s", b, name)
		}
		return p.Listen
	}
	lab.clean = add("clean", nil)
	for _, r := range routes {
		lab.addrs[r.name] = add(r.name, r.toxics)
	}
	return lab
}

// transport returns an HTTP transport whose every attempt opens a new
// connection (keep-alives off), through the route pick names ("" is the
// clean proxy).
func (lab *toxicLab) transport(pick func() string) *http.Transport {
	var d net.Dialer
	return &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			addr := lab.clean
			if name := pick(); name != "" {
				addr = lab.addrs[name]
			}
			conn, err := d.DialContext(ctx, network, addr)
			if err == nil {
				lab.dials.Add(1)
			}
			return conn, err
		},
	}
}

// connCount counts a server's connections as they open and close.
type connCount struct {
	opened, closed atomic.Int64
}

func (c *connCount) track(_ net.Conn, s http.ConnState) {
	switch s {
	case http.StateNew:
		c.opened.Add(1)
	case http.StateClosed, http.StateHijacked:
		c.closed.Add(1)
	}
}

// startCounted starts a test server for h that counts its connections, and
// closes it when the test ends.
func startCounted(t testing.TB, h http.Handler) (*httptest.Server, *connCount) {
	t.Helper()
	var c connCount
	ts := httptest.NewUnstartedServer(h)
	ts.Config.ConnState = c.track
	ts.Start()
	t.Cleanup(ts.Close)
	return ts, &c
}

// waitRelayed waits until the server counted by c has had a connection for
// each one the lab's transports opened, and every one has closed. A proxy
// opens its connection upstream as it accepts one and closes it once it has
// relayed everything, however late a toxic makes it: then every request the
// proxies carried has been handled, and no other can come.
func waitRelayed(t testing.TB, lab *toxicLab, c *connCount) {
	t.Helper()
	require.Eventually(t, func() bool {
		opened := c.opened.Load()
		return opened == lab.dials.Load() && c.closed.Load() == opened
	}, 30*time.Second, 5*time.Millisecond, "connections through the proxies still open")
}

// firstDialThrough returns a pick sending the first connection through the
// named route and every later one through the clean proxy.
func firstDialThrough(name string) func() string {
	var n atomic.Int64
	return func() string {
		if n.Add(1) == 1 {
			return name
		}
		return ""
	}
}

// randomPick returns a pick sending a connection through a toxic route with
// probability toxicShare, the routes equally likely, else through the clean
// proxy. It is safe for concurrent use.
func randomPick(seed uint64, routes []route, toxicShare float64) func() string {
	var mu sync.Mutex // guards r
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	return func() string {
		mu.Lock()
		defer mu.Unlock()
		if r.Float64() >= toxicShare {
			return ""
		}
		return routes[r.IntN(len(routes))].name
	}
}
