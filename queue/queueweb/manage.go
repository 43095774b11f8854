package queueweb

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/queue"
)

// Discarded is what Discard did: the record's state before, and a warning
// when it may have reached the server.
type Discarded struct {
	Discarded queue.ID `json:"discarded"`
	State     string   `json:"state"`
	Warning   string   `json:"warning,omitempty"`
}

// Discard discards record id of q, as the handler's discard route and
// idemq's discard do, and warns when a pending record may have reached the
// server: its outcome is then unknown, to be reconciled there.
func Discard(ctx context.Context, q *queue.Queue, id queue.ID) (Discarded, error) {
	rec, err := q.Get(ctx, id)
	if err != nil {
		return Discarded{}, err
	}
	if err := q.Discard(ctx, id); err != nil {
		return Discarded{}, err
	}
	out := Discarded{Discarded: id, State: rec.State.String()}
	if rec.State == queue.Pending && !rec.FirstSentAt.IsZero() {
		out.Warning = fmt.Sprintf("%d may have reached the server (first sent %s): its outcome is unknown, reconcile it there",
			id, rec.FirstSentAt.UTC().Format(time.RFC3339))
	}
	return out, nil
}

// ErrUnknownOutcome refuses to resubmit a record whose outcome is unknown
// unless forced.
var ErrUnknownOutcome = errors.New("outcome unknown: an attempt may have been applied, and a resubmit under a new key would apply it again; check with the server")

// Resubmit resubmits record id of q (queue.Queue.Resubmit), as the
// handler's resubmit route and idemq's resubmit do; a record whose outcome
// is unknown only when force is set, ErrUnknownOutcome otherwise.
func Resubmit(ctx context.Context, q *queue.Queue, id queue.ID, force bool) (queue.ID, error) {
	rec, err := q.Get(ctx, id)
	if err != nil {
		return 0, err
	}
	if rec.Outcome == idem.Unknown && !force {
		return 0, ErrUnknownOutcome
	}
	return q.Resubmit(ctx, id)
}
