package pgqueue

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

//go:embed migrations/*.sql
var migrations embed.FS

// MigrationFiles returns the SQL that Migrate runs, one file per version
// (0001_queue.sql, ...), for teams that apply schema changes with their own
// migration tool. Run them in name order, each once; Migrate records each
// version it applies in the table idem_queue_migrations.
func MigrationFiles() fs.FS {
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		panic(err) // the embedded directory is part of the build
	}
	return sub
}

// Beginner starts transactions: a *pgxpool.Pool or a *pgx.Conn.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// migrateLock is the key of the advisory lock Migrate holds, so that
// replicas starting together apply each version once.
const migrateLock = 0x6964656d71 // "idemq"

// Migrate brings the queue's tables in db's database to the version this
// package needs, in one transaction under an advisory lock: replicas that
// start together apply each version once, and a failure applies none. A
// database migrated by a newer version of this package gives an error
// rather than being used by code that does not know its tables.
func Migrate(ctx context.Context, db Beginner) error {
	if isNil(db) {
		return errors.New("pgqueue: Migrate: nil database: pass a *pgxpool.Pool or a *pgx.Conn")
	}
	steps, err := migrationSteps()
	if err != nil {
		return err
	}
	return migrate(ctx, db, steps)
}

// migrate applies the steps the database lacks; tests give it more steps
// than are embedded, to play a newer build, or fewer, an older one.
func migrate(ctx context.Context, db Beginner, steps []step) error {
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("pgqueue: migrate: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit it does nothing
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(migrateLock)); err != nil {
		return fmt.Errorf("pgqueue: migrate: lock: %w", err)
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS idem_queue_migrations (
		version    integer PRIMARY KEY,
		applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return fmt.Errorf("pgqueue: migrate: %w", err)
	}
	var have int
	if err := tx.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM idem_queue_migrations").Scan(&have); err != nil {
		return fmt.Errorf("pgqueue: migrate: %w", err)
	}
	if want := steps[len(steps)-1].version; have > want {
		return fmt.Errorf("pgqueue: migrate: %w: the database is at version %d, this package knows up to %d: upgrade the package", ErrTablesNewer, have, want)
	}
	for _, s := range steps {
		if s.version <= have {
			continue
		}
		if _, err := tx.Exec(ctx, s.sql); err != nil {
			return fmt.Errorf("pgqueue: migrate: %s: %w", s.name, err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO idem_queue_migrations (version) VALUES ($1)", s.version); err != nil {
			return fmt.Errorf("pgqueue: migrate: %s: %w", s.name, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("pgqueue: migrate: %w", err)
	}
	return nil
}

// step is one migration file.
type step struct {
	version int
	name    string
	sql     string
}

// migrationSteps reads the embedded migrations in version order.
func migrationSteps() ([]step, error) {
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	var steps []step
	for _, n := range names { // Glob sorts by name: 0001_ before 0002_
		base := path.Base(n)
		v, err := strconv.Atoi(strings.SplitN(base, "_", 2)[0])
		if err != nil || v != len(steps)+1 {
			return nil, fmt.Errorf("pgqueue: migration %s: want version %d first in its name", base, len(steps)+1)
		}
		b, err := migrations.ReadFile(n)
		if err != nil {
			return nil, err
		}
		steps = append(steps, step{version: v, name: base, sql: string(b)})
	}
	if len(steps) == 0 {
		return nil, fmt.Errorf("pgqueue: no migrations embedded")
	}
	return steps, nil
}
