package queue

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/idem-go/idem"
)

func TestOpenCreatesPrivateFile(t *testing.T) {
	_, path := openTest(t, Options{})
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
}

func TestOpenLocked(t *testing.T) {
	_, path := openTest(t, Options{}) // held open until the test ends
	start := time.Now()
	_, err := Open(path, Options{LockTimeout: 50 * time.Millisecond})
	require.ErrorIs(t, err, ErrLocked)
	assert.Contains(t, err.Error(), path)
	assert.Less(t, time.Since(start), 5*time.Second)
}

func TestOpenDamaged(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.db")
	q := reopen(t, good, Options{})
	for i := range 50 {
		in, err := idem.NewIntent("POST", url, make([]byte, 2048+i))
		require.NoError(t, err)
		_, err = q.Enqueue(context.Background(), in)
		require.NoError(t, err)
	}
	require.NoError(t, q.Close())
	goodBytes, err := os.ReadFile(good)
	require.NoError(t, err)

	tests := []struct {
		name string
		data []byte
	}{
		{"not a bbolt file", []byte(strings.Repeat("this is a text file, not a queue\n", 500))},
		{"truncated", goodBytes[:4096+100]},
		{"truncated after the metas", goodBytes[:8192]},
		{"truncated mid-file", goodBytes[:16384]},
		{"last used page cut", goodBytes[:usedSize(t, goodBytes)-4096]},
		{"freelist page garbled", garble(t, goodBytes, "freelist")},
		{"every data page garbled", garble(t, goodBytes, "data")},
		{"meta pages zeroed", append(make([]byte, 8192), goodBytes[8192:]...)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "-")+".db")
			require.NoError(t, os.WriteFile(path, tt.data, 0o600))
			_, err := Open(path, Options{LockTimeout: 100 * time.Millisecond})
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrDamaged)
			after, rerr := os.ReadFile(path)
			require.NoError(t, rerr)
			assert.Equal(t, tt.data, after, "a damaged file must never be written")
		})
	}
}

// garble returns file with pages overwritten by junk: the freelist page, or
// every page after the two metas.
func garble(t *testing.T, file []byte, which string) []byte {
	m, ok := readMeta(file[:metaSize])
	require.True(t, ok)
	from, to := int(m.freelist), int(m.freelist)+1
	if which == "data" {
		from, to = 2, int(m.pages)
	}
	out := append([]byte(nil), file...)
	ps := int(m.pageSize)
	for i := from * ps; i < to*ps; i++ {
		out[i] = byte(i*7 + 13)
	}
	return out
}

// usedSize is the size a bbolt file's own meta says it uses.
func usedSize(t *testing.T, file []byte) int {
	m, ok := readMeta(file[:metaSize])
	require.True(t, ok)
	require.Greater(t, int(m.pages), 3)
	return int(m.pages) * int(m.pageSize)
}

func TestOpenOptions(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.db")
	for _, tt := range []struct {
		opts Options
		msg  string
	}{
		{Options{Workers: -1}, "Workers is negative"},
		{Options{Retention: time.Hour, Margin: time.Hour}, "Margin 1h0m0s must be less than Retention"},
		{Options{Retention: time.Hour, Margin: 30 * time.Minute, Policy: idem.Policy{AttemptTimeout: 31 * time.Minute}}, "Policy.AttemptTimeout"},
		{Options{MaxBytes: -5}, "MaxBytes is negative"},
		{Options{ProbeInterval: -time.Second}, "ProbeInterval is negative"},
	} {
		_, err := Open(path, tt.opts)
		assert.ErrorIs(t, err, ErrInvalidOptions)
		assert.ErrorContains(t, err, tt.msg)
	}
	_, err := os.Stat(path)
	assert.True(t, errors.Is(err, os.ErrNotExist), "bad options must not create the file")
}

func TestOpenReadOnlyDirectory(t *testing.T) {
	if os.Geteuid() == 0 {
		// root ignores directory permissions; a path under a file fails
		// for everyone instead.
		f := filepath.Join(t.TempDir(), "file")
		require.NoError(t, os.WriteFile(f, nil, 0o600))
		_, err := Open(filepath.Join(f, "q.db"), Options{})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "queue: open")
		return
	}
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o500))
	t.Cleanup(func() { os.Chmod(dir, 0o700) })
	_, err := Open(filepath.Join(dir, "q.db"), Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "queue: open")
}

func TestEnqueueDurable(t *testing.T) {
	q, path := openTest(t, Options{})
	in := post(t, url, 1, idem.WithLane("acct-7"), idem.WithHeader("Content-Type", "application/json"))
	id, err := q.Enqueue(context.Background(), in)
	require.NoError(t, err)
	require.NoError(t, q.Close())

	q = reopen(t, path, Options{})
	r, err := q.Get(context.Background(), id)
	require.NoError(t, err)
	assert.Equal(t, Pending, r.State)
	assert.Equal(t, in.Key(), r.Intent.Key(), "the key survives a restart")
	assert.Equal(t, in.Body(), r.Intent.Body())
	assert.Equal(t, "acct-7", r.Intent.Lane())
	assert.Equal(t, "application/json", r.Intent.Header().Get("Content-Type"))
	assert.True(t, r.FirstSentAt.IsZero())
}

func TestEnqueueRefuses(t *testing.T) {
	q, _ := openTest(t, Options{MaxItems: 2, MaxBytes: 4096})
	ctx := context.Background()
	keyless, err := idem.NewIntent("POST", url, nil, idem.WithoutKey())
	require.NoError(t, err)
	_, err = q.Enqueue(ctx, keyless)
	assert.ErrorIs(t, err, ErrNeedsKey)

	_, err = q.Enqueue(ctx, nil)
	assert.ErrorIs(t, err, idem.ErrInvalidIntent)

	putNoKey, err := idem.NewIntent("PUT", "http://h/r/1", []byte("v"), idem.WithoutKey())
	require.NoError(t, err)
	_, err = q.Enqueue(ctx, putNoKey)
	assert.NoError(t, err, "PUT is idempotent without a key")

	big, err := idem.NewIntent("POST", url, make([]byte, 5000))
	require.NoError(t, err)
	_, err = q.Enqueue(ctx, big)
	assert.ErrorIs(t, err, ErrQueueFull)
	assert.ErrorContains(t, err, "bytes")

	_, err = q.Enqueue(ctx, post(t, url, 1))
	require.NoError(t, err)
	_, err = q.Enqueue(ctx, post(t, url, 2))
	assert.ErrorIs(t, err, ErrQueueFull)
	assert.ErrorContains(t, err, "2 unsettled records, limit 2")

	canceled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = q.Enqueue(canceled, post(t, url, 3))
	assert.ErrorIs(t, err, context.Canceled)

	counts, err := q.Counts(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 2, counts[Pending], "refused intents are not stored")
}

func TestEnqueueSameKey(t *testing.T) {
	q, _ := openTest(t, Options{})
	ctx := context.Background()
	a := post(t, url, 1, idem.WithKey("order-1"))
	id, err := q.Enqueue(ctx, a)
	require.NoError(t, err)

	again := post(t, url, 1, idem.WithKey("order-1")) // a producer restarted
	id2, err := q.Enqueue(ctx, again)
	require.NoError(t, err)
	assert.Equal(t, id, id2, "the same operation under the same key is enqueued once")

	other := post(t, url, 2, idem.WithKey("order-1"))
	_, err = q.Enqueue(ctx, other)
	assert.ErrorIs(t, err, ErrKeyInUse)

	c, err := q.Counts(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 1, c[Pending])
}

func TestEnqueueConcurrent(t *testing.T) {
	q, path := openTest(t, Options{})
	const producers, each = 16, 20
	var wg sync.WaitGroup
	ids := make(chan ID, producers*each)
	for p := range producers {
		wg.Go(func() {
			for i := range each {
				id, err := q.Enqueue(context.Background(), post(t, url, p*1000+i, idem.WithLane(string(rune('a'+p)))))
				if assert.NoError(t, err) {
					ids <- id
				}
			}
		})
	}
	wg.Wait()
	close(ids)
	seen := map[ID]bool{}
	for id := range ids {
		assert.False(t, seen[id], "ID %d given twice", id)
		seen[id] = true
	}
	assert.Len(t, seen, producers*each)
	require.NoError(t, q.Close())
	q = reopen(t, path, Options{})
	c, err := q.Counts(context.Background())
	require.NoError(t, err)
	assert.Equal(t, producers*each, c[Pending])
	assert.Len(t, q.st.(*boltStore).idx.lanes, producers)
}

func TestListPaging(t *testing.T) {
	q, _ := openTest(t, Options{})
	ctx := context.Background()
	var ids []ID
	for i := range 7 {
		id, err := q.Enqueue(ctx, post(t, url, i))
		require.NoError(t, err)
		ids = append(ids, id)
	}
	require.NoError(t, q.Discard(context.Background(), ids[2]))

	var got []ID
	after := ID(0)
	for {
		page, err := q.List(context.Background(), Pending, after, 2)
		require.NoError(t, err)
		if len(page) == 0 {
			break
		}
		assert.LessOrEqual(t, len(page), 2)
		for _, r := range page {
			got = append(got, r.ID)
		}
		after = page[len(page)-1].ID
	}
	assert.Equal(t, []ID{ids[0], ids[1], ids[3], ids[4], ids[5], ids[6]}, got)

	none, err := q.List(context.Background(), Done, 0, 10)
	require.NoError(t, err)
	assert.Empty(t, none)
	all, err := q.List(context.Background(), 0, 0, 100)
	require.NoError(t, err)
	assert.Len(t, all, 6)

	_, err = q.List(context.Background(), State(9), 0, 1)
	assert.ErrorContains(t, err, "unknown state 9")
	_, err = q.List(context.Background(), Pending, 0, 0)
	assert.ErrorContains(t, err, "limit 0")
}

func TestGetDiscard(t *testing.T) {
	q, _ := openTest(t, Options{})
	id, err := q.Enqueue(context.Background(), post(t, url, 1))
	require.NoError(t, err)
	require.NoError(t, q.Discard(context.Background(), id))
	_, err = q.Get(context.Background(), id)
	assert.ErrorIs(t, err, ErrNotFound)
	assert.ErrorIs(t, q.Discard(context.Background(), id), ErrNotFound)
	assert.Empty(t, q.st.(*boltStore).idx.lanes, "an empty lane is forgotten")
	c, err := q.Counts(context.Background())
	require.NoError(t, err)
	assert.Zero(t, c[Pending])
}

func TestDiscardFreesKey(t *testing.T) {
	q, _ := openTest(t, Options{})
	id, err := q.Enqueue(context.Background(), post(t, url, 1, idem.WithKey("k")))
	require.NoError(t, err)
	require.NoError(t, q.Discard(context.Background(), id))
	_, err = q.Enqueue(context.Background(), post(t, url, 2, idem.WithKey("k")))
	assert.NoError(t, err, "the key is free once its record is gone")
}

func TestDiscardInFlight(t *testing.T) {
	q, _ := openTest(t, Options{})
	id, err := q.Enqueue(context.Background(), post(t, url, 1))
	require.NoError(t, err)
	r, _, err := q.st.Head(context.Background(), "")
	require.NoError(t, err)
	require.NoError(t, q.lease(r, time.Now()))
	assert.ErrorIs(t, q.Discard(context.Background(), id), ErrInFlight)
}

func TestClosed(t *testing.T) {
	q, _ := openTest(t, Options{})
	require.NoError(t, q.Close())
	assert.ErrorIs(t, q.Close(), ErrClosed)
	_, err := q.Enqueue(context.Background(), post(t, url, 1))
	assert.ErrorIs(t, err, ErrClosed)
	_, err = q.Get(context.Background(), 1)
	assert.ErrorIs(t, err, ErrClosed)
	_, err = q.Counts(context.Background())
	assert.ErrorIs(t, err, ErrClosed)
	_, err = q.Wait(context.Background(), 1)
	assert.ErrorIs(t, err, ErrClosed)
	assert.ErrorIs(t, q.Run(context.Background()), ErrClosed)
}

// TestRecoverInFlight is a crash between a lease and its result: the record
// returns to pending on Open, counted as in doubt, FirstSentAt kept.
func TestRecoverInFlight(t *testing.T) {
	q, path := openTest(t, Options{})
	id, err := q.Enqueue(context.Background(), post(t, url, 1))
	require.NoError(t, err)
	r, _, err := q.st.Head(context.Background(), "")
	require.NoError(t, err)
	leased := time.Now()
	require.NoError(t, q.lease(r, leased))
	c, err := q.Counts(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 1, c[InFlight])
	require.NoError(t, q.Close()) // no result commit: as after kill -9

	q = reopen(t, path, Options{})
	got, err := q.Get(context.Background(), id)
	require.NoError(t, err)
	assert.Equal(t, Pending, got.State)
	assert.True(t, got.InDoubt, "an attempt nobody saw end leaves it in doubt")
	assert.True(t, got.FirstSentAt.Equal(leased), "FirstSentAt %v, want %v", got.FirstSentAt, leased)
	assert.Equal(t, 1, got.NumAttempts)
	c, err = q.Counts(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 1, c[Pending])
	assert.Zero(t, c[InFlight])
}

func TestSweepSettled(t *testing.T) {
	clk := newClock()
	q, path := openTest(t, Options{now: clk.Now, KeepSettled: time.Hour})
	ctx := context.Background()
	var ids []ID
	for i := range 3 {
		id, err := q.Enqueue(ctx, post(t, url, i))
		require.NoError(t, err)
		ids = append(ids, id)
	}
	// Settle two, an hour apart.
	for i, id := range ids[:2] {
		r, err := q.Get(context.Background(), id)
		require.NoError(t, err)
		require.NoError(t, q.settle(r, Pending, Failed, idem.NotApplied, "test", nil))
		if i == 0 {
			clk.Add(time.Hour)
		}
	}
	n, err := q.st.(*boltStore).sweep(clk.Now())
	require.NoError(t, err)
	assert.Equal(t, 1, n, "only the record settled an hour ago goes")
	_, err = q.Get(context.Background(), ids[0])
	assert.ErrorIs(t, err, ErrNotFound)
	_, err = q.Get(context.Background(), ids[1])
	assert.NoError(t, err)
	require.NoError(t, q.Close())

	clk.Add(2 * time.Hour)
	q = reopen(t, path, Options{now: clk.Now, KeepSettled: time.Hour})
	_, err = q.Get(context.Background(), ids[1])
	assert.ErrorIs(t, err, ErrNotFound, "Open sweeps too")
	r, err := q.Get(context.Background(), ids[2])
	require.NoError(t, err)
	assert.Equal(t, Pending, r.State, "unsettled records are never swept")
	c, err := q.Counts(context.Background())
	require.NoError(t, err)
	assert.Equal(t, map[State]int{Pending: 1, InFlight: 0, Done: 0, Failed: 0, Expired: 0}, c)
}

func TestCompactAtOpen(t *testing.T) {
	q, path := openTest(t, Options{})
	ctx := context.Background()
	var (
		mu  sync.Mutex
		ids []ID
		wg  sync.WaitGroup
	)
	// About 9 MB of records: over compactMinSize, and under bbolt's 16 MB
	// allocation step, past which the file grows ahead of its last page by
	// up to 16 MB that maybeCompact does not count as free, and a file of
	// some 17 MB of pages sits at the compaction threshold.
	for p := range 8 { // concurrent producers share commits: fast to fill
		wg.Go(func() {
			for i := range 25 {
				body := make([]byte, 40<<10)
				body[0], body[1] = byte(p), byte(i)
				// assert, not require: FailNow must not run off the test's goroutine.
				in, err := idem.NewIntent("POST", url, body)
				if !assert.NoError(t, err) {
					return
				}
				id, err := q.Enqueue(ctx, in)
				if !assert.NoError(t, err) {
					return
				}
				mu.Lock()
				ids = append(ids, id)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	keep := ids[len(ids)-1]
	for _, id := range ids[:len(ids)-1] {
		wg.Go(func() { assert.NoError(t, q.Discard(context.Background(), id)) })
	}
	wg.Wait()
	require.NoError(t, q.Close())
	before, err := os.Stat(path)
	require.NoError(t, err)
	require.Greater(t, before.Size(), int64(compactMinSize))

	q = reopen(t, path, Options{})
	after, err := os.Stat(path)
	require.NoError(t, err)
	assert.Less(t, after.Size(), before.Size()/4, "compaction: %d -> %d bytes", before.Size(), after.Size())
	r, err := q.Get(context.Background(), keep)
	require.NoError(t, err)
	assert.Equal(t, Pending, r.State, "compaction keeps every record")
	_, err = os.Stat(path + compactSuffix)
	assert.True(t, errors.Is(err, os.ErrNotExist))
	assert.Empty(t, compactTemps(t, path), "no compaction file is left")
	// The compacted file is a sound bbolt file.
	require.NoError(t, q.st.(*boltStore).db.View(func(tx *bolt.Tx) error {
		for err := range tx.Check() {
			return err
		}
		return nil
	}))
}

func TestWaitAndOldest(t *testing.T) {
	clk := newClock()
	q, _ := openTest(t, Options{now: clk.Now})
	ctx := context.Background()
	d, err := q.OldestPending(context.Background())
	require.NoError(t, err)
	assert.Zero(t, d)

	id, err := q.Enqueue(ctx, post(t, url, 1, idem.WithLane("b")))
	require.NoError(t, err)
	clk.Add(time.Minute)
	_, err = q.Enqueue(ctx, post(t, url, 2, idem.WithLane("a")))
	require.NoError(t, err)
	clk.Add(time.Minute)
	d, err = q.OldestPending(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 2*time.Minute, d)

	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	_, err = q.Wait(short, id)
	assert.ErrorIs(t, err, context.DeadlineExceeded)

	q.sig.init()
	got := make(chan *Record, 1)
	go func() {
		r, err := q.Wait(ctx, id)
		assert.NoError(t, err)
		got <- r
	}()
	next(t, &q.sig.waiting, func(w ID) bool { return w == id }) // Wait blocks on the settle
	r, err := q.Get(context.Background(), id)
	require.NoError(t, err)
	require.NoError(t, q.settle(r, Pending, Expired, idem.NotApplied, "test", nil))
	select {
	case r := <-got:
		assert.Equal(t, Expired, r.State)
	case <-time.After(5 * time.Second):
		t.Fatal("Wait did not return when the record settled")
	}
	r, err = q.Wait(ctx, id)
	require.NoError(t, err, "a settled record returns at once")
	assert.Equal(t, Expired, r.State)
	_, err = q.Wait(ctx, 999)
	assert.ErrorIs(t, err, ErrNotFound)
}

func TestResubmit(t *testing.T) {
	q, _ := openTest(t, Options{})
	ctx := context.Background()
	in := post(t, url, 1, idem.WithLane("l"), idem.WithHeader("X-Trace", "t"))
	id, err := q.Enqueue(ctx, in)
	require.NoError(t, err)
	_, err = q.Resubmit(ctx, id)
	assert.ErrorIs(t, err, ErrNotResubmittable, "pending records are not resubmitted")

	r, err := q.Get(context.Background(), id)
	require.NoError(t, err)
	require.NoError(t, q.settle(r, Pending, Expired, idem.Unknown, "past the horizon", nil))
	_, err = q.Resubmit(ctx, id)
	assert.ErrorIs(t, err, ErrUnknownOutcome, "an attempt may have been applied")
	newID, err := q.ForceResubmit(ctx, id)
	require.NoError(t, err)
	fresh, err := q.Get(context.Background(), newID)
	require.NoError(t, err)
	assert.NotEqual(t, in.Key(), fresh.Intent.Key(), "a resubmission is a new operation: new key")
	assert.Equal(t, in.Body(), fresh.Intent.Body())
	assert.Equal(t, "l", fresh.Intent.Lane())
	assert.Equal(t, "t", fresh.Intent.Header().Get("X-Trace"))
	old, err := q.Get(context.Background(), id)
	require.NoError(t, err)
	assert.Equal(t, newID, old.ResubmittedAs)
	_, err = q.Resubmit(ctx, id)
	assert.ErrorIs(t, err, ErrNotResubmittable, "only once")
	_, err = q.Resubmit(ctx, 999)
	assert.ErrorIs(t, err, ErrNotFound)
}

// TestResubmitRace: of many Resubmit calls at once for one record, one
// queues a copy; the others are refused and store nothing.
func TestResubmitRace(t *testing.T) {
	q, _ := openTest(t, Options{})
	ctx := context.Background()
	id, err := q.Enqueue(ctx, post(t, url, 1))
	require.NoError(t, err)
	r, err := q.Get(context.Background(), id)
	require.NoError(t, err)
	require.NoError(t, q.settle(r, Pending, Failed, idem.NotApplied, "rejected (400)", nil))

	const callers = 8
	ids := make(chan ID, callers)
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			newID, err := q.Resubmit(ctx, id)
			if err == nil {
				ids <- newID
				return
			}
			assert.ErrorIs(t, err, ErrNotResubmittable)
			assert.ErrorContains(t, err, "was resubmitted as")
		})
	}
	wg.Wait()
	close(ids)
	var got []ID
	for newID := range ids {
		got = append(got, newID)
	}
	require.Len(t, got, 1, "exactly one copy")
	counts, err := q.Counts(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 1, counts[Pending], "the refused calls stored nothing")
	old, err := q.Get(context.Background(), id)
	require.NoError(t, err)
	assert.Equal(t, got[0], old.ResubmittedAs)
}

// TestQueuePolicyDefaults: a zero field of Options.Policy takes the queue's
// default, a set one is kept, and a negative one is named.
func TestQueuePolicyDefaults(t *testing.T) {
	o, err := Options{Policy: idem.Policy{BaseDelay: time.Millisecond}, MaxAttempts: 3}.withDefaults()
	require.NoError(t, err)
	def := DefaultPolicy()
	assert.Equal(t, idem.Policy{BaseDelay: time.Millisecond, MaxDelay: def.MaxDelay, AttemptTimeout: def.AttemptTimeout}, o.Policy)
	assert.Equal(t, 3, o.MaxAttempts)
	zero, err := Options{}.withDefaults()
	require.NoError(t, err)
	assert.Equal(t, def, zero.Policy)
	assert.Zero(t, zero.MaxAttempts, "no limit but the horizon")
	assert.Zero(t, zero.MaxRetryAfter, "no limit but the horizon")
	_, err = Options{Policy: idem.Policy{MaxRetryAfter: -1}}.withDefaults()
	assert.ErrorIs(t, err, ErrInvalidOptions)
	assert.ErrorContains(t, err, "Policy.MaxRetryAfter is negative")
	_, err = Options{MaxAttempts: -1}.withDefaults()
	assert.ErrorContains(t, err, "MaxAttempts is negative")
}

// TestQueueRefusesCallLimits: each field of idem.Policy means one thing to
// every reader. Its limits' zero means DefaultPolicy's 4 attempts and 60 s,
// a queue's means no limit, so a queue takes its own and refuses a call's
// when set, rather than read it another way or not at all.
func TestQueueRefusesCallLimits(t *testing.T) {
	tests := []struct {
		name string
		p    idem.Policy
		want string
	}{
		{"MaxAttempts", idem.Policy{MaxAttempts: 3}, "Policy.MaxAttempts is a call's limit, not read by a queue: set Options.MaxAttempts"},
		{"MaxRetryAfter", idem.Policy{MaxRetryAfter: time.Minute}, "Policy.MaxRetryAfter is a call's limit, not read by a queue: set Options.MaxRetryAfter"},
		{"MaxElapsed", idem.Policy{MaxElapsed: time.Hour}, "Policy.MaxElapsed is a call's limit, not read by a queue"},
		{"InFlightWindow", idem.Policy{InFlightWindow: time.Minute}, "Policy.InFlightWindow is a call's limit, not read by a queue"},
		{"HedgeAfter", idem.Policy{HedgeAfter: time.Second}, "Policy.HedgeAfter hedges a call's safe reads, not read by a queue"},
		{"HedgeAfter negative", idem.Policy{HedgeAfter: -time.Second}, "Policy.HedgeAfter hedges a call's safe reads, not read by a queue"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Open(filepath.Join(t.TempDir(), "q.db"), Options{Policy: tt.p})
			assert.ErrorIs(t, err, ErrInvalidOptions, "Open(Options{Policy: %+v})", tt.p)
			assert.ErrorContains(t, err, tt.want)
		})
	}
}
