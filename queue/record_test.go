package queue

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/binenc"
)

func sampleRecord(t *testing.T) *Record {
	t.Helper()
	in, err := idem.NewIntent("POST", "https://api.example/pay", []byte(`{"a":1}`), idem.WithKey("k-1"), idem.WithLane("acct"))
	require.NoError(t, err)
	base := time.Unix(1_800_000_000, 0)
	return &Record{
		ID: 42, Intent: in, State: Failed, Outcome: idem.Unknown, NumAttempts: 3,
		NextAttempt: base.Add(time.Minute), FirstSentAt: base, InDoubt: true,
		LastAttemptAt: base.Add(30 * time.Second), LastClass: idem.ClassRejected, LastStatus: 412,
		LastError: "boom", Reason: "rejected (412)", EnqueuedAt: base.Add(-time.Second), SettledAt: base.Add(2 * time.Minute),
		Result:            &Response{Status: 412, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"e":1}`), Truncated: true},
		ResubmittedAs:     43,
		leaseSetFirstSent: true, reauthorized: true,
	}
}

func TestRecordRoundTrip(t *testing.T) {
	r := sampleRecord(t)
	data, err := r.encode()
	require.NoError(t, err)
	got, err := decodeRecord(data)
	require.NoError(t, err)

	// fzRecordFields covers every field, the intent's included.
	assert.Equal(t, fzRecordFields(r), fzRecordFields(got), "decodeRecord(encode()) changed the record")
}

func TestRecordRoundTripMinimal(t *testing.T) {
	in, err := idem.NewIntent("PUT", "http://h/r/1", nil, idem.WithoutKey())
	require.NoError(t, err)
	r := &Record{ID: 1, Intent: in, State: Pending}
	data, err := r.encode()
	require.NoError(t, err)
	got, err := decodeRecord(data)
	require.NoError(t, err)
	assert.Nil(t, got.Result)
	assert.True(t, got.FirstSentAt.IsZero())
	assert.False(t, got.InDoubt)
	assert.Equal(t, Pending, got.State)
	assert.Equal(t, byte(Pending), data[stateOffset], "the state byte sits at stateOffset")
}

// TestRecordRoundTripDamaged: a quarantined record keeps its mark, and
// keeps no intent when none could be recovered.
func TestRecordRoundTripDamaged(t *testing.T) {
	r := &Record{ID: 9, State: Failed, Outcome: idem.Unknown, Damaged: true, Reason: "damaged: checksum mismatch", SettledAt: time.Unix(1_800_000_000, 0)}
	data, err := r.encode()
	require.NoError(t, err)
	got, err := decodeRecord(data)
	require.NoError(t, err)
	assert.Equal(t, fzRecordFields(r), fzRecordFields(got))
	assert.Nil(t, got.Intent)
	assert.True(t, got.Damaged)

	r.State, r.SettledAt = Pending, time.Time{}
	data, err = r.encode()
	require.NoError(t, err)
	_, err = decodeRecord(data)
	assert.ErrorContains(t, err, "damaged record in state pending", "a quarantined record is never pending")
}

func TestDecodeRecordRejects(t *testing.T) {
	good, err := sampleRecord(t).encode()
	require.NoError(t, err)
	reseal := func(b []byte) []byte {
		return binenc.Seal(append([]byte(nil), b[:len(b)-4]...))
	}
	edit := func(f func([]byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	tests := []struct {
		name string
		data []byte
		msg  string
	}{
		{"empty", nil, "not a queue record"},
		{"magic", edit(func(b []byte) []byte { b[0] = 'x'; return b }), "not a queue record"},
		{"version", edit(func(b []byte) []byte { b[2] = 9; return reseal(b) }), "unknown record version 9"},
		{"version 0", edit(func(b []byte) []byte { b[2] = 0; return reseal(b) }), "unknown record version 0"},
		{"state", edit(func(b []byte) []byte { b[stateOffset] = 0; return reseal(b) }), "unknown state 0"},
		{"state high", edit(func(b []byte) []byte { b[stateOffset] = 6; return reseal(b) }), "unknown state 6"},
		{"checksum", edit(func(b []byte) []byte { b[10] ^= 1; return b }), "checksum"},
		{"truncated", good[:len(good)-7], "checksum"},
		{"trailing", reseal(append(append([]byte(nil), good[:len(good)-4]...), 7, 7, 7, 7, 0)), "trailing"},
		{"cut body", reseal(good[:40]), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := decodeRecord(tt.data)
			require.Error(t, err)
			assert.Nil(t, r)
			assert.ErrorIs(t, err, errCorrupt)
			assert.Contains(t, err.Error(), tt.msg)
			// Only a version above this build's is a newer one: a store
			// shared with newer builds leaves it be; all else is damage.
			assert.Equal(t, tt.name == "version", errors.Is(err, ErrNewerVersion))
		})
	}
}

func TestStateStrings(t *testing.T) {
	for _, s := range states() {
		assert.NotContains(t, s.String(), "State(")
	}
	assert.Equal(t, "State(9)", State(9).String())
	assert.True(t, Done.Settled() && Failed.Settled() && Expired.Settled())
	assert.False(t, Pending.Settled() || InFlight.Settled())
	assert.Equal(t, "17", ID(17).String())
}
