package queueweb

import (
	"slices"
	"strings"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/queue"
	"github.com/idem-go/idem/redact"
)

// Record is a record as an operator sees it, in JSON and in idemq's text:
// without the body, the URL's query, fragment and user info, or more of the
// idempotency key than a short prefix (see RecordOf).
type Record struct {
	ID    queue.ID `json:"id"`
	State string   `json:"state"` // State.String: pending, in_flight, ...
	// Outcome is Outcome.String; nil (JSON null) until the record settles.
	Outcome *string `json:"outcome"`
	Lane    string  `json:"lane"`
	Method  string  `json:"method,omitempty"` // "" for a damaged record
	URL     string  `json:"url,omitempty"`    // without query, fragment or user info
	// Key is the key's first 8 characters and "…" for a key of 16 or more,
	// "" if hidden or none; KeySource says whether the intent has one and
	// where it came from: generated, supplied or none.
	Key       string   `json:"key,omitempty"`
	KeySource string   `json:"key_source,omitempty"`
	Headers   []string `json:"headers,omitempty"` // names only, sorted
	BodyBytes int      `json:"body_bytes"`

	Attempts   int    `json:"attempts"`
	InDoubt    bool   `json:"in_doubt"`
	LastClass  string `json:"last_class,omitempty"`
	LastStatus int    `json:"last_status,omitempty"`
	LastError  string `json:"last_error,omitempty"`
	Reason     string `json:"reason,omitempty"`

	// The times are UTC; nil when the record has none (NextAttempt is set
	// for a pending record only).
	EnqueuedAt    *time.Time `json:"enqueued_at,omitempty"`
	FirstSentAt   *time.Time `json:"first_sent_at,omitempty"`
	LastAttemptAt *time.Time `json:"last_attempt_at,omitempty"`
	NextAttempt   *time.Time `json:"next_attempt,omitempty"`
	SettledAt     *time.Time `json:"settled_at,omitempty"`

	Result        *Result  `json:"result,omitempty"` // nil until an answer is stored
	ResubmittedAs queue.ID `json:"resubmitted_as,omitempty"`
	Damaged       bool     `json:"damaged,omitempty"`
}

// Result is a record's stored answer without its body, which may hold
// anything the server sent.
type Result struct {
	Status      int    `json:"status"`
	ContentType string `json:"content_type,omitempty"`
	BodyBytes   int    `json:"body_bytes"`
	Truncated   bool   `json:"truncated,omitempty"`
}

// RecordOf returns r as an operator may see it: the URL without query,
// fragment or user info (as package redact writes it), that URL scrubbed
// from the error and reason too, of the key only its first 8 characters and
// only for a key of 16 or more (enough to find it in a server's logs, never
// more than half of it), the header names without values, and the body's
// length only. Strings are as the record holds them: text output escapes
// control characters itself, and the Handler's JSON escapes them as \u
// sequences.
func RecordOf(r *queue.Record) Record {
	v := Record{
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
		v.Result = &Result{
			Status: res.Status, ContentType: res.Header.Get("Content-Type"),
			BodyBytes: len(res.Body), Truncated: res.Truncated,
		}
	}
	return v
}

// outcomeName is o's name, as Outcome.String spells it; nil until the
// record settles (JSON null).
func outcomeName(o idem.Outcome) *string {
	if o == idem.NoOutcome {
		return nil
	}
	name := o.String()
	return &name
}

func timeOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

// scrub replaces the URL raw, wherever it appears in s, with its redacted
// form (package redact's, as the application's logs and errors show it).
// The queue stores errors and reasons without the URL's secrets already;
// this guards against a message that quotes it anyway.
func scrub(s, raw string) string {
	if raw == "" || !strings.Contains(s, raw) {
		return s
	}
	return strings.ReplaceAll(s, raw, redact.RawURL(raw))
}

// keyPrefixLen is how much of an idempotency key is shown, and keyMinShown
// the shortest key shown that much of: enough to find the key in a server's
// logs, never more than half of it. A shorter key is not shown at all.
const (
	keyPrefixLen = 8
	keyMinShown  = 2 * keyPrefixLen
)

// keyPrefix returns what is shown of key: its first keyPrefixLen bytes and
// "…", or "" for a short key, which is hidden.
func keyPrefix(key string) string {
	if len(key) < keyMinShown {
		return ""
	}
	return key[:keyPrefixLen] + "…"
}
