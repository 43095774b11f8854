package idemtest

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeClock is an Options.Now that moves only when told to.
type fakeClock struct {
	mu sync.Mutex // guards t
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// startServer starts a server on loopback and closes it when t ends.
func startServer(t *testing.T, opts Options) *Server {
	t.Helper()
	s := New(opts)
	require.NoError(t, s.Start())
	t.Cleanup(s.Close)
	return s
}

// startGated starts a server on loopback whose FaultDelay pauses the test
// ends (see pauseGate), and closes it when t ends.
func startGated(t *testing.T, opts Options) (*Server, pauseGate) {
	t.Helper()
	s := New(opts)
	gate := make(pauseGate)
	s.gate = gate
	require.NoError(t, s.Start())
	t.Cleanup(s.Close)
	return s, gate
}

// testClient dials through s without keep-alives: a reused connection
// would let net/http resend keyed requests by itself and blur the counts.
func testClient(t *testing.T, s *Server) *http.Client {
	t.Helper()
	tr := &http.Transport{DialContext: s.DialContext, DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 5 * time.Second}
}

// reply is a response read in full.
type reply struct {
	status int
	header http.Header
	body   string
}

// send makes one request, writing the key header by hand when key is not
// "". It returns errors rather than failing, so goroutines may call it.
func send(c *http.Client, method, url, key, body string) (reply, error) {
	req, err := http.NewRequest(method, url, bytes.NewBufferString(body))
	if err != nil {
		return reply{}, err
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := c.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, header: resp.Header, body: string(b)}, err
}

// mustSend is send for requests expected to get a response.
func mustSend(t *testing.T, c *http.Client, method, url, key, body string) reply {
	t.Helper()
	r, err := send(c, method, url, key, body)
	require.NoError(t, err, "%s %s", method, url)
	return r
}

// decodeJSON decodes resp's body into v.
func decodeJSON(resp *http.Response, v any) error {
	return json.NewDecoder(resp.Body).Decode(v)
}

// owner returns the owner token of key's record and whether one exists.
func owner(s *Server, key string) (uint64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, ok := s.records[key]
	if !ok {
		return 0, false
	}
	return rec.owner, true
}

// waitClaimed waits until key has a claimed record.
func waitClaimed(t *testing.T, s *Server, key string) {
	t.Helper()
	require.Eventually(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		rec, ok := s.records[key]
		return ok && rec.state == stateClaimed
	}, 10*time.Second, 2*time.Millisecond, "key %q never claimed", key)
}

// faultOnFirst injects f into the first request with each key.
func faultOnFirst(f Fault) func(*http.Request, string, int) Fault {
	return func(_ *http.Request, key string, seen int) Fault {
		if key != "" && seen == 0 {
			return f
		}
		return FaultNone
	}
}
