/*
 * actions - operator actions on alerts and instances; see actions.h.
 *
 * Every action follows one path: BEGIN, the instance's advisory lock, the
 * row read FOR UPDATE, the check that it is still as the request expects,
 * the change, the history row, the notifications, COMMIT. Any refusal or
 * failure rolls back, so a refused action leaves nothing behind.
 */
#include "manager/actions.h"

#include "common/db.h"
#include "common/err.h"
#include "definitions/def.h"
#include "engine/engine.h"
#include "engine/template.h"
#include "manager/alerts.h"
#include "manager/cmdqueue.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *action_verb_name(action_verb_t verb)
{
    switch (verb) {
    case ACTION_ACK:
        return "ack";
    case ACTION_RESOLVE:
        return "resolve";
    case ACTION_CLOSE:
        return "close";
    case ACTION_MOVE:
        return "move";
    case ACTION_RETRY:
        return "retry";
    case ACTION_CLAIM:
        return "claim";
    case ACTION_RELEASE:
        return "release";
    }
    return "unknown";
}

static action_rc_t fail(action_rc_t rc, char *errstr, size_t errstr_size, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static action_rc_t fail(action_rc_t rc, char *errstr, size_t errstr_size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(errstr, errstr_size, fmt, ap);
    va_end(ap);
    return rc;
}

/* Takes the lock every batch takes for this instance, for the transaction. */
static bool lock_instance(PGconn *conn, const char *process, const char *key, char *errstr,
                          size_t errstr_size)
{
    const char *params[2] = {process, key};
    return db_exec(conn, "locking the instance",
                   "SELECT pg_advisory_xact_lock(steward.instance_lock_key($1, $2))", 2, params,
                   errstr, errstr_size) == ERR_OK;
}

static const char history_sql[] =
    "INSERT INTO steward.history (process, key, version, event_id, event_type, topic, "
    "  partition, \"offset\", event_time, from_state, to_state, outcome, detail, replica, epoch, "
    "  actor, reason) "
    "VALUES ($1, $2, $3::int, 'operator:' || $4 || ':' || steward.to_ms(clock_timestamp()) || "
    "  ':' || pg_backend_pid(), 'operator:' || $4, '', -1, -1, now(), $5, $6, 'operator', $7, "
    "  'operator', 0, $8, $9)";

static bool write_history(PGconn *conn, const action_request_t *req, action_verb_t verb,
                          const char *process, const char *key, const char *version,
                          const char *from, const char *to, const char *detail, char *errstr,
                          size_t errstr_size)
{
    const char *params[9] = {process, key,        version,    action_verb_name(verb), from, to,
                             detail,  req->actor, req->reason};
    return db_exec(conn, "recording the action in history", history_sql, 9, params, errstr,
                   errstr_size) == ERR_OK;
}

/*
 * Resolves the open alerts an instance has ($1, $2; all of them, or those
 * of kind $5 when given) and queues a resolve to every sink each one's
 * trigger was queued to. Returns the number resolved, or -1.
 */
static const char resolve_instance_sql[] =
    "WITH r AS (UPDATE steward.alerts SET resolved_at = now(), resolution = $3, "
    "    resolved_by = $4 "
    "  WHERE process = $1 AND key = $2 AND resolved_at IS NULL AND ($5::text IS NULL OR kind = $5) "
    "  RETURNING id, process, key), "
    "q AS (INSERT INTO steward.outbox (kind, destination, alert_id, process, key, payload) "
    "  SELECT 'notification', d.destination, r.id, r.process, r.key, "
    "    jsonb_build_object('event', 'resolve') "
    "  FROM r CROSS JOIN LATERAL (SELECT DISTINCT o.destination FROM steward.outbox o "
    "    WHERE o.alert_id = r.id AND o.payload->>'event' = 'trigger') d RETURNING 1) "
    "SELECT (SELECT count(*) FROM r), (SELECT count(*) FROM q)";

static long resolve_instance_alerts(PGconn *conn, const char *process, const char *key,
                                    const char *resolution, const char *actor, const char *kind,
                                    char *errstr, size_t errstr_size)
{
    const char *params[5] = {process, key, resolution, actor, kind};
    err_class_t cls;
    PGresult *res = db_query(conn, "resolving the instance's alerts", resolve_instance_sql, 5,
                             params, &cls, errstr, errstr_size);
    if (res == NULL)
        return -1;
    long n = atol(PQgetvalue(res, 0, 0));
    PQclear(res);
    return n;
}

static action_rc_t commit(PGconn *conn, char *errstr, size_t errstr_size)
{
    if (db_exec(conn, "committing the action", "COMMIT", 0, NULL, errstr, errstr_size) != ERR_OK)
        return ACTION_FAILED;
    return ACTION_OK;
}

/* ---- alerts ---- */

static const char alert_sql[] = "SELECT process, key, kind, state, "
                                "  resolved_at IS NOT NULL, coalesce(resolved_by, ''), "
                                "  acked_at IS NOT NULL, coalesce(acked_by, ''), "
                                "  coalesce(resolution, '') "
                                "FROM steward.alerts WHERE id = $1::bigint";

static const char ack_sql[] =
    "WITH a AS (UPDATE steward.alerts SET acked_at = now(), acked_by = $2 "
    "  WHERE id = $1::bigint AND resolved_at IS NULL AND acked_at IS NULL RETURNING id), "
    "q AS (INSERT INTO steward.outbox (kind, destination, alert_id, process, key, payload) "
    "  SELECT 'notification', d.destination, al.id, al.process, al.key, "
    "    jsonb_build_object('event', 'acknowledge') "
    "  FROM a JOIN steward.alerts al ON al.id = a.id CROSS JOIN LATERAL ("
    "    SELECT DISTINCT o.destination FROM steward.outbox o "
    "    WHERE o.alert_id = al.id AND o.payload->>'event' = 'trigger') d RETURNING 1) "
    "SELECT (SELECT count(*) FROM a), (SELECT count(*) FROM q)";

static const char resolve_alert_sql[] =
    "WITH a AS (UPDATE steward.alerts SET resolved_at = now(), resolution = $3, resolved_by = $2 "
    "  WHERE id = $1::bigint AND resolved_at IS NULL RETURNING id, process, key), "
    "q AS (INSERT INTO steward.outbox (kind, destination, alert_id, process, key, payload) "
    "  SELECT 'notification', d.destination, a.id, a.process, a.key, "
    "    jsonb_build_object('event', 'resolve') "
    "  FROM a CROSS JOIN LATERAL (SELECT DISTINCT o.destination FROM steward.outbox o "
    "    WHERE o.alert_id = a.id AND o.payload->>'event' = 'trigger') d RETURNING 1) "
    "SELECT (SELECT count(*) FROM a), (SELECT count(*) FROM q)";

static action_rc_t alert_action(PGconn *conn, action_verb_t verb, const action_request_t *req,
                                json_t **result, char *errstr, size_t errstr_size)
{
    char id[32];
    snprintf(id, sizeof id, "%lld", req->alert_id);
    const char *params[3] = {id, req->actor, NULL};
    err_class_t cls;
    action_rc_t rc = ACTION_FAILED;
    char *process = NULL, *key = NULL;
    PGresult *res =
        db_query(conn, "reading the alert", alert_sql, 1, params, &cls, errstr, errstr_size);
    if (res == NULL)
        return ACTION_FAILED;
    if (PQntuples(res) == 0) {
        PQclear(res);
        return fail(ACTION_NOT_FOUND, errstr, errstr_size, "no alert %s", id);
    }
    if (!PQgetisnull(res, 0, 0) && !PQgetisnull(res, 0, 1)) {
        process = strdup(PQgetvalue(res, 0, 0));
        key = strdup(PQgetvalue(res, 0, 1));
    }
    PQclear(res);

    if (db_exec(conn, "starting the action", "BEGIN", 0, NULL, errstr, errstr_size) != ERR_OK)
        goto done;
    if (process != NULL && !lock_instance(conn, process, key, errstr, errstr_size))
        goto done;
    /* Read again under the lock, and lock the row (a blind alert has no
     * instance lock): what counts is the alert as it is now. */
    char locked_sql[sizeof alert_sql + 16];
    snprintf(locked_sql, sizeof locked_sql, "%s FOR UPDATE", alert_sql);
    if ((res = db_query(conn, "reading the alert", locked_sql, 1, params, &cls, errstr,
                        errstr_size)) == NULL)
        goto done;
    if (PQntuples(res) == 0) { /* deleted meanwhile (retention) */
        rc = fail(ACTION_NOT_FOUND, errstr, errstr_size, "no alert %s", id);
        PQclear(res);
        goto done;
    }
    bool resolved = strcmp(PQgetvalue(res, 0, 4), "t") == 0;
    bool acked = strcmp(PQgetvalue(res, 0, 6), "t") == 0;
    char kind[64], state[256];
    snprintf(kind, sizeof kind, "%s", PQgetvalue(res, 0, 2));
    snprintf(state, sizeof state, "%s", PQgetvalue(res, 0, 3));
    if (resolved) {
        const char *by = PQgetvalue(res, 0, 5);
        rc = fail(ACTION_CONFLICT, errstr, errstr_size,
                  "alert %s is already resolved (%s%s%s); nothing to %s", id, PQgetvalue(res, 0, 8),
                  *by != '\0' ? " by " : "", by, action_verb_name(verb));
        PQclear(res);
        goto done;
    }
    if (verb == ACTION_ACK && acked) {
        rc = fail(ACTION_CONFLICT, errstr, errstr_size, "alert %s is already acknowledged by %s",
                  id, PQgetvalue(res, 0, 7));
        PQclear(res);
        goto done;
    }
    PQclear(res);

    char resolution[ACTION_ACTOR_MAX + 64];
    snprintf(resolution, sizeof resolution, "resolved by %s", req->actor);
    params[2] = resolution;
    res = db_query(conn, verb == ACTION_ACK ? "acknowledging the alert" : "resolving the alert",
                   verb == ACTION_ACK ? ack_sql : resolve_alert_sql, verb == ACTION_ACK ? 2 : 3,
                   params, &cls, errstr, errstr_size);
    if (res == NULL)
        goto done;
    long changed = atol(PQgetvalue(res, 0, 0)), notified = atol(PQgetvalue(res, 0, 1));
    PQclear(res);
    if (changed != 1) { /* cannot happen with the row locked; never report a no-op as done */
        rc =
            fail(ACTION_CONFLICT, errstr, errstr_size, "alert %s changed meanwhile; try again", id);
        goto done;
    }

    if (process != NULL) {
        char detail[128];
        snprintf(detail, sizeof detail, "alert %s (%s)", id, kind);
        if (!write_history(conn, req, verb, process, key, NULL, *state ? state : NULL,
                           *state ? state : NULL, detail, errstr, errstr_size))
            goto done;
    }
    if ((rc = commit(conn, errstr, errstr_size)) != ACTION_OK)
        goto done;
    *result = json_pack("{s:s, s:I, s:s, s:s, s:s, s:{s:b, s:b}, s:{s:b, s:b}, s:I}", "action",
                        action_verb_name(verb), "alert", (json_int_t) req->alert_id, "kind", kind,
                        "actor", req->actor, "reason", req->reason, "before", "resolved", 0,
                        "acknowledged", acked, "after", "resolved", verb == ACTION_RESOLVE,
                        "acknowledged", verb == ACTION_ACK || acked, "notifications",
                        (json_int_t) notified);
done:
    if (rc != ACTION_OK)
        db_rollback(conn);
    free(process);
    free(key);
    return rc;
}

/* ---- instances ---- */

static const char instance_sql[] =
    "SELECT i.version, i.state, i.status, coalesce(i.claimed_by, ''), d.document::text, "
    "  d.topic_mapping::text "
    "FROM steward.instances i "
    "JOIN steward.definitions d ON d.process = i.process AND d.version = i.version "
    "WHERE i.process = $1 AND i.key = $2 FOR UPDATE OF i";

static const char close_sql[] =
    "UPDATE steward.instances SET state = $3, status = $4, state_entered_at = now(), "
    "  deadline_at = NULL, next_deadline_at = NULL, overdue = false, step = step + 1, "
    "  attempt = 0, resend_pending = false, lease_holder = NULL, lease_expires_at = NULL, "
    "  lease_renewed_at = NULL, updated_at = now() "
    "WHERE process = $1 AND key = $2";

static const char claim_sql[] =
    "UPDATE steward.instances SET claimed_by = $3, claimed_at = now(), updated_at = now() "
    "WHERE process = $1 AND key = $2";

static const char release_sql[] =
    "UPDATE steward.instances SET claimed_by = NULL, claimed_at = NULL, updated_at = now() "
    "WHERE process = $1 AND key = $2";

/* What the engine needs to decide a re-send or a move, read under the lock. */
static const char engine_read_sql[] =
    "SELECT steward.to_ms(started_at), steward.to_ms(state_entered_at), "
    "  steward.to_ms(deadline_at), steward.to_ms(process_deadline_at), overdue, "
    "  process_overdue, attempt, vars::text, step, token, lease_holder, "
    "  steward.to_ms(lease_expires_at), steward.to_ms(lease_renewed_at), resend_pending, "
    "  steward.to_ms(now()) "
    "FROM steward.instances WHERE process = $1 AND key = $2";

/* What the engine decided, stored as it decided it. */
static const char engine_write_sql[] =
    "UPDATE steward.instances SET state = $3, state_entered_at = steward.from_ms($4::bigint), "
    "  step = $5::int, attempt = $6::int, token = $7::bigint, "
    "  deadline_at = steward.from_ms($8::bigint), next_deadline_at = steward.from_ms($9::bigint), "
    "  overdue = $10::boolean, resend_pending = $11::boolean, lease_holder = $12, "
    "  lease_expires_at = steward.from_ms($13::bigint), "
    "  lease_renewed_at = steward.from_ms($14::bigint), updated_at = now() "
    "WHERE process = $1 AND key = $2";

static int64_t ms_at(const PGresult *res, int col)
{
    return PQgetisnull(res, 0, col) ? ENGINE_NO_DEADLINE
                                    : strtoll(PQgetvalue(res, 0, col), NULL, 10);
}

/*
 * The instance as the engine sees it, in `state` of def, with the
 * database's clock in *now_ms; read under the lock instance_action() took.
 * On true the caller clears *inst.
 */
static bool read_engine_instance(PGconn *conn, const def_t *def, long state, const char *key,
                                 engine_instance_t *inst, int64_t *now_ms, char *errstr,
                                 size_t errstr_size)
{
    const char *params[2] = {def->process, key};
    err_class_t cls;
    PGresult *res = db_query(conn, "reading the instance", engine_read_sql, 2, params, &cls, errstr,
                             errstr_size);
    if (res == NULL)
        return false;
    engine_instance_init(inst);
    inst->exists = true;
    inst->version = def->version;
    inst->state = state;
    inst->started_ms = ms_at(res, 0);
    inst->state_entered_ms = ms_at(res, 1);
    inst->deadline_ms = ms_at(res, 2);
    inst->process_deadline_ms = ms_at(res, 3);
    inst->overdue = strcmp(PQgetvalue(res, 0, 4), "t") == 0;
    inst->process_overdue = strcmp(PQgetvalue(res, 0, 5), "t") == 0;
    inst->attempt = atoi(PQgetvalue(res, 0, 6));
    inst->vars = json_loads(PQgetvalue(res, 0, 7), 0, NULL);
    inst->step = atoi(PQgetvalue(res, 0, 8));
    inst->token = strtoll(PQgetvalue(res, 0, 9), NULL, 10);
    inst->lease_holder = PQgetisnull(res, 0, 10) ? NULL : strdup(PQgetvalue(res, 0, 10));
    inst->lease_expires_ms = ms_at(res, 11);
    inst->lease_renewed_ms = ms_at(res, 12);
    inst->resend_pending = strcmp(PQgetvalue(res, 0, 13), "t") == 0;
    *now_ms = ms_at(res, 14);
    PQclear(res);
    return true;
}

/* `ms` as a parameter in buf, or NULL for ENGINE_NO_DEADLINE. */
static const char *ms_param(int64_t ms, char *buf, size_t size)
{
    if (ms == ENGINE_NO_DEADLINE)
        return NULL;
    snprintf(buf, size, "%" PRId64, ms);
    return buf;
}

static bool write_engine_instance(PGconn *conn, const def_t *def, const char *key,
                                  const engine_instance_t *inst, char *errstr, size_t errstr_size)
{
    char entered[32], step[16], attempt[16], token[32], deadline[32], next[32], expires[32],
        renewed[32];
    snprintf(step, sizeof step, "%d", inst->step);
    snprintf(attempt, sizeof attempt, "%d", inst->attempt);
    snprintf(token, sizeof token, "%" PRId64, inst->token);
    const char *params[14] = {
        def->process,
        key,
        def->states[inst->state].name,
        ms_param(inst->state_entered_ms, entered, sizeof entered),
        step,
        attempt,
        token,
        ms_param(inst->deadline_ms, deadline, sizeof deadline),
        ms_param(engine_next_deadline(def, inst), next, sizeof next),
        inst->overdue ? "true" : "false",
        inst->resend_pending ? "true" : "false",
        inst->lease_holder,
        ms_param(inst->lease_expires_ms, expires, sizeof expires),
        ms_param(inst->lease_renewed_ms, renewed, sizeof renewed),
    };
    return db_exec(conn, "recording the instance", engine_write_sql, 14, params, errstr,
                   errstr_size) == ERR_OK;
}

/*
 * Queues `cmd` when cmd->send (in *sent, what was queued) and, when the
 * instance left a step (`left_step`), cancels the unsent commands of the
 * steps before, as when an event moves it; write the instance first. A
 * command whose template cannot be rendered is refused with the variable
 * it lacks: nothing is queued and no alert is opened, since the operator
 * learns it here.
 */
static action_rc_t queue_command(PGconn *conn, const def_t *def, const char *key,
                                 const engine_instance_t *inst, const engine_command_t *cmd,
                                 bool left_step, json_t **sent, char *errstr, size_t errstr_size)
{
    action_rc_t rc = ACTION_FAILED;
    cmdq_t q = {0};
    alert_batch_t alerts = {0};
    const def_state_t *st = &def->states[cmd->state];
    if (cmd->send) {
        template_ctx_t ctx = {key, def->process, st->name, cmd->attempt, cmd->token, inst->vars};
        char why[512];
        json_t *payload = template_render(st->command->payload, &ctx, why, sizeof why);
        if (payload == NULL) {
            rc = fail(ACTION_REFUSED, errstr, errstr_size,
                      "the command %s of %s cannot be rendered: %s; nothing was changed",
                      st->command->type, st->name, why);
            goto done;
        }
        json_decref(payload);
        if (!cmdq_add(&q, &alerts, def, key, inst->vars, cmd)) {
            rc = fail(ACTION_FAILED, errstr, errstr_size, "queueing the command: out of memory");
            goto done;
        }
    }
    if (left_step)
        cmdq_left(&q, def->process, key);
    if (cmdq_write(conn, &q, errstr, errstr_size) != ERR_OK)
        goto done;
    if (cmd->send) {
        char ce_id[65];
        engine_command_id(def->process, key, cmd->step, cmd->attempt, ce_id);
        *sent = json_pack("{s:s, s:s, s:i, s:i, s:I, s:s}", "type", st->command->type, "topic",
                          st->command->topic, "step", cmd->step, "attempt", cmd->attempt, "token",
                          (json_int_t) cmd->token, "ce_id", ce_id);
    }
    rc = ACTION_OK;
done:
    cmdq_clear(&q);
    alert_batch_clear(&alerts);
    return rc;
}

/*
 * steward retry and steward move, decided by the engine: a retry re-sends
 * the current step's command (engine_operator_resend()), a move enters
 * state `to` as an event would (engine_operator_move()), with the state's
 * command in active mode, and cancels the old step's unsent commands. The
 * instance is stored as the engine left it and the command queued through
 * cmdqueue, in this transaction. Refuses (nothing changed) when the engine
 * says no or the template cannot be rendered. detail receives what the
 * history row says ("" for a move that sent nothing).
 */
static action_rc_t engine_action(PGconn *conn, const def_t *def, action_verb_t verb, long from,
                                 long to, const char *key, json_t **sent, char *detail,
                                 size_t detail_size, char *errstr, size_t errstr_size)
{
    engine_instance_t inst;
    int64_t now_ms;
    if (!read_engine_instance(conn, def, from, key, &inst, &now_ms, errstr, errstr_size))
        return ACTION_FAILED;
    engine_command_t cmd;
    action_rc_t rc = ACTION_FAILED;
    bool retry = verb == ACTION_RETRY;
    bool decided = retry ? engine_operator_resend(def, &inst, now_ms, &cmd, detail, detail_size)
                         : engine_operator_move(def, &inst, to, now_ms, &cmd, detail, detail_size);
    if (!decided)
        rc = fail(ACTION_REFUSED, errstr, errstr_size, "%s; %s", detail,
                  retry ? "nothing was sent. Use steward move to restart the step's deadline, "
                          "or steward close to finish the instance"
                        : "nothing was changed");
    else if (write_engine_instance(conn, def, key, &inst, errstr, errstr_size))
        rc = queue_command(conn, def, key, &inst, &cmd, !retry, sent, errstr, errstr_size);
    engine_instance_clear(&inst);
    return rc;
}

/* Close leaves the step (a new step number, like every entry): its unsent
 * commands are cancelled, as when an event moves it. */
static bool cancel_left(PGconn *conn, const char *process, const char *key, char *errstr,
                        size_t errstr_size)
{
    cmdq_t q = {0};
    cmdq_left(&q, process, key);
    bool ok = cmdq_write(conn, &q, errstr, errstr_size) == ERR_OK;
    cmdq_clear(&q);
    return ok;
}

/* The terminal state for `target`, an outcome or a terminal state's name. */
static long terminal_state(const def_t *def, const char *target)
{
    for (size_t i = 0; i < def->n_states; i++)
        if (def->states[i].terminal != NULL && strcmp(def->states[i].terminal, target) == 0)
            return (long) i;
    long s = def_find_state(def, target);
    return s >= 0 && def->states[s].terminal != NULL ? s : -1;
}

static void list_states(const def_t *def, bool terminal, char *out, size_t out_size)
{
    size_t len = 0;
    out[0] = '\0';
    for (size_t i = 0; i < def->n_states && len + 1 < out_size; i++) {
        const def_state_t *st = &def->states[i];
        if ((st->terminal != NULL) != terminal)
            continue;
        int w = snprintf(out + len, out_size - len, "%s%s", len > 0 ? ", " : "",
                         terminal ? st->terminal : st->name);
        if (w < 0 || (size_t) w >= out_size - len)
            break;
        len += (size_t) w;
    }
}

static action_rc_t instance_action(PGconn *conn, action_verb_t verb, const action_request_t *req,
                                   json_t **result, char *errstr, size_t errstr_size)
{
    const char *process = req->process, *key = req->key;
    const char *params[4] = {process, key, NULL, NULL};
    err_class_t cls;
    action_rc_t rc = ACTION_FAILED;
    PGresult *res = NULL;
    def_t *def = NULL;
    json_t *command = NULL; /* retry and move: what was queued */
    char version[16], from[512], status[256], claimed[ACTION_ACTOR_MAX + 1], to[512] = "",
                                                                             to_status[256];

    if (db_exec(conn, "starting the action", "BEGIN", 0, NULL, errstr, errstr_size) != ERR_OK)
        goto done;
    if (!lock_instance(conn, process, key, errstr, errstr_size))
        goto done;
    if ((res = db_query(conn, "reading the instance", instance_sql, 2, params, &cls, errstr,
                        errstr_size)) == NULL)
        goto done;
    if (PQntuples(res) == 0) {
        rc = fail(ACTION_NOT_FOUND, errstr, errstr_size, "no instance %s of %s", key, process);
        goto done;
    }
    snprintf(version, sizeof version, "%s", PQgetvalue(res, 0, 0));
    snprintf(from, sizeof from, "%s", PQgetvalue(res, 0, 1));
    snprintf(status, sizeof status, "%s", PQgetvalue(res, 0, 2));
    snprintf(claimed, sizeof claimed, "%s", PQgetvalue(res, 0, 3));
    snprintf(to_status, sizeof to_status, "%s", status);
    if (verb == ACTION_CLOSE || verb == ACTION_MOVE || verb == ACTION_RETRY) {
        def_problems_t problems = {0};
        const char *doc = PQgetvalue(res, 0, 4);
        def = def_load_json(doc, strlen(doc), "steward.definitions", &problems);
        /* The document keeps the definition's topic names; a command goes
         * to the broker's, by the mapping the daemon recorded beside it. */
        json_t *mapping =
            PQgetisnull(res, 0, 5) ? NULL : json_loads(PQgetvalue(res, 0, 5), 0, NULL);
        if (def != NULL && !def_map_recorded(def, mapping, &problems)) {
            def_free(def);
            def = NULL;
        }
        json_decref(mapping);
        if (def == NULL)
            rc = fail(ACTION_REFUSED, errstr, errstr_size,
                      "definition version %s of %s no longer loads (%s); fix it before acting "
                      "on its instances",
                      version, process, problems.n > 0 ? problems.items[0].message : "?");
        def_problems_clear(&problems);
        if (def == NULL)
            goto done;
    }
    PQclear(res);
    res = NULL;

    if (verb != ACTION_CLAIM && verb != ACTION_RELEASE && strcmp(status, "active") != 0) {
        rc = fail(ACTION_CONFLICT, errstr, errstr_size,
                  "instance %s of %s already finished (%s in %s); nothing to %s", key, process,
                  status, from, action_verb_name(verb));
        goto done;
    }
    if (*claimed != '\0' && strcmp(claimed, req->actor) != 0 && verb != ACTION_CLAIM) {
        rc = fail(ACTION_CONFLICT, errstr, errstr_size,
                  "instance %s of %s is claimed by %s; only they can %s it (or they release it "
                  "first)",
                  key, process, claimed, action_verb_name(verb));
        goto done;
    }

    const char *detail = NULL;
    char detail_buf[ACTION_ACTOR_MAX + 64], retry_detail[512], sent_detail[256];
    long resolved = 0;
    switch (verb) {
    case ACTION_RETRY: {
        long s = def_find_state(def, from);
        if (s < 0) {
            rc = fail(ACTION_REFUSED, errstr, errstr_size,
                      "state %s is not declared by version %s of %s; nothing was sent", from,
                      version, process);
            goto done;
        }
        if ((rc = engine_action(conn, def, verb, s, s, key, &command, retry_detail,
                                sizeof retry_detail, errstr, errstr_size)) != ACTION_OK)
            goto done;
        rc = ACTION_FAILED; /* until committed */
        detail = retry_detail;
        snprintf(to, sizeof to, "%s", from);
        break;
    }
    case ACTION_CLAIM:
        if (*claimed != '\0') {
            rc = fail(ACTION_CONFLICT, errstr, errstr_size,
                      "instance %s of %s is already claimed by %s", key, process, claimed);
            goto done;
        }
        params[2] = req->actor;
        if (db_exec(conn, "claiming the instance", claim_sql, 3, params, errstr, errstr_size) !=
            ERR_OK)
            goto done;
        snprintf(detail_buf, sizeof detail_buf, "claimed by %s", req->actor);
        detail = detail_buf;
        snprintf(to, sizeof to, "%s", from);
        break;
    case ACTION_RELEASE:
        if (*claimed == '\0') {
            rc = fail(ACTION_CONFLICT, errstr, errstr_size,
                      "instance %s of %s is not claimed; nothing to release", key, process);
            goto done;
        }
        if (db_exec(conn, "releasing the instance", release_sql, 2, params, errstr, errstr_size) !=
            ERR_OK)
            goto done;
        snprintf(detail_buf, sizeof detail_buf, "released by %s", req->actor);
        detail = detail_buf;
        snprintf(to, sizeof to, "%s", from);
        break;
    case ACTION_MOVE: {
        long s = def_find_state(def, req->target);
        if (s < 0 || def->states[s].terminal != NULL) {
            char states[1024];
            list_states(def, false, states, sizeof states);
            rc = fail(ACTION_BAD_REQUEST, errstr, errstr_size,
                      "%s is not a non-terminal state of %s version %s (states: %s)%s", req->target,
                      process, version, states,
                      s >= 0 ? "; use steward close to finish an instance" : "");
            goto done;
        }
        long f = def_find_state(def, from);
        if (f < 0) {
            rc = fail(ACTION_REFUSED, errstr, errstr_size,
                      "state %s is not declared by version %s of %s; nothing was changed", from,
                      version, process);
            goto done;
        }
        if ((rc = engine_action(conn, def, verb, f, s, key, &command, sent_detail,
                                sizeof sent_detail, errstr, errstr_size)) != ACTION_OK)
            goto done;
        rc = ACTION_FAILED; /* until committed */
        snprintf(to, sizeof to, "%s", def->states[s].name);
        /* The old state's missed deadline is over; the process's is not. */
        snprintf(detail_buf, sizeof detail_buf, "moved by %s", req->actor);
        if ((resolved = resolve_instance_alerts(conn, process, key, detail_buf, req->actor,
                                                "deadline", errstr, errstr_size)) < 0)
            goto done;
        detail = sent_detail[0] != '\0' ? sent_detail : NULL;
        break;
    }
    case ACTION_CLOSE: {
        long s = terminal_state(def, req->target);
        if (s < 0) {
            char outcomes[1024];
            list_states(def, true, outcomes, sizeof outcomes);
            rc = fail(ACTION_BAD_REQUEST, errstr, errstr_size,
                      "%s is not an outcome of %s version %s (outcomes: %s)", req->target, process,
                      version, outcomes);
            goto done;
        }
        params[2] = def->states[s].name;
        params[3] = def->states[s].terminal;
        if (db_exec(conn, "closing the instance", close_sql, 4, params, errstr, errstr_size) !=
            ERR_OK)
            goto done;
        if (!cancel_left(conn, process, key, errstr, errstr_size))
            goto done;
        snprintf(to, sizeof to, "%s", def->states[s].name);
        snprintf(to_status, sizeof to_status, "%s", def->states[s].terminal);
        snprintf(detail_buf, sizeof detail_buf, "closed by %s", req->actor);
        if ((resolved = resolve_instance_alerts(conn, process, key, detail_buf, req->actor, NULL,
                                                errstr, errstr_size)) < 0)
            goto done;
        detail = def->states[s].terminal;
        break;
    }
    default:
        rc = fail(ACTION_BAD_REQUEST, errstr, errstr_size, "%s is not an instance action",
                  action_verb_name(verb));
        goto done;
    }

    if (!write_history(conn, req, verb, process, key, version, from, to, detail, errstr,
                       errstr_size))
        goto done;
    if ((rc = commit(conn, errstr, errstr_size)) != ACTION_OK)
        goto done;
    *result = json_pack("{s:s, s:s, s:s, s:s, s:s, s:{s:s, s:s, s:s?}, s:{s:s, s:s, s:s?}, s:I}",
                        "action", action_verb_name(verb), "process", process, "key", key, "actor",
                        req->actor, "reason", req->reason, "before", "state", from, "status",
                        status, "claimed_by", *claimed ? claimed : NULL, "after", "state", to,
                        "status", to_status, "claimed_by",
                        verb == ACTION_CLAIM     ? req->actor
                        : verb == ACTION_RELEASE ? NULL
                        : *claimed               ? claimed
                                                 : NULL,
                        "alerts_resolved", (json_int_t) resolved);
    if (*result != NULL && command != NULL) {
        json_object_set_new(*result, "command", command);
        command = NULL;
    }
done:
    json_decref(command);
    PQclear(res);
    if (rc != ACTION_OK)
        db_rollback(conn);
    def_free(def);
    return rc;
}

action_rc_t action_run(PGconn *conn, action_verb_t verb, const action_request_t *req,
                       json_t **result, char *errstr, size_t errstr_size)
{
    *result = NULL;
    if (req->actor == NULL || *req->actor == '\0' || strlen(req->actor) > ACTION_ACTOR_MAX)
        return fail(ACTION_BAD_REQUEST, errstr, errstr_size,
                    "an action needs an actor of 1 to %d bytes", ACTION_ACTOR_MAX);
    if (req->reason == NULL || *req->reason == '\0' || strlen(req->reason) > ACTION_REASON_MAX)
        return fail(ACTION_BAD_REQUEST, errstr, errstr_size,
                    "an action needs a reason (--reason) of 1 to %d bytes: it is the audit "
                    "trail's answer to why",
                    ACTION_REASON_MAX);
    if (verb == ACTION_ACK || verb == ACTION_RESOLVE) {
        if (req->alert_id <= 0)
            return fail(ACTION_BAD_REQUEST, errstr, errstr_size,
                        "an alert id is a positive number");
        return alert_action(conn, verb, req, result, errstr, errstr_size);
    }
    if (req->process == NULL || req->key == NULL)
        return fail(ACTION_BAD_REQUEST, errstr, errstr_size, "%s needs a PROCESS and a KEY",
                    action_verb_name(verb));
    if ((verb == ACTION_CLOSE || verb == ACTION_MOVE) &&
        (req->target == NULL || *req->target == '\0'))
        return fail(ACTION_BAD_REQUEST, errstr, errstr_size, "%s needs %s", action_verb_name(verb),
                    verb == ACTION_CLOSE ? "--as OUTCOME" : "--to STATE");
    return instance_action(conn, verb, req, result, errstr, errstr_size);
}

/* ---- silences ---- */

static bool check_audit(const char *actor, const char *reason, char *errstr, size_t errstr_size)
{
    if (actor == NULL || *actor == '\0' || strlen(actor) > ACTION_ACTOR_MAX) {
        fail(ACTION_BAD_REQUEST, errstr, errstr_size, "an action needs an actor of 1 to %d bytes",
             ACTION_ACTOR_MAX);
        return false;
    }
    if (reason == NULL || *reason == '\0' || strlen(reason) > ACTION_REASON_MAX) {
        fail(ACTION_BAD_REQUEST, errstr, errstr_size,
             "an action needs a reason (--reason) of 1 to %d bytes", ACTION_REASON_MAX);
        return false;
    }
    return true;
}

static const char silence_columns[] =
    "json_build_object('id', id, 'process', process, 'state', state, 'team', team, "
    "  'starts_at', steward.rfc3339(starts_at), 'ends_at', steward.rfc3339(ends_at), "
    "  'actor', actor, 'reason', reason, 'lifted_at', steward.rfc3339(lifted_at), "
    "  'lifted_by', lifted_by, 'live', lifted_at IS NULL AND ends_at > now())::text";

static action_rc_t one_json(PGresult *res, json_t **result, char *errstr, size_t errstr_size)
{
    json_error_t jerr;
    *result = json_loads(PQgetvalue(res, 0, 0), 0, &jerr);
    PQclear(res);
    return *result != NULL
               ? ACTION_OK
               : fail(ACTION_FAILED, errstr, errstr_size, "reading the silence: %s", jerr.text);
}

action_rc_t action_silence(PGconn *conn, const silence_request_t *req, json_t **result,
                           char *errstr, size_t errstr_size)
{
    *result = NULL;
    if (!check_audit(req->actor, req->reason, errstr, errstr_size))
        return ACTION_BAD_REQUEST;
    if (req->process == NULL || *req->process == '\0')
        return fail(ACTION_BAD_REQUEST, errstr, errstr_size, "a silence needs --process");
    if (req->for_ms < 1000 || req->for_ms > ACTION_SILENCE_MAX_MS)
        return fail(ACTION_BAD_REQUEST, errstr, errstr_size,
                    "a silence lasts from 1s to 14d (--for)");
    char for_ms[32];
    snprintf(for_ms, sizeof for_ms, "%lld", (long long) req->for_ms);
    const char *params[6] = {req->process, req->state, req->team, for_ms, req->actor, req->reason};
    char sql[1024];
    snprintf(sql, sizeof sql,
             "INSERT INTO steward.silences (process, state, team, ends_at, actor, reason) "
             "VALUES ($1, $2, $3, now() + steward.ms_interval($4::bigint), $5, $6) RETURNING %s",
             silence_columns);
    err_class_t cls;
    PGresult *res =
        db_query(conn, "recording the silence", sql, 6, params, &cls, errstr, errstr_size);
    if (res == NULL)
        return ACTION_FAILED;
    return one_json(res, result, errstr, errstr_size);
}

action_rc_t action_unsilence(PGconn *conn, long long id, const char *actor, const char *reason,
                             json_t **result, char *errstr, size_t errstr_size)
{
    *result = NULL;
    if (!check_audit(actor, reason, errstr, errstr_size))
        return ACTION_BAD_REQUEST;
    char id_text[32], sql[1024];
    snprintf(id_text, sizeof id_text, "%lld", id);
    const char *params[3] = {id_text, actor, reason};
    /* The reason for lifting it early joins the one for setting it. */
    snprintf(sql, sizeof sql,
             "UPDATE steward.silences SET lifted_at = now(), lifted_by = $2, "
             "  reason = reason || ' / lifted: ' || $3 "
             "WHERE id = $1::bigint AND lifted_at IS NULL AND ends_at > now() RETURNING %s",
             silence_columns);
    err_class_t cls;
    PGresult *res =
        db_query(conn, "lifting the silence", sql, 3, params, &cls, errstr, errstr_size);
    if (res == NULL)
        return ACTION_FAILED;
    if (PQntuples(res) == 1)
        return one_json(res, result, errstr, errstr_size);
    PQclear(res);
    res = db_query(conn, "reading the silence",
                   "SELECT coalesce('lifted by ' || lifted_by, 'expired') FROM steward.silences "
                   "WHERE id = $1::bigint",
                   1, params, &cls, errstr, errstr_size);
    if (res == NULL)
        return ACTION_FAILED;
    action_rc_t rc = PQntuples(res) == 0
                         ? fail(ACTION_NOT_FOUND, errstr, errstr_size, "no silence %s", id_text)
                         : fail(ACTION_CONFLICT, errstr, errstr_size,
                                "silence %s already ended (%s)", id_text, PQgetvalue(res, 0, 0));
    PQclear(res);
    return rc;
}

action_rc_t action_silences(PGconn *conn, bool all, json_t **out, char *errstr, size_t errstr_size)
{
    char sql[1024];
    snprintf(sql, sizeof sql,
             "SELECT json_build_object('silences', coalesce(json_agg(s.j ORDER BY s.id DESC), "
             "'[]'))::text FROM (SELECT id, %s::json AS j FROM steward.silences "
             "WHERE $1::bool OR (lifted_at IS NULL AND ends_at > now())) s",
             silence_columns);
    const char *params[1] = {all ? "t" : "f"};
    err_class_t cls;
    *out = NULL;
    PGresult *res = db_query(conn, "reading silences", sql, 1, params, &cls, errstr, errstr_size);
    if (res == NULL)
        return ACTION_FAILED;
    return one_json(res, out, errstr, errstr_size);
}
