// Command service shows idem inside an HTTP service: an order service that
// receives orders, each with the caller's Idempotency-Key, and charges them
// through a payment API with idem. The charge's key is derived from the
// order's key (idem.DeriveKey), so when the service crashes between charging
// and recording the order and the caller retries, the resumed charge presents
// the same key downstream and the customer is charged once.
//
//	go run ./examples/service
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/idemtest"
	"github.com/idem-go/idem/redact"
)

func main() {
	sum, err := run(os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if sum.charges != 1 || sum.orders != 1 {
		fmt.Fprintf(os.Stderr, "service: %d charge(s) and %d order(s), want 1 of each\n", sum.charges, sum.orders)
		os.Exit(1)
	}
}

// summary is what the demo observed.
type summary struct {
	charges       int  // payments the payment API applied for the order
	orders        int  // orders the service recorded
	chargeReplays int  // charges answered from the payment API's store
	crashed       bool // the first request died between charge and record
}

func run(out io.Writer) (summary, error) {
	payments := idemtest.New(idemtest.Options{RequireKey: true})
	if err := payments.Start(); err != nil {
		return summary{}, err
	}
	defer payments.Close()

	svc := newOrderService(payments.URL()+"/payments", &idem.Client{HTTPClient: payments.Client()})
	svc.crashAfterCharge = true // the first order request dies after charging
	orders := httptest.NewServer(svc)
	defer orders.Close()

	// The caller (a shop front end) creates the order intent once, with its
	// key, and lets idem retry it: the service is a server like any other.
	shop := &idem.Client{Policy: idem.Policy{BaseDelay: 20 * time.Millisecond}}
	in, err := idem.NewIntent("POST", orders.URL+"/orders", []byte(`{"cart":"c-81","amount_cents":4200}`),
		idem.WithHeader("Content-Type", "application/json"))
	if err != nil {
		return summary{}, err
	}
	fmt.Fprintf(out, "shop: POST /orders with Idempotency-Key %s...\n", in.Key()[:8])
	res, err := shop.Do(context.Background(), in)
	if err != nil {
		return summary{}, err
	}
	body, _ := io.ReadAll(res.Response.Body)
	res.Response.Body.Close()
	for i, a := range res.Attempts {
		if a.Err != nil {
			fmt.Fprintf(out, "shop: attempt %d: %s: %s\n", i+1, a.Class, redact.Error(a.Err))
			continue
		}
		fmt.Fprintf(out, "shop: attempt %d: %s: %d %s\n", i+1, a.Class, a.Status, http.StatusText(a.Status))
	}
	fmt.Fprintf(out, "shop: %s: %s\n", res.Outcome, strings.TrimSpace(string(body)))

	s := summary{
		charges:       payments.EffectsForKey(idem.DeriveKey(in.Key(), "charge")),
		orders:        svc.recorded(),
		chargeReplays: payments.Stats().Replays,
		crashed:       svc.crashes() > 0,
	}
	fmt.Fprintf(out, "payment API: %d charge(s) for the order, %d answered from its store\n", s.charges, s.chargeReplays)
	fmt.Fprintf(out, "order service: %d order(s) recorded, %d crash(es) between charge and record\n", s.orders, svc.crashes())
	return s, nil
}

// orderService takes orders in phases: charge through the payment API, then
// record. Its state is in memory; a real one keeps it in its database, keyed
// by the caller's idempotency key, with the phase reached.
type orderService struct {
	paymentsURL string
	payments    *idem.Client
	// crashAfterCharge makes the next request die after its charge, before
	// the order is recorded: a process crash, as far as the caller can tell.
	crashAfterCharge bool

	mu      sync.Mutex // guards the fields below
	orders  map[string]order
	crashed int
}

// order is a recorded order: one whose charge went through.
type order struct {
	chargeID string
}

func newOrderService(paymentsURL string, c *idem.Client) *orderService {
	return &orderService{paymentsURL: paymentsURL, payments: c, orders: map[string]order{}}
}

func (s *orderService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/orders" {
		http.NotFound(w, r)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	if key == "" { // any key will do: the payment key is derived from it (DeriveKey)
		http.Error(w, `{"error":"Idempotency-Key required"}`, http.StatusBadRequest)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, `{"error":"reading the order"}`, http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	o, seen := s.orders[key]
	s.mu.Unlock()
	if seen { // a replay of a finished order
		w.Header().Set("Idempotent-Replayed", "true")
		writeOrder(w, key, o)
		return
	}

	// Phase 1, charge: the downstream key is derived from the order's key,
	// so a resumed phase presents the same key and is not charged twice.
	chargeID, err := s.charge(r.Context(), key, body)
	if err != nil {
		var e *idem.Error
		if errors.As(err, &e) && e.Outcome == idem.Unknown {
			http.Error(w, `{"error":"payment outcome unknown"}`, http.StatusBadGateway)
			return
		}
		http.Error(w, `{"error":"payment failed"}`, http.StatusServiceUnavailable)
		return
	}
	s.mu.Lock()
	crash := s.crashAfterCharge
	s.crashAfterCharge = false
	if crash {
		s.crashed++
	}
	s.mu.Unlock()
	if crash {
		panic(http.ErrAbortHandler) // the connection drops: the caller sees no answer
	}

	// Phase 2, record.
	o = order{chargeID: chargeID}
	s.mu.Lock()
	s.orders[key] = o
	s.mu.Unlock()
	w.WriteHeader(http.StatusCreated)
	writeOrder(w, key, o)
}

// charge makes the payment for an order and returns the payment API's
// answer.
func (s *orderService) charge(ctx context.Context, orderKey string, body []byte) (string, error) {
	in, err := idem.NewIntent("POST", s.paymentsURL, body,
		idem.WithKey(idem.DeriveKey(orderKey, "charge")), idem.WithHeader("Content-Type", "application/json"))
	if err != nil {
		return "", err
	}
	res, err := s.payments.Do(ctx, in)
	if err != nil {
		return "", err
	}
	defer res.Response.Body.Close()
	if res.Outcome != idem.Applied {
		return "", fmt.Errorf("payment not applied: %d", res.Response.StatusCode)
	}
	b, err := io.ReadAll(res.Response.Body)
	return strings.TrimSpace(string(b)), err
}

func (s *orderService) recorded() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.orders)
}

func (s *orderService) crashes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.crashed
}

func writeOrder(w http.ResponseWriter, key string, o order) {
	fmt.Fprintf(w, `{"order":"o-%s","charge":%s}`+"\n", key[:8], o.chargeID)
}
