-- idem queue, version 3: the records a transaction queues in a lane are
-- placed with at most two writes of the lane's row, whatever their number.
-- Version 2 placed them one by one, a write of the lane's row a record:
-- each write in one transaction makes a new version of the row, which the
-- next write steps over, so a transaction of N records in one lane
-- committed in time quadratic in N (16,000: seconds, holding the lane's
-- lock) and left as many dead versions of the row behind.
--
-- The trigger stays a deferred row trigger (PostgreSQL has no deferred
-- statement triggers), and fires in the order the records were inserted.
-- The transaction's first record in a lane is placed alone, as before, and
-- marks the lane's row with the transaction (placed_by): a transaction of
-- one record, the common case, costs what it did. The second finds the
-- mark, finds the transaction's records in the lane not placed yet (by
-- their txn column) and places them all, writing the row once more with
-- the last ID placed (placed_upto); the others find that and return. A
-- record queued after the transaction placed its lane early (SET
-- CONSTRAINTS ... IMMEDIATE) has a higher ID and is placed by its own
-- firing.
--
-- The places are version 2's: at commit, under the lane row's lock, the
-- k-th of the records placed together, in ID order, takes the greater of
-- its ID and the old tail plus k, written to pos only when not its ID; the
-- tail becomes the last of these. placed_after keeps the old tail, for the
-- statement that writes the row to return (RETURNING gives new values).

ALTER TABLE idem_queue_records ADD COLUMN txn xid8;
-- Set apart from ADD COLUMN, so existing rows keep NULL rather than being
-- rewritten; pg_current_xact_id() is the top transaction's also in a
-- savepoint.
ALTER TABLE idem_queue_records ALTER COLUMN txn SET DEFAULT pg_current_xact_id();

ALTER TABLE idem_queue_lanes
	ADD COLUMN placed_by    xid8,   -- the transaction that last placed records in the lane
	ADD COLUMN placed_upto  bigint, -- the highest ID it placed
	ADD COLUMN placed_after bigint; -- the tail before it placed them

CREATE OR REPLACE FUNCTION idem_queue_place() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
	me   xid8 := pg_current_xact_id();
	-- The ranges below are closed so that the plan PL/pgSQL keeps for any
	-- ID reads an index, not the table.
	top  constant bigint := 9223372036854775807;
	base bigint; -- the lane's tail before the records placed
	upto bigint;
	n    bigint;
	hi   bigint;
BEGIN
	-- The transaction's first record in the lane is placed alone, as in
	-- version 2: a transaction of one record writes nothing more.
	INSERT INTO idem_queue_lanes AS l (name, tail, next_at, placed_by, placed_upto, placed_after)
	VALUES (NEW.lane, NEW.id, now(), me, NEW.id, 0)
	ON CONFLICT (name) DO UPDATE
		SET tail = greatest(l.tail + 1, NEW.id),
		    next_at = CASE WHEN l.next_at = 'infinity' THEN now() ELSE l.next_at END,
		    placed_by = me, placed_upto = NEW.id, placed_after = l.tail
		WHERE l.placed_by IS DISTINCT FROM me
	RETURNING placed_after INTO base;
	IF FOUND THEN
		IF base >= NEW.id THEN -- committing behind a higher ID of the lane
			UPDATE idem_queue_records SET pos = base + 1 WHERE id = NEW.id;
		END IF;
		PERFORM pg_notify('idem_queue', '');
		RETURN NULL;
	END IF;
	-- A later one: placed with the rest of the transaction's records in the
	-- lane by the second firing, which finds them (pending, with no pos,
	-- from its ID on) and writes the row once for all.
	SELECT placed_upto INTO upto FROM idem_queue_lanes WHERE name = NEW.lane;
	IF upto >= NEW.id THEN
		RETURN NULL;
	END IF;
	SELECT count(*), max(id) INTO n, hi FROM idem_queue_records
	WHERE lane = NEW.lane AND state <= 2 AND coalesce(pos, id) BETWEEN NEW.id AND top
		AND id BETWEEN NEW.id AND top AND txn = me;
	IF n = 0 THEN
		RETURN NULL;
	END IF;
	UPDATE idem_queue_lanes l SET tail = greatest(l.tail + n, hi), placed_upto = hi, placed_after = l.tail
	WHERE name = NEW.lane
	RETURNING placed_after INTO base;
	IF base >= NEW.id THEN
		UPDATE idem_queue_records r SET pos = base + m.k
		FROM (SELECT id, row_number() OVER (ORDER BY id) AS k FROM idem_queue_records
			WHERE lane = NEW.lane AND state <= 2 AND coalesce(pos, id) BETWEEN NEW.id AND top
				AND id BETWEEN NEW.id AND top AND txn = me) m
		WHERE r.id = m.id AND base + m.k > m.id;
	END IF;
	RETURN NULL;
END
$$;
