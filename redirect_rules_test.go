package idem

import (
	"net/http"
	"net/http/httptest"
	"strings"
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
				if tr.keyed(req) != (bc.name == "keyed") {
					b.Fatal("wrong answer")
				}
			}
		})
	}
}
