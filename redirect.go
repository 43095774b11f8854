package idem

import (
	"fmt"
	"net/http"
)

// maxRedirects matches net/http's default policy.
const maxRedirects = 10

// RedirectPolicy returns an http.Client CheckRedirect function that removes
// the idempotency key and credentials from a redirected request bound for
// another host (host and port), then defers to next (nil means net/http's
// default: stop after 10 redirects). header names the key header; ""
// means DefaultKeyHeader. X-Idempotency-Key, Authorization, Cookie and
// Proxy-Authorization go too.
//
// A key is an operation's identity at one server: presented to another host
// it means nothing there, or collides with an unrelated operation. net/http
// forwards such headers to another port of the same host name, and the key
// header to any host. Client.Do applies this policy to its HTTPClient by
// itself; set it on an http.Client that uses Transport:
//
//	hc := &http.Client{Transport: &idem.Transport{}, CheckRedirect: idem.RedirectPolicy("", nil)}
func RedirectPolicy(header string, next func(req *http.Request, via []*http.Request) error) func(req *http.Request, via []*http.Request) error {
	header = keyHeaderName(header)
	return func(req *http.Request, via []*http.Request) error {
		if len(via) > 0 && req.URL.Host != via[0].URL.Host {
			for _, h := range [...]string{header, "X-Idempotency-Key", "Authorization", "Cookie", "Proxy-Authorization"} {
				req.Header.Del(h)
			}
		}
		if next != nil {
			return next(req, via)
		}
		if len(via) >= maxRedirects {
			return fmt.Errorf("idem: stopped after %d redirects", maxRedirects)
		}
		return nil
	}
}
