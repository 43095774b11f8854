package idem

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestKeyHeaderAnyCase: a key set under a map key that is not canonical
// ("idempotency-key") is sent by net/http as it is, and is the same header to
// the server; the redirect rule and the Transport's key detection see it.
func TestKeyHeaderAnyCase(t *testing.T) {
	for _, name := range []string{"idempotency-key", "IDEMPOTENCY-KEY", "x-idempotency-key"} {
		t.Run(name, func(t *testing.T) {
			other := newScripted(t, answer(201))
			origin := httptest.NewServer(redirectTo(other.URL + "/elsewhere"))
			defer origin.Close()
			tr, _ := testTransport(t, nil)
			hc := &http.Client{Transport: tr, CheckRedirect: RedirectPolicy("", nil)}
			req, _ := http.NewRequest("POST", origin.URL+"/pay", strings.NewReader("x"))
			req.Header[name] = []string{"k-1"}
			resp, err := hc.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			assert.Equal(t, http.StatusTemporaryRedirect, resp.StatusCode, "the caller gets the redirect")
			assert.Empty(t, other.Requests(), "a keyed POST is not sent on to another host")

			// Keyed, an ambiguous POST is retried.
			srv := newScripted(t, answer(503), answer(201))
			req, _ = http.NewRequest("POST", srv.URL, strings.NewReader("x"))
			req.Header[name] = []string{"k-2"}
			resp, err = tr.RoundTrip(req)
			require.NoError(t, err)
			resp.Body.Close()
			assert.Equal(t, 201, resp.StatusCode, "a keyed POST answered 503 is retried")
			assert.Len(t, srv.Requests(), 2)
		})
	}

	// A safe request to another host loses the key in every spelling.
	p := RedirectPolicy("X-Key", nil)
	req := httptest.NewRequest("GET", "http://b.example/", nil)
	req.Header["x-key"] = []string{"k"}
	req.Header["X-KEY"] = []string{"k"}
	req.Header["x-idempotency-key"] = []string{"k"}
	req.Header["authorization"] = []string{"Bearer secret"}
	via := []*http.Request{httptest.NewRequest("GET", "http://a.example/", nil)}
	require.NoError(t, p(req, via))
	assert.Empty(t, req.Header, "got %v, want no key or credential in any case", req.Header)
}

// TestAuthorizeKeepsKey: an Authorize hook that removes or changes the key
// header would send a keyless write that the Client retries as keyed. The
// attempt stops before anything is sent.
func TestAuthorizeKeepsKey(t *testing.T) {
	tests := []struct {
		name string
		hook func(r *http.Request)
	}{
		{"deletes the key", func(r *http.Request) { r.Header.Del("Idempotency-Key") }},
		{"replaces the header map", func(r *http.Request) { r.Header = http.Header{"Authorization": {"Bearer t"}} }},
		{"changes the key", func(r *http.Request) { r.Header.Set("Idempotency-Key", "other") }},
		{"adds a second key line", func(r *http.Request) { r.Header["idempotency-key"] = []string{"other"} }},
		{"empties the key", func(r *http.Request) { r.Header["Idempotency-Key"] = nil }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newScripted(t, answer(503), answer(503), answer(503), answer(503))
			c, _ := testClient(t, nil)
			c.Authorize = func(_ context.Context, r *http.Request) error { tt.hook(r); return nil }
			_, err := c.Do(context.Background(), mustIntent(t, "POST", srv.URL, "x"))
			require.ErrorIs(t, err, ErrInvalidRequest)
			assert.ErrorIs(t, err, ErrNotApplied)
			assert.Empty(t, srv.Requests(), "nothing is sent without the intent's key")
		})
	}

	t.Run("keeps the key", func(t *testing.T) {
		srv := newScripted(t, answer(201))
		c, _ := testClient(t, nil)
		c.KeyHeader = "x-key"
		c.KeySFString = true
		c.Authorize = func(_ context.Context, r *http.Request) error {
			h := r.Header.Clone() // a new map with the same fields is fine
			h.Set("Authorization", "Bearer t")
			r.Header = h
			return nil
		}
		in := mustIntent(t, "POST", srv.URL, "x")
		res, err := c.Do(context.Background(), in)
		require.NoError(t, err)
		res.Response.Body.Close()
		require.Len(t, srv.Requests(), 1)
		assert.Equal(t, `"`+in.Key()+`"`, srv.Requests()[0].header.Get("X-Key"))
	})
}

// tlsDrop is an https server whose handler answers, and a plain server that
// a redirect to http://<the https server's host:port> reaches: the same URL
// host, TLS dropped, as https://example.com -> http://example.com.
type tlsDrop struct {
	secure *httptest.Server
	plain  *scripted
	hc     *http.Client
}

func newTLSDrop(t *testing.T, h http.Handler) *tlsDrop {
	t.Helper()
	d := &tlsDrop{secure: httptest.NewTLSServer(h), plain: newScripted(t, answer(201), answer(201))}
	t.Cleanup(d.secure.Close)
	d.hc = clearClient(t, d.secure, d.plain.Listener.Addr().String())
	return d
}

// clearClient is an http.Client that trusts the https server secure and
// dials every plain http request to plainAddr: http://<secure's host:port>
// lands there.
func clearClient(t *testing.T, secure *httptest.Server, plainAddr string) *http.Client {
	t.Helper()
	tr := secure.Client().Transport.(*http.Transport).Clone()
	cfg := tr.TLSClientConfig.Clone()
	cfg.ServerName = "127.0.0.1"
	var dialer net.Dialer
	tr.DialTLSContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dialer.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		tc := tls.Client(conn, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			conn.Close()
			return nil, err
		}
		return tc, nil
	}
	// Only plain http dials through DialContext: to the plain server.
	tr.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
		return dialer.DialContext(ctx, network, plainAddr)
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// insecureURL is the https server's URL with http.
func (d *tlsDrop) insecureURL(path string) string {
	return "http://" + strings.TrimPrefix(d.secure.URL, "https://") + path
}

// TestRedirectDropsTLS: a keyed write answered 307 to http on the same host
// would carry its key and credentials in clear; it is not followed, through
// Do and through Transport. A safe request follows without them.
func TestRedirectDropsTLS(t *testing.T) {
	var d *tlsDrop
	d = newTLSDrop(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, d.insecureURL("/clear"), http.StatusTemporaryRedirect)
	}))
	auth := func(_ context.Context, r *http.Request) error {
		r.Header.Set("Authorization", "Bearer secret")
		return nil
	}

	c, _ := testClient(t, d.hc)
	c.Authorize = auth
	_, err := c.Do(context.Background(), mustIntent(t, "POST", d.secure.URL+"/pay", "x"))
	require.ErrorIs(t, err, ErrRedirected)
	assert.ErrorIs(t, err, ErrNotApplied)
	e := asError(t, err)
	assert.Len(t, e.Attempts, 1, "not retried")
	assert.Contains(t, e.Reason, "https to http")
	assert.Empty(t, d.plain.Requests(), "Do: nothing went out in clear")

	tr, _ := testTransport(t, nil)
	tr.Base = d.hc.Transport
	hc := &http.Client{Transport: tr, CheckRedirect: RedirectPolicy("", nil)}
	req, _ := http.NewRequest("PUT", d.secure.URL+"/pay", strings.NewReader("x"))
	req.Header.Set("Idempotency-Key", "k-1")
	req.Header.Set("Authorization", "Bearer secret")
	resp, err := hc.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusTemporaryRedirect, resp.StatusCode, "the caller gets the redirect")
	assert.Empty(t, d.plain.Requests(), "Transport: nothing went out in clear")

	res, err := c.Do(context.Background(), mustIntent(t, "GET", d.secure.URL+"/doc", ""))
	require.NoError(t, err)
	res.Response.Body.Close()
	reqs := d.plain.Requests()
	require.Len(t, reqs, 1, "a safe request follows")
	assert.Empty(t, reqs[0].auth, "credentials do not go out in clear")
}

// TestTransportRefusesHopOffOrigin: an http.Client without RedirectPolicy
// follows a keyed write's 307 anywhere; the Transport, which sees the hop,
// does not send it off its origin (another host, or https to http), and a
// hop that stays is sent.
func TestTransportRefusesHopOffOrigin(t *testing.T) {
	var d *tlsDrop
	d = newTLSDrop(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, d.insecureURL("/clear"), http.StatusTemporaryRedirect)
	}))
	other := newScripted(t, answer(201))
	offHost := httptest.NewServer(redirectTo(other.URL + "/elsewhere"))
	defer offHost.Close()
	same := newScripted(t, answer(201))
	onHost := httptest.NewServer(redirectTo(same.URL + "/here"))
	defer onHost.Close()
	tests := []struct {
		name   string
		url    string
		base   http.RoundTripper
		reason string
	}{
		{"https to http", d.secure.URL + "/pay", d.hc.Transport, "https to http"},
		{"another host", offHost.URL + "/pay", nil, "another host"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr, _ := testTransport(t, nil)
			tr.Base = tt.base
			hc := &http.Client{Transport: tr} // no RedirectPolicy
			var rep Report
			req, _ := http.NewRequestWithContext(WithReport(context.Background(), &rep), "POST", tt.url, strings.NewReader("x"))
			req.Header["idempotency-key"] = []string{"k-1"}
			req.Header.Set("Authorization", "Bearer secret")
			_, err := hc.Do(req)
			require.ErrorIs(t, err, ErrRedirected)
			assert.Equal(t, NotApplied, rep.Outcome, "every answer was a 307")
			assert.Contains(t, err.Error(), tt.reason)
		})
	}
	assert.Empty(t, d.plain.Requests(), "nothing went out in clear")
	assert.Empty(t, other.Requests(), "nothing went to another host")

	// The client's own host name and port, where the key belongs: followed.
	// (Two loopback servers differ by port, so this one redirects a GET.)
	tr, _ := testTransport(t, nil)
	hc := &http.Client{Transport: tr}
	req, _ := http.NewRequest("GET", onHost.URL+"/doc", nil)
	resp, err := hc.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 201, resp.StatusCode, "a safe request follows")
	assert.Len(t, same.Requests(), 1)
}

// TestRedirectLoop: a request answered with a redirect to itself for ever.
// Every answer was a redirect: one run of hops, not one per attempt, and
// the same answer through Do and Transport.
func TestRedirectLoop(t *testing.T) {
	tests := []struct {
		method string
		status int
		want   Outcome
	}{
		{"POST", http.StatusTemporaryRedirect, NotApplied},
		{"PUT", http.StatusPermanentRedirect, NotApplied},
		{"GET", http.StatusFound, NotApplied},
		// A 302 to a POST may mean "done, see there": the loop of GETs
		// after it does not judge the POST.
		{"POST", http.StatusFound, Unknown},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+http.StatusText(tt.status), func(t *testing.T) {
			var hits atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				hits.Add(1)
				http.Redirect(w, r, r.URL.Path, tt.status)
			}))
			defer srv.Close()
			body := ""
			if tt.method != "GET" {
				body = "x"
			}

			c, _ := testClient(t, nil)
			_, err := c.Do(context.Background(), mustIntent(t, tt.method, srv.URL+"/loop", body))
			require.ErrorIs(t, err, ErrRedirected)
			e := asError(t, err)
			assert.Equal(t, tt.want, e.Outcome, "Do")
			assert.Len(t, e.Attempts, 1, "Do: not retried")
			assert.Equal(t, tt.status, e.Status)
			assert.Equal(t, int32(maxRedirects), hits.Load(), "Do: one run of hops")

			hits.Store(0)
			tr, _ := testTransport(t, nil)
			hc := &http.Client{Transport: tr, CheckRedirect: RedirectPolicy("", nil)}
			var rep Report
			req, _ := http.NewRequestWithContext(WithReport(context.Background(), &rep), tt.method, srv.URL+"/loop", strings.NewReader(body))
			req.Header.Set("Idempotency-Key", "k-1")
			_, err = hc.Do(req)
			require.ErrorIs(t, err, ErrRedirected)
			assert.Equal(t, tt.want, rep.Outcome, "Transport")
			assert.Equal(t, int32(maxRedirects), hits.Load(), "Transport: one run of hops")
		})
	}
}

// BenchmarkTransportKeyed: key detection runs on every RoundTrip.
func BenchmarkTransportKeyed(b *testing.B) {
	h := http.Header{
		"User-Agent": {"sdk/1.0"}, "Content-Type": {"application/json"}, "Accept": {"application/json"},
		"Authorization": {"Bearer t"}, "X-Request-Id": {"r-1"},
	}
	keyed := h.Clone()
	keyed.Set("Idempotency-Key", "k-1")
	var tr Transport
	for _, bc := range []struct {
		name string
		h    http.Header
	}{{"keyed", keyed}, {"unkeyed", h}} {
		req := &http.Request{Method: "POST", Header: bc.h}
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				if (tr.key(req) != "") != (bc.name == "keyed") {
					b.Fatal("wrong answer")
				}
			}
		})
	}
}

// TestRedirectLoopAfter303: the POST was applied (303); the loop of its GET
// does not judge it, and it is not resent.
func TestRedirectLoopAfter303(t *testing.T) {
	var posts, gets atomic.Int32
	var mux http.ServeMux
	mux.HandleFunc("POST /orders", func(w http.ResponseWriter, r *http.Request) {
		posts.Add(1)
		http.Redirect(w, r, "/orders/1", http.StatusSeeOther)
	})
	mux.HandleFunc("GET /orders/1", func(w http.ResponseWriter, r *http.Request) {
		gets.Add(1)
		http.Redirect(w, r, "/orders/1", http.StatusFound)
	})
	srv := httptest.NewServer(&mux)
	defer srv.Close()
	c, _ := testClient(t, nil)
	res, err := c.Do(context.Background(), mustIntent(t, "POST", srv.URL+"/orders", "x"))
	require.NoError(t, err)
	defer res.Response.Body.Close()
	assert.Equal(t, Applied, res.Outcome)
	require.Len(t, res.Attempts, 1)
	assert.Equal(t, http.StatusSeeOther, res.Attempts[0].Status)
	assert.Equal(t, int32(1), posts.Load(), "not resent")
	assert.Equal(t, int32(maxRedirects-1), gets.Load())
}
