/*
 * scheduler - deadlines against the watermark, and blindness; see
 * scheduler.h.
 */
#include "manager/scheduler.h"

#include "definitions/duration.h"
#include "manager/alerts.h"
#include "manager/clock.h"
#include "manager/decode.h"
#include "manager/db.h"
#include "manager/defcache.h"
#include "manager/engine.h"
#include "manager/log.h"
#include "manager/metrics.h"
#include "manager/pgarr.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SCHED_BATCH         500
#define SCHED_JOIN_GRACE_MS 60000

struct sched {
    PGconn *conn;
    char *conninfo;
    char *group;
    char *blind_owner;
    int64_t interval_ms, grace_ms, blind_after_ms, until_ms;
    const def_set_t *defs; /* borrowed */
    route_table_t *routes; /* borrowed */
    defcache_t *versions;
    int64_t started_ms; /* topics no one has read count as blind only after blind_after */
};

sched_t *sched_new(const sched_config_t *cfg, const def_set_t *defs, route_table_t *routes,
                   char *errstr, size_t errstr_size)
{
    sched_t *s = calloc(1, sizeof *s);
    if (s == NULL) {
        err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
        return NULL;
    }
    s->conninfo = strdup(cfg->conninfo != NULL ? cfg->conninfo : "");
    s->group = strdup(cfg->group);
    s->blind_owner = strdup(cfg->blind_owner != NULL ? cfg->blind_owner : "default");
    s->interval_ms = cfg->interval_ms;
    s->grace_ms = cfg->grace_ms;
    s->blind_after_ms = cfg->blind_after_ms;
    s->until_ms = cfg->until_ms;
    s->defs = defs;
    s->routes = routes;
    s->versions = defcache_new(defs);
    s->started_ms = clock_wall_ms();
    if (s->conninfo == NULL || s->group == NULL || s->blind_owner == NULL || s->versions == NULL) {
        err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
        sched_free(s);
        return NULL;
    }
    s->conn = db_connect(s->conninfo, "steward scheduler", errstr, errstr_size);
    if (s->conn == NULL) {
        sched_free(s);
        return NULL;
    }
    return s;
}

void sched_free(sched_t *s)
{
    if (s == NULL)
        return;
    if (s->conn != NULL)
        PQfinish(s->conn);
    defcache_free(s->versions);
    free(s->conninfo);
    free(s->group);
    free(s->blind_owner);
    free(s);
}

void sched_set_definitions(sched_t *s, const def_set_t *defs, route_table_t *routes)
{
    s->defs = defs;
    s->routes = routes;
    defcache_set_loaded(s->versions, defs);
}

/* "ShipmentDispatched" or "StockReserved or StockUnavailable". */
static void expected_events(const def_t *def, size_t state, char *buf, size_t size, json_t *list)
{
    size_t len = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < def->states[state].n_on; i++) {
        const char *name = def->events[def->states[state].on[i].event].name;
        len += (size_t) snprintf(buf + len, len < size ? size - len : 0, "%s%s",
                                 i > 0 ? " or " : "", name);
        json_array_append_new(list, json_string(name));
    }
}

static int64_t ms_column(const PGresult *res, int row, int col)
{
    return PQgetisnull(res, row, col) ? ENGINE_NO_DEADLINE
                                      : strtoll(PQgetvalue(res, row, col), NULL, 10);
}

static const char due_sql[] =
    "SELECT key, version, state, "
    "  (extract(epoch FROM started_at) * 1000)::bigint, "
    "  (extract(epoch FROM state_entered_at) * 1000)::bigint, "
    "  (extract(epoch FROM deadline_at) * 1000)::bigint, "
    "  (extract(epoch FROM process_deadline_at) * 1000)::bigint, "
    "  overdue, process_overdue "
    "FROM steward.instances "
    "WHERE status = 'active' AND next_deadline_at IS NOT NULL "
    "  AND next_deadline_at <= to_timestamp($2 / 1000.0) AND process = $1 "
    "ORDER BY next_deadline_at LIMIT 500 FOR UPDATE SKIP LOCKED";

static const char mark_sql[] =
    "UPDATE steward.instances i SET overdue = u.o, process_overdue = u.po, "
    "  next_deadline_at = to_timestamp(u.n / 1000.0), updated_at = now() "
    "FROM unnest($2::text[], $3::bool[], $4::bool[], $5::bigint[]) AS u(k, o, po, n) "
    "WHERE i.process = $1 AND i.key = u.k";

/* Opens the alert of one missed deadline. */
static void alert_deadline(alert_batch_t *alerts, const def_t *def, const char *key,
                           const engine_instance_t *inst, bool process_wide, int64_t watermark_ms)
{
    const def_state_t *st = &def->states[inst->state];
    char expected[512], in_state[32], limit[32], overdue[32], deadline_at[40], entered_at[40];
    char summary[1024], dedup[512];
    json_t *events = json_array();

    expected_events(def, (size_t) inst->state, expected, sizeof expected, events);
    int64_t deadline = process_wide ? inst->process_deadline_ms : inst->deadline_ms;
    const char *owner = process_wide ? def->owner : def_state_owner(def, (size_t) inst->state);
    duration_format(watermark_ms - (process_wide ? inst->started_ms : inst->state_entered_ms),
                    in_state, sizeof in_state);
    duration_format(process_wide ? def->deadline_ms : st->deadline_ms, limit, sizeof limit);
    duration_format(watermark_ms - deadline, overdue, sizeof overdue);
    decode_format_time(deadline, deadline_at, sizeof deadline_at);
    decode_format_time(inst->state_entered_ms, entered_at, sizeof entered_at);

    if (process_wide) {
        snprintf(summary, sizeof summary,
                 "%s %s not finished after %s (process deadline %s): in %s, expected %s; "
                 "owner %s",
                 def->process, key, in_state, limit, st->name, expected, owner);
        snprintf(dedup, sizeof dedup, "steward:process_deadline:%s:%s:%" PRId64, def->process, key,
                 inst->started_ms);
    } else {
        snprintf(summary, sizeof summary,
                 "%s %s stalled in %s for %s (deadline %s): expected %s; "
                 "owner %s",
                 def->process, key, st->name, in_state, limit, expected, owner);
        snprintf(dedup, sizeof dedup, "steward:deadline:%s:%s:%s:%" PRId64, def->process, key,
                 st->name, inst->state_entered_ms);
    }
    json_t *details =
        json_pack("{s:s, s:s, s:s, s:o, s:s, s:s, s:s, s:s, s:I, s:i}", "process", def->process,
                  "key", key, "state", st->name, "expected", events, "deadline", limit,
                  "deadline_at", deadline_at, "entered_at", entered_at, "owner", owner,
                  "overdue_ms", (json_int_t) (watermark_ms - deadline), "version", def->version);
    alert_batch_open(alerts, process_wide ? ALERT_PROCESS_DEADLINE : ALERT_DEADLINE, def->process,
                     key, st->name, owner, summary, details, dedup, deadline);
    json_decref(details);
}

/*
 * Judges up to SCHED_BATCH due instances of one process in one
 * transaction. Returns how many were due in *n.
 */
static err_class_t judge_batch(sched_t *s, const char *process, int64_t watermark_ms,
                               sched_stats_t *stats, int *n, char *errstr, size_t errstr_size)
{
    char judge_text[24];
    int64_t judge_ms = watermark_ms - s->grace_ms;
    const char *params[2] = {process, judge_text};
    pgarr_t keys = {0}, overdue = {0}, poverdue = {0}, next = {0};
    alert_batch_t alerts = {0};
    err_class_t cls;
    PGresult *res = NULL;

    *n = 0;
    snprintf(judge_text, sizeof judge_text, "%" PRId64, judge_ms);
    if ((cls = db_exec(s->conn, "starting a deadline pass", "BEGIN", 0, NULL, errstr,
                       errstr_size)) != ERR_OK)
        return cls;
    if ((res = db_query(s->conn, "finding due deadlines", due_sql, 2, params, &cls, errstr,
                        errstr_size)) == NULL)
        goto fail;
    *n = PQntuples(res);
    for (int row = 0; row < *n; row++) {
        const char *key = PQgetvalue(res, row, 0);
        const def_t *def =
            defcache_get(s->versions, s->conn, process, atoi(PQgetvalue(res, row, 1)));
        long state = def != NULL ? def_find_state(def, PQgetvalue(res, row, 2)) : -1;
        if (state < 0) {
            LOG_LIMITED(LOG_LEVEL_ERROR, "sched-nodef", 60000,
                        "an instance's definition version or state is unknown; skipped", "process",
                        process, "key", key, "state", PQgetvalue(res, row, 2));
            continue;
        }
        engine_instance_t inst;
        engine_instance_init(&inst);
        inst.exists = true;
        inst.state = state;
        inst.started_ms = ms_column(res, row, 3);
        inst.state_entered_ms = ms_column(res, row, 4);
        inst.deadline_ms = ms_column(res, row, 5);
        inst.process_deadline_ms = ms_column(res, row, 6);
        inst.overdue = strcmp(PQgetvalue(res, row, 7), "t") == 0;
        inst.process_overdue = strcmp(PQgetvalue(res, row, 8), "t") == 0;

        if (!inst.overdue && inst.deadline_ms != ENGINE_NO_DEADLINE &&
            inst.deadline_ms <= judge_ms) {
            alert_deadline(&alerts, def, key, &inst, false, watermark_ms);
            inst.overdue = true;
        }
        if (!inst.process_overdue && inst.process_deadline_ms != ENGINE_NO_DEADLINE &&
            inst.process_deadline_ms <= judge_ms) {
            alert_deadline(&alerts, def, key, &inst, true, watermark_ms);
            inst.process_overdue = true;
        }
        int64_t next_ms = engine_next_deadline(def, &inst);
        pgarr_add(&keys, key);
        pgarr_add_bool(&overdue, inst.overdue);
        pgarr_add_bool(&poverdue, inst.process_overdue);
        if (next_ms == ENGINE_NO_DEADLINE)
            pgarr_add(&next, NULL);
        else
            pgarr_add_int(&next, next_ms);
        stats->judged++;
    }
    PQclear(res);
    res = NULL;

    if (keys.n > 0) {
        const char *mark[5] = {process, pgarr_text(&keys), pgarr_text(&overdue),
                               pgarr_text(&poverdue), pgarr_text(&next)};
        if ((cls = db_exec(s->conn, "marking overdue instances", mark_sql, 5, mark, errstr,
                           errstr_size)) != ERR_OK)
            goto fail;
    }
    alert_counts_t counts = {0};
    if (!alert_batch_empty(&alerts) &&
        (cls = alert_batch_write(s->conn, &alerts, s->routes, &counts, errstr, errstr_size)) !=
            ERR_OK)
        goto fail;
    if ((cls = db_exec(s->conn, "committing a deadline pass", "COMMIT", 0, NULL, errstr,
                       errstr_size)) != ERR_OK)
        goto fail;
    stats->opened += counts.opened;
    metrics_add(&metrics.alerts_opened, (long long) counts.opened);
    goto done;

fail:
    db_rollback(s->conn);
done:
    PQclear(res);
    pgarr_free(&keys);
    pgarr_free(&overdue);
    pgarr_free(&poverdue);
    pgarr_free(&next);
    alert_batch_clear(&alerts);
    return cls;
}

/* Every topic a loaded definition reads, as an array literal. */
static void loaded_topics(const def_set_t *defs, pgarr_t *topics)
{
    for (size_t d = 0; d < defs->n; d++) {
        for (size_t e = 0; e < defs->defs[d]->n_events; e++)
            pgarr_add(topics, defs->defs[d]->events[e].topic);
    }
}

static const char stale_sql[] =
    "SELECT t.topic, o.partition, o.owner, "
    "  (extract(epoch FROM now() - o.updated_at) * 1000)::bigint, "
    "  (extract(epoch FROM now() - o.watermark) * 1000)::bigint "
    "FROM (SELECT DISTINCT unnest($2::text[]) AS topic) t "
    "LEFT JOIN steward.offsets o ON o.consumer_group = $1 AND o.topic = t.topic "
    "WHERE o.topic IS NULL OR o.updated_at < now() - $3::bigint * interval '1 millisecond' "
    "ORDER BY 1, 2";

/* Opens or resolves this group's blind alert. */
static err_class_t check_blind(sched_t *s, sched_stats_t *stats, char *errstr, size_t errstr_size)
{
    pgarr_t topics = {0};
    char after[24], dedup[300], summary[1024];
    err_class_t cls;
    alert_batch_t alerts = {0};
    json_t *behind = json_array();

    loaded_topics(s->defs, &topics);
    snprintf(after, sizeof after, "%" PRId64, s->blind_after_ms);
    snprintf(dedup, sizeof dedup, "steward:blind:%s", s->group);
    const char *params[3] = {s->group, pgarr_text(&topics), after};
    PGresult *res = db_query(s->conn, "checking that intake reads", stale_sql, 3, params, &cls,
                             errstr, errstr_size);
    pgarr_free(&topics);
    if (res == NULL) {
        json_decref(behind);
        return cls;
    }
    /* A topic no replica has claimed yet counts only once the group had
     * time to form: joining can take longer than a short blind_after. */
    int64_t settle_ms =
        s->blind_after_ms > SCHED_JOIN_GRACE_MS ? s->blind_after_ms : SCHED_JOIN_GRACE_MS;
    bool settled = clock_wall_ms() - s->started_ms >= settle_ms;
    size_t len = 0;
    int listed = 0;
    summary[0] = '\0';
    for (int row = 0; row < PQntuples(res); row++) {
        const char *topic = PQgetvalue(res, row, 0);
        char unread[32], lag[32], part[300];
        if (PQgetisnull(res, row, 1)) {
            if (!settled)
                continue; /* not claimed yet at start: give the group time */
            snprintf(part, sizeof part, "%s: no partition read", topic);
        } else {
            duration_format(strtoll(PQgetvalue(res, row, 3), NULL, 10), unread, sizeof unread);
            if (PQgetisnull(res, row, 4))
                snprintf(lag, sizeof lag, "never read");
            else
                duration_format(strtoll(PQgetvalue(res, row, 4), NULL, 10), lag, sizeof lag);
            snprintf(part, sizeof part, "%s[%s] unread for %s (watermark %s behind)", topic,
                     PQgetvalue(res, row, 1), unread, lag);
        }
        json_array_append_new(behind, json_string(part));
        if (listed++ < 5)
            len += (size_t) snprintf(summary + len, len < sizeof summary ? sizeof summary - len : 0,
                                     "%s%s", listed > 1 ? ", " : "", part);
    }
    PQclear(res);

    alert_counts_t counts = {0};
    if (json_array_size(behind) > 0) {
        char text[1400];
        snprintf(text, sizeof text,
                 "steward group %s is blind: %s%s; deadlines wait until it reads again", s->group,
                 summary, listed > 5 ? ", ..." : "");
        json_t *details = json_pack("{s:s, s:O}", "group", s->group, "partitions", behind);
        alert_batch_open(&alerts, ALERT_BLIND, NULL, NULL, NULL, s->blind_owner, text, details,
                         dedup, -1);
        json_decref(details);
        stats->blind = true;
    } else {
        alert_batch_resolve_key(&alerts, dedup, "intake reads every partition again");
    }
    json_decref(behind);
    cls = alert_batch_write(s->conn, &alerts, s->routes, &counts, errstr, errstr_size);
    alert_batch_clear(&alerts);
    stats->opened += counts.opened;
    stats->resolved += counts.resolved;
    return cls;
}

err_class_t sched_tick(sched_t *s, sched_stats_t *stats, char *errstr, size_t errstr_size)
{
    const char *params[1] = {s->group};
    err_class_t cls;

    memset(stats, 0, sizeof *stats);
    if (PQstatus(s->conn) != CONNECTION_OK) {
        PQfinish(s->conn);
        if ((s->conn = db_connect(s->conninfo, "steward scheduler", errstr, errstr_size)) == NULL)
            return ERR_TRANSIENT;
    }
    PGresult *res = db_query(s->conn, "reading watermarks",
                             "SELECT process, (extract(epoch FROM watermark) * 1000)::bigint "
                             "FROM steward.process_watermarks($1) WHERE watermark IS NOT NULL",
                             1, params, &cls, errstr, errstr_size);
    if (res == NULL)
        return cls;
    for (int row = 0; row < PQntuples(res) && cls == ERR_OK; row++) {
        int64_t watermark = strtoll(PQgetvalue(res, row, 1), NULL, 10);
        if (s->until_ms > 0 && watermark > s->until_ms)
            watermark = s->until_ms;
        int n;
        do {
            cls =
                judge_batch(s, PQgetvalue(res, row, 0), watermark, stats, &n, errstr, errstr_size);
        } while (cls == ERR_OK && n == SCHED_BATCH);
    }
    PQclear(res);
    if (cls != ERR_OK)
        return cls;
    return check_blind(s, stats, errstr, errstr_size);
}

void sched_run(sched_t *s, volatile sig_atomic_t *stop, gen_current_t *cur)
{
    char errstr[1024];
    gen_t *held = gen_acquire(cur);
    sched_set_definitions(s, held->defs, held->routes);
    while (!*stop) {
        sched_stats_t stats;
        if (gen_refresh(cur, &held))
            sched_set_definitions(s, held->defs, held->routes);
        err_class_t cls = sched_tick(s, &stats, errstr, sizeof errstr);
        if (cls != ERR_OK)
            LOG_LIMITED(LOG_LEVEL_WARN, "sched-tick", 10000, "deadline pass failed; retrying",
                        "error", errstr, "class", err_class_name(cls));
        for (int64_t slept = 0; slept < s->interval_ms && !*stop; slept += 50) {
            metrics_beat(METRICS_SCHEDULER); /* /healthz: this thread is not stuck */
            usleep(50 * 1000);
        }
    }
    gen_release(held);
}
