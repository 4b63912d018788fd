-- 0015_judged_hash: the duplicate check probes an 8-byte hash instead of
-- (process, key, event_id). Every batch asks, for each event it judges,
-- whether history holds a judgement of that event id for that instance
-- already; the index that answers it gets a row per history row, so its
-- width is paid on every insert and every probe. The hash of the three
-- texts (joined by the unit separator, which none of them needs) finds the
-- candidates; the query rechecks the three columns, so a collision costs a
-- heap fetch, never a wrong answer.
CREATE FUNCTION steward.event_hash(process text, key text, event_id text) RETURNS bigint
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ SELECT hashtextextended(process || chr(31) || key || chr(31) || event_id, 0) $$;

DROP INDEX steward.history_event;
CREATE INDEX history_event ON steward.history (steward.event_hash(process, key, event_id));
