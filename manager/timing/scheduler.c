/*
 * scheduler - deadlines against the watermark, and blindness; see
 * scheduler.h.
 */
#include "manager/timing/scheduler.h"

#include "common/clock.h"
#include "common/db.h"
#include "common/failpoint.h"
#include "common/log.h"
#include "common/pgarr.h"
#include "definitions/duration.h"
#include "formats/decode.h"
#include "engine/engine.h"
#include "manager/alerting/alerts.h"
#include "manager/commands/cmdqueue.h"
#include "manager/runtime/defcache.h"
#include "manager/runtime/metrics.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SCHED_JOIN_GRACE_MS 60000

/*
 * A connection the due pass judges on. Worker 0 is the scheduler's own
 * connection; the others judge the same process's due instances side by
 * side, each taking the rows the others have not locked (SKIP LOCKED).
 */
typedef struct due_worker {
    PGconn *conn;
} due_worker_t;

struct sched {
    PGconn *conn;
    char *conninfo;
    char *group;
    char *blind_owner;
    char *replica; /* NULL: no heartbeat (a replay) */
    int64_t interval_ms, grace_ms, blind_after_ms, until_ms, unowned_after_ms;
    volatile sig_atomic_t *stop; /* set by sched_run(); NULL: never stops early */
    bool mark_current;           /* the loaded versions are not yet marked current */
    int64_t beat_ms;             /* when steward.replicas was last stamped */
    const def_set_t *defs;       /* borrowed */
    route_table_t *routes;       /* borrowed */
    defcache_t *versions;
    /* The workers share versions: a version that does not load is read and
     * logged once, whichever worker meets it first. */
    pthread_mutex_t versions_lock;
    int64_t started_ms; /* topics no one has read count as blind only after blind_after */
    size_t n_workers;   /* transactions of a due pass in flight at once */
    /* This pass's watched topics (defcache_watch_topics()) and the same as
     * two array literals, (process, topic) pairs for topic_watermarks(). */
    engine_watch_topics_t watch;
    char *watch_processes, *watch_topics;
    char *watch_recorded; /* the pairs last written to steward.watched_topics */
    /* dispatch.paused as sched_run() last took it up (NULL: none), so a
     * missed step's page says its commands are held, not failing. Changed
     * only between passes. */
    char *paused;
    due_worker_t extra[SCHED_MAX_TRANSACTIONS]; /* workers 1..n_workers-1 */
};

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

static bool stopping(const sched_t *s)
{
    return s->stop != NULL && *s->stop;
}

static int64_t ms_column(const PGresult *res, int row, int col)
{
    return PQgetisnull(res, row, col) ? ENGINE_NO_DEADLINE
                                      : strtoll(PQgetvalue(res, row, col), NULL, 10);
}

/*
 * Due candidates, up to SCHED_DUE_BATCH ($3) in deadline order, row-locked FOR
 * UPDATE SKIP LOCKED (replicas share the work). Each also tries the
 * instance's advisory lock, the lock every writer of steward.instances
 * holds while it changes an instance (a batch takes it before it reads its
 * instances): column 17 says whether this transaction has it. A candidate
 * without it is being judged by a batch right now and is left alone: no
 * decision, no write; a later pass sees it again. The lock is only tried,
 * never awaited, so nothing here waits for a batch. It is tried in the
 * outer query over the limited candidates, so no lock is taken for a row
 * beyond the limit; the row locks of candidates whose advisory lock was
 * busy stay held (unused) until the pass commits. An instance with
 * deferred events (steward.deferred) is no candidate: an event that may
 * meet the deadline has been read but not judged yet. Columns 18 and 19
 * count the commands of the current step queued and delivered, so the
 * words of a missed step say what reached the broker.
 */
static const char due_sql[] =
    "WITH due AS MATERIALIZED ("
    "  SELECT key, version, state, "
    "    steward.to_ms(started_at) AS started, "
    "    steward.to_ms(state_entered_at) AS entered, "
    "    steward.to_ms(deadline_at) AS deadline, "
    "    steward.to_ms(process_deadline_at) AS process_deadline, "
    "    overdue, process_overdue, attempt, vars::text AS vars, step, token, "
    "    lease_holder, steward.to_ms(lease_expires_at) AS lease_expires, "
    "    steward.to_ms(lease_renewed_at) AS lease_renewed, resend_pending, next_deadline_at "
    "  FROM steward.instances "
    "  WHERE status = 'active' AND next_deadline_at IS NOT NULL "
    "    AND next_deadline_at <= steward.from_ms($2) AND process = $1 "
    "    AND NOT EXISTS (SELECT 1 FROM steward.deferred d "
    "      WHERE d.process = $1 AND d.key = instances.key) "
    "  ORDER BY next_deadline_at LIMIT $3 FOR UPDATE SKIP LOCKED) "
    "SELECT key, version, state, started, entered, deadline, process_deadline, overdue, "
    "  process_overdue, attempt, vars, step, token, lease_holder, lease_expires, "
    "  lease_renewed, resend_pending, "
    "  steward.try_lock_instance($1, key), c.queued, c.delivered "
    "FROM due LEFT JOIN LATERAL (SELECT count(*) AS queued, "
    "    count(*) FILTER (WHERE sent_at IS NOT NULL) AS delivered "
    "  FROM steward.commands WHERE process = $1 AND key = due.key AND step = due.step) c "
    "  ON true "
    "ORDER BY next_deadline_at";

/* What the engine changed: the overdue marks, and in active mode the step
 * it moved to (on_timeout), the attempt, the token and the lease. */
static const char mark_sql[] =
    "UPDATE steward.instances i SET overdue = u.o, process_overdue = u.po, "
    "  next_deadline_at = steward.from_ms(u.n), state = u.s, status = u.st, "
    "  state_entered_at = steward.from_ms(u.se), deadline_at = steward.from_ms(u.dl), "
    "  attempt = u.a, step = u.sp, token = u.tk, lease_holder = u.lh, "
    "  lease_expires_at = steward.from_ms(u.le), lease_renewed_at = steward.from_ms(u.lr), "
    "  resend_pending = u.rp, updated_at = now() "
    "FROM unnest($2::text[], $3::bool[], $4::bool[], $5::bigint[], $6::text[], $7::text[], "
    "  $8::bigint[], $9::bigint[], $10::int[], $11::int[], $12::bigint[], $13::text[], "
    "  $14::bigint[], $15::bigint[], $16::bool[]) "
    "  AS u(k, o, po, n, s, st, se, dl, a, sp, tk, lh, le, lr, rp) "
    "WHERE i.process = $1 AND i.key = u.k";

/* The judgements a due time makes in active mode and for leases, in
 * history beside the events'. They have no event: the id names the
 * decision (so a replay of the pass cannot record it twice under another
 * id), the type says which clock ran out, and the time is the deadline. */
static const char history_sql[] =
    "INSERT INTO steward.history (process, key, version, event_id, event_type, topic, "
    "  partition, \"offset\", event_time, from_state, to_state, outcome, detail, replica, "
    "  epoch, entered_at) "
    "SELECT $1, k, v, e, t, '', -1, -1, steward.from_ms(et), fs, ts, oc, d, $2, 0, "
    "  steward.from_ms(en) "
    "FROM unnest($3::text[], $4::int[], $5::text[], $6::text[], $7::bigint[], $8::text[], "
    "  $9::text[], $10::text[], $11::text[], $12::bigint[]) WITH ORDINALITY "
    "  AS u(k, v, e, t, et, fs, ts, oc, d, en, n) ORDER BY n";

/* A state left on timeout, for steward_step_duration_seconds once the
 * pass commits: the state's name is borrowed from the definition. */
typedef struct due_stay {
    const char *state;
    int64_t ms;
} due_stay_t;

typedef struct due_history {
    pgarr_t key, version, id, type, time, from, to, outcome, detail, entered;
    size_t n;
    long long counts[ENGINE_N_OUTCOMES];
    due_stay_t *stays;
    size_t n_stays, cap_stays;
} due_history_t;

static void due_history_add(due_history_t *h, const def_t *def, const char *key,
                            const engine_instance_t *inst, const engine_due_action_t *a,
                            engine_outcome_t outcome)
{
    char id[128];
    snprintf(id, sizeof id, "steward:%s:%d:%d:%" PRId64, engine_outcome_name(outcome), inst->step,
             inst->attempt, a->deadline_ms);
    pgarr_add(&h->key, key);
    pgarr_add_int(&h->version, def->version);
    pgarr_add(&h->id, id);
    pgarr_add(&h->type, outcome == ENGINE_HANDED_OFF || outcome == ENGINE_LEASE_EXPIRED
                            ? "(lease)"
                            : "(deadline)");
    pgarr_add_int(&h->time, a->deadline_ms);
    pgarr_add(&h->from, def->states[a->from_state].name);
    pgarr_add(&h->to, def->states[a->to_state].name);
    pgarr_add(&h->outcome, engine_outcome_name(outcome));
    pgarr_add(&h->detail, a->detail[0] ? a->detail : NULL);
    if (outcome == ENGINE_TIMEOUT)
        pgarr_add_int(&h->entered, inst->state_entered_ms);
    else
        pgarr_add(&h->entered, NULL);
    h->n++;
    h->counts[outcome]++;
    if (outcome != ENGINE_TIMEOUT)
        return;
    /* on_timeout left the state as an event would have, at the deadline:
     * a stay like any other (one not recorded for want of memory goes
     * unobserved, never wrong). */
    if (h->n_stays == h->cap_stays) {
        size_t cap = h->cap_stays > 0 ? h->cap_stays * 2 : 16;
        due_stay_t *grown = realloc(h->stays, cap * sizeof *grown);
        if (grown == NULL)
            return;
        h->stays = grown;
        h->cap_stays = cap;
    }
    h->stays[h->n_stays++] = (due_stay_t){def->states[a->from_state].name,
                                          engine_time_in_state(a->since_ms, a->deadline_ms)};
}

static void due_history_clear(due_history_t *h)
{
    pgarr_t *all[] = {&h->key,  &h->version, &h->id,      &h->type,   &h->time,
                      &h->from, &h->to,      &h->outcome, &h->detail, &h->entered};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        pgarr_free(all[i]);
    free(h->stays);
}

/* Opens the alert of one due deadline, as the engine words it. */
static void alert_deadline(alert_batch_t *alerts, const def_t *def, const char *key,
                           const engine_instance_t *inst, const engine_due_action_t *action)
{
    engine_alert_text_t text;
    json_t *details = engine_due_alert(def, key, inst, action, &text);
    alert_batch_open(alerts,
                     action->kind == ENGINE_DUE_PROCESS_DEADLINE ? ALERT_PROCESS_DEADLINE
                     : action->kind == ENGINE_DUE_LEASE_EXPIRED  ? ALERT_LEASE_EXPIRED
                                                                 : ALERT_DEADLINE,
                     def->process, key, text.state, text.owner, text.summary, details,
                     text.identity != NULL ? text.identity : text.summary, action->deadline_ms);
    engine_alert_text_clear(&text);
    json_decref(details);
}

static const char suspend_sql[] =
    "UPDATE steward.instances i SET next_deadline_at = NULL, suspended = u.r, updated_at = now() "
    "FROM unnest($2::text[], $3::text[]) AS u(k, r) "
    "WHERE i.process = $1 AND i.key = u.k";

/*
 * Queues the one alert for the instances of (process, version) set aside
 * because of `why`; its dedup key names the version, so later passes and
 * other replicas add none.
 */
static void alert_unloadable(sched_t *s, alert_batch_t *alerts, const char *process, int version,
                             const char *why)
{
    char summary[1024], dedup[512];
    snprintf(summary, sizeof summary,
             "steward cannot judge instances of %s on version %d: %s; they are set aside "
             "(steward.instances.suspended) and their deadlines are not watched",
             process, version, why);
    snprintf(dedup, sizeof dedup, "steward:unloadable:%s:%d", process, version);
    json_t *details =
        json_pack("{s:s, s:i, s:s}", "process", process, "version", version, "reason", why);
    alert_batch_open(alerts, ALERT_UNLOADABLE, process, NULL, NULL, s->blind_owner, summary,
                     details, dedup, -1);
    json_decref(details);
}

/*
 * Judges up to SCHED_DUE_BATCH due instances of one process in one
 * transaction. Returns how many candidates the due scan found in *n, and
 * how many of them this transaction judged or set aside in *done (the
 * others were locked by a batch). An instance that cannot be judged is set
 * aside in the same transaction, so every row done leaves the scan: the
 * next batch never finds the same rows again.
 */
static err_class_t judge_batch(sched_t *s, due_worker_t *w, const char *process,
                               int64_t watermark_ms, sched_stats_t *stats, int *n, int *done,
                               char *errstr, size_t errstr_size)
{
    char judge_text[24], limit[16];
    int64_t judge_ms = engine_due_bound(watermark_ms, s->grace_ms);
    const char *params[3] = {process, judge_text, limit};
    pgarr_t keys = {0}, overdue = {0}, poverdue = {0}, next = {0}, aside = {0}, reasons = {0};
    pgarr_t states = {0}, statuses = {0}, entered = {0}, deadlines = {0}, attempts = {0},
            steps = {0}, tokens = {0}, holders = {0}, lease_ends = {0}, renewed = {0},
            resends = {0};
    due_history_t history = {0};
    cmdq_t commands = {0};
    int alerted[8];
    size_t n_alerted = 0;
    alert_batch_t alerts = {0};
    err_class_t cls;
    PGresult *res = NULL;

    *n = 0;
    *done = 0;
    snprintf(judge_text, sizeof judge_text, "%" PRId64, judge_ms);
    snprintf(limit, sizeof limit, "%d", SCHED_DUE_BATCH);
    if ((cls = db_exec(w->conn, "starting a deadline pass", "BEGIN", 0, NULL, errstr,
                       errstr_size)) != ERR_OK)
        return cls;
    if ((res = db_query(w->conn, "finding due deadlines", due_sql, 3, params, &cls, errstr,
                        errstr_size)) == NULL)
        goto fail;
    *n = PQntuples(res);
    for (int row = 0; row < *n; row++) {
        const char *key = PQgetvalue(res, row, 0);
        if (strcmp(PQgetvalue(res, row, 17), "t") != 0) {
            stats->busy++; /* a batch holds it: not ours to read or write now */
            continue;
        }
        ++*done;
        int version = atoi(PQgetvalue(res, row, 1));
        const char *why = NULL;
        char reason[512];
        pthread_mutex_lock(&s->versions_lock);
        const def_t *def = defcache_find(s->versions, w->conn, process, version, &why);
        pthread_mutex_unlock(&s->versions_lock);
        if (def == NULL && why == NULL) {
            cls = err_set(ERR_TRANSIENT, errstr, errstr_size,
                          "reading version %d of %s from steward.definitions: %s", version, process,
                          PQerrorMessage(w->conn));
            goto fail;
        }
        long state = def != NULL ? def_find_state(def, PQgetvalue(res, row, 2)) : -1;
        if (def != NULL && state < 0) {
            snprintf(reason, sizeof reason, "state '%s' is not declared by version %d of %s",
                     PQgetvalue(res, row, 2), version, process);
            why = reason;
        }
        if (why != NULL) {
            pgarr_add(&aside, key);
            pgarr_add(&reasons, why);
            bool known = false;
            for (size_t i = 0; i < n_alerted && !known; i++)
                known = alerted[i] == version;
            if (!known) {
                alert_unloadable(s, &alerts, process, version, why);
                if (n_alerted < sizeof alerted / sizeof alerted[0])
                    alerted[n_alerted++] = version;
                LOG_WARN("instances set aside: their definition cannot be judged", "process",
                         process, "version", PQgetvalue(res, row, 1), "reason", why);
            }
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
        inst.version = version;
        inst.attempt = atoi(PQgetvalue(res, row, 9));
        inst.vars = json_loads(PQgetvalue(res, row, 10), 0, NULL);
        inst.step = atoi(PQgetvalue(res, row, 11));
        inst.token = strtoll(PQgetvalue(res, row, 12), NULL, 10);
        inst.lease_holder = PQgetisnull(res, row, 13) ? NULL : strdup(PQgetvalue(res, row, 13));
        inst.lease_expires_ms = ms_column(res, row, 14);
        inst.lease_renewed_ms = ms_column(res, row, 15);
        inst.resend_pending = strcmp(PQgetvalue(res, row, 16), "t") == 0;
        /* What the step's page says was queued and delivered, not what the
         * engine decided: a command the dispatcher never got out is told. */
        inst.sends_queued = atoi(PQgetvalue(res, row, 18));
        inst.sends_delivered = atoi(PQgetvalue(res, row, 19));
        inst.sends_paused = s->paused != NULL && gen_pause_holds(s->paused, process);

        /* The SQL picked candidates by next_deadline_at; the engine decides,
         * and what it decides is written in this transaction: the history
         * rows, the commands to (re-)send, the alerts, the instance. */
        engine_due_t due = engine_judge_due(def, &inst, watermark_ms, s->grace_ms, clock_wall_ms());
        for (size_t i = 0; i < due.n; i++) {
            const engine_due_action_t *a = &due.actions[i];
            switch (a->kind) {
            case ENGINE_DUE_DEADLINE:
            case ENGINE_DUE_PROCESS_DEADLINE:
                alert_deadline(&alerts, def, key, &inst, a);
                break;
            case ENGINE_DUE_LEASE_EXPIRED:
                alert_deadline(&alerts, def, key, &inst, a);
                due_history_add(&history, def, key, &inst, a, ENGINE_LEASE_EXPIRED);
                break;
            case ENGINE_DUE_RESEND:
                due_history_add(&history, def, key, &inst, a, ENGINE_RETRIED);
                break;
            case ENGINE_DUE_HANDOFF:
                FAILPOINT("scheduler.handoff");
                due_history_add(&history, def, key, &inst, a, ENGINE_HANDED_OFF);
                break;
            case ENGINE_DUE_TIMEOUT:
                due_history_add(&history, def, key, &inst, a, ENGINE_TIMEOUT);
                cmdq_left(&commands, process, key);
                if (def->states[a->to_state].terminal != NULL) {
                    /* on_timeout ended the instance: what was open about it is over. */
                    char text[256];
                    snprintf(text, sizeof text, "the instance finished in %s (%s) on timeout",
                             def->states[a->to_state].name, def->states[a->to_state].terminal);
                    alert_batch_resolve(&alerts, ALERT_PROCESS_DEADLINE, process, key, NULL, text);
                    alert_batch_resolve(&alerts, ALERT_SEQUENCE, process, key, NULL, text);
                }
                break;
            default:
                break;
            }
            if (a->command.send)
                cmdq_add(&commands, &alerts, def, key, inst.vars, &a->command);
        }
        int64_t next_ms = due.next_ms;
        pgarr_add(&states, def->states[inst.state].name);
        pgarr_add(&statuses, engine_status(def, inst.state));
        pgarr_add_int(&entered, inst.state_entered_ms);
        if (inst.deadline_ms == ENGINE_NO_DEADLINE)
            pgarr_add(&deadlines, NULL);
        else
            pgarr_add_int(&deadlines, inst.deadline_ms);
        pgarr_add_int(&attempts, inst.attempt);
        pgarr_add_int(&steps, inst.step);
        pgarr_add_int(&tokens, inst.token);
        pgarr_add(&holders, inst.lease_holder);
        if (inst.lease_expires_ms == ENGINE_NO_DEADLINE)
            pgarr_add(&lease_ends, NULL);
        else
            pgarr_add_int(&lease_ends, inst.lease_expires_ms);
        if (inst.lease_renewed_ms == ENGINE_NO_DEADLINE)
            pgarr_add(&renewed, NULL);
        else
            pgarr_add_int(&renewed, inst.lease_renewed_ms);
        pgarr_add_bool(&resends, inst.resend_pending);
        pgarr_add(&keys, key);
        pgarr_add_bool(&overdue, inst.overdue);
        pgarr_add_bool(&poverdue, inst.process_overdue);
        if (next_ms == ENGINE_NO_DEADLINE)
            pgarr_add(&next, NULL);
        else
            pgarr_add_int(&next, next_ms);
        engine_instance_clear(&inst);
        stats->judged++;
    }
    PQclear(res);
    res = NULL;
    if (*n > 0) /* passes that find nothing due are no test */
        FAILPOINT("scheduler.after_judge");

    if (keys.n > 0) {
        pgarr_t *cols[] = {&keys,     &overdue, &poverdue,   &next,     &states,
                           &statuses, &entered, &deadlines,  &attempts, &steps,
                           &tokens,   &holders, &lease_ends, &renewed,  &resends};
        const char *mark[16] = {process};
        if (!pgarr_params(cols, 15, mark + 1)) {
            cls = err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
            goto fail;
        }
        if ((cls = db_exec(w->conn, "marking overdue instances", mark_sql, 16, mark, errstr,
                           errstr_size)) != ERR_OK)
            goto fail;
    }
    if (history.n > 0) {
        pgarr_t *cols[] = {&history.key,    &history.version, &history.id, &history.type,
                           &history.time,   &history.from,    &history.to, &history.outcome,
                           &history.detail, &history.entered};
        const char *params_h[12] = {process, s->replica != NULL ? s->replica : "scheduler"};
        if (!pgarr_params(cols, 10, params_h + 2)) {
            cls = err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
            goto fail;
        }
        if ((cls = db_exec(w->conn, "recording retries, timeouts and leases", history_sql, 12,
                           params_h, errstr, errstr_size)) != ERR_OK)
            goto fail;
    }
    if ((cls = cmdq_write(w->conn, &commands, errstr, errstr_size)) != ERR_OK)
        goto fail;
    if (aside.n > 0) {
        /* An array that ran out of memory must not reach the statement as
         * NULL: unnest(NULL) is no rows, and the write would silently do
         * nothing. */
        const char *set[3] = {process};
        if (!pgarr_params((pgarr_t *const[]){&aside, &reasons}, 2, set + 1)) {
            cls = err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
            goto fail;
        }
        if ((cls = db_exec(w->conn, "setting aside instances that cannot be judged", suspend_sql, 3,
                           set, errstr, errstr_size)) != ERR_OK)
            goto fail;
        stats->set_aside += aside.n;
    }
    alert_counts_t counts = {0};
    if (!alert_batch_empty(&alerts) &&
        (cls = alert_batch_write(w->conn, &alerts, s->routes, &counts, errstr, errstr_size)) !=
            ERR_OK)
        goto fail;
    if ((*n > 0 &&
         (cls = FAILPOINT_ERROR("scheduler.before_commit", errstr, errstr_size)) != ERR_OK) ||
        (cls = db_exec(w->conn, "committing a deadline pass", "COMMIT", 0, NULL, errstr,
                       errstr_size)) != ERR_OK)
        goto fail;
    if (*n > 0)
        FAILPOINT("scheduler.after_commit");
    stats->opened += counts.opened;
    metrics_add(&metrics.alerts_opened, (long long) counts.opened);
    for (size_t i = 0; i < ENGINE_N_OUTCOMES; i++)
        metrics_add(&metrics.outcomes[i], history.counts[i]);
    for (size_t i = 0; i < history.n_stays; i++)
        metrics_observe_step(process, history.stays[i].state, history.stays[i].ms);
    goto done;

fail:
    db_rollback(w->conn);
done:
    PQclear(res);
    {
        pgarr_t *more[] = {&states, &statuses, &entered,    &deadlines, &attempts, &steps,
                           &tokens, &holders,  &lease_ends, &renewed,   &resends};
        for (size_t i = 0; i < sizeof more / sizeof more[0]; i++)
            pgarr_free(more[i]);
    }
    due_history_clear(&history);
    cmdq_clear(&commands);
    pgarr_free(&keys);
    pgarr_free(&overdue);
    pgarr_free(&poverdue);
    pgarr_free(&next);
    pgarr_free(&aside);
    pgarr_free(&reasons);
    alert_batch_clear(&alerts);
    return cls;
}

/* ---- reorder windows ------------------------------------------------------ */

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
static err_class_t expire_parked(sched_t *s, sched_stats_t *stats, char *errstr, size_t errstr_size)
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
        engine_result_t r =
            engine_judge_parked(type, state, ms_column(res, row, 5), ms_column(res, row, 6));
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

/* Marks `cause` on every watched process that reads `topic` (all topics:
 * NULL), the first wording a process gets kept as its detail. */
static void watch_mark(sched_t *s, metrics_watch_t *procs, size_t n_procs, const char *topic,
                       metrics_watch_cause_t cause, const char *detail)
{
    for (size_t i = 0; i < s->watch.n; i++) {
        const engine_watch_topic_t *t = &s->watch.items[i];
        if (topic != NULL && strcmp(t->topic, topic) != 0)
            continue;
        for (size_t p = 0; p < n_procs; p++) {
            if (strcmp(procs[p].process, t->process) != 0)
                continue;
            procs[p].cause[cause] = true;
            if (procs[p].detail[0] == '\0')
                snprintf(procs[p].detail, sizeof procs[p].detail, "%s", detail);
        }
    }
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
static err_class_t check_blind(sched_t *s, metrics_watch_t *procs, size_t n_procs,
                               sched_stats_t *stats, char *errstr, size_t errstr_size)
{
    pgarr_t topics = {0};
    char after[24], unowned_after[24], dedup[300], summary[1024];
    err_class_t cls;
    alert_batch_t alerts = {0};
    json_t *behind = json_array();
    PGresult *res = NULL;

    watched_topics(&s->watch, &topics);
    snprintf(after, sizeof after, "%" PRId64, s->blind_after_ms);
    snprintf(unowned_after, sizeof unowned_after, "%" PRId64, s->unowned_after_ms);
    snprintf(dedup, sizeof dedup, "steward:blind:%s", s->group);
    const char *params[4] = {s->group, pgarr_text(&topics), after,
                             s->unowned_after_ms > 0 ? unowned_after : NULL};
    if (params[1] == NULL || behind == NULL) {
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
    size_t len = 0;
    int listed = 0;
    summary[0] = '\0';
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
                duration_format(strtoll(PQgetvalue(res, row, 7), NULL, 10), still, sizeof still);
                snprintf(part, sizeof part,
                         "%s[%s] is read but its watermark is frozen at %s for %s "
                         "(message times do not advance)",
                         topic, PQgetvalue(res, row, 1), PQgetvalue(res, row, 8), still);
                cause = METRICS_WATCH_FROZEN;
            } else {
                if (unread_ms < s->blind_after_ms && !(unowned && owners_settled))
                    continue;
                duration_format(unread_ms, unread, sizeof unread);
                if (PQgetisnull(res, row, 4))
                    snprintf(lag, sizeof lag, "never read");
                else
                    duration_format(strtoll(PQgetvalue(res, row, 4), NULL, 10), lag, sizeof lag);
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
        json_array_append_new(behind, json_string(part));
        if (listed++ < 5)
            len += (size_t) snprintf(summary + len, len < sizeof summary ? sizeof summary - len : 0,
                                     "%s%s", listed > 1 ? ", " : "", part);
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
        for (size_t p = 0; p < n_procs; p++) {
            if (strcmp(procs[p].process, t->process) != 0)
                continue;
            procs[p].cause[METRICS_WATCH_OLD_VERSION] = true;
            if (procs[p].detail[0] == '\0')
                snprintf(procs[p].detail, sizeof procs[p].detail, "%s", part);
        }
        json_array_append_new(behind, json_string(part));
        if (listed++ < 5)
            len += (size_t) snprintf(summary + len, len < sizeof summary ? sizeof summary - len : 0,
                                     "%s%s", listed > 1 ? ", " : "", part);
    }

    if (json_array_size(behind) > 0) {
        char text[1400];
        snprintf(text, sizeof text,
                 "steward group %s is blind: %s%s; deadlines wait until it reads again", s->group,
                 summary, listed > 5 ? ", ..." : "");
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
        json_t *details = json_pack("{s:s, s:O, s:o}", "group", s->group, "partitions", behind,
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
    json_decref(behind);
    alert_batch_clear(&alerts);
    return cls;
}

/* This replica is alive: stamps steward.replicas, and forgets replicas
 * unseen for a day (the table keeps one row per replica name). */
static err_class_t heartbeat(sched_t *s, char *errstr, size_t errstr_size)
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
static err_class_t mark_current(sched_t *s, char *errstr, size_t errstr_size)
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

/* One worker's share of a process's due instances: batches until one
 * comes back short. Worker 0 also keeps the replica's heartbeat. */
typedef struct due_run {
    sched_t *s;
    due_worker_t *w;
    bool beats;
    const char *process;
    int64_t watermark_ms;
    sched_stats_t stats;
    err_class_t cls;
    char errstr[512];
} due_run_t;

/* One batch of r's share; whether another may find more due. */
static bool due_step(due_run_t *r)
{
    int n, done;
    r->cls = judge_batch(r->s, r->w, r->process, r->watermark_ms, &r->stats, &n, &done, r->errstr,
                         sizeof r->errstr);
    /* A long pass must not look like a dead replica to the others. */
    if (r->cls == ERR_OK && r->beats && clock_wall_ms() - r->s->beat_ms >= 1000)
        r->cls = heartbeat(r->s, r->errstr, sizeof r->errstr);
    /* A full batch may leave more due; one where nothing was done (every
     * candidate locked by batches) would find the same rows again: they
     * wait for the next pass. */
    return r->cls == ERR_OK && n == SCHED_DUE_BATCH && done > 0 && !stopping(r->s);
}

static void *due_run_main(void *arg)
{
    while (due_step(arg))
        ;
    return NULL;
}

static void add_stats(sched_stats_t *to, const sched_stats_t *from)
{
    to->judged += from->judged;
    to->opened += from->opened;
    to->busy += from->busy;
    to->set_aside += from->set_aside;
}

/*
 * Judges a process's due instances at `watermark_ms`: worker 0 on this
 * thread first, alone; only when its first batch comes back full are the
 * others started, on threads of their own, each on its connection (opened
 * on first use, and again after it broke). Most passes find less than a
 * batch due, and the others would only scan for it again. The first
 * failure's outcome; the others' work commits or not on its own.
 */
static err_class_t judge_process(sched_t *s, const char *process, int64_t watermark_ms,
                                 sched_stats_t *stats, char *errstr, size_t errstr_size)
{
    due_run_t runs[SCHED_MAX_TRANSACTIONS];
    pthread_t threads[SCHED_MAX_TRANSACTIONS];
    bool started[SCHED_MAX_TRANSACTIONS] = {false};
    due_worker_t own = {s->conn};

    runs[0] = (due_run_t){
        .s = s, .w = &own, .beats = true, .process = process, .watermark_ms = watermark_ms};
    bool more = due_step(&runs[0]);
    for (size_t i = 1; more && i < s->n_workers; i++) {
        due_worker_t *w = &s->extra[i];
        runs[i] = (due_run_t){.s = s, .w = w, .process = process, .watermark_ms = watermark_ms};
        if (w->conn != NULL && PQstatus(w->conn) != CONNECTION_OK) {
            PQfinish(w->conn);
            w->conn = NULL;
        }
        if (w->conn == NULL &&
            (w->conn = db_connect(s->conninfo, "steward scheduler", runs[i].errstr,
                                  sizeof runs[i].errstr)) == NULL)
            continue; /* this pass runs on fewer: the others still judge every due row */
        started[i] = pthread_create(&threads[i], NULL, due_run_main, &runs[i]) == 0;
    }
    if (more)
        due_run_main(&runs[0]);
    err_class_t cls = runs[0].cls;
    if (cls != ERR_OK)
        snprintf(errstr, errstr_size, "%s", runs[0].errstr);
    add_stats(stats, &runs[0].stats);
    for (size_t i = 1; i < s->n_workers; i++) {
        if (!started[i])
            continue;
        pthread_join(threads[i], NULL);
        add_stats(stats, &runs[i].stats);
        if (runs[i].cls != ERR_OK && cls == ERR_OK)
            cls = err_set(runs[i].cls, errstr, errstr_size, "%s", runs[i].errstr);
    }
    return cls;
}

/*
 * The topics this pass watches, as s->watch and the two array literals
 * topic_watermarks() takes. Under versions_lock: the due workers of the
 * last pass are done, but the cache is theirs too.
 */
static err_class_t watch_topics(sched_t *s, char *errstr, size_t errstr_size)
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

err_class_t sched_tick(sched_t *s, sched_stats_t *stats, char *errstr, size_t errstr_size)
{
    err_class_t cls;
    metrics_watch_t *procs = NULL;
    size_t n_procs = 0;

    memset(stats, 0, sizeof *stats);
    if (PQstatus(s->conn) != CONNECTION_OK) {
        PQfinish(s->conn);
        if ((s->conn = db_connect(s->conninfo, "steward scheduler", errstr, errstr_size)) == NULL)
            return ERR_TRANSIENT;
    }
    if ((cls = heartbeat(s, errstr, errstr_size)) != ERR_OK)
        return cls;
    if (s->mark_current) {
        if ((cls = mark_current(s, errstr, errstr_size)) != ERR_OK)
            return cls;
        s->mark_current = false;
    }
    if ((cls = watch_topics(s, errstr, errstr_size)) != ERR_OK)
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
    for (int row = 0; row < PQntuples(res) && cls == ERR_OK && !stopping(s); row++) {
        if (PQgetisnull(res, row, 1))
            continue; /* no watermark: nothing can be judged; check_blind says why */
        int64_t watermark = engine_judge_time(strtoll(PQgetvalue(res, row, 1), NULL, 10), now);
        if (s->until_ms > 0 && watermark > s->until_ms)
            watermark = s->until_ms;
        cls = judge_process(s, PQgetvalue(res, row, 0), watermark, stats, errstr, errstr_size);
    }
    PQclear(res);
    if (cls != ERR_OK || stopping(s)) {
        free(procs);
        return cls;
    }
    /* A failed expiry must not stop blind detection: the pass goes on to
     * check every partition, and the failure is logged and returned after. */
    char expiry_err[512] = "";
    err_class_t expiry = expire_parked(s, stats, expiry_err, sizeof expiry_err);
    if (expiry != ERR_OK)
        LOG_LIMITED(LOG_LEVEL_WARN, "sched-expiry", 10000,
                    "parked-event expiry failed; checking the partitions anyway", "error",
                    expiry_err, "class", err_class_name(expiry));
    if (!stopping(s)) {
        cls = check_blind(s, procs, n_procs, stats, errstr, errstr_size);
        if (cls == ERR_OK) {
            /* A process without a watermark whose topics all look read is
             * still blind: say so rather than show it healthy. */
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
