/*
 * scheduler_watch - what the watermark counts, and whether intake can see
 * (scheduler.h): the topics each pass watches (recorded in
 * steward.watched_topics), the loaded versions marked current, this
 * replica's heartbeat in steward.replicas, and the blind check: topics no
 * one reads, partitions unread or frozen, partitions whose owner is gone
 * (unowned), topics only an unloaded version reads; one blind alert per
 * group, and the watermarks and causes published for /metrics and /readyz.
 */
#include "manager/timing/scheduler_int.h"

#include "common/clock.h"
#include "common/pgarr.h"
#include "definitions/duration.h"
#include "manager/alerting/alerts.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A topic no replica has claimed counts as blind only after this long up,
 * however short blind_after: joining the group can take longer. */
#define SCHED_JOIN_GRACE_MS 60000

/* Every topic this pass watches (engine_watch_topics()), as an array literal. */
static void watched_topics(const engine_watch_topics_t *watch, pgarr_t *topics)
{
    for (size_t i = 0; i < watch->n; i++)
        pgarr_add(topics, watch->items[i].topic);
}

/*
 * The partitions of the watched topics that no one reads: a topic with no
 * partition claimed, a partition not advanced for blind_after ($3), one
 * read within blind_after whose watermark has not moved for as long
 * (frozen), and one not advanced for unowned_after ($4) whose owner is
 * gone: its latest ownership_log entry gives it up, or the owning replica
 * has not stamped steward.replicas for as long. $4 NULL: the owner is not
 * checked.
 */
static const char stale_sql[] =
    "SELECT t.topic, o.partition, o.owner, "
    "  steward.to_ms(now() - o.updated_at), "
    "  steward.to_ms(now() - o.watermark), "
    "  $4::bigint IS NOT NULL AND o.updated_at < now() - steward.ms_interval($4::bigint) "
    "  AND (l.action IS DISTINCT FROM 'claim' AND l.action IS NOT NULL "
    "       OR o.owner IS NULL "
    "       OR NOT EXISTS (SELECT 1 FROM steward.replicas r WHERE r.consumer_group = $1 "
    "                      AND r.replica = o.owner "
    "                      AND r.seen_at >= now() - steward.ms_interval($4::bigint))), "
    "  o.watermark IS NOT NULL AND o.updated_at >= now() - steward.ms_interval($3::bigint) "
    "  AND o.watermark_moved_at < now() - steward.ms_interval($3::bigint), "
    "  steward.to_ms(now() - o.watermark_moved_at), steward.rfc3339(o.watermark) "
    "FROM (SELECT DISTINCT unnest($2::text[]) AS topic) t "
    "LEFT JOIN steward.offsets o ON o.consumer_group = $1 AND o.topic = t.topic "
    "LEFT JOIN LATERAL (SELECT action FROM steward.ownership_log l "
    "  WHERE l.consumer_group = $1 AND l.topic = o.topic AND l.partition = o.partition "
    "  ORDER BY l.id DESC LIMIT 1) l ON true "
    "WHERE o.topic IS NULL "
    "   OR o.updated_at < now() - steward.ms_interval(least($3::bigint, "
    "                                                 coalesce($4::bigint, $3::bigint))) "
    "   OR o.watermark_moved_at < now() - steward.ms_interval($3::bigint) "
    "ORDER BY 1, 2";

/* Marks `cause` on `process`, the first wording it gets kept as its detail. */
static void process_mark(metrics_watch_t *procs, size_t n_procs, const char *process,
                         metrics_watch_cause_t cause, const char *detail)
{
    for (size_t p = 0; p < n_procs; p++) {
        if (strcmp(procs[p].process, process) != 0)
            continue;
        procs[p].cause[cause] = true;
        if (procs[p].detail[0] == '\0')
            snprintf(procs[p].detail, sizeof procs[p].detail, "%s", detail);
    }
}

/* Marks `cause` on every watched process that reads `topic` (all topics:
 * NULL). */
static void watch_mark(sched_t *s, metrics_watch_t *procs, size_t n_procs, const char *topic,
                       metrics_watch_cause_t cause, const char *detail)
{
    for (size_t i = 0; i < s->watch.n; i++) {
        const engine_watch_topic_t *t = &s->watch.items[i];
        if (topic == NULL || strcmp(t->topic, topic) == 0)
            process_mark(procs, n_procs, t->process, cause, detail);
    }
}

/* The blind alert's words so far: every part in its details, the first
 * five in its summary. */
typedef struct blind_text {
    json_t *behind;
    char summary[1024];
    size_t len;
    int listed;
} blind_text_t;

static void blind_add(blind_text_t *b, const char *part)
{
    json_array_append_new(b->behind, json_string(part));
    if (b->listed++ < 5)
        b->len += (size_t) snprintf(b->summary + b->len,
                                    b->len < sizeof b->summary ? sizeof b->summary - b->len : 0,
                                    "%s%s", b->listed > 1 ? ", " : "", part);
}

/* Open `unloadable` alerts whose version has no instance set aside any more. */
static const char unloadable_done_sql[] =
    "SELECT 'steward:unloadable:' || a.process || ':' || (a.details->>'version') "
    "FROM steward.alerts a "
    "WHERE a.resolved_at IS NULL AND a.kind = 'unloadable' "
    "  AND NOT EXISTS (SELECT 1 FROM steward.instances i WHERE i.process = a.process "
    "    AND i.version = (a.details->>'version')::int "
    "    AND i.suspended IS NOT NULL AND i.status = 'active')";

/*
 * Opens or resolves this group's blind alert, and resolves the alerts of
 * versions that no longer have instances set aside; in one transaction, so
 * an alert and its outbox rows commit together.
 */
err_class_t sched_check_blind(sched_t *s, metrics_watch_t *procs, size_t n_procs,
                              sched_stats_t *stats, char *errstr, size_t errstr_size)
{
    pgarr_t topics = {0};
    char after[24], unowned_after[24], dedup[300];
    err_class_t cls;
    alert_batch_t alerts = {0};
    blind_text_t b = {.behind = json_array()};
    PGresult *res = NULL;

    watched_topics(&s->watch, &topics);
    snprintf(after, sizeof after, "%" PRId64, s->blind_after_ms);
    snprintf(unowned_after, sizeof unowned_after, "%" PRId64, s->unowned_after_ms);
    snprintf(dedup, sizeof dedup, "steward:blind:%s", s->group);
    const char *params[4] = {s->group, pgarr_text(&topics), after,
                             s->unowned_after_ms > 0 ? unowned_after : NULL};
    if (params[1] == NULL || b.behind == NULL) {
        cls = err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
        goto done;
    }
    if ((cls = db_exec(s->conn, "starting the blind check", "BEGIN", 0, NULL, errstr,
                       errstr_size)) != ERR_OK)
        goto done;
    if ((res = db_query(s->conn, "checking that intake reads", stale_sql, 4, params, &cls, errstr,
                        errstr_size)) == NULL)
        goto fail;
    /* A topic no replica has claimed yet counts only once the group had
     * time to form: joining can take longer than a short blind_after. A
     * partition's owner counts as gone only once this replica has been up
     * for unowned_after: at a start, the claims of the replica this one
     * replaces are not taken over yet. */
    int64_t up_ms = clock_wall_ms() - s->started_ms;
    int64_t settle_ms =
        s->blind_after_ms > SCHED_JOIN_GRACE_MS ? s->blind_after_ms : SCHED_JOIN_GRACE_MS;
    bool settled = up_ms >= settle_ms;
    bool owners_settled = up_ms >= s->unowned_after_ms;
    for (int row = 0; row < PQntuples(res); row++) {
        const char *topic = PQgetvalue(res, row, 0);
        char unread[32], lag[32], part[600];
        metrics_watch_cause_t cause = METRICS_WATCH_UNREAD;
        if (PQgetisnull(res, row, 1)) {
            if (!settled)
                continue; /* not claimed yet at start: give the group time */
            snprintf(part, sizeof part, "%s: no partition read (no watermark)", topic);
            cause = METRICS_WATCH_NO_WATERMARK;
        } else {
            int64_t unread_ms = strtoll(PQgetvalue(res, row, 3), NULL, 10);
            bool unowned = strcmp(PQgetvalue(res, row, 5), "t") == 0;
            bool frozen = strcmp(PQgetvalue(res, row, 6), "t") == 0;
            if (frozen) {
                char still[32];
                duration_format_rounded(strtoll(PQgetvalue(res, row, 7), NULL, 10), still,
                                        sizeof still);
                snprintf(part, sizeof part,
                         "%s[%s] is read but its watermark is frozen at %s for %s "
                         "(message times do not advance)",
                         topic, PQgetvalue(res, row, 1), PQgetvalue(res, row, 8), still);
                cause = METRICS_WATCH_FROZEN;
            } else {
                if (unread_ms < s->blind_after_ms && !(unowned && owners_settled))
                    continue;
                duration_format_rounded(unread_ms, unread, sizeof unread);
                if (PQgetisnull(res, row, 4))
                    snprintf(lag, sizeof lag, "never read");
                else
                    duration_format_rounded(strtoll(PQgetvalue(res, row, 4), NULL, 10), lag,
                                            sizeof lag);
                if (unowned && owners_settled)
                    snprintf(part, sizeof part,
                             "%s[%s] has no live owner (last %s) and is unread for %s (watermark "
                             "%s behind)",
                             topic, PQgetvalue(res, row, 1),
                             PQgetisnull(res, row, 2) ? "none" : PQgetvalue(res, row, 2), unread,
                             lag);
                else
                    snprintf(part, sizeof part, "%s[%s] unread for %s (watermark %s behind)", topic,
                             PQgetvalue(res, row, 1), unread, lag);
            }
        }
        watch_mark(s, procs, n_procs, topic, cause, part);
        blind_add(&b, part);
    }
    PQclear(res);
    res = NULL;

    /* An instance of a version no longer loaded still waits for events on
     * the topics it read, but no loaded definition declares them there, so
     * intake reads those topics (for the watermark) without judging them. */
    for (size_t i = 0; i < s->watch.n; i++) {
        const engine_watch_topic_t *t = &s->watch.items[i];
        if (t->old_version == 0)
            continue;
        char part[600];
        snprintf(part, sizeof part,
                 "%s is read only by version %d of %s, which has open instances but is not "
                 "loaded: their events there are not judged",
                 t->topic, t->old_version, t->process);
        process_mark(procs, n_procs, t->process, METRICS_WATCH_OLD_VERSION, part);
        blind_add(&b, part);
    }

    if (json_array_size(b.behind) > 0) {
        char text[1400];
        snprintf(text, sizeof text,
                 "steward group %s is blind: %s%s; deadlines wait until it reads again", s->group,
                 b.summary, b.listed > 5 ? ", ..." : "");
        json_t *watermarks = json_array();
        for (size_t p = 0; p < n_procs; p++) {
            json_t *causes = json_array();
            for (int c = 0; c < METRICS_WATCH_N_CAUSES; c++) {
                if (procs[p].cause[c])
                    json_array_append_new(causes, json_string(metrics_watch_cause_name(c)));
            }
            if (json_array_size(causes) > 0)
                json_array_append_new(watermarks,
                                      json_pack("{s:s, s:o, s:s}", "process", procs[p].process,
                                                "causes", causes, "detail", procs[p].detail));
            else
                json_decref(causes);
        }
        json_t *details = json_pack("{s:s, s:O, s:o}", "group", s->group, "partitions", b.behind,
                                    "watermarks", watermarks);
        alert_batch_open(&alerts, ALERT_BLIND, NULL, NULL, NULL, s->blind_owner, text, details,
                         dedup, -1);
        json_decref(details);
        stats->blind = true;
    } else {
        alert_batch_resolve_key(&alerts, ALERT_BLIND, dedup, "intake reads every partition again");
    }

    if ((res = db_query(s->conn, "finding versions no longer set aside", unloadable_done_sql, 0,
                        NULL, &cls, errstr, errstr_size)) == NULL)
        goto fail;
    for (int row = 0; row < PQntuples(res); row++)
        alert_batch_resolve_key(&alerts, ALERT_UNLOADABLE, PQgetvalue(res, row, 0),
                                "no open instance of the version is set aside any more");
    PQclear(res);
    res = NULL;

    alert_counts_t counts = {0};
    if ((cls = alert_batch_write(s->conn, &alerts, s->routes, &counts, errstr, errstr_size)) !=
            ERR_OK ||
        (cls = db_exec(s->conn, "committing the blind check", "COMMIT", 0, NULL, errstr,
                       errstr_size)) != ERR_OK)
        goto fail;
    stats->opened += counts.opened;
    stats->resolved += counts.resolved;
    goto done;

fail:
    db_rollback(s->conn);
done:
    PQclear(res);
    pgarr_free(&topics);
    json_decref(b.behind);
    alert_batch_clear(&alerts);
    return cls;
}

/* This replica is alive: stamps steward.replicas, and forgets replicas
 * unseen for a day (the table keeps one row per replica name). */
err_class_t sched_heartbeat(sched_t *s, char *errstr, size_t errstr_size)
{
    if (s->replica == NULL)
        return ERR_OK;
    s->beat_ms = clock_wall_ms();
    const char *params[2] = {s->group, s->replica};
    return db_exec(s->conn, "recording that this replica is alive",
                   "WITH gone AS (DELETE FROM steward.replicas WHERE consumer_group = $1 "
                   "  AND seen_at < now() - interval '1 day') "
                   "INSERT INTO steward.replicas (consumer_group, replica) VALUES ($1, $2) "
                   "ON CONFLICT (consumer_group, replica) DO UPDATE SET seen_at = now()",
                   2, params, errstr, errstr_size);
}

/*
 * Marks the loaded versions current in steward.definitions, and the other
 * versions of the same processes not: the watermark of a process then
 * counts only their topics (and those of versions with open instances).
 */
err_class_t sched_mark_current(sched_t *s, char *errstr, size_t errstr_size)
{
    pgarr_t processes = {0}, versions = {0};
    for (size_t d = 0; d < s->defs->n; d++) {
        pgarr_add(&processes, s->defs->defs[d]->process);
        pgarr_add_int(&versions, s->defs->defs[d]->version);
    }
    const char *params[2] = {pgarr_text(&processes), pgarr_text(&versions)};
    err_class_t cls;
    if (params[0] == NULL || params[1] == NULL)
        cls = err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
    else
        cls = db_exec(s->conn, "marking the loaded definition versions current",
                      "WITH loaded AS (SELECT * FROM unnest($1::text[], $2::int[]) AS u(p, v)) "
                      "UPDATE steward.definitions d SET current = c.now_current "
                      "FROM (SELECT d2.process, d2.version, EXISTS (SELECT 1 FROM loaded "
                      "        WHERE p = d2.process AND v = d2.version) AS now_current "
                      "      FROM steward.definitions d2 "
                      "      WHERE d2.process IN (SELECT p FROM loaded)) c "
                      "WHERE d.process = c.process AND d.version = c.version "
                      "  AND d.current <> c.now_current",
                      2, params, errstr, errstr_size);
    /* Readers without the running config (an operator's retry or move)
     * rename a stored document's topics by this. */
    json_t *mapping = cls == ERR_OK ? def_set_mapping_json(s->defs) : NULL;
    char *mapping_text =
        mapping != NULL ? json_dumps(mapping, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    if (cls == ERR_OK && mapping_text == NULL)
        cls = err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
    if (cls == ERR_OK) {
        const char *mparams[2] = {params[0], mapping_text};
        cls = db_exec(s->conn, "recording the topic mapping",
                      "UPDATE steward.definitions SET topic_mapping = $2::jsonb "
                      "WHERE process = ANY($1::text[]) "
                      "  AND topic_mapping IS DISTINCT FROM $2::jsonb",
                      2, mparams, errstr, errstr_size);
    }
    free(mapping_text);
    json_decref(mapping);
    pgarr_free(&processes);
    pgarr_free(&versions);
    return cls;
}

/*
 * The topics this pass watches, as s->watch and the two array literals
 * topic_watermarks() takes. Under versions_lock: the due workers of the
 * last pass are done, but the cache is theirs too.
 */
err_class_t sched_watch_topics(sched_t *s, char *errstr, size_t errstr_size)
{
    pgarr_t processes = {0}, topics = {0};
    pthread_mutex_lock(&s->versions_lock);
    err_class_t cls = defcache_watch_topics(s->versions, s->conn, &s->watch, errstr, errstr_size);
    pthread_mutex_unlock(&s->versions_lock);
    if (cls != ERR_OK)
        return cls;
    for (size_t i = 0; i < s->watch.n; i++) {
        pgarr_add(&processes, s->watch.items[i].process);
        pgarr_add(&topics, s->watch.items[i].topic);
    }
    free(s->watch_processes);
    free(s->watch_topics);
    s->watch_processes = pgarr_text(&processes) != NULL ? strdup(pgarr_text(&processes)) : NULL;
    s->watch_topics = pgarr_text(&topics) != NULL ? strdup(pgarr_text(&topics)) : NULL;
    pgarr_free(&processes);
    pgarr_free(&topics);
    if (s->watch_processes == NULL || s->watch_topics == NULL)
        return err_set(ERR_FATAL, errstr, errstr_size, "out of memory");

    /* For readers in SQL (steward.process_watermarks()): written only when
     * the pairs change, which is at a start, a reload, or when the last
     * instance of an old version ends. */
    char *pairs = NULL;
    if (asprintf(&pairs, "%s\x1f%s", s->watch_processes, s->watch_topics) < 0)
        return err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
    if (s->watch_recorded != NULL && strcmp(s->watch_recorded, pairs) == 0) {
        free(pairs);
        return ERR_OK;
    }
    const char *params[3] = {s->group, s->watch_processes, s->watch_topics};
    cls = db_exec(s->conn, "recording the watched topics",
                  "WITH n AS (SELECT DISTINCT u.p, u.t FROM unnest($2::text[], $3::text[]) "
                  "    AS u(p, t)), "
                  "gone AS (DELETE FROM steward.watched_topics w WHERE w.consumer_group = $1 "
                  "  AND NOT EXISTS (SELECT 1 FROM n WHERE n.p = w.process AND n.t = w.topic)) "
                  "INSERT INTO steward.watched_topics (consumer_group, process, topic) "
                  "SELECT $1, p, t FROM n ON CONFLICT DO NOTHING",
                  3, params, errstr, errstr_size);
    if (cls == ERR_OK) {
        free(s->watch_recorded);
        s->watch_recorded = pairs;
    } else {
        free(pairs);
    }
    return cls;
}

void sched_publish_watches(metrics_watch_t *procs, size_t n_procs)
{
    /* A process without a watermark whose topics all look read is still
     * blind: say so rather than show it healthy. */
    for (size_t p = 0; p < n_procs; p++) {
        bool any = false;
        for (int c = 0; c < METRICS_WATCH_N_CAUSES; c++)
            any = any || procs[p].cause[c];
        if (procs[p].watermark_ms < 0 && !any) {
            procs[p].cause[METRICS_WATCH_NO_WATERMARK] = true;
            snprintf(procs[p].detail, sizeof procs[p].detail,
                     "%s has no watermark yet: a partition it reads was never read",
                     procs[p].process);
        }
    }
    metrics_set_watches(procs, n_procs);
}
