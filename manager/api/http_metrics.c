/*
 * http_metrics - GET /metrics: the counters and gauges of
 * manager/runtime/metrics.h in Prometheus text format 0.0.4, the gauges
 * read from PostgreSQL at scrape time (open instances, open alerts,
 * pending commands, the outbox) within METRICS_DB_BUDGET_MS, and the
 * process_ figures every Prometheus client exports. A metric name that
 * deploy/ uses is one written here (tests/deploy_check.sh).
 */
#include "manager/api/http_int.h"

#include "common/clock.h"
#include "common/log.h"
#include "common/prom.h"
#include "manager/runtime/metrics.h"

#include <libpq-fe.h>
#include <microhttpd.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
    prom_family(p, "steward_traceparent_ignored_total", "counter",
                "Trace contexts (traceparent) left out of an event's history row because they "
                "were malformed, by reason; the event itself was judged.");
    for (int i = DECODE_TRACE_BAD_VERSION; i < DECODE_TRACE_N; i++)
        prom_sample_int(p, "steward_traceparent_ignored_total",
                        (const char *const[]){"reason", decode_trace_name(i), NULL},
                        metrics_get(&metrics.traceparent_ignored[i]));
    prom_family(p, "steward_tracestate_ignored_total", "counter",
                "Tracestates dropped from an event's trace context because they were malformed, "
                "by reason; its traceparent was kept and the event judged.");
    for (int i = DECODE_TRACESTATE_TOO_LONG; i < DECODE_TRACESTATE_N; i++)
        prom_sample_int(p, "steward_tracestate_ignored_total",
                        (const char *const[]){"reason", decode_tracestate_name(i), NULL},
                        metrics_get(&metrics.tracestate_ignored[i]));

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

    prom_family(p, "steward_schema_registry_requests_total", "counter",
                "Requests for writer schemas of confluent_avro topics (to the registry or its "
                "directory; cache hits are none), by result: found, not_found, unavailable.");
    static const char *const registry_results[3] = {"found", "not_found", "unavailable"};
    for (int i = 0; i < 3; i++)
        prom_sample_int(p, "steward_schema_registry_requests_total",
                        (const char *const[]){"result", registry_results[i], NULL},
                        metrics_get(&metrics.registry_requests[i]));
    prom_family(p, "steward_schema_registry_up", "gauge",
                "0 while the last request to the schema registry found it unavailable (messages "
                "whose schema is not in hand wait), else 1 (also where none is configured).");
    prom_sample_int(p, "steward_schema_registry_up", NULL,
                    metrics_get(&metrics.registry_down) != 0 ? 0 : 1);
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

/* The most labels of a gauge read by rows (GAUGE_ALERTS has three). */
#define GAUGE_MAX_LABELS 3

/*
 * A gauge family from the rows of r: a sample per row, labelled by its
 * first columns (one per name in `labels`, NULL-terminated, at most
 * GAUGE_MAX_LABELS), the count in the column after them.
 */
static void gauge_rows(prom_t *p, const char *name, const char *help, const PGresult *r,
                       const char *const *labels)
{
    const char *pairs[2 * GAUGE_MAX_LABELS + 1];
    int n = 0;

    while (n < GAUGE_MAX_LABELS && labels[n] != NULL)
        n++;
    prom_family(p, name, "gauge", help);
    for (int i = 0; i < PQntuples(r); i++) {
        for (int c = 0; c < n; c++) {
            pairs[2 * c] = labels[c];
            pairs[2 * c + 1] = PQgetvalue(r, i, c);
        }
        pairs[2 * n] = NULL;
        prom_sample_int(p, name, pairs, atoll(PQgetvalue(r, i, n)));
    }
}

/* A 0 for every process the scheduler watches that has none queued, so a
 * dashboard shows 0 rather than no data; before the scheduler's first pass,
 * one unlabelled 0 when no command is queued at all. */
static void write_commands_pending(prom_t *p, const PGresult *r)
{
    metrics_watch_t *w;
    size_t n = metrics_watches(&w);
    int rows = PQntuples(r);

    gauge_rows(p, "steward_commands_pending",
               "Commands queued and not yet sent, by process (paused ones included); 0 for a "
               "loaded process with none.",
               r, (const char *const[]){"process", NULL});
    for (size_t i = 0; i < n; i++) {
        bool queued = false;
        for (int j = 0; j < rows && !queued; j++)
            queued = strcmp(PQgetvalue(r, j, 0), w[i].process) == 0;
        if (!queued)
            prom_sample_int(p, "steward_commands_pending",
                            (const char *const[]){"process", w[i].process, NULL}, 0);
    }
    if (n == 0 && rows == 0)
        prom_sample_int(p, "steward_commands_pending", NULL, 0);
    free(w);
}

static void write_database(http_t *h, prom_t *p)
{
    PGresult *res[N_GAUGES] = {NULL};
    char errstr[1024];
    int64_t deadline = clock_monotonic_ms() + METRICS_DB_BUDGET_MS;
    http_db_t *db;
    err_class_t cls = http_db_acquire(h, false, deadline, &db, errstr, sizeof errstr);

    if (cls == ERR_OK) {
        for (int i = 0; i < N_GAUGES && cls == ERR_OK; i++)
            cls = http_db_exec(db, "reading gauges", gauge_sql[i], 0, NULL, deadline, &res[i],
                               errstr, sizeof errstr);
        http_db_release(h, db);
    }
    if (cls != ERR_OK)
        LOG_LIMITED(LOG_LEVEL_WARN, "http-gauges", 10000,
                    "metrics: database gauges left out of the scrape", "error", errstr);

    prom_family(p, "steward_database_up", "gauge",
                "Whether this scrape could read the gauges from PostgreSQL.");
    prom_sample_int(p, "steward_database_up", NULL, cls == ERR_OK);
    if (cls == ERR_OK) {
        gauge_rows(p, "steward_instances_open", "Active instances, by process and current state.",
                   res[GAUGE_INSTANCES], (const char *const[]){"process", "state", NULL});
        gauge_rows(p, "steward_alerts_open",
                   "Unresolved alerts, by process, state and kind (blind alerts have neither "
                   "process nor state).",
                   res[GAUGE_ALERTS], (const char *const[]){"process", "state", "kind", NULL});
        write_commands_pending(p, res[GAUGE_COMMANDS]);

        PGresult *r = res[GAUGE_OUTBOX];
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

void http_get_metrics(http_t *h, http_reply_t *r)
{
    prom_t *p = prom_new();
    char errstr[256];
    size_t len;

    if (p == NULL) {
        http_reply_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "cannot render metrics: out of memory");
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
        http_reply_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "cannot render metrics: %s", errstr);
    else
        http_reply_body(r, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", text, len);
}
