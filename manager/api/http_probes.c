/*
 * http_probes - GET /healthz and /readyz, and what they are told from
 * outside: why the daemon is not serving yet (http_set_waiting()) and how
 * long a worker thread may stay silent (http_set_stall_after()). /healthz
 * reads only atomics; /readyz asks the database within READY_BUDGET_MS,
 * on a connection of its own (http_db.c).
 */
#include "manager/api/http_int.h"

#include "common/clock.h"
#include "common/log.h"
#include "common/rfc3339.h"
#include "manager/runtime/metrics.h"

#include <jansson.h>
#include <libpq-fe.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void not_ready(http_reply_t *r, const char *reason)
{
    json_t *doc = json_pack("{s:b, s:s}", "ready", 0, "reason", reason);
    http_reply_json(r, MHD_HTTP_SERVICE_UNAVAILABLE, doc);
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

void http_get_readyz(http_t *h, http_reply_t *r)
{
    long long assigned = metrics_get(&metrics.partitions_assigned);
    int64_t deadline = clock_monotonic_ms() + READY_BUDGET_MS;
    char errstr[1024], reason[1100];
    PGresult *res = NULL;
    http_db_t *db;

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
    /* Its own connection: a view or a scrape holding the pool's never
     * makes this wait. */
    err_class_t cls = http_db_acquire(h, true, deadline, &db, errstr, sizeof errstr);
    if (cls == ERR_OK) {
        cls = http_db_exec(db, "SELECT 1", "SELECT 1", 0, NULL, deadline, &res, errstr,
                           sizeof errstr);
        PQclear(res);
        http_db_release(h, db);
    }
    if (cls != ERR_OK) {
        snprintf(reason, sizeof reason, "database unreachable: %s", errstr);
        not_ready(r, reason);
        return;
    }
    /* An unreachable broker, or a blind watermark, does not make the
     * replica unready (another replica would be as blind): it is shown
     * here, on /metrics, in the blind alert and in the log. */
    http_reply_json(r, MHD_HTTP_OK,
                    json_pack("{s:b, s:I, s:b, s:o}", "ready", 1, "partitions",
                              (json_int_t) assigned, "kafka_reachable",
                              (int) metrics_get(&metrics.kafka_reachable), "watermarks",
                              watermarks_detail()));
}

/*
 * 200 "ok" while every worker thread that has started made progress within
 * stall_ms; 503 naming the first that did not. Reads only atomics: never
 * waits for anything.
 */
void http_get_healthz(http_t *h, http_reply_t *r)
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
        http_reply_body(r, MHD_HTTP_SERVICE_UNAVAILABLE, "text/plain; charset=utf-8", text,
                        text != NULL ? strlen(text) : 0);
        return;
    }
    http_reply_body(r, MHD_HTTP_OK, "text/plain; charset=utf-8", strdup("ok\n"), 3);
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

void http_set_tracing_link(http_t *h, const char *tracing_link)
{
    if (h == NULL)
        return;
    free(h->tracing_link);
    h->tracing_link = tracing_link != NULL && tracing_link[0] != '\0' ? strdup(tracing_link) : NULL;
}

void http_set_stall_after(http_t *h, int64_t ms)
{
    if (h == NULL)
        return;
    pthread_mutex_lock(&h->state_lock);
    h->stall_ms = ms;
    pthread_mutex_unlock(&h->state_lock);
}
