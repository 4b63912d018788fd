-- 0019_operator_role: an audit trail that only the schema's owner can
-- rewrite, and the operator's actions as functions that run with the
-- owner's rights.
--
-- The terms: a *trusted* writer is a role with the privileges of the
-- schema's owner (the owner, a member of it, a superuser), which is also
-- what every SECURITY DEFINER function below runs as. Everyone else (the
-- runtime role of `steward run`, which still appends events to history;
-- the operator role of the CLI, which writes nothing directly) may not
-- change or delete a history row, write an operator row, or touch the
-- audit columns of alerts or silences: those go through the
-- steward.action_* functions, which record the database login
-- (session_user, whatever role it acts as) next to the actor the caller
-- names. The runtime role's retention keeps working through
-- steward.history_prune() and the partition functions of 0011, which never
-- remove anything younger than an hour (the shortest retention.history).

-- The login that ran an action: history's operator rows, and the alerts and
-- silences an action changed. NULL on rows from before this migration and
-- on what Steward itself did.
ALTER TABLE steward.history ADD COLUMN login text;
ALTER TABLE steward.alerts ADD COLUMN acked_login text;
ALTER TABLE steward.alerts ADD COLUMN resolved_login text;
ALTER TABLE steward.silences ADD COLUMN login text;
ALTER TABLE steward.silences ADD COLUMN lifted_login text;

-- ---- the guard ------------------------------------------------------------

-- A row trigger: lets a trusted writer through (a role with the privileges
-- of the schema's owner; inside a SECURITY DEFINER function of the owner,
-- current_user is the owner), refuses everyone else. Each trigger's WHEN
-- clause says what it guards, so the rows the daemon writes every batch
-- never call it. The check is inline: a function it called would need
-- EXECUTE granted to the very roles it refuses.
CREATE FUNCTION steward.audit_guard()
    RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_namespace n WHERE n.nspname = 'steward'
                   AND pg_has_role(current_user, n.nspowner, 'USAGE')) THEN
        RAISE EXCEPTION 'steward.% is an audit record: role % may not % %', TG_TABLE_NAME,
                current_user, lower(TG_OP), TG_ARGV[0]
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'actions go through the steward.action_* functions, retention through '
                         'steward.history_prune(); only the schema''s owner rewrites the audit';
    END IF;
    RETURN CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END;
END
$$;

-- History is append-only; operator rows come only from the functions. A
-- row trigger on the partitioned table is cloned onto every partition,
-- those attached later included.
CREATE TRIGGER history_append_only BEFORE UPDATE OR DELETE ON steward.history
    FOR EACH ROW EXECUTE FUNCTION steward.audit_guard('its rows');
CREATE TRIGGER history_operator_rows BEFORE INSERT ON steward.history
    FOR EACH ROW WHEN (NEW.outcome = 'operator' OR NEW.login IS NOT NULL)
    EXECUTE FUNCTION steward.audit_guard('operator rows');

-- Alerts: Steward opens and resolves them; who acknowledged or resolved one
-- by hand, and a resolution once made, change only through the functions.
-- An alert goes (retention) only once resolved for an hour.
CREATE TRIGGER alerts_audit_insert BEFORE INSERT ON steward.alerts
    FOR EACH ROW WHEN (NEW.acked_at IS NOT NULL OR NEW.acked_by IS NOT NULL
                       OR NEW.resolved_by IS NOT NULL OR NEW.acked_login IS NOT NULL
                       OR NEW.resolved_login IS NOT NULL)
    EXECUTE FUNCTION steward.audit_guard('who acknowledged or resolved it');
CREATE TRIGGER alerts_audit_update BEFORE UPDATE ON steward.alerts
    FOR EACH ROW WHEN (NEW.acked_at IS DISTINCT FROM OLD.acked_at
                       OR NEW.acked_by IS DISTINCT FROM OLD.acked_by
                       OR NEW.acked_login IS DISTINCT FROM OLD.acked_login
                       OR NEW.resolved_by IS DISTINCT FROM OLD.resolved_by
                       OR NEW.resolved_login IS DISTINCT FROM OLD.resolved_login
                       OR (OLD.resolved_at IS NOT NULL
                           AND (NEW.resolved_at IS DISTINCT FROM OLD.resolved_at
                                OR NEW.resolution IS DISTINCT FROM OLD.resolution)))
    EXECUTE FUNCTION steward.audit_guard('who acknowledged or resolved it');
CREATE TRIGGER alerts_audit_delete BEFORE DELETE ON steward.alerts
    FOR EACH ROW WHEN (OLD.resolved_at IS NULL OR OLD.resolved_at > now() - interval '1 hour')
    EXECUTE FUNCTION steward.audit_guard('an alert resolved less than an hour ago');

-- Silences are written by people only: through the functions.
CREATE TRIGGER silences_audit BEFORE INSERT OR UPDATE OR DELETE ON steward.silences
    FOR EACH ROW EXECUTE FUNCTION steward.audit_guard('a silence');

-- ---- what the functions share (owner only) ---------------------------------

-- The history row of an action on instance (p_process, p_key), as the
-- caller's login.
CREATE FUNCTION steward.audit_history(p_process text, p_key text, p_version int, p_verb text,
                                      p_from text, p_to text, p_detail text, p_actor text,
                                      p_reason text)
    RETURNS void
    LANGUAGE sql
    SET search_path = pg_catalog, pg_temp
    AS $$
INSERT INTO steward.history (process, key, version, event_id, event_type, topic, partition,
    "offset", event_time, from_state, to_state, outcome, detail, replica, epoch, actor, reason,
    login)
VALUES (p_process, p_key, p_version,
        'operator:' || p_verb || ':' || steward.to_ms(clock_timestamp()) || ':' || pg_backend_pid(),
        'operator:' || p_verb, '', -1, -1, now(), p_from, p_to, 'operator', p_detail, 'operator',
        0, p_actor, p_reason, session_user)
$$;

-- Resolves the open alerts of an instance (all, or those of kind p_kind)
-- by hand and queues a resolve to every sink each one's trigger went to.
-- Returns how many it resolved.
CREATE FUNCTION steward.audit_resolve_instance(p_process text, p_key text, p_resolution text,
                                               p_actor text, p_kind text)
    RETURNS bigint
    LANGUAGE sql
    SET search_path = pg_catalog, pg_temp
    AS $$
WITH r AS (UPDATE steward.alerts SET resolved_at = now(), resolution = p_resolution,
                  resolved_by = p_actor, resolved_login = session_user
           WHERE process = p_process AND key = p_key AND resolved_at IS NULL
             AND (p_kind IS NULL OR kind = p_kind)
           RETURNING id, process, key),
q AS (INSERT INTO steward.outbox (kind, destination, alert_id, process, key, payload)
      SELECT 'notification', d.destination, r.id, r.process, r.key,
             jsonb_build_object('event', 'resolve')
      FROM r CROSS JOIN LATERAL (SELECT DISTINCT o.destination FROM steward.outbox o
                                 WHERE o.alert_id = r.id AND o.payload->>'event' = 'trigger') d
      RETURNING 1)
-- q runs to completion unread, as every data-modifying WITH does.
SELECT count(*) FROM r
$$;

-- Cancels the unsent commands of the steps instance (p_process, p_key) has
-- left, judged against its row as this transaction wrote it: the rule of
-- cmdqueue's cmdq_write(), for one instance.
CREATE FUNCTION steward.audit_cancel_left(p_process text, p_key text)
    RETURNS void
    LANGUAGE sql
    SET search_path = pg_catalog, pg_temp
    AS $$
UPDATE steward.commands c SET cancelled_at = now(),
    cancel_reason = CASE WHEN i.status <> 'active'
        THEN 'the instance finished (' || i.status || ' in ' || i.state || ') before it was sent'
        ELSE 'the instance left ' || c.state || ' (step ' || c.step || ') for ' || i.state ||
             ' (step ' || i.step || ') before it was sent' END
FROM steward.instances i
WHERE i.process = p_process AND i.key = p_key AND c.process = i.process AND c.key = i.key
  AND c.sent_at IS NULL AND c.cancelled_at IS NULL AND (c.step < i.step OR i.status <> 'active')
$$;

-- ---- the actions (runtime and operator) ------------------------------------
-- manager/actions.c decides every action (under the instance's advisory
-- lock, reading the rows these lock) and calls one function for its writes,
-- which also writes the audit. Each refuses a row that is gone with
-- no_data_found.

-- The alert an ack or resolve judges, locked for the transaction.
CREATE FUNCTION steward.action_alert_lock(p_id bigint)
    RETURNS TABLE (process text, key text, kind text, state text, resolved boolean,
                   resolved_by text, acked boolean, acked_by text, resolution text)
    LANGUAGE sql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $$
SELECT a.process, a.key, a.kind, a.state, a.resolved_at IS NOT NULL, coalesce(a.resolved_by, ''),
       a.acked_at IS NOT NULL, coalesce(a.acked_by, ''), coalesce(a.resolution, '')
FROM steward.alerts a WHERE a.id = p_id FOR UPDATE
$$;

-- Acknowledges (p_verb 'ack') or resolves ('resolve') open alert p_id,
-- queues the notice to each sink its trigger went to and, when it has an
-- instance, writes the history row. Returns (changed, notified); changed
-- is 0 when the alert was no longer open (or, for ack, already acknowledged).
CREATE FUNCTION steward.action_alert(p_verb text, p_id bigint, p_actor text, p_reason text)
    RETURNS TABLE (changed bigint, notified bigint)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $$
DECLARE
    a steward.alerts%ROWTYPE;
    n bigint;
BEGIN
    IF p_verb = 'ack' THEN
        UPDATE steward.alerts AS al SET acked_at = now(), acked_by = p_actor,
               acked_login = session_user
        WHERE al.id = p_id AND al.resolved_at IS NULL AND al.acked_at IS NULL
        RETURNING al.* INTO a;
    ELSIF p_verb = 'resolve' THEN
        UPDATE steward.alerts AS al SET resolved_at = now(), resolution = 'resolved by ' || p_actor,
               resolved_by = p_actor, resolved_login = session_user
        WHERE al.id = p_id AND al.resolved_at IS NULL
        RETURNING al.* INTO a;
    ELSE
        RAISE EXCEPTION 'not an alert action: %', p_verb USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 0::bigint, 0::bigint;
        RETURN;
    END IF;
    INSERT INTO steward.outbox (kind, destination, alert_id, process, key, payload)
    SELECT 'notification', d.destination, a.id, a.process, a.key,
           jsonb_build_object('event', CASE p_verb WHEN 'ack' THEN 'acknowledge' ELSE 'resolve' END)
    FROM (SELECT DISTINCT o.destination FROM steward.outbox o
          WHERE o.alert_id = a.id AND o.payload->>'event' = 'trigger') d;
    GET DIAGNOSTICS n = ROW_COUNT;
    IF a.process IS NOT NULL AND a.key IS NOT NULL THEN
        PERFORM steward.audit_history(a.process, a.key, NULL, p_verb, a.state, a.state,
                                      format('alert %s (%s)', a.id, a.kind), p_actor, p_reason);
    END IF;
    RETURN QUERY SELECT 1::bigint, n;
END
$$;

-- The instance an action judges and its definition's document, locked.
CREATE FUNCTION steward.action_instance_lock(p_process text, p_key text)
    RETURNS TABLE (version int, state text, status text, claimed_by text, document text,
                   topic_mapping text)
    LANGUAGE sql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $$
SELECT i.version, i.state, i.status, coalesce(i.claimed_by, ''), d.document::text,
       d.topic_mapping::text
FROM steward.instances i
JOIN steward.definitions d ON d.process = i.process AND d.version = i.version
WHERE i.process = p_process AND i.key = p_key FOR UPDATE OF i
$$;

-- Claims (p_claim) or releases the investigation of an instance.
CREATE FUNCTION steward.action_claim(p_process text, p_key text, p_claim boolean, p_actor text,
                                     p_reason text)
    RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $$
DECLARE
    v int;
    s text;
BEGIN
    UPDATE steward.instances AS i
    SET claimed_by = CASE WHEN p_claim THEN p_actor END,
        claimed_at = CASE WHEN p_claim THEN now() END, updated_at = now()
    WHERE i.process = p_process AND i.key = p_key
    RETURNING i.version, i.state INTO v, s;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no instance % of %', p_key, p_process USING ERRCODE = 'no_data_found';
    END IF;
    PERFORM steward.audit_history(p_process, p_key, v, CASE WHEN p_claim THEN 'claim' ELSE 'release' END,
                                  s, s, CASE WHEN p_claim THEN 'claimed by ' ELSE 'released by ' END
                                  || p_actor, p_actor, p_reason);
END
$$;

-- Stores what the engine decided for a close: the instance finished in
-- terminal state p_state (outcome p_status), entered at p_entered_ms as
-- step p_step with token p_token; its unsent commands cancelled and all
-- its open alerts resolved. Returns how many alerts it resolved.
CREATE FUNCTION steward.action_close(p_process text, p_key text, p_state text, p_status text,
                                     p_entered_ms bigint, p_step int, p_token bigint,
                                     p_actor text, p_reason text)
    RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $$
DECLARE
    v int;
    s text;
    resolved bigint;
BEGIN
    SELECT i.version, i.state INTO v, s FROM steward.instances i
    WHERE i.process = p_process AND i.key = p_key;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no instance % of %', p_key, p_process USING ERRCODE = 'no_data_found';
    END IF;
    UPDATE steward.instances AS i SET state = p_state, status = p_status,
        state_entered_at = steward.from_ms(p_entered_ms), deadline_at = NULL,
        next_deadline_at = NULL, overdue = false, step = p_step, token = p_token, attempt = 0,
        resend_pending = false, lease_holder = NULL, lease_expires_at = NULL,
        lease_renewed_at = NULL, updated_at = now()
    WHERE i.process = p_process AND i.key = p_key;
    PERFORM steward.audit_cancel_left(p_process, p_key);
    resolved := steward.audit_resolve_instance(p_process, p_key, 'closed by ' || p_actor, p_actor,
                                               NULL);
    PERFORM steward.audit_history(p_process, p_key, v, 'close', s, p_state, p_status, p_actor,
                                  p_reason);
    RETURN resolved;
END
$$;

-- Stores what the engine decided for a move (p_verb 'move') or a retry
-- ('retry'): the instance's new step fields, and the command it queues
-- (p_command, NULL for none: {"version", "state", "step", "attempt",
-- "token", "topic", "type", "payload", "ce_id", "delay_ms"}, skipped when
-- its ce_id exists). A move also cancels the old step's unsent commands and
-- resolves the instance's deadline alert. Returns how many alerts it
-- resolved.
CREATE FUNCTION steward.action_step(p_verb text, p_process text, p_key text, p_state text,
                                    p_entered_ms bigint, p_step int, p_attempt int,
                                    p_token bigint, p_deadline_ms bigint,
                                    p_next_deadline_ms bigint, p_overdue boolean,
                                    p_resend_pending boolean, p_lease_holder text,
                                    p_lease_expires_ms bigint, p_lease_renewed_ms bigint,
                                    p_command jsonb, p_detail text, p_actor text, p_reason text)
    RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $$
DECLARE
    v int;
    s text;
    resolved bigint := 0;
BEGIN
    IF p_verb NOT IN ('move', 'retry') THEN
        RAISE EXCEPTION 'not a step action: %', p_verb USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT i.version, i.state INTO v, s FROM steward.instances i
    WHERE i.process = p_process AND i.key = p_key;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no instance % of %', p_key, p_process USING ERRCODE = 'no_data_found';
    END IF;
    UPDATE steward.instances AS i SET state = p_state,
        state_entered_at = steward.from_ms(p_entered_ms), step = p_step, attempt = p_attempt,
        token = p_token, deadline_at = steward.from_ms(p_deadline_ms),
        next_deadline_at = steward.from_ms(p_next_deadline_ms), overdue = p_overdue,
        resend_pending = p_resend_pending, lease_holder = p_lease_holder,
        lease_expires_at = steward.from_ms(p_lease_expires_ms),
        lease_renewed_at = steward.from_ms(p_lease_renewed_ms), updated_at = now()
    WHERE i.process = p_process AND i.key = p_key;
    IF p_command IS NOT NULL THEN
        INSERT INTO steward.commands (process, key, version, state, step, attempt, token, topic,
                                      type, payload, ce_id, next_attempt_at)
        VALUES (p_process, p_key, (p_command->>'version')::int, p_command->>'state',
                (p_command->>'step')::int, (p_command->>'attempt')::int,
                (p_command->>'token')::bigint, p_command->>'topic', p_command->>'type',
                p_command->'payload', p_command->>'ce_id',
                now() + (p_command->>'delay_ms')::bigint * interval '1 millisecond')
        ON CONFLICT (ce_id) DO NOTHING;
    END IF;
    IF p_verb = 'move' THEN
        PERFORM steward.audit_cancel_left(p_process, p_key);
        resolved := steward.audit_resolve_instance(p_process, p_key, 'moved by ' || p_actor,
                                                   p_actor, 'deadline');
    END IF;
    PERFORM steward.audit_history(p_process, p_key, v, p_verb, s, p_state, p_detail, p_actor,
                                  p_reason);
    RETURN resolved;
END
$$;

-- A silence of the open alerts of p_process (of one state, of one team)
-- for p_for_ms from now; returns it.
CREATE FUNCTION steward.action_silence(p_process text, p_state text, p_team text, p_for_ms bigint,
                                       p_actor text, p_reason text)
    RETURNS SETOF steward.silences
    LANGUAGE sql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $$
INSERT INTO steward.silences (process, state, team, ends_at, actor, reason, login)
VALUES (p_process, p_state, p_team, now() + steward.ms_interval(p_for_ms), p_actor, p_reason,
        session_user)
RETURNING *
$$;

-- Ends silence p_id now, its reason joined by the one for lifting it; no
-- row when it was not live.
CREATE FUNCTION steward.action_unsilence(p_id bigint, p_actor text, p_reason text)
    RETURNS SETOF steward.silences
    LANGUAGE sql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $$
UPDATE steward.silences SET lifted_at = now(), lifted_by = p_actor,
    lifted_login = session_user, reason = reason || ' / lifted: ' || p_reason
WHERE id = p_id AND lifted_at IS NULL AND ends_at > now()
RETURNING *
$$;

-- ---- retention (runtime) ---------------------------------------------------

-- Deletes up to p_limit rows recorded before p_before, and never in the
-- last hour, from the DEFAULT partition of history (week partitions go
-- whole); returns how many. Clamped rather than refused, so a clock ahead
-- of the database's never stops retention.
CREATE FUNCTION steward.history_prune(p_before timestamptz, p_limit int)
    RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $$
DECLARE
    n bigint;
BEGIN
    p_before := least(p_before, now() - interval '1 hour');
    DELETE FROM steward.history_default WHERE ctid = ANY (ARRAY(
        SELECT ctid FROM steward.history_default WHERE recorded_at < p_before LIMIT p_limit));
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;

-- 0011's drop, which now also refuses a partition whose week ended less
-- than an hour ago: through it, retention removes only what it would keep
-- no longer, never the recent audit.
CREATE OR REPLACE FUNCTION steward.history_week_drop(p_name text)
    RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $$
DECLARE
    upper_bound timestamptz;
BEGIN
    SELECT substring(pg_get_expr(c.relpartbound, c.oid) FROM 'TO \(''([^'']*)''\)')::timestamptz
    INTO upper_bound
    FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
    WHERE i.inhparent = 'steward.history'::regclass AND c.relname = p_name;
    IF p_name = 'history_default' OR NOT FOUND THEN
        RAISE EXCEPTION 'not a week partition of steward.history: %', p_name
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF upper_bound IS NULL OR upper_bound > now() - interval '1 hour' THEN
        RAISE EXCEPTION 'partition % holds history younger than an hour: it is kept', p_name
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    EXECUTE format('DROP TABLE steward.%I', p_name);
END
$$;

REVOKE ALL ON FUNCTION steward.audit_guard() FROM PUBLIC;
REVOKE ALL ON FUNCTION steward.audit_history(text, text, int, text, text, text, text, text, text)
    FROM PUBLIC;
REVOKE ALL ON FUNCTION steward.audit_resolve_instance(text, text, text, text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION steward.audit_cancel_left(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION steward.action_alert_lock(bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION steward.action_alert(text, bigint, text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION steward.action_instance_lock(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION steward.action_claim(text, text, boolean, text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION steward.action_close(text, text, text, text, bigint, int, bigint, text,
    text) FROM PUBLIC;
REVOKE ALL ON FUNCTION steward.action_step(text, text, text, text, bigint, int, int, bigint,
    bigint, bigint, boolean, boolean, text, bigint, bigint, jsonb, text, text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION steward.action_silence(text, text, text, bigint, text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION steward.action_unsilence(bigint, text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION steward.history_prune(timestamptz, int) FROM PUBLIC;

-- A database whose roles were set up before this migration: the role that
-- may run the partition functions (the runtime role) may run the new ones
-- it needs, so retention and the HTTP API keep working until `steward
-- migrate --create-roles` runs again and makes the operator role.
DO $$
DECLARE
    g record;
BEGIN
    FOR g IN SELECT DISTINCT a.grantee::regrole AS name
             FROM pg_proc p, aclexplode(p.proacl) a
             WHERE p.oid = 'steward.history_week_create(text, timestamptz, timestamptz)'::regprocedure
               AND a.privilege_type = 'EXECUTE' AND a.grantee <> p.proowner AND a.grantee <> 0 LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION steward.history_prune(timestamptz, int), '
                       'steward.action_alert_lock(bigint), '
                       'steward.action_alert(text, bigint, text, text), '
                       'steward.action_instance_lock(text, text), '
                       'steward.action_claim(text, text, boolean, text, text), '
                       'steward.action_close(text, text, text, text, bigint, int, bigint, text, text), '
                       'steward.action_step(text, text, text, text, bigint, int, int, bigint, '
                       '  bigint, bigint, boolean, boolean, text, bigint, bigint, jsonb, text, '
                       '  text, text), '
                       'steward.action_silence(text, text, text, bigint, text, text), '
                       'steward.action_unsilence(bigint, text, text) TO %s', g.name);
    END LOOP;
END
$$;
