package queue_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/idemtest"
	"github.com/idem-go/idem/queue"
)

// An intent enqueued is durable at once; the drainer sends it, through a
// lost answer, and Wait returns the settled record.
func Example() {
	// The payment API makes the first payment but drops its answer.
	api := idemtest.New(idemtest.Options{
		Faults: func(_ *http.Request, _ string, seen int) idemtest.Fault {
			if seen == 0 {
				return idemtest.FaultCommitThenDrop
			}
			return idemtest.FaultNone
		},
	})
	if err := api.Start(); err != nil {
		panic(err)
	}
	defer api.Close()

	dir, err := os.MkdirTemp("", "queue-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)

	q, err := queue.Open(filepath.Join(dir, "intents.db"), queue.Options{
		Client: &idem.Client{HTTPClient: api.Client()},
		Policy: idem.Policy{BaseDelay: 10 * time.Millisecond}, // the default is a second
	})
	if err != nil {
		panic(err)
	}
	defer q.Close()
	ctx := context.Background()
	go q.Run(ctx)

	in, err := idem.NewIntent("POST", api.URL()+"/payments", []byte(`{"amount":100}`),
		idem.WithKey("order-42"))
	if err != nil {
		panic(err)
	}
	id, err := q.Enqueue(ctx, in) // durable when it returns
	if err != nil {
		panic(err)
	}
	rec, err := q.Wait(ctx, id)
	if err != nil {
		panic(err)
	}
	fmt.Println(rec.State, rec.Outcome, rec.Result.Status, "after", rec.NumAttempts, "attempts")
	fmt.Println("payments made:", api.EffectsForKey("order-42"))
	// Output:
	// done applied 201 after 2 attempts
	// payments made: 1
}

// Options.Notify hears what the drainer does: here each record settling,
// in its lane's order. Close returns once every event has been delivered.
func ExampleOptions_notify() {
	// The API makes payments and refuses refunds.
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/refunds" {
			w.WriteHeader(http.StatusUnprocessableEntity)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	defer api.Close()

	dir, err := os.MkdirTemp("", "queue-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)

	var settled []string // written by Notify only, read after Close
	q, err := queue.Open(filepath.Join(dir, "intents.db"), queue.Options{
		Notify: func(e queue.Event) {
			if e.Kind == queue.EventSettled {
				r := e.Record
				settled = append(settled, fmt.Sprint(strings.TrimPrefix(r.Intent.URL(), api.URL), " ", r.State, " ", r.Outcome, " ", r.Result.Status))
			}
		},
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	go q.Run(ctx)

	var last queue.ID
	for _, path := range []string{"/payments", "/refunds"} {
		in, err := idem.NewIntent("POST", api.URL+path, []byte(`{"amount":100}`),
			idem.WithLane("customer-7")) // one lane: sent in order
		if err != nil {
			panic(err)
		}
		if last, err = q.Enqueue(ctx, in); err != nil {
			panic(err)
		}
	}
	if _, err := q.Wait(ctx, last); err != nil {
		panic(err)
	}
	if err := q.Close(); err != nil { // every event delivered
		panic(err)
	}
	for _, s := range settled {
		fmt.Println(s)
	}
	// Output:
	// /payments done applied 201
	// /refunds failed not_applied 422
}
