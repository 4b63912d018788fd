/*
 * http - the HTTP server of `steward run`; see http.h.
 *
 * A request is answered on its connection's thread once MHD has read it
 * whole (the handler's first call, with the headers alone, only marks it;
 * a body is read and dropped unseen): route, check the method, build the
 * reply, queue it.
 */
#include "manager/api/http.h"

#include "manager/api/console.h"

#include "common/clock.h"
#include "common/db.h"
#include "common/log.h"
#include "common/prom.h"
#include "common/rfc3339.h"
#include "common/sha256.h"
#include "common/utf8.h"
#include "definitions/duration.h"
#include "manager/operator/actions.h"
#include "manager/runtime/metrics.h"
#include "manager/operator/query.h"
#include "shadow/report.h"

#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <libpq-fe.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

/* /readyz: the lock, a connection and SELECT 1, all within this. */
#define READY_BUDGET_MS 1000
/* Any other request: waiting for the connection and connecting, then its
 * statements, each within this. */
#define QUERY_BUDGET_MS 5000
/* What one statement may take on the server, so a slow query frees the
 * connection for the next request. */
#define STATEMENT_TIMEOUT "5s"

/* The scrape's gauges: waiting for the connection, connecting and the
 * three queries together, well inside Prometheus's 10 s scrape timeout. */
#define METRICS_DB_BUDGET_MS 3000

/* Connections (HTTP_MAX_CONNECTIONS) cost a file descriptor each, not a
 * thread: the pool's threads poll them all. Idle ones are dropped after
 * IDLE_TIMEOUT_S. */
#define IDLE_TIMEOUT_S 10
/* Requests run on these threads; one waiting for the database holds its
 * thread for at most its budget, and new connections go to the others. */
#define POOL_THREADS 8

/* /healthz's default bound on a worker thread's silence. */
#define DEFAULT_STALL_MS (5 * 60 * 1000)

struct http {
    struct MHD_Daemon *daemon;
    int port;
    char *conninfo; /* may hold a password: printed only through db_redact() */
    char *group;
    double started; /* when the server started, seconds since the epoch */

    pthread_mutex_t db_lock; /* guards conn: one request at a time uses it */
    PGconn *conn;            /* NULL until a request needs it, and after it is lost */

    pthread_mutex_t log_lock; /* guards the two fields below */
    bool starting;            /* MHD's complaints are kept for http_new()'s errstr */
    char start_error[512];

    bool loopback;               /* listening on a loopback address only */
    char **allowed_hosts;        /* http.allowed_hosts, split; NULL-terminated, never NULL */
    bool any_host;               /* http.allowed_hosts holds "*": no Host check */
    bool anonymous_read;         /* http.allow_anonymous_read */
    pthread_mutex_t tokens_lock; /* guards tokens; a reload swaps them */
    http_tokens_t *tokens;       /* NULL: no tokens, so no actions */

    pthread_mutex_t state_lock; /* guards the two fields below */
    char *waiting;              /* why the daemon is not serving yet; NULL once it is */
    int64_t stall_ms;           /* /healthz: longest silence of a worker thread */
};

/* What a request is answered with. */
typedef struct reply {
    unsigned int status;
    char *body; /* malloc'd; handed to MHD */
    size_t len;
    const char *content_type;
    bool allow;        /* a 405: say which methods are */
    bool allow_post;   /* ... and they are POST */
    bool unauthorized; /* a 401: say how to authenticate */
} reply_t;

/* What one connection's request brought, kept between MHD's calls. */
typedef struct request {
    char *body; /* the POST body so far, NUL-terminated; NULL when none */
    size_t len;
    bool too_large;
} request_t;

/* The longest POST body read; actions need a reason, not a document. */
#define MAX_BODY 16384

/* ---- replies -------------------------------------------------------------- */

static void reply_body(reply_t *r, unsigned int status, const char *content_type, char *body,
                       size_t len)
{
    free(r->body);
    r->status = status;
    r->content_type = content_type;
    r->body = body;
    r->len = len;
    if (r->body == NULL) { /* out of memory: an empty 500 is all that is left */
        r->status = MHD_HTTP_INTERNAL_SERVER_ERROR;
        r->body = NULL;
        r->len = 0;
    }
}

/* Answers with `doc` as JSON; takes the reference. */
static void reply_json(reply_t *r, unsigned int status, json_t *doc)
{
    char *text = doc != NULL ? json_dumps(doc, JSON_COMPACT | QUERY_REAL_PRECISION) : NULL;
    json_decref(doc);
    reply_body(r, status, "application/json", text, text != NULL ? strlen(text) : 0);
}

static void reply_error(reply_t *r, unsigned int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Answers {"error": message}. Messages only quote text that was checked to
 * be UTF-8, which jansson requires. */
static void reply_error(reply_t *r, unsigned int status, const char *fmt, ...)
{
    char message[HTTP_MAX_PATH + 512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    json_t *doc = json_pack("{s:s}", "error", message);
    if (doc == NULL) /* a message cut inside a UTF-8 sequence */
        doc = json_pack("{s:s}", "error", "request refused");
    reply_json(r, status, doc);
}

/* A failed database read: 503 when the database may come back, else 500.
 * errstr never holds the connection string (see connect_by()). */
static void reply_db_error(reply_t *r, err_class_t cls, const char *errstr)
{
    LOG_LIMITED(LOG_LEVEL_WARN, "http-db", 10000, "http: database read failed", "error", errstr,
                "class", err_class_name(cls));
    if (cls == ERR_TRANSIENT || cls == ERR_CONFLICT)
        reply_error(r, MHD_HTTP_SERVICE_UNAVAILABLE, "database unavailable: %s", errstr);
    else
        reply_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "%s", errstr);
}

/* The console loads its own script and style sheet and nothing else: no
 * inline script, no style attribute, no other origin. */
static const char *const security_headers[][2] = {
    {"Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; "
                                "form-action 'self'; object-src 'none'"},
    {"X-Frame-Options", "DENY"},
    {"X-Content-Type-Options", "nosniff"},
    {"Referrer-Policy", "no-referrer"},
};

static enum MHD_Result send_reply(struct MHD_Connection *conn, reply_t *r)
{
    struct MHD_Response *resp = MHD_create_response_from_buffer(
        r->len, r->body != NULL ? r->body : (void *) "",
        r->body != NULL ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    if (resp == NULL) {
        free(r->body);
        return MHD_NO; /* MHD closes the connection */
    }
    r->body = NULL; /* now owned by resp */
    if (r->content_type != NULL)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, r->content_type);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    /* On every answer, so no page of another site can frame the console
     * (clickjacking its action buttons), run script in its origin, or
     * learn its URLs from a Referer. */
    for (size_t i = 0; i < sizeof security_headers / sizeof security_headers[0]; i++)
        MHD_add_response_header(resp, security_headers[i][0], security_headers[i][1]);
    if (r->allow)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, r->allow_post ? "POST" : "GET, HEAD");
    if (r->unauthorized)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer realm=\"steward\"");
    enum MHD_Result ret = MHD_queue_response(conn, r->status, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* ---- the database connection --------------------------------------------- */

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
 * ERR_OK the caller holds the lock and must db_release(); on failure the
 * lock is not held.
 */
static err_class_t db_acquire(http_t *h, int64_t deadline, char *errstr, size_t errstr_size)
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
static void db_release(http_t *h)
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
static err_class_t exec_by(http_t *h, const char *what, const char *sql, int nparams,
                           const char *const *params, int64_t deadline, PGresult **out,
                           char *errstr, size_t errstr_size)
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

/* ---- /metrics ------------------------------------------------------------- */

static void counter(prom_t *p, const char *name, const char *help, atomic_llong *value)
{
    prom_family(p, name, "counter", help);
    prom_sample_int(p, name, NULL, metrics_get(value));
}

static void write_counters(prom_t *p)
{
    counter(p, "steward_events_read_total", "Kafka messages consumed.", &metrics.events_read);
    counter(p, "steward_events_ignored_total",
            "Events of a type no loaded process declares, skipped.", &metrics.events_ignored);
    metrics_unknown_t *unknown = NULL;
    size_t n_unknown = metrics_unknown_types(&unknown);
    prom_family(p, "steward_events_undeclared_total", "counter",
                "Events no loaded process declares, by topic and type (the first 1000 pairs; "
                "later ones as \"other\").");
    for (size_t i = 0; i < n_unknown; i++)
        prom_sample_int(
            p, "steward_events_undeclared_total",
            (const char *const[]){"topic", unknown[i].topic, "type", unknown[i].type, NULL},
            unknown[i].count);
    free(unknown);

    prom_family(p, "steward_events_judged_total", "counter",
                "Events judged against an instance, by outcome (as steward.history records it).");
    for (int i = 0; i < ENGINE_N_OUTCOMES; i++)
        prom_sample_int(p, "steward_events_judged_total",
                        (const char *const[]){"outcome", engine_outcome_name(i), NULL},
                        metrics_get(&metrics.outcomes[i]));

    prom_family(p, "steward_events_rejected_total", "counter",
                "Messages rejected before judging (recorded in steward.rejected), by reason.");
    for (int i = DECODE_OK + 1; i < DECODE_N_REASONS; i++)
        prom_sample_int(p, "steward_events_rejected_total",
                        (const char *const[]){"reason", decode_reason_name(i), NULL},
                        metrics_get(&metrics.rejected[i]));

    counter(p, "steward_batches_committed_total", "Batch transactions committed.",
            &metrics.batches_committed);
    counter(p, "steward_batches_retried_total",
            "Batch transactions rolled back and retried (conflicts, lost connections).",
            &metrics.batches_retried);
    counter(p, "steward_partitions_fenced_total",
            "Partitions found claimed by another replica while this one read them.",
            &metrics.partitions_fenced);
    counter(p, "steward_parked_expired_total",
            "Parked events whose reorder window passed (judged as violations).",
            &metrics.parked_expired);
    counter(p, "steward_instance_lock_timeouts_total",
            "Instance locks a batch awaited for intake.lock_timeout in vain (another session "
            "holds them); the instance's events were set aside.",
            &metrics.instance_lock_timeouts);
    counter(p, "steward_events_deferred_total",
            "Events set aside in steward.deferred because their instance's lock was busy.",
            &metrics.events_deferred);
    counter(p, "steward_deferred_judged_total",
            "Deferred events judged once their instance's lock was free.",
            &metrics.deferred_judged);
    counter(p, "steward_alerts_opened_total", "Alerts opened by the scheduler.",
            &metrics.alerts_opened);
    counter(p, "steward_commands_sent_total",
            "Commands the broker acknowledged (each marked sent in steward.commands).",
            &metrics.commands_sent);
    counter(p, "steward_dispatch_failures_total",
            "Command deliveries that failed (each is retried after a backoff).",
            &metrics.dispatch_failures);

    prom_family(p, "steward_notifications_total", "counter",
                "Notification delivery attempts, by sink type and result.");
    for (int t = 0; t < SINK_N_TYPES; t++) {
        for (int v = 0; v < SINK_N_VERDICTS; v++)
            prom_sample_int(p, "steward_notifications_total",
                            (const char *const[]){"sink_type", sink_type_name((sink_type_t) t),
                                                  "result", sink_verdict_name((sink_verdict_t) v),
                                                  NULL},
                            metrics_get(&metrics.notifications[t][v]));
    }
}

static void write_batch_histogram(prom_t *p)
{
    double bounds[METRICS_BATCH_BUCKETS];
    long long counts[METRICS_BATCH_BUCKETS + 1];

    for (size_t i = 0; i < METRICS_BATCH_BUCKETS; i++)
        bounds[i] = (double) metrics_batch_bounds_ms[i] / 1000.0;
    for (size_t i = 0; i <= METRICS_BATCH_BUCKETS; i++)
        counts[i] = metrics_get(&metrics.batch_buckets[i]);
    prom_histogram(p, "steward_batch_duration_seconds",
                   "Time to commit a batch of messages, retries included.", bounds, counts,
                   METRICS_BATCH_BUCKETS, (double) metrics_get(&metrics.batch_ms_sum) / 1000.0);
}

/* steward_step_duration_seconds: one histogram per (process, state) seen. */
static void write_step_histograms(prom_t *p)
{
    metrics_step_t *steps;
    size_t n = metrics_steps(&steps);
    long long cumulative[METRICS_STEP_BUCKETS + 1];
    char le[32];

    prom_family(p, "steward_step_duration_seconds", "histogram",
                "Time instances spent in a state, observed as each leaves it, by process and "
                "state.");
    for (size_t i = 0; i < n; i++) {
        long long total = 0;
        for (size_t b = 0; b <= METRICS_STEP_BUCKETS; b++)
            cumulative[b] = total += steps[i].counts[b];
        for (size_t b = 0; b <= METRICS_STEP_BUCKETS; b++) {
            if (b < METRICS_STEP_BUCKETS)
                prom_format_value(metrics_step_bounds_s[b], le, sizeof le);
            else
                snprintf(le, sizeof le, "+Inf");
            prom_sample_int(p, "steward_step_duration_seconds_bucket",
                            (const char *const[]){"process", steps[i].process, "state",
                                                  steps[i].state, "le", le, NULL},
                            cumulative[b]);
        }
        const char *const labels[] = {"process", steps[i].process, "state", steps[i].state, NULL};
        prom_sample(p, "steward_step_duration_seconds_sum", labels,
                    (double) steps[i].sum_ms / 1000.0);
        prom_sample_int(p, "steward_step_duration_seconds_count", labels, total);
    }
    free(steps);
}

/* The process_ figures every Prometheus client library exports, from /proc. */
static void write_process(prom_t *p)
{
    char buf[1024];
    double v;
    FILE *f = fopen("/proc/self/stat", "r");
    if (f != NULL) {
        size_t len = fread(buf, 1, sizeof buf - 1, f);
        buf[len] = '\0';
        fclose(f);
        if (metrics_parse_proc_stat(buf, (double) sysconf(_SC_CLK_TCK), &v)) {
            prom_family(p, "process_cpu_seconds_total", "counter",
                        "User and system CPU time this steward has used, in seconds.");
            prom_sample(p, "process_cpu_seconds_total", NULL, v);
        }
    }
    if ((f = fopen("/proc/self/statm", "r")) != NULL) {
        size_t len = fread(buf, 1, sizeof buf - 1, f);
        buf[len] = '\0';
        fclose(f);
        if (metrics_parse_statm(buf, sysconf(_SC_PAGESIZE), &v)) {
            prom_family(p, "process_resident_memory_bytes", "gauge",
                        "This steward's resident memory, in bytes.");
            prom_sample(p, "process_resident_memory_bytes", NULL, v);
        }
    }
}

static void write_kafka(prom_t *p)
{
    metrics_lag_t *lags;
    size_t n = metrics_partition_lags(&lags);

    prom_family(p, "steward_kafka_reachable", "gauge",
                "Whether the brokers answered intake's last metadata request (once a second).");
    prom_sample_int(p, "steward_kafka_reachable", NULL, metrics_get(&metrics.kafka_reachable));

    prom_family(p, "steward_partitions_assigned", "gauge",
                "Partitions this replica has claimed and reads.");
    prom_sample_int(p, "steward_partitions_assigned", NULL,
                    metrics_get(&metrics.partitions_assigned));

    prom_family(p, "steward_consumer_lag_messages", "gauge",
                "Messages between what this replica has read of a partition and its high "
                "watermark, as of the last fetch.");
    for (size_t i = 0; i < n; i++) {
        char partition[16];
        snprintf(partition, sizeof partition, "%d", (int) lags[i].partition);
        prom_sample_int(p, "steward_consumer_lag_messages",
                        (const char *const[]){"topic", lags[i].topic, "partition", partition, NULL},
                        (long long) lags[i].lag);
    }
    free(lags);
}

/* The scheduler's watch over each process's watermark, as of its last pass. */
static void write_watermarks(prom_t *p)
{
    metrics_watch_t *w;
    size_t n = metrics_watches(&w);
    int64_t now = clock_wall_ms();

    prom_family(p, "steward_watermark_lag_seconds", "gauge",
                "How far each process's watermark trails this steward's clock, as of the "
                "scheduler's last pass; absent while the process has no watermark.");
    for (size_t i = 0; i < n; i++) {
        if (w[i].watermark_ms >= 0)
            prom_sample(p, "steward_watermark_lag_seconds",
                        (const char *const[]){"process", w[i].process, NULL},
                        (double) (now - w[i].watermark_ms) / 1000.0);
    }
    prom_family(p, "steward_watermark_blind", "gauge",
                "1 while a process's watermark cannot judge deadlines for this cause "
                "(no_watermark, frozen, unread, old_version_topic), as of the scheduler's last "
                "pass; the blind alert says which topic or partition.");
    for (size_t i = 0; i < n; i++) {
        for (int c = 0; c < METRICS_WATCH_N_CAUSES; c++)
            prom_sample_int(p, "steward_watermark_blind",
                            (const char *const[]){"process", w[i].process, "cause",
                                                  metrics_watch_cause_name(c), NULL},
                            w[i].cause[c]);
    }
    free(w);
}

/* The gauges read from PostgreSQL at scrape time. */
enum { GAUGE_INSTANCES, GAUGE_ALERTS, GAUGE_COMMANDS, GAUGE_OUTBOX, N_GAUGES };

static const char *const gauge_sql[N_GAUGES] = {
    [GAUGE_INSTANCES] = "SELECT process, state, count(*) FROM steward.instances "
                        "WHERE status = 'active' GROUP BY 1, 2 ORDER BY 1, 2",
    [GAUGE_ALERTS] = "SELECT coalesce(process, ''), coalesce(state, ''), kind, count(*) "
                     "FROM steward.alerts WHERE resolved_at IS NULL GROUP BY 1, 2, 3 "
                     "ORDER BY 1, 2, 3",
    [GAUGE_COMMANDS] = "SELECT process, count(*) FROM steward.commands WHERE sent_at IS NULL "
                       "AND cancelled_at IS NULL "
                       "GROUP BY 1 ORDER BY 1",
    /* The outbox_pending index holds exactly these rows. */
    [GAUGE_OUTBOX] = "SELECT count(*), coalesce(extract(epoch FROM now() - min(created_at)), 0)"
                     "::float8 FROM steward.outbox "
                     "WHERE delivered_at IS NULL AND failed_at IS NULL",
};

static void write_database(http_t *h, prom_t *p)
{
    PGresult *res[N_GAUGES] = {NULL};
    char errstr[1024];
    int64_t deadline = clock_monotonic_ms() + METRICS_DB_BUDGET_MS;
    err_class_t cls = db_acquire(h, deadline, errstr, sizeof errstr);

    if (cls == ERR_OK) {
        for (int i = 0; i < N_GAUGES && cls == ERR_OK; i++)
            cls = exec_by(h, "reading gauges", gauge_sql[i], 0, NULL, deadline, &res[i], errstr,
                          sizeof errstr);
        db_release(h);
    }
    if (cls != ERR_OK)
        LOG_LIMITED(LOG_LEVEL_WARN, "http-gauges", 10000,
                    "metrics: database gauges left out of the scrape", "error", errstr);

    prom_family(p, "steward_database_up", "gauge",
                "Whether this scrape could read the gauges from PostgreSQL.");
    prom_sample_int(p, "steward_database_up", NULL, cls == ERR_OK);
    if (cls == ERR_OK) {
        PGresult *r = res[GAUGE_INSTANCES];
        prom_family(p, "steward_instances_open", "gauge",
                    "Active instances, by process and current state.");
        for (int i = 0; i < PQntuples(r); i++)
            prom_sample_int(p, "steward_instances_open",
                            (const char *const[]){"process", PQgetvalue(r, i, 0), "state",
                                                  PQgetvalue(r, i, 1), NULL},
                            atoll(PQgetvalue(r, i, 2)));

        r = res[GAUGE_ALERTS];
        prom_family(p, "steward_alerts_open", "gauge",
                    "Unresolved alerts, by process, state and kind (blind alerts have neither "
                    "process nor state).");
        for (int i = 0; i < PQntuples(r); i++)
            prom_sample_int(p, "steward_alerts_open",
                            (const char *const[]){"process", PQgetvalue(r, i, 0), "state",
                                                  PQgetvalue(r, i, 1), "kind", PQgetvalue(r, i, 2),
                                                  NULL},
                            atoll(PQgetvalue(r, i, 3)));

        r = res[GAUGE_COMMANDS];
        prom_family(p, "steward_commands_pending", "gauge",
                    "Commands queued and not yet sent, by process (paused ones included); a "
                    "process with none is absent.");
        for (int i = 0; i < PQntuples(r); i++)
            prom_sample_int(p, "steward_commands_pending",
                            (const char *const[]){"process", PQgetvalue(r, i, 0), NULL},
                            atoll(PQgetvalue(r, i, 1)));

        r = res[GAUGE_OUTBOX];
        prom_family(p, "steward_outbox_pending", "gauge",
                    "Notifications not yet delivered nor given up (retries included).");
        prom_sample_int(p, "steward_outbox_pending", NULL, atoll(PQgetvalue(r, 0, 0)));
        prom_family(p, "steward_outbox_oldest_pending_seconds", "gauge",
                    "Age of the oldest notification not yet delivered; 0 when none waits.");
        prom_sample(p, "steward_outbox_oldest_pending_seconds", NULL,
                    strtod(PQgetvalue(r, 0, 1), NULL));
    }
    for (int i = 0; i < N_GAUGES; i++)
        PQclear(res[i]);
}

static void get_metrics(http_t *h, reply_t *r)
{
    prom_t *p = prom_new();
    char errstr[256];
    size_t len;

    if (p == NULL) {
        reply_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "cannot render metrics: out of memory");
        return;
    }
    write_counters(p);
    write_batch_histogram(p);
    write_step_histograms(p);
    write_kafka(p);
    write_watermarks(p);
    write_database(h, p);
    prom_family(p, "steward_build_info", "gauge", "The running steward's version, as labels.");
    prom_sample_int(p, "steward_build_info",
                    (const char *const[]){"version", STEWARD_VERSION, NULL}, 1);
    prom_family(p, "process_start_time_seconds", "gauge",
                "When this steward started serving, in seconds since the epoch.");
    prom_sample(p, "process_start_time_seconds", NULL, h->started);
    write_process(p);

    char *text = prom_finish(p, &len, errstr, sizeof errstr);
    if (text == NULL)
        reply_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "cannot render metrics: %s", errstr);
    else
        reply_body(r, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", text, len);
}

/* ---- probes ----------------------------------------------------------------- */

static void not_ready(reply_t *r, const char *reason)
{
    json_t *doc = json_pack("{s:b, s:s}", "ready", 0, "reason", reason);
    reply_json(r, MHD_HTTP_SERVICE_UNAVAILABLE, doc);
}

/* /readyz's `watermarks`: each watched process's watermark and, when it
 * cannot judge deadlines, why (the scheduler's last pass). */
static json_t *watermarks_detail(void)
{
    metrics_watch_t *w;
    size_t n = metrics_watches(&w);
    json_t *out = json_array();
    for (size_t i = 0; i < n && out != NULL; i++) {
        char at[40];
        json_t *causes = json_array();
        for (int c = 0; c < METRICS_WATCH_N_CAUSES; c++) {
            if (w[i].cause[c])
                json_array_append_new(causes, json_string(metrics_watch_cause_name(c)));
        }
        json_t *entry = json_pack(
            "{s:s, s:o, s:o}", "process", w[i].process, "watermark",
            w[i].watermark_ms >= 0 ? json_string(rfc3339_format(w[i].watermark_ms, at, sizeof at))
                                   : json_null(),
            "blind", causes);
        if (entry != NULL && json_array_size(causes) > 0)
            json_object_set_new(entry, "detail", json_string(w[i].detail));
        json_array_append_new(out, entry);
    }
    free(w);
    return out != NULL ? out : json_array();
}

static void get_readyz(http_t *h, reply_t *r)
{
    long long assigned = metrics_get(&metrics.partitions_assigned);
    int64_t deadline = clock_monotonic_ms() + READY_BUDGET_MS;
    char errstr[1024], reason[1100];
    PGresult *res = NULL;

    pthread_mutex_lock(&h->state_lock);
    bool waiting = h->waiting != NULL;
    if (waiting)
        snprintf(reason, sizeof reason, "starting: %s", h->waiting);
    pthread_mutex_unlock(&h->state_lock);
    if (waiting) {
        not_ready(r, reason);
        return;
    }
    /* A replica in the group with nothing assigned is a standby, ready to
     * take over; one not yet in the group cannot take anything. */
    if (!metrics_get(&metrics.group_joined)) {
        not_ready(r, "joining the consumer group");
        return;
    }
    err_class_t cls = db_acquire(h, deadline, errstr, sizeof errstr);
    if (cls == ERR_OK) {
        cls = exec_by(h, "SELECT 1", "SELECT 1", 0, NULL, deadline, &res, errstr, sizeof errstr);
        PQclear(res);
        db_release(h);
    }
    if (cls != ERR_OK) {
        snprintf(reason, sizeof reason, "database unreachable: %s", errstr);
        not_ready(r, reason);
        return;
    }
    /* An unreachable broker, or a blind watermark, does not make the
     * replica unready (another replica would be as blind): it is shown
     * here, on /metrics, in the blind alert and in the log. */
    reply_json(r, MHD_HTTP_OK,
               json_pack("{s:b, s:I, s:b, s:o}", "ready", 1, "partitions", (json_int_t) assigned,
                         "kafka_reachable", (int) metrics_get(&metrics.kafka_reachable),
                         "watermarks", watermarks_detail()));
}

/*
 * 200 "ok" while every worker thread that has started made progress within
 * stall_ms; 503 naming the first that did not. Reads only atomics: never
 * waits for anything.
 */
static void get_healthz(http_t *h, reply_t *r)
{
    int64_t now = clock_monotonic_ms();

    pthread_mutex_lock(&h->state_lock);
    int64_t stall_ms = h->stall_ms;
    pthread_mutex_unlock(&h->state_lock);
    int64_t stalled_ms = 0;
    int t = metrics_stalled(now, stall_ms, &stalled_ms);
    if (t >= 0) {
        char *text = NULL;
        if (asprintf(&text, "stuck: the %s thread has made no progress for %lld s\n",
                     metrics_thread_name((metrics_thread_t) t),
                     (long long) (stalled_ms / 1000)) < 0)
            text = NULL;
        LOG_LIMITED(LOG_LEVEL_ERROR, "healthz", 10000, "healthz: a worker thread is stuck",
                    "thread", metrics_thread_name((metrics_thread_t) t));
        reply_body(r, MHD_HTTP_SERVICE_UNAVAILABLE, "text/plain; charset=utf-8", text,
                   text != NULL ? strlen(text) : 0);
        return;
    }
    reply_body(r, MHD_HTTP_OK, "text/plain; charset=utf-8", strdup("ok\n"), 3);
}

/* ---- the JSON views ---------------------------------------------------------- */

static void get_instance(http_t *h, const char *process, const char *key, reply_t *r)
{
    char errstr[1024], message[HTTP_MAX_PATH + 64];
    json_t *doc = NULL;
    query_absent_t absent = {0};
    err_class_t cls = db_acquire(h, clock_monotonic_ms() + QUERY_BUDGET_MS, errstr, sizeof errstr);

    if (cls == ERR_OK) {
        cls = query_instance(h->conn, process, key, &doc, &absent, errstr, sizeof errstr);
        db_release(h);
    }
    if (cls != ERR_OK) {
        reply_db_error(r, cls, errstr);
    } else if (doc == NULL) {
        /* Events judged for a key with no instance are parked, waiting for
         * the start event, or belonged to an instance retention removed:
         * worth saying which. */
        snprintf(message, sizeof message, "no instance %s of %s", key, process);
        reply_json(r, MHD_HTTP_NOT_FOUND,
                   json_pack("{s:s, s:I, s:b}", "error", message, "judged_events",
                             (json_int_t) absent.judged, "removed", absent.started));
    } else {
        reply_json(r, MHD_HTTP_OK, doc);
    }
}

static void get_stuck(http_t *h, const char *process, reply_t *r)
{
    char errstr[1024];
    json_t *doc = NULL;
    err_class_t cls = db_acquire(h, clock_monotonic_ms() + QUERY_BUDGET_MS, errstr, sizeof errstr);

    if (cls == ERR_OK) {
        cls = query_stuck(h->conn, process, &doc, errstr, sizeof errstr);
        db_release(h);
    }
    if (cls != ERR_OK)
        reply_db_error(r, cls, errstr);
    else
        reply_json(r, MHD_HTTP_OK, doc);
}

/* Runs one of the query.h views that take only the connection's turn. */
typedef err_class_t (*view_fn)(PGconn *conn, const void *arg, json_t **out, char *errstr,
                               size_t errstr_size);

static void get_view(http_t *h, view_fn fn, const void *arg, const char *absent, reply_t *r)
{
    char errstr[1024];
    json_t *doc = NULL;
    err_class_t cls = db_acquire(h, clock_monotonic_ms() + QUERY_BUDGET_MS, errstr, sizeof errstr);

    if (cls == ERR_OK) {
        cls = fn(h->conn, arg, &doc, errstr, sizeof errstr);
        db_release(h);
    }
    if (cls != ERR_OK)
        reply_db_error(r, cls, errstr);
    else if (doc == NULL)
        reply_error(r, MHD_HTTP_NOT_FOUND, "%s", absent);
    else
        reply_json(r, MHD_HTTP_OK, doc);
}

static err_class_t view_instances(PGconn *conn, const void *arg, json_t **out, char *errstr,
                                  size_t errstr_size)
{
    return query_instances(conn, arg, out, errstr, errstr_size);
}

static err_class_t view_processes(PGconn *conn, const void *arg, json_t **out, char *errstr,
                                  size_t errstr_size)
{
    (void) arg;
    return query_processes(conn, out, errstr, errstr_size);
}

static err_class_t view_graph(PGconn *conn, const void *arg, json_t **out, char *errstr,
                              size_t errstr_size)
{
    return query_graph(conn, arg, out, errstr, errstr_size);
}

typedef struct report_arg {
    const char *process;
    report_options_t opts;
} report_arg_t;

/* The document `steward report --json` prints for the recorded
 * definitions: the report's rules have one home, shadow/report. */
static err_class_t view_report(PGconn *conn, const void *arg, json_t **out, char *errstr,
                               size_t errstr_size)
{
    const report_arg_t *a = arg;
    def_set_t *set = NULL;
    err_class_t cls = report_load_recorded(conn, a->process, &set, errstr, errstr_size);

    *out = NULL;
    /* An unknown process is a 404; no process at all, an empty report. */
    if (cls == ERR_OK && set != NULL && (a->process == NULL || set->n > 0))
        cls = report_build(conn, (const def_t *const *) set->defs, set->n, &a->opts, out, errstr,
                           errstr_size);
    def_set_free(set);
    return cls;
}

/* The query arguments of one request, percent-decoded (they arrive
 * undecoded, see keep_escaped()); "" counts as absent. */
#define MAX_ARGS 8
typedef struct args {
    const char *name[MAX_ARGS];
    char *value[MAX_ARGS];
    size_t n;
} args_t;

/* Decodes the arguments named in `names` (NULL-terminated); false with a
 * 400 in r when one is malformed. */
static bool args_read(struct MHD_Connection *conn, const char *const *names, args_t *a, reply_t *r)
{
    memset(a, 0, sizeof *a);
    for (; *names != NULL && a->n < MAX_ARGS; names++) {
        const char *raw = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, *names);
        a->name[a->n] = *names;
        a->value[a->n] = raw != NULL && raw[0] != '\0' ? strdup(raw) : NULL;
        if (raw != NULL && raw[0] != '\0' && a->value[a->n] == NULL) {
            reply_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
            a->n++;
            return false;
        }
        const char *problem = a->value[a->n] != NULL ? http_percent_decode(a->value[a->n]) : NULL;
        a->n++;
        if (problem != NULL) {
            reply_error(r, MHD_HTTP_BAD_REQUEST, "malformed argument %s: %s", *names, problem);
            return false;
        }
    }
    return true;
}

static const char *arg(const args_t *a, const char *name)
{
    for (size_t i = 0; i < a->n; i++)
        if (strcmp(a->name[i], name) == 0)
            return a->value[i];
    return NULL;
}

static void args_free(args_t *a)
{
    for (size_t i = 0; i < a->n; i++)
        free(a->value[i]);
}

/* true or false, absent being false; anything else is a 400. */
static bool arg_bool(const args_t *a, const char *name, bool *out, reply_t *r)
{
    const char *v = arg(a, name);
    *out = v != NULL && strcmp(v, "true") == 0;
    if (v == NULL || strcmp(v, "true") == 0 || strcmp(v, "false") == 0)
        return true;
    reply_error(r, MHD_HTTP_BAD_REQUEST, "argument %s must be true or false", name);
    return false;
}

/* GET /v1/instances: the filters of query_filter_t; `after` is the page
 * cursor, "PROCESS/KEY" as the previous page's `next` gives it. */
static void get_instances(http_t *h, struct MHD_Connection *conn, reply_t *r)
{
    static const char *const names[] = {"process", "state",   "key",    "after",
                                        "limit",   "overdue", "active", NULL};
    args_t a;
    query_filter_t f = {.limit = 50};
    char *after = NULL;

    if (!args_read(conn, names, &a, r) || !arg_bool(&a, "overdue", &f.overdue_only, r) ||
        !arg_bool(&a, "active", &f.active_only, r))
        goto out;
    f.process = arg(&a, "process");
    f.state = arg(&a, "state");
    f.key_prefix = arg(&a, "key");
    if (arg(&a, "limit") != NULL) {
        char *end;
        long n = strtol(arg(&a, "limit"), &end, 10);
        if (*end != '\0' || n < 1 || n > QUERY_MAX_LIMIT) {
            reply_error(r, MHD_HTTP_BAD_REQUEST, "limit must be a number from 1 to %d",
                        QUERY_MAX_LIMIT);
            goto out;
        }
        f.limit = (int) n;
    }
    if (arg(&a, "after") != NULL) {
        after = strdup(arg(&a, "after"));
        char *slash = after != NULL ? strchr(after, '/') : NULL;
        if (slash == NULL || slash == after) {
            reply_error(r, MHD_HTTP_BAD_REQUEST,
                        "after must be PROCESS/KEY, the process and key of the last instance of "
                        "the previous page");
            goto out;
        }
        *slash = '\0';
        f.after_process = after;
        f.after_key = slash + 1;
    }
    get_view(h, view_instances, &f, "", r);
out:
    free(after);
    args_free(&a);
}

/* GET /v1/report?process=P&since=7d */
static void get_report(http_t *h, struct MHD_Connection *conn, reply_t *r)
{
    static const char *const names[] = {"process", "since", NULL};
    args_t a;
    report_arg_t ra = {.opts = {.definitions = "steward.definitions"}};
    char problem[256];

    if (!args_read(conn, names, &a, r))
        goto out;
    ra.process = arg(&a, "process");
    ra.opts.since_text = arg(&a, "since");
    if (ra.opts.since_text != NULL &&
        (!duration_parse(ra.opts.since_text, &ra.opts.since_ms, problem, sizeof problem) ||
         ra.opts.since_ms <= 0)) {
        reply_error(r, MHD_HTTP_BAD_REQUEST, "since must be a positive duration such as 7d");
        goto out;
    }
    get_view(h, view_report, &ra, "no such process", r);
out:
    args_free(&a);
}

/* GET / and /console/{file}: the console's files, compiled in. */
static void get_asset(const char *name, reply_t *r)
{
    for (size_t i = 0; i < console_n_assets; i++) {
        if (strcmp(console_assets[i].name, name) != 0)
            continue;
        char *copy = malloc(console_assets[i].size + 1);
        if (copy != NULL)
            memcpy(copy, console_assets[i].data, console_assets[i].size);
        reply_body(r, MHD_HTTP_OK, console_assets[i].content_type, copy, console_assets[i].size);
        return;
    }
    reply_error(r, MHD_HTTP_NOT_FOUND, "no such console file");
}

/* ---- routing ------------------------------------------------------------------ */

static int hex_value(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/*
 * Percent-decodes s in place (it can only shrink). Returns NULL, or what
 * is wrong with it: a '%' without two hex digits, a NUL, or bytes that
 * are not UTF-8.
 */
const char *http_percent_decode(char *s)
{
    char *out = s;
    for (const char *in = s; *in != '\0'; in++) {
        if (*in != '%') {
            *out++ = *in;
            continue;
        }
        int hi = hex_value(in[1]);
        int lo = hi >= 0 ? hex_value(in[2]) : -1;
        if (lo < 0)
            return "malformed percent-encoding (a '%' must start %XX, two hex digits)";
        if (hi == 0 && lo == 0)
            return "a NUL byte (%00)";
        *out++ = (char) (hi * 16 + lo);
        in += 2;
    }
    *out = '\0';
    if (!utf8_valid((const unsigned char *) s, (size_t) (out - s)))
        return "not valid UTF-8";
    return NULL;
}

/* ---- tokens --------------------------------------------------------------- */

typedef struct http_token {
    char *name;
    bool operate; /* scope operate (else read) */
    uint8_t hash[32];
} http_token_t;

struct http_tokens {
    http_token_t *items;
    size_t n;
};

void http_tokens_free(http_tokens_t *t)
{
    if (t == NULL)
        return;
    for (size_t i = 0; i < t->n; i++)
        free(t->items[i].name);
    free(t->items);
    free(t);
}

size_t http_tokens_count(const http_tokens_t *t)
{
    return t != NULL ? t->n : 0;
}

static bool parse_hex32(const char *hex, uint8_t out[32])
{
    if (strlen(hex) != 64)
        return false;
    for (size_t i = 0; i < 32; i++) {
        int hi = hex_value(hex[2 * i]), lo = hex_value(hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return false;
        out[i] = (uint8_t) (hi * 16 + lo);
    }
    return true;
}

http_tokens_t *http_tokens_parse(const char *text, char *errstr, size_t errstr_size)
{
    http_tokens_t *t = calloc(1, sizeof *t);
    char *copy = strdup(text);
    int lineno = 0;
    bool ok = t != NULL && copy != NULL;
    if (!ok)
        err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
    /* strtok_r skips empty lines; count them anyway for the messages. */
    for (char *line = ok ? copy : NULL, *next; ok && line != NULL; line = next) {
        next = strchr(line, '\n');
        if (next != NULL)
            *next++ = '\0';
        lineno++;
        char *save = NULL, *name = strtok_r(line, " \t\r", &save);
        if (name == NULL || name[0] == '#')
            continue;
        char *scope = strtok_r(NULL, " \t\r", &save), *hex = strtok_r(NULL, " \t\r", &save);
        char *extra = strtok_r(NULL, " \t\r", &save);
        http_token_t tok = {0};
        /* The line's content is never quoted: a secret pasted by mistake
         * in place of its hash must not reach a log. */
        if (scope == NULL || hex == NULL || extra != NULL) {
            err_set(ERR_INVALID, errstr, errstr_size,
                    "http.tokens_file line %d: expected NAME SCOPE SHA256-HEX", lineno);
            ok = false;
        } else if (strcmp(scope, "read") != 0 && strcmp(scope, "operate") != 0) {
            err_set(ERR_INVALID, errstr, errstr_size,
                    "http.tokens_file line %d: the scope must be read or operate", lineno);
            ok = false;
        } else if (!parse_hex32(hex, tok.hash)) {
            err_set(ERR_INVALID, errstr, errstr_size,
                    "http.tokens_file line %d: the third field must be the SHA-256 of the "
                    "secret, 64 hex digits (sha256sum), never the secret itself",
                    lineno);
            ok = false;
        } else if (strlen(name) > ACTION_ACTOR_MAX ||
                   !utf8_valid((const unsigned char *) name, strlen(name))) {
            err_set(ERR_INVALID, errstr, errstr_size,
                    "http.tokens_file line %d: a name is 1 to %d bytes of UTF-8", lineno,
                    ACTION_ACTOR_MAX);
            ok = false;
        } else {
            http_token_t *grown = realloc(t->items, (t->n + 1) * sizeof *grown);
            tok.name = strdup(name);
            tok.operate = strcmp(scope, "operate") == 0;
            if (grown != NULL)
                t->items = grown;
            if (grown == NULL || tok.name == NULL) {
                free(tok.name);
                err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
                ok = false;
            } else {
                t->items[t->n++] = tok;
            }
        }
    }
    if (copy != NULL)
        explicit_bzero(copy, strlen(text));
    free(copy);
    if (!ok) {
        http_tokens_free(t);
        return NULL;
    }
    return t;
}

/*
 * The token whose hash the presented secret has, comparing every token in
 * full whatever matches (constant time in the secret); NULL when none.
 * Borrowed from t.
 */
static const http_token_t *token_find(const http_tokens_t *t, const char *secret)
{
    uint8_t hash[32];
    const http_token_t *found = NULL;
    sha256(secret, strlen(secret), hash);
    for (size_t i = 0; t != NULL && i < t->n; i++) {
        uint8_t diff = 0;
        for (size_t k = 0; k < 32; k++)
            diff |= (uint8_t) (hash[k] ^ t->items[i].hash[k]);
        /* Branch-free select, so timing does not say which line matched. */
        uintptr_t mask = (uintptr_t) 0 - (uintptr_t) (diff == 0);
        found = (const http_token_t *) (((uintptr_t) &t->items[i] & mask) |
                                        ((uintptr_t) found & ~mask));
    }
    explicit_bzero(hash, sizeof hash);
    return found;
}

err_class_t http_reload_tokens(http_t *h, const char *tokens, char *errstr, size_t errstr_size)
{
    if (h == NULL)
        return ERR_OK;
    http_tokens_t *next = NULL;
    if (tokens != NULL && tokens[0] != '\0') {
        if ((next = http_tokens_parse(tokens, errstr, errstr_size)) == NULL)
            return ERR_INVALID;
    } else if (!h->loopback && !h->anonymous_read) {
        return err_set(ERR_INVALID, errstr, errstr_size,
                       "http.tokens_file cannot be removed while listening beyond the loopback "
                       "without http.allow_anonymous_read");
    }
    pthread_mutex_lock(&h->tokens_lock);
    http_tokens_t *old = h->tokens;
    h->tokens = next;
    pthread_mutex_unlock(&h->tokens_lock);
    http_tokens_free(old);
    return ERR_OK;
}

typedef enum access {
    ACCESS_OPEN,    /* probes: anyone */
    ACCESS_READ,    /* views and metrics */
    ACCESS_OPERATE, /* actions */
} access_t;

/*
 * Whether the request may go on. On true, actor (actor_size >= the
 * longest name + 1) holds the token's name, or "" for an anonymous read.
 * On false r holds the 401 or 403.
 */
static bool authorize(http_t *h, struct MHD_Connection *conn, access_t need, char *actor,
                      size_t actor_size, reply_t *r)
{
    actor[0] = '\0';
    if (need == ACCESS_OPEN)
        return true;
    const char *auth = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
    if (auth == NULL) {
        if (need == ACCESS_READ && (h->loopback || h->anonymous_read))
            return true;
        reply_error(r, MHD_HTTP_UNAUTHORIZED, "%s",
                    need == ACCESS_OPERATE
                        ? "this endpoint changes state: it needs Authorization: Bearer TOKEN "
                          "with scope operate (http.tokens_file)"
                        : "reads off the loopback need Authorization: Bearer TOKEN "
                          "(http.tokens_file)");
        r->unauthorized = true;
        return false;
    }
    if (strncasecmp(auth, "Bearer ", 7) != 0 || auth[7] == '\0') {
        reply_error(r, MHD_HTTP_UNAUTHORIZED, "expected Authorization: Bearer TOKEN");
        r->unauthorized = true;
        return false;
    }
    bool operate = false;
    pthread_mutex_lock(&h->tokens_lock);
    const http_token_t *tok = token_find(h->tokens, auth + 7);
    if (tok != NULL) {
        snprintf(actor, actor_size, "%s", tok->name);
        operate = tok->operate;
    }
    pthread_mutex_unlock(&h->tokens_lock);
    if (tok == NULL) {
        /* Never echo what was presented: it may be a real secret with a typo. */
        reply_error(r, MHD_HTTP_UNAUTHORIZED, "unknown token");
        r->unauthorized = true;
        return false;
    }
    if (need == ACCESS_OPERATE && !operate) {
        reply_error(r, MHD_HTTP_FORBIDDEN, "token %s has scope read; this needs operate", actor);
        return false;
    }
    return true;
}

/* ---- actions ------------------------------------------------------------------ */

static void reply_action(reply_t *r, action_rc_t rc, json_t *result, const char *errstr);

/* One action, by the token named actor, with the JSON body {"reason", "as"|"to"}. */
static void post_action(http_t *h, action_verb_t verb, action_request_t *req, const char *body,
                        reply_t *r)
{
    char errstr[1024];
    json_error_t jerr;
    json_t *doc = body != NULL ? json_loads(body, 0, &jerr) : NULL;
    /* An action's one option, if any, is what it acts towards (its target). */
    const action_option_t *target = &action_verb_def(verb)->options[0];
    if (!json_is_object(doc)) {
        json_decref(doc);
        reply_error(r, MHD_HTTP_BAD_REQUEST,
                    "expected a JSON object body: {\"reason\": \"why\"%s%s%s%s}",
                    target->name != NULL ? ", \"" : "", target->name != NULL ? target->name : "",
                    target->name != NULL ? "\": \"" : "", target->name != NULL ? target->arg : "");
        return;
    }
    req->reason = json_string_value(json_object_get(doc, "reason"));
    req->target =
        target->name != NULL ? json_string_value(json_object_get(doc, target->name)) : NULL;

    json_t *result = NULL;
    action_rc_t rc = ACTION_FAILED;
    err_class_t cls = db_acquire(h, clock_monotonic_ms() + QUERY_BUDGET_MS, errstr, sizeof errstr);
    if (cls == ERR_OK) {
        rc = action_run(h->conn, verb, req, &result, errstr, sizeof errstr);
        db_release(h);
    }
    if (cls != ERR_OK) {
        reply_db_error(r, cls, errstr);
    } else {
        if (rc == ACTION_OK)
            LOG_INFO("operator action", "action", action_verb_name(verb), "actor", req->actor,
                     "process", req->process, "key", req->key);
        reply_action(r, rc, result, errstr);
        result = NULL; /* taken by reply_action() on OK; NULL otherwise */
    }
    json_decref(result);
    json_decref(doc);
}

/* A JSON body as an object, or NULL with the 400 in r. Caller frees. */
static json_t *body_object(const char *body, const char *expected, reply_t *r)
{
    json_t *doc = body != NULL ? json_loads(body, 0, NULL) : NULL;
    if (!json_is_object(doc)) {
        json_decref(doc);
        reply_error(r, MHD_HTTP_BAD_REQUEST, "expected a JSON object body: %s", expected);
        return NULL;
    }
    return doc;
}

/* The answer to an action: 200 with result (taken) or the error's status. */
static void reply_action(reply_t *r, action_rc_t rc, json_t *result, const char *errstr)
{
    static const unsigned int status[] = {
        [ACTION_OK] = MHD_HTTP_OK,
        [ACTION_BAD_REQUEST] = MHD_HTTP_BAD_REQUEST,
        [ACTION_NOT_FOUND] = MHD_HTTP_NOT_FOUND,
        [ACTION_CONFLICT] = MHD_HTTP_CONFLICT,
        [ACTION_REFUSED] = MHD_HTTP_CONFLICT,
        [ACTION_FAILED] = MHD_HTTP_SERVICE_UNAVAILABLE,
    };
    if (rc == ACTION_OK)
        reply_json(r, MHD_HTTP_OK, result);
    else
        reply_error(r, status[rc], "%s", errstr);
}

/* POST /v1/silences {"process", "state"?, "team"?, "for", "reason"};
 * POST /v1/silences/{id}/unsilence {"reason"}; GET /v1/silences[?all=true]. */
static void silences(http_t *h, const char *method, const char *id, const char *actor,
                     const char *all, const char *body, reply_t *r)
{
    char errstr[1024];
    json_t *doc = NULL, *result = NULL;
    silence_request_t req = {.actor = actor};
    long long sid = 0;
    bool get = strcmp(method, MHD_HTTP_METHOD_POST) != 0;

    if (!get && id == NULL) {
        doc = body_object(body,
                          "{\"process\": P, \"state\": S?, \"team\": T?, \"for\": \"2h\", "
                          "\"reason\": \"why\"}",
                          r);
        if (doc == NULL)
            return;
        req.process = json_string_value(json_object_get(doc, "process"));
        req.state = json_string_value(json_object_get(doc, "state"));
        req.team = json_string_value(json_object_get(doc, "team"));
        req.reason = json_string_value(json_object_get(doc, "reason"));
        const char *for_text = json_string_value(json_object_get(doc, "for"));
        if (for_text == NULL || !duration_parse(for_text, &req.for_ms, errstr, sizeof errstr)) {
            reply_error(r, MHD_HTTP_BAD_REQUEST, "for: %s",
                        for_text == NULL ? "expected a duration such as \"2h\"" : errstr);
            json_decref(doc);
            return;
        }
    } else if (!get) {
        char *end;
        sid = strtoll(id, &end, 10);
        if (*end != '\0' || sid <= 0) {
            reply_error(r, MHD_HTTP_NOT_FOUND, "no silence %s", id);
            return;
        }
        if ((doc = body_object(body, "{\"reason\": \"why\"}", r)) == NULL)
            return;
        req.reason = json_string_value(json_object_get(doc, "reason"));
    }
    action_rc_t rc = ACTION_FAILED;
    err_class_t cls = db_acquire(h, clock_monotonic_ms() + QUERY_BUDGET_MS, errstr, sizeof errstr);
    if (cls == ERR_OK) {
        if (get)
            rc = action_silences(h->conn, all != NULL && strcmp(all, "true") == 0, &result, errstr,
                                 sizeof errstr);
        else if (id == NULL)
            rc = action_silence(h->conn, &req, &result, errstr, sizeof errstr);
        else
            rc = action_unsilence(h->conn, sid, actor, req.reason, &result, errstr, sizeof errstr);
        db_release(h);
    }
    if (cls != ERR_OK) {
        reply_db_error(r, cls, errstr);
    } else {
        if (rc == ACTION_OK && !get)
            LOG_INFO("operator action", "action", id == NULL ? "silence" : "unsilence", "actor",
                     actor, "process", req.process);
        reply_action(r, rc, result, errstr);
        result = NULL; /* taken by reply_action() on OK; NULL otherwise */
    }
    json_decref(result);
    json_decref(doc);
}

/*
 * Writes prefix and the path as it was sent into buf, bytes past ASCII as
 * %XX: a path whose segments decode to UTF-8 may still hold raw bytes that
 * are not ("%CA" then a raw 0x93 make U+0293), and the message becomes a
 * JSON body, which must be UTF-8.
 */
static void quote_path(char *buf, size_t buf_size, const char *prefix, const char *path)
{
    size_t o = (size_t) snprintf(buf, buf_size, "%s", prefix);
    for (const unsigned char *p = (const unsigned char *) path; *p != '\0' && o + 4 < buf_size;
         p++) {
        if (*p < 0x80)
            buf[o++] = (char) *p;
        else
            o += (size_t) snprintf(buf + o, buf_size - o, "%%%02X", *p);
    }
    buf[o] = '\0';
}

/* A 405 for the path as sent: "<path> answers <what>". */
static void refuse_method(http_route_t *out, const char *url, const char *what)
{
    out->status = MHD_HTTP_METHOD_NOT_ALLOWED;
    quote_path(out->error, sizeof out->error, "", url);
    size_t quoted = strlen(out->error);
    snprintf(out->error + quoted, sizeof out->error - quoted, " answers %s", what);
}

/* One more than the longest route, to tell them apart. */
#define MAX_SEGMENTS 6

/* Whether the n segments are the verb table's `pattern` ("/v1/alerts/{id}/ack"):
 * its literal segments equal, each {capture} not empty. */
static bool path_matches(const char *pattern, char *const *seg, size_t n)
{
    size_t i = 0;
    for (const char *p = pattern + 1;; i++) {
        size_t len = strcspn(p, "/");
        if (i >= n || i >= MAX_SEGMENTS)
            return false;
        if (p[0] == '{' ? seg[i][0] == '\0' : strlen(seg[i]) != len || memcmp(seg[i], p, len) != 0)
            return false;
        if (p[len] == '\0')
            break;
        p += len + 1;
    }
    return i + 1 == n;
}

/* The segment `pattern` captures as {name}; NULL when it has no such capture. */
static const char *path_capture(const char *pattern, char *const *seg, const char *name)
{
    size_t i = 0, len = strlen(name);
    for (const char *p = pattern + 1;; i++) {
        size_t seg_len = strcspn(p, "/");
        if (p[0] == '{' && seg_len == len + 2 && memcmp(p + 1, name, len) == 0)
            return seg[i];
        if (p[seg_len] == '\0')
            return NULL;
        p += seg_len + 1;
    }
}

/* The endpoint that serves a row of the verb table. */
static http_endpoint_t verb_endpoint(const action_verb_def_t *v)
{
    switch (v->on) {
    case ACTION_ON_ALERT:
        return HTTP_EP_ALERT_ACTION;
    case ACTION_ON_INSTANCE:
        return HTTP_EP_INSTANCE_ACTION;
    case ACTION_ON_SILENCE:
        break;
    }
    return strstr(v->path, "{id}") != NULL ? HTTP_EP_UNSILENCE : HTTP_EP_SILENCES;
}

void http_route(const char *method, const char *url, http_route_t *out)
{
    char *seg[MAX_SEGMENTS];
    size_t n = 0, len = strlen(url);
    http_endpoint_t ep = HTTP_EP_NONE;

    out->endpoint = HTTP_EP_NONE;
    out->status = 0;
    out->allow_post = out->action = false;
    out->verb = ACTION_ACK;
    out->error[0] = '\0';
    out->process = out->key = out->id = out->asset = NULL;
    /* The absolute form a proxy sends ("http://host:port/path"): its path. */
    if (strncasecmp(url, "http://", 7) == 0 || strncasecmp(url, "https://", 8) == 0) {
        const char *slash = strchr(strstr(url, "//") + 2, '/');
        url = slash != NULL ? slash : "/";
        len = strlen(url);
    }
    if (len > HTTP_MAX_PATH) {
        out->status = MHD_HTTP_BAD_REQUEST;
        snprintf(out->error, sizeof out->error, "the path is longer than %d bytes", HTTP_MAX_PATH);
        return;
    }
    if (url[0] != '/') {
        out->status = MHD_HTTP_BAD_REQUEST;
        snprintf(out->error, sizeof out->error, "the path must start with '/'");
        return;
    }
    /* Split first, decode second: an encoded '/' (%2F) is part of a
     * segment, never a separator. */
    memcpy(out->path, url + 1, len);
    for (char *p = out->path;;) {
        char *slash = strchr(p, '/');
        if (slash != NULL)
            *slash = '\0';
        const char *problem = http_percent_decode(p);
        if (problem != NULL) {
            out->status = MHD_HTTP_BAD_REQUEST;
            snprintf(out->error, sizeof out->error, "malformed path: segment %zu: %s", n + 1,
                     problem);
            return;
        }
        if (n < MAX_SEGMENTS)
            seg[n] = p;
        n++;
        if (slash == NULL)
            break;
        p = slash + 1;
    }

    /* The verbs' routes, from the table: the row whose path and method
     * match, else (a 405) what the path answers. */
    const action_verb_def_t *row = NULL, *at_path = NULL;
    bool path_reads = false;
    bool reading =
        strcmp(method, MHD_HTTP_METHOD_GET) == 0 || strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
    for (size_t i = 0; i < action_verb_count; i++) {
        const action_verb_def_t *v = &action_verbs[i];
        if (!path_matches(v->path, seg, n))
            continue;
        bool reads = strcmp(v->method, MHD_HTTP_METHOD_GET) == 0;
        at_path = at_path != NULL ? at_path : v;
        path_reads = path_reads || reads;
        if (row == NULL && (reads ? reading : strcmp(method, v->method) == 0))
            row = v;
    }

    if (at_path != NULL)
        ep = verb_endpoint(at_path);
    else if (n == 1 && strcmp(seg[0], "metrics") == 0)
        ep = HTTP_EP_METRICS;
    else if (n == 1 && strcmp(seg[0], "healthz") == 0)
        ep = HTTP_EP_HEALTHZ;
    else if (n == 1 && strcmp(seg[0], "readyz") == 0)
        ep = HTTP_EP_READYZ;
    else if (n == 2 && strcmp(seg[0], "v1") == 0 && strcmp(seg[1], "stuck") == 0)
        ep = HTTP_EP_STUCK;
    else if (n == 4 && strcmp(seg[0], "v1") == 0 && strcmp(seg[1], "instances") == 0 &&
             seg[2][0] != '\0' && seg[3][0] != '\0')
        ep = HTTP_EP_INSTANCE;
    else if (n == 2 && strcmp(seg[0], "v1") == 0 && strcmp(seg[1], "instances") == 0)
        ep = HTTP_EP_INSTANCES;
    else if (n == 2 && strcmp(seg[0], "v1") == 0 && strcmp(seg[1], "processes") == 0)
        ep = HTTP_EP_PROCESSES;
    else if (n == 4 && strcmp(seg[0], "v1") == 0 && strcmp(seg[1], "processes") == 0 &&
             seg[2][0] != '\0' && strcmp(seg[3], "graph") == 0)
        ep = HTTP_EP_GRAPH;
    else if (n == 2 && strcmp(seg[0], "v1") == 0 && strcmp(seg[1], "report") == 0)
        ep = HTTP_EP_REPORT;
    else if ((n == 1 && seg[0][0] == '\0') || (n == 2 && strcmp(seg[0], "console") == 0))
        ep = HTTP_EP_ASSET;
    else if (n == 2 && strcmp(seg[0], "v1") == 0 && strcmp(seg[1], "verbs") == 0)
        ep = HTTP_EP_VERBS;

    if (ep == HTTP_EP_NONE) {
        out->status = MHD_HTTP_NOT_FOUND;
        if (n >= 2 && strcmp(seg[0], "v1") == 0 && strcmp(seg[1], "instances") == 0)
            snprintf(out->error, sizeof out->error,
                     "expected /v1/instances/{process}/{key}; write a '/' in a key as %%2F");
        else
            quote_path(out->error, sizeof out->error, "no such endpoint: ", url);
        return;
    }
    out->endpoint = ep; /* a 405 names it too */
    if (at_path != NULL && row == NULL) {
        refuse_method(out, url, path_reads ? "GET and HEAD only" : "POST only");
        out->allow_post = !path_reads;
        return;
    }
    if (at_path == NULL && !reading) {
        refuse_method(out, url, "GET and HEAD only");
        return;
    }
    out->action = row != NULL && strcmp(row->method, MHD_HTTP_METHOD_GET) != 0;
    out->verb = row != NULL && row->on != ACTION_ON_SILENCE ? row->verb : ACTION_ACK;
    if (row != NULL) {
        out->process = path_capture(row->path, seg, "process");
        out->key = path_capture(row->path, seg, "key");
        out->id = path_capture(row->path, seg, "id");
    } else if (ep == HTTP_EP_INSTANCE) {
        out->process = seg[2];
        out->key = seg[3];
    } else if (ep == HTTP_EP_GRAPH) {
        out->process = seg[2];
    } else if (ep == HTTP_EP_ASSET) {
        out->asset = n == 1 || seg[1][0] == '\0' ? "index.html" : seg[1];
    }
}

/* ---- the Host check ------------------------------------------------------------ */

/*
 * Splits a Host header's value into its name (brackets kept around an IPv6
 * address) and checks the port, if any, is a number. False for anything
 * else, an unbracketed IPv6 address included.
 */
static bool host_name(const char *host, char *name, size_t name_size)
{
    const char *end;
    if (host[0] == '[') {
        const char *close = strchr(host, ']');
        if (close == NULL)
            return false;
        end = close + 1;
    } else {
        end = host + strcspn(host, ":");
    }
    if (*end == ':') {
        size_t digits = strspn(end + 1, "0123456789");
        if (digits == 0 || digits > 5 || end[1 + digits] != '\0')
            return false;
    } else if (*end != '\0') {
        return false;
    }
    if (end == host || (size_t) (end - host) >= name_size)
        return false;
    snprintf(name, name_size, "%.*s", (int) (end - host), host);
    return true;
}

/* Whether name (from host_name()) is localhost or a loopback address:
 * 127.0.0.0/8 in dotted form, [::1] or [::ffff:127.x.y.z]. */
static bool host_is_loopback(const char *name)
{
    if (strcasecmp(name, "localhost") == 0 || strcasecmp(name, "localhost.") == 0)
        return true;
    size_t len = strlen(name);
    if (name[0] == '[') {
        char inner[INET6_ADDRSTRLEN];
        struct in6_addr a6;
        if (len < 3 || name[len - 1] != ']' || len - 2 >= sizeof inner)
            return false;
        snprintf(inner, sizeof inner, "%.*s", (int) (len - 2), name + 1);
        return inet_pton(AF_INET6, inner, &a6) == 1 &&
               (IN6_IS_ADDR_LOOPBACK(&a6) || (IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127));
    }
    struct in_addr a4;
    return inet_pton(AF_INET, name, &a4) == 1 && (ntohl(a4.s_addr) >> 24) == 127;
}

/*
 * Whether the request's Host names this server. A web page can make a
 * browser send its requests to 127.0.0.1 by pointing its own name there
 * (DNS rebinding); the browser then treats the answers as the page's own,
 * but still sends the page's name as Host. So a loopback listener answers
 * only loopback names and http.allowed_hosts (what a proxy in front sends);
 * another listener, which needs tokens for its reads, checks only against
 * http.allowed_hosts when it is set. No Host (HTTP/1.0) is no browser.
 * On false r holds the 421.
 */
static bool host_allowed(const http_t *h, struct MHD_Connection *conn, reply_t *r)
{
    const char *host = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
    char name[300], quoted[600];

    if (host == NULL || h->any_host || (!h->loopback && h->allowed_hosts[0] == NULL))
        return true;
    bool parsed = host_name(host, name, sizeof name);
    if (parsed && h->loopback && host_is_loopback(name))
        return true;
    for (char **allowed = h->allowed_hosts; *allowed != NULL; allowed++) {
        if (strcasecmp(*allowed, host) == 0 || (parsed && strcasecmp(*allowed, name) == 0))
            return true;
    }
    quote_path(quoted, sizeof quoted, "", host);
    reply_error(r, MHD_HTTP_MISDIRECTED_REQUEST,
                "Host %s is not a name of this server: %s; requests naming another host may come "
                "from a web page that pointed its name at this address (DNS rebinding). Behind a "
                "proxy, add the name it sends to http.allowed_hosts",
                quoted,
                h->loopback ? "a loopback listener answers localhost, 127.0.0.0/8, [::1] (any "
                              "port) and the names in http.allowed_hosts"
                            : "this listener answers the names in http.allowed_hosts");
    return false;
}

/* The comma-separated list as a NULL-terminated array of trimmed, non-empty
 * names (free with free_names()); NULL when out of memory. */
static char **split_names(const char *list, bool *any)
{
    size_t cap = 1;
    *any = false;
    for (const char *p = list; p != NULL && *p != '\0'; p++)
        cap += *p == ',';
    char **names = calloc(cap + 1, sizeof *names), *copy = strdup(list != NULL ? list : "");
    size_t n = 0;
    if (names == NULL || copy == NULL) {
        free(names);
        free(copy);
        return NULL;
    }
    char *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
        while (*tok == ' ' || *tok == '\t')
            tok++;
        size_t len = strlen(tok);
        while (len > 0 && (tok[len - 1] == ' ' || tok[len - 1] == '\t'))
            tok[--len] = '\0';
        if (len == 0)
            continue;
        *any = *any || strcmp(tok, "*") == 0;
        if ((names[n++] = strdup(tok)) == NULL) {
            free(copy);
            for (size_t i = 0; i < n; i++)
                free(names[i]);
            free(names);
            return NULL;
        }
    }
    free(copy);
    return names;
}

static void free_names(char **names)
{
    for (size_t i = 0; names != NULL && names[i] != NULL; i++)
        free(names[i]);
    free(names);
}

static void route(http_t *h, struct MHD_Connection *conn, const char *url, const char *method,
                  const request_t *q, reply_t *r)
{
    char actor[ACTION_ACTOR_MAX + 1];
    http_route_t rt;

    if (!host_allowed(h, conn, r))
        return;
    http_route(method, url, &rt);
    if (rt.status != 0) {
        reply_error(r, rt.status, "%s", rt.error);
        r->allow = rt.status == MHD_HTTP_METHOD_NOT_ALLOWED;
        r->allow_post = rt.allow_post;
        return;
    }
    /* The console's files hold no data: every view they show asks the API. */
    access_t need = rt.action ? ACCESS_OPERATE
                    : rt.endpoint == HTTP_EP_HEALTHZ || rt.endpoint == HTTP_EP_READYZ ||
                            rt.endpoint == HTTP_EP_ASSET
                        ? ACCESS_OPEN
                        : ACCESS_READ;
    if (!authorize(h, conn, need, actor, sizeof actor, r))
        return;
    if (rt.action && q->too_large) {
        reply_error(r, MHD_HTTP_CONTENT_TOO_LARGE, "the body is longer than %d bytes", MAX_BODY);
        return;
    }

    switch (rt.endpoint) {
    case HTTP_EP_METRICS:
        get_metrics(h, r);
        break;
    case HTTP_EP_HEALTHZ:
        get_healthz(h, r);
        break;
    case HTTP_EP_READYZ:
        get_readyz(h, r);
        break;
    case HTTP_EP_STUCK: {
        /* Arguments arrive undecoded too (see keep_escaped()). */
        const char *raw = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "process");
        char *process = raw != NULL && raw[0] != '\0' ? strdup(raw) : NULL;
        const char *problem = process != NULL ? http_percent_decode(process) : NULL;
        if (problem != NULL)
            reply_error(r, MHD_HTTP_BAD_REQUEST, "malformed argument process: %s", problem);
        else if (raw != NULL && raw[0] != '\0' && process == NULL)
            reply_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
        else
            get_stuck(h, process, r);
        free(process);
        break;
    }
    case HTTP_EP_INSTANCE:
        get_instance(h, rt.process, rt.key, r);
        break;
    case HTTP_EP_ALERT_ACTION: {
        char *end;
        action_request_t req = {.actor = actor, .alert_id = strtoll(rt.id, &end, 10)};
        if (*end != '\0' || req.alert_id <= 0)
            reply_error(r, MHD_HTTP_NOT_FOUND, "no alert %s (alert ids are positive numbers)",
                        rt.id);
        else
            post_action(h, rt.verb, &req, q->body, r);
        break;
    }
    case HTTP_EP_INSTANCE_ACTION: {
        action_request_t req = {.actor = actor, .process = rt.process, .key = rt.key};
        post_action(h, rt.verb, &req, q->body, r);
        break;
    }
    case HTTP_EP_SILENCES:
        silences(h, method, NULL, actor,
                 MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "all"), q->body, r);
        break;
    case HTTP_EP_UNSILENCE:
        silences(h, method, rt.id, actor, NULL, q->body, r);
        break;
    case HTTP_EP_INSTANCES:
        get_instances(h, conn, r);
        break;
    case HTTP_EP_PROCESSES:
        get_view(h, view_processes, NULL, "", r);
        break;
    case HTTP_EP_GRAPH: {
        char absent[HTTP_MAX_PATH + 64];
        snprintf(absent, sizeof absent, "no recorded definition of %s", rt.process);
        get_view(h, view_graph, rt.process, absent, r);
        break;
    }
    case HTTP_EP_REPORT:
        get_report(h, conn, r);
        break;
    case HTTP_EP_ASSET:
        get_asset(rt.asset, r);
        break;
    case HTTP_EP_VERBS: {
        json_t *doc = action_verbs_json();
        if (doc != NULL)
            reply_json(r, MHD_HTTP_OK, doc);
        else
            reply_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
        break;
    }
    case HTTP_EP_NONE:
        break;
    }
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url,
                              const char *method, const char *version, const char *upload_data,
                              size_t *upload_data_size, void **con_cls)
{
    reply_t r = {.status = MHD_HTTP_INTERNAL_SERVER_ERROR};
    (void) version;

    /* MHD keeps a connection open only for an answer queued once the
     * request is complete: the first call comes with the headers alone. */
    if (*con_cls == NULL) {
        request_t *q = calloc(1, sizeof *q);
        if (q == NULL)
            return MHD_NO;
        *con_cls = q;
        return MHD_YES;
    }
    request_t *q = *con_cls;
    if (*upload_data_size > 0) {
        /* Only POSTs use it; past MAX_BODY it is read and dropped, and
         * the answer says so. */
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (strcmp(method, MHD_HTTP_METHOD_POST) != 0 || q->too_large)
            return MHD_YES;
        if (q->len + n > MAX_BODY) {
            q->too_large = true;
            return MHD_YES;
        }
        char *grown = realloc(q->body, q->len + n + 1);
        if (grown == NULL)
            return MHD_NO;
        memcpy(grown + q->len, upload_data, n);
        q->body = grown;
        q->len += n;
        q->body[q->len] = '\0';
        return MHD_YES;
    }
    route(cls, conn, url, method, q, &r);
    return send_reply(conn, &r);
}

/* The request is over (answered or cut off): its body goes. */
static void request_done(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void) cls;
    (void) conn;
    (void) toe;
    request_t *q = *con_cls;
    if (q != NULL) {
        if (q->body != NULL)
            explicit_bzero(q->body, q->len);
        free(q->body);
        free(q);
        *con_cls = NULL;
    }
}

/* MHD would percent-decode the path before the handler sees it, turning a
 * key's %2F into a separator; leaving it alone lets route() split first. */
static size_t keep_escaped(void *cls, struct MHD_Connection *conn, char *s)
{
    (void) cls;
    (void) conn;
    return strlen(s);
}

/* MHD's error log, on any of its threads (and on ours while starting,
 * when the message is the reason http_new() fails). */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    http_t *h = cls;
    char msg[512];

    vsnprintf(msg, sizeof msg, fmt, ap);
    msg[strcspn(msg, "\n")] = '\0';
    pthread_mutex_lock(&h->log_lock);
    bool starting = h->starting;
    if (starting)
        snprintf(h->start_error, sizeof h->start_error, "%s", msg);
    pthread_mutex_unlock(&h->log_lock);
    if (!starting)
        LOG_LIMITED(LOG_LEVEL_WARN, "http-mhd", 5000, "http: libmicrohttpd", "error", msg);
}

/* ---- life ----------------------------------------------------------------------- */

/*
 * Splits "HOST:PORT", "[ADDR]:PORT" or ":PORT" into host (""
 * for every address) and port, checking the port is a number up to 65535.
 */
err_class_t http_parse_listen(const char *listen, char *host, size_t host_size, char *port,
                              size_t port_size, char *errstr, size_t errstr_size)
{
    const char *host_start = listen, *host_end, *colon;

    if (listen[0] == '[') {
        host_start = listen + 1;
        host_end = strchr(host_start, ']');
        if (host_end == NULL || host_end[1] != ':')
            return err_set(ERR_INVALID, errstr, errstr_size,
                           "http.listen '%s': expected [IPV6-ADDRESS]:PORT", listen);
        colon = host_end + 1;
    } else {
        colon = strrchr(listen, ':');
        if (colon == NULL)
            return err_set(ERR_INVALID, errstr, errstr_size,
                           "http.listen '%s': expected HOST:PORT, e.g. 127.0.0.1:9464", listen);
        if (memchr(listen, ':', (size_t) (colon - listen)) != NULL)
            return err_set(ERR_INVALID, errstr, errstr_size,
                           "http.listen '%s': write an IPv6 address in brackets, [ADDRESS]:PORT",
                           listen);
        host_end = colon;
    }
    const char *digits = colon + 1;
    size_t n_digits = strspn(digits, "0123456789");
    if (n_digits == 0 || n_digits > 5 || digits[n_digits] != '\0' || atol(digits) > 65535)
        return err_set(ERR_INVALID, errstr, errstr_size,
                       "http.listen '%s': the port must be a number from 0 to 65535", listen);
    if ((size_t) (host_end - host_start) >= host_size)
        return err_set(ERR_INVALID, errstr, errstr_size, "http.listen '%s': the host is too long",
                       listen);
    snprintf(host, host_size, "%.*s", (int) (host_end - host_start), host_start);
    snprintf(port, port_size, "%s", digits);
    return ERR_OK;
}

/* Whether addr is a loopback address (127.0.0.0/8, ::1, ::ffff:127.x). */
static bool is_loopback(const struct sockaddr *addr)
{
    if (addr->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *) addr)->sin_addr.s_addr) >> 24) == 127;
    if (addr->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *) addr)->sin6_addr;
        return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
    }
    return false;
}

http_t *http_new(const char *listen, const char *conninfo, const char *group, const char *tokens,
                 bool allow_anonymous_read, const char *allowed_hosts,
                 unsigned int connections_per_client, err_class_t *cls, char *errstr,
                 size_t errstr_size)
{
    char host[256], port[8], shown[300];
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *addrs = NULL;
    http_t *h = NULL;

    *cls = ERR_OK;
    if (listen == NULL || listen[0] == '\0')
        return NULL; /* disabled */
    if ((*cls = http_parse_listen(listen, host, sizeof host, port, sizeof port, errstr,
                                  errstr_size)) != ERR_OK)
        return NULL;
    /* ":PORT": every IPv4 address, whatever order the resolver prefers. */
    hints.ai_family = host[0] == '\0' ? AF_INET : AF_UNSPEC;
    int gai = getaddrinfo(host[0] != '\0' ? host : NULL, port, &hints, &addrs);
    if (gai != 0) {
        *cls = err_set(gai == EAI_AGAIN ? ERR_TRANSIENT : ERR_INVALID, errstr, errstr_size,
                       "http.listen '%s': %s", listen, gai_strerror(gai));
        return NULL;
    }

    h = calloc(1, sizeof *h);
    if (h == NULL) {
        *cls = err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
        freeaddrinfo(addrs);
        return NULL;
    }
    pthread_mutex_init(&h->db_lock, NULL);
    pthread_mutex_init(&h->log_lock, NULL);
    pthread_mutex_init(&h->state_lock, NULL);
    pthread_mutex_init(&h->tokens_lock, NULL);
    h->stall_ms = DEFAULT_STALL_MS;
    h->loopback = is_loopback(addrs->ai_addr);
    h->anonymous_read = allow_anonymous_read;
    if ((h->allowed_hosts = split_names(allowed_hosts, &h->any_host)) == NULL) {
        *cls = err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
        goto fail;
    }
    if (connections_per_client == 0)
        connections_per_client = HTTP_DEFAULT_PER_CLIENT;
    else if (connections_per_client > HTTP_MAX_CONNECTIONS)
        connections_per_client = HTTP_MAX_CONNECTIONS;
    bool has_tokens = tokens != NULL && tokens[0] != '\0';
    if (!h->loopback && !has_tokens && !allow_anonymous_read) {
        /* Instances carry captured payload values: not for anyone who can
         * reach the port. */
        *cls = err_set(ERR_INVALID, errstr, errstr_size,
                       "http.listen '%s' is not a loopback address and there is no "
                       "http.tokens_file: set one, or http.allow_anonymous_read=true to serve "
                       "reads to anyone who can reach it, or listen on 127.0.0.1",
                       listen);
        goto fail;
    }
    if (has_tokens && (*cls = http_reload_tokens(h, tokens, errstr, errstr_size)) != ERR_OK)
        goto fail;
    h->waiting = strdup("starting");
    h->conninfo = strdup(conninfo != NULL ? conninfo : "");
    h->group = strdup(group != NULL ? group : "");
    if (h->conninfo == NULL || h->group == NULL || h->waiting == NULL) {
        *cls = err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
        goto fail;
    }
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    h->started = (double) now.tv_sec + (double) now.tv_nsec / 1e9;

    h->starting = true;
    /* A pool of polling threads, not a thread per connection: idle
     * connections then cost a descriptor, not a thread, and cannot use up
     * what /healthz needs. A request waiting for a slow database holds one
     * pool thread for its budget; the others keep accepting. */
    unsigned int flags = MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ERROR_LOG |
                         (addrs->ai_family == AF_INET6 ? MHD_USE_IPv6 : 0);
    /* The port is also given beside the address, which is what MHD binds:
     * its own messages then name it instead of "port 0". */
    h->daemon = MHD_start_daemon(
        flags, (uint16_t) atoi(port), NULL, NULL, handle, h, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, h,
        MHD_OPTION_SOCK_ADDR, addrs->ai_addr, MHD_OPTION_THREAD_POOL_SIZE,
        (unsigned int) POOL_THREADS, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned int) HTTP_MAX_CONNECTIONS, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
        connections_per_client, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int) IDLE_TIMEOUT_S,
        MHD_OPTION_UNESCAPE_CALLBACK, keep_escaped, NULL, MHD_OPTION_NOTIFY_COMPLETED, request_done,
        NULL, MHD_OPTION_END);
    pthread_mutex_lock(&h->log_lock);
    h->starting = false;
    pthread_mutex_unlock(&h->log_lock);
    if (h->daemon == NULL) {
        *cls = err_set(ERR_TRANSIENT, errstr, errstr_size, "http.listen '%s': cannot listen: %s",
                       listen, h->start_error[0] != '\0' ? h->start_error : "unknown error");
        goto fail;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->daemon, MHD_DAEMON_INFO_BIND_PORT);
    h->port = info != NULL ? (int) info->port : atoi(port);

    char numeric[NI_MAXHOST], address[NI_MAXHOST + 16];
    if (getnameinfo(addrs->ai_addr, addrs->ai_addrlen, numeric, sizeof numeric, NULL, 0,
                    NI_NUMERICHOST) != 0)
        snprintf(numeric, sizeof numeric, "%s", host);
    snprintf(address, sizeof address, addrs->ai_family == AF_INET6 ? "[%s]:%d" : "%s:%d", numeric,
             h->port);
    LOG_INFO("http listening", "address", address, "database",
             db_redact(h->conninfo, shown, sizeof shown));
    freeaddrinfo(addrs);
    return h;

fail:
    freeaddrinfo(addrs);
    http_free(h);
    return NULL;
}

int http_port(const http_t *h)
{
    return h->port;
}

void http_set_waiting(http_t *h, const char *reason)
{
    if (h == NULL)
        return;
    char *copy = reason != NULL ? strdup(reason) : NULL;
    pthread_mutex_lock(&h->state_lock);
    free(h->waiting);
    h->waiting = reason != NULL && copy == NULL ? strdup("out of memory") : copy;
    pthread_mutex_unlock(&h->state_lock);
}

void http_set_stall_after(http_t *h, int64_t ms)
{
    if (h == NULL)
        return;
    pthread_mutex_lock(&h->state_lock);
    h->stall_ms = ms;
    pthread_mutex_unlock(&h->state_lock);
}

void http_free(http_t *h)
{
    if (h == NULL)
        return;
    if (h->daemon != NULL)
        MHD_stop_daemon(h->daemon); /* joins every thread: no request is left running */
    PQfinish(h->conn);
    pthread_mutex_destroy(&h->db_lock);
    pthread_mutex_destroy(&h->log_lock);
    pthread_mutex_destroy(&h->state_lock);
    pthread_mutex_destroy(&h->tokens_lock);
    http_tokens_free(h->tokens);
    free_names(h->allowed_hosts);
    free(h->waiting);
    free(h->conninfo);
    free(h->group);
    free(h);
}
