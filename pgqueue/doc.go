// Package pgqueue keeps an idem queue in PostgreSQL, shared by service replicas.
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
// A worker takes a lane by writing a fresh lease token into its row, and
// every write it makes under the lane checks that token, so a worker whose
// lease ran out and whose lane was taken over changes nothing
// (queue.ErrMovedOn). A replica holds at most one lease of a lane at a
// time: a lane whose lease ran out while one of its workers still works on
// it is left to the other replicas until that worker is done.
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
// refuse (ErrTablesNewer), since version N+1 may order a lane otherwise
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
package pgqueue
