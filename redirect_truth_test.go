package idem

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Redirects followed by net/http (Client.Do) or hop by hop through an
// http.Client (Transport): a hop is not a resend, and a later hop cannot
// undo what an earlier one established (a write applied, or in doubt).

// a GET followed through a same-host 301 to a 404. Nothing is in doubt.
func TestRedirectFollowedIsNotResentGET(t *testing.T) {
	var mux http.ServeMux
	mux.HandleFunc("GET /a", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/b", http.StatusMovedPermanently) })
	mux.HandleFunc("GET /b", func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) })
	srv := httptest.NewServer(&mux)
	defer srv.Close()
	c, _ := testClient(t, nil)
	in := mustIntent(t, "GET", srv.URL+"/a", "")
	res, err := c.Do(context.Background(), in)
	require.NoError(t, err, "a 404 after a followed redirect is a plain answer")
	res.Response.Body.Close()
	assert.Equal(t, NotApplied, res.Outcome)
	assert.False(t, res.Attempts[0].Wire.Resent, "net/http did not resend anything: it followed a redirect")
}

// keyed POST -> same-host 307 -> 400. The 307 and the 400 are both
// definitive refusals: NotApplied.
func TestRedirectFollowedIsNotResentPOST(t *testing.T) {
	var mux http.ServeMux
	mux.HandleFunc("POST /a", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/b", http.StatusTemporaryRedirect) })
	mux.HandleFunc("POST /b", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "bad", 400) })
	srv := httptest.NewServer(&mux)
	defer srv.Close()
	c, _ := testClient(t, nil)
	res, err := c.Do(context.Background(), mustIntent(t, "POST", srv.URL+"/a", "x"))
	require.NoError(t, err)
	res.Response.Body.Close()
	assert.Equal(t, NotApplied, res.Outcome)
}

// the documented chain: keyed POST -> same-host 307 -> cross-host 307.
// RedirectPolicy's doc: "ends such an intent with ErrRedirected and NotApplied".
func TestRedirectSameHostThenCrossHost(t *testing.T) {
	other := newScripted(t, answer(201))
	var mux http.ServeMux
	mux.HandleFunc("POST /a", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/b", http.StatusTemporaryRedirect) })
	mux.HandleFunc("POST /b", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+"/c", http.StatusTemporaryRedirect)
	})
	srv := httptest.NewServer(&mux)
	defer srv.Close()
	c, _ := testClient(t, nil)
	in := mustIntent(t, "POST", srv.URL+"/a", "x")
	_, err := c.Do(context.Background(), in)
	require.ErrorIs(t, err, ErrRedirected)
	assert.Empty(t, other.Requests())
	assert.ErrorIs(t, err, ErrNotApplied, "the documented outcome")
	assert.False(t, asError(t, err).Attempts[0].Wire.Resent, "a followed redirect leaves nothing in doubt")
}

// TestTransportRedirectHops: a Transport in an http.Client (with
// RedirectPolicy, as documented) sees each redirect hop as its own
// RoundTrip; the Report must still tell the write's truth.
func TestTransportRedirectHops(t *testing.T) {
	tests := []struct {
		name   string
		method string
		first  func(w http.ResponseWriter, r *http.Request, n int) // the write's URL, call n from 1
		then   int                                                 // the status at /b
		want   Outcome
	}{
		{"POST 303, its GET 404: the POST applied", "POST", func(w http.ResponseWriter, r *http.Request, _ int) {
			http.Redirect(w, r, "/b", http.StatusSeeOther)
		}, 404, Applied},
		{"POST 302, its GET 200: done or moved, unknown", "POST", func(w http.ResponseWriter, r *http.Request, _ int) {
			http.Redirect(w, r, "/b", http.StatusFound)
		}, 200, Unknown},
		{"PUT 503 then 307, then 404: the first PUT may have applied", "PUT", func(w http.ResponseWriter, r *http.Request, n int) {
			if n == 1 {
				w.WriteHeader(503)
				return
			}
			http.Redirect(w, r, "/b", http.StatusTemporaryRedirect)
		}, 404, Unknown},
		{"POST 307, then 400: nothing in doubt", "POST", func(w http.ResponseWriter, r *http.Request, _ int) {
			http.Redirect(w, r, "/b", http.StatusTemporaryRedirect)
		}, 400, NotApplied},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var writes atomic.Int32
			var mux http.ServeMux
			mux.HandleFunc("/a", func(w http.ResponseWriter, r *http.Request) { tt.first(w, r, int(writes.Add(1))) })
			mux.HandleFunc("/b", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(tt.then) })
			srv := httptest.NewServer(&mux)
			defer srv.Close()
			tr, _ := testTransport(t, nil)
			hc := &http.Client{Transport: tr, CheckRedirect: RedirectPolicy("", nil)}
			var rep Report
			req, err := http.NewRequestWithContext(WithReport(context.Background(), &rep), tt.method, srv.URL+"/a", strings.NewReader("x"))
			require.NoError(t, err)
			req.Header.Set("Idempotency-Key", "k-1")
			resp, err := hc.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			assert.Equal(t, tt.then, resp.StatusCode)
			assert.Equal(t, tt.want, rep.Outcome)
		})
	}
}

// Transport in an http.Client with RedirectPolicy, as documented. The
// keyed POST is applied and answered 303; the follow-up GET cannot connect.
// hc.Do's error says ErrNotApplied: "safe to send again".
func TestTransportRedirect303ThenGetNeverSent(t *testing.T) {
	var posts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		posts.Add(1)
		http.Redirect(w, r, "http://127.0.0.1:1/orders/1", http.StatusSeeOther)
	}))
	defer srv.Close()
	tr, _ := testTransport(t, nil)
	hc := &http.Client{Transport: tr, CheckRedirect: RedirectPolicy("", nil)}
	var rep Report
	req, _ := http.NewRequestWithContext(WithReport(context.Background(), &rep), "POST", srv.URL+"/orders", strings.NewReader("x"))
	req.Header.Set("Idempotency-Key", "k-1")
	_, err := hc.Do(req)
	require.Error(t, err)
	assert.Equal(t, int32(1), posts.Load())
	assert.False(t, errors.Is(err, ErrNotApplied), "the POST was applied (303), yet the error says not applied")
	assert.NotEqual(t, NotApplied, rep.Outcome)
}

// TestTransportPassesHopByHopHeaders: the Transport refuses only what
// net/http refuses, and net/http sends these.
func TestTransportPassesHopByHopHeaders(t *testing.T) {
	srv := newScripted(t)
	tr, _ := testTransport(t, nil)
	req, _ := http.NewRequest("POST", srv.URL, strings.NewReader("x"))
	req.Header.Set("Connection", "close")
	req.Header.Set("Te", "trailers")
	req.Header.Set("Keep-Alive", "timeout=5")
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Len(t, srv.Requests(), 1)
}
