package queueweb

import (
	"context"
	"time"

	"github.com/idem-go/idem/queue"
)

// Stats is a queue at a glance: how many records are in each state, how long
// the oldest unsettled one has waited, and the pending records whose horizon
// is near.
type Stats struct {
	Counts        map[string]int `json:"counts"` // every state named, by State.String
	Total         int            `json:"total"`
	OldestPending float64        `json:"oldest_pending_seconds"` // 0 for none
	Horizon       Horizon        `json:"horizon"`
}

// Horizon lists the pending records whose horizon is near: sent before, so
// the server's memory of their key runs out at FirstSentAt + Retention -
// Margin, and that comes within Within (or has passed: such a record expires
// at its next attempt).
type Horizon struct {
	Retention string     `json:"retention"`
	Margin    string     `json:"margin"`
	Within    string     `json:"within"`
	AtRisk    []queue.ID `json:"at_risk"`                    // never nil
	Soonest   *time.Time `json:"soonest_deadline,omitempty"` // nil when none is at risk
}

// statsPage is how many records ReadStats and the list reads per call.
const statsPage = 500

// ReadStats reads q's Stats at now, judging the horizon by opts' Retention,
// Margin and Within (their zero values are the defaults Options names).
func ReadStats(ctx context.Context, q *queue.Queue, opts Options, now time.Time) (Stats, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return Stats{}, err
	}
	v := Stats{Counts: map[string]int{}}
	counts, err := q.Counts(ctx)
	if err != nil {
		return v, err
	}
	for _, s := range states() {
		v.Counts[s.String()] = counts[s]
		v.Total += counts[s]
	}
	oldest, err := q.OldestPending(ctx)
	if err != nil {
		return v, err
	}
	v.OldestPending = oldest.Seconds()

	v.Horizon = Horizon{Retention: o.Retention.String(), Margin: o.Margin.String(), Within: o.Within.String(), AtRisk: []queue.ID{}}
	limit := now.Add(o.Within)
	for after := queue.ID(0); ; {
		page, err := q.List(ctx, queue.Pending, after, statsPage)
		if err != nil {
			return v, err
		}
		for _, r := range page {
			if r.FirstSentAt.IsZero() {
				continue // never reached the server: no horizon
			}
			d := r.FirstSentAt.Add(o.Retention - o.Margin)
			if d.After(limit) {
				continue
			}
			v.Horizon.AtRisk = append(v.Horizon.AtRisk, r.ID)
			if v.Horizon.Soonest == nil || d.Before(*v.Horizon.Soonest) {
				v.Horizon.Soonest = timeOrNil(d)
			}
		}
		if len(page) < statsPage {
			return v, nil
		}
		after = page[len(page)-1].ID
	}
}

// states are the states in their life's order.
func states() []queue.State {
	return []queue.State{queue.Pending, queue.InFlight, queue.Done, queue.Failed, queue.Expired}
}
