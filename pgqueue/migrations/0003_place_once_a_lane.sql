-- idem queue, version 3: a transaction's records are placed in their lane
-- all at once, writing the lane's row once. Version 2 placed them one by
-- one, a write of the lane's row a record: each write in one transaction
-- makes a new version of the row, which the next write steps over, so a
-- transaction of N records in one lane committed in time quadratic in N
-- (16,000: seconds, holding the lane's lock) and left the row's dead
-- versions behind.
--
-- The trigger stays a deferred row trigger (PostgreSQL has no deferred
-- statement triggers); the first to fire for a lane in a transaction places
-- every record the transaction queued in that lane and marks the lane's row
-- with the transaction (placed_by) and the last ID placed (placed_upto); the
-- others find the mark and return. A record queued after the transaction
-- placed its lane early (SET CONSTRAINTS ... IMMEDIATE) has a higher ID than
-- the mark and is placed again by its own firing.
--
-- The places are version 2's: at commit, under the lane row's lock, the
-- k-th of the transaction's records in ID order takes the greater of its ID
-- and the old tail plus k, written to pos only when not its ID; the tail is
-- the last of these. placed_after keeps the old tail, which the statement
-- that writes the row returns (RETURNING gives only new values).

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
	top  bigint := currval('idem_queue_records_id_seq'); -- this session's last ID: none of this transaction's is above
	n    bigint := 1;       -- the records to place
	hi   bigint := NEW.id;  -- the highest of their IDs
	base bigint;            -- the lane's tail before them
BEGIN
	IF top > NEW.id THEN
		-- Records came after this one: place this transaction's of the lane
		-- together, pending with no pos from this one's ID on, unless an
		-- earlier firing did. The ranges are closed so that the plan
		-- PL/pgSQL keeps for any ID reads an index, not the table.
		SELECT count(*), max(id) INTO n, hi FROM idem_queue_records
		WHERE lane = NEW.lane AND state <= 2 AND coalesce(pos, id) BETWEEN NEW.id AND top
			AND id BETWEEN NEW.id AND top AND txn = me
			AND NOT EXISTS (SELECT 1 FROM idem_queue_lanes
				WHERE name = NEW.lane AND placed_by = me AND placed_upto >= NEW.id);
		IF n = 0 THEN
			RETURN NULL;
		END IF;
	END IF;
	-- Else this record is the session's last (a transaction of one record,
	-- the common case), or the last of a group an earlier firing placed,
	-- which the WHERE tells.
	INSERT INTO idem_queue_lanes AS l (name, tail, next_at, placed_by, placed_upto, placed_after)
	VALUES (NEW.lane, hi, now(), me, hi, 0)
	ON CONFLICT (name) DO UPDATE
		SET tail = greatest(l.tail + n, hi),
		    next_at = CASE WHEN l.next_at = 'infinity' THEN now() ELSE l.next_at END,
		    placed_by = me, placed_upto = hi, placed_after = l.tail
		WHERE l.placed_by IS DISTINCT FROM me OR l.placed_upto < NEW.id
	RETURNING placed_after INTO base;
	IF NOT FOUND THEN
		RETURN NULL;
	END IF;
	IF base >= NEW.id THEN -- committing behind a higher ID of the lane: places to write
		IF top = NEW.id THEN
			UPDATE idem_queue_records SET pos = base + 1 WHERE id = NEW.id;
		ELSE
			UPDATE idem_queue_records r SET pos = base + m.k
			FROM (SELECT id, row_number() OVER (ORDER BY id) AS k FROM idem_queue_records
				WHERE lane = NEW.lane AND state <= 2 AND coalesce(pos, id) BETWEEN NEW.id AND top
					AND id BETWEEN NEW.id AND top AND txn = me) m
			WHERE r.id = m.id AND base + m.k > m.id;
		END IF;
	END IF;
	PERFORM pg_notify('idem_queue', '');
	RETURN NULL;
END
$$;
