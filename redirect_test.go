package idem

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func redirectTo(target string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target, http.StatusTemporaryRedirect)
	})
}

// TestRedirectCrossHostKeyedWriteNotFollowed: a keyed POST redirected to
// another host would arrive there without its key and be retried there as if
// keyed; it is not followed, and the intent ends NotApplied with
// ErrRedirected, through Do and through Attempt (as a queue drives it).
func TestRedirectCrossHostKeyedWriteNotFollowed(t *testing.T) {
	for _, code := range []int{http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		t.Run(http.StatusText(code), func(t *testing.T) {
			other := newScripted(t, answer(201), answer(201))
			origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, other.URL+"/elsewhere", code)
			}))
			defer origin.Close()

			c, _ := testClient(t, nil)
			in := mustIntent(t, "POST", origin.URL+"/pay", "x")
			_, err := c.Do(context.Background(), in)
			require.ErrorIs(t, err, ErrRedirected)
			assert.ErrorIs(t, err, ErrNotApplied, "the origin redirected rather than acting")
			e := asError(t, err)
			assert.Len(t, e.Attempts, 1, "not retried")
			assert.Equal(t, code, e.Status)
			assert.Contains(t, e.Error(), "another host")

			s, err := c.Try(context.Background(), mustIntent(t, "POST", origin.URL+"/pay", "y"), NoOutcome, 0)
			require.NoError(t, err)
			s.Response.Body.Close()
			assert.Equal(t, ActionStop, s.Action)
			assert.Equal(t, NotApplied, s.Outcome)
			assert.Contains(t, s.Reason, "another host")
			assert.Empty(t, other.Requests(), "nothing reached the other host")
		})
	}
}

// TestRedirectCrossHostDropsCredentials: a safe request follows a redirect
// to another host, without credentials.
func TestRedirectCrossHostDropsCredentials(t *testing.T) {
	other := newScripted(t, answer(200))
	origin := httptest.NewServer(redirectTo(other.URL + "/elsewhere"))
	defer origin.Close()

	c, _ := testClient(t, nil)
	c.Authorize = func(_ context.Context, r *http.Request) error {
		r.Header.Set("Authorization", "Bearer secret")
		return nil
	}
	res, err := c.Do(context.Background(), mustIntent(t, "GET", origin.URL+"/doc", ""))
	require.NoError(t, err)
	res.Response.Body.Close()
	reqs := other.Requests()
	require.Len(t, reqs, 1)
	assert.Empty(t, reqs[0].auth, "credentials must not follow a redirect to another host")
}

func TestRedirectSameHostKeepsKey(t *testing.T) {
	var mux http.ServeMux
	srv := httptest.NewServer(&mux)
	defer srv.Close()
	var gotKey string
	mux.Handle("/old", redirectTo("/new"))
	mux.HandleFunc("/new", func(w http.ResponseWriter, r *http.Request) {
		gotKey = r.Header.Get("Idempotency-Key")
		w.WriteHeader(201)
	})
	c, _ := testClient(t, nil)
	in := mustIntent(t, "POST", srv.URL+"/old", "x")
	res, err := c.Do(context.Background(), in)
	require.NoError(t, err)
	res.Response.Body.Close()
	assert.Equal(t, in.Key(), gotKey)
}

func TestRedirectPolicyChains(t *testing.T) {
	stop := errors.New("no redirects here")
	hc := httpClient(t, nil)
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return stop }
	other := newScripted(t, answer(201))
	origin := httptest.NewServer(redirectTo(other.URL))
	defer origin.Close()
	c, _ := testClient(t, hc)
	_, err := c.Do(context.Background(), mustIntent(t, "GET", origin.URL, ""))
	assert.ErrorIs(t, err, stop, "the caller's own CheckRedirect still runs")
	assert.Empty(t, other.Requests())

	p := RedirectPolicy("X-Key", nil)
	req := httptest.NewRequest("GET", "http://b.example/", nil)
	req.Header.Set("X-Key", "k")
	req.Header.Set("X-Idempotency-Key", "k")
	via := []*http.Request{httptest.NewRequest("POST", "http://a.example/", nil)}
	via[0].Header.Set("X-Key", "k")
	require.NoError(t, p(req, via), "a 303's GET follows")
	assert.Empty(t, req.Header.Get("X-Key"))
	assert.Empty(t, req.Header.Get("X-Idempotency-Key"))
	post := httptest.NewRequest("POST", "http://b.example/", nil)
	assert.ErrorIs(t, p(post, via), http.ErrUseLastResponse, "a keyed POST is not sent on to another host")
	assert.ErrorIs(t, RedirectPolicy("", nil)(post, []*http.Request{httptest.NewRequest("PATCH", "http://a.example/", nil)}), nil,
		"an unkeyed request follows")
	ten := make([]*http.Request, 10)
	for i := range ten {
		ten[i] = via[0]
	}
	assert.ErrorContains(t, p(req, ten), "stopped after 10 redirects")
}

// TestRedirectTransport: with the policy set on the http.Client, the
// Transport's requests behave the same.
func TestRedirectTransport(t *testing.T) {
	other := newScripted(t, answer(201))
	origin := httptest.NewServer(redirectTo(other.URL))
	defer origin.Close()
	tr, _ := testTransport(t, nil)
	hc := &http.Client{Transport: tr, CheckRedirect: RedirectPolicy("", nil)}
	req, _ := http.NewRequest("POST", origin.URL, nil)
	req.Header.Set("Idempotency-Key", "k-1")
	resp, err := hc.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusTemporaryRedirect, resp.StatusCode, "the caller gets the redirect")
	assert.Empty(t, other.Requests(), "a keyed POST is not sent on to another host")

	req, _ = http.NewRequest("GET", origin.URL, nil)
	req.Header.Set("Idempotency-Key", "k-2")
	resp, err = hc.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Len(t, other.Requests(), 1)
	assert.Empty(t, other.Requests()[0].key, "a safe request follows, without the key")
}
