/*
 * actions - operator actions on alerts and instances; see actions.h.
 *
 * Every action follows one path: BEGIN, the instance's advisory lock, the
 * row read FOR UPDATE, the check that it is still as the request expects,
 * the change with its history row and notifications, COMMIT. Any refusal
 * or failure rolls back, so a refused action leaves nothing behind.
 *
 * This file decides; the locked reads and every write are calls of
 * migration 0019's steward.action_* functions, which run with the schema
 * owner's rights and write the audit (the session's login beside the
 * actor) in the same call. So the operator role needs no write grant of
 * its own, the runtime role (the HTTP API) takes the same path, and no
 * caller can change a row without its audit.
 */
#include "manager/operator/actions.h"
#include "manager/commands/cmdqueue.h"

#include "common/db.h"
#include "common/err.h"
#include "common/failpoint.h"
#include "definitions/def.h"
#include "engine/engine.h"
#include "engine/template.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the verb table ---- */

/* The instance verbs' path; the name is the last segment. */
#define INSTANCE_PATH(verb) "/v1/instances/{process}/{key}/" verb
#define ALERT_PATH(verb)    "/v1/alerts/{id}/" verb

const action_verb_def_t action_verbs[] = {
    {.name = "ack",
     .on = ACTION_ON_ALERT,
     .verb = ACTION_ACK,
     .operands = "ALERT_ID",
     .audited = true,
     .method = "POST",
     .path = ALERT_PATH("ack"),
     .summary = "acknowledge an alert (it stays open)",
     .about = "Acknowledges an open alert: somebody is on it. It stays open; PagerDuty and\n"
              "webhook sinks that got its trigger get an acknowledge.",
     .console = "alerts"},
    {.name = "resolve",
     .on = ACTION_ON_ALERT,
     .verb = ACTION_RESOLVE,
     .operands = "ALERT_ID",
     .audited = true,
     .method = "POST",
     .path = ALERT_PATH("resolve"),
     .summary = "resolve an alert by hand",
     .about = "Resolves an open alert by hand; every sink that got its trigger gets the\n"
              "resolve (Alertmanager: endsAt).",
     .console = "alerts"},
    {.name = "close",
     .on = ACTION_ON_INSTANCE,
     .verb = ACTION_CLOSE,
     .operands = "PROCESS KEY",
     .audited = true,
     .options = {{"as", "OUTCOME", "the outcome, e.g. cancelled", true, true}},
     .method = "POST",
     .path = INSTANCE_PATH("close"),
     .summary = "finish an instance in one of its outcomes",
     .about = "Finishes an active instance in the terminal state of OUTCOME (or the\n"
              "terminal state so named) and resolves its open alerts.",
     .console = "overdue instance",
     .console_body = "{\"as\": \"cancelled\"}"},
    {.name = "move",
     .on = ACTION_ON_INSTANCE,
     .verb = ACTION_MOVE,
     .operands = "PROCESS KEY",
     .audited = true,
     .options = {{"to", "STATE", "the state to put it in", true, true}},
     .method = "POST",
     .path = INSTANCE_PATH("move"),
     .summary = "put an instance in another state",
     .about = "Puts an active instance in another non-terminal state, as an event\n"
              "would: that state's deadline starts now, the alert of the old state's\n"
              "missed deadline is resolved, and the old step's unsent commands are\n"
              "cancelled. On an active definition version the state's command is\n"
              "queued (refused, nothing changed, when its template lacks a variable)."},
    {.name = "retry",
     .on = ACTION_ON_INSTANCE,
     .verb = ACTION_RETRY,
     .operands = "PROCESS KEY",
     .audited = true,
     .method = "POST",
     .path = INSTANCE_PATH("retry"),
     .summary = "send the current step's command again (active mode)",
     .about = "Sends the current step's command again now, as a new attempt with a new\n"
              "fencing token (replies carrying an older token are stale from then on);\n"
              "the step's deadline counts from now and its lease is over. Only for an\n"
              "instance of an active definition version in a state with a command:\n"
              "in shadow mode, in a state without a command or for a finished\n"
              "instance it is refused (exit 1) and nothing is sent.",
     .console = "overdue instance"},
    {.name = "claim",
     .on = ACTION_ON_INSTANCE,
     .verb = ACTION_CLAIM,
     .operands = "PROCESS KEY",
     .audited = true,
     .method = "POST",
     .path = INSTANCE_PATH("claim"),
     .summary = "take ownership of an instance's investigation",
     .about = "Takes ownership of an instance's investigation. While claimed, only the\n"
              "claimant can close, move or release it; inspect shows who.",
     .console = "instance"},
    {.name = "release",
     .on = ACTION_ON_INSTANCE,
     .verb = ACTION_RELEASE,
     .operands = "PROCESS KEY",
     .audited = true,
     .method = "POST",
     .path = INSTANCE_PATH("release"),
     .summary = "give back an instance you claimed",
     .about = "Gives back an instance you claimed.",
     .console = "instance"},
    {.name = "silence",
     .on = ACTION_ON_SILENCE,
     .audited = true,
     .options = {{"process", "P", "the process whose alerts go unpaged", true, true},
                 {"state", "S", "only its alerts in this state", false, true},
                 {"team", "T", "only its alerts owned by this team", false, true},
                 {"for", "DURATION", "how long, e.g. 2h", true, true}},
     .method = "POST",
     .path = "/v1/silences",
     .summary = "no pages for a process's alerts for a while",
     .about = "No pages for the open alerts of process P (only those in state S, only\n"
              "those owned by team T) for DURATION (1s to 14d), e.g. a maintenance\n"
              "window. The alerts stay open and steward stuck shows them silenced; what\n"
              "is still open when the silence ends is paged then. Prints the silence's\n"
              "id, for steward unsilence."},
    {.name = "silences",
     .on = ACTION_ON_SILENCE,
     .options = {{"all", NULL, "ended silences too", false, true}},
     .method = "GET",
     .path = "/v1/silences",
     .summary = "list the silences in force",
     .about = "Lists the silences in force (with --all, ended ones too), newest first."},
    {.name = "unsilence",
     .on = ACTION_ON_SILENCE,
     .operands = "ID",
     .audited = true,
     .method = "POST",
     .path = "/v1/silences/{id}/unsilence",
     .summary = "end a silence now",
     .about = "Ends a silence now; held pages go out at once."},
};

const size_t action_verb_count = sizeof action_verbs / sizeof action_verbs[0];

const action_verb_def_t *action_verb_find(const char *name)
{
    for (size_t i = 0; i < action_verb_count; i++)
        if (strcmp(action_verbs[i].name, name) == 0)
            return &action_verbs[i];
    return NULL;
}

const action_verb_def_t *action_verb_def(action_verb_t verb)
{
    for (size_t i = 0; i < action_verb_count; i++)
        if (action_verbs[i].on != ACTION_ON_SILENCE && action_verbs[i].verb == verb)
            return &action_verbs[i];
    return &action_verbs[0]; /* not reached: every action_verb_t has its row */
}

const char *action_verb_name(action_verb_t verb)
{
    return action_verb_def(verb)->name;
}

json_t *action_verbs_json(void)
{
    static const char *const subject[] = {
        [ACTION_ON_ALERT] = "alert",
        [ACTION_ON_INSTANCE] = "instance",
        [ACTION_ON_SILENCE] = "silence",
    };
    json_t *list = json_array();
    json_t *doc = json_pack("{s:o}", "verbs", list);
    for (size_t i = 0; doc != NULL && i < action_verb_count; i++) {
        const action_verb_def_t *v = &action_verbs[i];
        json_t *options = json_array(), *console = json_array();
        for (const action_option_t *o = v->options; o->name != NULL; o++)
            json_array_append_new(options,
                                  json_pack("{s:s, s:s?, s:s, s:b}", "name", o->name, "arg", o->arg,
                                            "help", o->help, "required", o->required));
        if (v->console != NULL) {
            for (const char *p = v->console; *p != '\0';) {
                size_t len = strcspn(p, " ");
                if (len > 0)
                    json_array_append_new(console, json_stringn(p, len));
                p += len + (p[len] == ' ');
            }
        }
        json_t *row =
            json_pack("{s:s, s:s, s:s, s:b, s:o, s:s, s:s, s:s, s:o}", "name", v->name, "on",
                      subject[v->on], "operands", v->operands != NULL ? v->operands : "", "audited",
                      v->audited, "options", options, "method", v->method, "path", v->path,
                      "summary", v->summary, "console", console);
        json_t *body = v->console_body != NULL ? json_loads(v->console_body, 0, NULL) : NULL;
        if (row == NULL || (body != NULL && json_object_set_new(row, "console_body", body) != 0) ||
            json_array_append_new(list, row) != 0) {
            json_decref(doc);
            return NULL;
        }
    }
    return doc;
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

static PGresult *call(PGconn *conn, const char *what, const char *sql, int nparams,
                      const char *const *params, action_rc_t *rc, char *errstr, size_t errstr_size);

/* Takes the lock every batch takes for this instance, for the transaction.
 * It is the first thing an action runs, so a login that may not lock is
 * told which role it lacks (call()), as for the action functions. */
static bool lock_instance(PGconn *conn, const char *process, const char *key, char *errstr,
                          size_t errstr_size)
{
    const char *params[2] = {process, key};
    action_rc_t rc;
    PGresult *res = call(conn, "locking the instance", "SELECT steward.lock_instance($1, $2)", 2,
                         params, &rc, errstr, errstr_size);
    bool locked = res != NULL;
    PQclear(res);
    return locked;
}

/*
 * Tells a login whose role may not run the actions which role to be given:
 * the group roles that may run them and may not write history themselves
 * (the operator role; the runtime role may, and is not for people). Rolls
 * back the transaction the refusal aborted first.
 */
static void explain_denied(PGconn *conn, const char *denied, char *errstr, size_t errstr_size)
{
    db_rollback(conn); /* the failed statement ended the transaction's use */
    PGresult *res = PQexec(
        conn, "SELECT quote_ident(session_user::text), coalesce(string_agg(quote_ident(r.rolname), "
              "  ', ' ORDER BY r.rolname), '') "
              "FROM pg_roles r WHERE NOT r.rolcanlogin AND NOT r.rolsuper "
              "  AND has_function_privilege(r.oid, 'steward.action_instance_lock(text, text)', "
              "    'EXECUTE') "
              "  AND NOT has_table_privilege(r.oid, 'steward.history', 'INSERT')");
    bool ok = PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1;
    const char *login = ok ? PQgetvalue(res, 0, 0) : "this login";
    const char *roles = ok ? PQgetvalue(res, 0, 1) : "";
    if (*roles != '\0' && strchr(roles, ',') == NULL)
        snprintf(errstr, errstr_size,
                 "%s may not run steward's actions (%s): they take the operator role; as the "
                 "schema's owner: GRANT %s TO %s",
                 login, denied, roles, login);
    else if (*roles != '\0')
        snprintf(errstr, errstr_size,
                 "%s may not run steward's actions (%s): they take an operator role (%s); as the "
                 "schema's owner, GRANT one of them TO %s",
                 login, denied, roles, login);
    else
        snprintf(errstr, errstr_size,
                 "%s may not run steward's actions (%s): they take the operator role, which "
                 "steward migrate --create-roles makes (roles.operator); then, as the schema's "
                 "owner, GRANT it TO %s",
                 login, denied, login);
    PQclear(res);
}

/*
 * Runs one statement calling a steward.action_* function. Returns its
 * result (PQclear() it), or NULL with *rc and errstr set: ACTION_NOT_FOUND
 * when the row went meanwhile (no_data_found), ACTION_FAILED otherwise; a
 * role without EXECUTE (42501) is told which role to take instead of
 * libpq's "permission denied", and its transaction is rolled back.
 */
static PGresult *call(PGconn *conn, const char *what, const char *sql, int nparams,
                      const char *const *params, action_rc_t *rc, char *errstr, size_t errstr_size)
{
    PGresult *res = PQexecParams(conn, sql, nparams, NULL, params, NULL, NULL, 0);
    ExecStatusType st = PQresultStatus(res);
    if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK)
        return res;
    const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    const char *primary = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
    char msg[512];
    snprintf(msg, sizeof msg, "%.*s", (int) strcspn(primary ? primary : PQerrorMessage(conn), "\n"),
             primary ? primary : PQerrorMessage(conn));
    *rc = ACTION_FAILED;
    if (state != NULL && strcmp(state, "42501") == 0) {
        PQclear(res);
        explain_denied(conn, msg, errstr, errstr_size);
        return NULL;
    }
    if (state != NULL && strcmp(state, "P0002") == 0) {
        *rc = ACTION_NOT_FOUND;
        snprintf(errstr, errstr_size, "%s", msg);
    } else {
        snprintf(errstr, errstr_size, "%s: %s%s%s%s", what, msg, state ? " (SQLSTATE " : "",
                 state ? state : "", state ? ")" : "");
    }
    PQclear(res);
    return NULL;
}

static action_rc_t commit(PGconn *conn, char *errstr, size_t errstr_size)
{
    if (FAILPOINT_ERROR("actions.before_commit", errstr, errstr_size) != ERR_OK ||
        db_exec(conn, "committing the action", "COMMIT", 0, NULL, errstr, errstr_size) != ERR_OK)
        return ACTION_FAILED;
    return ACTION_OK;
}

/* ---- alerts ---- */

static const char alert_sql[] = "SELECT process, key, kind, state, "
                                "  resolved_at IS NOT NULL, coalesce(resolved_by, ''), "
                                "  acked_at IS NOT NULL, coalesce(acked_by, ''), "
                                "  coalesce(resolution, '') "
                                "FROM steward.alerts WHERE id = $1::bigint";

static action_rc_t alert_action(PGconn *conn, action_verb_t verb, const action_request_t *req,
                                json_t **result, char *errstr, size_t errstr_size)
{
    char id[32];
    snprintf(id, sizeof id, "%lld", req->alert_id);
    const char *params[3] = {id, req->actor, NULL};
    err_class_t cls;
    action_rc_t rc = ACTION_FAILED;
    char *process = NULL, *key = NULL;
    /* Read first without a lock, for the instance whose lock comes first. */
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
    if ((res =
             call(conn, "reading the alert", "SELECT * FROM steward.action_alert_lock($1::bigint)",
                  1, params, &rc, errstr, errstr_size)) == NULL)
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

    const char *write_params[4] = {action_verb_name(verb), id, req->actor, req->reason};
    res = call(conn, verb == ACTION_ACK ? "acknowledging the alert" : "resolving the alert",
               "SELECT changed, notified FROM steward.action_alert($1, $2::bigint, $3, $4)", 4,
               write_params, &rc, errstr, errstr_size);
    if (res == NULL)
        goto done;
    long changed = atol(PQgetvalue(res, 0, 0)), notified = atol(PQgetvalue(res, 0, 1));
    PQclear(res);
    if (changed != 1) { /* cannot happen with the row locked; never report a no-op as done */
        rc =
            fail(ACTION_CONFLICT, errstr, errstr_size, "alert %s changed meanwhile; try again", id);
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

/*
 * The command the engine decided to send, for steward.action_step(): its
 * row of steward.commands as JSON text (free it), or NULL when its
 * template cannot be rendered (ACTION_REFUSED, naming the variable it
 * lacks: nothing is queued and no alert is opened, since the operator
 * learns it here) or out of memory (ACTION_FAILED). *sent receives what
 * the result shows of it.
 */
static char *command_row(const def_t *def, const char *key, const engine_instance_t *inst,
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
        *rc = fail(ACTION_REFUSED, errstr, errstr_size,
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
        *rc = fail(ACTION_FAILED, errstr, errstr_size, "queueing the command: out of memory");
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
        rc = fail(ACTION_REFUSED, errstr, errstr_size, "%s; %s", detail,
                  retry ? "nothing was sent. Use steward move to restart the step's deadline, "
                          "or steward close to finish the instance"
                        : "nothing was changed");
        goto done;
    }
    if (cmd.send &&
        (command = command_row(def, key, &inst, &cmd, sent, &rc, errstr, errstr_size)) == NULL)
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
        ms_param(inst.state_entered_ms, entered, sizeof entered),
        step,
        attempt,
        token,
        ms_param(inst.deadline_ms, deadline, sizeof deadline),
        ms_param(engine_next_deadline(def, &inst), next, sizeof next),
        inst.overdue ? "true" : "false",
        inst.resend_pending ? "true" : "false",
        inst.lease_holder,
        ms_param(inst.lease_expires_ms, expires, sizeof expires),
        ms_param(inst.lease_renewed_ms, renewed, sizeof renewed),
        command,
        detail[0] != '\0' ? detail : NULL,
        req->actor,
        req->reason,
    };
    PGresult *res = call(conn, retry ? "recording the retry" : "recording the move", step_sql, 19,
                         params, &rc, errstr, errstr_size);
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
 * *resolved. Runs in instance_action()'s transaction.
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
        rc = fail(ACTION_REFUSED, errstr, errstr_size, "%s; nothing was changed", detail);
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
        ms_param(inst.state_entered_ms, entered, sizeof entered),
        step,
        token,
        req->actor,
        req->reason,
    };
    PGresult *res =
        call(conn, "closing the instance", close_sql, 9, params, &rc, errstr, errstr_size);
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
    const char *params[6] = {process, key, NULL, NULL, req->actor, req->reason};
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
    if ((res = call(conn, "reading the instance", instance_sql, 2, params, &rc, errstr,
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
        if ((rc = engine_action(conn, def, req, verb, s, s, &command, &resolved, errstr,
                                errstr_size)) != ACTION_OK)
            goto done;
        rc = ACTION_FAILED; /* until committed */
        snprintf(to, sizeof to, "%s", from);
        break;
    }
    case ACTION_CLAIM:
        if (*claimed != '\0') {
            rc = fail(ACTION_CONFLICT, errstr, errstr_size,
                      "instance %s of %s is already claimed by %s", key, process, claimed);
            goto done;
        }
        if ((res = call(conn, "claiming the instance", claim_sql, 5,
                        (const char *const[]){process, key, "true", req->actor, req->reason}, &rc,
                        errstr, errstr_size)) == NULL)
            goto done;
        snprintf(to, sizeof to, "%s", from);
        break;
    case ACTION_RELEASE:
        if (*claimed == '\0') {
            rc = fail(ACTION_CONFLICT, errstr, errstr_size,
                      "instance %s of %s is not claimed; nothing to release", key, process);
            goto done;
        }
        if ((res = call(conn, "releasing the instance", claim_sql, 5,
                        (const char *const[]){process, key, "false", req->actor, req->reason}, &rc,
                        errstr, errstr_size)) == NULL)
            goto done;
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
        /* The old state's missed deadline is over (resolved); the
         * process's is not. */
        if ((rc = engine_action(conn, def, req, verb, f, s, &command, &resolved, errstr,
                                errstr_size)) != ACTION_OK)
            goto done;
        rc = ACTION_FAILED; /* until committed */
        snprintf(to, sizeof to, "%s", def->states[s].name);
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
        long f = def_find_state(def, from);
        if (f < 0) {
            rc = fail(ACTION_REFUSED, errstr, errstr_size,
                      "state %s is not declared by version %s of %s; nothing was changed", from,
                      version, process);
            goto done;
        }
        if ((rc = close_action(conn, def, req, f, s, &resolved, errstr, errstr_size)) != ACTION_OK)
            goto done;
        rc = ACTION_FAILED; /* until committed */
        snprintf(to, sizeof to, "%s", def->states[s].name);
        snprintf(to_status, sizeof to_status, "%s", def->states[s].terminal);
        break;
    }
    default:
        rc = fail(ACTION_BAD_REQUEST, errstr, errstr_size, "%s is not an instance action",
                  action_verb_name(verb));
        goto done;
    }

    PQclear(res);
    res = NULL;
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
    "  'lifted_by', lifted_by, 'login', login, 'lifted_login', lifted_login, "
    "  'live', lifted_at IS NULL AND ends_at > now())::text";

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
    /* A silence of a name no definition carries would hold nothing and
     * look like it does: a typo must be told, not recorded. */
    const char *known[2] = {req->process, req->state};
    err_class_t cls;
    PGresult *res = db_query(conn, "looking up the process",
                             "SELECT bool_or($2::text IS NULL OR document->'states' ? $2), "
                             "  (SELECT string_agg(DISTINCT process, ', ' ORDER BY process) "
                             "   FROM steward.definitions) "
                             "FROM steward.definitions WHERE process = $1",
                             2, known, &cls, errstr, errstr_size);
    if (res == NULL)
        return ACTION_FAILED;
    action_rc_t rc = ACTION_OK;
    if (PQgetisnull(res, 0, 0))
        rc = fail(ACTION_NOT_FOUND, errstr, errstr_size,
                  "no process %s has a recorded definition, so there is nothing to silence "
                  "(recorded: %s)",
                  req->process, PQgetisnull(res, 0, 1) ? "none" : PQgetvalue(res, 0, 1));
    else if (strcmp(PQgetvalue(res, 0, 0), "t") != 0)
        rc = fail(ACTION_NOT_FOUND, errstr, errstr_size,
                  "process %s has no state %s in any recorded version, so there is nothing to "
                  "silence",
                  req->process, req->state);
    PQclear(res);
    if (rc != ACTION_OK)
        return rc;
    char for_ms[32];
    snprintf(for_ms, sizeof for_ms, "%lld", (long long) req->for_ms);
    const char *params[6] = {req->process, req->state, req->team, for_ms, req->actor, req->reason};
    char sql[1024];
    snprintf(sql, sizeof sql,
             "SELECT %s FROM steward.action_silence($1, $2, $3, $4::bigint, $5, $6)",
             silence_columns);
    res = call(conn, "recording the silence", sql, 6, params, &rc, errstr, errstr_size);
    if (res == NULL)
        return rc;
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
    snprintf(sql, sizeof sql, "SELECT %s FROM steward.action_unsilence($1::bigint, $2, $3)",
             silence_columns);
    action_rc_t rc;
    PGresult *res = call(conn, "lifting the silence", sql, 3, params, &rc, errstr, errstr_size);
    if (res == NULL)
        return rc;
    if (PQntuples(res) == 1)
        return one_json(res, result, errstr, errstr_size);
    PQclear(res);
    err_class_t cls;
    res = db_query(conn, "reading the silence",
                   "SELECT coalesce('lifted by ' || lifted_by, 'expired') FROM steward.silences "
                   "WHERE id = $1::bigint",
                   1, params, &cls, errstr, errstr_size);
    if (res == NULL)
        return ACTION_FAILED;
    rc = PQntuples(res) == 0
             ? fail(ACTION_NOT_FOUND, errstr, errstr_size, "no silence %s", id_text)
             : fail(ACTION_CONFLICT, errstr, errstr_size, "silence %s already ended (%s)", id_text,
                    PQgetvalue(res, 0, 0));
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
