/*
 * actions_alert - acknowledging and resolving an alert by hand; see
 * actions.h. The instance's lock first (a blind alert has none), then the
 * alert's row under it, then steward.action_alert(), which writes the
 * change, the audit and the notifications for the sinks its trigger went
 * to.
 */
#include "manager/operator/actions_int.h"

#include "common/db.h"
#include "common/err.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char alert_sql[] = "SELECT process, key, kind, state, "
                                "  resolved_at IS NOT NULL, coalesce(resolved_by, ''), "
                                "  acked_at IS NOT NULL, coalesce(acked_by, ''), "
                                "  coalesce(resolution, '') "
                                "FROM steward.alerts WHERE id = $1::bigint";

action_rc_t action_alert(PGconn *conn, action_verb_t verb, const action_request_t *req,
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
        return action_fail(ACTION_NOT_FOUND, errstr, errstr_size, "no alert %s", id);
    }
    if (!PQgetisnull(res, 0, 0) && !PQgetisnull(res, 0, 1)) {
        process = strdup(PQgetvalue(res, 0, 0));
        key = strdup(PQgetvalue(res, 0, 1));
    }
    PQclear(res);

    if (!action_begin(conn, process, key, errstr, errstr_size))
        goto done;
    /* Read again under the lock, and lock the row (a blind alert has no
     * instance lock): what counts is the alert as it is now. */
    if ((res = action_call(conn, "reading the alert",
                           "SELECT * FROM steward.action_alert_lock($1::bigint)", 1, params, &rc,
                           errstr, errstr_size)) == NULL)
        goto done;
    if (PQntuples(res) == 0) { /* deleted meanwhile (retention) */
        rc = action_fail(ACTION_NOT_FOUND, errstr, errstr_size, "no alert %s", id);
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
        rc = action_fail(ACTION_CONFLICT, errstr, errstr_size,
                         "alert %s is already resolved (%s%s%s); nothing to %s", id,
                         PQgetvalue(res, 0, 8), *by != '\0' ? " by " : "", by,
                         action_verb_name(verb));
        PQclear(res);
        goto done;
    }
    if (verb == ACTION_ACK && acked) {
        rc = action_fail(ACTION_CONFLICT, errstr, errstr_size,
                         "alert %s is already acknowledged by %s", id, PQgetvalue(res, 0, 7));
        PQclear(res);
        goto done;
    }
    PQclear(res);

    const char *write_params[4] = {action_verb_name(verb), id, req->actor, req->reason};
    res = action_call(conn, verb == ACTION_ACK ? "acknowledging the alert" : "resolving the alert",
                      "SELECT changed, notified FROM steward.action_alert($1, $2::bigint, $3, $4)",
                      4, write_params, &rc, errstr, errstr_size);
    if (res == NULL)
        goto done;
    long changed = atol(PQgetvalue(res, 0, 0)), notified = atol(PQgetvalue(res, 0, 1));
    PQclear(res);
    if (changed != 1) { /* cannot happen with the row locked; never report a no-op as done */
        rc = action_fail(ACTION_CONFLICT, errstr, errstr_size,
                         "alert %s changed meanwhile; try again", id);
        goto done;
    }
    if ((rc = action_commit(conn, errstr, errstr_size)) != ACTION_OK)
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
