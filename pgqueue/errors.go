package pgqueue

import "errors"

// ErrTablesNewer is returned when the queue's tables are of a newer version
// than this build knows: by Migrate and New, and, during a rolling upgrade,
// by a running replica's every look for a lane to drain once a newer
// replica has migrated the tables (reported as queue.EventError). Such a
// replica takes no lane: roll it to the newer build.
var ErrTablesNewer = errors.New("pgqueue: the queue's tables are newer than this build")
