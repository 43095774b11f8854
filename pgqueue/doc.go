// Package pgqueue keeps an idem queue in PostgreSQL, shared by service replicas.
//
// It is package queue's Queue with its records in three tables of the
// application's own database instead of a bbolt file: every replica of a
// service opens the same queue, any of them drains it, and a lane's
// records are still sent one at a time, in order, across the whole fleet.
// Because the records live beside the application's data, an intent can be
// queued in the same transaction as the business change it belongs to
// (EnqueueTx): both commit, or neither does.
//
// A replica migrates the tables, opens the queue on its pgx pool and runs
// the drainer; the code that makes a business change queues its intent in
// that change's transaction:
//
//	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
//	...
//	if err := pgqueue.Migrate(ctx, pool); err != nil { // once per version, however many replicas start
//		...
//	}
//	q, err := pgqueue.New(ctx, pool, pgqueue.Options{
//		Options: queue.Options{Notify: func(e queue.Event) { ... }},
//	})
//	...
//	defer q.Close()
//	go q.Run(ctx)
//
//	// In a request handler: the order and its payment commit together.
//	tx, err := pool.Begin(ctx)
//	...
//	defer tx.Rollback(ctx)
//	if _, err := tx.Exec(ctx, "INSERT INTO orders (id, amount) VALUES ($1, $2)", orderID, amount); err != nil {
//		...
//	}
//	in, err := idem.NewIntent("POST", paymentsURL, body, idem.WithKey(orderID), idem.WithLane(customerID))
//	...
//	if _, err := pgqueue.EnqueueTx(ctx, tx, in); err != nil {
//		...
//	}
//	err = tx.Commit(ctx) // the wake-up goes out now; any replica sends the payment
//
// The Queue's own Enqueue serves as well, in a transaction of its own, and
// everything else (Wait, Get, List, Discard, Resubmit, Notify and its
// events, package queueweb) works as on a bbolt queue. The sections below
// say what differs.
//
// # Tables
//
// Migrate creates, in the pool's current schema (its search_path), the
// tables below; before it, New, EnqueueTx and EnqueueManyTx return
// ErrTablesMissing:
//
//   - idem_queue_migrations (version, applied_at): one row per version of
//     the tables applied; see Rolling upgrades.
//   - idem_queue_records: one row per record. id (bigint identity) is the
//     queue.ID; lane is the intent's lane; state is the queue.State (1
//     pending, 2 in flight, 3 done, 4 failed, 5 expired); key is the
//     idempotency key the producer supplied, NULL for a generated one;
//     enqueued_at and settled_at; record (bytea) is the whole record in its
//     binary form (queue.Record.MarshalBinary), intent, attempts and stored
//     answer; pos and txn place the record in its lane at commit.
//   - idem_queue_lanes: one row per lane with unsettled records. name; tail,
//     the last place given in the lane; next_at, when its head is next due
//     ('infinity' once empty); held, after a 401 that fresh credentials did
//     not cure or a hook that panicked (see package queue), until Wake;
//     owner and lease_until, the lease (see Leases); placed_by,
//     placed_upto and placed_after, which let a transaction of many
//     records place them with at most two writes of the row.
//
// Indexes: a unique one on records' supplied keys (one key, one operation:
// queue.ErrKeyInUse), a unique one allowing at most one record of a lane in
// flight, the lanes' unsettled records in lane order (a lane's head is the
// first), records by state and by settled_at (listing, sweeping), and due
// lanes by next_at. A deferred constraint trigger, idem_queue_place, gives
// each record its place in its lane when its transaction commits, so a
// lane's order is commit order, and sends the wake-up (NOTIFY idem_queue)
// then; settles are announced on idem_queue_settled when
// queue.Options.NotifyRemote asks for them.
//
// The drainer deletes records settled longer than queue.Options.KeepSettled
// ago, in batches, and the rows of lanes left empty. Read the tables freely
// (for reports, or to join records to the application's rows by key); write
// them only through this package: the record column is the truth, and the
// other columns index it.
//
// MigrationFiles gives the SQL, for teams that apply schema changes with
// their own tool.
//
// # EnqueueTx
//
// EnqueueTx is the transactional outbox: the intent is queued if and only
// if the caller's transaction commits, with one more statement in it and
// no second store to keep in step. It needs no Queue, so a service that
// only produces need not open one; a replica that runs one drains the
// record after the commit, woken by the trigger's notification. It refuses
// what Enqueue refuses, and a key already queued for another operation.
// The record takes its place in its lane at commit, not at EnqueueTx: two
// transactions queueing into one lane are sent in the order they
// committed. A transaction queueing many records into one lane writes the
// lane's row at most twice at its commit, whatever their number.
// EnqueueManyTx queues a batch of intents in one statement, their IDs in
// its order, with EnqueueTx's checks and key de-duplication (within the
// batch too), in time linear in its size, one lane or many. See Isolation
// levels for REPEATABLE READ and SERIALIZABLE.
//
// A Producer with a Tracer (queue.Tracer) stores the producer's trace
// context with each record its EnqueueTx queues (queue.Record.Trace), so
// that a replica whose queue.Options.Tracer is set links the record's drain
// to the code that enqueued it; EnqueueTx, the package function, is the
// zero Producer's, which stores none. A replica of a build before
// queue.Record.Trace leaves a traced record for a newer one, as it does any
// record of a newer version.
//
// # Connections
//
// A Queue from New holds one of its pool's connections in LISTEN for its
// whole life, so the pool must have room for at least one more: New refuses
// a pool whose MaxConns is below MinListenConns (2), which would leave the
// drainer and the producers waiting for a connection that never comes.
// With Options.NoListen nothing is held, and a pool of one connection
// serves, the drainer then looking for due lanes once a second.
//
// # Contexts
//
// Every statement runs under the context of the call it serves: an
// Enqueue, Get, List, Counts, Discard or Resubmit whose context ends while
// PostgreSQL makes it wait (a lock another transaction holds, a slow
// server) returns that context's error at once, and the statement is
// cancelled; a write given up on so is rolled back, unless its commit had
// already gone out. A statement whose context has no deadline, the
// drainer's own (which the queue gives Run's context without its
// cancellation, so that an attempt's result is stored as Run stops) and a
// caller's without one, is bounded at 30 seconds. Closing the queue cancels
// what is still under way.
//
// # Leases
//
// A worker takes a due lane, one no live lease holds, by writing a lease
// into its row: a fresh token (owner) and an end (lease_until), the
// database's now plus Policy.AttemptTimeout plus Options.LeaseMargin.
// Leasing the head for an attempt renews it, so a lease outlasts every
// attempt made under it; the worker gives the lane back (owner NULL) when
// it sets the head's next time. A replica that dies keeps its lanes until
// their leases run out, then any other takes them over. A replica holds at
// most one lease of a lane at a time: a lane whose lease ran out while one
// of its workers still works on it is left to the other replicas until
// that worker is done.
//
// # Statements
//
// Each statement is its own round trip and transaction. Taking due lanes
// is one statement for as many lanes as the queue has free workers, and
// it reads each lane's head and the record after it. A worker then leases
// the head, sends it, and settles it. Settling a record that was answered
// at once leases the next one, read ahead, in the same statement (a
// statement of CTEs: settle, lease, read the following record ahead), after
// which it is sent without giving the lane back. The lease is made only if
// the record read ahead is still, at the same row version (xmin), the
// lane's next pending record; otherwise the settle lands alone and the
// worker reads the head again. Settling a lane's last record, as read,
// gives the lane back and takes the lane due first for the same worker in
// that statement, so a worker goes from lane to lane without a take of its
// own. A steady drain of one lane costs about 1.2 statements a record (the
// queue gives a lane back after 16 in a row so that others have their
// turn), lanes of one record each about 2: the lease and the settle. After
// a crash either both the settle and the lease are in the tables or
// neither.
//
// # Fencing
//
// The lease token fences the records: every write a worker makes under a
// lane, leasing the head, storing an attempt's result, settling, giving
// the lane back, locks the lane's row and checks the token in the same
// statement; settling one record and leasing the next (see Statements)
// is one such write. A worker whose lease ran out and whose lane was taken over
// therefore changes nothing: its write finds another token and returns
// queue.ErrMovedOn (reported as EventMovedOn), and what it learned is
// dropped; a takeover that comes while such a write runs waits for its
// commit. The same statement checks the record's state too, so a record
// an operator discarded or resubmitted meanwhile is not written back
// either (Discard refuses a record in flight: queue.ErrInFlight).
//
// Fencing guards the table, not the network: a worker that stalled after
// sending its request may have reached the server before the lane was
// taken over, and the new holder sends the head again. It sends it under
// the same idempotency key, so a server that honours keys applies it once.
//
// # Isolation levels
//
// EnqueueTx works in a transaction at any isolation level. At READ
// COMMITTED, the default, nothing another transaction commits meanwhile
// aborts it. At REPEATABLE READ and SERIALIZABLE it is aborted with SQLSTATE
// 40001 when, after its snapshot, another transaction committed a record
// under the same supplied key (EnqueueTx returns the error) or anything
// that wrote the same lane's row: another producer's record of the lane,
// a replica taking, renewing or giving back the lane (COMMIT returns it).
// Retry the whole transaction then, as for any abort at those levels.
//
// # Rolling upgrades
//
// The queue's tables carry a version (the table idem_queue_migrations),
// raised by Migrate one step at a time; a build of this package knows the
// tables up to some version N. New refuses tables of another version, and
// a replica already running, whose build knows only N, stops draining the
// moment a newer build's migration to N+1 commits: the statements that
// take a lane and read a lane's head read the version themselves and
// refuse (ErrTablesNewer), and a settle leases no next record then, since version N+1 may order a lane otherwise
// than N does, and a head chosen by N's rules could then be sent out of
// lane order. An attempt begun before the migration committed ends, and
// its result is stored; the lane is then given back for a newer replica
// to take. Enqueue and EnqueueTx go on working in the older replica: a
// record's place in its lane is given at commit by the database's own
// trigger, which the migration replaced.
//
// To upgrade a fleet: start one replica of the new build, or run its
// Migrate (or MigrationFiles with your tool) before it; from the
// migration's commit on, every replica of the older build takes no lane
// and reports an EventError wrapping ErrTablesNewer each time it looks for
// one, while the new replicas drain; then roll the older replicas. Run one
// version's build at a time against a version's tables: a build two
// versions behind is refused the same way.
//
// Every new version of the tables keeps this rule and these promises:
// its build knows the version in the statements that take a lane and read
// a head (the migration only raises the number those statements compare);
// its migration keeps the order of the records already placed; and the
// previous build's statements that go on during a roll (inserting a
// record, settling, rescheduling and giving back a lane, sweeping) stay
// valid against the new tables: new columns have defaults or may be NULL,
// and nothing the previous build reads or writes is renamed or dropped
// before the version after.
//
// # Limits
//
// A record holds what a bbolt queue's holds: an intent's body up to
// idem.MaxBodyBytes (8 MiB) and its headers up to idem.MaxHeaderBytes, a
// key up to idem.MaxKeyLen, and the stored answer's body up to
// queue.Options.MaxResultBody (64 KiB by default). Options.MaxItems and
// MaxBytes are not enforced: the database holds what it is given, so watch
// the table's size (Counts, or SQL) as for any other. A Queue needs a pool
// of at least MinListenConns connections, MaxConns beyond that bounding how
// many of its Workers and producers reach the database at once; each
// Queue of a fleet listens on one connection. One database holds one queue:
// the tables' names are fixed, and so are the notification channels
// (idem_queue, idem_queue_settled), which PostgreSQL keeps per database, so
// a second queue belongs in another database; one in another schema
// (search_path) of the same database would wake for the first's work and
// hear its settles.
//
// What it does not do: it does not make a server idempotent (a lane's
// order and the fence hold in the queue; the key does the rest on the
// server), it does not order lanes among themselves, and it does not
// deliver Notify's events of other replicas except settles under
// queue.Options.NotifyRemote, best effort (a replica that falls behind by
// more than 1024 of them drops the rest; the tables stay the record).
// Connection poolers in transaction mode cannot LISTEN: set
// Options.NoListen.
package pgqueue
