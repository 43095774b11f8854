package idemtest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFaultsThenRetry checks each fault's first answer and what a retry
// with the same key gets.
func TestFaultsThenRetry(t *testing.T) {
	tests := []struct {
		fault           Fault
		wantErr         bool // the client gets no response at all
		wantStatus      int  // when it gets one
		wantEffects     int  // after the faulty request
		wantRetryReplay bool
	}{
		{FaultNone, false, 201, 1, true},
		{FaultCloseBeforeRead, true, 0, 0, false},
		{FaultCommitThenDrop, true, 0, 1, true},
		{FaultDelay, false, 201, 1, true},
		{Fault503, false, 503, 0, false},
		{Fault500AfterEffect, false, 500, 1, true},
		{Fault429, false, 429, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.fault.String(), func(t *testing.T) {
			s := startServer(t, Options{Faults: faultOnFirst(tt.fault), Delay: 50 * time.Millisecond})
			c := testClient(t, s)
			url := s.URL() + "/payments"

			got, err := send(c, "POST", url, "k", `{"amount":1}`)
			if tt.wantErr {
				assert.Error(t, err, "faulty request")
			} else {
				require.NoError(t, err, "faulty request")
				assert.Equal(t, tt.wantStatus, got.status, "faulty request status")
			}
			assert.Equal(t, tt.wantEffects, s.EffectsForKey("k"), "effects after the fault")
			assert.Equal(t, 1, s.Requests(), "Requests")

			retry := mustSend(t, c, "POST", url, "k", `{"amount":1}`)
			assert.Equal(t, http.StatusCreated, retry.status, "retry status")
			replayed := retry.header.Get("Idempotent-Replayed") == "true"
			assert.Equal(t, tt.wantRetryReplay, replayed, "retry replayed: got %v, want %v", replayed, tt.wantRetryReplay)
			assert.JSONEq(t, `{"id":"pay_1","seq":1}`, retry.body, "retry body")
			assert.Equal(t, 1, s.EffectsForKey("k"), "effects after the retry")
			if tt.fault != FaultNone {
				assert.Equal(t, 1, s.Stats().Faults[tt.fault], "Stats.Faults[%v]", tt.fault)
			}
		})
	}
}

// TestFaultDelayOutlivesClientTimeout: a client that gives up while the
// server holds its request does not stop the effect. The test ends the
// pause itself, after the client has given up, so no timing decides the
// order.
func TestFaultDelayOutlivesClientTimeout(t *testing.T) {
	s, gate := startGated(t, Options{Faults: faultOnFirst(FaultDelay)})
	c := testClient(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", s.URL()+"/payments", strings.NewReader("x"))
	require.NoError(t, err)
	req.Header.Set("Idempotency-Key", "k")
	sent := make(chan error, 1)
	go func() {
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		sent <- err
	}()
	wake := <-gate // the server holds the request, its claim made
	cancel()       // the client gives up, as on its timeout
	require.Error(t, <-sent, "the client got an answer")
	assert.Equal(t, 0, s.EffectsForKey("k"), "effect applied before the delay ended")
	// The server carries on without the client, as a real one would.
	close(wake)
	assert.Eventually(t, func() bool { return s.EffectsForKey("k") == 1 }, 10*time.Second, 10*time.Millisecond,
		"effect never applied after the client left")
}

func TestFaultsOnRoutesWithoutKeyLayer(t *testing.T) {
	tests := []struct {
		fault       Fault
		wantErr     bool
		wantStatus  int
		wantEffects int
		wantStored  bool
	}{
		{FaultCloseBeforeRead, true, 0, 0, false},
		{FaultCommitThenDrop, true, 0, 1, true},
		{FaultDelay, false, 201, 1, true},
		{Fault503, false, 503, 0, false},
		{Fault500AfterEffect, false, 500, 1, true},
		{Fault429, false, 429, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.fault.String(), func(t *testing.T) {
			faultPuts := func(r *http.Request, _ string, _ int) Fault {
				if r.Method == http.MethodPut {
					return tt.fault
				}
				return FaultNone
			}
			s := startServer(t, Options{Faults: faultPuts, Delay: 20 * time.Millisecond})
			c := testClient(t, s)
			url := s.URL() + "/resources/r1"

			got, err := send(c, "PUT", url, "", "v1")
			if tt.wantErr {
				assert.Error(t, err, "PUT")
			} else {
				require.NoError(t, err, "PUT")
				assert.Equal(t, tt.wantStatus, got.status, "PUT status")
			}
			assert.Equal(t, tt.wantEffects, s.TotalEffects(), "TotalEffects")
			stored := mustSend(t, c, "GET", url, "", "").status == http.StatusOK
			assert.Equal(t, tt.wantStored, stored, "resource stored: got %v, want %v", stored, tt.wantStored)
		})
	}
}

func TestFaultsReplaceNonOwnedAnswers(t *testing.T) {
	// A response-side fault acts on whatever the claim found: here the
	// retry's replay is lost too, and the effect is still applied once.
	s := startServer(t, Options{Faults: func(_ *http.Request, _ string, seen int) Fault {
		if seen < 2 {
			return FaultCommitThenDrop
		}
		return FaultNone
	}})
	c := testClient(t, s)
	url := s.URL() + "/payments"
	for i := range 2 {
		_, err := send(c, "POST", url, "k", "x")
		assert.Error(t, err, "attempt %d", i)
	}
	got := mustSend(t, c, "POST", url, "k", "x")
	assert.Equal(t, "true", got.header.Get("Idempotent-Replayed"))
	assert.Equal(t, 1, s.EffectsForKey("k"))
	assert.Equal(t, 2, s.Stats().Replays, "Stats.Replays")
}

func TestFaultString(t *testing.T) {
	tests := []struct {
		f    Fault
		want string
	}{
		{FaultNone, "none"},
		{FaultCloseBeforeRead, "close-before-read"},
		{FaultCommitThenDrop, "commit-then-drop"},
		{FaultDelay, "delay"},
		{Fault503, "503"},
		{Fault500AfterEffect, "500-after-effect"},
		{Fault429, "429"},
		{Fault(99), "Fault(99)"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			got := tt.f.String()
			assert.Equal(t, tt.want, got, "Fault(%d).String() = %q, want %q", int(tt.f), got, tt.want)
		})
	}
}

func TestHandlerInProcess(t *testing.T) {
	s := New(Options{Faults: faultOnFirst(FaultCommitThenDrop)})
	defer s.Close()
	req := httptest.NewRequest("POST", "/payments", nil)
	req.Header.Set("Idempotency-Key", "k")
	// A recorder cannot be hijacked, so the drop becomes an abort.
	assert.PanicsWithValue(t, http.ErrAbortHandler, func() {
		s.Handler().ServeHTTP(httptest.NewRecorder(), req)
	})
	assert.Equal(t, 1, s.EffectsForKey("k"))
}
