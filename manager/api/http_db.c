/*
 * http_db - the HTTP server's one PostgreSQL connection (struct http's
 * conn): opened at the first request that needs it, reopened after it is
 * lost, used by one request at a time under db_lock (a PGconn is not
 * thread-safe). Every wait is bounded by the caller's deadline: taking the
 * lock, connecting (without blocking past it however the server or the
 * network behaves) and each statement, besides the statement_timeout set
 * on the server (STATEMENT_TIMEOUT).
 */
#include "manager/api/http_int.h"

#include "common/clock.h"
#include "common/db.h"
#include "common/log.h"

#include <errno.h>
#include <libpq-fe.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static void quiet_notice(void *arg, const char *message)
{
    (void) arg;
    LOG_DEBUG("postgres notice", "notice", message);
}

/* The first line of libpq's message: the rest is hints for a terminal. */
static void first_line(const char *msg, char *buf, size_t buf_size)
{
    snprintf(buf, buf_size, "%.*s", (int) strcspn(msg, "\n"), msg);
}

/*
 * Opens h->conn by `deadline` (monotonic ms), without blocking past it
 * however the server or the network behaves, name resolution aside
 * (libpq's own connect_timeout counts whole seconds, two at least).
 * Caller holds db_lock. On failure h->conn is NULL; errstr names the
 * server as libpq does, never the connection string.
 */
static err_class_t connect_by(http_t *h, int64_t deadline, char *errstr, size_t errstr_size)
{
    const char *keys[] = {"dbname", "application_name", NULL};
    const char *values[] = {h->conninfo, "steward http", NULL};
    PostgresPollingStatusType st = PGRES_POLLING_WRITING;
    char line[512];

    PQfinish(h->conn);
    h->conn = NULL;
    /* expand_dbname = 1: conninfo is a whole connection string or URI, and
     * its own application_name wins over ours. */
    PGconn *c = PQconnectStartParams(keys, values, 1);
    if (c == NULL)
        return err_set(ERR_FATAL, errstr, errstr_size,
                       "cannot connect to PostgreSQL: out of memory");
    while (PQstatus(c) != CONNECTION_BAD && st != PGRES_POLLING_OK && st != PGRES_POLLING_FAILED) {
        int64_t left = deadline - clock_monotonic_ms();
        struct pollfd pfd = {PQsocket(c), st == PGRES_POLLING_READING ? POLLIN : POLLOUT, 0};
        int ready = left > 0 ? poll(&pfd, 1, (int) left) : 0;
        if (ready < 0 && errno == EINTR)
            continue;
        if (ready <= 0) {
            PQfinish(c);
            return err_set(ERR_TRANSIENT, errstr, errstr_size, "cannot connect to PostgreSQL: %s",
                           ready == 0 ? "no answer in time" : strerror(errno));
        }
        st = PQconnectPoll(c);
    }
    if (st != PGRES_POLLING_OK || PQstatus(c) != CONNECTION_OK) {
        char shown[512], raw[512];
        first_line(PQerrorMessage(c), raw, sizeof raw);
        db_scrub(h->conninfo, raw, line, sizeof line);
        LOG_LIMITED(LOG_LEVEL_WARN, "http-connect", 10000, "http: cannot connect to PostgreSQL",
                    "database", db_redact(h->conninfo, shown, sizeof shown), "error", line);
        PQfinish(c);
        return err_set(ERR_TRANSIENT, errstr, errstr_size, "cannot connect to PostgreSQL: %s",
                       line);
    }
    PQsetNoticeProcessor(c, quiet_notice, NULL);

    const char *params[1] = {STATEMENT_TIMEOUT};
    err_class_t cls =
        db_exec(c, "setting statement_timeout", "SELECT set_config('statement_timeout', $1, false)",
                1, params, errstr, errstr_size);
    if (cls != ERR_OK) {
        PQfinish(c);
        return cls;
    }
    h->conn = c;
    return ERR_OK;
}

/*
 * Takes db_lock and makes sure h->conn is open, both by `deadline`. On
 * ERR_OK the caller holds the lock and must http_db_release(); on failure the
 * lock is not held.
 */
err_class_t http_db_acquire(http_t *h, int64_t deadline, char *errstr, size_t errstr_size)
{
    struct timespec until;
    int64_t left = deadline - clock_monotonic_ms();

    clock_gettime(CLOCK_REALTIME, &until); /* pthread_mutex_timedlock's clock */
    if (left < 0)
        left = 0;
    until.tv_sec += (time_t) (left / 1000);
    until.tv_nsec += (long) (left % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    if (pthread_mutex_timedlock(&h->db_lock, &until) != 0)
        return err_set(ERR_TRANSIENT, errstr, errstr_size,
                       "the connection stayed busy with another request");
    if (h->conn != NULL && PQstatus(h->conn) == CONNECTION_OK)
        return ERR_OK;
    err_class_t cls = connect_by(h, deadline, errstr, errstr_size);
    if (cls != ERR_OK)
        pthread_mutex_unlock(&h->db_lock);
    return cls;
}

/* Gives the connection back, dropping it when it was lost: the next
 * request opens a new one. */
void http_db_release(http_t *h)
{
    if (h->conn != NULL && PQstatus(h->conn) != CONNECTION_OK) {
        PQfinish(h->conn);
        h->conn = NULL;
    }
    pthread_mutex_unlock(&h->db_lock);
}

/*
 * Runs one statement with text parameters on h->conn (db_lock held) and
 * waits for its result until `deadline`; past it the connection is
 * dropped, since it still owes an answer. Returns the result in *out
 * (PQclear() it) on ERR_OK; *out is NULL otherwise.
 */
err_class_t http_db_exec(http_t *h, const char *what, const char *sql, int nparams,
                         const char *const *params, int64_t deadline, PGresult **out, char *errstr,
                         size_t errstr_size)
{
    PGconn *c = h->conn;
    PGresult *last = NULL;
    char line[512];

    *out = NULL;
    if (!PQsendQueryParams(c, sql, nparams, NULL, params, NULL, NULL, 0)) {
        first_line(PQerrorMessage(c), line, sizeof line);
        return err_set(ERR_TRANSIENT, errstr, errstr_size, "%s: %s", what, line);
    }
    for (;;) {
        while (PQisBusy(c)) {
            int64_t left = deadline - clock_monotonic_ms();
            struct pollfd pfd = {PQsocket(c), POLLIN, 0};
            int ready = left > 0 ? poll(&pfd, 1, (int) left) : 0;
            if (ready < 0 && errno == EINTR)
                continue;
            if (ready <= 0 || !PQconsumeInput(c)) {
                if (ready > 0)
                    first_line(PQerrorMessage(c), line, sizeof line);
                else
                    snprintf(line, sizeof line, "no answer in time");
                PQclear(last);
                PQfinish(h->conn);
                h->conn = NULL;
                return err_set(ERR_TRANSIENT, errstr, errstr_size, "%s: %s", what, line);
            }
        }
        PGresult *res = PQgetResult(c);
        if (res == NULL)
            break;
        PQclear(last);
        last = res;
    }
    err_class_t cls = db_result_class(last, c);
    if (cls != ERR_OK) {
        first_line(PQerrorMessage(c), line, sizeof line);
        err_set(cls, errstr, errstr_size, "%s: %s", what, line);
        PQclear(last);
        return cls;
    }
    *out = last;
    return ERR_OK;
}
