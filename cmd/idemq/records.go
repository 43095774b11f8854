package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/queue"
	"github.com/idem-go/idem/redact"
)

// allStates are the states in their life's order.
func allStates() []queue.State {
	return []queue.State{queue.Pending, queue.InFlight, queue.Done, queue.Failed, queue.Expired}
}

// parseStates reads a comma-separated list of state names, as
// State.String spells them.
func parseStates(list []string) ([]queue.State, error) {
	var out []queue.State
	for _, name := range list {
		name = strings.ToLower(strings.TrimSpace(name))
		i := slices.IndexFunc(allStates(), func(s queue.State) bool { return s.String() == name })
		if i < 0 {
			return nil, usagef("--state %q: want pending, in_flight, done, failed or expired", name)
		}
		if s := allStates()[i]; !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out, nil
}

// outcomeName is o's name, as Outcome.String spells it; nil until the record
// settles (JSON null).
func outcomeName(o idem.Outcome) *string {
	if o == idem.NoOutcome {
		return nil
	}
	name := o.String()
	return &name
}

// parseID reads a record ID as the queue prints it.
func parseID(s string) (queue.ID, error) {
	id, err := strconv.ParseUint(s, 10, 64)
	if err != nil || id == 0 {
		return 0, usagef("%q is not a record ID (a positive integer, as ls shows)", s)
	}
	return queue.ID(id), nil
}

// recordView is a record as idemq shows it, in JSON and in text: without
// the body, the URL's query, fragment and user info, or more of the key
// than keyPrefix allows.
type recordView struct {
	ID      queue.ID `json:"id"`
	State   string   `json:"state"`
	Outcome *string  `json:"outcome"` // nil until the record settles
	Lane    string   `json:"lane"`
	Method  string   `json:"method,omitempty"`
	URL     string   `json:"url,omitempty"`
	// Key is the key's prefix (see keyPrefix), "" if hidden or none;
	// KeySource says whether the intent has one and where it came from:
	// generated, supplied or none.
	Key       string   `json:"key,omitempty"`
	KeySource string   `json:"key_source,omitempty"`
	Headers   []string `json:"headers,omitempty"`
	BodyBytes int      `json:"body_bytes"`

	Attempts   int    `json:"attempts"`
	InDoubt    bool   `json:"in_doubt"`
	LastClass  string `json:"last_class,omitempty"`
	LastStatus int    `json:"last_status,omitempty"`
	LastError  string `json:"last_error,omitempty"`
	Reason     string `json:"reason,omitempty"`

	EnqueuedAt    *time.Time `json:"enqueued_at,omitempty"`
	FirstSentAt   *time.Time `json:"first_sent_at,omitempty"`
	LastAttemptAt *time.Time `json:"last_attempt_at,omitempty"`
	NextAttempt   *time.Time `json:"next_attempt,omitempty"`
	SettledAt     *time.Time `json:"settled_at,omitempty"`

	Result        *resultView `json:"result,omitempty"`
	ResubmittedAs queue.ID    `json:"resubmitted_as,omitempty"`
	Damaged       bool        `json:"damaged,omitempty"`
}

// resultView is the stored answer without its body, which may hold
// anything the server sent.
type resultView struct {
	Status      int    `json:"status"`
	ContentType string `json:"content_type,omitempty"`
	BodyBytes   int    `json:"body_bytes"`
	Truncated   bool   `json:"truncated,omitempty"`
}

func viewOf(r *queue.Record) recordView {
	v := recordView{
		ID: r.ID, State: r.State.String(), Outcome: outcomeName(r.Outcome),
		Attempts: r.NumAttempts, InDoubt: r.InDoubt,
		LastStatus: r.LastStatus, ResubmittedAs: r.ResubmittedAs, Damaged: r.Damaged,
		EnqueuedAt: timeOrNil(r.EnqueuedAt), FirstSentAt: timeOrNil(r.FirstSentAt),
		LastAttemptAt: timeOrNil(r.LastAttemptAt), SettledAt: timeOrNil(r.SettledAt),
	}
	if r.State == queue.Pending {
		v.NextAttempt = timeOrNil(r.NextAttempt)
	}
	if r.LastClass != idem.ClassNone {
		v.LastClass = r.LastClass.String()
	}
	raw := ""
	if in := r.Intent; in != nil {
		raw = in.URL()
		v.Lane, v.Method, v.URL, v.BodyBytes = in.Lane(), in.Method(), redact.RawURL(raw), len(in.Body())
		v.KeySource = "none"
		if in.Key() != "" {
			v.Key, v.KeySource = keyPrefix(in.Key()), "generated"
			if in.KeySupplied() {
				v.KeySource = "supplied"
			}
		}
		for name := range in.Header() {
			v.Headers = append(v.Headers, name)
		}
		slices.Sort(v.Headers)
	}
	v.LastError, v.Reason = scrub(r.LastError, raw), scrub(r.Reason, raw)
	if res := r.Result; res != nil {
		v.Result = &resultView{
			Status: res.Status, ContentType: res.Header.Get("Content-Type"),
			BodyBytes: len(res.Body), Truncated: res.Truncated,
		}
	}
	return v
}

// text returns v with every string a record, a server or an error set
// escaped by printable: in a table or a text line such a string can
// neither start a line of its own nor move the terminal's cursor. JSON
// keeps v as it is.
func (v recordView) text() recordView {
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

func timeOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
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
