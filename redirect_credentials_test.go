package idem

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem/redact"
)

// landings records the header of each request that reaches /land/..., by
// path, on whichever of the servers sharing it the request reached.
type landings struct {
	mu   sync.Mutex // guards seen
	seen map[string][]http.Header
}

func (l *landings) land(_ http.ResponseWriter, r *http.Request) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen[r.URL.Path] = append(l.seen[r.URL.Path], r.Header.Clone())
}

func (l *landings) at(path string) []http.Header {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seen[path]
}

// hopper answers /go/{code}/{rest...} with a redirect of status code to
// target+"/land/"+rest, and records in l what lands under /land/.
func hopper(l *landings, target func() string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/go/{code}/{rest...}", func(w http.ResponseWriter, r *http.Request) {
		code, _ := strconv.Atoi(r.PathValue("code"))
		http.Redirect(w, r, target()+"/land/"+r.PathValue("rest"), code)
	})
	mux.HandleFunc("/land/", l.land)
	return mux
}

// TestRedirectCredentialsStayAtOrigin: a GET and a keyed POST carrying
// every credential header (redact.CredentialHeaders, and one a Client or
// Transport adds in CredentialHeaders) are redirected (301, 302, 303, 307, 308) to
// another host, another port, from https to http, or within their origin,
// through Do (the credentials from Authorize), through Transport with
// RedirectPolicy, and through Transport alone. Off the origin, no
// credential header arrives, nor the key, and a keyed write is not sent
// there at all; within it, every credential arrives, as before.
func TestRedirectCredentialsStayAtOrigin(t *testing.T) {
	const own = "x-shop-token" // a service's own, named in CredentialHeaders
	names := append(redact.CredentialHeaders(), http.CanonicalHeaderKey(own))
	l := &landings{seen: map[string][]http.Header{}}
	servers := func(target func() string) *httptest.Server {
		s := httptest.NewServer(hopper(l, target))
		t.Cleanup(s.Close)
		return s
	}
	other := servers(nil)
	var sameURL string
	same := servers(func() string { return "" })
	sameURL = same.URL
	port := servers(func() string { return other.URL })
	host := servers(func() string { return strings.Replace(sameURL, "127.0.0.1", "localhost", 1) })
	var secure *httptest.Server
	secure = httptest.NewTLSServer(hopper(l, func() string { return "http://" + strings.TrimPrefix(secure.URL, "https://") }))
	t.Cleanup(secure.Close)

	dests := []struct {
		name   string
		url    string
		hc     *http.Client
		leaves bool // the redirect leaves the origin
	}{
		{"another host", host.URL, httpClient(t, nil), true},
		{"another port", port.URL, httpClient(t, nil), true},
		{"https to http", secure.URL, clearClient(t, secure, other.Listener.Addr().String()), true},
		{"same origin", same.URL, httpClient(t, nil), false},
	}
	doors := []struct {
		name string
		send func(t *testing.T, hc *http.Client, method, url string)
	}{
		{"Do", func(t *testing.T, hc *http.Client, method, url string) {
			c, _ := testClient(t, hc)
			c.CredentialHeaders = []string{own}
			c.Authorize = func(_ context.Context, r *http.Request) error {
				for _, n := range names {
					r.Header.Set(n, "s3cret")
				}
				return nil
			}
			body := ""
			if method == http.MethodPost {
				body = "x"
			}
			if res, err := c.Do(context.Background(), mustIntent(t, method, url, body)); err == nil {
				res.Response.Body.Close()
			}
		}},
		{"Transport with RedirectPolicy", func(t *testing.T, hc *http.Client, method, url string) {
			tr, _ := testTransport(t, nil)
			tr.Base = hc.Transport
			tr.CredentialHeaders = []string{own}
			roundTripAll(t, &http.Client{Transport: tr, CheckRedirect: RedirectPolicy("", nil)}, names, method, url)
		}},
		{"Transport alone", func(t *testing.T, hc *http.Client, method, url string) {
			tr, _ := testTransport(t, nil)
			tr.Base = hc.Transport
			tr.CredentialHeaders = []string{own}
			roundTripAll(t, &http.Client{Transport: tr}, names, method, url)
		}},
	}
	codes := []int{http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect}
	for _, door := range doors {
		for _, ds := range dests {
			for _, code := range codes {
				for _, method := range []string{http.MethodGet, http.MethodPost} {
					name := door.name + "/" + ds.name + "/" + strconv.Itoa(code) + "/" + method
					t.Run(name, func(t *testing.T) {
						rest := strings.ReplaceAll(name, " ", "-")
						door.send(t, ds.hc, method, ds.url+"/go/"+strconv.Itoa(code)+"/"+rest)
						got := l.at("/land/" + rest)
						keepsMethod := code == http.StatusTemporaryRedirect || code == http.StatusPermanentRedirect
						if ds.leaves && method == http.MethodPost && keepsMethod {
							assert.Empty(t, got, "a keyed write is not sent off its origin")
							return
						}
						require.Len(t, got, 1, "the redirect is followed")
						for _, n := range names {
							want := "s3cret"
							if ds.leaves {
								want = ""
							}
							assert.Equal(t, want, got[0].Get(n), "%s", n)
						}
						if ds.leaves {
							assert.Empty(t, got[0].Get(DefaultKeyHeader), "the key stays on its origin")
						}
					})
				}
			}
		}
	}
}

// roundTripAll sends method to url through hc, keyed, with every one of
// names set to "s3cret".
func roundTripAll(t *testing.T, hc *http.Client, names []string, method, url string) {
	t.Helper()
	req, err := http.NewRequest(method, url, http.NoBody)
	if method == http.MethodPost {
		req, err = http.NewRequest(method, url, strings.NewReader("x"))
	}
	require.NoError(t, err)
	for _, n := range names {
		req.Header.Set(n, "s3cret")
	}
	req.Header.Set(DefaultKeyHeader, "k-1")
	if resp, err := hc.Do(req); err == nil {
		resp.Body.Close()
	}
}

// TestCredentialHeadersInIntent: NewIntent refuses every header of
// redact.CredentialHeaders in any letter case; a Client refuses, before
// sending anything, an intent that carries one of its own CredentialHeaders,
// through Do and Try (an invalid request: a queue fails such a record).
func TestCredentialHeadersInIntent(t *testing.T) {
	for _, n := range redact.CredentialHeaders() {
		for _, spelling := range []string{n, strings.ToLower(n), strings.ToUpper(n)} {
			_, err := NewIntent("POST", "https://h/p", nil, WithHeader(spelling, "s3cret"))
			assert.ErrorIs(t, err, ErrSecretHeader, "WithHeader(%q)", spelling)
		}
	}

	srv := newScripted(t, answer(201))
	c, _ := testClient(t, nil)
	c.CredentialHeaders = []string{"x-shop-token"}
	in := mustIntent(t, "POST", srv.URL, "x", WithHeader("X-Shop-Token", "s3cret"))
	_, err := c.Do(context.Background(), in)
	require.ErrorIs(t, err, ErrSecretHeader)
	assert.ErrorIs(t, err, ErrInvalidRequest)
	assert.ErrorIs(t, err, ErrNotApplied)
	assert.NotContains(t, err.Error(), "s3cret")
	_, err = c.Try(context.Background(), in, NoOutcome, 0)
	assert.ErrorIs(t, err, ErrSecretHeader)
	assert.ErrorIs(t, err, ErrInvalidRequest, "no attempt ever can be made")
	assert.Empty(t, srv.Requests(), "nothing was sent")

	plain, _ := testClient(t, nil)
	res, err := plain.Do(context.Background(), in)
	require.NoError(t, err, "a header no list names is the intent's own")
	res.Response.Body.Close()
	assert.Equal(t, "s3cret", srv.Requests()[0].header.Get("X-Shop-Token"))
}
