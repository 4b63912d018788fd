-- 0006_bounded_tables: history partitioned by the time it was recorded, and
-- the indexes retention needs to find old rows without scanning.
--
-- History is range-partitioned on recorded_at, one partition per week
-- (Monday 00:00 UTC to the next), named history_pYYYYMMDD after its first
-- day. Steward creates the current and the next weeks' partitions ahead of
-- time and drops a week whole once it is past retention (manager/retention.c).
-- A DEFAULT partition takes any row no week is ready for, so an insert never
-- fails; retention moves such rows out when their week is created, and
-- deletes old ones from it in batches.
--
-- The table is rebuilt from its own definition (LIKE), so columns and
-- CHECKs added by earlier migrations carry over, and so do its indexes. Rows
-- already recorded go to one partition, history_before_YYYYMMDD, bounded
-- above by the current week: retention drops it whole once that is old.
--
-- The primary key of a partitioned table must hold the partition key:
-- it becomes (id, recorded_at). Nothing references history's key; ids still
-- come from the same sequence, so they keep growing where they were.

ALTER TABLE steward.history RENAME TO history_unpartitioned;
ALTER TABLE steward.history_unpartitioned RENAME CONSTRAINT history_pkey
    TO history_unpartitioned_pkey;
ALTER SEQUENCE steward.history_id_seq OWNED BY NONE;

CREATE TABLE steward.history (
    LIKE steward.history_unpartitioned INCLUDING DEFAULTS INCLUDING CONSTRAINTS
        INCLUDING STORAGE INCLUDING COMMENTS
) PARTITION BY RANGE (recorded_at);

ALTER TABLE steward.history ADD CONSTRAINT history_pkey PRIMARY KEY (id, recorded_at);

CREATE TABLE steward.history_default PARTITION OF steward.history DEFAULT;

DO $$
DECLARE
    week_start timestamptz :=
        date_trunc('week', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';
    idx record;
    defs text[] := '{}';
    def text;
BEGIN
    IF EXISTS (SELECT 1 FROM steward.history_unpartitioned) THEN
        EXECUTE format('CREATE TABLE steward.%I PARTITION OF steward.history '
                       'FOR VALUES FROM (MINVALUE) TO (%L)',
                       'history_before_' || to_char(week_start AT TIME ZONE 'UTC', 'YYYYMMDD'),
                       week_start);
    END IF;

    -- Every secondary index of the old table, recreated on the new one under
    -- its own name once the rows are in (one build per partition, not one
    -- insert per row per index).
    FOR idx IN
        SELECT c.relname, pg_get_indexdef(i.indexrelid) AS def
        FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
        WHERE i.indrelid = 'steward.history_unpartitioned'::regclass AND NOT i.indisprimary
    LOOP
        defs := defs || regexp_replace(idx.def, ' ON (ONLY )?\S+ USING ',
                                       ' ON steward.history USING ');
        EXECUTE format('DROP INDEX steward.%I', idx.relname);
    END LOOP;

    INSERT INTO steward.history SELECT * FROM steward.history_unpartitioned;
    DROP TABLE steward.history_unpartitioned;

    FOREACH def IN ARRAY defs LOOP
        EXECUTE def;
    END LOOP;
END
$$;

ALTER SEQUENCE steward.history_id_seq OWNED BY steward.history.id;

-- Retention finds old rows by these, in batches, without a scan.
CREATE INDEX rejected_recorded ON steward.rejected (recorded_at);
CREATE INDEX outbox_done ON steward.outbox (coalesce(delivered_at, failed_at))
    WHERE delivered_at IS NOT NULL OR failed_at IS NOT NULL;
-- Deleting an alert checks the outbox for rows that still reference it.
CREATE INDEX outbox_alert_id ON steward.outbox (alert_id);
CREATE INDEX alerts_resolved ON steward.alerts (resolved_at) WHERE resolved_at IS NOT NULL;
CREATE INDEX ownership_log_at ON steward.ownership_log (at);
