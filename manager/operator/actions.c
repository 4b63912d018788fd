/*
 * actions - the path every operator action takes; see actions.h, and
 * actions_int.h for the files that share it.
 *
 * Every action follows one path: BEGIN, the instance's advisory lock, the
 * row read FOR UPDATE, the check that it is still as the request expects,
 * the change with its history row and notifications, COMMIT. Any refusal
 * or failure rolls back, so a refused action leaves nothing behind.
 *
 * The actions' files decide; the locked reads and every write are calls
 * of migration 0019's steward.action_* functions (action_call()), which
 * run with the schema owner's rights and write the audit (the session's
 * login beside the actor) in the same call. So the operator role needs no
 * write grant of its own, the runtime role (the HTTP API) takes the same
 * path, and no caller can change a row without its audit.
 */
#include "manager/operator/actions_int.h"

#include "common/db.h"
#include "common/err.h"
#include "common/failpoint.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

action_rc_t action_fail(action_rc_t rc, char *errstr, size_t errstr_size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(errstr, errstr_size, fmt, ap);
    va_end(ap);
    return rc;
}

action_rc_t action_check_audit(const char *actor, const char *reason, char *errstr,
                               size_t errstr_size)
{
    if (actor == NULL || *actor == '\0' || strlen(actor) > ACTION_ACTOR_MAX)
        return action_fail(ACTION_BAD_REQUEST, errstr, errstr_size,
                           "an action needs an actor of 1 to %d bytes", ACTION_ACTOR_MAX);
    if (reason == NULL || *reason == '\0' || strlen(reason) > ACTION_REASON_MAX)
        return action_fail(ACTION_BAD_REQUEST, errstr, errstr_size,
                           "an action needs a reason (--reason) of 1 to %d bytes: it is the "
                           "audit trail's answer to why",
                           ACTION_REASON_MAX);
    return ACTION_OK;
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

PGresult *action_call(PGconn *conn, const char *what, const char *sql, int nparams,
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

bool action_begin(PGconn *conn, const char *process, const char *key, char *errstr,
                  size_t errstr_size)
{
    if (db_exec(conn, "starting the action", "BEGIN", 0, NULL, errstr, errstr_size) != ERR_OK)
        return false;
    if (process == NULL)
        return true;
    const char *params[2] = {process, key};
    action_rc_t rc;
    PGresult *res =
        action_call(conn, "locking the instance", "SELECT steward.lock_instance($1, $2)", 2, params,
                    &rc, errstr, errstr_size);
    bool locked = res != NULL;
    PQclear(res);
    return locked;
}

action_rc_t action_commit(PGconn *conn, char *errstr, size_t errstr_size)
{
    if (FAILPOINT_ERROR("actions.before_commit", errstr, errstr_size) != ERR_OK ||
        db_exec(conn, "committing the action", "COMMIT", 0, NULL, errstr, errstr_size) != ERR_OK)
        return ACTION_FAILED;
    return ACTION_OK;
}

action_rc_t action_run(PGconn *conn, action_verb_t verb, const action_request_t *req,
                       json_t **result, char *errstr, size_t errstr_size)
{
    *result = NULL;
    action_rc_t rc = action_check_audit(req->actor, req->reason, errstr, errstr_size);
    if (rc != ACTION_OK)
        return rc;
    if (verb == ACTION_ACK || verb == ACTION_RESOLVE) {
        if (req->alert_id <= 0)
            return action_fail(ACTION_BAD_REQUEST, errstr, errstr_size,
                               "an alert id is a positive number");
        return action_alert(conn, verb, req, result, errstr, errstr_size);
    }
    if (verb == ACTION_UPGRADE) {
        if (req->process == NULL || *req->process == '\0')
            return action_fail(ACTION_BAD_REQUEST, errstr, errstr_size, "upgrade needs a PROCESS");
        return action_upgrade(conn, req, result, errstr, errstr_size);
    }
    if (req->process == NULL || req->key == NULL)
        return action_fail(ACTION_BAD_REQUEST, errstr, errstr_size, "%s needs a PROCESS and a KEY",
                           action_verb_name(verb));
    if ((verb == ACTION_CLOSE || verb == ACTION_MOVE) &&
        (req->target == NULL || *req->target == '\0'))
        return action_fail(ACTION_BAD_REQUEST, errstr, errstr_size, "%s needs %s",
                           action_verb_name(verb),
                           verb == ACTION_CLOSE ? "--as OUTCOME" : "--to STATE");
    return action_instance(conn, verb, req, result, errstr, errstr_size);
}
