-- idem queue, version 2: a record's place in its lane is its ID unless it
-- commits after a record of its lane with a higher ID, and only then is
-- pos written. Version 1 wrote pos at every commit: an UPDATE of the
-- record's row and of every index on it, inside the producer's commit.
--
-- A lane's tail is now the highest place given in it. At commit, under the
-- lane row's lock as before, the new tail is the greater of the record's ID
-- and the old tail plus one: the ID when it is greater (the common case,
-- where nothing but the lane's row is written), else the place after the
-- tail, written to pos. Places within a lane therefore still rise in
-- commit order, and the head is the unsettled record with the lowest
-- coalesce(pos, id). Records placed by version 1 keep their pos, which is
-- below any ID given since (a lane's count never passes the IDs given), so
-- they stay ahead.

CREATE OR REPLACE FUNCTION idem_queue_place() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
	p bigint;
BEGIN
	INSERT INTO idem_queue_lanes AS l (name, tail, next_at) VALUES (NEW.lane, NEW.id, now())
	ON CONFLICT (name) DO UPDATE
		SET tail = greatest(l.tail + 1, NEW.id),
		    next_at = CASE WHEN l.next_at = 'infinity' THEN now() ELSE l.next_at END
	RETURNING tail INTO p;
	IF p <> NEW.id THEN
		UPDATE idem_queue_records SET pos = p WHERE id = NEW.id;
	END IF;
	PERFORM pg_notify('idem_queue', '');
	RETURN NULL;
END
$$;

DROP INDEX idem_queue_records_head;
CREATE INDEX idem_queue_records_head ON idem_queue_records (lane, (coalesce(pos, id))) WHERE state <= 2;
