package queueweb

import (
	"context"
	"fmt"
	"time"

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
