-- 0014_command_cancel: a command of a step the instance has left is not
-- sent. When an instance leaves a step (an event moves it on, a timeout
-- takes on_timeout, an operator moves or closes it), the transaction that
-- moves it sets cancelled_at and cancel_reason on its unsent commands of
-- earlier steps (all of them once it finished). The dispatcher never claims
-- a cancelled row, and a cancelled row does not hold back the instance's
-- later ones. retention.outbox removes old cancelled rows as it does sent
-- ones.
ALTER TABLE steward.commands
    ADD COLUMN cancelled_at  timestamptz,
    ADD COLUMN cancel_reason text,
    ADD CONSTRAINT commands_cancel_whole CHECK ((cancelled_at IS NULL) = (cancel_reason IS NULL));

-- What the dispatcher scans: due, unsent, not cancelled.
DROP INDEX steward.commands_pending;
CREATE INDEX commands_pending ON steward.commands (next_attempt_at, id)
    WHERE sent_at IS NULL AND cancelled_at IS NULL;
-- What retention removes besides sent rows.
CREATE INDEX commands_cancelled ON steward.commands (cancelled_at)
    WHERE cancelled_at IS NOT NULL AND sent_at IS NULL;
