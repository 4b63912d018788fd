/*
 * notifier - outbox delivery over HTTP with libcurl; see notifier.h.
 */
#include "manager/notifier.h"

#include "manager/clock.h"
#include "manager/db.h"
#include "manager/log.h"
#include "manager/metrics.h"
#include "manager/payload.h"

#include <curl/curl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NOTIFIER_BATCH 20
#define RESPONSE_KEEP  512 /* bytes of a response body kept as the error */

struct notifier {
    PGconn *conn;
    char *conninfo;
    CURL *curl;
    route_table_t *routes; /* borrowed */
    int64_t interval_ms, timeout_ms, max_backoff_ms, resend_ms;
    int64_t last_resend_ms;
    unsigned int seed; /* jitter */
};

typedef enum verdict {
    VERDICT_DELIVERED,
    VERDICT_RETRY,
    VERDICT_FAILED,
} verdict_t;

/* What one HTTP attempt came to. */
typedef struct attempt {
    verdict_t verdict;
    long status;            /* 0 when no response */
    int64_t retry_after_ms; /* from a Retry-After header; -1 when none */
    char error[RESPONSE_KEEP + 128];
} attempt_t;

notifier_t *notifier_new(const notifier_config_t *cfg, route_table_t *routes, char *errstr,
                         size_t errstr_size)
{
    notifier_t *n = calloc(1, sizeof *n);
    if (n == NULL) {
        err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
        return NULL;
    }
    n->conninfo = strdup(cfg->conninfo != NULL ? cfg->conninfo : "");
    n->routes = routes;
    n->interval_ms = cfg->interval_ms;
    n->timeout_ms = cfg->timeout_ms;
    n->max_backoff_ms = cfg->max_backoff_ms;
    n->resend_ms = cfg->alertmanager_resend_ms;
    n->seed = (unsigned int) clock_wall_ms() ^ (unsigned int) getpid();
    n->curl = curl_easy_init();
    if (n->conninfo == NULL || n->curl == NULL) {
        err_set(ERR_FATAL, errstr, errstr_size, "cannot set up the HTTP client");
        notifier_free(n);
        return NULL;
    }
    n->conn = db_connect(n->conninfo, "steward notifier", errstr, errstr_size);
    if (n->conn == NULL) {
        notifier_free(n);
        return NULL;
    }
    return n;
}

void notifier_free(notifier_t *n)
{
    if (n == NULL)
        return;
    if (n->conn != NULL)
        PQfinish(n->conn);
    if (n->curl != NULL)
        curl_easy_cleanup(n->curl);
    free(n->conninfo);
    free(n);
}

void notifier_set_routes(notifier_t *n, route_table_t *routes)
{
    n->routes = routes;
}

/* ---- HTTP ------------------------------------------------------------------- */

typedef struct response {
    char body[RESPONSE_KEEP + 1];
    size_t len;
    int64_t retry_after_ms;
} response_t;

static size_t on_body(char *data, size_t size, size_t nmemb, void *arg)
{
    response_t *r = arg;
    size_t n = size * nmemb, room = RESPONSE_KEEP - r->len;
    memcpy(r->body + r->len, data, n < room ? n : room);
    r->len += n < room ? n : room;
    r->body[r->len] = '\0';
    return size * nmemb; /* read it all; keep the start */
}

static size_t on_header(char *data, size_t size, size_t nmemb, void *arg)
{
    response_t *r = arg;
    size_t n = size * nmemb;
    if (n > 12 && strncasecmp(data, "Retry-After:", 12) == 0) {
        /* Seconds; an HTTP-date is left to our own backoff. */
        char *end;
        long secs = strtol(data + 12, &end, 10);
        if (end != data + 12 && secs >= 0)
            r->retry_after_ms = (int64_t) secs * 1000;
    }
    return n;
}

/* POSTs body to url. The URL is a secret: it never reaches a message. */
static attempt_t post(notifier_t *n, const char *url, const char *body)
{
    attempt_t a = {.verdict = VERDICT_RETRY, .retry_after_ms = -1};
    response_t r = {.retry_after_ms = -1};
    struct curl_slist *headers = curl_slist_append(NULL, "Content-Type: application/json");
    char curl_error[CURL_ERROR_SIZE] = "";

    curl_easy_reset(n->curl);
    curl_easy_setopt(n->curl, CURLOPT_URL, url);
    curl_easy_setopt(n->curl, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(n->curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(n->curl, CURLOPT_TIMEOUT_MS, (long) n->timeout_ms);
    curl_easy_setopt(n->curl, CURLOPT_CONNECTTIMEOUT_MS, (long) n->timeout_ms);
    curl_easy_setopt(n->curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(n->curl, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(n->curl, CURLOPT_WRITEDATA, &r);
    curl_easy_setopt(n->curl, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(n->curl, CURLOPT_HEADERDATA, &r);
    curl_easy_setopt(n->curl, CURLOPT_ERRORBUFFER, curl_error);
    curl_easy_setopt(n->curl, CURLOPT_USERAGENT, "steward/" STEWARD_VERSION);

    CURLcode rc = curl_easy_perform(n->curl);
    curl_slist_free_all(headers);
    if (rc != CURLE_OK) {
        /* curl_easy_strerror, not the error buffer: the latter may quote the URL. */
        snprintf(a.error, sizeof a.error, "network: %s", curl_easy_strerror(rc));
        return a;
    }
    curl_easy_getinfo(n->curl, CURLINFO_RESPONSE_CODE, &a.status);
    a.retry_after_ms = r.retry_after_ms;
    if (a.status >= 200 && a.status < 300) {
        a.verdict = VERDICT_DELIVERED;
    } else if (a.status == 429 || a.status >= 500 || a.status == 408) {
        a.verdict = VERDICT_RETRY;
        snprintf(a.error, sizeof a.error, "HTTP %ld: %s", a.status, r.body);
    } else {
        a.verdict = VERDICT_FAILED;
        snprintf(a.error, sizeof a.error, "HTTP %ld: %s", a.status, r.body);
    }
    return a;
}

/* ---- delivery ----------------------------------------------------------------- */

static const char claim_sql[] =
    "UPDATE steward.outbox o SET next_attempt_at = now() + $1::bigint * interval '1 millisecond' "
    "FROM steward.alerts a "
    "WHERE a.id = o.alert_id AND o.id IN ("
    "  SELECT c.id FROM steward.outbox c "
    "  WHERE c.kind = 'notification' AND c.delivered_at IS NULL AND c.failed_at IS NULL "
    "    AND c.next_attempt_at <= now() "
    "    AND NOT EXISTS (SELECT 1 FROM steward.outbox e "
    "      WHERE e.alert_id = c.alert_id AND e.destination = c.destination AND e.id < c.id "
    "        AND e.delivered_at IS NULL AND e.failed_at IS NULL) "
    "  ORDER BY c.id LIMIT 20 FOR UPDATE SKIP LOCKED) "
    "RETURNING o.id, o.destination, o.payload->>'event', o.attempts, a.id, a.kind, a.process, "
    "  a.key, a.state, a.owner, a.summary, a.details::text, a.dedup_key, "
    "  to_char(a.opened_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'), "
    "  to_char(a.resolved_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'), "
    "  a.resolution, "
    "  to_char(a.deadline_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')";

static const char *nullable(const PGresult *res, int row, int col)
{
    return PQgetisnull(res, row, col) ? NULL : PQgetvalue(res, row, col);
}

/* Reads an alert from columns first..first+12 of a row; details is new. */
static payload_alert_t read_alert(const PGresult *res, int row, int first, json_t **details)
{
    json_error_t jerr;
    *details = json_loads(PQgetvalue(res, row, first + 7), 0, &jerr);
    return (payload_alert_t){
        .id = strtoll(PQgetvalue(res, row, first), NULL, 10),
        .kind = nullable(res, row, first + 1),
        .process = nullable(res, row, first + 2),
        .key = nullable(res, row, first + 3),
        .state = nullable(res, row, first + 4),
        .owner = nullable(res, row, first + 5),
        .summary = nullable(res, row, first + 6),
        .dedup_key = nullable(res, row, first + 8),
        .opened_at = nullable(res, row, first + 9),
        .resolved_at = nullable(res, row, first + 10),
        .resolution = nullable(res, row, first + 11),
        .deadline_at = nullable(res, row, first + 12),
        .details = *details,
    };
}

/* The log sink: one JSON line through the logger. */
static attempt_t deliver_log(const sink_t *sink, const payload_alert_t *a, bool resolve)
{
    attempt_t result = {.verdict = VERDICT_DELIVERED, .retry_after_ms = -1};
    if (resolve)
        LOG_WARN("alert resolved", "sink", sink->name, "kind", a->kind, "process", a->process,
                 "key", a->key, "state", a->state, "owner", a->owner, "summary", a->summary,
                 "resolution", a->resolution, "dedup_key", a->dedup_key);
    else
        LOG_WARN("alert", "sink", sink->name, "kind", a->kind, "process", a->process, "key", a->key,
                 "state", a->state, "owner", a->owner, "summary", a->summary, "dedup_key",
                 a->dedup_key);
    return result;
}

static attempt_t deliver(notifier_t *n, const sink_t *sink, const payload_alert_t *a, bool resolve)
{
    char *body = NULL;
    char url[2048];

    switch (sink->type) {
    case SINK_LOG:
        return deliver_log(sink, a, resolve);
    case SINK_WEBHOOK:
        body = payload_webhook(a, resolve);
        snprintf(url, sizeof url, "%s", sink->url);
        break;
    case SINK_PAGERDUTY:
        body = payload_pagerduty(sink, a, resolve);
        snprintf(url, sizeof url, "%s", sink->url);
        break;
    case SINK_ALERTMANAGER:
        body = payload_alertmanager(sink, a, 1, clock_wall_ms(), n->resend_ms);
        snprintf(url, sizeof url, "%s/api/v2/alerts", sink->url);
        break;
    }
    if (body == NULL) {
        attempt_t oom = {.verdict = VERDICT_RETRY, .retry_after_ms = -1};
        snprintf(oom.error, sizeof oom.error, "out of memory building the body");
        return oom;
    }
    attempt_t result = post(n, url, body);
    free(body);
    return result;
}

/* Exponential backoff with equal jitter: between half and all of the step. */
static int64_t backoff_ms(notifier_t *n, int attempts)
{
    int64_t step = 1000;
    for (int i = 1; i < attempts && step < n->max_backoff_ms; i++)
        step *= 2;
    if (step > n->max_backoff_ms)
        step = n->max_backoff_ms;
    return step / 2 + (int64_t) (rand_r(&n->seed) % (unsigned int) (step / 2 + 1));
}

static err_class_t record(notifier_t *n, const char *id, const attempt_t *a, int attempts,
                          char *errstr, size_t errstr_size)
{
    char wait[24];
    const char *sql;
    int64_t delay = a->retry_after_ms >= 0 ? a->retry_after_ms : backoff_ms(n, attempts);
    snprintf(wait, sizeof wait, "%" PRId64, delay);

    switch (a->verdict) {
    case VERDICT_DELIVERED:
        sql = "UPDATE steward.outbox SET delivered_at = now(), attempts = attempts + 1, "
              "  last_error = NULL WHERE id = $1";
        break;
    case VERDICT_FAILED:
        sql = "UPDATE steward.outbox SET failed_at = now(), attempts = attempts + 1, "
              "  last_error = $2 WHERE id = $1";
        break;
    default:
        sql = "UPDATE steward.outbox SET attempts = attempts + 1, last_error = $2, "
              "  next_attempt_at = now() + $3::bigint * interval '1 millisecond' WHERE id = $1";
        break;
    }
    const char *params[3] = {id, a->error, wait};
    int nparams = a->verdict == VERDICT_DELIVERED ? 1 : a->verdict == VERDICT_FAILED ? 2 : 3;
    return db_exec(n->conn, "recording a delivery", sql, nparams, params, errstr, errstr_size);
}

static err_class_t deliver_due(notifier_t *n, notifier_stats_t *stats, int *claimed, char *errstr,
                               size_t errstr_size)
{
    char lease[24];
    /* Long enough for one attempt per row of the batch, so no other
     * replica picks a row up while this one is still posting it. */
    snprintf(lease, sizeof lease, "%" PRId64, n->timeout_ms * (NOTIFIER_BATCH + 1) + 5000);
    const char *params[1] = {lease};
    PGresult *res = PQexecParams(n->conn, claim_sql, 1, NULL, params, NULL, NULL, 0);
    err_class_t cls = db_result_class(res, n->conn);

    *claimed = 0;
    if (cls != ERR_OK) {
        err_set(cls, errstr, errstr_size, "claiming notifications: %s", PQerrorMessage(n->conn));
        PQclear(res);
        return cls;
    }
    *claimed = PQntuples(res);
    for (int row = 0; row < *claimed && cls == ERR_OK; row++) {
        const char *id = PQgetvalue(res, row, 0), *destination = PQgetvalue(res, row, 1);
        const char *event = PQgetvalue(res, row, 2);
        int attempts = atoi(PQgetvalue(res, row, 3)) + 1;
        json_t *details;
        payload_alert_t alert = read_alert(res, row, 4, &details);
        const sink_t *sink = route_find_sink(n->routes, destination);
        attempt_t a;

        if (sink == NULL) {
            a = (attempt_t){.verdict = VERDICT_FAILED, .retry_after_ms = -1};
            snprintf(a.error, sizeof a.error,
                     "no sink named %s in the current routes (the config changed)", destination);
        } else {
            a = deliver(n, sink, &alert, strcmp(event, "resolve") == 0);
        }
        json_decref(details);

        char attempt_text[16];
        snprintf(attempt_text, sizeof attempt_text, "%d", attempts);
        switch (a.verdict) {
        case VERDICT_DELIVERED:
            stats->delivered++;
            LOG_DEBUG("notification delivered", "sink", destination, "event", event, "alert",
                      PQgetvalue(res, row, 4), "attempts", attempt_text);
            break;
        case VERDICT_RETRY:
            stats->retried++;
            LOG_LIMITED(LOG_LEVEL_WARN, "notify-retry", 10000,
                        "notification not delivered; will retry", "sink", destination, "event",
                        event, "attempts", attempt_text, "error", a.error);
            break;
        case VERDICT_FAILED:
            stats->failed++;
            LOG_ERROR("notification refused; not retried", "sink", destination, "event", event,
                      "alert", PQgetvalue(res, row, 4), "error", a.error);
            break;
        }
        metrics_add(&metrics.notifications[sink != NULL ? sink->type : SINK_LOG][a.verdict], 1);
        cls = record(n, id, &a, attempts, errstr, errstr_size);
    }
    PQclear(res);
    return cls;
}

static const char open_alerts_sql[] =
    "SELECT a.id, a.kind, a.process, a.key, a.state, a.owner, a.summary, a.details::text, "
    "  a.dedup_key, "
    "  to_char(a.opened_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'), NULL, NULL, "
    "  to_char(a.deadline_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"') "
    "FROM steward.alerts a WHERE a.resolved_at IS NULL ORDER BY a.id";

/*
 * Alertmanager forgets an alert that is not re-sent before its endsAt:
 * post every open alert to every Alertmanager sink its owner routes to.
 */
static err_class_t resend_open(notifier_t *n, char *errstr, size_t errstr_size)
{
    size_t n_sinks = route_sink_count(n->routes);
    bool any = false;
    for (size_t s = 0; s < n_sinks; s++)
        any = any || route_sink_at(n->routes, s)->type == SINK_ALERTMANAGER;
    if (!any)
        return ERR_OK;

    PGresult *res = PQexec(n->conn, open_alerts_sql);
    err_class_t cls = db_result_class(res, n->conn);
    if (cls != ERR_OK) {
        err_set(cls, errstr, errstr_size, "reading open alerts: %s", PQerrorMessage(n->conn));
        PQclear(res);
        return cls;
    }
    int rows = PQntuples(res);
    payload_alert_t *alerts = calloc((size_t) rows + 1, sizeof *alerts);
    json_t **details = calloc((size_t) rows + 1, sizeof *details);
    for (size_t s = 0; s < n_sinks && alerts != NULL && details != NULL; s++) {
        const sink_t *sink = route_sink_at(n->routes, s);
        size_t count = 0;
        if (sink->type != SINK_ALERTMANAGER)
            continue;
        for (int row = 0; row < rows; row++) {
            size_t k;
            const sink_t *const *sinks = route_sinks(n->routes, PQgetvalue(res, row, 5), &k);
            for (size_t i = 0; i < k; i++) {
                if (sinks[i] == sink) {
                    json_decref(details[count]);
                    alerts[count] = read_alert(res, row, 0, &details[count]);
                    count++;
                    break;
                }
            }
        }
        if (count == 0)
            continue;
        char url[2048];
        char *body = payload_alertmanager(sink, alerts, count, clock_wall_ms(), n->resend_ms);
        snprintf(url, sizeof url, "%s/api/v2/alerts", sink->url);
        attempt_t a = body != NULL ? post(n, url, body) : (attempt_t){.verdict = VERDICT_RETRY};
        free(body);
        if (a.verdict != VERDICT_DELIVERED)
            LOG_LIMITED(LOG_LEVEL_WARN, "am-resend", 60000,
                        "could not refresh open alerts in Alertmanager", "sink", sink->name,
                        "error", a.error);
    }
    for (int row = 0; row < rows && details != NULL; row++)
        json_decref(details[row]);
    free(details);
    free(alerts);
    PQclear(res);
    return ERR_OK;
}

err_class_t notifier_tick(notifier_t *n, notifier_stats_t *stats, char *errstr, size_t errstr_size)
{
    err_class_t cls = ERR_OK;
    int claimed;

    memset(stats, 0, sizeof *stats);
    if (PQstatus(n->conn) != CONNECTION_OK) {
        PQfinish(n->conn);
        if ((n->conn = db_connect(n->conninfo, "steward notifier", errstr, errstr_size)) == NULL)
            return ERR_TRANSIENT;
    }
    do {
        cls = deliver_due(n, stats, &claimed, errstr, errstr_size);
    } while (cls == ERR_OK && claimed == NOTIFIER_BATCH);
    if (cls == ERR_OK && clock_wall_ms() - n->last_resend_ms >= n->resend_ms) {
        n->last_resend_ms = clock_wall_ms();
        cls = resend_open(n, errstr, errstr_size);
    }
    return cls;
}

void notifier_run(notifier_t *n, volatile sig_atomic_t *stop, int64_t drain_ms, gen_current_t *cur)
{
    char errstr[1024];
    int64_t drain_until = -1;
    gen_t *held = gen_acquire(cur);

    notifier_set_routes(n, held->routes);
    for (;;) {
        notifier_stats_t stats;
        if (gen_refresh(cur, &held))
            notifier_set_routes(n, held->routes);
        err_class_t cls = notifier_tick(n, &stats, errstr, sizeof errstr);
        if (cls != ERR_OK)
            LOG_LIMITED(LOG_LEVEL_WARN, "notifier-tick", 10000, "notifier pass failed; retrying",
                        "error", errstr, "class", err_class_name(cls));
        if (*stop) {
            /* One more pass happened after the stop; keep going only while
             * it delivered something and the bound allows. */
            if (drain_until < 0)
                drain_until = clock_wall_ms() + drain_ms;
            if (stats.delivered == 0 || clock_wall_ms() >= drain_until)
                break;
            continue;
        }
        for (int64_t slept = 0; slept < n->interval_ms && !*stop; slept += 50) {
            metrics_beat(METRICS_NOTIFIER); /* /healthz: this thread is not stuck */
            usleep(50 * 1000);
        }
    }
    gen_release(held);
}
