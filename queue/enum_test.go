package queue

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
)

// TestRecordEnumsRoundTrip: every value each stored enum names survives the
// record's encoding, whatever values the enum gains later; a value it does
// not name is damage.
func TestRecordEnumsRoundTrip(t *testing.T) {
	base := time.Unix(1_800_000_000, 0)
	tests := []struct {
		name  string
		known *[math.MaxUint8 + 1]bool
		last  uint8 // the last value declared when this test was written: a floor
		set   func(r *Record, v uint8)
		get   func(r *Record) uint8
	}{
		{"State", knownStates(), uint8(Expired), func(r *Record, v uint8) {
			r.State, r.SettledAt = State(v), time.Time{}
			if r.State.Settled() {
				r.SettledAt = base
			}
		}, func(r *Record) uint8 { return uint8(r.State) }},
		{"Outcome", knownOutcomes(), uint8(idem.NotApplied), func(r *Record, v uint8) { r.Outcome = idem.Outcome(v) },
			func(r *Record) uint8 { return uint8(r.Outcome) }},
		{"Class", knownClasses(), uint8(idem.ClassInvalid), func(r *Record, v uint8) { r.LastClass = idem.Class(v) },
			func(r *Record) uint8 { return uint8(r.LastClass) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := 0
			for v := range math.MaxUint8 + 1 {
				r := sampleRecord(t)
				tt.set(r, uint8(v))
				data, err := r.encode()
				require.NoError(t, err)
				got, err := decodeRecord(data)
				if !tt.known[v] {
					assert.ErrorIs(t, err, errCorrupt, "%s(%d) decoded", tt.name, v)
					continue
				}
				n++
				require.NoError(t, err, "%s %d", tt.name, v)
				assert.Equal(t, uint8(v), tt.get(got), "%s: decode(encode(%d))", tt.name, v)
				assert.Equal(t, fzRecordFields(r), fzRecordFields(got), "%s %d: the rest of the record", tt.name, v)
			}
			for v := 1; v <= int(tt.last); v++ {
				assert.True(t, tt.known[v], "%s(%d) is declared but not known", tt.name, v)
			}
			assert.GreaterOrEqual(t, n, int(tt.last), "%s: values round-tripped", tt.name)
		})
	}
}

// TestInvalidRequestRecordReadable: a record that failed because its
// request cannot be sent as it is (a certificate that does not verify:
// idem.ClassInvalid) reads back like any other, before and after reopen,
// and does not make the rest of the queue unlistable.
func TestInvalidRequestRecordReadable(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) }))
	t.Cleanup(srv.Close)
	path := filepath.Join(t.TempDir(), "q.db")
	q := reopen(t, path, Options{Client: &idem.Client{}})
	ctx := waitCtx(t)
	bad, err := q.Enqueue(ctx, post(t, srv.URL, 1, idem.WithKey("k-bad")))
	require.NoError(t, err)
	other, err := q.Enqueue(ctx, post(t, url, 2, idem.WithKey("k-other"), idem.WithLane("other")))
	require.NoError(t, err)
	run(t, q)
	r, err := q.Wait(ctx, bad)
	require.NoError(t, err)
	require.Equal(t, Failed, r.State)
	require.Equal(t, idem.ClassInvalid, r.LastClass)
	require.Equal(t, idem.NotApplied, r.Outcome)

	check := func(q *Queue) {
		t.Helper()
		got, err := q.Get(context.Background(), bad)
		require.NoError(t, err, "Get")
		assert.Equal(t, idem.ClassInvalid, got.LastClass)
		all, err := q.List(context.Background(), 0, 0, 10)
		require.NoError(t, err, "List of every state")
		assert.Len(t, all, 2)
		failed, err := q.List(context.Background(), Failed, 0, 10)
		require.NoError(t, err, "List(Failed)")
		require.Len(t, failed, 1)
		assert.Equal(t, bad, failed[0].ID)
	}
	check(q)
	require.NoError(t, q.Close())

	q = reopen(t, path, Options{})
	check(q)
	id, err := q.Resubmit(ctx, bad)
	require.NoError(t, err, "Resubmit")
	assert.Greater(t, id, other)
	require.NoError(t, q.Discard(context.Background(), bad), "Discard")
	_, err = q.Get(context.Background(), bad)
	assert.ErrorIs(t, err, ErrNotFound)
}
