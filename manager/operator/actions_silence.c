/*
 * actions_silence - silences: no pages for a process's open alerts for a
 * while; see actions.h. Set and lifted through steward.action_silence()
 * and steward.action_unsilence(), audited like every action; the notifier
 * holds the pages while one is live.
 */
#include "manager/operator/actions_int.h"

#include "common/db.h"
#include "common/err.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

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
    return *result != NULL ? ACTION_OK
                           : action_fail(ACTION_FAILED, errstr, errstr_size,
                                         "reading the silence: %s", jerr.text);
}

action_rc_t action_silence(PGconn *conn, const silence_request_t *req, json_t **result,
                           char *errstr, size_t errstr_size)
{
    *result = NULL;
    action_rc_t rc = action_check_audit(req->actor, req->reason, errstr, errstr_size);
    if (rc != ACTION_OK)
        return rc;
    if (req->process == NULL || *req->process == '\0')
        return action_fail(ACTION_BAD_REQUEST, errstr, errstr_size, "a silence needs --process");
    if (req->for_ms < 1000 || req->for_ms > ACTION_SILENCE_MAX_MS)
        return action_fail(ACTION_BAD_REQUEST, errstr, errstr_size,
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
    if (PQgetisnull(res, 0, 0))
        rc = action_fail(ACTION_NOT_FOUND, errstr, errstr_size,
                         "no process %s has a recorded definition, so there is nothing to silence "
                         "(recorded: %s)",
                         req->process, PQgetisnull(res, 0, 1) ? "none" : PQgetvalue(res, 0, 1));
    else if (strcmp(PQgetvalue(res, 0, 0), "t") != 0)
        rc = action_fail(
            ACTION_NOT_FOUND, errstr, errstr_size,
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
    res = action_call(conn, "recording the silence", sql, 6, params, &rc, errstr, errstr_size);
    if (res == NULL)
        return rc;
    return one_json(res, result, errstr, errstr_size);
}

action_rc_t action_unsilence(PGconn *conn, long long id, const char *actor, const char *reason,
                             json_t **result, char *errstr, size_t errstr_size)
{
    *result = NULL;
    action_rc_t rc = action_check_audit(actor, reason, errstr, errstr_size);
    if (rc != ACTION_OK)
        return rc;
    char id_text[32], sql[1024];
    snprintf(id_text, sizeof id_text, "%lld", id);
    const char *params[3] = {id_text, actor, reason};
    /* The reason for lifting it early joins the one for setting it. */
    snprintf(sql, sizeof sql, "SELECT %s FROM steward.action_unsilence($1::bigint, $2, $3)",
             silence_columns);
    PGresult *res =
        action_call(conn, "lifting the silence", sql, 3, params, &rc, errstr, errstr_size);
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
             ? action_fail(ACTION_NOT_FOUND, errstr, errstr_size, "no silence %s", id_text)
             : action_fail(ACTION_CONFLICT, errstr, errstr_size, "silence %s already ended (%s)",
                           id_text, PQgetvalue(res, 0, 0));
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
