package idem

import (
	"context"
	"log/slog"
	"net/url"
	"strconv"
	"sync"
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
	// BudgetRefusals counts retries the retry budget refused, and
	// BudgetRefusalsByOrigin splits them by origin, written
	// scheme://host:port ("https://api.example:443"), for the
	// MaxBudgetOrigins origins that refused most recently; it holds no
	// origin that never refused.
	BudgetRefusals         uint64
	BudgetRefusalsByOrigin map[string]uint64
	// Outcomes counts operations finished by Do or RoundTrip, by outcome.
	// The attempts of Client.Try, as a queue makes them, count in Requests,
	// Conflicts and KeyReused once reported (Step.Report), not here nor in
	// Retries: the caller's schedule decides what follows them.
	Outcomes map[Outcome]uint64
	// BudgetTokens is what is left of the retry budget to the origin that
	// has least: the fewest tokens left in any origin's bucket, 0 when one
	// origin's retries are being refused, the capacity when none has spent
	// any; -1 when unlimited.
	BudgetTokens int
}

// metrics holds the counters behind Stats; each is atomic or guarded, so a
// metrics is safe for concurrent use and its zero value is ready.
type metrics struct {
	attempts, replays, conflicts, keyReused, budgetRefusals atomic.Uint64
	retries                                                 [numClasses]atomic.Uint64
	outcomes                                                [NotApplied + 1]atomic.Uint64

	mu       sync.Mutex        // guards refusals
	refusals originLRU[uint64] // budget refusals by origin
}

// refusedAt counts a budget refusal of a retry to o, by origin; the total
// is budgetRefusals. Refusals are rare, so a lock costs nothing that
// matters.
func (m *metrics) refusedAt(o origin) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.refusals.get(o)
	if n == nil {
		n = m.refusals.add(o, 0)
	}
	*n++
}

func (m *metrics) stats(b *Budget) Stats {
	s := Stats{
		BudgetTokens: b.left(),
		Requests:     m.attempts.Load(), Replays: m.replays.Load(), Conflicts: m.conflicts.Load(),
		KeyReused: m.keyReused.Load(), BudgetRefusals: m.budgetRefusals.Load(),
		RetriesAfter: map[Class]uint64{}, Outcomes: map[Outcome]uint64{},
		BudgetRefusalsByOrigin: map[string]uint64{},
	}
	m.mu.Lock()
	m.refusals.each(func(o origin, n uint64) { s.BudgetRefusalsByOrigin[o.String()] = n })
	m.mu.Unlock()
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
	// N numbers the attempt within its operation, from 1. For an attempt
	// of Client.Try it is Step.N: 1 unless the caller, which alone knows
	// the earlier attempts, set it (a queue does).
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
	// (ActionHold). For Policy.Veto it is ActionRetry, the table's advice.
	Action Action
	// Keyed reports whether the request carried an idempotency key.
	Keyed bool
}

// attemptInfo describes r's latest attempt, followed by action, to a hook.
func (r *run) attemptInfo(action Action) AttemptInfo {
	shown := r.latest
	shown.Err = redact.Wrap(shown.Err)
	return AttemptInfo{Method: r.method, URL: r.safeURL(), N: r.n, Attempt: shown, Action: action, Keyed: r.hasKey}
}

// observer feeds the counters, the logger and the hooks.
type observer struct {
	m           *metrics
	logger      *slog.Logger
	hook        func(context.Context, AttemptInfo)
	onOperation func(context.Context, string, string) (context.Context, func(Outcome, error))
}

// startOperation calls the OnOperation hook, if any, for r, and returns the
// operation's context and the end to call as it ends, never nil.
func (o observer) startOperation(ctx context.Context, r *run) (context.Context, func(Outcome, error)) {
	if o.onOperation == nil {
		return ctx, noEnd
	}
	octx, end := o.onOperation(ctx, r.method, r.safeURL())
	if octx == nil {
		octx = ctx
	}
	if end == nil {
		end = noEnd
	}
	return octx, end
}

// noEnd is the end of an operation no hook asked to hear of.
func noEnd(Outcome, error) {}

// reportAttempt records the latest attempt of r, once what follows it (action)
// is known.
func (o observer) reportAttempt(ctx context.Context, r *run, action Action) {
	if r.latestCtx != nil { // OnSend's, for this attempt
		ctx = r.latestCtx
	}
	a := r.latest
	// net/http may have sent the request on more than one connection, and
	// a hedge is a request of its own.
	sent := max(a.Wire.Conns, 1)
	if a.Wire.Hedged {
		sent++
	}
	o.m.attempts.Add(uint64(sent))
	switch {
	case a.Status == 409:
		o.m.conflicts.Add(1)
	case a.Class == ClassKeyReused:
		o.m.keyReused.Add(1)
	}
	if o.hook != nil {
		o.hook(ctx, r.attemptInfo(action))
	}
	if o.logger == nil || !o.logger.Enabled(ctx, slog.LevelDebug) {
		return
	}
	attrs := r.httpAttrs(r.n - 1)
	if a.Status != 0 {
		attrs = append(attrs, slog.Int("http.response.status_code", a.Status))
	}
	attrs = append(attrs,
		slog.String("idem.class", a.Class.String()), slog.String("idem.action", action.String()),
		slog.Int("idem.wire.conns", a.Wire.Conns), slog.Bool("idem.wire.wrote_headers", a.Wire.WroteHeaders),
		slog.Bool("idem.wire.got_response", a.Wire.GotResponse), slog.Duration("idem.attempt.duration", a.Duration))
	if a.Wait > 0 {
		attrs = append(attrs, slog.Duration("idem.retry.wait", a.Wait))
	}
	if a.Err != nil {
		attrs = append(attrs, slog.String("error.message", redact.Error(a.Err)))
	}
	o.logger.LogAttrs(ctx, slog.LevelDebug, "idem: attempt", attrs...)
}

func (o observer) retry(ctx context.Context, r *run, wait time.Duration) {
	last := r.latest
	if int(last.Class) < len(o.m.retries) {
		o.m.retries[last.Class].Add(1)
	}
	if o.logger != nil && o.logger.Enabled(ctx, slog.LevelInfo) {
		// The attempt to come is the n-th resend.
		attrs := append(r.httpAttrs(r.n), slog.String("idem.class", last.Class.String()), slog.Duration("idem.retry.wait", wait))
		o.logger.LogAttrs(ctx, slog.LevelInfo, "idem: retrying", attrs...)
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
	if out == Unknown && o.logger != nil && o.logger.Enabled(ctx, slog.LevelWarn) {
		reason := ""
		if e != nil {
			reason = e.Reason
		}
		attrs := append(r.httpAttrs(0), slog.String("idem.outcome", out.String()),
			slog.Int("idem.attempts", r.n), slog.String("idem.reason", reason))
		o.logger.LogAttrs(ctx, slog.LevelWarn, "idem: outcome unknown", attrs...)
	}
}

// httpAttrs are the attributes of r's request that every log record of idem
// carries, named as OpenTelemetry's HTTP semantic conventions name them:
// http.request.method, server.address, server.port, url.scheme, url.full
// (without query, user info or fragment) and, when resends is above 0,
// http.request.resend_count.
func (r *run) httpAttrs(resends int) []slog.Attr {
	full := r.safeURL()
	as := make([]slog.Attr, 0, 12)
	as = append(as, slog.String("http.request.method", r.method))
	if u, err := url.Parse(full); err == nil && u.Host != "" {
		port, _ := strconv.Atoi(u.Port())
		if port == 0 {
			port = map[string]int{"http": 80, "https": 443}[u.Scheme]
		}
		as = append(as, slog.String("server.address", u.Hostname()), slog.Int("server.port", port), slog.String("url.scheme", u.Scheme))
	}
	as = append(as, slog.String("url.full", full))
	if resends > 0 {
		as = append(as, slog.Int("http.request.resend_count", resends))
	}
	return as
}
