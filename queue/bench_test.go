package queue

import (
	"context"
	"encoding/binary"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/idem-go/idem"
)

// Enqueue beside raw bbolt in the same run: one commit per item with Update
// (the fsync floor a durable enqueue cannot beat) and shared commits with
// Batch from 64 goroutines. Compare ns/op within one run:
//
//	go test -run '^$' -bench Enqueue -benchtime 2s ./queue/

var benchPayload = []byte(`{"payment":"p-000001","amount_cents":4200,"currency":"EUR","card":"tok_visa"}`)

func benchIntent(b *testing.B) *idem.Intent {
	in, err := idem.NewIntent("POST", "https://api.example/payments", benchPayload,
		idem.WithHeader("Content-Type", "application/json"))
	if err != nil {
		b.Fatal(err)
	}
	return in
}

// producers runs b.N calls of fn spread over n goroutines.
func producers(b *testing.B, n int, fn func() error) {
	var left atomic.Int64
	left.Store(int64(b.N))
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				if err := fn(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

func BenchmarkEnqueue(b *testing.B) {
	for _, n := range []int{1, 64} {
		b.Run(fmtProducers("queue", n), func(b *testing.B) {
			q, err := Open(filepath.Join(b.TempDir(), "q.db"), Options{MaxItems: 1 << 30, MaxBytes: 1 << 40})
			if err != nil {
				b.Fatal(err)
			}
			defer q.Close()
			ctx := context.Background()
			b.ResetTimer()
			producers(b, n, func() error {
				_, err := q.Enqueue(ctx, benchIntent(b))
				return err
			})
		})
	}
	raw := func(b *testing.B, n int, commit func(*bolt.DB, func(*bolt.Tx) error) error) {
		db, err := bolt.Open(filepath.Join(b.TempDir(), "raw.db"), 0o600, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		value, err := benchIntent(b).MarshalBinary()
		if err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		producers(b, n, func() error {
			return commit(db, func(tx *bolt.Tx) error {
				bk, err := tx.CreateBucketIfNotExists([]byte("items"))
				if err != nil {
					return err
				}
				seq, err := bk.NextSequence()
				if err != nil {
					return err
				}
				return bk.Put(binary.BigEndian.AppendUint64(nil, seq), value)
			})
		})
	}
	b.Run("bolt-update-1", func(b *testing.B) { raw(b, 1, (*bolt.DB).Update) })
	b.Run("bolt-batch-64", func(b *testing.B) { raw(b, 64, (*bolt.DB).Batch) })
}

func fmtProducers(name string, n int) string {
	if n == 1 {
		return name + "-1"
	}
	return name + "-64"
}
