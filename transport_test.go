package idem

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testTransport wraps a fresh base transport (dialing through dial when not
// nil) in a Transport on a fake clock.
func testTransport(t *testing.T, dial *refusingDialer) (*Transport, *fakeClock) {
	base := httpClient(t, nil).Transport.(*http.Transport)
	if dial != nil {
		base.DialContext = dial.DialContext
	}
	clk := newFakeClock()
	return &Transport{Base: base, clock: clk, rand: func() float64 { return 0.5 }}, clk
}

// TestTransportTable sends requests as generated API clients do: built with
// http.NewRequest, sent by an *http.Client whose Transport is idem's.
func TestTransportTable(t *testing.T) {
	tests := []struct {
		name     string
		method   string
		key      string // Idempotency-Key set by the caller
		xkey     string // X-Idempotency-Key set by the caller
		refuse   int
		steps    []step
		requests int // requests the server saw
		status   int // final status; 0 when an error is expected
		err      error
		waits    []time.Duration
	}{
		{name: "GET 503 then 200", method: "GET", steps: []step{answer(503), answer(200)},
			requests: 2, status: 200, waits: []time.Duration{200 * ms}},
		{name: "keyless POST never sent is resent", method: "POST", refuse: 2, steps: []step{answer(201)},
			requests: 1, status: 201, waits: []time.Duration{200 * ms, 400 * ms}},
		{name: "keyless POST 503 is handed back", method: "POST", steps: []step{answer(503)},
			requests: 1, status: 503},
		{name: "keyless POST lost answer is not resent", method: "POST", steps: []step{hangup},
			requests: 1, err: ErrNoKey},
		{name: "keyed POST lost answer is resent", method: "POST", key: "k-1", steps: []step{hangup, answer(201, "Idempotent-Replayed", "true")},
			requests: 2, status: 201, waits: []time.Duration{200 * ms}},
		{name: "X-Idempotency-Key counts as a key", method: "POST", xkey: "k-2", steps: []step{answer(502), answer(201)},
			requests: 2, status: 201, waits: []time.Duration{200 * ms}},
		{name: "keyless PUT 500 is resent", method: "PUT", steps: []step{answer(500), answer(200)},
			requests: 2, status: 200, waits: []time.Duration{200 * ms}},
		{name: "DELETE lost answer then 404", method: "DELETE", steps: []step{hangup, answer(404)},
			requests: 2, status: 404, waits: []time.Duration{200 * ms}},
		{name: "429 waits Retry-After", method: "POST", steps: []step{answer(429, "Retry-After", "3"), answer(201)},
			requests: 2, status: 201, waits: []time.Duration{3 * time.Second}},
		{name: "409 keyed", method: "PATCH", key: "k-3", steps: []step{answer(409), answer(200)},
			requests: 2, status: 200, waits: []time.Duration{200 * ms}},
		{name: "400 is handed back", method: "POST", key: "k-4", steps: []step{answer(400)},
			requests: 1, status: 400},
		{name: "503 exhausted hands back the last", method: "GET", steps: []step{answer(503), answer(503), answer(503), answer(503)},
			requests: 4, status: 503, waits: []time.Duration{200 * ms, 400 * ms, 800 * ms}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newScripted(t, tt.steps...)
			d := &refusingDialer{}
			d.left.Store(int32(tt.refuse))
			tr, clk := testTransport(t, d)
			hc := &http.Client{Transport: tr}

			req, err := http.NewRequest(tt.method, srv.URL+"/things", strings.NewReader(`{"n":1}`))
			require.NoError(t, err)
			if tt.key != "" {
				req.Header.Set("Idempotency-Key", tt.key)
			}
			if tt.xkey != "" {
				req.Header.Set("X-Idempotency-Key", tt.xkey)
			}
			resp, err := hc.Do(req)
			if tt.err != nil {
				require.Error(t, err)
				assert.ErrorIs(t, err, tt.err)
				assert.ErrorIs(t, err, ErrOutcomeUnknown)
				var e *Error
				require.True(t, errors.As(err, &e), "the *Error is reachable through *url.Error")
				assert.NotEmpty(t, e.Attempts)
			} else {
				require.NoError(t, err)
				assert.Equal(t, tt.status, resp.StatusCode)
				resp.Body.Close()
			}
			reqs := srv.Requests()
			assert.Len(t, reqs, tt.requests)
			for _, r := range reqs {
				assert.Equal(t, `{"n":1}`, r.body, "the body is replayed byte for byte")
				assert.Equal(t, tt.key, r.key, "the transport never adds or changes a key")
			}
			if len(tt.waits) == 0 {
				assert.Empty(t, clk.Sleeps())
			} else {
				assert.Equal(t, tt.waits, clk.Sleeps())
			}
		})
	}
}

// onceReader is a body without GetBody: it can be sent once.
type onceReader struct {
	io.Reader
	closed atomic.Bool
}

func (o *onceReader) Close() error { o.closed.Store(true); return nil }

func TestTransportBodyNotReplayable(t *testing.T) {
	srv := newScripted(t, answer(201))
	d := &refusingDialer{}
	d.left.Store(1)
	tr, _ := testTransport(t, d)
	body := &onceReader{Reader: strings.NewReader("x")}
	req, err := http.NewRequest("POST", srv.URL, body)
	require.NoError(t, err)
	req.GetBody = nil
	_, err = tr.RoundTrip(req)
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrNotApplied, "refused, and not resent: the body cannot be replayed")
	assert.ErrorIs(t, err, ErrAttemptsExhausted)
	assert.Empty(t, srv.Requests())
	assert.True(t, body.closed.Load(), "RoundTrip closes the body")
}

func TestTransportDoesNotModifyRequest(t *testing.T) {
	srv := newScripted(t, answer(503), answer(200))
	tr, _ := testTransport(t, nil)
	req, err := http.NewRequest("PUT", srv.URL, bytes.NewReader([]byte("v")))
	require.NoError(t, err)
	req.Header.Set("X-Trace", "1")
	before := req.Header.Clone()
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, before, req.Header)
	assert.Equal(t, context.Background(), req.Context())
}

func TestTransportContextEnded(t *testing.T) {
	srv := newScripted(t)
	tr, _ := testTransport(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	body := &onceReader{Reader: strings.NewReader("x")}
	req, err := http.NewRequestWithContext(ctx, "POST", srv.URL, body)
	require.NoError(t, err)
	_, err = tr.RoundTrip(req)
	assert.ErrorIs(t, err, context.Canceled)
	assert.True(t, body.closed.Load())
	assert.Empty(t, srv.Requests())
}

func TestTransportBadPolicy(t *testing.T) {
	tr := &Transport{Policy: Policy{MaxDelay: -1}}
	body := &onceReader{Reader: strings.NewReader("x")}
	req, _ := http.NewRequest("POST", "http://127.0.0.1:1/", body)
	_, err := tr.RoundTrip(req)
	assert.ErrorIs(t, err, ErrInvalidPolicy)
	assert.True(t, body.closed.Load())
}

func TestTransportBudgetAndStats(t *testing.T) {
	srv := newScripted(t, answer(503), answer(503), answer(503))
	tr, _ := testTransport(t, nil)
	tr.Budget = NewBudget(1)
	var infos []AttemptInfo
	tr.OnAttempt = func(_ context.Context, a AttemptInfo) { infos = append(infos, a) }
	req, _ := http.NewRequest("GET", srv.URL+"/x?token=secret", nil)
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 503, resp.StatusCode)
	assert.Len(t, srv.Requests(), 2, "the budget allowed one retry")
	st := tr.Stats()
	assert.Equal(t, uint64(2), st.Requests)
	assert.Equal(t, uint64(1), st.Retries)
	assert.Equal(t, uint64(1), st.BudgetRefusals)
	assert.Equal(t, map[Outcome]uint64{Unknown: 1}, st.Outcomes)
	require.Len(t, infos, 2)
	assert.Equal(t, 2, infos[1].N)
	assert.Equal(t, srv.URL+"/x", infos[0].URL, "no query in what the hook sees")
}

// TestTransportReport: a RoundTripper hands back the last response as it came;
// the Report attached to the request's context tells what it means.
func TestTransportReport(t *testing.T) {
	tests := []struct {
		name    string
		steps   []step
		method  string
		outcome Outcome
		cause   error
		n       int
	}{
		{"503 after the retries ran out", []step{answer(503), answer(503), answer(503), answer(503)}, "PUT", Unknown, ErrAttemptsExhausted, 4},
		{"success after an ambiguous attempt", []step{answer(503), answer(201, "Idempotent-Replayed", "true")}, "PUT", Applied, nil, 2},
		{"plain rejection", []step{answer(404)}, "PUT", NotApplied, nil, 1},
		{"keyed 409 polled, no attempt", []step{answer(409), answer(409), answer(409), answer(409), answer(201, "Idempotent-Replayed", "true")}, "POST", Applied, nil, 5},
		{"keyed 409 asking too long a wait", []step{answer(409, "Retry-After", "3600")}, "POST", Unknown, ErrRetryAfterTooLong, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newScripted(t, tt.steps...)
			tr, _ := testTransport(t, nil)
			hc := &http.Client{Transport: tr}
			var rep Report
			req, err := http.NewRequestWithContext(WithReport(context.Background(), &rep), tt.method, srv.URL, strings.NewReader("x"))
			require.NoError(t, err)
			req.Header.Set("Idempotency-Key", "k-1")
			resp, err := hc.Do(req)
			require.NoError(t, err, "a RoundTripper hands back the response")
			resp.Body.Close()
			assert.Equal(t, tt.outcome, rep.Outcome)
			assert.Len(t, rep.Attempts, tt.n)
			if tt.cause != nil {
				require.NotNil(t, rep.Err)
				assert.ErrorIs(t, rep.Err, tt.cause)
			} else {
				assert.Nil(t, rep.Err)
			}
			assert.Equal(t, tt.outcome == Applied && tt.n > 1, rep.Replayed)
		})
	}

	t.Run("no response", func(t *testing.T) {
		tr, _ := testTransport(t, nil)
		d := &refusingDialer{}
		d.left.Store(100)
		tr.Base = httpClient(t, d.DialContext).Transport
		var rep Report
		req, _ := http.NewRequestWithContext(WithReport(context.Background(), &rep), "GET", "http://127.0.0.1:1/", nil)
		_, err := tr.RoundTrip(req)
		require.Error(t, err)
		assert.Equal(t, NotApplied, rep.Outcome)
		assert.Same(t, asError(t, err), rep.Err)
	})
}

// TestTransportNilURL: a request without a URL gets an error, as from
// net/http, not a panic.
func TestTransportNilURL(t *testing.T) {
	tr, _ := testTransport(t, nil)
	_, err := tr.RoundTrip(&http.Request{Method: "GET", Header: http.Header{}})
	assert.ErrorContains(t, err, "no URL")
}
