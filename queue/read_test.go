package queue

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestWaitDiscarded: a Wait blocked on a record returns ErrDiscarded when an
// operator discards the record, instead of waiting for a settlement that
// will never come.
func TestWaitDiscarded(t *testing.T) {
	q, _ := openTest(t, Options{})
	q.sig.init()
	ctx := waitCtx(t)
	id, err := q.Enqueue(ctx, post(t, url, 1))
	require.NoError(t, err)

	type result struct {
		r   *Record
		err error
	}
	got := make(chan result, 1)
	go func() {
		r, err := q.Wait(ctx, id)
		got <- result{r, err}
	}()
	next(t, &q.sig.waiting, func(w ID) bool { return w == id }) // Wait must be blocked before the Discard
	require.NoError(t, q.Discard(context.Background(), id))
	select {
	case res := <-got:
		assert.Nil(t, res.r)
		assert.True(t, errors.Is(res.err, ErrDiscarded), "Wait = %v, want ErrDiscarded", res.err)
		if res.err != nil {
			assert.Contains(t, res.err.Error(), id.String(), "the error names the record")
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Wait did not return after its record was discarded")
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	assert.Empty(t, q.waiters, "no waiter is left behind")
}

// TestWaitAfterDiscard: a Wait that starts after the Discard finds no record.
func TestWaitAfterDiscard(t *testing.T) {
	q, _ := openTest(t, Options{})
	id, err := q.Enqueue(context.Background(), post(t, url, 1))
	require.NoError(t, err)
	require.NoError(t, q.Discard(context.Background(), id))
	_, err = q.Wait(waitCtx(t), id)
	assert.ErrorIs(t, err, ErrNotFound)
}
