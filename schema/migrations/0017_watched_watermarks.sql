-- 0017_watched_watermarks: the watermark's topics decided by the daemon,
-- the topic mapping recorded beside the definitions, and when each
-- partition's watermark last moved.

-- The topic mapping (topics.prefix and topics.map) of the replica that last
-- loaded the process: {"prefix": "...", "map": {...}}. A stored document
-- keeps the definition's own names; whoever reads one back without the
-- running config (an operator's retry or move) renames its topics by this.
-- NULL: recorded before a replica wrote one; the names are used as written.
ALTER TABLE steward.definitions ADD COLUMN topic_mapping jsonb;

-- When the partition's watermark last changed: a partition whose row is
-- written (intake reads it) while its watermark stands still is frozen,
-- and holds back every deadline of the processes that read it.
ALTER TABLE steward.offsets ADD COLUMN watermark_moved_at timestamptz NOT NULL DEFAULT now();
UPDATE steward.offsets SET watermark_moved_at = updated_at;

CREATE FUNCTION steward.offsets_watermark_moved() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.watermark_moved_at := now();
    RETURN NEW;
END
$$;

CREATE TRIGGER offsets_watermark_moved
    BEFORE UPDATE OF watermark ON steward.offsets
    FOR EACH ROW WHEN (NEW.watermark IS DISTINCT FROM OLD.watermark)
    EXECUTE FUNCTION steward.offsets_watermark_moved();

-- Which topics hold a process's watermark is decided in C from the
-- definitions as the daemon renamed them (def_watch_topics()); the JSON
-- documents here carry the unmapped names. So the watermark is computed
-- over the (process, topic) pairs given: the least over every partition of
-- the process's topics, NULL while one of them has no partition read.
CREATE FUNCTION steward.topic_watermarks(p_group text, p_process text[], p_topic text[])
RETURNS TABLE (process text, watermark timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT t.process,
           CASE WHEN bool_or(o.watermark IS NULL) THEN NULL ELSE min(o.watermark) END
    FROM (SELECT DISTINCT * FROM unnest(p_process, p_topic) AS u(process, topic)) t
    LEFT JOIN steward.offsets o ON o.consumer_group = p_group AND o.topic = t.topic
    GROUP BY t.process
$$;

-- The pairs the group's schedulers watch, as their last pass decided them,
-- for readers in SQL (steward.process_watermarks below, benchmarks, a
-- person at psql). Rewritten by a scheduler whenever its set changes; one
-- row per (process, topic) of the loaded definitions and of the versions
-- with open instances, so it stays as small as the definitions.
CREATE TABLE steward.watched_topics (
    consumer_group text NOT NULL,
    process        text NOT NULL,
    topic          text NOT NULL,
    PRIMARY KEY (consumer_group, process, topic)
);

-- As before, but over the broker's topic names the schedulers watch
-- rather than over the definitions' own names in their documents.
CREATE OR REPLACE FUNCTION steward.process_watermarks(p_group text)
RETURNS TABLE (process text, watermark timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT w.process, w.watermark
    FROM (SELECT array_agg(process) AS p, array_agg(topic) AS t
          FROM steward.watched_topics WHERE consumer_group = p_group) a,
         steward.topic_watermarks(p_group, a.p, a.t) w
$$;
