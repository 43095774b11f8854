package pgqueue

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-go/idem/queue"
)

// The tests of a rolling upgrade play builds older or newer than this one.

// LatestVersion is the newest version of the tables this build knows.
func LatestVersion() int { return len(must(migrationSteps())) }

// MigrateTo is Migrate as a build that knows the tables up to version.
func MigrateTo(ctx context.Context, db Beginner, version int) error {
	return migrate(ctx, db, must(migrationSteps())[:version])
}

// MigrateNext is Migrate as the next build, whose newest version of the
// tables is one past this build's, made by sql.
func MigrateNext(ctx context.Context, db Beginner, sql string) error {
	steps := must(migrationSteps())
	next := step{version: len(steps) + 1, name: "next.sql", sql: sql}
	return migrate(ctx, db, append(steps, next))
}

// NewKnowing is New for a build that knows the tables up to version known.
func NewKnowing(ctx context.Context, pool *pgxpool.Pool, opts Options, known int) (*queue.Queue, error) {
	return newKnowing(ctx, pool, opts, known)
}
