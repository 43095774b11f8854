// Package pgqueue keeps an idem queue in PostgreSQL, shared by service replicas.
package pgqueue
