package idem

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem/redact"
)

func logRecords(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m), line)
		out = append(out, m)
	}
	return out
}

func TestLoggerRecords(t *testing.T) {
	srv := newScripted(t, answer(503), answer(503))
	var buf bytes.Buffer
	c, _ := testClient(t, nil)
	c.Logger = slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c.Policy.MaxAttempts = 2
	c.Authorize = func(_ context.Context, r *http.Request) error {
		r.Header.Set("Authorization", "Bearer sk_live_SECRET")
		return nil
	}
	in := mustIntent(t, "POST", srv.URL+"/pay?api_key=QUERYSECRET", `{"card":"4242BODYSECRET"}`)
	_, err := c.Do(context.Background(), in)
	require.ErrorIs(t, err, ErrOutcomeUnknown)

	recs := logRecords(t, &buf)
	var levels, msgs []string
	for _, r := range recs {
		levels = append(levels, r["level"].(string))
		msgs = append(msgs, r["msg"].(string))
	}
	assert.Equal(t, []string{"DEBUG", "INFO", "DEBUG", "WARN"}, levels)
	assert.Equal(t, []string{"idem: attempt", "idem: retrying", "idem: attempt", "idem: outcome unknown"}, msgs)
	u, err := url.Parse(srv.URL)
	require.NoError(t, err)
	port, err := strconv.Atoi(u.Port())
	require.NoError(t, err)
	for i, r := range recs { // the HTTP semantic conventions' names, on every record
		assert.Equal(t, "POST", r["http.request.method"], "record %d", i)
		assert.Equal(t, "127.0.0.1", r["server.address"], "record %d", i)
		assert.EqualValues(t, port, r["server.port"], "record %d", i)
		assert.Equal(t, "http", r["url.scheme"], "record %d", i)
		assert.Equal(t, srv.URL+"/pay", r["url.full"], "record %d", i)
	}
	assert.Equal(t, "ambiguous", recs[0]["idem.class"])
	assert.EqualValues(t, 503, recs[0]["http.response.status_code"])
	assert.NotContains(t, recs[0], "http.request.resend_count", "absent on the first attempt")
	assert.EqualValues(t, 1, recs[1]["http.request.resend_count"], "the retry announces the first resend")
	assert.Equal(t, "retry", recs[0]["idem.action"])
	assert.Contains(t, recs[1], "idem.retry.wait")
	assert.EqualValues(t, 1, recs[2]["http.request.resend_count"])
	assert.Equal(t, "stop", recs[2]["idem.action"])
	assert.Equal(t, "unknown", recs[3]["idem.outcome"])
	assert.EqualValues(t, 2, recs[3]["idem.attempts"])
	assert.Contains(t, recs[3]["idem.reason"], "attempts exhausted")

	out := buf.String()
	for _, secret := range []string{in.Key(), "BODYSECRET", "sk_live_SECRET", "QUERYSECRET"} {
		assert.NotContains(t, out, secret, "logs must not hold %q", secret)
	}
}

func TestLoggerQuietByDefault(t *testing.T) {
	srv := newScripted(t, hangup, answer(201))
	var buf bytes.Buffer
	c, _ := testClient(t, nil)
	c.Logger = slog.New(slog.NewTextHandler(&buf, nil)) // Info and above
	in := mustIntent(t, "POST", srv.URL, "BODYSECRET")
	res, err := c.Do(context.Background(), in)
	require.NoError(t, err)
	res.Response.Body.Close()
	out := buf.String()
	assert.Contains(t, out, "idem: retrying")
	assert.NotContains(t, out, "idem: attempt")
	assert.NotContains(t, out, in.Key())
	assert.NotContains(t, out, "BODYSECRET")
	assert.NotContains(t, out, "Post ", "no request line from net/http's error (Post \"URL\": ...)")
}

func TestClientStatsAndHook(t *testing.T) {
	srv := newScripted(t, answer(409), answer(503), answer(201, "Idempotent-Replayed", "true"), answer(422))
	c, _ := testClient(t, nil)
	var infos []AttemptInfo
	c.OnAttempt = func(_ context.Context, a AttemptInfo) { infos = append(infos, a) }
	res, err := c.Do(context.Background(), mustIntent(t, "POST", srv.URL+"/p", "a"))
	require.NoError(t, err)
	res.Response.Body.Close()
	_, err = c.Do(context.Background(), mustIntent(t, "POST", srv.URL+"/p", "b"))
	require.ErrorIs(t, err, ErrKeyReused)

	st := c.Stats()
	assert.Equal(t, uint64(4), st.Requests)
	assert.Equal(t, uint64(2), st.Retries)
	assert.Equal(t, map[Class]uint64{ClassNotProcessed: 1, ClassAmbiguous: 1}, st.RetriesAfter)
	assert.Equal(t, uint64(1), st.Replays)
	assert.Equal(t, uint64(1), st.Conflicts)
	assert.Equal(t, uint64(1), st.KeyReused)
	assert.Equal(t, map[Outcome]uint64{Applied: 1, NotApplied: 1}, st.Outcomes)

	require.Len(t, infos, 4)
	assert.Equal(t, []int{1, 2, 3, 1}, []int{infos[0].N, infos[1].N, infos[2].N, infos[3].N})
	assert.Equal(t, ActionRetry, infos[0].Action)
	assert.Equal(t, ActionDone, infos[2].Action)
	assert.Equal(t, ActionStop, infos[3].Action)
	assert.Equal(t, "POST", infos[0].Method)
}

func TestSafeURLAndError(t *testing.T) {
	assert.Equal(t, "https://redacted@h/p", redact.RawURL("https://u:pw@h/p?k=v#f"))
	assert.Equal(t, "(unparsable URL)", redact.RawURL("http://h/%zz"))
	err := &url.Error{Op: "Post", URL: "https://h/p?k=secret", Err: io.ErrUnexpectedEOF}
	assert.Equal(t, "unexpected EOF", redact.Error(fmt.Errorf("wrapped: %w", err)))
	assert.Equal(t, "plain", redact.Error(errors.New("plain")))
}

func TestHookSeesWaitsAndTrueActions(t *testing.T) {
	srv := newScripted(t, answer(503), answer(503))
	c, _ := testClient(t, nil)
	c.Policy.MaxAttempts = 2
	type seen struct {
		info AttemptInfo
		ctx  context.Context
	}
	var got []seen
	c.OnAttempt = func(ctx context.Context, a AttemptInfo) { got = append(got, seen{a, ctx}) }
	type ctxKey struct{}
	ctx := context.WithValue(context.Background(), ctxKey{}, "trace-1")
	_, err := c.Do(ctx, mustIntent(t, "POST", srv.URL, "x"))
	require.ErrorIs(t, err, ErrAttemptsExhausted)
	require.Len(t, got, 2)
	assert.Equal(t, ActionRetry, got[0].info.Action)
	assert.Equal(t, 200*ms, got[0].info.Attempt.Wait, "the hook sees the wait that followed")
	assert.Equal(t, ActionStop, got[1].info.Action, "the policy stopped what the table would retry")
	assert.Equal(t, "trace-1", got[0].ctx.Value(ctxKey{}), "the hook gets the operation's context")
	assert.Equal(t, DefaultBudgetTokens-1, c.Stats().BudgetTokens, "one retry, and no answer that ended the operation")
}

func TestNoQueryInErrorsAndHook(t *testing.T) {
	d := &refusingDialer{}
	d.left.Store(100)
	c, _ := testClient(t, httpClient(t, d.DialContext))
	c.Policy.MaxAttempts = 1
	var errText string
	var hookErr error
	c.OnAttempt = func(_ context.Context, a AttemptInfo) { errText, hookErr = a.Attempt.Err.Error(), a.Attempt.Err }
	_, err := c.Do(context.Background(), mustIntent(t, "POST", "http://127.0.0.1:9/p?token=QUERYSECRET", "x"))
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "QUERYSECRET")
	assert.NotContains(t, errText, "QUERYSECRET")
	assert.Contains(t, errText, "connection refused")
	var op *net.OpError
	assert.True(t, errors.As(hookErr, &op), "the hook's error still unwraps to the original")
}
