package idemotel

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"syscall"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/idem-go/idem"
)

// errorTypeOther is semconv's error.type for an error it has no name for.
const errorTypeOther = "_OTHER"

// durationBuckets are the bucket bounds of idem.attempt.duration, in seconds:
// the semantic conventions' advice for http.client.request.duration, so that
// the two histograms line up. A function, so that no caller can change them
// for everyone.
func durationBuckets() []float64 {
	return []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10}
}

// attemptHook returns an OnAttempt hook recording on c's meter, and calling
// next, if not nil, afterwards.
func attemptHook(c config, next func(context.Context, idem.AttemptInfo)) (func(context.Context, idem.AttemptInfo), error) {
	m := c.meter()
	attempts, err1 := m.Int64Counter(MetricAttempts,
		metric.WithUnit("{attempt}"),
		metric.WithDescription("Attempts sent; an operation's first included."))
	duration, err2 := m.Float64Histogram(MetricAttemptDuration,
		metric.WithUnit("s"),
		metric.WithDescription("Duration of one attempt, until its response headers or its error."),
		metric.WithExplicitBucketBoundaries(durationBuckets()...))
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("idemotel: %w", err)
	}
	return func(ctx context.Context, ai idem.AttemptInfo) {
		kv := attemptAttrs(ai)
		// ctx is the operation's: exemplars link measurements to its span.
		opt := c.with(kv...)
		attempts.Add(ctx, 1, opt)
		duration.Record(ctx, ai.Attempt.Duration.Seconds(), opt)
		if span := trace.SpanFromContext(ctx); span.IsRecording() {
			span.AddEvent(EventAttempt, trace.WithAttributes(kv...))
		}
		if next != nil {
			next(ctx, ai)
		}
	}, nil
}

// attemptAttrs returns the attributes of one attempt. None carries a key, a
// body, a URL or an error message: a URL path often holds IDs (/orders/8213),
// and one series per order would be a cardinality explosion.
func attemptAttrs(ai idem.AttemptInfo) []attribute.KeyValue {
	a := ai.Attempt
	kv := make([]attribute.KeyValue, 0, 6)
	kv = append(kv,
		method(ai.Method),
		AttrClass.String(a.Class.String()),
		AttrAction.String(ai.Action.String()),
	)
	if a.Status != 0 { // no response: a status of 0 would be a false series
		kv = append(kv, semconv.HTTPResponseStatusCode(a.Status))
	}
	// The conventions set resend_count only on a request that was resent.
	if ai.N > 1 {
		kv = append(kv, semconv.HTTPRequestResendCount(ai.N-1))
	}
	if t := errorType(a); t != "" {
		kv = append(kv, semconv.ErrorTypeKey.String(t))
	}
	return kv
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
