package pgqueue_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/pgqueue"
	"github.com/idem-go/idem/queue"
)

// parentKey carries a producer's traceparent in a context.
type parentKey struct{}

// drainKey marks the context of an attempt StartDrain began.
type drainKey struct{}

// tracer injects the traceparent in parentKey, and sends the Trace each
// drain starts with on started and each end's action on ended.
type tracer struct {
	started chan map[string]string
	ended   chan idem.Action
}

func newTracer() tracer {
	return tracer{started: make(chan map[string]string, 8), ended: make(chan idem.Action, 8)}
}

func (tr tracer) Inject(ctx context.Context) map[string]string {
	if tp, ok := ctx.Value(parentKey{}).(string); ok {
		return map[string]string{"traceparent": tp}
	}
	return nil
}

func (tr tracer) StartDrain(ctx context.Context, r *queue.Record) (context.Context, func(idem.Action, idem.Outcome, error)) {
	tr.started <- r.Trace
	return context.WithValue(ctx, drainKey{}, true), func(a idem.Action, _ idem.Outcome, _ error) { tr.ended <- a }
}

// TestProducerTrace: Producer{Tracer}.EnqueueTx stores the producer's
// trace with the record, and a drain through New's queue starts with it,
// the attempt under the context StartDrain returned; the package's
// EnqueueTx stores none.
func TestProducerTrace(t *testing.T) {
	const parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	pool := migrated(t)
	srv := newPaths(t)
	ctx := waitCtx(t)
	tr := newTracer()
	attempts := make(chan bool, 8)
	c := &idem.Client{HTTPClient: srv.Client(), OnAttempt: func(ctx context.Context, _ idem.AttemptInfo) {
		attempts <- ctx.Value(drainKey{}) == true
	}}
	q := open(t, pool, pgqueue.Options{Options: queue.Options{Client: c, Policy: fast(), Tracer: tr}})

	var traced, untraced queue.ID
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		p := pgqueue.Producer{Tracer: tr}
		if traced, err = p.EnqueueTx(context.WithValue(ctx, parentKey{}, parent), tx, post(t, srv.URL+"/a", idem.WithKey("a"), idem.WithLane("l"))); err != nil {
			return err
		}
		untraced, err = pgqueue.EnqueueTx(context.WithValue(ctx, parentKey{}, parent), tx, post(t, srv.URL+"/b", idem.WithKey("b"), idem.WithLane("l")))
		return err
	})
	require.NoError(t, err)
	want := map[string]string{"traceparent": parent}
	r, err := q.Get(ctx, traced)
	require.NoError(t, err)
	assert.Equal(t, want, r.Trace, "Producer{Tracer}.EnqueueTx")
	r, err = q.Get(ctx, untraced)
	require.NoError(t, err)
	assert.Nil(t, r.Trace, "EnqueueTx")

	run(t, q)
	for i, w := range []map[string]string{want, nil} { // one lane: in commit order
		select {
		case got := <-tr.started:
			assert.Equal(t, w, got, "StartDrain %d", i)
		case <-ctx.Done():
			t.Fatal("no drain started")
		}
		select {
		case a := <-tr.ended:
			assert.Equal(t, idem.ActionDone, a, "end %d", i)
		case <-ctx.Done():
			t.Fatal("no drain ended")
		}
		assert.True(t, <-attempts, "attempt %d runs under the context of its drain", i)
	}
	r, err = q.Wait(ctx, traced)
	require.NoError(t, err)
	assert.Equal(t, queue.Done, r.State)
	assert.Equal(t, want, r.Trace, "the settled record")
}
