package pgqueue_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/pgqueue"
	"github.com/idem-go/idem/queue"
)

// TestEnqueueManyTxOrder: the IDs come back in the order of the intents,
// and after commit each lane's records are in that order too.
func TestEnqueueManyTxOrder(t *testing.T) {
	pool := migrated(t)
	ctx := waitCtx(t)
	var ins []*idem.Intent
	for i := range 30 {
		ins = append(ins, post(t, fmt.Sprintf("http://127.0.0.1:1/%d", i), idem.WithLane(fmt.Sprint("l", i%3))))
	}
	var ids []queue.ID
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		ids, err = pgqueue.EnqueueManyTx(ctx, tx, ins)
		return err
	}))
	require.Len(t, ids, len(ins))
	q := open(t, pool, pgqueue.Options{})
	want := map[string][]queue.ID{}
	for i, id := range ids {
		r, err := q.Get(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, ins[i].URL(), r.Intent.URL(), "record %d", i)
		want[ins[i].Lane()] = append(want[ins[i].Lane()], id)
	}
	for lane, w := range want {
		assert.Equal(t, w, laneOrder(t, pool, lane), "lane %s", lane)
	}
}

// TestEnqueueManyTxKeys: a supplied key is de-duplicated within the batch
// and against records already queued, as EnqueueTx does; another operation
// under a held key is refused and nothing of the batch is queued.
func TestEnqueueManyTxKeys(t *testing.T) {
	pool := migrated(t)
	ctx := waitCtx(t)
	a := func() *idem.Intent { return post(t, "http://127.0.0.1:1/a", idem.WithKey("ka")) }
	b := func() *idem.Intent { return post(t, "http://127.0.0.1:1/b", idem.WithKey("kb")) }
	var first []queue.ID
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		first, err = pgqueue.EnqueueManyTx(ctx, tx, []*idem.Intent{a(), b(), a()})
		return err
	}))
	assert.Equal(t, first[0], first[2], "the same operation twice in a batch is one record")
	assert.NotEqual(t, first[0], first[1])
	assert.Equal(t, 2, countRows(t, pool, "SELECT count(*) FROM idem_queue_records"))

	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		ids, err := pgqueue.EnqueueManyTx(ctx, tx, []*idem.Intent{post(t, "http://127.0.0.1:1/c"), b(), a()})
		require.NoError(t, err)
		assert.Equal(t, []queue.ID{first[1], first[0]}, ids[1:], "keys held by an earlier batch")
		return nil
	}))
	assert.Equal(t, 3, countRows(t, pool, "SELECT count(*) FROM idem_queue_records"))

	for name, ins := range map[string][]*idem.Intent{
		"within the batch": {post(t, "http://127.0.0.1:1/d", idem.WithKey("kd")), post(t, "http://127.0.0.1:1/other", idem.WithKey("kd"))},
		"held before":      {post(t, "http://127.0.0.1:1/e"), post(t, "http://127.0.0.1:1/other", idem.WithKey("ka"))},
	} {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		_, err = pgqueue.EnqueueManyTx(ctx, tx, ins)
		assert.ErrorIs(t, err, queue.ErrKeyInUse, name)
		require.NoError(t, tx.Commit(ctx))
		assert.Equal(t, 3, countRows(t, pool, "SELECT count(*) FROM idem_queue_records"), "%s: nothing queued", name)
	}
}

// TestEnqueueManyTxInvalid: an invalid intent is named by its index and
// nothing of the batch is queued; a rolled back batch leaves nothing.
func TestEnqueueManyTxInvalid(t *testing.T) {
	pool := migrated(t)
	ctx := waitCtx(t)
	for _, c := range []struct {
		bad  *idem.Intent
		want error
	}{{nil, idem.ErrInvalidIntent}, {post(t, "http://127.0.0.1:1/x", idem.WithoutKey()), queue.ErrNeedsKey}} {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		_, err = pgqueue.EnqueueManyTx(ctx, tx, []*idem.Intent{post(t, "http://127.0.0.1:1/ok"), c.bad})
		assert.ErrorIs(t, err, c.want)
		assert.ErrorContains(t, err, "intent 1")
		require.NoError(t, tx.Commit(ctx))
	}
	assert.Equal(t, 0, countRows(t, pool, "SELECT count(*) FROM idem_queue_records"))

	errNo := errors.New("no")
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := pgqueue.EnqueueManyTx(ctx, tx, []*idem.Intent{post(t, "http://127.0.0.1:1/a"), post(t, "http://127.0.0.1:1/b")})
		require.NoError(t, err)
		return errNo
	})
	require.ErrorIs(t, err, errNo)
	assert.Equal(t, 0, countRows(t, pool, "SELECT count(*) FROM idem_queue_records"), "rolled back")
	assert.Equal(t, 0, countRows(t, pool, "SELECT count(*) FROM idem_queue_lanes"), "rolled back")
}

// TestEnqueueManyTxOneStatement: a batch of 1,000 is one statement; an
// empty one is none.
func TestEnqueueManyTxOneStatement(t *testing.T) {
	ctx := waitCtx(t)
	var statements atomic.Int64
	pool := countingPool(t, ctx, migrated(t).Config().ConnString(), &statements)

	ins := make([]*idem.Intent, 1000)
	for i := range ins {
		ins[i] = post(t, "http://127.0.0.1:1/p", idem.WithKey(fmt.Sprint("k", i)), idem.WithLane("one"))
	}
	for _, c := range []struct {
		ins  []*idem.Intent
		want int64
	}{{ins, 1}, {nil, 0}} {
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			before := statements.Load()
			ids, err := pgqueue.EnqueueManyTx(ctx, tx, c.ins)
			assert.Len(t, ids, len(c.ins))
			assert.Equal(t, c.want, statements.Load()-before, "statements for %d intents", len(c.ins))
			return err
		}))
	}
	assert.Len(t, laneOrder(t, pool, "one"), 1000)
}

// countingTracer is tracer counting its Inject calls.
type countingTracer struct {
	tracer
	injects *atomic.Int64
}

func (c countingTracer) Inject(ctx context.Context) map[string]string {
	c.injects.Add(1)
	return c.tracer.Inject(ctx)
}

// TestEnqueueManyTxTrace: a Producer's Tracer is asked once per batch, and
// every record of the batch carries what it gave.
func TestEnqueueManyTxTrace(t *testing.T) {
	const parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	pool := migrated(t)
	ctx := waitCtx(t)
	var injects atomic.Int64
	p := pgqueue.Producer{Tracer: countingTracer{newTracer(), &injects}}
	var ids []queue.ID
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		ids, err = p.EnqueueManyTx(context.WithValue(ctx, parentKey{}, parent), tx,
			[]*idem.Intent{post(t, "http://127.0.0.1:1/a"), post(t, "http://127.0.0.1:1/b")})
		return err
	}))
	assert.EqualValues(t, 1, injects.Load(), "Inject calls")
	q := open(t, pool, pgqueue.Options{})
	for _, id := range ids {
		r, err := q.Get(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, map[string]string{"traceparent": parent}, r.Trace, "record %d", id)
	}
}
