/*
 * notifier - outbox delivery over HTTP with libcurl; see notifier.h. This
 * file owns the notifier's life and the delivery loop: each step claims
 * and starts due rows, lets the transfers run, and records those that
 * finished. The HTTP transfers, the outbox SQL and the Alertmanager
 * refresh are the other files notifier_int.h names.
 */
#include "manager/alerting/notifier_int.h"

#include "common/clock.h"
#include "common/log.h"
#include "manager/runtime/metrics.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The log sink is written at once; every other type is posted. */
bool notifier_posted(const sink_t *sink)
{
    return sink_ops(sink->type)->judge != NULL;
}

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
    n->max_retry_after_ms =
        cfg->max_retry_after_ms > 0 ? cfg->max_retry_after_ms : NOTIFIER_MAX_RETRY_AFTER_MS;
    n->group_window_ms = cfg->group_window_ms;
    n->tracing_link = strdup(cfg->tracing_link != NULL ? cfg->tracing_link : "");
    n->last_claim_ms = INT64_MIN / 2;
    n->seed = (unsigned int) clock_wall_ms() ^ (unsigned int) getpid();
    n->multi = curl_multi_init();
    if (n->conninfo == NULL || n->tracing_link == NULL || n->multi == NULL) {
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
    /* Transfers cut short here were never recorded: their lease runs out
     * and the rows are sent again (at least once). */
    while (n->in_flight != NULL) {
        transfer_t *t = n->in_flight;
        n->in_flight = t->next;
        notifier_transfer_free(n, t);
    }
    if (n->conn != NULL)
        PQfinish(n->conn);
    if (n->multi != NULL)
        curl_multi_cleanup(n->multi);
    free(n->conninfo);
    free(n->tracing_link);
    free(n);
}

void notifier_set_routes(notifier_t *n, route_table_t *routes)
{
    n->routes = routes;
}

size_t notifier_in_flight(const notifier_t *n)
{
    size_t count = 0;
    for (const transfer_t *t = n->in_flight; t != NULL; t = t->next)
        count++;
    return count;
}

/*
 * The log sink: its line (taken; NULL when it could not be built) on
 * stderr, written whatever log_level says (a page is not a diagnostic),
 * with one write(2) so it never interleaves with the logger's lines.
 * Delivered only once the whole line is written.
 */
static attempt_t deliver_log(char *text)
{
    attempt_t result = {.verdict = VERDICT_DELIVERED, .retry_after_ms = -1};
    char *out = NULL;
    if (text == NULL || asprintf(&out, "%s\n", text) < 0)
        out = NULL;
    free(text);
    if (out == NULL) {
        result.verdict = VERDICT_RETRY;
        snprintf(result.error, sizeof result.error, "out of memory building the log line");
        return result;
    }
    size_t len = strlen(out), done = 0;
    while (done < len) {
        ssize_t w = write(STDERR_FILENO, out + done, len - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            result.verdict = VERDICT_RETRY;
            snprintf(result.error, sizeof result.error, "writing to stderr: %s",
                     w < 0 ? strerror(errno) : "nothing written");
            break;
        }
        done += (size_t) w;
    }
    free(out);
    return result;
}

/* Logs, counts and records the outcome of one row's attempt. */
static err_class_t finish(notifier_t *n, notifier_stats_t *stats, const char *row_id,
                          const char *destination, sink_type_t type, const char *event,
                          const char *alert_id, int attempts, const attempt_t *a, char *errstr,
                          size_t errstr_size)
{
    char attempt_text[16];
    snprintf(attempt_text, sizeof attempt_text, "%d", attempts);
    switch (a->verdict) {
    case VERDICT_DELIVERED:
        stats->delivered++;
        LOG_DEBUG("notification delivered", "sink", destination, "event", event, "alert", alert_id,
                  "attempts", attempt_text);
        break;
    case VERDICT_RETRY:
        stats->retried++;
        LOG_LIMITED(LOG_LEVEL_WARN, "notify-retry", 10000, "notification not delivered; will retry",
                    "sink", destination, "event", event, "attempts", attempt_text, "error",
                    a->error);
        break;
    case VERDICT_FAILED:
        stats->failed++;
        LOG_ERROR("notification refused; not retried", "sink", destination, "event", event, "alert",
                  alert_id, "error", a->error);
        break;
    case SINK_N_VERDICTS: /* a count, never a verdict */
        break;
    }
    metrics_add(&metrics.notifications[type][a->verdict], 1);
    return notifier_record(n, row_id, a, attempts, errstr, errstr_size);
}

/* Starts (or, for the log sink, delivers) the claimed row `row` of res. */
err_class_t notifier_start_row(notifier_t *n, PGresult *res, int row, int64_t now,
                               notifier_stats_t *stats, char *errstr, size_t errstr_size)
{
    const char *id = PQgetvalue(res, row, 0), *destination = PQgetvalue(res, row, 1);
    const char *event = PQgetvalue(res, row, 2), *alert_id = PQgetvalue(res, row, 4);
    int attempts = atoi(PQgetvalue(res, row, 3)) + 1;
    bool resolve = strcmp(event, "resolve") == 0;
    bool acknowledge = strcmp(event, "acknowledge") == 0;
    json_t *details;
    payload_alert_t alert = notifier_read_alert(n, res, row, 4, &details);
    const sink_t *sink = route_find_sink(n->routes, destination);
    const sink_ops_t *ops = sink != NULL ? sink_ops(sink->type) : NULL;
    sink_event_t ev = resolve ? SINK_RESOLVE : acknowledge ? SINK_ACKNOWLEDGE : SINK_TRIGGER;
    attempt_t a = {.verdict = VERDICT_RETRY, .retry_after_ms = -1};
    char *body = NULL, *group_key = NULL;
    err_class_t cls = ERR_OK;

    if (sink == NULL) {
        a.verdict = VERDICT_FAILED;
        snprintf(a.error, sizeof a.error,
                 "no sink named %s in the current routes (the config changed)", destination);
    } else if (acknowledge && !ops->acknowledges) {
        /* The alert stays open there, as it is. */
        a.verdict = VERDICT_DELIVERED;
    } else if (!notifier_posted(sink)) {
        a = deliver_log(ops->body(sink, &alert, ev, now, n->resend_ms));
    } else {
        long open = 0;
        if (resolve && alert.kind != NULL && strcmp(alert.kind, "sequence") == 0 &&
            (cls = notifier_group_of(n, id, alert_id, destination, &group_key, &open, errstr,
                                     errstr_size)) != ERR_OK) {
            json_decref(details);
            return cls;
        }
        if (group_key != NULL && open > 0) {
            /* The group's page stays open while any of its alerts is. */
            json_decref(details);
            free(group_key);
            a.verdict = VERDICT_DELIVERED;
            return finish(n, stats, id, destination, sink->type, event, alert_id, attempts, &a,
                          errstr, errstr_size);
        }
        if (group_key != NULL)
            alert.dedup_key = group_key;
        body = ops->body(sink, &alert, ev, now, n->resend_ms);
        free(group_key);
        transfer_t *t = notifier_post(n, sink, body);
        if (t != NULL) {
            snprintf(t->row_id, sizeof t->row_id, "%s", id);
            snprintf(t->alert_id, sizeof t->alert_id, "%s", alert_id);
            snprintf(t->event, sizeof t->event, "%s", event);
            t->attempts = attempts;
            json_decref(details);
            return ERR_OK; /* recorded when it completes */
        }
        snprintf(a.error, sizeof a.error, "out of memory starting the request");
    }
    json_decref(details);
    return finish(n, stats, id, destination, sink != NULL ? sink->type : SINK_LOG, event, alert_id,
                  attempts, &a, errstr, errstr_size);
}

/* Records every transfer that finished; refreshes are only logged. */
static err_class_t reap(notifier_t *n, notifier_stats_t *stats, char *errstr, size_t errstr_size)
{
    CURLMsg *msg;
    int left;
    err_class_t cls = ERR_OK;
    while ((msg = curl_multi_info_read(n->multi, &left)) != NULL) {
        if (msg->msg != CURLMSG_DONE)
            continue;
        transfer_t *t = NULL;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **) &t);
        attempt_t a = notifier_post_result(t, msg->data.result);
        for (transfer_t **p = &n->in_flight; *p != NULL; p = &(*p)->next) {
            if (*p == t) {
                *p = t->next;
                break;
            }
        }
        if (t->n_group > 0) {
            for (size_t i = 0; i < t->n_group; i++) {
                err_class_t c = finish(n, stats, t->group_rows[i], t->sink, t->type, t->event,
                                       t->alert_id, t->group_attempts[i], &a, errstr, errstr_size);
                if (cls == ERR_OK)
                    cls = c;
            }
            if (a.verdict == VERDICT_DELIVERED) {
                err_class_t c = notifier_tag_group(n, t, errstr, errstr_size);
                if (cls == ERR_OK)
                    cls = c;
            }
        } else if (t->row_id[0] != '\0') {
            err_class_t c = finish(n, stats, t->row_id, t->sink, t->type, t->event, t->alert_id,
                                   t->attempts, &a, errstr, errstr_size);
            if (cls == ERR_OK)
                cls = c;
        } else if (a.verdict != VERDICT_DELIVERED) {
            LOG_LIMITED(LOG_LEVEL_WARN, "am-resend", 60000,
                        "could not refresh open alerts in Alertmanager", "sink", t->sink, "error",
                        a.error);
        }
        notifier_transfer_free(n, t);
    }
    return cls;
}

err_class_t notifier_tick(notifier_t *n, int64_t wait_ms, notifier_stats_t *stats, char *errstr,
                          size_t errstr_size)
{
    err_class_t cls = ERR_OK;
    int running;

    memset(stats, 0, sizeof *stats);
    if (PQstatus(n->conn) != CONNECTION_OK) {
        PQfinish(n->conn);
        if ((n->conn = db_connect(n->conninfo, "steward notifier", errstr, errstr_size)) == NULL)
            return ERR_TRANSIENT;
    }
    int64_t now = clock_wall_ms();
    if (now - n->last_claim_ms >= n->interval_ms) {
        n->last_claim_ms = now;
        cls = notifier_claim_due(n, stats, errstr, errstr_size);
    }
    if (cls == ERR_OK && now - n->last_resend_ms >= n->resend_ms) {
        n->last_resend_ms = now;
        bool refreshing = false;
        for (const transfer_t *t = n->in_flight; t != NULL && !refreshing; t = t->next)
            refreshing = t->row_id[0] == '\0';
        if (!refreshing) /* one refresh at a time per sink is plenty */
            cls = notifier_resend_open(n, errstr, errstr_size);
    }
    curl_multi_perform(n->multi, &running);
    if (wait_ms > 0)
        curl_multi_poll(n->multi, NULL, 0, (int) wait_ms, NULL);
    curl_multi_perform(n->multi, &running);
    err_class_t reaped = reap(n, stats, errstr, errstr_size);
    return cls != ERR_OK ? cls : reaped;
}

void notifier_run(notifier_t *n, volatile sig_atomic_t *stop, int64_t drain_ms, gen_current_t *cur)
{
    char errstr[1024];
    int64_t drain_until = -1;
    gen_t *held = gen_acquire(cur);

    notifier_set_routes(n, held->routes);
    for (;;) {
        notifier_stats_t stats;
        metrics_beat(METRICS_NOTIFIER); /* /healthz: this thread is not stuck */
        if (gen_refresh(cur, &held))
            notifier_set_routes(n, held->routes);
        /* Transfers in flight carry their own copies, so the old routes may go. */
        err_class_t cls = notifier_tick(n, 50, &stats, errstr, sizeof errstr);
        if (cls != ERR_OK)
            LOG_LIMITED(LOG_LEVEL_WARN, "notifier-tick", 10000, "notifier pass failed; retrying",
                        "error", errstr, "class", err_class_name(cls));
        if (*stop) {
            /* One more look at the outbox after the stop; then keep going
             * while something is in flight or was just delivered, within
             * the bound. */
            if (drain_until < 0) {
                drain_until = clock_wall_ms() + drain_ms;
                n->last_claim_ms = INT64_MIN / 2;
                continue;
            }
            if ((stats.delivered == 0 && notifier_in_flight(n) == 0) ||
                clock_wall_ms() >= drain_until)
                break;
            n->last_claim_ms = INT64_MIN / 2; /* while draining, look every step */
        }
    }
    gen_release(held);
}
