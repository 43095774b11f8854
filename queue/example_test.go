package queue_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
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
