/*
 * db - shared PostgreSQL plumbing; see db.h.
 */
#include "manager/db.h"

#include "manager/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Server notices ("already exists, skipping") are for debugging, not for
 * a user's terminal. */
static void notice_to_log(void *arg, const char *message)
{
    (void) arg;
    LOG_DEBUG("postgres notice", "notice", message);
}

PGconn *db_connect(const char *conninfo, const char *app, char *errstr, size_t errstr_size)
{
    const char *keys[] = {"dbname", "application_name", "connect_timeout", NULL};
    const char *values[] = {conninfo != NULL ? conninfo : "", app, "10", NULL};
    /* expand_dbname=1: conninfo may be a whole connection string or URI,
     * and its own application_name or connect_timeout wins over ours. */
    PGconn *conn = PQconnectdbParams(keys, values, 1);

    if (conn == NULL) {
        err_set(ERR_FATAL, errstr, errstr_size, "cannot connect to PostgreSQL: out of memory");
        return NULL;
    }
    if (PQstatus(conn) != CONNECTION_OK) {
        char shown[512];
        const char *msg = PQerrorMessage(conn);
        size_t len = strcspn(msg, "\n");
        err_set(ERR_TRANSIENT, errstr, errstr_size, "cannot connect to PostgreSQL (%s): %.*s",
                db_redact(conninfo, shown, sizeof shown), (int) len, msg);
        PQfinish(conn);
        return NULL;
    }
    PQsetNoticeProcessor(conn, notice_to_log, NULL);
    return conn;
}

err_class_t db_result_class(const PGresult *res, const PGconn *conn)
{
    ExecStatusType st = res != NULL ? PQresultStatus(res) : PGRES_FATAL_ERROR;

    if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK || st == PGRES_PIPELINE_SYNC)
        return ERR_OK;
    if (PQstatus(conn) == CONNECTION_BAD)
        return ERR_TRANSIENT;

    const char *state = res != NULL ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    if (state == NULL)
        return ERR_TRANSIENT; /* no SQLSTATE: the failure happened client-side */
    if (strcmp(state, "40001") == 0 || strcmp(state, "40P01") == 0)
        return ERR_CONFLICT;
    /* 08: connection exceptions; 57P0x: the server is shutting down or
     * starting; 53: out of resources (too many connections). */
    if (strncmp(state, "08", 2) == 0 || strncmp(state, "57P", 3) == 0 ||
        strncmp(state, "53", 2) == 0)
        return ERR_TRANSIENT;
    return ERR_FATAL;
}

PGresult *db_query(PGconn *conn, const char *what, const char *sql, int nparams,
                   const char *const *params, err_class_t *cls, char *errstr, size_t errstr_size)
{
    PGresult *res = PQexecParams(conn, sql, nparams, NULL, params, NULL, NULL, 0);
    *cls = db_result_class(res, conn);
    if (*cls != ERR_OK) {
        const char *msg = PQerrorMessage(conn);
        err_set(*cls, errstr, errstr_size, "%s: %.*s", what, (int) strcspn(msg, "\n"), msg);
        PQclear(res);
        return NULL;
    }
    return res;
}

void db_rollback(PGconn *conn)
{
    if (PQstatus(conn) == CONNECTION_OK && PQtransactionStatus(conn) != PQTRANS_IDLE)
        PQclear(PQexec(conn, "ROLLBACK"));
}

err_class_t db_exec(PGconn *conn, const char *what, const char *sql, int nparams,
                    const char *const *params, char *errstr, size_t errstr_size)
{
    err_class_t cls;
    PQclear(db_query(conn, what, sql, nparams, params, &cls, errstr, errstr_size));
    return cls;
}

char *db_redact(const char *conninfo, char *buf, size_t buf_size)
{
    PQconninfoOption *opts = conninfo != NULL ? PQconninfoParse(conninfo, NULL) : NULL;
    size_t len = 0;

    if (buf_size == 0)
        return buf;
    buf[0] = '\0';
    if (opts == NULL) {
        /* Unparseable: show nothing of it rather than risk a secret. */
        snprintf(buf, buf_size, "%s",
                 conninfo == NULL || *conninfo == '\0' ? "from PG* environment"
                                                       : "unparseable connection string");
        return buf;
    }
    for (PQconninfoOption *o = opts; o->keyword != NULL && len < buf_size; o++) {
        if (o->val == NULL || *o->val == '\0')
            continue;
        const char *val = strcmp(o->keyword, "password") == 0 ? "********" : o->val;
        len += (size_t) snprintf(buf + len, buf_size - len, "%s%s=%s", len ? " " : "", o->keyword,
                                 val);
    }
    if (len == 0)
        snprintf(buf, buf_size, "from PG* environment");
    PQconninfoFree(opts);
    return buf;
}

char *db_with_dbname(const char *conninfo, const char *dbname)
{
    PQconninfoOption *opts = PQconninfoParse(conninfo != NULL ? conninfo : "", NULL);
    size_t cap = 4096, len = 0;
    char *out = opts != NULL ? calloc(1, cap) : NULL;

    for (PQconninfoOption *o = opts; out != NULL && o->keyword != NULL; o++) {
        /* PQconninfoParse lists every keyword, dbname among them. */
        const char *val = strcmp(o->keyword, "dbname") == 0 ? dbname : o->val;
        if (val == NULL || *val == '\0')
            continue;
        len += (size_t) snprintf(out + len, cap - len, "%s%s='", len ? " " : "", o->keyword);
        for (const char *p = val; *p && len + 3 < cap; p++) {
            if (*p == '\'' || *p == '\\')
                out[len++] = '\\';
            out[len++] = *p;
        }
        len += (size_t) snprintf(out + len, cap - len, "'");
    }
    PQconninfoFree(opts);
    return out;
}
