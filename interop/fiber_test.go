package interop

import (
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gofiber/fiber/v3/middleware/idempotency"
	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
)

// The tests in this file pin down what fiber v3's idempotency middleware
// does (github.com/gofiber/fiber/v3/middleware/idempotency, v3.1.0), each
// where it departs from draft-ietf-httpapi-idempotency-key-header, and then
// what idem reports against it. Each deviation test talks plain net/http
// first, so that what it shows is the server's behaviour, not idem's.

// TestFiberDefaultKeyHeader: fiber reads X-Idempotency-Key unless
// configured; the draft's Idempotency-Key is then an ordinary header and
// every resend is a new payment.
func TestFiberDefaultKeyHeader(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		clientKey   string // idem.Client.KeyHeader; "" is idem's Idempotency-Key
		wantEffects int
	}{
		{name: "Idempotency-Key ignored", clientKey: "", wantEffects: 2},
		{name: "X-Idempotency-Key honoured", clientKey: "X-Idempotency-Key", wantEffects: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			shop := startShop(t, shopConfig{}) // fiber's defaults
			c := newClient(t, quickPolicy())
			c.KeyHeader = tt.clientKey
			in := payment(t, shop.URL+"/pay", "p1")
			for i := range 2 { // the same intent twice, as after a lost answer
				d := do(t, c, in)
				require.Equal(t, idem.Applied, d.outcome, "send %d: %v", i, d.err)
			}
			assert.Equal(t, tt.wantEffects, shop.Ledger.Effects("p1"), "effects of one intent sent twice")
		})
	}
	assert.Equal(t, "X-Idempotency-Key", idempotency.ConfigDefault.KeyHeader)
}

// TestFiberKeyValidationIsLengthOnly: the default KeyHeaderValidate checks
// only that the key is 36 bytes long (a UUID's length, not its format), and a
// refused key is answered by fiber's default error handler: 500, not the
// 400 a client error deserves. The draft allows any sf-string, quoted.
func TestFiberKeyValidationIsLengthOnly(t *testing.T) {
	t.Parallel()
	shop := startShop(t, shopConfig{idem: withKeyHeader()})
	hc := newHTTPClient(t, nil)
	id := uuid.NewString()
	tests := []struct {
		name       string
		key        string
		wantStatus int
		wantBody   string
	}{
		{name: "UUID", key: id, wantStatus: 201, wantBody: "paid"},
		{name: "36 bytes, not a UUID", key: "order-42" + strings.Repeat("x", 28), wantStatus: 201, wantBody: "paid"},
		{name: "short key", key: "order-42", wantStatus: 500, wantBody: "invalid idempotency key: invalid length: 8 != 36"},
		{name: "37 bytes", key: id + "x", wantStatus: 500, wantBody: "invalid length: 37 != 36"},
		{name: "sf-string, as the draft writes it", key: `"` + id + `"`, wantStatus: 500, wantBody: "invalid length: 38 != 36"},
		{name: "255 bytes, the draft's practical limit", key: strings.Repeat("k", 255), wantStatus: 500, wantBody: "invalid length: 255 != 36"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pid := fmt.Sprintf("v%d", i)
			got := send(t, hc, http.MethodPost, shop.URL+"/pay", KeyHeader, tt.key, string(paymentBody(t, pid, 1)))
			assert.Equal(t, tt.wantStatus, got.status, "status for key %q", tt.key)
			assert.Contains(t, got.body, tt.wantBody)
			if tt.wantStatus != 201 {
				assert.Zero(t, shop.Ledger.Arrivals(pid), "a refused key must not reach the handler")
			}
		})
	}
}

// TestFiberRefusedKeyIdem: what idem reports when fiber refuses the key.
// With fiber's default error handler the refusal is a 500, which idem must
// read as ambiguous (a 5xx may follow an effect): it retries, ends Unknown in
// bounded time, and nothing was applied. With an error handler that answers
// 400 (rejectBadKeys, a few lines of server configuration), idem returns a
// NotApplied Result after one attempt, naming the status and fiber's reason.
func TestFiberRefusedKeyIdem(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		errorHandler bool // rejectBadKeys instead of fiber's default
		key          string
		sfString     bool
		wantOutcome  idem.Outcome
		wantStatus   int
		wantAttempts int
		wantText     string // in the error or the body
	}{
		{name: "supplied short key, default handler", key: "order-42",
			wantOutcome: idem.Unknown, wantStatus: 500, wantAttempts: 4, wantText: "500 Internal Server Error"},
		{name: "supplied short key, 400 handler", errorHandler: true, key: "order-42",
			wantOutcome: idem.NotApplied, wantStatus: 400, wantAttempts: 1, wantText: "invalid length: 8 != 36"},
		{name: "sf-string key, default handler", sfString: true,
			wantOutcome: idem.Unknown, wantStatus: 500, wantAttempts: 4, wantText: "500 Internal Server Error"},
		{name: "sf-string key, 400 handler", errorHandler: true, sfString: true,
			wantOutcome: idem.NotApplied, wantStatus: 400, wantAttempts: 1, wantText: "invalid length: 38 != 36"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := shopConfig{idem: withKeyHeader()}
			if tt.errorHandler {
				cfg.errorHandler = rejectBadKeys
			}
			shop := startShop(t, cfg)
			c := newClient(t, quickPolicy())
			c.KeySFString = tt.sfString
			var opts []idem.IntentOption
			if tt.key != "" {
				opts = append(opts, idem.WithKey(tt.key))
			}
			d := do(t, c, payment(t, shop.URL+"/pay", "p1", opts...))

			assert.Equal(t, tt.wantOutcome, d.outcome, "outcome (err: %v)", d.err)
			assert.Equal(t, tt.wantStatus, d.status, "status")
			assert.Len(t, d.attempts, tt.wantAttempts, "attempts: %v", statuses(d.attempts))
			assert.Less(t, d.elapsed, 5*time.Second, "Do must end in bounded time")
			assert.Zero(t, shop.Ledger.Arrivals("p1"), "fiber refused the key before the handler")
			switch tt.wantOutcome {
			case idem.Unknown:
				require.Error(t, d.err)
				assert.ErrorIs(t, d.err, idem.ErrOutcomeUnknown)
				assert.ErrorIs(t, d.err, idem.ErrAttemptsExhausted)
				assert.Contains(t, d.err.Error(), tt.wantText)
			case idem.NotApplied:
				require.NoError(t, d.err, "a 4xx with no ambiguous attempt is a Result")
				assert.Contains(t, d.body, tt.wantText)
			}
		})
	}
}

// TestFiberSendsNoReplayHeader: fiber replays a stored answer without
// marking it, so idem cannot tell a replay (Result.Replayed is false); a
// three-line middleware in front (markReplays, using
// idempotency.IsFromCache) restores the signal.
func TestFiberSendsNoReplayHeader(t *testing.T) {
	t.Parallel()
	for _, mark := range []bool{false, true} {
		t.Run(fmt.Sprintf("markReplays=%v", mark), func(t *testing.T) {
			t.Parallel()
			shop := startShop(t, shopConfig{idem: withKeyHeader(), markReplays: mark})
			c := newClient(t, quickPolicy())
			in := payment(t, shop.URL+"/pay", "p1")
			first := do(t, c, in)
			second := do(t, c, in)
			require.Equal(t, idem.Applied, first.outcome, "first: %v", first.err)
			require.Equal(t, idem.Applied, second.outcome, "second: %v", second.err)
			assert.False(t, first.replayed, "first answer marked replayed")
			assert.Equal(t, mark, second.replayed, "second answer, a replay, marked replayed")
			assert.Equal(t, first.body, second.body, "replayed body")
			assert.Equal(t, 1, shop.Ledger.Arrivals("p1"), "the replay never reached the handler")
			assert.Equal(t, 1, shop.Ledger.Effects("p1"))
		})
	}
}

// TestFiberStoresWrittenAnswers: the middleware stores every answer a
// handler writes, whatever its status, 5xx and 429 included, and replays it
// for the key's lifetime; an error a handler returns is never stored, so the
// next request with the key runs the handler again, even when the effect had
// taken place. The draft leaves failure handling to the server; a 503 written
// before the effect and replayed forever turns a transient failure into a
// permanent one.
func TestFiberStoresWrittenAnswers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		fault        fiberFault // on the first arrival only
		wantStatuses []int
		wantArrivals int
		wantEffects  int
	}{
		{name: "written 503 replayed", fault: fiberWrite503, wantStatuses: []int{503, 503, 503}, wantArrivals: 1, wantEffects: 0},
		{name: "written 429 replayed", fault: fiberWrite429, wantStatuses: []int{429, 429, 429}, wantArrivals: 1, wantEffects: 0},
		{name: "returned 503 not stored", fault: fiberReturn503, wantStatuses: []int{503, 201, 201}, wantArrivals: 2, wantEffects: 1},
		{name: "error after effect not stored: applied twice", fault: fiberErrorAfterEffect, wantStatuses: []int{500, 201, 201}, wantArrivals: 2, wantEffects: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			shop := startShop(t, shopConfig{idem: withKeyHeader(), plan: firstArrival(tt.fault)})
			hc := newHTTPClient(t, nil)
			key, body := uuid.NewString(), string(paymentBody(t, "p1", 1))
			var got []int
			for range tt.wantStatuses {
				got = append(got, send(t, hc, http.MethodPost, shop.URL+"/pay", KeyHeader, key, body).status)
			}
			assert.Equal(t, tt.wantStatuses, got, "statuses of three requests with one key")
			assert.Equal(t, tt.wantArrivals, shop.Ledger.Arrivals("p1"), "handler runs")
			assert.Equal(t, tt.wantEffects, shop.Ledger.Effects("p1"), "effects")
		})
	}
}

// firstArrival returns a plan injecting f into the first arrival of each
// payment and nothing afterwards.
func firstArrival(f fiberFault) func(string, int) fiberFault {
	return func(_ string, seen int) fiberFault {
		if seen == 0 {
			return f
		}
		return fiberOK
	}
}

// TestFiberConcurrentDuplicateWaits: a request arriving while another with
// the same key runs waits for the middleware's lock and then gets the stored
// answer; the draft answers it 409 at once. No 409 ever comes from fiber, so
// the wait is bounded only by the first request's duration.
func TestFiberConcurrentDuplicateWaits(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	lock := &watchedLock{Locker: idempotency.NewMemoryLock()}
	shop := startShop(t, shopConfig{
		idem: &idempotency.Config{KeyHeader: KeyHeader, Lock: lock}, plan: firstArrival(fiberHold), hold: hold,
	})
	hc := newHTTPClient(t, nil)
	key, body := uuid.NewString(), string(paymentBody(t, "p1", 1))
	post := func(out chan<- raw) {
		got, err := trySend(hc, http.MethodPost, shop.URL+"/pay", KeyHeader, key, body)
		if err != nil {
			t.Errorf("POST: %v", err)
		}
		out <- got
	}

	first, dup := make(chan raw, 1), make(chan raw, 1)
	go post(first)
	require.Eventually(t, func() bool { return shop.Ledger.Arrivals("p1") == 1 }, 5*time.Second, time.Millisecond)
	go post(dup)
	require.Eventually(t, func() bool { return lock.calls.Load() == 2 }, 5*time.Second, time.Millisecond,
		"the duplicate reaches the middleware's lock")
	select {
	case got := <-dup:
		t.Fatalf("the duplicate was answered %d while the first held its key; want it to wait", got.status)
	case <-time.After(200 * time.Millisecond):
	}
	close(hold)

	got0, got1 := <-first, <-dup
	assert.Equal(t, http.StatusCreated, got0.status, "first")
	assert.Equal(t, http.StatusCreated, got1.status, "duplicate: no 409")
	assert.Equal(t, got0.body, got1.body, "the duplicate gets the stored answer")
	assert.Equal(t, 1, shop.Ledger.Arrivals("p1"), "the duplicate never reached the handler")
	assert.Equal(t, 1, shop.Ledger.Effects("p1"))
}

// watchedLock is a fiber idempotency Locker counting calls to Lock, so that
// a test knows when a request is waiting on it.
type watchedLock struct {
	idempotency.Locker
	calls atomic.Int64
}

func (l *watchedLock) Lock(key string) error {
	l.calls.Add(1)
	return l.Locker.Lock(key)
}

// TestFiberMethodsCovered: the middleware applies to every method that is
// not safe (POST, PUT, PATCH, DELETE and any other), where the draft speaks
// of POST and PATCH, and skips GET, HEAD, OPTIONS and TRACE even when they
// carry a key.
func TestFiberMethodsCovered(t *testing.T) {
	t.Parallel()
	shop := startShop(t, shopConfig{idem: withKeyHeader()})
	hc := newHTTPClient(t, nil)
	tests := []struct {
		method  string
		wantRun int // handler runs for two requests with one key
	}{
		{http.MethodPost, 1}, {http.MethodPut, 1}, {http.MethodPatch, 1}, {http.MethodDelete, 1},
		{http.MethodGet, 2}, {http.MethodHead, 2}, {http.MethodOptions, 2}, {http.MethodTrace, 2},
	}
	for _, tt := range tests {
		t.Run(tt.method, func(t *testing.T) {
			key, id := uuid.NewString(), "m-"+tt.method
			for range 2 {
				send(t, hc, tt.method, shop.URL+"/pay?id="+id, KeyHeader, key, "")
			}
			got := shop.Ledger.Arrivals(id)
			if tt.wantRun == 1 {
				assert.Equal(t, 1, got, "%s handler runs once for one key", tt.method)
				return
			}
			// A safe method is not deduplicated: the handler runs for each
			// request. One CI run saw a third arrival for HEAD (fasthttp,
			// keep-alives off, not reproduced in 60 runs alone); what is
			// asserted is "not once".
			assert.GreaterOrEqual(t, got, tt.wantRun, "%s handler runs for each request", tt.method)
		})
	}
}

// TestFiberNoFingerprint: the middleware keys its store by the key alone. A
// key reused with another body, or on another route, gets the first request's
// stored answer, where the draft answers 422; idem then reports Applied for a
// payment that never took place. A fingerprint guard in front of the
// middleware (fingerprintGuard) turns it into the draft's 422, which idem
// reports as ErrKeyReused.
func TestFiberNoFingerprint(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		guard       bool
		url         string // of the second intent
		wantOutcome idem.Outcome
		wantStatus  int
		wantErr     error
	}{
		{name: "other body", url: "/pay", wantOutcome: idem.Applied, wantStatus: 201},
		{name: "other route", url: "/refund", wantOutcome: idem.Applied, wantStatus: 201},
		{name: "other body, guarded", guard: true, url: "/pay", wantOutcome: idem.NotApplied, wantStatus: 422, wantErr: idem.ErrKeyReused},
		{name: "other route, guarded", guard: true, url: "/refund", wantOutcome: idem.NotApplied, wantStatus: 422, wantErr: idem.ErrKeyReused},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			shop := startShop(t, shopConfig{idem: withKeyHeader(), guard: tt.guard})
			c := newClient(t, quickPolicy())
			key := uuid.NewString()
			first := do(t, c, payment(t, shop.URL+"/pay", "A", idem.WithKey(key)))
			require.Equal(t, idem.Applied, first.outcome, "first: %v", first.err)

			second := do(t, c, payment(t, shop.URL+tt.url, "B", idem.WithKey(key)))
			assert.Equal(t, tt.wantOutcome, second.outcome, "second: %v", second.err)
			assert.Equal(t, tt.wantStatus, second.status)
			if tt.wantErr != nil {
				assert.ErrorIs(t, second.err, tt.wantErr)
			} else {
				assert.Equal(t, first.body, second.body, "B got A's stored answer")
			}
			assert.Equal(t, 1, shop.Ledger.Effects("A"))
			assert.Zero(t, shop.Ledger.Effects("B"), "payment B never took place")
		})
	}
}

// TestFiberLargeAnswerNotStored: an answer whose body exceeds the app's
// BodyLimit (a request limit, 4 MiB by default) is sent but not stored, so
// the next request with the key runs the handler again: a retry after a lost
// large answer applies the payment twice. The draft has no such exception.
func TestFiberLargeAnswerNotStored(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		bodyLimit   int
		wantEffects int
	}{
		{name: "answer within BodyLimit", bodyLimit: 1024, wantEffects: 1},
		{name: "answer over BodyLimit", bodyLimit: 16, wantEffects: 2}, // the answer is about 30 bytes
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			shop := startShop(t, shopConfig{idem: withKeyHeader(), bodyLimit: tt.bodyLimit})
			hc := newHTTPClient(t, nil)
			key := uuid.NewString()
			for i := range 2 { // no request body: the id travels in the query, under the limit
				got := send(t, hc, http.MethodPost, shop.URL+"/pay?id=p1", KeyHeader, key, "")
				require.Equal(t, http.StatusCreated, got.status, "request %d", i)
				require.Greater(t, len(got.body), 16, "the answer's size")
			}
			assert.Equal(t, tt.wantEffects, shop.Ledger.Effects("p1"), "effects of two requests with one key")
		})
	}
}

// TestFiberStoreIsPerProcess: by default the middleware's Storage and Lock
// live in the process, so two replicas of a service behind a load balancer
// each execute a request with the same key: a retry that lands on the other
// replica applies the payment again. A shared Storage and Lock (Config.Storage,
// Config.Lock) are needed for the key to mean anything across replicas.
func TestFiberStoreIsPerProcess(t *testing.T) {
	t.Parallel()
	db := new(Ledger) // the replicas share the database, not the middleware's store
	replicas := []*fiberShop{
		startShop(t, shopConfig{idem: withKeyHeader(), ledger: db}),
		startShop(t, shopConfig{idem: withKeyHeader(), ledger: db}),
	}
	hc := newHTTPClient(t, nil)
	key, body := uuid.NewString(), string(paymentBody(t, "p1", 1))
	for i, r := range replicas { // the retry lands on the other replica
		got := send(t, hc, http.MethodPost, r.URL+"/pay", KeyHeader, key, body)
		require.Equal(t, http.StatusCreated, got.status, "replica %d", i)
	}
	assert.Equal(t, 2, db.Effects("p1"), "effects of one key sent to two replicas")
}

// TestFiberMissingKeyExecutes: a request without a key goes straight to the
// handler, every time; the middleware has no way to require a key, where the
// draft answers 400 for an operation documented to need one.
func TestFiberMissingKeyExecutes(t *testing.T) {
	t.Parallel()
	shop := startShop(t, shopConfig{idem: withKeyHeader()})
	hc := newHTTPClient(t, nil)
	body := string(paymentBody(t, "p1", 1))
	for i := range 2 {
		got := send(t, hc, http.MethodPost, shop.URL+"/pay", KeyHeader, "", body)
		assert.Equal(t, http.StatusCreated, got.status, "request %d without a key", i)
	}
	assert.Equal(t, 2, shop.Ledger.Effects("p1"))
}

// TestFiberForgetsAfterLifetime: a key is remembered for Lifetime, 30
// minutes by default (Stripe keeps keys 24 hours, and idem's queue assumes 24
// hours unless told): a resend after that is a new payment. A queue in front
// of fiber must set its Retention below the middleware's Lifetime. The
// middleware's store runs on the test's clock (clockStore).
func TestFiberForgetsAfterLifetime(t *testing.T) {
	t.Parallel()
	assert.Equal(t, 30*time.Minute, idempotency.ConfigDefault.Lifetime, "default lifetime")

	const lifetime = time.Hour
	store := newClockStore()
	shop := startShop(t, shopConfig{idem: &idempotency.Config{KeyHeader: KeyHeader, Lifetime: lifetime, Storage: store}})
	c := newClient(t, quickPolicy())
	in := payment(t, shop.URL+"/pay", "p1")
	require.Equal(t, idem.Applied, do(t, c, in).outcome)
	store.Advance(lifetime - time.Second)
	require.Equal(t, idem.Applied, do(t, c, in).outcome)
	require.Equal(t, 1, shop.Ledger.Effects("p1"), "within the lifetime")
	assert.Equal(t, []time.Duration{lifetime}, store.Lifetimes(), "the answer is kept for Lifetime")
	store.Advance(time.Second)
	require.Equal(t, idem.Applied, do(t, c, in).outcome)
	assert.Equal(t, 2, shop.Ledger.Effects("p1"), "the same intent after the lifetime")
}
