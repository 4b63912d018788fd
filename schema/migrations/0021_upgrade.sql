-- 0021_upgrade: steward upgrade, which moves open instances of older
-- definition versions to a newer recorded one. manager/operator decides
-- every move with the engine (engine_operator_upgrade()), one instance at a
-- time under its advisory lock, each in its own transaction; these
-- functions read what it decides from and store what it decided, with the
-- audit row, as the schema's owner (like 0019's actions), so the operator
-- role needs no write grant. An instance already on the target version is
-- never selected again: an upgrade cut short (a crash, a signal) is
-- finished by running it again.

-- What the engine needs of each of p_keys (instances of p_process), and
-- their open alerts as JSON [{"id", "kind"}], in key order: a read, with
-- the caller's rights (a dry run reads through it).
CREATE FUNCTION steward.upgrade_rows(p_process text, p_keys text[])
    RETURNS TABLE (key text, version int, state text, status text, claimed_by text,
                   started_ms bigint, entered_ms bigint, deadline_ms bigint,
                   process_deadline_ms bigint, overdue boolean, process_overdue boolean,
                   attempt int, vars text, step int, token bigint, lease_holder text,
                   lease_expires_ms bigint, lease_renewed_ms bigint, resend_pending boolean,
                   alerts text)
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
SELECT i.key, i.version, i.state, i.status, coalesce(i.claimed_by, ''),
       steward.to_ms(i.started_at), steward.to_ms(i.state_entered_at), steward.to_ms(i.deadline_at),
       steward.to_ms(i.process_deadline_at), i.overdue, i.process_overdue, i.attempt, i.vars::text,
       i.step, i.token, i.lease_holder, steward.to_ms(i.lease_expires_at),
       steward.to_ms(i.lease_renewed_at), i.resend_pending,
       coalesce((SELECT json_agg(json_build_object('id', a.id, 'kind', a.kind) ORDER BY a.id)
                 FROM steward.alerts a
                 WHERE a.process = i.process AND a.key = i.key AND a.resolved_at IS NULL)::text,
                '[]')
FROM steward.instances i
WHERE i.process = p_process AND i.key = ANY (p_keys)
ORDER BY i.key
$$;

-- The instance an upgrade moves, as upgrade_rows() reads it, its row locked
-- for the transaction (the caller holds its advisory lock already). No row
-- when it is gone.
CREATE FUNCTION steward.action_upgrade_lock(p_process text, p_key text)
    RETURNS TABLE (key text, version int, state text, status text, claimed_by text,
                   started_ms bigint, entered_ms bigint, deadline_ms bigint,
                   process_deadline_ms bigint, overdue boolean, process_overdue boolean,
                   attempt int, vars text, step int, token bigint, lease_holder text,
                   lease_expires_ms bigint, lease_renewed_ms bigint, resend_pending boolean,
                   alerts text)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $$
BEGIN
    PERFORM 1 FROM steward.instances i WHERE i.process = p_process AND i.key = p_key FOR UPDATE;
    RETURN QUERY SELECT * FROM steward.upgrade_rows(p_process, ARRAY[p_key]);
END
$$;

-- Stores what the engine decided for the upgrade of open instance
-- (p_process, p_key) from version p_from_version to p_version: its new
-- state (p_status: 'active', or the outcome it finished in), step fields,
-- deadlines and lease, its pending re-send over and, being judgeable
-- again, no longer set aside (suspended); the command it queues
-- (p_command as for action_step(), NULL for none); its unsent commands
-- cancelled (p_cancel); its open alerts of the kinds p_resolve names
-- resolved (NULL: every open alert), each resolve queued to every sink its
-- trigger went to; and the history row ('operator:upgrade', version the
-- new one, from_state and to_state, p_detail naming both versions).
-- Returns the alerts it resolved.
CREATE FUNCTION steward.action_upgrade(p_process text, p_key text, p_from_version int,
                                       p_version int, p_state text, p_status text,
                                       p_entered_ms bigint, p_step int, p_attempt int,
                                       p_token bigint, p_deadline_ms bigint,
                                       p_next_deadline_ms bigint, p_process_deadline_ms bigint,
                                       p_overdue boolean, p_process_overdue boolean,
                                       p_lease_holder text, p_lease_expires_ms bigint,
                                       p_lease_renewed_ms bigint, p_command jsonb,
                                       p_cancel boolean, p_resolve text[], p_detail text,
                                       p_actor text, p_reason text)
    RETURNS TABLE (alert_id bigint, alert_kind text)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $$
DECLARE
    v int;
    s text;
BEGIN
    SELECT i.version, i.state INTO v, s FROM steward.instances i
    WHERE i.process = p_process AND i.key = p_key AND i.status = 'active';
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no open instance % of %', p_key, p_process USING ERRCODE = 'no_data_found';
    END IF;
    IF v <> p_from_version OR p_version <= v THEN
        RAISE EXCEPTION 'instance % of % is on version %, not % below %', p_key, p_process, v,
                p_from_version, p_version USING ERRCODE = 'invalid_parameter_value';
    END IF;
    UPDATE steward.instances AS i SET version = p_version, state = p_state, status = p_status,
        state_entered_at = steward.from_ms(p_entered_ms), step = p_step, attempt = p_attempt,
        token = p_token, deadline_at = steward.from_ms(p_deadline_ms),
        next_deadline_at = steward.from_ms(p_next_deadline_ms),
        process_deadline_at = steward.from_ms(p_process_deadline_ms), overdue = p_overdue,
        process_overdue = p_process_overdue, resend_pending = false, lease_holder = p_lease_holder,
        lease_expires_at = steward.from_ms(p_lease_expires_ms),
        lease_renewed_at = steward.from_ms(p_lease_renewed_ms), suspended = NULL,
        updated_at = now()
    WHERE i.process = p_process AND i.key = p_key;
    IF p_cancel THEN
        UPDATE steward.commands AS c SET cancelled_at = now(),
            cancel_reason = CASE WHEN p_status <> 'active'
                THEN 'the instance finished (' || p_status || ' in ' || p_state ||
                     ') on its upgrade to version ' || p_version || ' before it was sent'
                ELSE 'the instance was upgraded to version ' || p_version ||
                     ', a shadow version, before it was sent' END
        WHERE c.process = p_process AND c.key = p_key AND c.sent_at IS NULL
          AND c.cancelled_at IS NULL;
    END IF;
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
    PERFORM steward.audit_history(p_process, p_key, p_version, 'upgrade', s, p_state, p_detail,
                                  p_actor, p_reason);
    RETURN QUERY
    WITH r AS (UPDATE steward.alerts AS a SET resolved_at = now(),
                      resolution = 'upgraded by ' || p_actor || ' to version ' || p_version,
                      resolved_by = p_actor, resolved_login = session_user
               WHERE a.process = p_process AND a.key = p_key AND a.resolved_at IS NULL
                 AND (p_resolve IS NULL OR a.kind = ANY (p_resolve))
               RETURNING a.id, a.kind),
    q AS (INSERT INTO steward.outbox (kind, destination, alert_id, process, key, payload)
          SELECT 'notification', d.destination, r.id, p_process, p_key,
                 jsonb_build_object('event', 'resolve')
          FROM r CROSS JOIN LATERAL (SELECT DISTINCT o.destination FROM steward.outbox o
                                     WHERE o.alert_id = r.id AND o.payload->>'event' = 'trigger') d
          RETURNING 1)
    -- q runs to completion unread, as every data-modifying WITH does.
    SELECT r.id, r.kind FROM r ORDER BY r.id;
END
$$;

REVOKE ALL ON FUNCTION steward.action_upgrade_lock(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION steward.action_upgrade(text, text, int, int, text, text, bigint, int, int,
    bigint, bigint, bigint, bigint, boolean, boolean, text, bigint, bigint, jsonb, boolean, text[],
    text, text, text) FROM PUBLIC;

-- A database whose roles were made before this migration: the roles that
-- may run the other actions (the operator and runtime roles of `steward
-- migrate --create-roles`) may run these; the next --create-roles grants
-- them by name as well.
DO $$
DECLARE
    g record;
BEGIN
    FOR g IN SELECT DISTINCT a.grantee::regrole AS name
             FROM pg_proc p, aclexplode(p.proacl) a
             WHERE p.oid = 'steward.action_step(text, text, text, text, bigint, int, int, bigint, '
                           'bigint, bigint, boolean, boolean, text, bigint, bigint, jsonb, text, '
                           'text, text)'::regprocedure
               AND a.privilege_type = 'EXECUTE' AND a.grantee <> p.proowner AND a.grantee <> 0 LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION steward.action_upgrade_lock(text, text), '
                       'steward.action_upgrade(text, text, int, int, text, text, bigint, int, '
                       '  int, bigint, bigint, bigint, bigint, boolean, boolean, text, bigint, '
                       '  bigint, jsonb, boolean, text[], text, text, text) TO %s', g.name);
    END LOOP;
END
$$;
