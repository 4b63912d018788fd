/*
 * http_db - the HTTP server's PostgreSQL connections: /readyz's own
 * (struct http's probe) and a pool of HTTP_DB_POOL for the views, the
 * actions and /metrics. Each is opened at the first request that needs
 * it, reopened after it is lost, and used by one request at a time (a
 * PGconn is not thread-safe). The probe has a connection of its own so
 * that no view, however slow, makes a healthy replica answer 503 to its
 * readiness probe; the pool lets one slow view wait for itself only.
 *
 * Every wait is bounded by the caller's deadline: the connection's turn,
 * connecting (without blocking past it however the server or the network
 * behaves) and each statement, besides the statement_timeout set on the
 * server (READY_STATEMENT_TIMEOUT, STATEMENT_TIMEOUT).
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
#include <stdlib.h>
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
 * Opens db->conn by `deadline` (monotonic ms), without blocking past it
 * however the server or the network behaves, name resolution aside
 * (libpq's own connect_timeout counts whole seconds, two at least).
 * Caller holds db. On failure db->conn is NULL; errstr names the server
 * as libpq does, never the connection string.
 */
static err_class_t connect_by(http_t *h, http_db_t *db, int64_t deadline, char *errstr,
                              size_t errstr_size)
{
    const char *keys[] = {"dbname", "application_name", NULL};
    const char *values[] = {h->conninfo, db->probe ? "steward http probe" : "steward http", NULL};
    PostgresPollingStatusType st = PGRES_POLLING_WRITING;
    char line[512];

    PQfinish(db->conn);
    db->conn = NULL;
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

    const char *params[1] = {db->probe ? READY_STATEMENT_TIMEOUT : STATEMENT_TIMEOUT};
    err_class_t cls =
        db_exec(c, "setting statement_timeout", "SELECT set_config('statement_timeout', $1, false)",
                1, params, errstr, errstr_size);
    if (cls != ERR_OK) {
        PQfinish(c);
        return cls;
    }
    db->conn = c;
    return ERR_OK;
}

bool http_db_init(http_t *h)
{
    pthread_condattr_t attr;
    bool ok = pthread_condattr_init(&attr) == 0;

    /* The waits count monotonic time, as every deadline here does. */
    ok = ok && pthread_condattr_setclock(&attr, CLOCK_MONOTONIC) == 0 &&
         pthread_cond_init(&h->pool_free, &attr) == 0;
    pthread_condattr_destroy(&attr);
    if (!ok)
        return false;
    pthread_mutex_init(&h->probe_lock, NULL);
    pthread_mutex_init(&h->pool_lock, NULL);
    h->probe.probe = true;
    return true;
}

void http_db_fini(http_t *h)
{
    PQfinish(h->probe.conn);
    for (size_t i = 0; i < HTTP_DB_POOL; i++)
        PQfinish(h->pool[i].conn);
    pthread_mutex_destroy(&h->probe_lock);
    pthread_mutex_destroy(&h->pool_lock);
    pthread_cond_destroy(&h->pool_free);
}

static struct timespec monotonic_at(int64_t deadline_ms)
{
    return (struct timespec){.tv_sec = (time_t) (deadline_ms / 1000),
                             .tv_nsec = (long) (deadline_ms % 1000) * 1000000L};
}

/* Takes the probe's turn by `deadline`; false when another probe held it
 * all along. */
static bool take_probe(http_t *h, int64_t deadline)
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
    return pthread_mutex_timedlock(&h->probe_lock, &until) == 0;
}

/* A pool connection that no request holds, taken by `deadline`; an open
 * one rather than one to be opened. NULL when all stayed busy. */
static http_db_t *take_pooled(http_t *h, int64_t deadline)
{
    struct timespec until = monotonic_at(deadline);
    http_db_t *db = NULL;

    pthread_mutex_lock(&h->pool_lock);
    for (;;) {
        for (size_t i = 0; i < HTTP_DB_POOL; i++) {
            http_db_t *c = &h->pool[i];
            if (!c->busy && (db == NULL || (db->conn == NULL && c->conn != NULL)))
                db = c;
        }
        if (db != NULL || pthread_cond_timedwait(&h->pool_free, &h->pool_lock, &until) != 0)
            break;
    }
    if (db != NULL)
        db->busy = true;
    pthread_mutex_unlock(&h->pool_lock);
    return db;
}

/*
 * Takes a connection (the probe's, or the pool's) and makes sure it is
 * open, both by `deadline`. On ERR_OK *out is held until
 * http_db_release(); on failure nothing is held.
 */
err_class_t http_db_acquire(http_t *h, bool probe, int64_t deadline, http_db_t **out, char *errstr,
                            size_t errstr_size)
{
    http_db_t *db = NULL;

    *out = NULL;
    if (probe ? take_probe(h, deadline) : (db = take_pooled(h, deadline)) != NULL) {
        if (probe)
            db = &h->probe;
    } else {
        return err_set(ERR_TRANSIENT, errstr, errstr_size,
                       probe ? "the probe's connection stayed busy with another probe"
                             : "every connection stayed busy with other requests");
    }
    if (db->conn == NULL || PQstatus(db->conn) != CONNECTION_OK) {
        err_class_t cls = connect_by(h, db, deadline, errstr, errstr_size);
        if (cls != ERR_OK) {
            http_db_release(h, db);
            return cls;
        }
    }
    *out = db;
    return ERR_OK;
}

/* Gives the connection back, dropping it when it was lost: the next
 * request opens a new one. */
void http_db_release(http_t *h, http_db_t *db)
{
    if (db == NULL)
        return;
    if (db->conn != NULL && PQstatus(db->conn) != CONNECTION_OK) {
        PQfinish(db->conn);
        db->conn = NULL;
    }
    if (db->probe) {
        pthread_mutex_unlock(&h->probe_lock);
        return;
    }
    pthread_mutex_lock(&h->pool_lock);
    db->busy = false;
    pthread_cond_signal(&h->pool_free);
    pthread_mutex_unlock(&h->pool_lock);
}

/*
 * Runs one statement with text parameters on db (held) and
 * waits for its result until `deadline`; past it the connection is
 * dropped, since it still owes an answer. Returns the result in *out
 * (PQclear() it) on ERR_OK; *out is NULL otherwise.
 */
err_class_t http_db_exec(http_db_t *db, const char *what, const char *sql, int nparams,
                         const char *const *params, int64_t deadline, PGresult **out, char *errstr,
                         size_t errstr_size)
{
    PGconn *c = db->conn;
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
                PQfinish(db->conn);
                db->conn = NULL;
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
