package queue

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	neturl "net/url"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestEventStringAndLogValue: an Event reads as one line and as a slog group,
// spelt as everywhere in idem, with no key, body or URL query.
func TestEventStringAndLogValue(t *testing.T) {
	in, err := idem.NewIntent("POST", "http://api.test/pay?token=s3cret", []byte("body-secret"),
		idem.WithKey("key-secret-0123456789"), idem.WithLane("till 4"))
	require.NoError(t, err)
	leak := &neturl.Error{Op: "Post", URL: "http://api.test/pay?token=s3cret", Err: errors.New("connection refused")}
	mark := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		e    Event
		line string
	}{
		{Event{Kind: EventSettled, Record: &Record{ID: 7, State: Done, Outcome: idem.Applied, NumAttempts: 2, InDoubt: true, Intent: in}},
			`settled id=7 state=done outcome=applied lane="till 4" attempts=2 in_doubt=true`},
		{Event{Kind: EventSettled, Remote: true, Record: &Record{ID: 8, State: Failed, Outcome: idem.NotApplied, NumAttempts: 1, Intent: in}},
			`settled id=8 state=failed outcome=not_applied lane="till 4" attempts=1 remote=true`},
		{Event{Kind: EventSettled, Record: &Record{ID: 9, State: Failed, Damaged: true}},
			`settled id=9 state=failed attempts=0`},
		{Event{Kind: EventLaneHeld, Lane: "payments", Err: errors.New("401 after fresh credentials")},
			`lane_held lane=payments error="401 after fresh credentials"`},
		{Event{Kind: EventOffline}, `offline`},
		{Event{Kind: EventOnline}, `online`},
		{Event{Kind: EventError, Err: leak}, `error error="connection refused"`},
		{Event{Kind: EventClockReset, OldMark: mark.Add(time.Hour), NewMark: mark},
			`clock_reset old_mark=2026-12-04T11:00:00Z new_mark=2026-12-04T10:00:00Z`},
		{Event{Kind: EventMovedOn, Err: ErrMovedOn}, `moved_on error="` + ErrMovedOn.Error() + `"`},
	}
	for _, tt := range tests {
		t.Run(tt.e.Kind.String(), func(t *testing.T) {
			assert.Equal(t, tt.line, tt.e.String())

			var buf bytes.Buffer
			slog.New(slog.NewJSONHandler(&buf, nil)).Info("queue", "event", tt.e)
			var got struct {
				Event map[string]any `json:"event"`
			}
			require.NoError(t, json.Unmarshal(buf.Bytes(), &got), buf.String())
			assert.Equal(t, tt.e.Kind.String(), got.Event["kind"])
			if r := tt.e.Record; r != nil {
				assert.Equal(t, float64(r.ID), got.Event["id"])
				assert.Equal(t, r.State.String(), got.Event["state"])
			}
			for _, secret := range []string{"s3cret", "token", "key-secret", "body-secret"} {
				assert.NotContains(t, buf.String(), secret)
				assert.NotContains(t, tt.e.String(), secret)
			}
		})
	}
}
