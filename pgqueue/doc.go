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
package pgqueue
