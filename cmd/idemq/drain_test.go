package main

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
)

// server answers every request with status and records what it saw.
type server struct {
	*httptest.Server
	mu       sync.Mutex
	keys     []string // the key header of each request
	auth     []string // the Authorization header of each request
	hijacked int      // requests whose connection was closed unanswered
}

// newServer starts a server answering status with header; status 0 closes
// the connection unanswered, leaving the attempt ambiguous.
func newServer(t *testing.T, keyHeader string, status int, header map[string]string) *server {
	s := &server{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.keys = append(s.keys, r.Header.Get(keyHeader))
		s.auth = append(s.auth, r.Header.Get("Authorization"))
		s.mu.Unlock()
		if status == 0 {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		for k, v := range header {
			w.Header().Set(k, v)
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *server) seen() (keys, auth []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string{}, s.keys...), append([]string{}, s.auth...)
}

func TestDrain(t *testing.T) {
	tests := []struct {
		name      string
		keyHeader string
		args      []string
		stderr    string // what the progress report shows
	}{
		{"plain line", idem.DefaultKeyHeader, nil, "idemq: draining 5 records from "},
		{"progress bar", idem.DefaultKeyHeader, []string{"--progress", "bar"}, "(5/5"},
		{"key header", "X-Idem-Key", []string{"--key-header", "X-Idem-Key"}, "idemq: draining 5 records"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newServer(t, tt.keyHeader, http.StatusCreated, nil)
			url := srv.URL + "/pay?token=s3cret"
			var ins []*idem.Intent
			for _, lane := range []string{"a", "a", "b", "", ""} {
				ins = append(ins, intent(t, url, "x", idem.WithLane(lane)))
			}
			file, _ := queueFile(t, ins...)

			args := append([]string{"--file", file, "drain", "--auth-env", "IDEMQ_TEST_AUTH", "--timeout", "10s"}, tt.args...)
			r := idemq(t, []string{"IDEMQ_TEST_AUTH=Bearer t0ken"}, args...)
			require.Equal(t, 0, r.code, "stderr:\n%s", r.stderr)
			assert.Contains(t, r.stdout, "drained "+file)
			assert.Contains(t, r.stdout, ": 5 settled (5 done, 0 failed, 0 expired), 0 pending")
			assert.Contains(t, r.stderr, tt.stderr)
			noSecret(t, r, "t0ken")

			keys, auth := srv.seen()
			require.Len(t, keys, 5, "one attempt per record")
			for i, in := range ins {
				assert.Contains(t, keys, in.Key(), "intent %d was not sent with its key", i)
			}
			for _, a := range auth {
				assert.Equal(t, "Bearer t0ken", a, "--auth-env sets Authorization")
			}
			assert.Equal(t, []recordView{}, listed(t, ok(t, file, "ls", "--json", "--state", "pending")))
			assert.Len(t, listed(t, ok(t, file, "ls", "--json", "--state", "done")), 5)
		})
	}
}

func TestDrainNothing(t *testing.T) {
	file, _ := queueFile(t)
	r := ok(t, file, "drain")
	assert.Contains(t, r.stdout, "nothing to drain in "+file)
}

// TestDrainTimeout: records that must wait (a Retry-After of an hour) keep
// the drain going until --timeout, which exits 1 and leaves them queued;
// stats then finds them at risk of a short horizon.
func TestDrainTimeout(t *testing.T) {
	srv := newServer(t, idem.DefaultKeyHeader, http.StatusServiceUnavailable, map[string]string{"Retry-After": "3600"})
	file, ids := queueFile(t, intent(t, srv.URL+"/pay?token=s3cret", "x"))

	r := idemq(t, nil, "--file", file, "drain", "--timeout", "1s")
	assert.Equal(t, exitError, r.code, "stderr:\n%s", r.stderr)
	assert.Contains(t, r.stdout, ": 0 settled (0 done, 0 failed, 0 expired), 1 pending")
	assert.Contains(t, r.stderr, "idemq: drain: 1 records still pending after 1s, kept in the queue")
	noSecret(t, r)

	v := listed(t, ok(t, file, "ls", "--json"))
	require.Len(t, v, 1)
	assert.Equal(t, "pending", v[0].State)
	assert.Equal(t, 1, v[0].Attempts)
	assert.Equal(t, 503, v[0].LastStatus)
	require.NotNil(t, v[0].FirstSentAt)

	var st statsView
	require.NoError(t, jsonOf(ok(t, file, "stats", "--json"), &st)) // 24h: not at risk
	assert.Empty(t, st.Horizon.AtRisk)
	require.NoError(t, jsonOf(ok(t, file, "stats", "--json", "--retention", "2h", "--margin", "1h", "--within", "1h"), &st))
	assert.Equal(t, ids, st.Horizon.AtRisk, "sent now, forgotten in 2h less 1h: within the hour")
	assert.NotNil(t, st.Horizon.Soonest)
	r = ok(t, file, "stats", "--retention", "2h", "--margin", "1h")
	assert.Contains(t, r.stdout, "horizon at risk: 1 within 1h0m0s (retention 2h0m0s, margin 1h0m0s)")
}
