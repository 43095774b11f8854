package pgqueue

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/pgqueue/internal/pgtest"
	"github.com/idem-go/idem/queue"
)

// BenchmarkLaneCommit: the commit of one transaction that queued n
// records, all in one lane (lanes=1) or each in its own (lanes=n), in one
// INSERT so that the figure is the commit's alone (commit-ms). The commit
// places every record in its lane: it should grow linearly with n either
// way. lanes-kB is the size of the lanes' table after the run. IDEM_BENCH_LANE_N sets the sizes (comma-separated; default
// 1000,2000,4000,8000,16000), IDEM_BENCH_LANE_VERSION the version of the
// tables (default the latest), to compare with an earlier one, and
// IDEM_BENCH_LANE_SPREAD=0 leaves out lanes=n.
func BenchmarkLaneCommit(b *testing.B) {
	version := benchVersion(b)
	spreads := []bool{false, true}
	if os.Getenv("IDEM_BENCH_LANE_SPREAD") == "0" {
		spreads = spreads[:1]
	}
	sizes := []int{1000, 2000, 4000, 8000, 16000}
	if s := os.Getenv("IDEM_BENCH_LANE_N"); s != "" {
		sizes = sizes[:0]
		for f := range strings.SplitSeq(s, ",") {
			n, err := strconv.Atoi(f)
			require.NoError(b, err)
			sizes = append(sizes, n)
		}
	}
	in, err := idem.NewIntent("POST", "http://127.0.0.1:1/pay", []byte("{}"))
	require.NoError(b, err)
	r, err := queue.NewRecord(in, time.Time{})
	require.NoError(b, err)
	data, err := r.MarshalBinary()
	require.NoError(b, err)
	for _, spread := range spreads {
		for _, n := range sizes {
			lanes := 1
			if spread {
				lanes = n
			}
			b.Run(fmt.Sprintf("lanes=%d/n=%d", lanes, n), func(b *testing.B) {
				ctx := context.Background()
				pool := benchPool(b, version)
				var spent time.Duration
				for b.Loop() {
					tx, err := pool.Begin(ctx)
					require.NoError(b, err)
					_, err = tx.Exec(ctx, `INSERT INTO idem_queue_records (lane, state, record)
						SELECT 'lane-' || (i % $1), 1, $2 FROM generate_series(1, $3) i`, lanes, data, n)
					require.NoError(b, err)
					start := time.Now()
					require.NoError(b, tx.Commit(ctx))
					spent += time.Since(start)
				}
				b.ReportMetric(float64(spent.Microseconds())/1000/float64(b.N), "commit-ms")
				var size int64 // the lanes' rows and the versions of them left behind
				require.NoError(b, pool.QueryRow(ctx, "SELECT pg_relation_size('idem_queue_lanes')").Scan(&size))
				b.ReportMetric(float64(size)/1024, "lanes-kB")
			})
		}
	}
}

// BenchmarkOneRecordCommit: the commit of a transaction that queued one
// record, the common case, measured in the server (a DO block of 1000
// transactions, so that no round trip is counted): us-per-commit, into one
// lane and spread over 100. IDEM_BENCH_LANE_VERSION as for
// BenchmarkLaneCommit.
func BenchmarkOneRecordCommit(b *testing.B) {
	version := benchVersion(b)
	for _, lanes := range []int{1, 100} {
		b.Run(fmt.Sprintf("lanes=%d", lanes), func(b *testing.B) {
			pool := benchPool(b, version)
			const n = 1000
			sql := fmt.Sprintf(`DO $$ BEGIN FOR i IN 1..%d LOOP
				INSERT INTO idem_queue_records (lane, state, record) VALUES ('lane-' || (i %% %d), 1, '\x00');
				COMMIT;
				END LOOP; END $$`, n, lanes)
			var spent time.Duration
			for b.Loop() {
				start := time.Now()
				_, err := pool.Exec(context.Background(), sql)
				require.NoError(b, err)
				spent += time.Since(start)
			}
			b.ReportMetric(float64(spent.Nanoseconds())/1000/float64(b.N*n), "us-per-commit")
		})
	}
}

// benchVersion is the version of the tables IDEM_BENCH_LANE_VERSION names,
// by default the latest.
func benchVersion(b *testing.B) int {
	s := os.Getenv("IDEM_BENCH_LANE_VERSION")
	if s == "" {
		return len(must(migrationSteps()))
	}
	v, err := strconv.Atoi(s)
	require.NoError(b, err)
	return v
}

// benchPool returns a pool on a fresh database with the tables at version.
func benchPool(b *testing.B, version int) *pgxpool.Pool {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.DB(b))
	require.NoError(b, err)
	b.Cleanup(pool.Close)
	require.NoError(b, migrate(ctx, pool, must(migrationSteps())[:version]))
	return pool
}
