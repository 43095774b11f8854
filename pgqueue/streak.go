package pgqueue

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/idem-go/idem/queue"
)

// nextRow scans a lane's record read ahead: all NULL when there is none.
type nextRow struct {
	id       *int64
	enqueued *time.Time
	data     []byte
	xmin     *string
}

// ahead returns the row as the record after record follows: one of ID 0
// if none followed it.
func (n nextRow) ahead(follows int64) *ahead {
	if n.id == nil || n.enqueued == nil || n.xmin == nil {
		return &ahead{follows: follows}
	}
	return &ahead{follows: follows, id: *n.id, enqueued: *n.enqueued, data: n.data, xmin: *n.xmin}
}

// settleLeaseNextSQL settles record $1 and leases the record after it in
// its lane, $11, in one statement and so one transaction. Both writes lock
// the lane's row and check the token, as every write does (see write); the
// lease also renews the lane's lease, as a lease for an attempt does. The
// next record is leased only if it is still, at its version $12 (xmin),
// what was read ahead and leased in memory, pending, the first unsettled
// record of the lane after $1, and the tables are not newer than this
// build knows ($13: see TakeDue). The statement returns whether each write
// was made and the record after the leased one, read ahead in turn.
const settleLeaseNextSQL = `WITH l AS (
		UPDATE idem_queue_lanes SET lease_until = now() + $9 * interval '1 microsecond'
		WHERE name = $5 AND owner = $6 RETURNING name
	), s AS (
		UPDATE idem_queue_records r SET state = $2, record = $3, settled_at = $4
		FROM l WHERE r.id = $1 AND r.state = $7
		RETURNING r.id, CASE WHEN $8::text IS NOT NULL THEN pg_notify('idem_queue_settled', $8) END AS note
	), n AS (
		UPDATE idem_queue_records r SET state = 2, record = $10
		FROM s WHERE r.id = $11 AND r.state = 1 AND r.xmin = $12::text::xid
			AND (SELECT coalesce(max(version), 0) FROM idem_queue_migrations) <= $13
			AND NOT EXISTS (SELECT 1 FROM idem_queue_records o
				WHERE o.lane = $5 AND o.state <= 2 AND o.id <> $1 AND o.id <> $11
					AND coalesce(o.pos, o.id) < coalesce(r.pos, r.id))
		RETURNING r.id
	), f AS (
		SELECT id, enqueued_at, record, xmin::text AS x FROM idem_queue_records
		WHERE lane = $5 AND state <= 2 AND id <> $1 AND id <> $11 AND EXISTS (SELECT 1 FROM n)
		ORDER BY coalesce(pos, id) LIMIT 1
	)
	SELECT (SELECT count(*) FROM s), (SELECT count(*) FROM n), f.id, f.enqueued_at, f.record, f.x
	FROM (SELECT 1) one LEFT JOIN f ON true`

// SettleLeaseNext stores r, settled, over its stored self, which must be in
// flight, and leases the next record of r's lane, if lease accepts it, in
// the same statement: a lane in a steady drain costs one statement, one
// round trip and one transaction a record. It is the optional fast path
// the queue's drainer looks for (see queue.Queue's settleDone): lease is
// given the next record, pending, marks it leased and says whether to
// lease it. After a crash either both writes are in the tables or
// neither. Both are fenced as every write is (see write): a lane taken
// over gives queue.ErrMovedOn and writes nothing.
//
// The next record is the one read ahead with the lane's head (Head) or
// with the last lease: the statement leases it only if its row has not
// changed since. Otherwise, or with none read, only r is settled, and the
// drainer takes the usual path (Head) to the lane's next record.
func (st *store) SettleLeaseNext(ctx context.Context, r *queue.Record, lease func(next *queue.Record) bool) (*queue.Record, error) {
	lane := r.Intent.Lane()
	t, ok := st.owner(lane)
	if !ok {
		return nil, fmt.Errorf("%w: record %d: lane %q is not held", queue.ErrMovedOn, r.ID, lane)
	}
	a := t.ahead
	st.keepAhead(lane, t.token, nil) // used once, whatever comes of it
	switch {
	case a == nil || a.follows != int64(r.ID):
		return nil, st.write(ctx, queue.InFlight, r, false)
	case a.id == 0: // the lane's last record as read: the lane goes back with the settle
		return nil, st.settleRelease(ctx, r, t)
	}
	n, err := decode(a.id, a.enqueued, a.data)
	if err != nil || n.State != queue.Pending || !lease(n) {
		return nil, st.write(ctx, queue.InFlight, r, false) // a damaged record is Head's to quarantine
	}
	data, err := r.MarshalBinary()
	if err != nil {
		return nil, err
	}
	ndata, err := n.MarshalBinary()
	if err != nil {
		return nil, err
	}
	var announce *string
	if st.opts.NotifyRemote {
		p := st.self + " " + strconv.FormatInt(int64(r.ID), 10)
		announce = &p
	}
	var (
		settled, leased int64
		next            nextRow
	)
	err = retry(ctx, func() error {
		octx, cancel := st.op(ctx)
		defer cancel()
		return st.pool.QueryRow(octx, settleLeaseNextSQL,
			int64(r.ID), int16(r.State), data, r.SettledAt, lane, t.token, int16(queue.InFlight), announce,
			st.lease.Microseconds(), ndata, a.id, a.xmin, st.known,
		).Scan(&settled, &leased, &next.id, &next.enqueued, &next.data, &next.xmin)
	})
	if err != nil {
		return nil, st.wrap(ctx, err)
	}
	if settled == 0 {
		return nil, fmt.Errorf("%w: record %d", queue.ErrMovedOn, r.ID)
	}
	if leased == 0 {
		return nil, nil
	}
	st.keepAhead(lane, t.token, next.ahead(a.id))
	return n, nil
}

// gaveBack marks a lane this store's worker holds under token as given back
// to the tables already (see settleRelease).
func (st *store) gaveBack(lane string, token uuid.UUID) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if t, ok := st.owned[lane]; ok && t.token == token {
		t.gone = true
		st.owned[lane] = t
	}
}

// keepAhead sets the record read ahead in a lane this store's worker still
// holds under token.
func (st *store) keepAhead(lane string, token uuid.UUID, a *ahead) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if t, ok := st.owned[lane]; ok && t.token == token {
		t.ahead = a
		st.owned[lane] = t
	}
}

// settleReleaseSQL settles record $1 as write does and, in the same
// statement, gives its lane back as SetNext does, due now, or parked at
// 'infinity' when the settle was made and no record came to the lane since
// its tail was $9 (see SetNext); then, the settle made, it takes the lane
// due first for the same worker, as TakeDue does (takeCTEs), and reads its
// head. One row: whether the settle was made, and the lane taken, if any.
var settleReleaseSQL = `WITH l AS (
		SELECT name FROM idem_queue_lanes WHERE name = $5 AND owner = $6 FOR UPDATE
	), s AS (
		UPDATE idem_queue_records r SET state = $2, record = $3, settled_at = $4
		FROM l WHERE r.id = $1 AND r.state = $7
		RETURNING r.id, CASE WHEN $8::text IS NOT NULL THEN pg_notify('idem_queue_settled', $8) END AS note
	), g AS (
		UPDATE idem_queue_lanes x SET owner = NULL, lease_until = NULL,
			next_at = CASE WHEN x.tail = $9 AND EXISTS (SELECT 1 FROM s) THEN 'infinity'::timestamptz ELSE now() END
		FROM l WHERE x.name = l.name
	), ` + takeCTEs(10, 11, 12, 13, "1", "EXISTS (SELECT 1 FROM s)") + `
	SELECT (SELECT count(*) FROM s), ` + takenColumns + `
	FROM (SELECT 1) one LEFT JOIN t ON true ` + takenJoins

// settleRelease stores r, settled, over its stored self, which must be in
// flight, and gives its lane back in the same statement: the lane's last
// record, as read, costs one round trip for its settle and the lane's
// return instead of two. The same statement takes the lane due first for
// the worker, which the queue finds by HandedOver, instead of a TakeDue of
// its own. Fenced as every write is (see write). Whatever comes of it, the
// lane given back stays out of this store's TakeDue until the queue's
// SetNext, which then only forgets it: the worker is done with the lane
// only then.
func (st *store) settleRelease(ctx context.Context, r *queue.Record, t taken) error {
	lane := r.Intent.Lane()
	data, err := r.MarshalBinary()
	if err != nil {
		return err
	}
	var announce *string
	if st.opts.NotifyRemote {
		p := st.self + " " + strconv.FormatInt(int64(r.ID), 10)
		announce = &p
	}
	defer st.gaveBack(lane, t.token)
	var (
		settled int64
		next    takenRow
		token   = uuid.New()
		busy    = st.busy()
	)
	err = retry(ctx, func() error {
		octx, cancel := st.op(ctx)
		defer cancel()
		next = takenRow{}
		return st.pool.QueryRow(octx, settleReleaseSQL,
			int64(r.ID), int16(r.State), data, r.SettledAt, lane, t.token, int16(queue.InFlight), announce, t.tail,
			token, st.lease.Microseconds(), busy, st.known,
		).Scan(append([]any{&settled}, next.dest()...)...)
	})
	if err != nil {
		return st.wrap(ctx, err)
	}
	if next.taken() {
		taken := st.own(token, []takenRow{next})[0]
		st.mu.Lock()
		st.handoff[lane] = taken
		st.mu.Unlock()
	}
	if settled == 0 {
		return fmt.Errorf("%w: record %d", queue.ErrMovedOn, r.ID)
	}
	return nil
}

// HandedOver returns the lane taken for the worker that held lane with the
// settle that gave lane back (see settleRelease), and forgets it: the
// worker goes on with that lane as with one TakeDue gave it. The queue asks
// once the worker is done with lane (SetNext).
func (st *store) HandedOver(lane string) (string, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	next, ok := st.handoff[lane]
	delete(st.handoff, lane)
	return next, ok
}
