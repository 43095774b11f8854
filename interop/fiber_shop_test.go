package interop

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/gofiber/fiber/v3"
	"github.com/gofiber/fiber/v3/middleware/idempotency"
	"github.com/stretchr/testify/require"
)

// fiberFault is what the shop's payment handler does to one arrival.
type fiberFault int

const (
	// fiberOK applies the effect and answers 201.
	fiberOK fiberFault = iota
	// fiberCommitThenDrop applies the effect and builds the 201, which the
	// middleware stores, then closes the connection without answering.
	fiberCommitThenDrop
	// fiberReturn503 returns fiber.ErrServiceUnavailable before the effect:
	// the idiomatic fiber failure, which the middleware does not store.
	fiberReturn503
	// fiberWrite503 writes a 503 before the effect and returns nil: the
	// middleware stores it like any answer.
	fiberWrite503
	// fiberWrite429 writes a 429 (Retry-After: 0) before the effect and
	// returns nil: stored too.
	fiberWrite429
	// fiberSlow applies the effect, then holds the answer for shopConfig.slow,
	// past the client's attempt timeout, holding the middleware's lock.
	fiberSlow
	// fiberErrorAfterEffect applies the effect, then returns an error: the
	// middleware stores nothing, so a retry runs the handler again.
	fiberErrorAfterEffect
	// fiberHold applies the effect, then holds the answer until
	// shopConfig.hold is closed.
	fiberHold
)

func (f fiberFault) String() string {
	return [...]string{"ok", "commit-then-drop", "return-503", "write-503", "write-429", "slow", "error-after-effect", "hold"}[f]
}

// shopConfig configures startShop.
type shopConfig struct {
	// idem is the middleware's configuration; nil means idempotency.New()
	// with fiber's defaults (key header X-Idempotency-Key).
	idem *idempotency.Config
	// errorHandler is the app's; nil means fiber.DefaultErrorHandler.
	errorHandler fiber.ErrorHandler
	// markReplays adds Idempotent-Replayed: true to answers the middleware
	// served from its store.
	markReplays bool
	// guard adds a fingerprint check in front of the middleware (422 on a key
	// reused with another request).
	guard bool
	// plan picks the fault for an arrival; seen counts earlier arrivals of the
	// same payment id. Nil means fiberOK always.
	plan func(id string, seen int) fiberFault
	// slow is how long fiberSlow holds the answer.
	slow time.Duration
	// hold is the channel fiberHold waits for.
	hold chan struct{}
	// bodyLimit is the app's BodyLimit; 0 means fiber's default (4 MiB).
	bodyLimit int
	// ledger, if not nil, is shared with other shops, as replicas of one
	// service share a database; nil means a ledger of the shop's own.
	ledger *Ledger
}

// fiberShop is a fiber v3 app on 127.0.0.1 with the idempotency middleware in
// front of a payment handler that counts effects in its Ledger. The handler
// takes the payment id from a JSON body, or from the id query parameter for
// requests without a body, and answers on any method, at /pay and at
// /refund (one handler, two routes: for showing how keys are scoped).
type fiberShop struct {
	URL    string // base URL; the payment route is URL+"/pay"
	Ledger *Ledger
	close  func() // see Close
}

// Close shuts the shop down and waits for the requests it is handling: after
// it no request is handled, so its ledger is final. The test's cleanup
// calls it too; calls after the first do nothing.
func (shop *fiberShop) Close() { shop.close() }

// withKeyHeader returns the middleware configuration reading the draft's
// header instead of fiber's default X-Idempotency-Key.
func withKeyHeader() *idempotency.Config {
	return &idempotency.Config{KeyHeader: KeyHeader}
}

// startShop starts a shop and shuts it down when the test ends.
func startShop(t *testing.T, cfg shopConfig) *fiberShop {
	t.Helper()
	shop := &fiberShop{Ledger: cfg.ledger}
	if shop.Ledger == nil {
		shop.Ledger = new(Ledger)
	}
	app := fiber.New(fiber.Config{ErrorHandler: cfg.errorHandler, IdleTimeout: time.Second, BodyLimit: cfg.bodyLimit})
	if cfg.markReplays {
		app.Use(markReplays)
	}
	if cfg.guard {
		app.Use((&fingerprintGuard{header: KeyHeader}).handle)
	}
	if cfg.idem == nil {
		app.Use(idempotency.New())
	} else {
		app.Use(idempotency.New(*cfg.idem))
	}
	app.All("/pay", shop.handler(cfg))
	app.All("/refund", shop.handler(cfg))

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- app.Listener(ln, fiber.ListenConfig{DisableStartupMessage: true}) }()
	var once sync.Once
	shop.close = func() {
		once.Do(func() {
			require.NoError(t, app.ShutdownWithTimeout(5*time.Second))
			require.NoError(t, <-served)
		})
	}
	t.Cleanup(shop.Close)
	shop.URL = "http://" + ln.Addr().String()
	return shop
}

func (shop *fiberShop) handler(cfg shopConfig) fiber.Handler {
	return func(c fiber.Ctx) error {
		id := c.Query("id")
		if body := c.Body(); len(body) > 0 {
			var p Payment
			if err := json.Unmarshal(body, &p); err != nil {
				return fiber.NewError(fiber.StatusBadRequest, "body must be a payment")
			}
			id = p.ID
		}
		fault := fiberOK
		if seen := shop.Ledger.Arrive(id); cfg.plan != nil {
			fault = cfg.plan(id, seen)
		}
		switch fault {
		case fiberReturn503:
			return fiber.ErrServiceUnavailable
		case fiberWrite503:
			return c.Status(fiber.StatusServiceUnavailable).SendString("try later")
		case fiberWrite429:
			c.Set("Retry-After", "0")
			return c.Status(fiber.StatusTooManyRequests).SendString("slow down")
		}
		n := shop.Ledger.Apply(id)
		switch fault {
		case fiberCommitThenDrop:
			// No answer is written; fasthttp closes the hijacked connection.
			c.RequestCtx().HijackSetNoResponse(true)
			c.RequestCtx().Hijack(func(net.Conn) {})
		case fiberSlow:
			time.Sleep(cfg.slow)
		case fiberHold:
			<-cfg.hold
		case fiberErrorAfterEffect:
			return fiber.ErrInternalServerError
		}
		return c.Status(fiber.StatusCreated).SendString(fmt.Sprintf("paid %s (%s, effect #%d)", id, c.Method(), n))
	}
}

// markReplays is a fiber middleware for in front of the idempotency
// middleware: it marks answers served from the store with
// Idempotent-Replayed: true, which fiber itself never sends.
func markReplays(c fiber.Ctx) error {
	err := c.Next()
	if idempotency.IsFromCache(c) {
		c.Set(ReplayHeader, "true")
	}
	return err
}

// rejectBadKeys is a fiber ErrorHandler answering 400, not fiber's default
// 500, to a key the idempotency middleware's KeyHeaderValidate refused.
func rejectBadKeys(c fiber.Ctx, err error) error {
	if errors.Is(err, idempotency.ErrInvalidIdempotencyKey) {
		return c.Status(fiber.StatusBadRequest).SendString(err.Error())
	}
	return fiber.DefaultErrorHandler(c, err)
}

// fingerprintGuard is a fiber middleware for in front of the idempotency
// middleware, which does not fingerprint requests: it remembers the first
// method, path and body seen with each key and answers 422 to a later request
// with the key and another fingerprint, as the draft says. It never forgets a
// key (test code); a production guard would share the middleware's storage
// and lifetime.
type fingerprintGuard struct {
	header string
	mu     sync.Mutex // guards seen
	seen   map[string][sha256.Size]byte
}

func (g *fingerprintGuard) handle(c fiber.Ctx) error {
	key := c.Get(g.header)
	if key == "" || fiber.IsMethodSafe(c.Method()) {
		return c.Next()
	}
	fp := sha256.Sum256([]byte(c.Method() + "\n" + c.Path() + "\n" + string(c.Body())))
	g.mu.Lock()
	if g.seen == nil {
		g.seen = make(map[string][sha256.Size]byte)
	}
	first, ok := g.seen[key]
	if !ok {
		g.seen[key] = fp
	}
	g.mu.Unlock()
	if ok && first != fp {
		return c.Status(fiber.StatusUnprocessableEntity).SendString("Idempotency-Key was used with another request")
	}
	return c.Next()
}

// hashPick returns a number in [0, 100) fixed by id and seen, so that a
// fault plan is deterministic and needs no shared random source.
func hashPick(seed uint64, id string, seen int) int {
	h := fnv.New64a()
	_, _ = fmt.Fprintf(h, "%d/%s/%d", seed, id, seen)
	return int(h.Sum64() % 100)
}
