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
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"go.opentelemetry.io/otel/attribute"

	"github.com/idem-go/idem"
)

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
			got := attrs(attribute.NewSet(attemptAttrs(tt.info)...))
			assert.Equal(t, tt.want, got, "attemptAttrs(%+v)", tt.info)
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
