-- 0001_init: the tables of the process manager.
--
-- All state lives here; a steward process keeps no per-instance state in
-- memory between batches. Times are timestamptz; event times come from the
-- events themselves (see docs/architecture.md, "Time").

-- Every definition version ever loaded. Instances keep the version they
-- started with, so a running instance can always be interpreted even after
-- its file has moved on.
CREATE TABLE steward.definitions (
    process    text        NOT NULL,
    version    integer     NOT NULL CHECK (version >= 1),
    mode       text        NOT NULL CHECK (mode IN ('shadow', 'active')),
    document   jsonb       NOT NULL,
    checksum   text        NOT NULL,
    loaded_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (process, version)
);

-- One row per process instance.
CREATE TABLE steward.instances (
    process             text        NOT NULL,
    key                 text        NOT NULL,
    version             integer     NOT NULL,
    state               text        NOT NULL,
    -- 'active' while running, else the terminal state's outcome
    status              text        NOT NULL DEFAULT 'active',
    started_at          timestamptz NOT NULL,
    state_entered_at    timestamptz NOT NULL,
    deadline_at         timestamptz,          -- the current state's deadline
    process_deadline_at timestamptz,          -- start to terminal state
    -- the earliest deadline not yet judged; what the scheduler scans
    next_deadline_at    timestamptz,
    overdue             boolean     NOT NULL DEFAULT false,
    attempt             integer     NOT NULL DEFAULT 0,
    vars                jsonb       NOT NULL DEFAULT '{}',
    events_applied      integer     NOT NULL DEFAULT 0,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (process, key),
    FOREIGN KEY (process, version) REFERENCES steward.definitions (process, version)
);

CREATE INDEX instances_due ON steward.instances (next_deadline_at)
    WHERE status = 'active' AND next_deadline_at IS NOT NULL;
CREATE INDEX instances_open ON steward.instances (process, state) WHERE status = 'active';

-- Every event applied to or judged for an instance, with its outcome: the
-- audit trail and the source of step latencies.
CREATE TABLE steward.history (
    id          bigserial   PRIMARY KEY,
    process     text        NOT NULL,
    key         text        NOT NULL,
    version     integer,
    event_id    text        NOT NULL,
    event_type  text        NOT NULL,
    topic       text        NOT NULL,
    partition   integer     NOT NULL,
    "offset"    bigint      NOT NULL,
    event_time  timestamptz NOT NULL,
    from_state  text,
    to_state    text,
    outcome     text        NOT NULL CHECK (outcome IN ('started', 'advanced', 'duplicate',
                                                        'parked', 'unexpected', 'late',
                                                        'violation')),
    -- true when a parked event was applied later; its first row says 'parked'
    replayed    boolean     NOT NULL DEFAULT false,
    detail      text,
    recorded_at timestamptz NOT NULL DEFAULT now(),
    replica     text        NOT NULL,
    epoch       bigint      NOT NULL
);

CREATE INDEX history_instance ON steward.history (process, key, id);
CREATE INDEX history_event ON steward.history (process, key, event_id);
CREATE INDEX history_source ON steward.history (topic, partition, "offset");

-- Events that arrived before their instance could accept them.
CREATE TABLE steward.parked (
    id          bigserial   PRIMARY KEY,
    process     text        NOT NULL,
    key         text        NOT NULL,
    event_id    text        NOT NULL,
    event_type  text        NOT NULL,
    topic       text        NOT NULL,
    partition   integer     NOT NULL,
    "offset"    bigint      NOT NULL,
    event_time  timestamptz NOT NULL,
    payload     jsonb       NOT NULL,
    parked_at   timestamptz NOT NULL DEFAULT now(),
    -- event time + reorder window: judged a sequence violation once every
    -- relevant partition has been read past it
    expires_at  timestamptz NOT NULL,
    UNIQUE (process, key, event_id)
);

CREATE INDEX parked_expiry ON steward.parked (expires_at);

-- Where each partition's consumption stands, and who owns it. Offsets are
-- written in the same transaction as the state changes they cause.
CREATE TABLE steward.offsets (
    consumer_group text        NOT NULL,
    topic          text        NOT NULL,
    partition      integer     NOT NULL,
    next_offset    bigint      NOT NULL,
    -- the event time up to which this partition has been read; now() when
    -- read to its end
    watermark      timestamptz,
    owner          text,
    epoch          bigint      NOT NULL DEFAULT 0,
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer_group, topic, partition)
);

-- Alerts, open and resolved. At most one open alert per dedup key.
CREATE TABLE steward.alerts (
    id          bigserial   PRIMARY KEY,
    kind        text        NOT NULL CHECK (kind IN ('deadline', 'process_deadline',
                                                     'sequence', 'blind')),
    process     text,
    key         text,
    state       text,
    owner       text        NOT NULL,
    summary     text        NOT NULL,
    details     jsonb       NOT NULL DEFAULT '{}',
    dedup_key   text        NOT NULL,
    deadline_at timestamptz,
    opened_at   timestamptz NOT NULL DEFAULT now(),
    resolved_at timestamptz,
    resolution  text
);

CREATE UNIQUE INDEX alerts_open_dedup ON steward.alerts (dedup_key) WHERE resolved_at IS NULL;
CREATE INDEX alerts_open_instance ON steward.alerts (process, key) WHERE resolved_at IS NULL;

-- Notifications and active-mode commands waiting for delivery. Rows are
-- marked delivered or failed, never deleted undelivered.
CREATE TABLE steward.outbox (
    id              bigserial   PRIMARY KEY,
    kind            text        NOT NULL CHECK (kind IN ('notification', 'command')),
    destination     text        NOT NULL,   -- a sink name, or a command topic
    alert_id        bigint      REFERENCES steward.alerts (id),
    process         text,
    key             text,
    payload         jsonb       NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    attempts        integer     NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    delivered_at    timestamptz,
    failed_at       timestamptz,
    last_error      text
);

CREATE INDEX outbox_pending ON steward.outbox (next_attempt_at)
    WHERE delivered_at IS NULL AND failed_at IS NULL;

-- Messages that could not be decoded or correlated, kept whole.
CREATE TABLE steward.rejected (
    id             bigserial   PRIMARY KEY,
    consumer_group text        NOT NULL,
    topic          text        NOT NULL,
    partition      integer     NOT NULL,
    "offset"       bigint      NOT NULL,
    process        text,                    -- set when only one process rejected it
    reason         text        NOT NULL,
    detail         text,
    message_key    bytea,
    value          bytea,
    headers        jsonb,
    kafka_time     timestamptz,
    recorded_at    timestamptz NOT NULL DEFAULT now(),
    replica        text        NOT NULL,
    epoch          bigint      NOT NULL
);

CREATE INDEX rejected_source ON steward.rejected (topic, partition, "offset");
CREATE INDEX rejected_reason ON steward.rejected (reason, recorded_at);

-- Claims, releases and fencing of partitions.
CREATE TABLE steward.ownership_log (
    id             bigserial   PRIMARY KEY,
    consumer_group text        NOT NULL,
    topic          text        NOT NULL,
    partition      integer     NOT NULL,
    action         text        NOT NULL CHECK (action IN ('claim', 'release', 'lost', 'fenced')),
    replica        text        NOT NULL,
    epoch          bigint      NOT NULL,
    next_offset    bigint,
    at             timestamptz NOT NULL DEFAULT now(),
    detail         text
);

-- The event time up to which a consumer group has read every partition of
-- every topic a process listens on: an awaited event older than this would
-- have arrived by now, backlog or not. NULL while any such partition has
-- never been read (nothing can be judged yet).
CREATE FUNCTION steward.process_watermarks(p_group text)
RETURNS TABLE (process text, watermark timestamptz)
LANGUAGE sql STABLE AS $$
    WITH topics AS (
        SELECT DISTINCT d.process, e.value->>'topic' AS topic
        FROM steward.definitions d, jsonb_each(d.document->'events') e)
    SELECT t.process,
           CASE WHEN bool_or(o.watermark IS NULL) THEN NULL ELSE min(o.watermark) END
    FROM topics t
    LEFT JOIN steward.offsets o ON o.consumer_group = p_group AND o.topic = t.topic
    GROUP BY t.process
$$;
