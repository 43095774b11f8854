package idem

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/idem-go/idem/internal/anycase"
	"github.com/idem-go/idem/redact"
)

// A sender makes the request of each attempt of one operation and sends it,
// as net/http's send does for Client.do: the policy loop (run) never builds a
// request itself. An intentSender serves Client, a requestSender Transport.
type sender interface {
	// request returns the request of the next attempt, with ctx; first
	// says it is the operation's first. An error means no attempt can be
	// made; it wraps ErrInvalidRequest when none ever can.
	request(ctx context.Context, first bool) (*http.Request, error)
	// send sends one attempt's request.
	send(req *http.Request) (*http.Response, error)
	// hooked reports whether an OnSend hook is set; hook calls it on
	// req, returning req with the context it gave, and an error when it
	// broke the request.
	hooked() bool
	hook(req *http.Request) (*http.Request, error)
}

// onSend calls f on req and returns req with the context f gave, if any.
func onSend(f func(*http.Request) context.Context, req *http.Request) *http.Request {
	if ctx := f(req); ctx != nil && ctx != req.Context() {
		return req.WithContext(ctx)
	}
	return req
}

// intentSender sends the attempts of an Intent through a Client: the
// intent's bytes and headers, the key, fresh credentials.
type intentSender struct {
	c  *Client
	in *Intent

	// The first attempt's URL, and its body reader and key value unless
	// the intent has neither (first is nil then), live in the operation's
	// one allocation (doState, tryState): most operations take one
	// attempt. Later attempts allocate their own, so that no attempt's
	// request shares what net/http or a hook may still hold of another's.
	firstURL url.URL
	first    *firstParts
}

// firstParts are the first attempt's body reader and key value.
type firstParts struct {
	body strings.Reader
	key  [1]string
}

// needsParts reports whether the requests of in need firstParts.
func needsParts(in *Intent) bool { return in.body != "" || in.key != "" }

func (s *intentSender) send(req *http.Request) (*http.Response, error) {
	return s.c.httpClient().Do(req)
}

func (s *intentSender) hooked() bool { return s.c.OnSend != nil }

// hook calls OnSend and holds it to Authorize's rules: the header stays
// valid and the key as request set it.
func (s *intentSender) hook(req *http.Request) (*http.Request, error) {
	req = onSend(s.c.OnSend, req)
	if err := checkRequestHeader(req.Header, true); err != nil {
		return req, fmt.Errorf("idem: OnSend: %w", err)
	}
	if name, key := s.keyField(); key != "" {
		if err := checkKeyKept(req.Header, name, key); err != nil {
			return req, fmt.Errorf("idem: OnSend: %w", err)
		}
	}
	return req, nil
}

// keyField returns the key header's name and the value every attempt
// carries: "" for an intent without key.
func (s *intentSender) keyField() (name, value string) {
	name = keyHeaderName(s.c.KeyHeader)
	if s.in.key == "" {
		return name, ""
	}
	if s.c.KeySFString {
		return name, `"` + s.in.key + `"`
	}
	return name, s.in.key
}

func (s *intentSender) request(ctx context.Context, first bool) (*http.Request, error) {
	in, c := s.in, s.c
	if first {
		if err := c.checkCredentials(in); err != nil {
			return nil, err
		}
	}
	u, parts := &s.firstURL, s.first
	if !first {
		u, parts = new(url.URL), nil
	}
	// From the URL the intent parsed once, as NewRequest would make it
	// from the string, without parsing it on every attempt.
	*u = *in.u
	req := (&http.Request{
		Method: in.method, URL: u, Host: u.Host,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: make(http.Header, len(in.header)+1),
	}).WithContext(ctx)
	for _, f := range in.header {
		req.Header[f.name] = f.values // clipped at NewIntent: an append here copies
	}
	if in.body != "" {
		body := in.body
		var buf *strings.Reader
		if parts != nil {
			buf = &parts.body
		} else {
			buf = new(strings.Reader)
		}
		buf.Reset(body)
		req.ContentLength = int64(len(body))
		req.Body = io.NopCloser(buf) // as newBody makes it
		// GetBody lets net/http follow a 307 or 308 with the body, as it
		// does for NewRequest's bodies.
		req.GetBody = func() (io.ReadCloser, error) { return newBody(body), nil }
	}
	name, key := s.keyField()
	if key != "" {
		var kv []string
		if parts != nil {
			kv = parts.key[:]
		} else {
			kv = make([]string, 1)
		}
		kv[0] = key
		req.Header[name] = kv[:1:1]
	}
	if c.Authorize != nil {
		if err := c.Authorize(ctx, req); err != nil {
			return nil, fmt.Errorf("idem: authorize: %w", err)
		}
		// The intent's own headers were checked by NewIntent; the hook's
		// may hold what net/http would refuse, or let through to harm.
		if err := checkRequestHeader(req.Header, true); err != nil {
			return nil, fmt.Errorf("idem: authorize: %w", err)
		}
		if err := checkKeyKept(req.Header, name, key); err != nil {
			return nil, fmt.Errorf("idem: authorize: %w", err)
		}
	}
	return req, nil
}

// checkCredentials refuses an intent that carries one of the Client's own
// CredentialHeaders, which NewIntent could not know.
func (c *Client) checkCredentials(in *Intent) error {
	if len(c.CredentialHeaders) == 0 {
		return nil
	}
	for _, f := range in.header {
		if redact.IsCredentialHeader(f.name, c.CredentialHeaders...) {
			return fmt.Errorf("%w: %w", ErrInvalidRequest, secretHeader(f.name))
		}
	}
	return nil
}

// checkKeyKept checks that h carries key under the key header name, in one
// field line, as the Client set it before the Authorize hook ran; "" means
// the intent has no key. A write without its key would be retried as if it
// had one, each attempt a new operation to the server.
func checkKeyKept(h http.Header, name, key string) error {
	if key == "" {
		return nil
	}
	if vs := anycase.Values(h, name); len(vs) != 1 || vs[0] != key {
		return fmt.Errorf("%w: the hook removed or changed the %s header: every attempt carries the intent's key", ErrInvalidRequest, name)
	}
	return nil
}

// newBody is a request body over an intent's bytes. It must stay an
// io.NopCloser around a *strings.Reader (or a *bytes.Reader): net/http
// recognises that pair as held in memory and sends headers and body in one
// write; any other type costs a separate flush of the headers.
func newBody(b string) io.ReadCloser { return io.NopCloser(strings.NewReader(b)) }

// requestSender passes a caller's request on, for Transport: the request
// itself on the first attempt, a clone with a body from GetBody after.
type requestSender struct {
	base   http.RoundTripper
	req    *http.Request
	used   bool // the caller's own request (and body) went out
	shared bool // the latest request shares the caller's header
	onSend func(*http.Request) context.Context
}

func (s *requestSender) send(req *http.Request) (*http.Response, error) { return s.base.RoundTrip(req) }

func (s *requestSender) hooked() bool { return s.onSend != nil }

// hook gives OnSend a header of its own when the request shares the
// caller's, which RoundTrip must not change.
func (s *requestSender) hook(req *http.Request) (*http.Request, error) {
	if s.shared || req.Header == nil {
		out := *req
		out.Header = req.Header.Clone()
		if out.Header == nil {
			out.Header = make(http.Header)
		}
		req = &out
	}
	r := onSend(s.onSend, req)
	if err := checkRequestHeader(r.Header, false); err != nil {
		return r, fmt.Errorf("idem: OnSend: %w", err)
	}
	return r, nil
}

func (s *requestSender) request(ctx context.Context, _ bool) (*http.Request, error) {
	if !s.used { // the caller's own body goes out on the first attempt
		if err := checkPort(s.req.URL); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
		}
		if err := checkRequestHeader(s.req.Header, false); err != nil {
			return nil, err
		}
		s.used, s.shared = true, true
		return s.req.WithContext(ctx), nil
	}
	s.shared = false
	out := s.req.Clone(ctx)
	if s.req.GetBody != nil {
		body, err := s.req.GetBody()
		if err != nil {
			return nil, fmt.Errorf("idem: replaying the request body: %w", err)
		}
		out.Body = body
	}
	return out, nil
}
