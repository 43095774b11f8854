package pgqueue_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/pgqueue"
	"github.com/idem-go/idem/queue"
)

// fast is a policy of quick retries, for tests.
func fast() idem.Policy {
	return idem.Policy{BaseDelay: 5 * time.Millisecond, MaxDelay: 20 * time.Millisecond, AttemptTimeout: 2 * time.Second}
}

// paths is a server that answers 201 and records the paths it was sent.
type paths struct {
	*httptest.Server
	mu   sync.Mutex
	seen []string
}

func newPaths(t *testing.T) *paths {
	p := &paths{}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.seen = append(p.seen, r.URL.Path)
		p.mu.Unlock()
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(p.Close)
	return p
}

func (p *paths) got() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.seen...)
}

// run drains q until the test ends.
func run(t *testing.T, q *queue.Queue) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- q.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		assert.NoError(t, <-done)
	})
}

func waitCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func post(t *testing.T, url string, opts ...idem.IntentOption) *idem.Intent {
	in, err := idem.NewIntent("POST", url, []byte("{}"), opts...)
	require.NoError(t, err)
	return in
}

// businessTable makes the table a service writes its own rows to.
func businessTable(t *testing.T, pool *pgxpool.Pool) {
	_, err := pool.Exec(context.Background(), "CREATE TABLE orders (id text PRIMARY KEY, total int NOT NULL)")
	require.NoError(t, err)
}

func countRows(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

// shop returns what a service has: a database with its orders table and
// the queue's, a running queue on it, a server to pay at, and a context
// bounding the test's waits.
func shop(t *testing.T) (*pgxpool.Pool, *paths, *queue.Queue, context.Context) {
	pool := migrated(t)
	businessTable(t, pool)
	q := open(t, pool, pgqueue.Options{Options: queue.Options{Policy: fast()}})
	run(t, q)
	return pool, newPaths(t), q, waitCtx(t)
}

// TestEnqueueTxCommit: the order row and its intent commit together, and a
// running queue sends the intent.
func TestEnqueueTxCommit(t *testing.T) {
	pool, srv, q, ctx := shop(t)

	var id queue.ID
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO orders VALUES ('o-1', 4200)"); err != nil {
			return err
		}
		var err error
		id, err = pgqueue.EnqueueTx(ctx, tx, post(t, srv.URL+"/payments/o-1", idem.WithKey("order-o-1")))
		return err
	})
	require.NoError(t, err)
	assert.Equal(t, 1, countRows(t, pool, "SELECT count(*) FROM orders"))
	r, err := q.Wait(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, queue.Done, r.State)
	assert.Equal(t, "order-o-1", r.Intent.Key())
	assert.Equal(t, []string{"/payments/o-1"}, srv.got())
}

// TestEnqueueTxRollback: a rolled back transaction leaves neither the order
// nor its intent, and sends nothing.
func TestEnqueueTxRollback(t *testing.T) {
	pool, srv, q, ctx := shop(t) // the queue runs, and must find nothing to send

	errOutOfStock := errors.New("out of stock")
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO orders VALUES ('o-2', 100)"); err != nil {
			return err
		}
		if _, err := pgqueue.EnqueueTx(ctx, tx, post(t, srv.URL+"/payments/o-2", idem.WithKey("order-o-2"))); err != nil {
			return err
		}
		return errOutOfStock
	})
	require.ErrorIs(t, err, errOutOfStock)
	assert.Equal(t, 0, countRows(t, pool, "SELECT count(*) FROM orders"))
	assert.Equal(t, 0, countRows(t, pool, "SELECT count(*) FROM idem_queue_records"))
	assert.Equal(t, 0, countRows(t, pool, "SELECT count(*) FROM idem_queue_lanes"), "no lane made for a rolled back intent")
	// A later intent, sent, shows that the running queue had its look.
	id, err := q.Enqueue(ctx, post(t, srv.URL+"/payments/o-3", idem.WithKey("order-o-3")))
	require.NoError(t, err)
	_, err = q.Wait(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, []string{"/payments/o-3"}, srv.got(), "only the committed intent was sent")
}

// statementCounter counts the statements sent on a pool's connections.
type statementCounter struct{ n *atomic.Int64 }

func (c statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// countingPool returns a pool on the database of conn whose statements
// statements counts, closed when tb ends.
func countingPool(tb testing.TB, ctx context.Context, conn string, statements *atomic.Int64) *pgxpool.Pool {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(conn)
	require.NoError(tb, err)
	cfg.ConnConfig.Tracer = statementCounter{statements}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(tb, err)
	tb.Cleanup(pool.Close)
	return pool
}

// TestEnqueueTxOneStatement: EnqueueTx adds one statement, one round trip,
// to the caller's transaction; a supplied key already held costs a second,
// the look at its holder.
func TestEnqueueTxOneStatement(t *testing.T) {
	ctx := waitCtx(t)
	var statements atomic.Int64
	pool := countingPool(t, ctx, migrated(t).Config().ConnString(), &statements)

	sent := func(in *idem.Intent) int64 {
		t.Helper()
		var n int64
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			before := statements.Load()
			_, err := pgqueue.EnqueueTx(ctx, tx, in)
			n = statements.Load() - before
			return err
		}))
		return n
	}
	in := post(t, "http://127.0.0.1:1/payments/o-1", idem.WithKey("order-o-1"))
	assert.EqualValues(t, 1, sent(in), "a new intent")
	assert.EqualValues(t, 2, sent(in), "the same operation again, under its held key")
	assert.EqualValues(t, 1, sent(post(t, "http://127.0.0.1:1/payments/o-2")), "an intent with a generated key")
}

// TestEnqueueTxNotifiesAtCommit: the wake-up goes out when the transaction
// commits, not when EnqueueTx runs, and not at all on rollback. Nothing is
// proved by waiting: notifications reach a listener in commit order, so a
// marker sent after a step is heard first unless the step sent a wake-up.
func TestEnqueueTxNotifiesAtCommit(t *testing.T) {
	pool := migrated(t)
	ctx := waitCtx(t)
	listener, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer listener.Release()
	_, err = listener.Exec(ctx, "LISTEN idem_queue")
	require.NoError(t, err)
	next := func() string {
		n, err := listener.Conn().WaitForNotification(ctx)
		require.NoError(t, err)
		return n.Payload
	}
	quietAfter := func(step string) {
		t.Helper()
		marker := "marker after " + step
		_, err := pool.Exec(ctx, "SELECT pg_notify('idem_queue', $1)", marker)
		require.NoError(t, err)
		assert.Equal(t, marker, next(), "a wake-up %s", step)
	}

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = pgqueue.EnqueueTx(ctx, tx, post(t, "http://127.0.0.1:1/a", idem.WithKey("k-rollback")))
	require.NoError(t, err)
	quietAfter("before commit")
	require.NoError(t, tx.Rollback(ctx))
	quietAfter("on rollback")

	tx, err = pool.Begin(ctx)
	require.NoError(t, err)
	_, err = pgqueue.EnqueueTx(ctx, tx, post(t, "http://127.0.0.1:1/a", idem.WithKey("k-commit")))
	require.NoError(t, err)
	quietAfter("before commit")
	require.NoError(t, tx.Commit(ctx))
	assert.Equal(t, "", next(), "a wake-up at commit")
}

// TestEnqueueTxChecks: EnqueueTx refuses what Enqueue refuses, and dedupes
// a supplied key as Enqueue does.
func TestEnqueueTxChecks(t *testing.T) {
	pool := migrated(t)
	ctx := waitCtx(t)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)

	_, err = pgqueue.EnqueueTx(ctx, tx, nil)
	assert.ErrorIs(t, err, idem.ErrInvalidIntent)
	_, err = pgqueue.EnqueueTx(ctx, tx, post(t, "http://127.0.0.1:1/a", idem.WithoutKey()))
	assert.ErrorIs(t, err, queue.ErrNeedsKey)

	first, err := pgqueue.EnqueueTx(ctx, tx, post(t, "http://127.0.0.1:1/a", idem.WithKey("k")))
	require.NoError(t, err)
	again, err := pgqueue.EnqueueTx(ctx, tx, post(t, "http://127.0.0.1:1/a", idem.WithKey("k")))
	require.NoError(t, err)
	assert.Equal(t, first, again, "the same operation under its key is the same record")
	_, err = pgqueue.EnqueueTx(ctx, tx, post(t, "http://127.0.0.1:1/other", idem.WithKey("k")))
	assert.ErrorIs(t, err, queue.ErrKeyInUse)
	assert.NotContains(t, err.Error(), `"k"`, "the key is not in the error")
}

// crossCommit enqueues two intents of lane in two transactions and commits
// them in the other order, returning their IDs in enqueue order.
func crossCommit(t *testing.T, pool *pgxpool.Pool, url, lane string) (first, second queue.ID) {
	return crossCommitTagged(t, pool, url, lane, "")
}

// crossCommitTagged is crossCommit with tag in the intents' paths.
func crossCommitTagged(t *testing.T, pool *pgxpool.Pool, url, lane, tag string) (first, second queue.ID) {
	t.Helper()
	ctx := waitCtx(t)
	early, err := pool.Begin(ctx)
	require.NoError(t, err)
	first, err = pgqueue.EnqueueTx(ctx, early, post(t, url+"/"+lane+tag+"/first-enqueued", idem.WithLane(lane)))
	require.NoError(t, err)
	late, err := pool.Begin(ctx)
	require.NoError(t, err)
	second, err = pgqueue.EnqueueTx(ctx, late, post(t, url+"/"+lane+tag+"/first-committed", idem.WithLane(lane)))
	require.NoError(t, err)
	require.Less(t, first, second, "IDs follow enqueue order")
	require.NoError(t, late.Commit(ctx))
	require.NoError(t, early.Commit(ctx))
	return first, second
}

// drainAll runs a queue on pool until every record in ids is done.
func drainAll(t *testing.T, pool *pgxpool.Pool, ids ...queue.ID) {
	t.Helper()
	q := open(t, pool, pgqueue.Options{Options: queue.Options{Policy: fast()}})
	run(t, q)
	ctx := waitCtx(t)
	for _, id := range ids {
		r, err := q.Wait(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, queue.Done, r.State)
	}
}

// TestLaneOrderIsCommitOrder: two producers of one lane commit in the other
// order than they enqueued: the lane sends in commit order. A record that
// commits in ID order is placed without a write to its row.
func TestLaneOrderIsCommitOrder(t *testing.T) {
	pool := migrated(t)
	srv := newPaths(t)
	first, second := crossCommit(t, pool, srv.URL, "acct")
	assert.Equal(t, 1, countRows(t, pool, "SELECT count(*) FROM idem_queue_records WHERE pos IS NULL AND id = $1", int64(second)),
		"the record committed first is placed by its ID")
	drainAll(t, pool, first, second)
	assert.Equal(t, []string{"/acct/first-committed", "/acct/first-enqueued"}, srv.got())
}

// TestMigrateKeepsLaneOrder: records placed under each earlier version of
// the tables stay ahead of those placed after Migrate brings them to the
// latest, and each version keeps commit order, for a record a transaction
// and for several in one.
func TestMigrateKeepsLaneOrder(t *testing.T) {
	for from := 1; from < pgqueue.LatestVersion(); from++ {
		t.Run(fmt.Sprintf("from version %d", from), func(t *testing.T) {
			pool := unmigrated(t)
			srv := newPaths(t)
			ctx := waitCtx(t)
			require.NoError(t, pgqueue.MigrateTo(ctx, pool, from))
			var ids []queue.ID
			place := func(tag string) {
				a1, a2 := crossCommitTagged(t, pool, srv.URL, "acct", tag)
				b1, b2 := crossCommitTagged(t, pool, srv.URL, "other", tag)
				require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					for _, p := range []string{"/acct" + tag + "/batch-1", "/acct" + tag + "/batch-2", "/other" + tag + "/batch-1"} {
						id, err := pgqueue.EnqueueTx(ctx, tx, post(t, srv.URL+p, idem.WithLane(strings.Split(p, "/")[1])))
						require.NoError(t, err)
						ids = append(ids, id)
					}
					return nil
				}))
				ids = append(ids, a1, a2, b1, b2)
			}
			place("/old") // placed by the earlier version
			require.NoError(t, pgqueue.Migrate(ctx, pool))
			place("/new") // placed by the latest

			drainAll(t, pool, ids...)
			wants := map[string][]string{
				"acct": {"old/first-committed", "old/first-enqueued", "old/batch-1", "old/batch-2",
					"new/first-committed", "new/first-enqueued", "new/batch-1", "new/batch-2"},
				"other": {"old/first-committed", "old/first-enqueued", "old/batch-1",
					"new/first-committed", "new/first-enqueued", "new/batch-1"},
			}
			for lane, want := range wants {
				var sent []string
				for _, p := range srv.got() {
					if rest, ok := strings.CutPrefix(p, "/"+lane+"/"); ok {
						sent = append(sent, rest)
					}
				}
				assert.Equal(t, want, sent, "lane %s", lane)
			}
		})
	}
}

// TestWaitAcrossReplicas: a record one replica drains is seen settled by
// Wait on another, which never ran.
func TestWaitAcrossReplicas(t *testing.T) {
	pool := migrated(t)
	srv := newPaths(t)
	ctx := waitCtx(t)
	producer := open(t, pool, pgqueue.Options{Options: queue.Options{Policy: fast()}})
	id, err := producer.Enqueue(ctx, post(t, srv.URL+"/x"))
	require.NoError(t, err)

	other, err := pgxpool.New(ctx, pool.Config().ConnString())
	require.NoError(t, err)
	t.Cleanup(other.Close)
	drainer := open(t, other, pgqueue.Options{Options: queue.Options{Policy: fast()}})
	run(t, drainer)

	r, err := producer.Wait(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, queue.Done, r.State)
}

// TestMigrate: Migrate is idempotent and safe from replicas starting at
// once; New refuses tables missing or from another version.
func TestMigrate(t *testing.T) {
	ctx := waitCtx(t)
	pool := unmigrated(t)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = pgqueue.Migrate(ctx, pool) })
	}
	wg.Wait()
	for _, err := range errs {
		assert.NoError(t, err)
	}
	files, err := fs.Glob(pgqueue.MigrationFiles(), "*.sql")
	require.NoError(t, err)
	assert.Equal(t, len(files), countRows(t, pool, "SELECT count(*) FROM idem_queue_migrations"), "each version once")
	open(t, pool, pgqueue.Options{})

	_, err = pool.Exec(ctx, "INSERT INTO idem_queue_migrations (version) VALUES (999)")
	require.NoError(t, err)
	assert.ErrorContains(t, pgqueue.Migrate(ctx, pool), "version 999")
	_, err = pgqueue.New(ctx, pool, pgqueue.Options{})
	assert.ErrorContains(t, err, "version 999")
}

// TestNewBeforeMigrate names the missing step.
func TestNewBeforeMigrate(t *testing.T) {
	pool := unmigrated(t)
	_, err := pgqueue.New(context.Background(), pool, pgqueue.Options{})
	assert.ErrorIs(t, err, pgqueue.ErrTablesMissing)
	assert.ErrorContains(t, err, "call Migrate first")
	_, err = pgqueue.New(context.Background(), nil, pgqueue.Options{})
	assert.ErrorIs(t, err, queue.ErrInvalidOptions)
	_, err = pgqueue.New(context.Background(), pool, pgqueue.Options{LeaseMargin: -time.Second})
	assert.ErrorIs(t, err, queue.ErrInvalidOptions)
}

// TestNewUnreachable: a server that cannot be reached is not mistaken for
// missing tables.
func TestNewUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close()) // its port now refuses connections
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@"+addr+"/none?connect_timeout=5&pool_max_conns=4")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = pgqueue.New(context.Background(), pool, pgqueue.Options{})
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "Migrate")
	assert.Contains(t, err.Error(), "reading the queue's tables' version")
}

// TestMigrationFiles: the SQL Migrate runs is there for other tools.
func TestMigrationFiles(t *testing.T) {
	b, err := fs.ReadFile(pgqueue.MigrationFiles(), "0001_queue.sql")
	require.NoError(t, err)
	assert.Contains(t, string(b), "CREATE TABLE idem_queue_records")
}

// TestNotifyRemote: with NotifyRemote, each replica reports every record
// settled by a replica that has it too once, settled by itself (Remote
// false) or by another (Remote true), and across the fleet each record has
// exactly one report with Remote false: the one a metric counts. A replica
// without NotifyRemote reports only its own settles, and announces none.
func TestNotifyRemote(t *testing.T) {
	pool := migrated(t)
	srv := newPaths(t)
	type seen struct {
		mu     sync.Mutex
		local  map[queue.ID]int
		remote map[queue.ID]int
	}
	replica := func(notifyRemote bool) (*queue.Queue, *seen) {
		s := &seen{local: map[queue.ID]int{}, remote: map[queue.ID]int{}}
		q := open(t, pool, pgqueue.Options{Options: queue.Options{
			Policy: fast(), Workers: 2, NotifyRemote: notifyRemote,
			Notify: func(e queue.Event) {
				if e.Kind != queue.EventSettled {
					t.Logf("event: %v: %v", e.Kind, e.Err)
					return
				}
				assert.True(t, e.Record.State.Settled(), "record %d reported settled in state %v", e.Record.ID, e.Record.State)
				s.mu.Lock()
				defer s.mu.Unlock()
				if e.Remote {
					s.remote[e.Record.ID]++
				} else {
					s.local[e.Record.ID]++
				}
			},
		}})
		run(t, q)
		return q, s
	}
	a, aSeen := replica(true)
	b, bSeen := replica(true)
	c, cSeen := replica(false)

	ctx := waitCtx(t)
	var ids []queue.ID
	for i := range 30 {
		id, err := a.Enqueue(ctx, post(t, srv.URL+"/payments", idem.WithLane(fmt.Sprint("acct-", i%6))))
		require.NoError(t, err)
		ids = append(ids, id)
	}
	for _, id := range ids {
		r, err := a.Wait(ctx, id)
		require.NoError(t, err)
		require.Equal(t, queue.Done, r.State)
	}
	byC := func(id queue.ID) bool {
		cSeen.mu.Lock()
		defer cSeen.mu.Unlock()
		return cSeen.local[id] > 0
	}
	sawAll := func(s *seen) bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, id := range ids {
			if s.local[id]+s.remote[id] == 0 && !byC(id) {
				return false
			}
		}
		return true
	}
	require.Eventually(t, func() bool { return sawAll(aSeen) && sawAll(bSeen) }, 10*time.Second, 10*time.Millisecond,
		"each replica with NotifyRemote reports every record the others with it settled")

	// A fence instead of a wait for late reports. Notifications reach each
	// listener in commit order, and a replica relays them in the order it
	// hears them. The fence, enqueued once every record is done, is settled
	// after all of them, and the test announces its settle once more, as
	// from a replica of its own: a replica's report of the fence with Remote
	// true (its first, for the replica that settled it) comes after it has
	// relayed every settle of the records; a duplicate would be in by then.
	fence, err := a.Enqueue(ctx, post(t, srv.URL+"/payments"))
	require.NoError(t, err)
	_, err = a.Wait(ctx, fence)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "SELECT pg_notify('idem_queue_settled', $1)", fmt.Sprint("fence ", fence))
	require.NoError(t, err)
	relayed := func(s *seen) bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.remote[fence] > 0
	}
	require.Eventually(t, func() bool { return relayed(aSeen) && relayed(bSeen) }, 10*time.Second, 5*time.Millisecond,
		"the fence's settle is relayed")
	for _, q := range []*queue.Queue{a, b, c} {
		require.NoError(t, q.Close()) // Close waits for the relay: no report comes after it
	}

	for _, s := range []*seen{aSeen, bSeen, cSeen} {
		s.mu.Lock()
		defer s.mu.Unlock()
	}
	for _, id := range ids {
		assert.Equal(t, 1, aSeen.local[id]+bSeen.local[id]+cSeen.local[id], "record %d: reports with Remote false across the fleet", id)
		want := 1
		if cSeen.local[id] > 0 {
			want = 0 // c does not announce
		}
		assert.Equal(t, want, aSeen.local[id]+aSeen.remote[id], "record %d: reports by replica a", id)
		assert.Equal(t, want, bSeen.local[id]+bSeen.remote[id], "record %d: reports by replica b", id)
	}
	assert.Empty(t, cSeen.remote, "a replica without NotifyRemote reports no other replica's settles")
	assert.NotEmpty(t, aSeen.remote, "replica a settled everything itself: the test proved nothing")
}
