package idem

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/idem-go/idem/internal/anycase"
	"github.com/idem-go/idem/internal/methods"
	"github.com/idem-go/idem/redact"
)

// maxRedirects matches net/http's default policy.
const maxRedirects = 10

// RedirectPolicy returns an http.Client CheckRedirect function for redirects
// that leave the request's origin: to another host (host and port), or from
// https to http. A keyed request whose redirect keeps a method that is not
// safe (a 307 or 308 after a POST, PUT, PATCH or DELETE) is not followed
// there: the caller gets the redirect itself. Any other redirected request
// loses the idempotency key (header, "" meaning DefaultKeyHeader, and
// X-Idempotency-Key) and the credential headers (redact.CredentialHeaders)
// on its way there, under any spelling of their names
// (req.Header["x-api-key"] is the same header on the wire). Then it defers
// to next (nil means net/http's default: stop after 10 redirects).
//
// A key is an operation's identity at one server: presented to another host
// it means nothing there, or collides with an unrelated operation, so it
// cannot go along; and a write sent on without it would be retried there as
// if it were keyed, a duplicate waiting to happen. Sent in clear, a key and
// credentials can be read and replayed by anyone on the path. net/http
// forwards such headers to another port of the same host name and over
// http, the key header and credentials of its own naming (X-Api-Key) to any
// host. Client.Do applies this policy to its HTTPClient by itself, with the
// Client's own CredentialHeaders, and ends such an intent with
// ErrRedirected and NotApplied; set it on an http.Client that uses
// Transport:
//
//	hc := &http.Client{Transport: &idem.Transport{}, CheckRedirect: idem.RedirectPolicy("", nil)}
//
// Without it, the Transport takes the same headers (and its own
// CredentialHeaders) off a hop that leaves the origin, and refuses to send
// a keyed write's such hop with an error instead of handing back the
// redirect.
//
// After 10 redirects (a loop) it stops with an error wrapping
// ErrRedirected; see Client.Do for the outcome.
func RedirectPolicy(header string, next func(req *http.Request, via []*http.Request) error) func(req *http.Request, via []*http.Request) error {
	return redirectPolicy(header, nil, next)
}

// redirectPolicy is RedirectPolicy, taking the credential headers extra
// off too.
func redirectPolicy(header string, extra []string, next func(req *http.Request, via []*http.Request) error) func(req *http.Request, via []*http.Request) error {
	header = keyHeaderName(header)
	return func(req *http.Request, via []*http.Request) error {
		if len(via) > 0 && leavesOrigin(req, via[0]) {
			if !methods.Safe(req.Method) && anycase.Has(via[0].Header, header, "X-Idempotency-Key") {
				return http.ErrUseLastResponse
			}
			dropOffOrigin(req.Header, header, extra)
		}
		if next != nil {
			return next(req, via)
		}
		if len(via) >= maxRedirects {
			return fmt.Errorf("%w: stopped after %d redirects", ErrRedirected, maxRedirects)
		}
		return nil
	}
}

// dropOffOrigin deletes from h, under any spelling, what must not go to
// another origin: the key header (header, and X-Idempotency-Key) and the
// credential headers, redact.CredentialHeaders' and extra.
func dropOffOrigin(h http.Header, header string, extra []string) {
	for k := range h {
		if strings.EqualFold(k, header) || strings.EqualFold(k, "X-Idempotency-Key") || redact.IsCredentialHeader(k, extra...) {
			delete(h, k)
		}
	}
}

// leavesOrigin reports whether the redirect req goes to another host than
// the original request first, or drops TLS it had. http.Client copies the
// first request's headers onto every hop, so every hop is judged against
// the first.
func leavesOrigin(req, first *http.Request) bool {
	return req.URL.Host != first.URL.Host || dropsTLS(first.URL.Scheme, req.URL.Scheme)
}

// hopLeavesOrigin says why the redirect hop req, which its http.Client
// follows, leaves the origin of the chain's first request: to another host
// (redirectOffHost) or from https to http (redirectDropsTLS);
// redirectFollowed when it stays, or req is no hop. A Transport judges
// every hop by it, for the http.Clients without RedirectPolicy.
func hopLeavesOrigin(req *http.Request) redirectStop {
	first := req
	for first.Response != nil && first.Response.Request != nil {
		first = first.Response.Request
	}
	switch {
	case first == req:
		return redirectFollowed
	case dropsTLS(first.URL.Scheme, req.URL.Scheme):
		return redirectDropsTLS
	case req.URL.Host != first.URL.Host:
		return redirectOffHost
	}
	return redirectFollowed
}

// dropsTLS reports whether going from scheme from to scheme to leaves TLS.
func dropsTLS(from, to string) bool { return from == "https" && to != "https" }
