package idem

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/assert"
)

// allMethods is every method of RFC 9110, PATCH, and QUERY.
var allMethods = []string{"GET", "HEAD", "OPTIONS", "TRACE", "QUERY", "PUT", "DELETE", "POST", "PATCH", "CONNECT"}

// retryRule is the "retry?" column of the decision table in DESIGN.md.
type retryRule int

const (
	done           retryRule = iota // success
	retryAny                        // retry, any method
	retryIdemOrKey                  // retry when safe/idempotent or keyed, else stop with ErrNoKey
	stop                            // stop
	stopRedirected                  // stop with ErrRedirected
	stopInvalid                     // stop with ErrInvalidRequest
	stopCertDates                   // stop with ErrCertificateDates
)

var errIO = errors.New("read: connection reset by peer")

// scenario is one way an attempt can end.
type scenario struct {
	name   string
	err    error
	wire   Wire
	status int
	header http.Header
}

func status(code int) scenario { return scenario{name: fmt.Sprint(code), status: code} }

// TestDecideTable checks every row of the decision table for every method,
// with and without key, with and without an earlier ambiguous attempt.
func TestDecideTable(t *testing.T) {
	neverSentNoConn := scenario{name: "dial refused", err: errIO}
	neverSentConn := scenario{name: "conn but no headers", err: errIO, wire: Wire{Conns: 1}}
	ambiguousRead := scenario{name: "reset after headers", err: errIO, wire: Wire{Conns: 1, WroteHeaders: true}}
	ambiguousTimeout := scenario{name: "timeout after request", err: errIO, wire: Wire{Conns: 1, WroteHeaders: true, WroteRequest: true}}
	invalidHeader := scenario{name: "invalid header", err: fmt.Errorf("idem: authorize: %w: header X: control byte 0x0a in value", ErrInvalidRequest)}
	badCertificate := scenario{name: "certificate", err: &url.Error{Op: "Post", URL: "https://h/", Err: &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}}, wire: Wire{}}
	certDates := scenario{name: "certificate dates", err: &url.Error{Op: "Post", URL: "https://h/", Err: &tls.CertificateVerificationError{Err: x509.CertificateInvalidError{Reason: x509.Expired}}}}
	certOtherReason := scenario{name: "certificate not for a server", err: &url.Error{Op: "Post", URL: "https://h/", Err: &tls.CertificateVerificationError{Err: x509.CertificateInvalidError{Reason: x509.IncompatibleUsage}}}}

	type row struct {
		sc      scenario
		keyed   []bool // the key variants this row covers
		class   Class
		rule    retryRule
		methods []string // nil: all
	}
	both := []bool{false, true}
	rows := []row{
		// Applied: 2xx, and 303/304.
		{status(200), both, ClassApplied, done, nil},
		{status(201), both, ClassApplied, done, nil},
		{status(202), both, ClassApplied, done, nil},
		{status(204), both, ClassApplied, done, nil},
		{status(299), both, ClassApplied, done, nil},
		{status(303), both, ClassApplied, done, nil},
		{status(304), both, ClassApplied, done, nil},
		// NeverSent: any method.
		{neverSentNoConn, both, ClassNeverSent, retryAny, nil},
		{neverSentConn, both, ClassNeverSent, retryAny, nil},
		// NotProcessed: 408, 425, 429 any; 409 only keyed.
		{status(408), both, ClassNotProcessed, retryAny, nil},
		{status(425), both, ClassNotProcessed, retryAny, nil},
		{status(429), both, ClassNotProcessed, retryAny, nil},
		{status(409), []bool{true}, ClassNotProcessed, retryAny, nil},
		// Ambiguous: transport errors after headers, and 5xx.
		{ambiguousRead, both, ClassAmbiguous, retryIdemOrKey, nil},
		{ambiguousTimeout, both, ClassAmbiguous, retryIdemOrKey, nil},
		{status(500), both, ClassAmbiguous, retryIdemOrKey, nil},
		{status(502), both, ClassAmbiguous, retryIdemOrKey, nil},
		{status(503), both, ClassAmbiguous, retryIdemOrKey, nil},
		{status(504), both, ClassAmbiguous, retryIdemOrKey, nil},
		{status(501), both, ClassAmbiguous, retryIdemOrKey, nil},
		{status(599), both, ClassAmbiguous, retryIdemOrKey, nil},
		{status(0), both, ClassAmbiguous, retryIdemOrKey, nil},
		{status(600), both, ClassAmbiguous, retryIdemOrKey, nil},
		// Ambiguous, and not resent: 301 or 302 to a method that is not safe.
		{status(301), both, ClassAmbiguous, stopRedirected, []string{"PUT", "DELETE", "POST", "PATCH", "CONNECT"}},
		{status(302), both, ClassAmbiguous, stopRedirected, []string{"PUT", "DELETE", "POST", "PATCH", "CONNECT"}},
		// Invalid: errors no wait can cure, before anything was written.
		{invalidHeader, both, ClassInvalid, stopInvalid, nil},
		{badCertificate, both, ClassInvalid, stopInvalid, nil},
		{certOtherReason, both, ClassInvalid, stopInvalid, nil},
		// Invalid by this clock: a certificate refused for its dates alone.
		{certDates, both, ClassInvalid, stopCertDates, nil},
		// KeyReused: 422 keyed.
		{status(422), []bool{true}, ClassKeyReused, stop, nil},
		// Rejected: other 4xx, 409/422 unkeyed, 3xx other than 303/304.
		{status(400), both, ClassRejected, stop, nil},
		{status(401), both, ClassRejected, stop, nil},
		{status(403), both, ClassRejected, stop, nil},
		{status(412), both, ClassRejected, stop, nil},
		{status(409), []bool{false}, ClassRejected, stop, nil},
		{status(422), []bool{false}, ClassRejected, stop, nil},
		{status(301), both, ClassRejected, stop, []string{"GET", "HEAD", "OPTIONS", "TRACE", "QUERY"}},
		{status(302), both, ClassRejected, stop, []string{"GET", "HEAD", "OPTIONS", "TRACE", "QUERY"}},
		{status(307), both, ClassRejected, stop, nil},
		{status(308), both, ClassRejected, stop, nil},
		{status(404), both, ClassRejected, stop, without("DELETE")},
		{status(410), both, ClassRejected, stop, without("DELETE")},
	}
	for _, r := range rows {
		methods := r.methods
		if methods == nil {
			methods = allMethods
		}
		replays := []string{""} // no replay header
		if r.sc.err == nil {
			replays = append(replays, replayHeaders...)
		}
		for _, m := range methods {
			for _, keyed := range r.keyed {
				for _, earlier := range []bool{false, true} {
					for _, replayed := range replays {
						name := fmt.Sprintf("%s/%s/key=%v/earlierInDoubt=%v/replayed=%s", r.sc.name, m, keyed, earlier, replayed)
						t.Run(name, func(t *testing.T) {
							f := facts{Method: m, HasKey: keyed, Wire: r.sc.wire, Err: r.sc.err, Status: r.sc.status, EarlierInDoubt: earlier}
							if replayed != "" {
								f.Header = http.Header{replayed: {"true"}}
							}
							checkRow(t, f, r.class, r.rule, replayed != "")
						})
					}
				}
			}
		}
	}
}

// replayHeaders are the spellings of the replay header deployed servers
// use, canonical.
var replayHeaders = []string{"Idempotent-Replayed", "Idempotency-Replayed", "X-Idempotent-Replayed"}

// checkRow checks decide on f against a row of the table, its class and
// rule. A replayed answer, the server's stored one, is final: where the
// rule retries, it stops with ErrServerSaidStop.
func checkRow(t *testing.T, f facts, class Class, rule retryRule, replayed bool) {
	t.Helper()
	d := decide(f)
	assert.Equal(t, class, d.Class, "class")
	assert.Equal(t, class, classify(f), "classify disagrees with decide")
	wantAction, wantCause := expectAction(rule, class, f.Method, f.HasKey)
	if replayed && wantAction == ActionRetry {
		wantAction, wantCause = ActionStop, ErrServerSaidStop
	}
	assert.Equal(t, wantAction, d.Action, "action")
	if wantCause != nil {
		assert.ErrorIs(t, d.Cause, wantCause)
	} else {
		assert.NoError(t, d.Cause, "cause")
	}
	keyed409 := f.HasKey && f.Status == 409 && f.Err == nil
	assert.Equal(t, expectOutcome(class, f.EarlierInDoubt || keyed409), d.Outcome, "outcome")
	assert.Equal(t, class == ClassAmbiguous || keyed409, d.InDoubt, "in doubt")
	if d.Action == ActionStop {
		assert.NotEmpty(t, d.Reason, "a stop must say why")
	}
}

func expectAction(r retryRule, c Class, method string, keyed bool) (Action, error) {
	switch r {
	case done:
		return ActionDone, nil
	case retryAny:
		return ActionRetry, nil
	case retryIdemOrKey:
		switch method {
		case "GET", "HEAD", "OPTIONS", "TRACE", "QUERY", "PUT", "DELETE":
			return ActionRetry, nil
		}
		if keyed {
			return ActionRetry, nil
		}
		return ActionStop, ErrNoKey
	}
	switch {
	case r == stopRedirected:
		return ActionStop, ErrRedirected
	case r == stopInvalid:
		return ActionStop, ErrInvalidRequest
	case r == stopCertDates:
		return ActionStop, ErrCertificateDates
	case c == ClassKeyReused:
		return ActionStop, ErrKeyReused
	}
	return ActionStop, nil // a plain rejection has no sentinel
}

// expectOutcome states the outcome contract independently of outcomeAfter:
// inDoubt is an earlier ambiguous attempt, or a keyed 409 now.
func expectOutcome(c Class, inDoubt bool) Outcome {
	if c == ClassApplied {
		return Applied
	}
	if c == ClassAlreadyApplied {
		return AlreadyApplied
	}
	if c == ClassAmbiguous {
		return Unknown
	}
	if inDoubt {
		return Unknown
	}
	return NotApplied
}

func without(m string) []string {
	var out []string
	for _, x := range allMethods {
		if x != m {
			out = append(out, x)
		}
	}
	return out
}

func TestDecideDeletePolicy(t *testing.T) {
	tests := []struct {
		policy  DeletePolicy
		status  int
		earlier bool
		want    Class
		outcome Outcome
	}{
		{DeleteAfterDoubt, 404, false, ClassRejected, NotApplied},
		{DeleteAfterDoubt, 404, true, ClassAlreadyApplied, AlreadyApplied},
		{DeleteAfterDoubt, 410, false, ClassRejected, NotApplied},
		{DeleteAfterDoubt, 410, true, ClassAlreadyApplied, AlreadyApplied},
		{DeleteAlways, 404, false, ClassAlreadyApplied, AlreadyApplied},
		{DeleteAlways, 410, true, ClassAlreadyApplied, AlreadyApplied},
		{DeleteNever, 404, true, ClassRejected, Unknown},
		{DeleteNever, 410, false, ClassRejected, NotApplied},
	}
	for _, tt := range tests {
		for _, keyed := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/%d/earlier=%v/key=%v", tt.policy, tt.status, tt.earlier, keyed), func(t *testing.T) {
				d := decide(facts{Method: "DELETE", HasKey: keyed, Status: tt.status, EarlierInDoubt: tt.earlier, DeletePolicy: tt.policy})
				assert.Equal(t, tt.want, d.Class)
				assert.Equal(t, tt.outcome, d.Outcome)
				if tt.want == ClassAlreadyApplied {
					assert.Equal(t, ActionDone, d.Action)
				} else {
					assert.Equal(t, ActionStop, d.Action)
				}
			})
		}
	}
	// The policy concerns DELETE alone.
	d := decide(facts{Method: "GET", Status: 404, DeletePolicy: DeleteAlways, EarlierInDoubt: true})
	assert.Equal(t, ClassRejected, d.Class)
}

func TestDecide412AfterAmbiguousFlagged(t *testing.T) {
	d := decide(facts{Method: "PUT", HasKey: true, Status: 412, EarlierInDoubt: true})
	assert.Equal(t, ActionStop, d.Action)
	assert.Equal(t, Unknown, d.Outcome)
	assert.Contains(t, d.Reason, "may be the write that moved")

	d = decide(facts{Method: "PUT", HasKey: true, Status: 412})
	assert.Equal(t, NotApplied, d.Outcome)
	assert.NotContains(t, d.Reason, "may be the write")
}

func TestDecideServerHint(t *testing.T) {
	hint := func(v string) http.Header { return http.Header{"Stripe-Should-Retry": {v}} }
	tests := []struct {
		name   string
		f      facts
		action Action
		cause  error
	}{
		{"false stops a keyed 503", facts{Method: "POST", HasKey: true, Status: 503, Header: hint("false")}, ActionStop, ErrServerSaidStop},
		{"false stops a 429", facts{Method: "GET", Status: 429, Header: hint("false")}, ActionStop, ErrServerSaidStop},
		{"true allows a 400", facts{Method: "POST", HasKey: true, Status: 400, Header: hint("true")}, ActionRetry, nil},
		{"true allows a keyless POST 500", facts{Method: "POST", Status: 500, Header: hint("True")}, ActionRetry, nil},
		{"true cannot fix a reused key", facts{Method: "POST", HasKey: true, Status: 422, Header: hint("true")}, ActionStop, ErrKeyReused},
		{"false does not undo a success", facts{Method: "POST", HasKey: true, Status: 201, Header: hint("false")}, ActionDone, nil},
		{"true cannot reopen a replayed answer", facts{Method: "POST", HasKey: true, Status: 500,
			Header: http.Header{"Stripe-Should-Retry": {"true"}, "Idempotent-Replayed": {"true"}}}, ActionStop, ErrServerSaidStop},
		{"garbage is ignored", facts{Method: "POST", HasKey: true, Status: 503, Header: hint("maybe")}, ActionRetry, nil},
		{"FALSE in any case stops", facts{Method: "PUT", Status: 503, Header: hint(" FALSE ")}, ActionStop, ErrServerSaidStop},
		// Folded as the fuzz target's oracle (strings.EqualFold) folds it.
		{"false folded with long s stops", facts{Method: "PUT", Status: 503, Header: hint("fal\u017fe")}, ActionStop, ErrServerSaidStop},
		{"no header on transport errors", facts{Method: "POST", HasKey: true, Err: errIO, Wire: Wire{WroteHeaders: true}, Header: hint("false")}, ActionRetry, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := decide(tt.f)
			assert.Equal(t, tt.action, d.Action)
			if tt.cause != nil {
				assert.ErrorIs(t, d.Cause, tt.cause)
			} else if d.Action != ActionStop {
				assert.Nil(t, d.Cause)
			}
		})
	}
}

func TestStringers(t *testing.T) {
	for c := ClassNone; c < numClasses; c++ {
		assert.NotContains(t, c.String(), "Class(", "class %d has no name", c)
	}
	assert.Equal(t, "none", Class(0).String(), "the zero Class is no class")
	assert.Equal(t, "Class(9)", Class(numClasses).String())
	for _, o := range []Outcome{NoOutcome, Unknown, Applied, AlreadyApplied, NotApplied} {
		assert.NotContains(t, o.String(), "Outcome(")
	}
	var zero Outcome
	assert.Equal(t, "none", zero.String(), "the zero Outcome must not read as Unknown")
	assert.NotEqual(t, Unknown, zero)
	assert.Equal(t, "Outcome(9)", Outcome(9).String())
	for _, a := range []Action{ActionDone, ActionRetry, ActionStop} {
		assert.NotContains(t, a.String(), "Action(")
	}
	assert.Equal(t, "Action(0)", Action(0).String())
	assert.True(t, Applied.Succeeded() && AlreadyApplied.Succeeded())
	assert.False(t, Unknown.Succeeded() || NotApplied.Succeeded() || NoOutcome.Succeeded())
}
