/*
 * scheduler - deadlines against the watermark, and blindness; see
 * scheduler.h. This file owns the scheduler's life (new, free, reloads),
 * the order of a pass (sched_tick) and its thread (sched_run); the due
 * pass, parked-event expiry and the blind check are the other files
 * scheduler_int.h names.
 */
#include "manager/timing/scheduler_int.h"

#include "common/clock.h"
#include "common/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

sched_t *sched_new(const sched_config_t *cfg, const def_set_t *defs, route_table_t *routes,
                   char *errstr, size_t errstr_size)
{
    sched_t *s = calloc(1, sizeof *s);
    if (s == NULL) {
        err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&s->versions_lock, NULL);
    s->conninfo = strdup(cfg->conninfo != NULL ? cfg->conninfo : "");
    s->group = strdup(cfg->group);
    s->blind_owner = strdup(cfg->blind_owner != NULL ? cfg->blind_owner : "default");
    s->interval_ms = cfg->interval_ms;
    s->grace_ms = cfg->grace_ms;
    s->blind_after_ms = cfg->blind_after_ms;
    s->until_ms = cfg->until_ms;
    s->unowned_after_ms = cfg->unowned_after_ms;
    s->replica = cfg->replica != NULL ? strdup(cfg->replica) : NULL;
    s->mark_current = true;
    s->defs = defs;
    s->routes = routes;
    s->versions = defcache_new(defs);
    s->started_ms = clock_wall_ms();
    s->n_workers = cfg->transactions > 0 ? cfg->transactions : SCHED_DEFAULT_TRANSACTIONS;
    if (s->n_workers > SCHED_MAX_TRANSACTIONS) {
        err_set(ERR_INVALID, errstr, errstr_size,
                "scheduler.transactions is %zu; at most %d transactions may be in flight",
                s->n_workers, SCHED_MAX_TRANSACTIONS);
        sched_free(s);
        return NULL;
    }
    if (s->conninfo == NULL || s->group == NULL || s->blind_owner == NULL || s->versions == NULL ||
        (cfg->replica != NULL && s->replica == NULL)) {
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
    engine_watch_topics_clear(&s->watch);
    free(s->watch_processes);
    free(s->watch_topics);
    free(s->watch_recorded);
    free(s->paused);
    defcache_free(s->versions);
    for (size_t i = 1; i < SCHED_MAX_TRANSACTIONS; i++) {
        if (s->extra[i].conn != NULL)
            PQfinish(s->extra[i].conn);
    }
    pthread_mutex_destroy(&s->versions_lock);
    free(s->conninfo);
    free(s->group);
    free(s->blind_owner);
    free(s->replica);
    free(s);
}

void sched_set_definitions(sched_t *s, const def_set_t *defs, route_table_t *routes)
{
    s->defs = defs;
    s->routes = routes;
    s->mark_current = true;
    defcache_set_loaded(s->versions, defs);
}

bool sched_stopping(const sched_t *s)
{
    return s->stop != NULL && *s->stop;
}

int64_t sched_ms_column(const PGresult *res, int row, int col)
{
    return PQgetisnull(res, row, col) ? ENGINE_NO_DEADLINE
                                      : strtoll(PQgetvalue(res, row, col), NULL, 10);
}

err_class_t sched_connect(const sched_t *s, PGconn **conn, char *errstr, size_t errstr_size)
{
    if (*conn != NULL && PQstatus(*conn) == CONNECTION_OK)
        return ERR_OK;
    PQfinish(*conn);
    *conn = db_connect(s->conninfo, "steward scheduler", errstr, errstr_size);
    return *conn != NULL ? ERR_OK : ERR_TRANSIENT;
}

err_class_t sched_tick(sched_t *s, sched_stats_t *stats, char *errstr, size_t errstr_size)
{
    err_class_t cls;
    metrics_watch_t *procs = NULL;
    size_t n_procs = 0;

    memset(stats, 0, sizeof *stats);
    if ((cls = sched_connect(s, &s->conn, errstr, errstr_size)) != ERR_OK)
        return cls;
    if ((cls = sched_heartbeat(s, errstr, errstr_size)) != ERR_OK)
        return cls;
    if (s->mark_current) {
        if ((cls = sched_mark_current(s, errstr, errstr_size)) != ERR_OK)
            return cls;
        s->mark_current = false;
    }
    if ((cls = sched_watch_topics(s, errstr, errstr_size)) != ERR_OK)
        return cls;
    const char *params[3] = {s->group, s->watch_processes, s->watch_topics};
    PGresult *res = db_query(s->conn, "reading watermarks",
                             "SELECT process, steward.to_ms(watermark) "
                             "FROM steward.topic_watermarks($1, $2::text[], $3::text[]) "
                             "ORDER BY 1",
                             3, params, &cls, errstr, errstr_size);
    if (res == NULL)
        return cls;
    if (PQntuples(res) > 0 && (procs = calloc((size_t) PQntuples(res), sizeof *procs)) == NULL) {
        PQclear(res);
        return err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
    }
    for (int row = 0; row < PQntuples(res); row++) {
        metrics_watch_t *w = &procs[n_procs++];
        snprintf(w->process, sizeof w->process, "%s", PQgetvalue(res, row, 0));
        w->watermark_ms =
            PQgetisnull(res, row, 1) ? -1 : strtoll(PQgetvalue(res, row, 1), NULL, 10);
    }
    int64_t now = clock_wall_ms();
    for (int row = 0; row < PQntuples(res) && cls == ERR_OK && !sched_stopping(s); row++) {
        if (PQgetisnull(res, row, 1))
            continue; /* no watermark: nothing can be judged; sched_check_blind says why */
        int64_t watermark = engine_judge_time(strtoll(PQgetvalue(res, row, 1), NULL, 10), now);
        if (s->until_ms > 0 && watermark > s->until_ms)
            watermark = s->until_ms;
        cls =
            sched_judge_process(s, PQgetvalue(res, row, 0), watermark, stats, errstr, errstr_size);
    }
    PQclear(res);
    if (cls != ERR_OK || sched_stopping(s)) {
        free(procs);
        return cls;
    }
    /* A failed expiry must not stop blind detection: the pass goes on to
     * check every partition, and the failure is logged and returned after. */
    char expiry_err[512] = "";
    err_class_t expiry = sched_expire_parked(s, stats, expiry_err, sizeof expiry_err);
    if (expiry != ERR_OK)
        LOG_LIMITED(LOG_LEVEL_WARN, "sched-expiry", 10000,
                    "parked-event expiry failed; checking the partitions anyway", "error",
                    expiry_err, "class", err_class_name(expiry));
    if (!sched_stopping(s)) {
        cls = sched_check_blind(s, procs, n_procs, stats, errstr, errstr_size);
        if (cls == ERR_OK)
            sched_publish_watches(procs, n_procs);
    }
    free(procs);
    if (cls == ERR_OK && expiry != ERR_OK)
        cls = err_set(expiry, errstr, errstr_size, "%s", expiry_err);
    return cls;
}

void sched_run(sched_t *s, volatile sig_atomic_t *stop, gen_current_t *cur)
{
    char errstr[1024];
    gen_t *held = gen_acquire(cur);
    s->stop = stop;
    sched_set_definitions(s, held->defs, held->routes);
    unsigned paused_seen = 0;
    while (!*stop) {
        sched_stats_t stats;
        if (gen_refresh(cur, &held))
            sched_set_definitions(s, held->defs, held->routes);
        char *paused = gen_paused_refresh(cur, &paused_seen);
        if (paused != NULL) {
            free(s->paused);
            s->paused = paused;
        }
        err_class_t cls = sched_tick(s, &stats, errstr, sizeof errstr);
        if (cls != ERR_OK)
            LOG_LIMITED(LOG_LEVEL_WARN, "sched-tick", 10000, "deadline pass failed; retrying",
                        "error", errstr, "class", err_class_name(cls));
        for (int64_t slept = 0; slept < s->interval_ms && !*stop; slept += 50) {
            metrics_beat(METRICS_SCHEDULER); /* /healthz: this thread is not stuck */
            usleep(50 * 1000);
        }
    }
    s->stop = NULL;
    gen_release(held);
}
