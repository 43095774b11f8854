package pgqueue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-go/idem/queue"
)

// Options configure New: the queue's own options, and how replicas share it.
type Options struct {
	// Options are the queue's, with the meaning they have for a bbolt
	// queue, but for those that concern a file (LockTimeout) or limits the
	// database keeps instead (MaxItems and MaxBytes are not enforced: watch
	// the table as any other). ReadOnly opens the queue to read it, as an
	// operator's tool does; Run and every write then give queue.ErrReadOnly.
	queue.Options
	// LeaseMargin is added to Policy.AttemptTimeout to make how long a
	// replica holds a lane it took: after that another replica may take
	// the lane over, so a replica that died frees its lanes then. 0 means
	// DefaultLeaseMargin.
	LeaseMargin time.Duration
	// NoListen, for connection poolers that cannot LISTEN (PgBouncer in
	// transaction mode) and for pools of one connection, makes the drainer
	// look for due lanes once a second instead of being woken by each
	// enqueue's notification.
	NoListen bool
}

// DefaultLeaseMargin is the default Options.LeaseMargin.
const DefaultLeaseMargin = 10 * time.Second

// MinListenConns is the least MaxConns of a pool New listens on: the
// listener holds one connection for the queue's life, and the drainer and
// producers need another.
const MinListenConns = 2

// New returns a Queue whose records are in pool's database, shared with
// every other replica that opens it there. Run drains it: lanes are taken
// one worker at a time across all replicas, in commit order within a lane
// (see Leases and Fencing in the package doc). Its tables must exist, at
// the version this package knows: call Migrate first (ErrTablesMissing
// otherwise; see Tables and Rolling upgrades). The pool stays the caller's; the Queue holds one of
// its connections for LISTEN unless Options.NoListen, and Close releases
// it. A pool whose MaxConns is below MinListenConns is refused
// (queue.ErrInvalidOptions) unless Options.NoListen or ReadOnly: nothing
// would be left to drain with (see Connections).
func New(ctx context.Context, pool *pgxpool.Pool, opts Options) (*queue.Queue, error) {
	return newKnowing(ctx, pool, opts, len(must(migrationSteps())))
}

// newKnowing is New for a build that knows the tables up to version known:
// tests play an older build with it.
func newKnowing(ctx context.Context, pool *pgxpool.Pool, opts Options, known int) (*queue.Queue, error) {
	st, err := openKnowing(ctx, pool, opts, known)
	if err != nil {
		return nil, err
	}
	q, err := queue.New(st, opts.Options)
	if err != nil {
		st.cancel()
		return nil, err
	}
	if opts.NoListen || opts.ReadOnly {
		close(st.done)
	} else {
		go st.listen()
	}
	return q, nil
}

// open checks the tables' version and returns a store on them, its listener
// not started.
func open(ctx context.Context, pool *pgxpool.Pool, opts Options) (*store, error) {
	return openKnowing(ctx, pool, opts, len(must(migrationSteps())))
}

// openKnowing is open for a build that knows the tables up to version
// known: tests play an older build with it.
func openKnowing(ctx context.Context, pool *pgxpool.Pool, opts Options, known int) (*store, error) {
	if pool == nil {
		return nil, fmt.Errorf("%w: nil pool", queue.ErrInvalidOptions)
	}
	if opts.LeaseMargin < 0 {
		return nil, fmt.Errorf("%w: LeaseMargin is negative (%v)", queue.ErrInvalidOptions, opts.LeaseMargin)
	}
	if err := checkPoolSize(pool, opts); err != nil {
		return nil, err
	}
	if opts.LeaseMargin == 0 {
		opts.LeaseMargin = DefaultLeaseMargin
	}
	timeout := opts.Policy.AttemptTimeout
	if timeout <= 0 {
		timeout = queue.DefaultPolicy().AttemptTimeout
	}
	var version int
	if err := pool.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM idem_queue_migrations").Scan(&version); err != nil {
		if err := tablesMissing(err); errors.Is(err, ErrTablesMissing) {
			return nil, err
		}
		return nil, fmt.Errorf("pgqueue: reading the queue's tables' version: %w", err)
	}
	if version > known {
		return nil, fmt.Errorf("%w: the queue's tables are at version %d, this package knows up to %d: upgrade the package", ErrTablesNewer, version, known)
	}
	if version != known {
		return nil, fmt.Errorf("pgqueue: the queue's tables are at version %d, this package needs %d: call Migrate", version, known)
	}
	sctx, cancel := context.WithCancel(context.Background())
	st := &store{
		pool: pool, opts: opts, location: location(pool), lease: timeout + opts.LeaseMargin, known: known,
		wake: make(chan struct{}, 1), owned: map[string]taken{}, handoff: map[string]string{},
		settles: make(chan queue.ID, settleBuffer), self: uuid.NewString(),
		ctx: sctx, cancel: cancel, done: make(chan struct{}),
	}
	if err := st.measureNow(ctx); err != nil {
		cancel()
		return nil, fmt.Errorf("pgqueue: %w", err)
	}
	return st, nil
}

// location names pool's database and the records' table.
func location(pool *pgxpool.Pool) string {
	c := pool.Config().ConnConfig
	return fmt.Sprintf("postgres://%s/%s (idem_queue_records)", c.Host, c.Database)
}

// checkPoolSize refuses a pool too small to listen on and drain at once.
func checkPoolSize(pool *pgxpool.Pool, opts Options) error {
	n := pool.Config().MaxConns
	if opts.NoListen || opts.ReadOnly || n >= MinListenConns {
		return nil
	}
	return fmt.Errorf("%w: the pool's MaxConns is %d, and LISTEN holds one connection for the queue's life: "+
		"a listening queue needs at least %d (or set NoListen)", queue.ErrInvalidOptions, n, MinListenConns)
}

// must returns v, or panics with err: for the embedded migrations, which
// Migrate has read already.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
