package interop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
)

// quickPolicy is a small policy for tests: few, short waits.
func quickPolicy() idem.Policy {
	return idem.Policy{MaxAttempts: 4, BaseDelay: 10 * time.Millisecond, MaxDelay: 50 * time.Millisecond}
}

// newHTTPClient returns an *http.Client with its own transport, closed when
// the test ends, so that tests share no connection pool and servers can shut
// down without waiting for idle connections. A nil tr means a transport with
// keep-alives off: net/http resends a request that failed on a reused
// connection when its method is idempotent or it carries an Idempotency-Key,
// which would make a server count arrivals no client made.
func newHTTPClient(t *testing.T, tr *http.Transport) *http.Client {
	t.Helper()
	if tr == nil {
		tr = &http.Transport{DisableKeepAlives: true}
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// newClient returns an idem Client with policy p, its own connection pool
// and no retry budget limit: the tests count outcomes, not load.
func newClient(t *testing.T, p idem.Policy) *idem.Client {
	t.Helper()
	return &idem.Client{HTTPClient: newHTTPClient(t, nil), Policy: p, Budget: idem.NewBudget(0)}
}

// paymentBody returns the JSON body of payment id.
func paymentBody(t testing.TB, id string, amount int) []byte {
	t.Helper()
	b, err := json.Marshal(Payment{ID: id, Amount: amount})
	require.NoError(t, err)
	return b
}

// payment returns a POST intent for payment id to url.
func payment(t *testing.T, url, id string, opts ...idem.IntentOption) *idem.Intent {
	t.Helper()
	opts = append([]idem.IntentOption{idem.WithHeader("Content-Type", "application/json")}, opts...)
	in, err := idem.NewIntent(http.MethodPost, url, paymentBody(t, id, 100), opts...)
	require.NoError(t, err)
	return in
}

// done is what one Client.Do call reported.
type done struct {
	outcome  idem.Outcome
	replayed bool
	status   int
	body     string
	bodyErr  error // reading the final body failed
	attempts []idem.Attempt
	err      error
	elapsed  time.Duration
}

// do runs in with c and reads the final body, if any. It must be called
// from the test's goroutine; others use tryDo.
func do(t *testing.T, c *idem.Client, in *idem.Intent) done {
	t.Helper()
	d, err := tryDo(context.Background(), c, in)
	require.NoError(t, err)
	return d
}

// tryDo is do for any goroutine and any context: it returns an error when
// Do returned neither a Result nor an *idem.Error.
func tryDo(ctx context.Context, c *idem.Client, in *idem.Intent) (done, error) {
	start := time.Now()
	res, err := c.Do(ctx, in)
	d := done{err: err}
	o, ok := OutcomeOf(res, err)
	if !ok {
		return d, fmt.Errorf("Do(%s %s) returned neither a Result nor an *idem.Error: %w", in.Method(), in.URL(), err)
	}
	d.outcome = o
	if e := (*idem.Error)(nil); errors.As(err, &e) {
		d.status, d.attempts = e.Status, e.Attempts
	} else {
		defer res.Response.Body.Close()
		b, rerr := io.ReadAll(res.Response.Body)
		d.body, d.bodyErr = string(b), rerr
		d.replayed, d.status, d.attempts = res.Replayed, res.Response.StatusCode, res.Attempts
	}
	d.elapsed = time.Since(start)
	return d, nil
}

// raw is one plain net/http exchange, for pinning down what a server does
// without idem in the way.
type raw struct {
	status  int
	header  http.Header
	body    string
	elapsed time.Duration
}

// send makes one plain request; key "" sends no key header. It must be
// called from the test's goroutine; others use trySend.
func send(t *testing.T, hc *http.Client, method, url, keyHeader, key, body string) raw {
	t.Helper()
	got, err := trySend(hc, method, url, keyHeader, key, body)
	require.NoError(t, err, "%s %s", method, url)
	return got
}

// trySend is send for any goroutine: it returns its error.
func trySend(hc *http.Client, method, url, keyHeader, key, body string) (raw, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, url, rd)
	if err != nil {
		return raw{}, err
	}
	if key != "" {
		req.Header.Set(keyHeader, key)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	start := time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		return raw{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return raw{}, err
	}
	return raw{status: resp.StatusCode, header: resp.Header, body: string(b), elapsed: time.Since(start)}, nil
}

// classes lists the classes of attempts, for messages and comparisons.
func classes(atts []idem.Attempt) []idem.Class {
	out := make([]idem.Class, len(atts))
	for i, a := range atts {
		out[i] = a.Class
	}
	return out
}

// statuses lists the statuses of attempts (0 for none).
func statuses(atts []idem.Attempt) []int {
	out := make([]int, len(atts))
	for i, a := range atts {
		out[i] = a.Status
	}
	return out
}

// waitIdle waits until inFlight reports zero, for at most two seconds.
func waitIdle(t *testing.T, inFlight func() int) {
	t.Helper()
	require.Eventually(t, func() bool { return inFlight() == 0 }, 2*time.Second, 5*time.Millisecond, "server still busy")
}
