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

func TestRedirectCrossHostDropsKeyAndCredentials(t *testing.T) {
	other := newScripted(t, answer(201))
	origin := httptest.NewServer(redirectTo(other.URL + "/elsewhere"))
	defer origin.Close()

	c, _ := testClient(t, nil)
	c.Authorize = func(_ context.Context, r *http.Request) error {
		r.Header.Set("Authorization", "Bearer secret")
		return nil
	}
	in := mustIntent(t, "POST", origin.URL+"/pay", "x")
	res, err := c.Do(context.Background(), in)
	require.NoError(t, err)
	res.Response.Body.Close()
	reqs := other.Requests()
	require.Len(t, reqs, 1)
	assert.Empty(t, reqs[0].key, "the key must not follow a redirect to another host")
	assert.Empty(t, reqs[0].auth, "credentials must not follow a redirect to another host")
	assert.Equal(t, "x", reqs[0].body)
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
	req := httptest.NewRequest("POST", "http://b.example/", nil)
	req.Header.Set("X-Key", "k")
	req.Header.Set("X-Idempotency-Key", "k")
	via := []*http.Request{httptest.NewRequest("POST", "http://a.example/", nil)}
	require.NoError(t, p(req, via))
	assert.Empty(t, req.Header.Get("X-Key"))
	assert.Empty(t, req.Header.Get("X-Idempotency-Key"))
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
	assert.Empty(t, other.Requests()[0].key)
}
