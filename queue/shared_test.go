package queue

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sharedNoFeed is a shared store with no feed of wake-ups or settles, such
// as one other processes write without announcing it: only polling sees
// their settles.
type sharedNoFeed struct{ Store }

func (s sharedNoFeed) Info() StoreInfo {
	i := s.Store.Info()
	i.Shared = true
	return i
}

// TestWaitAsksTheStore: Wait takes a store for shared when the store says
// so, not when it happens to have a wake-up feed, and polls it for a settle
// that no feed announces.
func TestWaitAsksTheStore(t *testing.T) {
	q, _ := openTest(t, Options{})
	id, err := q.Enqueue(context.Background(), post(t, "http://127.0.0.1:1/pay", 1))
	require.NoError(t, err)
	other := newQueue(sharedNoFeed{q.st}, q.opts) // not closed: q owns the store
	other.sig.init()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	type result struct {
		r   *Record
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := other.Wait(ctx, id)
		done <- result{r, err}
	}()
	next(t, &other.sig.waiting, func(w ID) bool { return w == id })

	r, err := q.st.Get(context.Background(), id)
	require.NoError(t, err)
	r.State, r.SettledAt = Done, q.now() // settled by another process, unannounced
	require.NoError(t, q.st.Put(context.Background(), Pending, r))

	got := <-done
	require.NoError(t, got.err, "Wait polls a shared store")
	assert.Equal(t, Done, got.r.State, "got %v, want done", got.r.State)
}

// TestBoltStoreNotShared: the file is locked to one Queue, so Wait does not
// poll it and a read-only Queue refuses to wait on it.
func TestBoltStoreNotShared(t *testing.T) {
	q, _ := openTest(t, Options{})
	assert.False(t, q.info.Shared, "a bbolt store is one process's")
}
