-- 0022_command_wakeup: the dispatcher streams. A transaction that queues
-- commands (an intake batch, a scheduler pass, an operator's retry or move:
-- every INSERT into steward.commands) notifies the channel
-- steward_commands; NOTIFY is transactional, so a dispatcher listening there
-- is woken once the rows are committed, not before and not at its next
-- timer. One notification per statement, without a payload: the outbox rows
-- stay the record, the notification only says "look now", and identical
-- notifications of one transaction are folded into one by PostgreSQL.
CREATE FUNCTION steward.commands_queued() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
BEGIN
    PERFORM pg_notify('steward_commands', '');
    RETURN NULL;
END
$$;

CREATE TRIGGER commands_queued AFTER INSERT ON steward.commands
    FOR EACH STATEMENT EXECUTE FUNCTION steward.commands_queued();
REVOKE ALL ON FUNCTION steward.commands_queued() FROM PUBLIC;

-- The dispatcher's check that no earlier command of the instance is
-- unsent: an index the planner cannot mistake for a cheaper one.
-- commands_pending shares its predicate, so while the table's statistics
-- called it nearly empty (a backlog that grew from nothing) the planner
-- probed commands_pending by id alone and filtered on the key: a walk over
-- every earlier unsent row for each candidate.
CREATE INDEX commands_unsent ON steward.commands (process, key, id)
    WHERE sent_at IS NULL AND cancelled_at IS NULL;
