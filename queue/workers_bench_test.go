package queue

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/idem-go/idem"
)

// BenchmarkDrainLanes drains b.N records queued beforehand in 64 lanes to a
// loopback server that answers 201 at once, with 4 workers (the default
// before issue 34) and with the default options, side by side. commits/op
// is the file's commits a record: settles of different workers that share
// a commit (see group) bring it below 1, the settle of a record and the
// lease of the next in its lane being one commit already.
func BenchmarkDrainLanes(b *testing.B) {
	const lanes = 64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	target := srv.URL + "/payments"
	for _, workers := range []int{4, 0} {
		b.Run(fmt.Sprintf("lanes=%d/workers=%s", lanes, workersName(workers)), func(b *testing.B) {
			tr := &http.Transport{MaxIdleConnsPerHost: 256}
			defer tr.CloseIdleConnections()
			settled := make(chan struct{}, 1024)
			q, err := Open(filepath.Join(b.TempDir(), "q.db"), Options{
				Workers: workers,
				Client:  &idem.Client{HTTPClient: &http.Client{Transport: tr}},
				Notify: func(e Event) {
					if e.Kind == EventSettled {
						settled <- struct{}{}
					}
				},
			})
			if err != nil {
				b.Fatal(err)
			}
			defer q.Close()
			ctx := context.Background()
			for i := range b.N {
				in, err := idem.NewIntent("POST", target, fmt.Appendf(nil, `{"payment":"p-%d"}`, i), idem.WithLane(fmt.Sprint("lane-", i%lanes)))
				if err != nil {
					b.Fatal(err)
				}
				if _, err := q.Enqueue(ctx, in); err != nil {
					b.Fatal(err)
				}
			}
			before := lastCommit(b, q)
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			b.ResetTimer()
			start := time.Now()
			go func() { _ = q.Run(ctx) }()
			for range b.N {
				<-settled
			}
			elapsed := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "intents/s")
			b.ReportMetric(float64(lastCommit(b, q)-before)/float64(b.N), "commits/op")
		})
	}
}

// workersName names a Workers setting in a benchmark's name.
func workersName(w int) string {
	if w == 0 {
		return "default"
	}
	return fmt.Sprint(w)
}

// lastCommit returns the ID of the last commit of q's file.
func lastCommit(tb testing.TB, q *Queue) int {
	var id int
	if err := q.st.(*boltStore).db.View(func(tx *bolt.Tx) error {
		id = tx.ID()
		return nil
	}); err != nil {
		tb.Fatal(err)
	}
	return id
}
