/*
 * scheduler_expiry - parked events whose reorder window passed
 * (scheduler.h): the SQL selects candidates by the expiry the engine
 * stored, against the process's watermark; the engine judges each
 * (engine_judge_parked()), and a violation is deleted from steward.parked,
 * recorded in history and alerted, in one transaction.
 */
#include "manager/timing/scheduler_int.h"

#include "common/clock.h"
#include "common/pgarr.h"
#include "manager/alerting/alerts.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

/*
 * Candidates for expiry: parked events whose stored expires_at (the engine's
 * engine_park_expires_at()) the process's watermark passed, the oldest
 * SCHED_EXPIRY_BATCH ($3) of them. The instance lock is only tried, never
 * awaited: an instance a batch holds right now is left for the next pass,
 * and nothing here can deadlock with a batch. It is tried in the outer
 * query over the limited candidates, so a pass holds at most that many
 * locks however many events expired (one per expired row would fill the
 * server's shared lock table). An instance with deferred events is left
 * alone: the event it awaits may be among them. $2 caps the watermark (the
 * clock, or a replay's end).
 */
static const char expiry_candidates_sql[] =
    "WITH wm AS (SELECT process, CASE WHEN $2::bigint IS NULL THEN watermark "
    "    ELSE least(watermark, steward.from_ms($2::bigint)) END AS watermark "
    "  FROM steward.topic_watermarks($1, $4::text[], $5::text[]) WHERE watermark IS NOT NULL), "
    "c AS MATERIALIZED (SELECT p.id, p.process, p.key, p.event_id, p.event_type, "
    "    p.expires_at, p.event_time, p.topic, p.partition, wm.watermark "
    "  FROM steward.parked p JOIN wm ON wm.process = p.process "
    "  WHERE p.expires_at < wm.watermark AND NOT EXISTS (SELECT 1 FROM steward.deferred d "
    "    WHERE d.process = p.process AND d.key = p.key) "
    "  ORDER BY p.event_time, p.id LIMIT $3) "
    "SELECT c.id, c.process, c.key, c.event_id, c.event_type, steward.to_ms(c.expires_at), "
    "  steward.to_ms(c.watermark), i.version, i.state, coalesce(o.epoch, 0) "
    "FROM c LEFT JOIN steward.instances i ON i.process = c.process AND i.key = c.key "
    "LEFT JOIN steward.offsets o ON o.consumer_group = $1 AND o.topic = c.topic "
    "  AND o.partition = c.partition "
    "WHERE steward.try_lock_instance(c.process, c.key) "
    "ORDER BY c.event_time, c.id";

/* Deletes the judged events and records the engine's verdicts; a row a
 * batch already replayed and deleted is not recorded. */
static const char expiry_write_sql[] =
    "WITH v AS (SELECT * FROM unnest($2::bigint[], $3::int[], $4::text[], $5::text[], "
    "    $6::bigint[]) AS u(id, version, state, detail, epoch)), "
    "gone AS (DELETE FROM steward.parked p USING v WHERE p.id = v.id RETURNING p.*) "
    "INSERT INTO steward.history (process, key, version, event_id, event_type, topic, "
    "  partition, \"offset\", event_time, from_state, to_state, outcome, replayed, detail, "
    "  replica, epoch) "
    "SELECT g.process, g.key, v.version, g.event_id, g.event_type, g.topic, g.partition, "
    "  g.\"offset\", g.event_time, v.state, v.state, 'violation', true, v.detail, $1, v.epoch "
    "FROM gone g JOIN v ON v.id = g.id ORDER BY g.event_time, g.id "
    "RETURNING event_id";

/*
 * Judges parked events whose reorder window may have passed, through the
 * engine: each it calls a violation is deleted, recorded in history, and
 * opens a sequence alert. Adds how many to stats->expired.
 */
err_class_t sched_expire_parked(sched_t *s, sched_stats_t *stats, char *errstr, size_t errstr_size)
{
    /* The bound the watermark is judged at: never past the clock
     * (engine_judge_time()), nor past a replay's end. */
    char until[24];
    int64_t bound = engine_judge_time(INT64_MAX, clock_wall_ms());
    if (s->until_ms > 0 && s->until_ms < bound)
        bound = s->until_ms;
    snprintf(until, sizeof until, "%" PRId64, bound);
    char limit[24];
    snprintf(limit, sizeof limit, "%d", SCHED_EXPIRY_BATCH);
    const char *params[5] = {s->group, until, limit, s->watch_processes, s->watch_topics};
    pgarr_t ids = {0}, versions = {0}, states = {0}, details = {0}, epochs = {0};
    alert_batch_t alerts = {0};
    err_class_t cls;
    PGresult *res = NULL;

    if ((cls = db_exec(s->conn, "starting parked expiry", "BEGIN", 0, NULL, errstr, errstr_size)) !=
        ERR_OK)
        return cls;
    if ((res = db_query(s->conn, "finding parked events to expire", expiry_candidates_sql, 5,
                        params, &cls, errstr, errstr_size)) == NULL)
        goto fail;
    for (int row = 0; row < PQntuples(res); row++) {
        const char *process = PQgetvalue(res, row, 1), *key = PQgetvalue(res, row, 2);
        const char *event_id = PQgetvalue(res, row, 3), *type = PQgetvalue(res, row, 4);
        const char *state = PQgetisnull(res, row, 8) ? NULL : PQgetvalue(res, row, 8);
        engine_result_t r = engine_judge_parked(type, state, sched_ms_column(res, row, 5),
                                                sched_ms_column(res, row, 6));
        if (r.outcome != ENGINE_VIOLATION)
            continue;
        const def_t *def = PQgetisnull(res, row, 7) ? def_set_latest(s->defs, process)
                                                    : defcache_get(s->versions, s->conn, process,
                                                                   atoi(PQgetvalue(res, row, 7)));
        pgarr_add(&ids, PQgetvalue(res, row, 0));
        pgarr_add(&versions, PQgetisnull(res, row, 7) ? NULL : PQgetvalue(res, row, 7));
        pgarr_add(&states, state);
        pgarr_add(&details, r.detail);
        pgarr_add(&epochs, PQgetvalue(res, row, 9));

        engine_alert_text_t text;
        json_t *info =
            engine_sequence_alert(def, process, key, state, type, event_id, r.detail, &text);
        alert_batch_open(&alerts, ALERT_SEQUENCE, process, key, state, text.owner, text.summary,
                         info, text.identity != NULL ? text.identity : text.summary, -1);
        engine_alert_text_clear(&text);
        json_decref(info);
    }
    PQclear(res);
    res = NULL;

    size_t expired = 0;
    if (ids.n > 0) {
        const char *write[6] = {s->replica != NULL ? s->replica : "scheduler"};
        if (!pgarr_params((pgarr_t *const[]){&ids, &versions, &states, &details, &epochs}, 5,
                          write + 1)) {
            cls = err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
            goto fail;
        }
        if ((res = db_query(s->conn, "recording expired parked events", expiry_write_sql, 6, write,
                            &cls, errstr, errstr_size)) == NULL)
            goto fail;
        expired = (size_t) PQntuples(res);
        PQclear(res);
        res = NULL;
    }
    alert_counts_t counts = {0};
    if (!alert_batch_empty(&alerts) &&
        (cls = alert_batch_write(s->conn, &alerts, s->routes, &counts, errstr, errstr_size)) !=
            ERR_OK)
        goto fail;
    if ((cls = db_exec(s->conn, "committing parked expiry", "COMMIT", 0, NULL, errstr,
                       errstr_size)) != ERR_OK)
        goto fail;
    stats->expired += expired;
    stats->opened += counts.opened;
    metrics_add(&metrics.alerts_opened, (long long) counts.opened);
    metrics_add(&metrics.parked_expired, (long long) expired);
    metrics_add(&metrics.outcomes[ENGINE_VIOLATION], (long long) expired);
    goto done;

fail:
    db_rollback(s->conn);
done:
    PQclear(res);
    pgarr_free(&ids);
    pgarr_free(&versions);
    pgarr_free(&states);
    pgarr_free(&details);
    pgarr_free(&epochs);
    alert_batch_clear(&alerts);
    return cls;
}
