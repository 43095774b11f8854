package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/idem-go/idem/pgqueue"
)

// errMigrationsPending is returned by migrate --check when the tables are
// older than this idemq.
var errMigrationsPending = errors.New("migrations pending")

func (a *app) migrateCommand() *cobra.Command {
	var check bool
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Bring a PostgreSQL queue's tables to this idemq's version",
		Long: `migrate applies to a PostgreSQL queue (--dsn) the migrations its tables lack,
as the application's pgqueue.Migrate does: in one transaction, under the lock
that makes replicas starting together apply each once. It prints the tables'
version before and after. With --check it changes nothing: it prints the
version and exits 1 when migrations are pending.

Tables newer than this idemq are refused: upgrade idemq. Replicas of an older
build stop draining once a newer version commits (see pgqueue's doc, Rolling
upgrades): migrate as part of a fleet's upgrade, not before.`,
		Example: `  idemq --dsn "$DATABASE_URL" migrate --check
  IDEMQ_DSN="$DATABASE_URL" idemq migrate`,
		Args: noArgs,
		RunE: func(*cobra.Command, []string) error {
			if err := a.checkFlags(); err != nil {
				return err
			}
			if a.dsn == "" {
				return usagef("migrate applies to a PostgreSQL queue (--dsn or IDEMQ_DSN); a queue file needs no migration")
			}
			return a.migrate(check)
		},
	}
	cmd.Flags().BoolVar(&check, "check", false, "only report the tables' version; exit 1 when migrations are pending")
	return cmd
}

func (a *app) migrate(check bool) error {
	cfg, err := pgx.ParseConfig(a.dsn)
	if err != nil {
		return a.dsnError(err)
	}
	boundConnect(cfg)
	conn, err := pgx.ConnectConfig(a.ctx, cfg)
	if err != nil {
		return a.dsnError(err)
	}
	defer conn.Close(a.ctx)
	have, known, err := a.versions(conn)
	if err != nil {
		return a.dsnError(err)
	}
	fmt.Fprintf(a.stdout, "tables:  %s\n", a.queueName())
	fmt.Fprintf(a.stdout, "version: %d (this idemq knows up to %d)\n", have, known)
	switch {
	case have > known:
		return fmt.Errorf("%w: the tables are at version %d, this idemq knows up to %d: upgrade idemq", pgqueue.ErrTablesNewer, have, known)
	case have == known:
		fmt.Fprintln(a.stdout, "up to date")
		return nil
	case check:
		fmt.Fprintf(a.stdout, "%d migrations pending: run idemq migrate\n", known-have)
		return errMigrationsPending
	}
	if err := pgqueue.Migrate(a.ctx, conn); err != nil {
		return a.dsnError(err)
	}
	after, err := a.tablesVersion(conn)
	if err != nil {
		return a.dsnError(err)
	}
	fmt.Fprintf(a.stdout, "migrated: version %d -> %d\n", have, after)
	return nil
}

// knownVersion is the tables' version this idemq's pgqueue knows: its
// number of migrations.
func knownVersion() (int, error) {
	names, err := fs.Glob(pgqueue.MigrationFiles(), "*.sql")
	if err != nil {
		return 0, err
	}
	return len(names), nil
}

// querier runs a query: a *pgx.Conn or a *pgxpool.Pool.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// versions returns the version of the tables in db and the version this
// idemq knows.
func (a *app) versions(db querier) (have, known int, err error) {
	if known, err = knownVersion(); err != nil {
		return 0, 0, err
	}
	have, err = a.tablesVersion(db)
	return have, known, err
}

// tablesVersion reads the version of the queue's tables; 0 when they are
// not there.
func (a *app) tablesVersion(db querier) (int, error) {
	var exists bool
	if err := db.QueryRow(a.ctx, "SELECT to_regclass('idem_queue_migrations') IS NOT NULL").Scan(&exists); err != nil {
		return 0, err
	}
	if !exists {
		return 0, nil
	}
	var v int
	err := db.QueryRow(a.ctx, "SELECT coalesce(max(version), 0) FROM idem_queue_migrations").Scan(&v)
	return v, err
}
