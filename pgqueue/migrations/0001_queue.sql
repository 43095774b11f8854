-- idem queue, version 1: the records, their lanes, and the trigger that
-- places each record in its lane's order as its transaction commits.
--
-- A lane's order is commit order: identity values are handed out when a row
-- is inserted, not when its transaction commits, so two producers of one
-- lane could commit in the other order than their IDs. The deferred trigger
-- below numbers a record (pos) at commit time, under its lane row's lock,
-- so positions follow commits. It also sends the wake-up, which PostgreSQL
-- delivers at commit and drops on rollback.

CREATE TABLE idem_queue_lanes (
	name        text PRIMARY KEY,
	tail        bigint NOT NULL DEFAULT 0,         -- the last position given in this lane
	next_at     timestamptz NOT NULL DEFAULT now(), -- when the head is next due; 'infinity' once the lane is empty
	held        boolean NOT NULL DEFAULT false,     -- after a 401 fresh credentials did not cure, until Wake
	owner       uuid,                               -- the lease token of the worker holding the lane
	lease_until timestamptz                         -- after which another worker may take the lane over
);

-- Due lanes, in the order they fall due.
CREATE INDEX idem_queue_lanes_due ON idem_queue_lanes (next_at) WHERE NOT held;

CREATE TABLE idem_queue_records (
	id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	lane        text NOT NULL,
	pos         bigint,                              -- the record's place in its lane, given at commit
	state       smallint NOT NULL,                   -- queue.State: 1 pending, 2 in flight, 3 done, 4 failed, 5 expired
	key         text,                                -- the idempotency key the producer supplied, if any
	enqueued_at timestamptz NOT NULL DEFAULT now(),
	settled_at  timestamptz,
	record      bytea NOT NULL                       -- the record's binary form (queue.Record.MarshalBinary)
);

-- A supplied key names one operation.
CREATE UNIQUE INDEX idem_queue_records_key ON idem_queue_records (key) WHERE key IS NOT NULL;
-- At most one record of a lane in flight.
CREATE UNIQUE INDEX idem_queue_records_in_flight ON idem_queue_records (lane) WHERE state = 2;
-- Each lane's unsettled records in order: its head is the first.
CREATE INDEX idem_queue_records_head ON idem_queue_records (lane, pos) WHERE state <= 2;
-- Listing by state, and sweeping settled records.
CREATE INDEX idem_queue_records_state ON idem_queue_records (state, id);
CREATE INDEX idem_queue_records_settled ON idem_queue_records (settled_at) WHERE settled_at IS NOT NULL;

CREATE FUNCTION idem_queue_place() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
	p bigint;
BEGIN
	INSERT INTO idem_queue_lanes AS l (name, tail, next_at) VALUES (NEW.lane, 1, now())
	ON CONFLICT (name) DO UPDATE
		SET tail = l.tail + 1,
		    next_at = CASE WHEN l.next_at = 'infinity' THEN now() ELSE l.next_at END
	RETURNING tail INTO p;
	UPDATE idem_queue_records SET pos = p WHERE id = NEW.id;
	PERFORM pg_notify('idem_queue', '');
	RETURN NULL;
END
$$;

CREATE CONSTRAINT TRIGGER idem_queue_place AFTER INSERT ON idem_queue_records
	DEFERRABLE INITIALLY DEFERRED
	FOR EACH ROW EXECUTE FUNCTION idem_queue_place();
