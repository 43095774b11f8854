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
package pgqueue
