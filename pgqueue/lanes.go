package pgqueue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/idem-go/idem/queue"
)

// TakeDue takes up to n lanes that fell due, the first due first, held by
// no live lease, skipping lanes whose rows others have locked and lanes a
// worker of this store holds until SetNext gives them back, and writes a
// fresh lease token into them. The same statement reads each lane's head
// and the record after it, which Head then returns without a round trip
// of its own. With no lane to take it says how long until the next one is
// due. Every call also measures the database's clock (see Clock).
//
// A lane whose lease ran out while a worker of this store still works on it
// is left to the other replicas: the store keeps one token per lane, and a
// second lease taken here would replace the stalled worker's token with
// its own, so that the stalled worker's late writes would pass the fence.
// One lease per lane and store makes the lane's token the lease's.
//
// It takes none once the tables are newer than this build knows
// (ErrTablesNewer): the version is read in the statement that takes, so
// from the commit of a newer replica's migration on, which may change how
// lanes are ordered, this replica drains nothing more.
func (st *store) TakeDue(ctx context.Context, _ time.Time, n int) ([]string, time.Duration, error) {
	token := uuid.New()
	busy := st.busy()
	var (
		next    *time.Time
		db      time.Time
		version int
		rows    []takenRow
		sent    = time.Now()
		leaseUS = st.lease.Microseconds()
	)
	sql, args := takeDueSQL(max(n, 1)), []any{token, leaseUS, busy, st.known}
	if n > len(takeDueSQLs) {
		args = append(args, n)
	}
	err := retry(ctx, func() error {
		octx, cancel := st.op(ctx)
		defer cancel()
		rows = rows[:0]
		rs, err := st.pool.Query(octx, sql, args...)
		if err != nil {
			return err
		}
		for rs.Next() {
			var t takenRow
			if err := rs.Scan(append([]any{&next, &db, &version}, t.dest()...)...); err != nil {
				rs.Close()
				return err
			}
			if t.taken() {
				rows = append(rows, t)
			}
		}
		return rs.Err()
	})
	if err != nil {
		return nil, 0, st.wrap(ctx, err)
	}
	st.measure(sent, time.Now(), db)
	if version > st.known {
		return nil, 0, st.tooNew(version)
	}
	if len(rows) == 0 {
		var wait time.Duration
		if next != nil {
			wait = max(next.Sub(db), time.Millisecond)
		}
		return nil, wait, nil
	}
	return st.own(token, rows), 0, nil
}

// takeDueSQL returns the statement that takes up to n due lanes (see
// takeDueSQLs): beyond queue.DefaultWorkers, the limit is $5, a parameter.
func takeDueSQL(n int) string {
	if n > len(takeDueSQLs) {
		return takeDueSQLFmt("$5")
	}
	return takeDueSQLs[n-1]
}

// takeDueSQLs are the statements that take up to 1, 2, ... due lanes, the
// limit written into each: with LIMIT a parameter, PostgreSQL's estimate
// for its generic plan stays above its plans for the values given, so it
// plans the statement anew on every call, which took it longer than the
// statement ran. With the limit written, it keeps the generic plan after
// five calls. A queue asks for at most as many lanes as it has workers
// free: up to queue.DefaultWorkers with the default options.
var takeDueSQLs = func() []string {
	sqls := make([]string, queue.DefaultWorkers)
	for i := range sqls {
		sqls[i] = takeDueSQLFmt(strconv.Itoa(i + 1))
	}
	return sqls
}()

// takeDueSQLFmt takes up to limit due lanes for token $1 (see TakeDue) and
// reads, from the statement's snapshot, each one's tail, head and the
// record after the head: one row a lane taken, in due order, or one row of
// NULL lane columns for none. Every row also gives the next time a lane
// falls due, the database's clock and the tables' version.
func takeDueSQLFmt(limit string) string {
	return `WITH ` + takeCTEs(1, 2, 3, 4, limit, "true") + `, s AS (
		SELECT (SELECT next_at FROM idem_queue_lanes
				WHERE NOT held AND owner IS NULL AND next_at > now() AND next_at < 'infinity'
				ORDER BY next_at LIMIT 1) AS next,
			clock_timestamp() AS db, (SELECT version FROM v) AS version
	)
	SELECT s.next, s.db, s.version, ` + takenColumns + `
	FROM s LEFT JOIN t ON true ` + takenJoins + `
	ORDER BY t.next_at`
}

// takeCTEs are the common table expressions v, the tables' version, c,
// the due lanes, and t, those taken: up to limit (a number written out or
// a parameter) due lanes held by no live lease and not among $busy are
// taken for $token for $leaseUS microseconds, if the tables are not newer
// than $known and cond, an SQL condition, holds.
func takeCTEs(token, leaseUS, busy, known int, limit, cond string) string {
	return fmt.Sprintf(`v AS (
		SELECT coalesce(max(version), 0) AS version FROM idem_queue_migrations
	), c AS (
		SELECT name FROM idem_queue_lanes
		WHERE NOT held AND next_at <= now() AND (owner IS NULL OR lease_until < now()) AND name <> ALL($%d)
			AND (SELECT version FROM v) <= $%d AND %s
		ORDER BY next_at LIMIT %s FOR UPDATE SKIP LOCKED
	), t AS (
		UPDATE idem_queue_lanes l SET owner = $%d, lease_until = now() + $%d * interval '1 microsecond'
		FROM c WHERE l.name = c.name RETURNING l.name, l.next_at
	)`, busy, known, cond, limit, token, leaseUS)
}

// takenColumns are, for a lane taken (t), its name, then its tail, head (r)
// and the record after the head (n) as the statement's snapshot has them
// (takenJoins), scanned by takenRow.dest.
const takenColumns = `t.name, (SELECT tail FROM idem_queue_lanes x WHERE x.name = t.name),
		r.id, r.enqueued_at, r.record, n.id, n.enqueued_at, n.record, n.xmin::text`

// headSQL reads lane $1's tail, head and the record after the head, and
// the tables' version, if the lane is still held under token $2.
var headSQL = `SELECT l.tail, r.id, r.enqueued_at, r.record,
		(SELECT coalesce(max(version), 0) FROM idem_queue_migrations),
		n.id, n.enqueued_at, n.record, n.xmin::text FROM idem_queue_lanes l
	` + headJoins("l") + `
	WHERE l.name = $1 AND l.owner = $2`

// takenJoins read the head of each lane taken, and the record after it.
var takenJoins = headJoins("t")

// headJoins read r, the head of the lane named by the column name of the
// row alias, and n, the record after it.
func headJoins(alias string) string {
	return `LEFT JOIN LATERAL (
		SELECT id, enqueued_at, record FROM idem_queue_records
		WHERE lane = ` + alias + `.name AND state <= 2 ORDER BY coalesce(pos, id) LIMIT 1
	) r ON true
	LEFT JOIN LATERAL (
		SELECT id, enqueued_at, record, xmin FROM idem_queue_records
		WHERE lane = ` + alias + `.name AND state <= 2 AND id <> r.id ORDER BY coalesce(pos, id) LIMIT 1
	) n ON true`
}

// dest returns where to scan takenColumns.
func (t *takenRow) dest() []any {
	return []any{&t.name, &t.tail, &t.head.id, &t.head.enqueued, &t.head.data,
		&t.head.next.id, &t.head.next.enqueued, &t.head.next.data, &t.head.next.xmin}
}

// taken reports whether the row holds a lane taken, and completes it.
func (t *takenRow) taken() bool {
	if t.name == nil || t.tail == nil {
		return false
	}
	t.head.tail = *t.tail
	return true
}

// own records the lanes of rows as taken by this store's workers under
// token, each with its head as read, and returns their names.
func (st *store) own(token uuid.UUID, rows []takenRow) []string {
	lanes := make([]string, len(rows))
	st.mu.Lock()
	defer st.mu.Unlock()
	for i, t := range rows {
		lanes[i] = *t.name
		st.owned[*t.name] = taken{token: token, read: &t.head}
	}
	return lanes
}

// takenRow is a row of takeDueSQL: a lane taken and its head as read.
type takenRow struct {
	name *string
	tail *int64
	head headRow
}

// headRow is a lane's tail, head and the record after the head, read from
// one snapshot: all but tail NULL for an empty lane.
type headRow struct {
	tail     int64
	id       *int64
	enqueued *time.Time
	data     []byte
	next     nextRow
}

// busy returns the lanes the workers of this store hold.
func (st *store) busy() []string {
	st.mu.Lock()
	defer st.mu.Unlock()
	lanes := make([]string, 0, len(st.owned))
	for l := range st.owned {
		lanes = append(lanes, l)
	}
	return lanes
}

// tooNew is the error of a statement that found the tables at version, newer
// than this build knows.
func (st *store) tooNew(version int) error {
	return fmt.Errorf("%w: they are at version %d, this replica knows up to %d: it drains no lane; roll it to the newer build",
		ErrTablesNewer, version, st.known)
}

// owner returns this replica's token for a lane it took.
func (st *store) owner(lane string) (taken, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	t, ok := st.owned[lane]
	return t, ok
}

// Head returns the first unsettled record of a lane this replica holds, in
// commit order, and remembers the lane's last position so that SetNext can
// tell whether a record came meanwhile. A head whose stored bytes do not
// decode is quarantined (queue.Quarantined) and returned with the others
// quarantined on the way, unless it is of a newer version than this build
// reads: that one is left for a newer replica, and Head gives the error.
func (st *store) Head(ctx context.Context, lane string) (*queue.Record, []*queue.Record, error) {
	var quarantined []*queue.Record
	for {
		r, data, err := st.head(ctx, lane)
		switch {
		case data == nil:
			return r, quarantined, err
		case errors.Is(err, queue.ErrNewerVersion):
			return nil, quarantined, fmt.Errorf("record %d: %w", r.ID, err)
		}
		q, err := st.quarantine(ctx, lane, r, data, err)
		if err != nil {
			return nil, quarantined, err
		}
		quarantined = append(quarantined, q)
	}
}

// quarantine stores, in place of the record head found at the head of a
// lane this replica holds, what queue.Quarantined makes of its bytes data,
// which failed to decode with cause; fenced like every write (see write).
func (st *store) quarantine(ctx context.Context, lane string, head *queue.Record, data []byte, cause error) (*queue.Record, error) {
	t, ok := st.owner(lane)
	if !ok {
		return nil, fmt.Errorf("%w: record %d: lane %q is not held", queue.ErrMovedOn, head.ID, lane)
	}
	q := queue.Quarantined(head.ID, data, cause, st.now())
	q.EnqueuedAt = head.EnqueuedAt
	b, err := q.MarshalBinary()
	if err != nil {
		return nil, err
	}
	n, err := st.exec(ctx, `WITH l AS (SELECT name FROM idem_queue_lanes WHERE name = $4 AND owner = $5 FOR UPDATE)
		UPDATE idem_queue_records r SET state = $2, record = $3, settled_at = $6
		FROM l WHERE r.id = $1 AND r.state <= 2`, int64(q.ID), int16(q.State), b, lane, t.token, q.SettledAt)
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, fmt.Errorf("%w: record %d", queue.ErrMovedOn, q.ID)
	}
	return q, nil
}

// head reads the first unsettled record of a lane this replica holds: as
// TakeDue read it, the first time after the take, else from the tables. For
// a record that does not decode it returns the record's ID alone in r, its
// stored bytes in data, and the decoding error, wrapping queue.ErrDamaged.
// Tables newer than this build knows give ErrTablesNewer: the head it
// would find by its own rules may not be the lane's (see TakeDue).
func (st *store) head(ctx context.Context, lane string) (r *queue.Record, data []byte, err error) {
	t, ok := st.owner(lane)
	if !ok {
		return nil, nil, nil
	}
	h := t.read
	t.read = nil // read once: the lane may have moved on since
	if h == nil {
		h = new(headRow)
		var version int
		octx, cancel := st.op(ctx)
		defer cancel()
		// The record after the head comes too, for SettleLeaseNext to lease
		// with the head's settle.
		err = st.pool.QueryRow(octx, headSQL, lane, t.token).Scan(&h.tail, &h.id, &h.enqueued, &h.data, &version,
			&h.next.id, &h.next.enqueued, &h.next.data, &h.next.xmin)
		if errors.Is(err, pgx.ErrNoRows) { // taken over: not this replica's lane now
			return nil, nil, nil
		}
		if err != nil {
			return nil, nil, st.wrap(ctx, err)
		}
		if version > st.known {
			return nil, nil, st.tooNew(version)
		}
	}
	t.tail, t.empty, t.ahead = h.tail, h.id == nil, nil
	if h.id != nil {
		t.ahead = h.next.ahead(*h.id)
	}
	st.mu.Lock()
	st.owned[lane] = t
	st.mu.Unlock()
	if h.id == nil {
		return nil, nil, nil
	}
	r = new(queue.Record)
	if err := r.UnmarshalBinary(h.data); err != nil {
		return &queue.Record{ID: queue.ID(*h.id), EnqueuedAt: *h.enqueued}, h.data, err
	}
	r.ID, r.EnqueuedAt = queue.ID(*h.id), *h.enqueued
	return r, nil, nil
}

// Put stores r over its stored self in state old, if the lane is still
// this replica's. A lease (r in flight, from pending) also renews the
// lane's lease for the attempt.
func (st *store) Put(ctx context.Context, old queue.State, r *queue.Record) error {
	return st.write(ctx, old, r, old == queue.Pending && r.State == queue.InFlight)
}

// write is Put, renew for a lease. The lane row is locked and its token
// checked in the statement that writes the record: a takeover, which writes
// the row, either comes before (the token differs: nothing is written) or
// waits until this write commits.
func (st *store) write(ctx context.Context, old queue.State, r *queue.Record, renew bool) error {
	lane := r.Intent.Lane()
	t, ok := st.owner(lane)
	if !ok {
		return fmt.Errorf("%w: record %d: lane %q is not held", queue.ErrMovedOn, r.ID, lane)
	}
	data, err := r.MarshalBinary()
	if err != nil {
		return err
	}
	var (
		settled  *time.Time
		announce *string // the settle notification's payload (see listen)
	)
	if r.State.Settled() {
		settled = &r.SettledAt
		if st.opts.NotifyRemote { // replicas announce settles when they ask for others'
			p := st.self + " " + strconv.FormatInt(int64(r.ID), 10)
			announce = &p
		}
	}
	args := []any{int64(r.ID), int16(r.State), data, settled, lane, t.token, int16(old), announce}
	lock := `SELECT name FROM idem_queue_lanes WHERE name = $5 AND owner = $6 FOR UPDATE`
	if renew {
		lock = `UPDATE idem_queue_lanes SET lease_until = now() + $9 * interval '1 microsecond'
			WHERE name = $5 AND owner = $6 RETURNING name`
		args = append(args, st.lease.Microseconds())
	}
	// A settle is announced to the other replicas by the row it writes, so
	// only if it was written, and at commit.
	n, err := st.exec(ctx, `WITH l AS (`+lock+`)
		UPDATE idem_queue_records r SET state = $2, record = $3, settled_at = $4
		FROM l WHERE r.id = $1 AND r.state = $7
		RETURNING CASE WHEN $8::text IS NOT NULL THEN pg_notify('idem_queue_settled', $8) END`, args...)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("%w: record %d", queue.ErrMovedOn, r.ID)
	}
	return nil
}

// SetNext gives the lane back to the other replicas, due at next; an empty
// lane whose last position has not moved since Head looked is parked at
// 'infinity' until a producer's commit makes it due again (see the trigger
// idem_queue_place). The position is checked in the row being written, so a
// producer's commit racing this write is never missed. Whatever the write
// gives, this store's workers may take the lane again (see TakeDue): it
// forgets its token, and a lane whose write failed is the other replicas'
// once the lease runs out.
func (st *store) SetNext(ctx context.Context, lane string, next time.Time) error {
	t, ok := st.owner(lane)
	if !ok {
		return nil
	}
	defer st.release(lane)
	if t.gone {
		return nil
	}
	_, err := st.exec(ctx, `UPDATE idem_queue_lanes
		SET next_at = CASE WHEN $3 AND tail = $4 THEN 'infinity'::timestamptz ELSE $5::timestamptz END, owner = NULL, lease_until = NULL
		WHERE name = $1 AND owner = $2`, lane, t.token, t.empty, t.tail, next)
	return err
}

// release forgets this store's token for a lane its worker is done with.
func (st *store) release(lane string) {
	st.mu.Lock()
	delete(st.owned, lane)
	st.mu.Unlock()
}

// Schedule changes every replica's schedule: HoldLane keeps a lane this
// replica holds out of it until WakeLanes, which ends every hold, makes
// every lane with records that no replica holds due now and wakes the
// other replicas; RejudgeLanes makes every lane with records that no
// replica holds due now. The times are the database's.
func (st *store) Schedule(ctx context.Context, op queue.LaneOp, lane string, _ time.Time) error {
	var err error
	switch op {
	case queue.HoldLane:
		t, ok := st.owner(lane)
		if !ok {
			return nil
		}
		_, err = st.exec(ctx, "UPDATE idem_queue_lanes SET held = true WHERE name = $1 AND owner = $2", lane, t.token)
	case queue.WakeLanes:
		_, err = st.exec(ctx, `WITH w AS (
				UPDATE idem_queue_lanes SET held = false, next_at = now()
				WHERE next_at <> 'infinity' AND (held OR (owner IS NULL AND next_at > now()))
			)
			SELECT pg_notify('idem_queue', '')`)
	case queue.RejudgeLanes:
		_, err = st.exec(ctx, `UPDATE idem_queue_lanes SET next_at = now()
			WHERE NOT held AND owner IS NULL AND next_at > now() AND next_at <> 'infinity'`)
	default:
		err = fmt.Errorf("pgqueue: Schedule: unknown operation %v", op)
	}
	return err
}
