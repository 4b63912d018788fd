-- 0012_active: what active mode needs. Steward sequences an active
-- process: on entering a state it queues the step's command in
-- steward.commands (in the transaction that moves the instance), a
-- dispatcher produces it to Kafka, a missed deadline re-sends it or takes
-- on_timeout, and a lease names who holds a step. Every command carries a
-- fencing token; a reply with an older one is recorded as stale.

-- step: how many states the instance has entered (1 in its start state), so
-- a loop back into a state gets new command ids. token: the fencing token
-- of the last command sent for it (0: none yet). The lease: who holds the
-- current step, and until when.
ALTER TABLE steward.instances
    ADD COLUMN step             integer     NOT NULL DEFAULT 1 CHECK (step >= 1),
    ADD COLUMN token            bigint      NOT NULL DEFAULT 0 CHECK (token >= 0),
    ADD COLUMN lease_holder     text,
    ADD COLUMN lease_expires_at timestamptz,
    ADD COLUMN lease_renewed_at timestamptz;

-- The command outbox. A row is one send of one step's command: attempt 0
-- is the first send, each re-send a new row with a new token. ce_id is
-- derived from (process, key, step, attempt), so a crash between produce
-- and the record re-sends the same id and a receiver can drop the copy.
-- Rows are kept once sent (retention.outbox removes old sent rows).
CREATE TABLE steward.commands (
    id              bigserial   PRIMARY KEY,
    process         text        NOT NULL,
    key             text        NOT NULL,
    version         integer     NOT NULL,
    state           text        NOT NULL,
    step            integer     NOT NULL,
    attempt         integer     NOT NULL CHECK (attempt >= 0),
    token           bigint      NOT NULL CHECK (token >= 1),
    topic           text        NOT NULL,
    type            text        NOT NULL,
    payload         jsonb       NOT NULL,
    ce_id           text        NOT NULL UNIQUE,
    created_at      timestamptz NOT NULL DEFAULT now(),
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    attempts        integer     NOT NULL DEFAULT 0,
    sent_at         timestamptz,
    last_error      text
);

-- What the dispatcher scans, oldest first; per instance in order.
CREATE INDEX commands_pending ON steward.commands (next_attempt_at, id) WHERE sent_at IS NULL;
CREATE INDEX commands_instance ON steward.commands (process, key, id);
CREATE INDEX commands_sent ON steward.commands (sent_at) WHERE sent_at IS NOT NULL;

-- New judgements: timeout (on_timeout taken after the last retry), retried
-- (the command re-sent after a missed deadline), stale (a reply carrying an
-- older fencing token: recorded, nothing changes), and the lease's claimed,
-- renewed, lease_expired, handed_off (active: re-sent to whoever takes it
-- next) and released.
ALTER TABLE steward.history DROP CONSTRAINT history_outcome_check;
ALTER TABLE steward.history ADD CONSTRAINT history_outcome_check
    CHECK (outcome IN ('started', 'advanced', 'duplicate', 'parked', 'unexpected', 'late',
                       'violation', 'operator', 'timeout', 'retried', 'stale', 'claimed',
                       'renewed', 'lease_expired', 'handed_off', 'released'));

-- New alert kinds: a command that cannot be rendered (a template variable
-- never captured), one that cannot be delivered (topic missing, too
-- large, not authorized), and a lease that expired in shadow mode.
ALTER TABLE steward.alerts DROP CONSTRAINT alerts_kind_check;
ALTER TABLE steward.alerts ADD CONSTRAINT alerts_kind_check
    CHECK (kind IN ('deadline', 'process_deadline', 'sequence', 'blind', 'unloadable',
                    'command_failed', 'dispatch_failed', 'lease_expired'));
