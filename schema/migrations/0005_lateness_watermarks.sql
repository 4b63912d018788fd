-- 0005_lateness_watermarks: lateness as a field, instances the scheduler
-- cannot judge set aside, and watermarks from the topics that matter now.

-- How long after its deadline an advancing event's time lies (the state's,
-- or the process's for the step that ends it); NULL when on time. Judged by
-- the engine from the event's own time, whether or not the scheduler had
-- judged the deadline yet.
ALTER TABLE steward.history ADD COLUMN late_by_ms bigint CHECK (late_by_ms > 0);

-- For a deadline alert: how long after the deadline the event that ended
-- the step arrived (event time); NULL while open or when none arrived.
ALTER TABLE steward.alerts ADD COLUMN late_by_ms bigint CHECK (late_by_ms > 0);

-- Why the scheduler set an instance aside (its definition version or state
-- cannot be loaded): it is out of the due scan (next_deadline_at is NULL)
-- until it moves again or an operator restores next_deadline_at. NULL for
-- every instance the scheduler can judge.
ALTER TABLE steward.instances ADD COLUMN suspended text;

CREATE INDEX instances_suspended ON steward.instances (process, version)
    WHERE suspended IS NOT NULL AND status = 'active';

-- Which versions still have open instances, for the watermark below.
CREATE INDEX instances_open_version ON steward.instances (process, version)
    WHERE status = 'active';

-- Whether the version is one of the definitions a replica loaded at its
-- last start or reload (set by its scheduler); a new version is current
-- when recorded.
ALTER TABLE steward.definitions ADD COLUMN current boolean NOT NULL DEFAULT true;

-- Which replicas are alive: each replica's scheduler stamps its row every
-- pass. A partition whose owner has not been seen for
-- scheduler.unowned_after has no owner (the replica died before the group
-- noticed). One row per replica name; rows unseen for a day are deleted by
-- the schedulers.
CREATE TABLE steward.replicas (
    consumer_group text        NOT NULL,
    replica        text        NOT NULL,
    started_at     timestamptz NOT NULL DEFAULT now(),
    seen_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer_group, replica)
);

-- A partition's latest claim or release, for the scheduler's check that
-- every partition has an owner.
CREATE INDEX ownership_log_partition
    ON steward.ownership_log (consumer_group, topic, partition, id);

-- As in 0001, but only over the topics that matter now: those of current
-- versions and of versions that still have open instances. A topic that
-- only a retired version read no longer holds the watermark (and with it
-- every deadline) at NULL or frozen.
CREATE OR REPLACE FUNCTION steward.process_watermarks(p_group text)
RETURNS TABLE (process text, watermark timestamptz)
LANGUAGE sql STABLE AS $$
    WITH versions AS (
        SELECT d.process, d.document
        FROM steward.definitions d
        WHERE d.current
           OR EXISTS (SELECT 1 FROM steward.instances i
                      WHERE i.process = d.process AND i.version = d.version
                        AND i.status = 'active')),
    topics AS (
        SELECT DISTINCT v.process, e.value->>'topic' AS topic
        FROM versions v, jsonb_each(v.document->'events') e)
    SELECT t.process,
           CASE WHEN bool_or(o.watermark IS NULL) THEN NULL ELSE min(o.watermark) END
    FROM topics t
    LEFT JOIN steward.offsets o ON o.consumer_group = p_group AND o.topic = t.topic
    GROUP BY t.process
$$;
