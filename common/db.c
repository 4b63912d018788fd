/*
 * db - shared PostgreSQL plumbing; see db.h.
 */
#include "common/db.h"

#include "common/log.h"

#include <stdbool.h>
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

err_class_t db_connect_class(int needs_password, const char *message)
{
    /* libpq's own refusals of an option value come before any attempt. */
    static const char *const client_prefixes[] = {"invalid ", "could not match "};
    /* The server refusing who we are or where we want to go. */
    static const char *const server_says[] = {
        "authentication failed",   "no pg_hba.conf entry", "does not exist",
        "not permitted to log in", "no password supplied",
    };

    if (needs_password)
        return ERR_INVALID;
    if (message == NULL)
        return ERR_TRANSIENT;
    for (size_t i = 0; i < sizeof client_prefixes / sizeof client_prefixes[0]; i++) {
        if (strncmp(message, client_prefixes[i], strlen(client_prefixes[i])) == 0)
            return ERR_INVALID;
    }
    for (size_t i = 0; i < sizeof server_says / sizeof server_says[0]; i++) {
        if (strstr(message, server_says[i]) != NULL)
            return ERR_INVALID;
    }
    return ERR_TRANSIENT;
}

/* Appends s[0..len) to buf at *len_io, truncating at buf_size - 1. */
static void append(char *buf, size_t buf_size, size_t *len_io, const char *s, size_t len)
{
    size_t room = buf_size - 1 - *len_io;
    if (len > room)
        len = room;
    memcpy(buf + *len_io, s, len);
    *len_io += len;
    buf[*len_io] = '\0';
}

char *db_scrub(const char *conninfo, const char *message, char *buf, size_t buf_size)
{
    PQconninfoOption *opts = PQconninfoParse(conninfo != NULL ? conninfo : "", NULL);
    const char *password = NULL;
    size_t len = 0;

    if (buf_size == 0)
        return buf;
    buf[0] = '\0';
    if (message == NULL)
        message = "";
    for (PQconninfoOption *o = opts; o != NULL && o->keyword != NULL; o++) {
        if (strcmp(o->keyword, "password") == 0 && o->val != NULL && o->val[0] != '\0')
            password = o->val;
    }
    if (opts == NULL) {
        /* libpq quotes what it could not parse, and that may be the
         * password; an option's name is safe to show. */
        bool keep = strncmp(message, "invalid connection option", 25) == 0 ||
                    strncmp(message, "invalid URI query parameter", 27) == 0;
        for (const char *p = message; *p != '\0';) {
            const char *open = strchr(p, '"');
            const char *close = open != NULL ? strchr(open + 1, '"') : NULL;
            if (open == NULL) {
                append(buf, buf_size, &len, p, strlen(p));
                break;
            }
            append(buf, buf_size, &len, p, (size_t) (open - p) + 1);
            if (close == NULL) { /* an unmatched quote: hide the rest */
                append(buf, buf_size, &len, "...", 3);
                break;
            }
            if (keep)
                append(buf, buf_size, &len, open + 1, (size_t) (close - open - 1));
            else
                append(buf, buf_size, &len, "...", 3);
            append(buf, buf_size, &len, "\"", 1);
            p = close + 1;
        }
        return buf;
    }
    size_t plen = password != NULL ? strlen(password) : 0;
    for (const char *p = message; *p != '\0';) {
        const char *hit = plen > 0 ? strstr(p, password) : NULL;
        if (hit == NULL) {
            append(buf, buf_size, &len, p, strlen(p));
            break;
        }
        append(buf, buf_size, &len, p, (size_t) (hit - p));
        append(buf, buf_size, &len, "********", 8);
        p = hit + plen;
    }
    PQconninfoFree(opts);
    return buf;
}

err_class_t db_check_conninfo(const char *conninfo, char *errstr, size_t errstr_size)
{
    char *why = NULL;
    PQconninfoOption *opts = PQconninfoParse(conninfo != NULL ? conninfo : "", &why);
    char shown[512];

    if (opts != NULL) {
        PQconninfoFree(opts);
        return ERR_OK;
    }
    if (why == NULL)
        return err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
    why[strcspn(why, "\n")] = '\0';
    err_set(ERR_INVALID, errstr, errstr_size, "the database connection string cannot be parsed: %s",
            db_scrub(conninfo, why, shown, sizeof shown));
    PQfreemem(why);
    return ERR_INVALID;
}

PGconn *db_connect_classified(const char *conninfo, const char *app, err_class_t *cls, char *errstr,
                              size_t errstr_size)
{
    /* Everything before dbname is a default the connection string may
     * override (libpq lets the later of two settings win). */
    const char *keys[] = {"application_name",
                          "connect_timeout",
                          "keepalives",
                          "keepalives_idle",
                          "keepalives_interval",
                          "keepalives_count",
                          "tcp_user_timeout",
                          "dbname",
                          NULL};
    const char *values[] = {
        app, "10", "1", "10", "5", "3", "25000", conninfo != NULL ? conninfo : "", NULL};
    char line[512], shown[512], clean[512];

    if ((*cls = db_check_conninfo(conninfo, errstr, errstr_size)) != ERR_OK)
        return NULL;
    /* expand_dbname=1: conninfo may be a whole connection string or URI. */
    PGconn *conn = PQconnectdbParams(keys, values, 1);
    if (conn == NULL) {
        *cls =
            err_set(ERR_FATAL, errstr, errstr_size, "cannot connect to PostgreSQL: out of memory");
        return NULL;
    }
    if (PQstatus(conn) != CONNECTION_OK) {
        const char *msg = PQerrorMessage(conn);
        snprintf(line, sizeof line, "%.*s", (int) strcspn(msg, "\n"), msg);
        *cls = db_connect_class(PQconnectionNeedsPassword(conn), line);
        err_set(*cls, errstr, errstr_size, "cannot connect to PostgreSQL (%s): %s",
                db_redact(conninfo, shown, sizeof shown),
                db_scrub(conninfo, line, clean, sizeof clean));
        PQfinish(conn);
        return NULL;
    }
    PQsetNoticeProcessor(conn, notice_to_log, NULL);
    *cls = ERR_OK;
    return conn;
}

PGconn *db_connect(const char *conninfo, const char *app, char *errstr, size_t errstr_size)
{
    err_class_t cls;
    return db_connect_classified(conninfo, app, &cls, errstr, errstr_size);
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
     * starting; 53300: too many connections (others may log off). */
    if (strncmp(state, "08", 2) == 0 || strncmp(state, "57P", 3) == 0 ||
        strcmp(state, "53300") == 0)
        return ERR_TRANSIENT;
    /* What a value carried, not the database's state: the caller can find
     * the input and set it aside (intake halves its batch to do so). The
     * rest of class 53 (out of memory, of shared memory: the lock table,
     * of disk) is what the statement asked for: the same statement fails
     * the same way, so retrying it blindly loops; a smaller one may pass. */
    if (strncmp(state, "22", 2) == 0 || strncmp(state, "54", 2) == 0 ||
        strncmp(state, "53", 2) == 0)
        return ERR_INVALID;
    return ERR_FATAL;
}

PGresult *db_query(PGconn *conn, const char *what, const char *sql, int nparams,
                   const char *const *params, err_class_t *cls, char *errstr, size_t errstr_size)
{
    PGresult *res = PQexecParams(conn, sql, nparams, NULL, params, NULL, NULL, 0);
    *cls = db_result_class(res, conn);
    if (*cls == ERR_OK)
        return res;
    const char *state = res != NULL ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    /* The server's own sentence, without libpq's "ERROR:  " prefix. */
    const char *msg = res != NULL ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : NULL;
    if (msg == NULL || *msg == '\0')
        msg = PQerrorMessage(conn);
    err_set(*cls, errstr, errstr_size, "%s: %.*s%s%s%s", what, (int) strcspn(msg, "\n"), msg,
            state != NULL ? " (SQLSTATE " : "", state != NULL ? state : "",
            state != NULL ? ")" : "");
    PQclear(res);
    return NULL;
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
