package pgqueue

import (
	"errors"
	"fmt"
	"reflect"

	"github.com/jackc/pgx/v5/pgconn"
)

// ErrTablesNewer is returned when the queue's tables are of a newer version
// than this build knows: by Migrate and New, and, during a rolling upgrade,
// by a running replica's every look for a lane to drain once a newer
// replica has migrated the tables (reported as queue.EventError). Such a
// replica takes no lane: roll it to the newer build.
var ErrTablesNewer = errors.New("pgqueue: the queue's tables are newer than this build")

// ErrTablesMissing is returned when the queue's tables are not in the
// database: by New, EnqueueTx and EnqueueManyTx before Migrate (or idemq
// migrate) has created them. The enqueue's statement failed, which aborts
// the caller's transaction: roll it back.
var ErrTablesMissing = errors.New("pgqueue: the queue's tables are missing: call Migrate first (or run idemq migrate)")

// tablesMissing returns err, wrapped with ErrTablesMissing when it is
// PostgreSQL's undefined_table.
func tablesMissing(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42P01" {
		return fmt.Errorf("%w: %w", ErrTablesMissing, err)
	}
	return err
}

// isNil reports whether v is nil or holds a nil pointer, such as a nil
// *pgxpool.Tx, whose methods would panic.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}
