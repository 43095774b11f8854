package pgqueue

import (
	"strconv"
	"strings"
	"time"

	"github.com/idem-go/idem/queue"
)

// settleBuffer is how many settles of other replicas a store keeps for its
// Queue to read (see queue.StoreInfo.Settles); more are dropped.
const settleBuffer = 1024

// listen holds one connection in LISTEN on the queue's channels and turns
// each notification into a wake-up (idem_queue: an enqueue's commit, a
// Wake) or a settle of another replica's (idem_queue_settled, whose payload
// is the settling store's name and the record's ID), until the store
// closes. A lost connection is replaced after a pause; meanwhile the
// drainer's once a second look at the lanes keeps the queue moving, and
// Wait polls.
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
	if _, err := conn.Exec(st.ctx, "LISTEN idem_queue; LISTEN idem_queue_settled"); err != nil {
		return
	}
	st.poke() // whatever was enqueued before LISTEN began
	for {
		n, err := conn.Conn().WaitForNotification(st.ctx)
		if err != nil {
			return
		}
		if n.Channel == "idem_queue_settled" {
			st.heardSettle(n.Payload)
		} else {
			st.poke()
		}
	}
}

// heardSettle passes on the ID in a settle notification's payload, unless
// this store sent it; without blocking: a full buffer drops it.
func (st *store) heardSettle(payload string) {
	from, id, ok := strings.Cut(payload, " ")
	if !ok || from == st.self {
		return
	}
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil {
		return
	}
	select {
	case st.settles <- queue.ID(n):
	default:
	}
}

// poke sends a wake-up without blocking: one pending is enough.
func (st *store) poke() {
	select {
	case st.wake <- struct{}{}:
	default:
	}
}
