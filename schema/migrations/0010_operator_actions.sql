-- 0010_operator_actions: what a person does to an instance or an alert
-- (steward ack, resolve, close, move, claim, release, silence), recorded
-- where the daemon records what events do.

-- An action is a history row of outcome 'operator': event_type names the
-- action ("operator:close"), actor and reason say who and why, from_state
-- and to_state the instance before and after. Events leave both NULL.
ALTER TABLE steward.history DROP CONSTRAINT history_outcome_check;
ALTER TABLE steward.history ADD CONSTRAINT history_outcome_check
    CHECK (outcome IN ('started', 'advanced', 'duplicate', 'parked', 'unexpected', 'late',
                       'violation', 'operator'));
ALTER TABLE steward.history ADD COLUMN actor text;
ALTER TABLE steward.history ADD COLUMN reason text;
ALTER TABLE steward.history ADD CONSTRAINT history_operator_audit
    CHECK (outcome <> 'operator' OR (actor IS NOT NULL AND reason IS NOT NULL));

-- Acknowledged: somebody is on it; the alert stays open. Resolved by hand:
-- resolved_by names who (NULL when Steward resolved it).
ALTER TABLE steward.alerts ADD COLUMN acked_at timestamptz;
ALTER TABLE steward.alerts ADD COLUMN acked_by text;
ALTER TABLE steward.alerts ADD COLUMN resolved_by text;

-- The person who owns an instance's investigation, while somebody does.
ALTER TABLE steward.instances ADD COLUMN claimed_by text;
ALTER TABLE steward.instances ADD COLUMN claimed_at timestamptz;
ALTER TABLE steward.instances ADD CONSTRAINT instances_claim_whole
    CHECK ((claimed_by IS NULL) = (claimed_at IS NULL));

-- Maintenance windows: no pages for the open alerts of a process (and
-- optionally one state, one owning team) between starts_at and ends_at.
-- lifted_at ends one early (steward unsilence).
CREATE TABLE steward.silences (
    id         bigserial   PRIMARY KEY,
    process    text        NOT NULL,
    state      text,
    team       text,
    starts_at  timestamptz NOT NULL DEFAULT now(),
    ends_at    timestamptz NOT NULL,
    actor      text        NOT NULL,
    reason     text        NOT NULL,
    lifted_at  timestamptz,
    lifted_by  text,
    CHECK (ends_at > starts_at)
);

CREATE INDEX silences_live ON steward.silences (process, ends_at) WHERE lifted_at IS NULL;
