package queue

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
)

func TestHorizonJudge(t *testing.T) {
	h := horizon{retention: 24 * time.Hour, margin: time.Hour, attemptTimeout: 30 * time.Second, clockTolerance: 5 * time.Minute}
	aged := h
	aged.maxAge = 2 * time.Hour
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	in, err := idem.NewIntent("POST", "http://h/p", nil)
	require.NoError(t, err)
	created := in.CreatedAt()
	limit := t0.Add(23 * time.Hour) // FirstSentAt + retention - margin

	tests := []struct {
		name      string
		h         horizon
		firstSent time.Time
		now, hwm  time.Time
		want      verdict
		reason    string
	}{
		{"fresh, never sent", h, time.Time{}, created, time.Time{}, verdictSend, ""},
		{"never reached the server: no retention horizon", h, time.Time{}, created.Add(30 * 24 * time.Hour), time.Time{}, verdictSend, ""},
		{"sent an hour ago", h, t0, t0.Add(time.Hour), t0, verdictSend, ""},
		{"attempt would end at the limit", h, t0, limit.Add(-30 * time.Second), t0, verdictSend, ""},
		{"attempt would end just past the limit", h, t0, limit.Add(-29 * time.Second), t0, verdictExpire, "past the horizon"},
		{"inside the margin", h, t0, t0.Add(23*time.Hour + 30*time.Minute), t0, verdictExpire, "past the horizon"},
		{"past retention", h, t0, t0.Add(25 * time.Hour), t0, verdictExpire, "attempts must end by 2026-12-02T11:00:00Z (retention 24h0m0s less margin 1h0m0s)"},
		{"clock behind the high-water mark within tolerance", h, t0, t0.Add(time.Hour), t0.Add(time.Hour + 4*time.Minute), verdictSend, ""},
		{"clock ran backwards", h, t0, t0.Add(-48 * time.Hour), t0.Add(time.Hour), verdictHold, "before the latest time seen"},
		{"clock ran backwards past a horizon it would hide", h, t0, t0.Add(time.Hour), t0.Add(30 * time.Hour), verdictHold, "clock reads"},
		{"first sent later than the clock reads, within tolerance", h, t0.Add(4 * time.Minute), t0, time.Time{}, verdictSend, ""},
		{"first sent by a clock that read ahead", h, t0.Add(time.Hour), t0, t0, verdictExpire, "after the clock's reading 2026-12-01T12:00:00Z"},
		{"max age not reached", aged, time.Time{}, created.Add(time.Hour), time.Time{}, verdictSend, ""},
		{"max age reached without a send", aged, time.Time{}, created.Add(2 * time.Hour), time.Time{}, verdictExpire, "older than the max age 2h0m0s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &Record{Intent: in, FirstSentAt: tt.firstSent}
			got, reason := tt.h.judge(r, tt.now, tt.hwm)
			assert.Equal(t, tt.want, got, "judge(%v) = %v (%s), want %v", tt.now, got, reason, tt.want)
			assert.Contains(t, reason, tt.reason)
			if tt.want == verdictSend {
				assert.Empty(t, reason)
			}
		})
	}
}

func TestHorizonFitsBefore(t *testing.T) {
	h := horizon{retention: 24 * time.Hour, margin: time.Hour, attemptTimeout: 30 * time.Second, clockTolerance: time.Minute}
	in, err := idem.NewIntent("POST", "http://h/p", nil)
	require.NoError(t, err)
	t0 := in.CreatedAt()
	sent := &Record{Intent: in, FirstSentAt: t0}
	never := &Record{Intent: in}

	tests := []struct {
		name string
		r    *Record
		next time.Time
		want bool
	}{
		{"Retry-After of a minute", sent, t0.Add(time.Minute), true},
		{"Retry-After longer than the horizon", sent, t0.Add(30 * time.Hour), false},
		{"Retry-After ending inside the margin", sent, t0.Add(23*time.Hour + time.Minute), false},
		{"never sent: any wait fits", never, t0.Add(300 * time.Hour), true},
	}
	for _, tt := range tests {
		got, reason := h.fitsBefore(tt.r, tt.next)
		assert.Equal(t, tt.want, got, "%s: %s", tt.name, reason)
	}
}

func TestAdvanceMark(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name      string
		mark, now time.Time
		want      time.Time
	}{
		{"new file: the first reading", time.Time{}, t0, t0},
		{"later", t0, t0.Add(time.Hour), t0.Add(time.Hour)},
		{"earlier: the mark stays", t0, t0.Add(-time.Hour), t0},
		{"a step ahead", t0, t0.Add(MaxClockStep), t0.Add(MaxClockStep)},
		{"a year ahead: one step", t0, t0.Add(365 * 24 * time.Hour), t0.Add(MaxClockStep)},
	}
	for _, tt := range tests {
		if got := advanceMark(tt.mark, tt.now); !got.Equal(tt.want) {
			t.Errorf("%s: advanceMark(%v, %v) = %v, want %v", tt.name, tt.mark, tt.now, got, tt.want)
		}
	}
}
