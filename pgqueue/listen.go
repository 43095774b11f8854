package pgqueue

import (
	"time"
)

// listen holds one connection in LISTEN on the queue's channel and turns
// each notification into a wake-up, until the store closes. A lost
// connection is replaced after a pause; meanwhile the drainer's once a
// second look at the lanes keeps the queue moving.
func (st *store) listen() {
	defer close(st.done)
	for st.ctx.Err() == nil {
		st.listenOnce()
		select {
		case <-st.ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// listenOnce listens on one connection until it fails or the store closes.
func (st *store) listenOnce() {
	conn, err := st.pool.Acquire(st.ctx)
	if err != nil {
		return
	}
	// The connection is left in LISTEN: destroy it rather than hand it back.
	defer conn.Release()
	defer conn.Conn().Close(st.ctx) //nolint:errcheck // being thrown away
	if _, err := conn.Exec(st.ctx, "LISTEN idem_queue"); err != nil {
		return
	}
	st.poke() // whatever was enqueued before LISTEN began
	for {
		if _, err := conn.Conn().WaitForNotification(st.ctx); err != nil {
			return
		}
		st.poke()
	}
}

// poke sends a wake-up without blocking: one pending is enough.
func (st *store) poke() {
	select {
	case st.wake <- struct{}{}:
	default:
	}
}
