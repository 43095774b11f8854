package interop

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
)

// TestDraftServerFollowsDraft pins DraftServer to the draft, step by step on
// one server, so that the toxiproxy tests run against a server whose
// behaviour is known rather than assumed.
func TestDraftServerFollowsDraft(t *testing.T) {
	t.Parallel()
	held := make(chan struct{})
	srv := new(DraftServer)
	srv.BeforeEffect = func(id string) error {
		switch id {
		case "held":
			<-held
		case "flaky":
			if srv.Ledger.Arrivals(id) == 1 {
				return errors.New("database unavailable")
			}
		}
		return nil
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	t.Cleanup(func() {
		select {
		case <-held:
		default:
			close(held)
		}
	})
	hc := newHTTPClient(t, nil)

	// The held payment occupies its key while the steps run.
	heldDone := make(chan raw, 1)
	heldBody := string(paymentBody(t, "held", 1))
	go func() {
		got, err := trySend(hc, http.MethodPost, ts.URL+"/pay", KeyHeader, `"k-held"`, heldBody)
		if err != nil {
			t.Errorf("held POST: %v", err)
		}
		heldDone <- got
	}()
	require.Eventually(t, func() bool { return srv.Ledger.Arrivals("held") == 1 }, 2*time.Second, time.Millisecond)

	a, b := string(paymentBody(t, "A", 1)), string(paymentBody(t, "B", 1))
	steps := []struct {
		name       string
		method     string
		path       string
		key        string // the raw field value; "" sends none
		body       string
		wantStatus int
		wantReplay bool
		wantBody   string // substring
	}{
		{name: "no key", method: "POST", path: "/pay", body: a, wantStatus: 400},
		{name: "bare key, not an sf-string", method: "POST", path: "/pay", key: "k1", body: a, wantStatus: 400},
		{name: "empty sf-string", method: "POST", path: "/pay", key: `""`, body: a, wantStatus: 400},
		{name: "bad escape", method: "POST", path: "/pay", key: `"k\x"`, body: a, wantStatus: 400},
		{name: "a list, not an item", method: "POST", path: "/pay", key: `"k1", "k2"`, body: a, wantStatus: 400},
		{name: "parameters", method: "POST", path: "/pay", key: `"k1";v=1`, body: a, wantStatus: 400},
		{name: "first request", method: "POST", path: "/pay", key: `"k1"`, body: a, wantStatus: 201, wantBody: `"effect":1`},
		{name: "retry replayed", method: "POST", path: "/pay", key: `"k1"`, body: a, wantStatus: 201, wantReplay: true, wantBody: `"effect":1`},
		{name: "retry replayed, spaces around", method: "POST", path: "/pay", key: ` "k1" `, body: a, wantStatus: 201, wantReplay: true},
		{name: "same key, other body", method: "POST", path: "/pay", key: `"k1"`, body: b, wantStatus: 422},
		{name: "same key, other path", method: "POST", path: "/refund", key: `"k1"`, body: a, wantStatus: 422},
		{name: "same key, other method", method: "PATCH", path: "/pay", key: `"k1"`, body: a, wantStatus: 422},
		{name: "escaped quote in key", method: "POST", path: "/pay", key: `"k\"2"`, body: b, wantStatus: 201},
		{name: "key in flight", method: "POST", path: "/pay", key: `"k-held"`, body: string(paymentBody(t, "held", 1)), wantStatus: 409},
		{name: "failure before effect", method: "POST", path: "/pay", key: `"k-flaky"`, body: string(paymentBody(t, "flaky", 1)), wantStatus: 503},
		{name: "retry after the failure executes", method: "POST", path: "/pay", key: `"k-flaky"`, body: string(paymentBody(t, "flaky", 1)), wantStatus: 201, wantBody: `"effect":1`},
		{name: "GET is not covered", method: "GET", path: "/pay", key: `"k3"`, wantStatus: 405},
		{name: "not a payment", method: "POST", path: "/pay", key: `"k4"`, body: `{}`, wantStatus: 400},
	}
	for _, st := range steps {
		// Steps share the server's state, so they run in order.
		got := send(t, hc, st.method, ts.URL+st.path, KeyHeader, st.key, st.body)
		assert.Equal(t, st.wantStatus, got.status, "%s: status", st.name)
		assert.Equal(t, st.wantReplay, got.header.Get(ReplayHeader) == "true", "%s: %s", st.name, ReplayHeader)
		assert.Contains(t, got.body, st.wantBody, "%s: body", st.name)
	}
	close(held)
	assert.Equal(t, http.StatusCreated, (<-heldDone).status, "the held request completes")
	for id, want := range map[string]int{"A": 1, "B": 1, "held": 1, "flaky": 1} {
		assert.Equal(t, want, srv.Ledger.Effects(id), "effects of %s", id)
	}
}

// TestParseSFString checks the key parser against RFC 8941 section 3.3.3.
func TestParseSFString(t *testing.T) {
	t.Parallel()
	tests := []struct {
		lines  []string
		want   string
		wantOK bool
	}{
		{[]string{`"abc"`}, "abc", true},
		{[]string{` "abc" `}, "abc", true},
		{[]string{`"a\"b\\c"`}, `a"b\c`, true},
		{[]string{`"8e03978e-40d5-43e8-bc93-6894a57f9324"`}, "8e03978e-40d5-43e8-bc93-6894a57f9324", true},
		{nil, "", false},
		{[]string{`"a"`, `"b"`}, "", false},
		{[]string{`abc`}, "", false},
		{[]string{`""`}, "", false},
		{[]string{`"abc`}, "", false},
		{[]string{`"a"b"`}, "", false},
		{[]string{`"a\b"`}, "", false},
		{[]string{`"a\"`}, "", false},
		{[]string{"\"a\tb\""}, "", false},
		{[]string{"\"caf\xc3\xa9\""}, "", false},
		{[]string{`"a";p=1`}, "", false},
	}
	for _, tt := range tests {
		got, ok := parseSFString(tt.lines)
		assert.Equal(t, tt.wantOK, ok, "parseSFString(%q) ok", tt.lines)
		assert.Equal(t, tt.want, got, "parseSFString(%q)", tt.lines)
	}
}

// TestIdemAgainstStrictDraftServer: idem writes the key bare by default, as
// deployed servers expect; a server that holds to the draft's sf-string
// refuses it with 400, which idem reports as NotApplied after one attempt.
// KeySFString speaks the draft's form.
func TestIdemAgainstStrictDraftServer(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		sfString    bool
		wantOutcome idem.Outcome
		wantStatus  int
		wantEffects int
	}{
		{name: "plain key", sfString: false, wantOutcome: idem.NotApplied, wantStatus: 400, wantEffects: 0},
		{name: "KeySFString", sfString: true, wantOutcome: idem.Applied, wantStatus: 201, wantEffects: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := new(DraftServer)
			ts := httptest.NewServer(srv)
			t.Cleanup(ts.Close)
			c := newClient(t, quickPolicy())
			c.KeySFString = tt.sfString
			in := payment(t, ts.URL+"/pay", "p1")
			for i, wantReplayed := range []bool{false, tt.wantOutcome == idem.Applied} {
				d := do(t, c, in)
				require.NoError(t, d.err, "send %d", i)
				assert.Equal(t, tt.wantOutcome, d.outcome, "send %d: outcome", i)
				assert.Equal(t, tt.wantStatus, d.status, "send %d: status", i)
				assert.Equal(t, wantReplayed, d.replayed, "send %d: replayed", i)
				assert.Len(t, d.attempts, 1, "send %d: attempts", i)
			}
			assert.Equal(t, tt.wantEffects, srv.Ledger.Effects("p1"))
		})
	}
}

// TestDraftServerEffectSurvivesClientLoss: the effect and the stored answer
// do not depend on the client waiting: a client that gives up after sending
// finds the answer stored when it comes back.
func TestDraftServerEffectSurvivesClientLoss(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := &DraftServer{BeforeEffect: func(string) error { <-release; return nil }}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	hc := newHTTPClient(t, nil)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+"/pay", strings.NewReader(string(paymentBody(t, "p1", 1))))
	require.NoError(t, err)
	req.Header.Set(KeyHeader, `"k1"`)
	sent := make(chan error, 1)
	go func() {
		resp, err := hc.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		sent <- err
	}()
	require.Eventually(t, func() bool { return srv.Ledger.Arrivals("p1") == 1 }, 2*time.Second, time.Millisecond)
	cancel() // the client gives up while the server holds the claim
	require.ErrorIs(t, <-sent, context.Canceled)
	close(release)
	waitIdle(t, srv.InFlight)

	got := send(t, hc, http.MethodPost, ts.URL+"/pay", KeyHeader, `"k1"`, string(paymentBody(t, "p1", 1)))
	assert.Equal(t, http.StatusCreated, got.status)
	assert.Equal(t, "true", got.header.Get(ReplayHeader))
	assert.Equal(t, 1, srv.Ledger.Effects("p1"))
}
