package idemotel

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"regexp"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"go.opentelemetry.io/otel/attribute"

	"github.com/idem-go/idem"
)

// resendCount matches the resend count among attributes as attrs formats
// them.
var resendCount = regexp.MustCompile(` http\.request\.resend_count=\d+`)

func TestAttemptAttrs(t *testing.T) {
	tests := []struct {
		name string
		info idem.AttemptInfo
		want string
	}{{
		name: "first attempt answered 201: no resend_count, no error.type",
		info: idem.AttemptInfo{Method: "PUT", N: 1, Action: idem.ActionDone,
			Attempt: idem.Attempt{Class: idem.ClassApplied, Status: 201}},
		want: "http.request.method=PUT http.response.status_code=201 idem.action=done idem.class=applied",
	}, {
		name: "third attempt answered 429",
		info: idem.AttemptInfo{Method: "POST", N: 3, Action: idem.ActionRetry,
			Attempt: idem.Attempt{Class: idem.ClassNotProcessed, Status: 429}},
		want: "error.type=429 http.request.method=POST http.request.resend_count=2 http.response.status_code=429 idem.action=retry idem.class=not_processed",
	}, {
		name: "a redirect is no error",
		info: idem.AttemptInfo{Method: "POST", N: 1, Action: idem.ActionStop,
			Attempt: idem.Attempt{Class: idem.ClassAmbiguous, Status: 302}},
		want: "http.request.method=POST http.response.status_code=302 idem.action=stop idem.class=ambiguous",
	}, {
		name: "transport error: no status",
		info: idem.AttemptInfo{Method: "DELETE", N: 2, Action: idem.ActionRetry,
			Attempt: idem.Attempt{Class: idem.ClassAmbiguous, Err: io.EOF}},
		want: "error.type=connection_closed http.request.method=DELETE http.request.resend_count=1 idem.action=retry idem.class=ambiguous",
	}, {
		name: "a DELETE answered 404 after an ambiguous attempt is no error",
		info: idem.AttemptInfo{Method: "DELETE", N: 2, Action: idem.ActionDone,
			Attempt: idem.Attempt{Class: idem.ClassAlreadyApplied, Status: 404}},
		want: "http.request.method=DELETE http.request.resend_count=1 http.response.status_code=404 idem.action=done idem.class=already_applied",
	}, {
		name: "a queue holds the lane after a second 401",
		info: idem.AttemptInfo{Method: "POST", N: 1, Action: idem.ActionHold,
			Attempt: idem.Attempt{Class: idem.ClassRejected, Status: 401}},
		want: "error.type=401 http.request.method=POST http.response.status_code=401 idem.action=hold idem.class=rejected",
	}, {
		name: "a queue expires the record rather than retry past the horizon",
		info: idem.AttemptInfo{Method: "POST", N: 1, Action: idem.ActionExpire,
			Attempt: idem.Attempt{Class: idem.ClassAmbiguous, Status: 503}},
		want: "error.type=503 http.request.method=POST http.response.status_code=503 idem.action=expire idem.class=ambiguous",
	}, {
		name: "a method the conventions do not know",
		info: idem.AttemptInfo{Method: "PURGE", N: 1, Action: idem.ActionDone,
			Attempt: idem.Attempt{Class: idem.ClassApplied, Status: 200}},
		want: "http.request.method=_OTHER http.response.status_code=200 idem.action=done idem.class=applied",
	}, {
		name: "QUERY is known",
		info: idem.AttemptInfo{Method: idem.MethodQuery, N: 1, Action: idem.ActionDone,
			Attempt: idem.Attempt{Class: idem.ClassApplied, Status: 200}},
		want: "http.request.method=QUERY http.response.status_code=200 idem.action=done idem.class=applied",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errType := errorType(tt.info.Attempt)
			span := append(attemptSpanAttrs(tt.info, errType), method(tt.info.Method))
			assert.Equal(t, tt.want, attrs(attribute.NewSet(span...)), "attemptSpanAttrs(%+v) and the method", tt.info)
			// The histogram has the same, except the resend count, which would
			// multiply its series.
			wantMetric := resendCount.ReplaceAllString(tt.want, "")
			target := targetOf(tt.info.Method, nil)
			got := attrs(attribute.NewSet(attemptMetricAttrs(&target, tt.info, errType)...))
			assert.Equal(t, wantMetric, got, "attemptMetricAttrs(%+v)", tt.info)
		})
	}
}

// quotaError names its own error.type.
type quotaError struct{}

func (quotaError) Error() string     { return "quota exceeded" }
func (quotaError) ErrorType() string { return "quota" }

func TestTransportErrorType(t *testing.T) {
	// dial wraps err as net/http reports a failed dial.
	dial := func(err error) error {
		return &url.Error{Op: "Post", URL: "http://shop/orders", Err: &net.OpError{Op: "dial", Net: "tcp", Err: err}}
	}
	tests := []struct {
		err  error
		want string
	}{
		{dial(os.NewSyscallError("connect", syscall.ECONNREFUSED)), "connection_refused"},
		{dial(os.NewSyscallError("read", syscall.ECONNRESET)), "connection_reset"},
		{dial(os.ErrDeadlineExceeded), "timeout"},
		{dial(&net.DNSError{Err: "no such host", Name: "shop", IsNotFound: true}), "dns"},
		{&url.Error{Op: "Post", URL: "http://shop/orders", Err: io.ErrUnexpectedEOF}, "connection_closed"},
		{fmt.Errorf("waiting: %w", context.DeadlineExceeded), "timeout"},
		{fmt.Errorf("waiting: %w", context.Canceled), "canceled"},
		{&url.Error{Op: "Post", URL: "https://shop/orders", Err: x509.UnknownAuthorityError{}}, "tls_certificate"},
		{fmt.Errorf("%w: header value has a newline", idem.ErrInvalidRequest), "invalid_request"},
		{fmt.Errorf("sending: %w", quotaError{}), "quota"},
		{errors.New("something else"), "_OTHER"},
	}
	for _, tt := range tests {
		if got := transportErrorType(tt.err); got != tt.want {
			t.Errorf("transportErrorType(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
}

func TestTargetOf(t *testing.T) {
	tests := []struct {
		method, url, want string
	}{
		{"POST", "http://127.0.0.1:8080/orders", "http.request.method=POST server.address=127.0.0.1 server.port=8080 url.scheme=http"},
		{"GET", "https://shop.example/orders/17", "http.request.method=GET server.address=shop.example server.port=443 url.scheme=https"},
		{"PUT", "http://shop.example/x", "http.request.method=PUT server.address=shop.example server.port=80 url.scheme=http"},
		{"PURGE", "http://[::1]:9/x", "http.request.method=_OTHER server.address=::1 server.port=9 url.scheme=http"},
		{"GET", "ftp://shop.example/x", "http.request.method=GET server.address=shop.example url.scheme=ftp"},
		{"GET", "%zz", "http.request.method=GET"},
	}
	for _, tt := range tests {
		target := targetOfRaw(tt.method, tt.url)
		if got := attrs(attribute.NewSet(target.attrs()...)); got != tt.want {
			t.Errorf("targetOfRaw(%q, %q) = %q, want %q", tt.method, tt.url, got, tt.want)
		}
	}
}

func TestOperationErrorType(t *testing.T) {
	refused := &url.Error{Op: "Post", URL: "http://shop/orders", Err: &net.OpError{Op: "dial", Net: "tcp",
		Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}}
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"rejected", &idem.Error{Outcome: idem.NotApplied, Status: 400,
			Attempts: []idem.Attempt{{Class: idem.ClassRejected, Status: 400}}}, "400"},
		{"attempts exhausted after 503s", &idem.Error{Outcome: idem.Unknown, Status: 503, Err: idem.ErrAttemptsExhausted,
			Attempts: []idem.Attempt{{Class: idem.ClassAmbiguous, Status: 503}}}, "503"},
		{"refused", &idem.Error{Outcome: idem.NotApplied, Err: idem.ErrAttemptsExhausted,
			Attempts: []idem.Attempt{{Class: idem.ClassNeverSent, Err: refused}}}, "connection_refused"},
		{"canceled while waiting after a 503", &idem.Error{Outcome: idem.Unknown, Err: context.Canceled,
			Attempts: []idem.Attempt{{Class: idem.ClassAmbiguous, Status: 503}}}, "canceled"},
		{"not an idem.Error", fmt.Errorf("%w: bad header", idem.ErrInvalidRequest), "invalid_request"},
		{"nothing known", &idem.Error{Outcome: idem.NotApplied, Err: idem.ErrNoKey}, "_OTHER"},
	}
	for _, tt := range tests {
		if got := operationErrorType(tt.err); got != tt.want {
			t.Errorf("%s: operationErrorType(%v) = %q, want %q", tt.name, tt.err, got, tt.want)
		}
	}
}
