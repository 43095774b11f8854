package idemotel

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"syscall"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/idem-go/idem"
)

// errorTypeOther is semconv's error.type for an error it has no name for.
const errorTypeOther = "_OTHER"

// durationBuckets are the bucket bounds of http.client.request.duration
// and idem.operation.duration, in seconds: the semantic conventions' advice
// for the first, so that the two histograms line up. A function, so that no
// caller can change them for everyone.
func durationBuckets() []float64 {
	return []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10}
}

// method is the http.request.method attribute: one of the methods the
// conventions know, or "_OTHER", which bounds the attribute's values.
func method(m string) attribute.KeyValue {
	switch m {
	case http.MethodConnect, http.MethodDelete, http.MethodGet, http.MethodHead, http.MethodOptions,
		http.MethodPatch, http.MethodPost, http.MethodPut, http.MethodTrace, idem.MethodQuery:
		return semconv.HTTPRequestMethodKey.String(m)
	}
	return semconv.HTTPRequestMethodOther
}

// errorType is the error.type of an attempt, as the conventions define it
// for an HTTP client: empty after success, the status code after a 4xx or
// 5xx answer, and a short name for a transport error. A DELETE answered 404
// that idem reads as already applied is a success.
func errorType(a idem.Attempt) string {
	if a.Err == nil {
		if a.Status >= 400 && a.Class != idem.ClassAlreadyApplied {
			return strconv.Itoa(a.Status)
		}
		return ""
	}
	return transportErrorType(a.Err)
}

// transportErrorType names err with one of a few stable values, or "_OTHER".
// semconv.ErrorType would name the outermost type, a *url.Error for every
// failure of an http.Client; an error with an ErrorType method names itself.
func transportErrorType(err error) string {
	var (
		named   interface{ ErrorType() string }
		netErr  net.Error
		dnsErr  *net.DNSError
		verify  *tls.CertificateVerificationError
		unknown x509.UnknownAuthorityError
		host    x509.HostnameError
		invalid x509.CertificateInvalidError
	)
	switch {
	case errors.As(err, &named) && named.ErrorType() != "":
		return named.ErrorType()
	case errors.Is(err, idem.ErrInvalidRequest):
		return "invalid_request"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return "timeout"
	case errors.As(err, &dnsErr):
		return "dns"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection_refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection_reset"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection_closed"
	case errors.As(err, &verify), errors.As(err, &unknown), errors.As(err, &host), errors.As(err, &invalid):
		return "tls_certificate"
	}
	return errorTypeOther
}

// operationErrorType is the error.type of an operation that ended with err:
// why it stopped when that was the context or a bad request, else the last
// attempt's error.type ("503", "timeout"), else "_OTHER".
func operationErrorType(err error) string {
	var e *idem.Error
	if !errors.As(err, &e) {
		return transportErrorType(err)
	}
	if e.Err != nil {
		if t := transportErrorType(e.Err); t != errorTypeOther {
			return t
		}
	}
	if n := len(e.Attempts); n > 0 {
		if t := errorType(e.Attempts[n-1]); t != "" {
			return t
		}
	}
	return errorTypeOther
}

// target holds the attributes that name where a request goes:
// http.request.method, server.address, server.port and url.scheme, the
// ones every span and measurement of this package carries.
type target struct {
	kv [4]attribute.KeyValue
	n  int
}

// targetOf returns the target of a request with method m to u. server.port
// is the URL's port or its scheme's default, absent when neither is known.
func targetOf(m string, u *url.URL) target {
	t := target{n: 1}
	t.kv[0] = method(m)
	if u == nil || u.Host == "" {
		return t
	}
	port, _ := strconv.Atoi(u.Port())
	if port == 0 {
		switch u.Scheme {
		case "http":
			port = 80
		case "https":
			port = 443
		}
	}
	t.kv[t.n] = semconv.ServerAddress(u.Hostname())
	t.n++
	if port != 0 {
		t.kv[t.n] = semconv.ServerPort(port)
		t.n++
	}
	t.kv[t.n] = semconv.URLScheme(u.Scheme)
	t.n++
	return t
}

// targetOfRaw is targetOf for a URL given as a string, as AttemptInfo.URL
// and OnOperation give it.
func targetOfRaw(m, raw string) target {
	u, err := url.Parse(raw)
	if err != nil {
		return targetOf(m, nil)
	}
	return targetOf(m, u)
}

// attrs returns t's attributes.
func (t *target) attrs() []attribute.KeyValue { return t.kv[:t.n] }

// attemptMetricAttrs returns the attributes of an attempt's
// http.client.request.duration measurement: t's, then the response status,
// error.type, idem.class and idem.action. None carries a key, a body, a URL
// path or an error message: a path often holds IDs (/orders/8213), and one
// series per order would be a cardinality explosion.
func attemptMetricAttrs(t *target, ai idem.AttemptInfo, errType string) []attribute.KeyValue {
	kv := make([]attribute.KeyValue, 0, 8)
	kv = append(kv, t.attrs()...)
	if ai.Attempt.Status != 0 { // no response: a status of 0 would be a false series
		kv = append(kv, semconv.HTTPResponseStatusCode(ai.Attempt.Status))
	}
	if errType != "" {
		kv = append(kv, semconv.ErrorTypeKey.String(errType))
	}
	return append(kv,
		AttrClass.String(ai.Attempt.Class.String()),
		AttrAction.String(ai.Action.String()),
	)
}

// attemptSpanAttrs returns what an attempt's span learns once the attempt
// is over: the response status, http.request.resend_count (which the
// conventions set only on a request that was resent), error.type,
// idem.class and idem.action.
func attemptSpanAttrs(ai idem.AttemptInfo, errType string) []attribute.KeyValue {
	kv := make([]attribute.KeyValue, 0, 5)
	if ai.Attempt.Status != 0 {
		kv = append(kv, semconv.HTTPResponseStatusCode(ai.Attempt.Status))
	}
	if ai.N > 1 {
		kv = append(kv, semconv.HTTPRequestResendCount(ai.N-1))
	}
	if errType != "" {
		kv = append(kv, semconv.ErrorTypeKey.String(errType))
	}
	return append(kv,
		AttrClass.String(ai.Attempt.Class.String()),
		AttrAction.String(ai.Action.String()),
	)
}
