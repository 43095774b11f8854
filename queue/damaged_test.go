package queue

import (
	"context"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/binenc"
)

// damageRecord rewrites record id's stored bytes in the file at path with
// edit, as a bad sector or a stray write would, behind the queue's back.
func damageRecord(t *testing.T, path string, id ID, edit func([]byte) []byte) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketRecords)
		v := b.Get(idKey(id))
		require.NotNil(t, v, "record %d", id)
		return b.Put(idKey(id), edit(slices.Clone(v)))
	}))
}

// TestDamagedRecordQuarantined: a record whose stored bytes are damaged is
// found at Open and settled as failed, outcome unknown, with a reason that
// says so; it is reported, its lane drains the records behind it, and Get,
// List and Discard handle it. What its own checksum shows intact, the
// intent, is kept.
func TestDamagedRecordQuarantined(t *testing.T) {
	tests := []struct {
		name       string
		edit       func([]byte) []byte
		reason     string
		intentKept bool
	}{
		{"a byte of the intent flipped", func(b []byte) []byte { b[len(b)-20] ^= 0x40; return b }, "checksum", false},
		{"the record's checksum flipped", func(b []byte) []byte { b[len(b)-1] ^= 1; return b }, "checksum", true},
		{"state byte out of range", func(b []byte) []byte { b[stateOffset] = 9; return b }, "checksum", true},
		{"state byte out of range, resealed", func(b []byte) []byte {
			b[stateOffset] = 9
			return binenc.Seal(b[:len(b)-4])
		}, "unknown state 9", true},
		{"cut short", func(b []byte) []byte { return b[:laneOffset+2] }, "", false},
		{"undecodable behind a right checksum", func(b []byte) []byte {
			// Past the lane ("acct"), the ID and the flags, one byte each:
			// the outcome, set past the last Outcome. Open's check passes;
			// the drainer quarantines the record when it is the head.
			b[laneOffset+1+len("acct")+1+1] = 0x7f
			return binenc.Seal(b[:len(b)-4])
		}, "unknown outcome 127", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request, body string, seen int) { w.WriteHeader(http.StatusCreated) })
			path := filepath.Join(t.TempDir(), "q.db")
			q := reopen(t, path, Options{})
			var ids []ID
			var intents []*idem.Intent
			for i := range 3 {
				in := post(t, srv.URL, i, idem.WithLane("acct"), idem.WithKey("key-"+string(rune('a'+i))))
				id, err := q.Enqueue(context.Background(), in)
				require.NoError(t, err)
				ids, intents = append(ids, id), append(intents, in)
			}
			require.NoError(t, q.Close())
			damageRecord(t, path, ids[1], tt.edit)

			var ev events
			q = reopen(t, path, Options{Client: &idem.Client{}, Notify: ev.notify})
			run(t, q)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			r, err := q.Wait(ctx, ids[2])
			require.NoError(t, err, "the record behind the damaged one drains")
			assert.Equal(t, Done, r.State)
			r, err = q.Wait(ctx, ids[0])
			require.NoError(t, err)
			assert.Equal(t, Done, r.State)
			assert.Equal(t, []string{`{"payment":"p-0"}`, `{"payment":"p-2"}`}, srv.requests(), "the damaged record is not sent")

			got, err := q.Get(context.Background(), ids[1])
			require.NoError(t, err, "Get returns the quarantined record")
			assert.Equal(t, ids[1], got.ID)
			assert.Equal(t, Failed, got.State)
			assert.Equal(t, idem.Unknown, got.Outcome, "a damaged record cannot be judged")
			assert.True(t, got.Damaged)
			assert.True(t, strings.HasPrefix(got.Reason, "damaged: "), "Reason %q", got.Reason)
			assert.Contains(t, got.Reason, tt.reason)
			assert.False(t, got.SettledAt.IsZero())
			if tt.intentKept {
				require.NotNil(t, got.Intent, "the intent's own checksum shows it intact")
				assert.Equal(t, intents[1].Key(), got.Intent.Key())
				assert.Equal(t, intents[1].Body(), got.Intent.Body())
			} else {
				assert.Nil(t, got.Intent, "a damaged intent is not guessed at")
			}

			require.Eventually(t, func() bool {
				ev.mu.Lock()
				defer ev.mu.Unlock()
				for _, e := range ev.got {
					if e.Kind == EventSettled && e.Record != nil && e.Record.ID == ids[1] {
						return e.Record.Damaged && e.Record.State == Failed
					}
				}
				return false
			}, 3*time.Second, time.Millisecond, "the quarantine is reported as a settlement")

			all, err := q.List(context.Background(), 0, 0, 10)
			require.NoError(t, err)
			require.Len(t, all, 3)
			assert.Equal(t, ids[1], all[1].ID)
			assert.True(t, all[1].Damaged)
			failed, err := q.List(context.Background(), Failed, 0, 10)
			require.NoError(t, err)
			require.Len(t, failed, 1)
			assert.Equal(t, ids[1], failed[0].ID)
			c, err := q.Counts(context.Background())
			require.NoError(t, err)
			assert.Equal(t, map[State]int{Pending: 0, InFlight: 0, Done: 2, Failed: 1, Expired: 0}, c)

			require.NoError(t, q.Close())

			// Quarantine is done and reported once: a reopened queue
			// finds a failed record like any other.
			ev = events{}
			q = reopen(t, path, Options{Client: &idem.Client{}, Notify: ev.notify})
			run(t, q)
			id, err := q.Enqueue(ctx, post(t, srv.URL, 3, idem.WithLane("acct")))
			require.NoError(t, err)
			_, err = q.Wait(ctx, id)
			require.NoError(t, err)
			ev.mu.Lock()
			for _, e := range ev.got {
				if e.Kind == EventSettled {
					assert.Equal(t, id, e.Record.ID, "only the new record settled")
				}
			}
			ev.mu.Unlock()
			_, err = q.Resubmit(ctx, ids[1])
			assert.ErrorIs(t, err, ErrNotResubmittable, "what it held cannot be trusted")
			require.NoError(t, q.Discard(context.Background(), ids[1]))
			_, err = q.Get(context.Background(), ids[1])
			assert.ErrorIs(t, err, ErrNotFound)
			c, err = q.Counts(context.Background())
			require.NoError(t, err)
			assert.Equal(t, map[State]int{Pending: 0, InFlight: 0, Done: 3, Failed: 0, Expired: 0}, c)
		})
	}
}
