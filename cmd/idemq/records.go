package main

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/idem-go/idem/queue"
	"github.com/idem-go/idem/queue/queueweb"
)

// allStates are the states in their life's order.
func allStates() []queue.State {
	return []queue.State{queue.Pending, queue.InFlight, queue.Done, queue.Failed, queue.Expired}
}

// parseStates reads a comma-separated list of state names, as
// State.String spells them.
func parseStates(list []string) ([]queue.State, error) {
	states, err := queueweb.ParseStates(list)
	if err != nil {
		return nil, usagef("--%v", err) // --state "lost": want ...
	}
	return states, nil
}

// parseID reads a record ID as the queue prints it.
func parseID(s string) (queue.ID, error) {
	id, err := strconv.ParseUint(s, 10, 64)
	if err != nil || id == 0 {
		return 0, usagef("%q is not a record ID (a positive integer, as ls shows)", s)
	}
	return queue.ID(id), nil
}

// recordView is a record as idemq shows it, in JSON and in text: package
// queueweb's view, which a running application's handler serves too, so
// that idemq shows a file and a live queue alike.
type recordView = queueweb.Record

// textOf returns v with every string a record, a server or an error set
// escaped by printable: in a table or a text line such a string can
// neither start a line of its own nor move the terminal's cursor. JSON
// keeps v as it is.
func textOf(v recordView) recordView {
	for _, s := range []*string{
		&v.Lane, &v.Method, &v.URL, &v.Key, &v.LastClass, &v.LastError, &v.Reason,
	} {
		*s = printable(*s)
	}
	v.Headers = slices.Clone(v.Headers)
	for i, h := range v.Headers {
		v.Headers[i] = printable(h)
	}
	if v.Result != nil {
		res := *v.Result
		res.ContentType = printable(res.ContentType)
		v.Result = &res
	}
	return v
}

// laneName is how a table shows a lane: "-" for the default lane.
func laneName(lane string) string {
	if lane == "" {
		return "-"
	}
	return lane
}

// fmtAge writes d coarsely, in its two largest units: 45s, 3m12s, 2h5m,
// 3d4h. An operator reads ages at a glance; the exact times are in show.
func fmtAge(d time.Duration) string {
	switch d = max(d, 0).Round(time.Second); {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%dh", int(d.Hours())/24, int(d.Hours())%24)
}

// fmtTime writes t for a person: UTC, to the second, and how long ago or
// from now; "-" for the zero Time.
func fmtTime(t *time.Time, now time.Time) string {
	if t == nil {
		return "-"
	}
	s := t.UTC().Format(time.RFC3339)
	d := now.Sub(*t)
	if d >= 0 {
		return s + " (" + fmtAge(d) + " ago)"
	}
	return s + " (in " + fmtAge(-d) + ")"
}
