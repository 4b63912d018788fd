-- 0018_instance_locks: the instance lock in a namespace of Steward's own,
-- taken with a bounded wait, and the events of an instance whose lock
-- stays busy kept in order until it is free.
--
-- Advisory locks are open to every login of the database. The one-key
-- form (a bigint) is what most applications use, so Steward's instance
-- locks use the two-key form, pg_advisory_xact_lock(int4, int4), with a
-- class id of its own: 1398036292, 0x53545744, "STWD" in ASCII. Another
-- application only collides with an instance lock if it takes two-key
-- advisory locks with that same first key. steward.instance_lock_key()
-- (0008) is no longer taken by anything; it stays for scripts that call
-- it, and names no lock Steward holds.

CREATE FUNCTION steward.lock_class() RETURNS int4
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT 1398036292 $$;

-- The second key of an instance's lock. Every taker (batches, the
-- scheduler's passes, operator actions) computes it here, so they exclude
-- each other; chr(31) (unit separator) cannot occur in a process name, so
-- ('a', 'bc') and ('ab', 'c') get different keys. Two instances with the
-- same key merely take turns.
CREATE FUNCTION steward.instance_lock_objid(process text, key text) RETURNS int4
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT hashtext(process || chr(31) || key) $$;

-- The instance's lock, for the transaction; waits as long as it takes.
CREATE FUNCTION steward.lock_instance(process text, key text) RETURNS void
    LANGUAGE sql VOLATILE
    AS $$ SELECT pg_advisory_xact_lock(steward.lock_class(),
                                       steward.instance_lock_objid(process, key)) $$;

-- The instance's lock, for the transaction, if nobody holds it.
CREATE FUNCTION steward.try_lock_instance(process text, key text) RETURNS boolean
    LANGUAGE sql VOLATILE
    AS $$ SELECT pg_try_advisory_xact_lock(steward.lock_class(),
                                           steward.instance_lock_objid(process, key)) $$;

-- Events of instances whose lock an intake batch could not get in time:
-- the partition's offset moved on without them, so they wait here, oldest
-- first (id), until a batch gets the lock, judges them before anything
-- newer of that instance, and deletes them. Grows only while some lock is
-- held from outside Steward; empty otherwise.
CREATE TABLE steward.deferred (
    id bigserial PRIMARY KEY,
    process text NOT NULL,
    key text NOT NULL,
    event_id text NOT NULL,
    event_type text NOT NULL,
    topic text NOT NULL,
    partition int NOT NULL,
    "offset" bigint NOT NULL,
    event_time timestamptz NOT NULL,
    payload jsonb NOT NULL,
    token bigint NOT NULL,
    epoch bigint NOT NULL,
    deferred_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX deferred_instance ON steward.deferred (process, key, id);

-- A batch's instance locks, in objid order (the one order every waiting
-- taker uses, so two batches never wait on each other in a circle). Each
-- is tried first; a busy one is waited for at most wait_ms (lock_timeout,
-- inside a subtransaction so a timeout ends only that wait), except for an
-- instance that has deferred events already: its newer events queue
-- behind them without waiting. One row per distinct instance that is not
-- simply locked now (usually none): whether this transaction holds its
-- lock, whether it has deferred events (to judge first when locked), and
-- whether the wait timed out.
--
-- Usually every lock is free: they are all tried in one statement, inside
-- a subtransaction. Only if one is busy is that subtransaction rolled back
-- (letting go of every lock it took) and the locks taken again one by one,
-- in order, waiting where needed.
CREATE FUNCTION steward.lock_instances(processes text[], keys text[], wait_ms int)
    RETURNS TABLE (process text, key text, objid int4, locked boolean, has_deferred boolean,
                   timed_out boolean)
    LANGUAGE plpgsql VOLATILE
    AS $$
#variable_conflict use_column
DECLARE
    r record;
    busy bigint;
    saved text := current_setting('lock_timeout');
BEGIN
    BEGIN
        SELECT count(*) FILTER (WHERE NOT got) INTO busy
        FROM (SELECT pg_try_advisory_xact_lock(steward.lock_class(), s.o) AS got
              FROM (SELECT DISTINCT steward.instance_lock_objid(u.p, u.k) AS o
                    FROM unnest(processes, keys) AS u(p, k) ORDER BY 1 OFFSET 0) s) t;
        IF busy > 0 THEN
            RAISE EXCEPTION USING ERRCODE = 'lock_not_available';
        END IF;
    EXCEPTION WHEN lock_not_available THEN
        NULL; -- every lock of the statement let go; taken in order below
    END;
    IF busy = 0 THEN
        IF EXISTS (SELECT 1 FROM steward.deferred) THEN
            RETURN QUERY
                SELECT u.p, u.k, steward.instance_lock_objid(u.p, u.k), true, true, false
                FROM (SELECT DISTINCT p, k FROM unnest(processes, keys) AS v(p, k)) u
                WHERE EXISTS (SELECT 1 FROM steward.deferred d
                              WHERE d.process = u.p AND d.key = u.k);
        END IF;
        RETURN;
    END IF;
    FOR r IN SELECT DISTINCT u.p, u.k, steward.instance_lock_objid(u.p, u.k) AS o
             FROM unnest(processes, keys) AS u(p, k) ORDER BY 3, 1, 2 LOOP
        process := r.p;
        key := r.k;
        objid := r.o;
        timed_out := false;
        has_deferred := EXISTS (SELECT 1 FROM steward.deferred d
                                WHERE d.process = r.p AND d.key = r.k);
        locked := pg_try_advisory_xact_lock(steward.lock_class(), r.o);
        IF NOT locked AND NOT has_deferred THEN
            BEGIN
                PERFORM set_config('lock_timeout', wait_ms || 'ms', true);
                PERFORM pg_advisory_xact_lock(steward.lock_class(), r.o);
                PERFORM set_config('lock_timeout', saved, true);
                locked := true;
            EXCEPTION WHEN lock_not_available THEN
                timed_out := true;
            END;
        END IF;
        IF NOT locked OR has_deferred THEN
            RETURN NEXT;
        END IF;
    END LOOP;
END $$;
