package idem

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/idem-go/idem/redact"
)

// Stats counts what a Client or a Transport has done since it was made.
type Stats struct {
	// Requests counts requests sent, the first of each operation included,
	// and the resends net/http makes by itself on a fresh connection (see
	// Wire.Conns).
	Requests uint64
	// Retries counts retries, and RetriesAfter splits them by the class of
	// the attempt they followed (never sent, not processed, ambiguous).
	Retries      uint64
	RetriesAfter map[Class]uint64
	// Replays counts successes the server answered from its store.
	Replays uint64
	// Conflicts counts 409 answers; KeyReused counts 422 answers to keyed
	// requests.
	Conflicts, KeyReused uint64
	// BudgetRefusals counts retries the retry budget refused.
	BudgetRefusals uint64
	// Outcomes counts operations finished by Do or RoundTrip, by outcome.
	// The attempts of Client.Try, as a queue makes them, count in Requests,
	// Conflicts and KeyReused once reported (Step.Report), not here nor in
	// Retries: the caller's schedule decides what follows them.
	Outcomes map[Outcome]uint64
	// BudgetTokens is what is left of the retry budget; -1 when unlimited.
	BudgetTokens int
}

// metrics holds the counters behind Stats; each is atomic, so a metrics is
// safe for concurrent use and its zero value is ready.
type metrics struct {
	attempts, replays, conflicts, keyReused, budgetRefusals atomic.Uint64
	retries                                                 [numClasses]atomic.Uint64
	outcomes                                                [NotApplied + 1]atomic.Uint64
}

func (m *metrics) stats(b *Budget) Stats {
	s := Stats{
		BudgetTokens: b.left(),
		Requests:     m.attempts.Load(), Replays: m.replays.Load(), Conflicts: m.conflicts.Load(),
		KeyReused: m.keyReused.Load(), BudgetRefusals: m.budgetRefusals.Load(),
		RetriesAfter: map[Class]uint64{}, Outcomes: map[Outcome]uint64{},
	}
	for c := range m.retries {
		n := m.retries[c].Load()
		s.Retries += n
		if n > 0 {
			s.RetriesAfter[Class(c)] = n
		}
	}
	for o := range m.outcomes {
		if n := m.outcomes[o].Load(); n > 0 {
			s.Outcomes[Outcome(o)] = n
		}
	}
	return s
}

// AttemptInfo describes one attempt to an OnAttempt hook. It holds no key,
// body or credential, and no URL query: Attempt.Err reads without the request
// URL net/http puts in front of it (errors.Is and errors.As still see the
// original).
type AttemptInfo struct {
	// Method is the request method.
	Method string
	// URL is the request URL without its query, user info or fragment.
	URL string
	// N numbers the attempt within its operation, from 1; 1 for an
	// attempt of Client.Try, which knows nothing of earlier ones.
	N int
	// Attempt is the attempt's record.
	Attempt Attempt
	// Action is what followed: done, a retry after Attempt.Wait (unless
	// the context ends during the wait), or stop (the decision table's, or
	// the policy's, budget's or context's). For an attempt of Client.Try,
	// it is what the caller did next (Step.Report); for a queue's, what
	// its schedule decided: a retry after the wait it scheduled, stop when
	// it failed the record, expire when the next attempt would pass the
	// horizon, hold when it held the lane (a second 401) or the host
	// (ActionHold).
	Action Action
}

// observer feeds the counters, the logger and the hook.
type observer struct {
	m      *metrics
	logger *slog.Logger
	hook   func(context.Context, AttemptInfo)
}

// reportAttempt records the latest attempt of r, once what follows it (action)
// is known.
func (o observer) reportAttempt(ctx context.Context, r *run, action Action) {
	a := r.latest
	// net/http may have sent the request on more than one connection.
	o.m.attempts.Add(uint64(max(a.Wire.Conns, 1)))
	switch {
	case a.Status == 409:
		o.m.conflicts.Add(1)
	case a.Class == ClassKeyReused:
		o.m.keyReused.Add(1)
	}
	if o.hook != nil {
		shown := a
		if a.Err != nil {
			shown.Err = redacted{a.Err}
		}
		o.hook(ctx, AttemptInfo{Method: r.method, URL: r.safeURL(), N: r.n, Attempt: shown, Action: action})
	}
	if o.logger == nil || !o.logger.Enabled(ctx, slog.LevelDebug) {
		return
	}
	attrs := []slog.Attr{
		slog.String("method", r.method), slog.String("url", r.safeURL()), slog.Int("n", r.n),
		slog.String("class", a.Class.String()), slog.Int("status", a.Status), slog.String("action", action.String()),
		slog.Int("conns", a.Wire.Conns), slog.Bool("wrote_headers", a.Wire.WroteHeaders),
		slog.Bool("got_response", a.Wire.GotResponse), slog.Duration("duration", a.Duration),
		slog.Duration("wait", a.Wait),
	}
	if a.Err != nil {
		attrs = append(attrs, slog.String("error", redact.Error(a.Err)))
	}
	o.logger.LogAttrs(ctx, slog.LevelDebug, "idem: attempt", attrs...)
}

func (o observer) retry(ctx context.Context, r *run, wait time.Duration) {
	last := r.latest
	if int(last.Class) < len(o.m.retries) {
		o.m.retries[last.Class].Add(1)
	}
	if o.logger != nil {
		o.logger.LogAttrs(ctx, slog.LevelInfo, "idem: retrying",
			slog.String("method", r.method), slog.String("url", r.safeURL()),
			slog.Int("n", r.n), slog.String("after", last.Class.String()), slog.Duration("wait", wait))
	}
}

// finish records how an operation ended.
func (o observer) finish(ctx context.Context, r *run, out Outcome, replayed bool, e *Error) {
	if int(out) < len(o.m.outcomes) {
		o.m.outcomes[out].Add(1)
	}
	if replayed {
		o.m.replays.Add(1)
	}
	if out == Unknown && o.logger != nil {
		reason := ""
		if e != nil {
			reason = e.Reason
		}
		o.logger.LogAttrs(ctx, slog.LevelWarn, "idem: outcome unknown",
			slog.String("method", r.method), slog.String("url", r.safeURL()),
			slog.Int("attempts", r.n), slog.String("reason", reason))
	}
}

// redacted shows an error without the request URL, keeping it for
// errors.Is and errors.As.
type redacted struct{ err error }

func (r redacted) Error() string { return redact.Error(r.err) }
func (r redacted) Unwrap() error { return r.err }
