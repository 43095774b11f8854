package pgqueue_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/pgqueue"
)

// enqueuers are the calls that queue intents in the caller's transaction.
var enqueuers = []struct {
	name string
	call func(context.Context, pgx.Tx, *idem.Intent) error
}{
	{"EnqueueTx", func(ctx context.Context, tx pgx.Tx, in *idem.Intent) error {
		_, err := pgqueue.EnqueueTx(ctx, tx, in)
		return err
	}},
	{"EnqueueManyTx", func(ctx context.Context, tx pgx.Tx, in *idem.Intent) error {
		_, err := pgqueue.EnqueueManyTx(ctx, tx, []*idem.Intent{in})
		return err
	}},
	{"Producer.EnqueueTx", func(ctx context.Context, tx pgx.Tx, in *idem.Intent) error {
		_, err := pgqueue.Producer{}.EnqueueTx(ctx, tx, in)
		return err
	}},
	{"Producer.EnqueueManyTx", func(ctx context.Context, tx pgx.Tx, in *idem.Intent) error {
		_, err := pgqueue.Producer{}.EnqueueManyTx(ctx, tx, []*idem.Intent{in})
		return err
	}},
}

// TestNilTransaction: an enqueue given no transaction, or Migrate given no
// database, says so instead of panicking.
func TestNilTransaction(t *testing.T) {
	ctx := context.Background()
	in := post(t, "http://127.0.0.1:1/pay")
	for _, e := range enqueuers {
		for name, tx := range map[string]pgx.Tx{"nil": nil, "nil *pgxpool.Tx": (*pgxpool.Tx)(nil)} {
			t.Run(e.name+"/"+name, func(t *testing.T) {
				var err error
				require.NotPanics(t, func() { err = e.call(ctx, tx, in) })
				assert.ErrorContains(t, err, "pgqueue: "+strings.TrimPrefix(e.name, "Producer.")+": nil transaction")
			})
		}
	}
	for name, db := range map[string]pgqueue.Beginner{"nil": nil, "nil *pgxpool.Pool": (*pgxpool.Pool)(nil)} {
		t.Run("Migrate/"+name, func(t *testing.T) {
			var err error
			require.NotPanics(t, func() { err = pgqueue.Migrate(ctx, db) })
			assert.ErrorContains(t, err, "pgqueue: Migrate: nil database")
		})
	}
}

// TestEnqueueBeforeMigrate: an enqueue into a database without the
// queue's tables says to run Migrate.
func TestEnqueueBeforeMigrate(t *testing.T) {
	pool := unmigrated(t)
	ctx := waitCtx(t)
	for _, e := range enqueuers {
		t.Run(e.name, func(t *testing.T) {
			tx, err := pool.Begin(ctx)
			require.NoError(t, err)
			defer tx.Rollback(ctx)
			err = e.call(ctx, tx, post(t, "http://127.0.0.1:1/pay"))
			assert.ErrorIs(t, err, pgqueue.ErrTablesMissing)
			assert.ErrorContains(t, err, "call Migrate first")
		})
	}
}
