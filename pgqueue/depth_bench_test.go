package pgqueue

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/queue"
)

// BenchmarkDepth: one record's whole life in the store (insert, take,
// head, settle, give back) on an empty queue and beside a million pending
// records on 1000 lanes whose heads wait on a Retry-After an hour away.
// The two ns/op should be close: neither enqueue nor finding due work may
// scan the waiting rows.
func BenchmarkDepth(b *testing.B) {
	for _, rows := range []int{0, 1_000_000} {
		b.Run(fmt.Sprintf("rows=%d", rows), func(b *testing.B) {
			pool := testPool(b)
			st, err := open(context.Background(), pool, Options{})
			require.NoError(b, err)
			close(st.done)
			b.Cleanup(func() { st.Close() })
			if rows > 0 {
				fill(b, st, rows)
			}
			in, err := idem.NewIntent("POST", "http://127.0.0.1:1/pay", []byte("{}"), idem.WithLane("hot"))
			require.NoError(b, err)
			for b.Loop() {
				r, err := queue.NewRecord(in, time.Time{})
				require.NoError(b, err)
				_, err = st.Insert(context.Background(), r)
				require.NoError(b, err)
				lane, ok, _, err := takeOne(st)
				require.NoError(b, err)
				require.True(b, ok)
				h, _, err := st.Head(context.Background(), lane)
				require.NoError(b, err)
				h.State, h.Outcome, h.SettledAt = queue.Done, idem.Applied, st.now()
				require.NoError(b, st.Put(context.Background(), queue.Pending, h))
				require.NoError(b, st.SetNext(context.Background(), lane, time.Time{}))
			}
		})
	}
}

// fill queues n pending records on 1000 lanes due in an hour, in bulk:
// the trigger that places records one by one is off while it runs, and
// the lanes are written as it would have (each record's place is its ID).
func fill(b *testing.B, st *store, n int) {
	b.Helper()
	ctx := context.Background()
	in, err := idem.NewIntent("POST", "http://127.0.0.1:1/pay", []byte("{}"))
	require.NoError(b, err)
	r, err := queue.NewRecord(in, time.Time{})
	require.NoError(b, err)
	data, err := r.MarshalBinary()
	require.NoError(b, err)
	const lanes = 1000
	steps := []struct {
		sql  string
		args []any
	}{
		{sql: "ALTER TABLE idem_queue_records DISABLE TRIGGER idem_queue_place"},
		{sql: fmt.Sprintf(`INSERT INTO idem_queue_records (lane, state, record)
			SELECT 'wait-' || (i %% %d), 1, $1 FROM generate_series(0, %d) i`, lanes, n-1), args: []any{data}},
		{sql: `INSERT INTO idem_queue_lanes (name, tail, next_at)
			SELECT lane, max(id), now() + interval '1 hour' FROM idem_queue_records GROUP BY lane`},
		{sql: "ALTER TABLE idem_queue_records ENABLE TRIGGER idem_queue_place"},
		{sql: "ANALYZE idem_queue_records"},
		{sql: "ANALYZE idem_queue_lanes"},
	}
	for _, s := range steps {
		_, err := st.pool.Exec(ctx, s.sql, s.args...)
		require.NoError(b, err, s.sql)
	}
}
