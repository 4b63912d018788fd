/*
 * actions_instance - the actions on an instance: close, move and retry,
 * decided by the engine (engine_operator_close(), engine_operator_move(),
 * engine_operator_resend()), and claim and release; see actions.h. The
 * instance's lock first, then its row under it, its definition version
 * loaded from the document recorded with it, the engine's decision, and
 * one steward.action_* call that stores it with the audit.
 */
#include "manager/operator/actions_int.h"
#include "manager/commands/cmdqueue.h"

#include "common/db.h"
#include "common/err.h"
#include "definitions/def.h"
#include "engine/engine.h"
#include "engine/template.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The instance, its definition's document and the topic mapping recorded
 * with it, the instance's row locked. */
static const char instance_sql[] = "SELECT version, state, status, claimed_by, document, "
                                   "  topic_mapping "
                                   "FROM steward.action_instance_lock($1, $2)";

static const char claim_sql[] = "SELECT steward.action_claim($1, $2, $3::boolean, $4, $5)";

/* What the engine needs to decide a re-send or a move, read under the lock. */
static const char engine_read_sql[] =
    "SELECT steward.to_ms(started_at), steward.to_ms(state_entered_at), "
    "  steward.to_ms(deadline_at), steward.to_ms(process_deadline_at), overdue, "
    "  process_overdue, attempt, vars::text, step, token, lease_holder, "
    "  steward.to_ms(lease_expires_at), steward.to_ms(lease_renewed_at), resend_pending, "
    "  steward.to_ms(now()) "
    "FROM steward.instances WHERE process = $1 AND key = $2";

static int64_t ms_at(const PGresult *res, int col)
{
    return PQgetisnull(res, 0, col) ? ENGINE_NO_DEADLINE
                                    : strtoll(PQgetvalue(res, 0, col), NULL, 10);
}

/*
 * The instance as the engine sees it, in `state` of def, with the
 * database's clock in *now_ms; read under the lock action_instance() took.
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

const char *action_ms_param(int64_t ms, char *buf, size_t size)
{
    if (ms == ENGINE_NO_DEADLINE)
        return NULL;
    snprintf(buf, size, "%" PRId64, ms);
    return buf;
}

char *action_command_row(const def_t *def, const char *key, const engine_instance_t *inst,
                         const engine_command_t *cmd, json_t **sent, action_rc_t *rc, char *errstr,
                         size_t errstr_size)
{
    const def_state_t *st = &def->states[cmd->state];
    char idempotency_key[65];
    cmdq_idempotency_key(def->process, key, cmd->step, idempotency_key);
    template_ctx_t ctx = {key,        def->process, st->name,       cmd->attempt,
                          cmd->token, inst->vars,   idempotency_key};
    char why[512], ce_id[65];
    json_t *payload = template_render(st->command->payload, &ctx, why, sizeof why);
    if (payload == NULL) {
        *rc = action_fail(ACTION_REFUSED, errstr, errstr_size,
                          "the command %s of %s cannot be rendered: %s; nothing was changed",
                          st->command->type, st->name, why);
        return NULL;
    }
    engine_command_id(def->process, key, cmd->step, cmd->attempt, ce_id);
    /* As cmdqueue prints a payload, so both paths store the same bytes.
     * steward.action_step() (migration 0019) computes next_attempt_at from
     * delay_ms: 0, sent at once, as cmdqueue's commands are. */
    json_t *row =
        json_pack("{s:i, s:s, s:i, s:i, s:I, s:s, s:s, s:o, s:s, s:I}", "version", def->version,
                  "state", st->name, "step", cmd->step, "attempt", cmd->attempt, "token",
                  (json_int_t) cmd->token, "topic", st->command->topic, "type", st->command->type,
                  "payload", payload, "ce_id", ce_id, "delay_ms", (json_int_t) 0);
    char *text = row != NULL ? json_dumps(row, JSON_COMPACT | JSON_REAL_PRECISION(15)) : NULL;
    json_decref(row);
    *sent = json_pack("{s:s, s:s, s:i, s:i, s:I, s:s}", "type", st->command->type, "topic",
                      st->command->topic, "step", cmd->step, "attempt", cmd->attempt, "token",
                      (json_int_t) cmd->token, "ce_id", ce_id);
    if (text == NULL || *sent == NULL) {
        free(text);
        json_decref(*sent);
        *sent = NULL;
        *rc =
            action_fail(ACTION_FAILED, errstr, errstr_size, "queueing the command: out of memory");
        return NULL;
    }
    return text;
}

static const char step_sql[] =
    "SELECT steward.action_step($1, $2, $3, $4, $5::bigint, $6::int, $7::int, $8::bigint, "
    "  $9::bigint, $10::bigint, $11::boolean, $12::boolean, $13, $14::bigint, $15::bigint, "
    "  $16::jsonb, $17, $18, $19)";

/*
 * steward retry and steward move, decided by the engine: a retry re-sends
 * the current step's command (engine_operator_resend()), a move enters
 * state `to` as an event would (engine_operator_move()), with the state's
 * command in active mode. steward.action_step() stores the instance as the
 * engine left it, queues the command, and for a move cancels the old
 * step's unsent commands and resolves its deadline alert (*resolved says
 * how many), with the history row, in this transaction. Refuses (nothing
 * changed) when the engine says no or the template cannot be rendered.
 */
static action_rc_t engine_action(PGconn *conn, const def_t *def, const action_request_t *req,
                                 action_verb_t verb, long from, long to, json_t **sent,
                                 long *resolved, char *errstr, size_t errstr_size)
{
    engine_instance_t inst;
    int64_t now_ms;
    const char *key = req->key;
    if (!read_engine_instance(conn, def, from, key, &inst, &now_ms, errstr, errstr_size))
        return ACTION_FAILED;
    engine_command_t cmd;
    action_rc_t rc = ACTION_FAILED;
    bool retry = verb == ACTION_RETRY;
    char detail[512] = "";
    char *command = NULL;
    bool decided = retry
                       ? engine_operator_resend(def, &inst, now_ms, &cmd, detail, sizeof detail)
                       : engine_operator_move(def, &inst, to, now_ms, &cmd, detail, sizeof detail);
    if (!decided) {
        rc = action_fail(ACTION_REFUSED, errstr, errstr_size, "%s; %s", detail,
                         retry
                             ? "nothing was sent. Use steward move to restart the step's deadline, "
                               "or steward close to finish the instance"
                             : "nothing was changed");
        goto done;
    }
    if (cmd.send && (command = action_command_row(def, key, &inst, &cmd, sent, &rc, errstr,
                                                  errstr_size)) == NULL)
        goto done;

    char entered[32], step[16], attempt[16], token[32], deadline[32], next[32], expires[32],
        renewed[32];
    snprintf(step, sizeof step, "%d", inst.step);
    snprintf(attempt, sizeof attempt, "%d", inst.attempt);
    snprintf(token, sizeof token, "%" PRId64, inst.token);
    const char *params[19] = {
        action_verb_name(verb),
        def->process,
        key,
        def->states[inst.state].name,
        action_ms_param(inst.state_entered_ms, entered, sizeof entered),
        step,
        attempt,
        token,
        action_ms_param(inst.deadline_ms, deadline, sizeof deadline),
        action_ms_param(engine_next_deadline(def, &inst), next, sizeof next),
        inst.overdue ? "true" : "false",
        inst.resend_pending ? "true" : "false",
        inst.lease_holder,
        action_ms_param(inst.lease_expires_ms, expires, sizeof expires),
        action_ms_param(inst.lease_renewed_ms, renewed, sizeof renewed),
        command,
        detail[0] != '\0' ? detail : NULL,
        req->actor,
        req->reason,
    };
    PGresult *res = action_call(conn, retry ? "recording the retry" : "recording the move",
                                step_sql, 19, params, &rc, errstr, errstr_size);
    if (res != NULL) {
        *resolved = atol(PQgetvalue(res, 0, 0));
        PQclear(res);
        rc = ACTION_OK;
    }
done:
    free(command);
    engine_instance_clear(&inst);
    return rc;
}

/*
 * Closes the instance (in state `from`) into terminal state `to` as the
 * engine decides (engine_operator_close()), and stores that: the step's
 * unsent commands cancelled and every open alert resolved, their count in
 * *resolved. Runs in action_instance()'s transaction.
 */
static const char close_sql[] = "SELECT steward.action_close($1, $2, $3, $4, $5, $6, $7, $8, $9)";

static action_rc_t close_action(PGconn *conn, const def_t *def, const action_request_t *req,
                                long from, long to, long *resolved, char *errstr,
                                size_t errstr_size)
{
    engine_instance_t inst;
    int64_t now_ms;
    if (!read_engine_instance(conn, def, from, req->key, &inst, &now_ms, errstr, errstr_size))
        return ACTION_FAILED;
    action_rc_t rc = ACTION_FAILED;
    char detail[512] = "";
    const char *status = NULL;
    if (!engine_operator_close(def, &inst, to, now_ms, &status, detail, sizeof detail)) {
        rc = action_fail(ACTION_REFUSED, errstr, errstr_size, "%s; nothing was changed", detail);
        goto done;
    }
    char entered[32], step[16], token[32];
    snprintf(step, sizeof step, "%d", inst.step);
    snprintf(token, sizeof token, "%" PRId64, inst.token);
    const char *params[9] = {
        def->process,
        req->key,
        def->states[inst.state].name,
        status,
        action_ms_param(inst.state_entered_ms, entered, sizeof entered),
        step,
        token,
        req->actor,
        req->reason,
    };
    PGresult *res =
        action_call(conn, "closing the instance", close_sql, 9, params, &rc, errstr, errstr_size);
    if (res != NULL) {
        *resolved = atol(PQgetvalue(res, 0, 0));
        PQclear(res);
        rc = ACTION_OK;
    }
done:
    engine_instance_clear(&inst);
    return rc;
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

/* The index in def of `from`, the state the instance is in; -1 with
 * ACTION_REFUSED in *rc when its version (`version`) does not declare it:
 * nothing was `nothing_was` ("changed", "sent"). */
static long declared_state(const def_t *def, const char *from, const char *version,
                           const char *nothing_was, action_rc_t *rc, char *errstr,
                           size_t errstr_size)
{
    long s = def_find_state(def, from);
    if (s < 0)
        *rc = action_fail(ACTION_REFUSED, errstr, errstr_size,
                          "state %s is not declared by version %s of %s; nothing was %s", from,
                          version, def->process, nothing_was);
    return s;
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

/*
 * The state a move (`terminal` false: a non-terminal state named `target`)
 * or a close (true: the terminal state of outcome `target`, or so named)
 * goes to; -1 with ACTION_BAD_REQUEST in *rc, naming the states it may be,
 * when def has none.
 */
static long target_state(const def_t *def, bool terminal, const char *target, const char *version,
                         action_rc_t *rc, char *errstr, size_t errstr_size)
{
    long s = terminal ? terminal_state(def, target) : def_find_state(def, target);
    if (s >= 0 && (def->states[s].terminal != NULL) == terminal)
        return s;
    char names[1024];
    list_states(def, terminal, names, sizeof names);
    if (terminal)
        *rc = action_fail(ACTION_BAD_REQUEST, errstr, errstr_size,
                          "%s is not an outcome of %s version %s (outcomes: %s)", target,
                          def->process, version, names);
    else
        *rc = action_fail(ACTION_BAD_REQUEST, errstr, errstr_size,
                          "%s is not a non-terminal state of %s version %s (states: %s)%s", target,
                          def->process, version, names,
                          s >= 0 ? "; use steward close to finish an instance" : "");
    return -1;
}

action_rc_t action_instance(PGconn *conn, action_verb_t verb, const action_request_t *req,
                            json_t **result, char *errstr, size_t errstr_size)
{
    const char *process = req->process, *key = req->key;
    const char *params[6] = {process, key, NULL, NULL, req->actor, req->reason};
    action_rc_t rc = ACTION_FAILED;
    PGresult *res = NULL;
    def_t *def = NULL;
    json_t *command = NULL; /* retry and move: what was queued */
    char version[16], from[512], status[256], claimed[ACTION_ACTOR_MAX + 1], to[512] = "",
                                                                             to_status[256];

    if (!action_begin(conn, process, key, errstr, errstr_size))
        goto done;
    if ((res = action_call(conn, "reading the instance", instance_sql, 2, params, &rc, errstr,
                           errstr_size)) == NULL)
        goto done;
    if (PQntuples(res) == 0) {
        rc = action_fail(ACTION_NOT_FOUND, errstr, errstr_size, "no instance %s of %s", key,
                         process);
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
            rc = action_fail(
                ACTION_REFUSED, errstr, errstr_size,
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
        rc = action_fail(ACTION_CONFLICT, errstr, errstr_size,
                         "instance %s of %s already finished (%s in %s); nothing to %s", key,
                         process, status, from, action_verb_name(verb));
        goto done;
    }
    if (*claimed != '\0' && strcmp(claimed, req->actor) != 0 && verb != ACTION_CLAIM) {
        rc = action_fail(
            ACTION_CONFLICT, errstr, errstr_size,
            "instance %s of %s is claimed by %s; only they can %s it (or they release it "
            "first)",
            key, process, claimed, action_verb_name(verb));
        goto done;
    }

    long resolved = 0;
    switch (verb) {
    case ACTION_RETRY: {
        long s = declared_state(def, from, version, "sent", &rc, errstr, errstr_size);
        if (s < 0)
            goto done;
        if ((rc = engine_action(conn, def, req, verb, s, s, &command, &resolved, errstr,
                                errstr_size)) != ACTION_OK)
            goto done;
        rc = ACTION_FAILED; /* until committed */
        snprintf(to, sizeof to, "%s", from);
        break;
    }
    case ACTION_CLAIM:
    case ACTION_RELEASE: {
        bool claim = verb == ACTION_CLAIM;
        if (claim && *claimed != '\0') {
            rc = action_fail(ACTION_CONFLICT, errstr, errstr_size,
                             "instance %s of %s is already claimed by %s", key, process, claimed);
            goto done;
        }
        if (!claim && *claimed == '\0') {
            rc = action_fail(ACTION_CONFLICT, errstr, errstr_size,
                             "instance %s of %s is not claimed; nothing to release", key, process);
            goto done;
        }
        if ((res = action_call(conn, claim ? "claiming the instance" : "releasing the instance",
                               claim_sql, 5,
                               (const char *const[]){process, key, claim ? "true" : "false",
                                                     req->actor, req->reason},
                               &rc, errstr, errstr_size)) == NULL)
            goto done;
        snprintf(to, sizeof to, "%s", from);
        break;
    }
    case ACTION_MOVE:
    case ACTION_CLOSE: {
        bool close = verb == ACTION_CLOSE;
        long s = target_state(def, close, req->target, version, &rc, errstr, errstr_size);
        if (s < 0)
            goto done;
        long f = declared_state(def, from, version, "changed", &rc, errstr, errstr_size);
        if (f < 0)
            goto done;
        /* A move resolves the old state's missed deadline, not the
         * process's; a close resolves every open alert. */
        rc = close ? close_action(conn, def, req, f, s, &resolved, errstr, errstr_size)
                   : engine_action(conn, def, req, verb, f, s, &command, &resolved, errstr,
                                   errstr_size);
        if (rc != ACTION_OK)
            goto done;
        rc = ACTION_FAILED; /* until committed */
        snprintf(to, sizeof to, "%s", def->states[s].name);
        if (close)
            snprintf(to_status, sizeof to_status, "%s", def->states[s].terminal);
        break;
    }
    default:
        rc = action_fail(ACTION_BAD_REQUEST, errstr, errstr_size, "%s is not an instance action",
                         action_verb_name(verb));
        goto done;
    }

    PQclear(res);
    res = NULL;
    if ((rc = action_commit(conn, errstr, errstr_size)) != ACTION_OK)
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
