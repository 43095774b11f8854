package pgqueue_test

import (
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/pgqueue"
	"github.com/idem-go/idem/queue"
)

// TestPoolSize: the listener holds one of the pool's connections for the
// queue's life, so a pool of one would leave none for the drainer and the
// producers: New refuses it and says why, unless nothing listens
// (NoListen, ReadOnly). The pools New accepts drain.
func TestPoolSize(t *testing.T) {
	cases := []struct {
		name     string
		maxConns int32
		opts     pgqueue.Options
		wantErr  bool
	}{
		{"one connection, listening", 1, pgqueue.Options{}, true},
		{"one connection, NoListen", 1, pgqueue.Options{NoListen: true}, false},
		{"one connection, ReadOnly", 1, pgqueue.Options{Options: queue.Options{ReadOnly: true}}, false},
		{"two connections, listening", 2, pgqueue.Options{}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := waitCtx(t)
			cfg, err := pgxpool.ParseConfig(migrated(t).Config().ConnString())
			require.NoError(t, err)
			cfg.MaxConns = c.maxConns
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			require.NoError(t, err)
			t.Cleanup(pool.Close)

			c.opts.Policy = fast()
			q, err := pgqueue.New(ctx, pool, c.opts)
			if c.wantErr {
				require.ErrorIs(t, err, queue.ErrInvalidOptions)
				for _, want := range []string{"MaxConns is 1", "at least 2", "NoListen"} {
					assert.ErrorContains(t, err, want, "New(MaxConns %d) says why", c.maxConns)
				}
				return
			}
			require.NoError(t, err, "New(MaxConns %d, %+v)", c.maxConns, c.opts)
			t.Cleanup(func() { q.Close() })
			if c.opts.ReadOnly {
				return
			}
			run(t, q)
			srv := newPaths(t)
			var ids []queue.ID
			for i := range 3 {
				id, err := q.Enqueue(ctx, post(t, srv.URL+"/payments", idem.WithLane(fmt.Sprint("acct-", i))))
				require.NoError(t, err)
				ids = append(ids, id)
			}
			for _, id := range ids {
				r, err := q.Wait(ctx, id)
				require.NoError(t, err, "record %d on a pool of %d", id, c.maxConns)
				assert.Equal(t, queue.Done, r.State)
			}
		})
	}
}
