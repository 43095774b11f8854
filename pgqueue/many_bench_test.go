package pgqueue_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/pgqueue"
)

// BenchmarkEnqueueMany: one transaction queueing n intents, all in one
// lane, by one EnqueueManyTx (many) or by n EnqueueTx calls (single), its
// commit included: record-us is the time per record. The lane's placement
// at commit is linear, so record-us of many=10000 stays near many=1000's.
func BenchmarkEnqueueMany(b *testing.B) {
	for _, c := range []struct {
		how string
		n   int
	}{{"many", 1000}, {"many", 10000}, {"many", 100000}, {"single", 1000}} {
		b.Run(fmt.Sprintf("%s=%d", c.how, c.n), func(b *testing.B) {
			ctx := context.Background()
			pool := benchPool(b)
			var spent time.Duration
			round := 0
			for b.Loop() {
				round++
				ins := make([]*idem.Intent, c.n)
				for i := range ins {
					in, err := idem.NewIntent("POST", "http://127.0.0.1:1/pay", []byte("{}"),
						idem.WithKey(fmt.Sprintf("r%d-%d", round, i)), idem.WithLane("one"))
					require.NoError(b, err)
					ins[i] = in
				}
				start := time.Now()
				tx, err := pool.Begin(ctx)
				require.NoError(b, err)
				if c.how == "many" {
					_, err = pgqueue.EnqueueManyTx(ctx, tx, ins)
					require.NoError(b, err)
				} else {
					for _, in := range ins {
						_, err = pgqueue.EnqueueTx(ctx, tx, in)
						require.NoError(b, err)
					}
				}
				require.NoError(b, tx.Commit(ctx))
				spent += time.Since(start)
			}
			b.ReportMetric(float64(spent.Microseconds())/float64(b.N*c.n), "record-us")
		})
	}
}
