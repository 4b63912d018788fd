/*
 * scheduler_due - the due pass of the scheduler (scheduler.h): every due
 * deadline of a process, judged by the engine against the watermark, and
 * what each judgement writes in the transaction that found it: the overdue
 * marks and the alerts; in active mode the re-sends, on_timeout and lease
 * hand-offs, in history beside the events'; the instances that cannot be
 * judged, set aside. A pass runs on up to n_workers connections at once,
 * each taking the rows the others have not locked.
 */
#include "manager/timing/scheduler_int.h"

#include "common/clock.h"
#include "common/failpoint.h"
#include "common/log.h"
#include "common/pgarr.h"
#include "manager/alerting/alerts.h"
#include "manager/commands/cmdqueue.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* A time of the instance's row: SQL NULL for ENGINE_NO_DEADLINE. */
static void add_ms(pgarr_t *column, int64_t ms)
{
    if (ms == ENGINE_NO_DEADLINE)
        pgarr_add(column, NULL);
    else
        pgarr_add_int(column, ms);
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
    /* The columns of mark_sql, $2 on, in order. */
    pgarr_t *const marks[] = {&keys,     &overdue, &poverdue,   &next,     &states,
                              &statuses, &entered, &deadlines,  &attempts, &steps,
                              &tokens,   &holders, &lease_ends, &renewed,  &resends};
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
        inst.started_ms = sched_ms_column(res, row, 3);
        inst.state_entered_ms = sched_ms_column(res, row, 4);
        inst.deadline_ms = sched_ms_column(res, row, 5);
        inst.process_deadline_ms = sched_ms_column(res, row, 6);
        inst.overdue = strcmp(PQgetvalue(res, row, 7), "t") == 0;
        inst.process_overdue = strcmp(PQgetvalue(res, row, 8), "t") == 0;
        inst.version = version;
        inst.attempt = atoi(PQgetvalue(res, row, 9));
        inst.vars = json_loads(PQgetvalue(res, row, 10), 0, NULL);
        inst.step = atoi(PQgetvalue(res, row, 11));
        inst.token = strtoll(PQgetvalue(res, row, 12), NULL, 10);
        inst.lease_holder = PQgetisnull(res, row, 13) ? NULL : strdup(PQgetvalue(res, row, 13));
        inst.lease_expires_ms = sched_ms_column(res, row, 14);
        inst.lease_renewed_ms = sched_ms_column(res, row, 15);
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
                cmdq_add(&commands, &alerts, def, key, inst.vars, &a->command,
                         &(cmdq_trace_t){.inherit = true});
        }
        int64_t next_ms = due.next_ms;
        pgarr_add(&states, def->states[inst.state].name);
        pgarr_add(&statuses, engine_status(def, inst.state));
        pgarr_add_int(&entered, inst.state_entered_ms);
        add_ms(&deadlines, inst.deadline_ms);
        pgarr_add_int(&attempts, inst.attempt);
        pgarr_add_int(&steps, inst.step);
        pgarr_add_int(&tokens, inst.token);
        pgarr_add(&holders, inst.lease_holder);
        add_ms(&lease_ends, inst.lease_expires_ms);
        add_ms(&renewed, inst.lease_renewed_ms);
        pgarr_add_bool(&resends, inst.resend_pending);
        pgarr_add(&keys, key);
        pgarr_add_bool(&overdue, inst.overdue);
        pgarr_add_bool(&poverdue, inst.process_overdue);
        add_ms(&next, next_ms);
        engine_instance_clear(&inst);
        stats->judged++;
    }
    PQclear(res);
    res = NULL;
    if (*n > 0) /* passes that find nothing due are no test */
        FAILPOINT("scheduler.after_judge");

    if (keys.n > 0) {
        const char *mark[16] = {process};
        if (!pgarr_params(marks, 15, mark + 1)) {
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
    for (size_t i = 0; i < sizeof marks / sizeof marks[0]; i++)
        pgarr_free(marks[i]);
    due_history_clear(&history);
    cmdq_clear(&commands);
    pgarr_free(&aside);
    pgarr_free(&reasons);
    alert_batch_clear(&alerts);
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
        r->cls = sched_heartbeat(r->s, r->errstr, sizeof r->errstr);
    /* A full batch may leave more due; one where nothing was done (every
     * candidate locked by batches) would find the same rows again: they
     * wait for the next pass. */
    return r->cls == ERR_OK && n == SCHED_DUE_BATCH && done > 0 && !sched_stopping(r->s);
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
err_class_t sched_judge_process(sched_t *s, const char *process, int64_t watermark_ms,
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
        if (sched_connect(s, &w->conn, runs[i].errstr, sizeof runs[i].errstr) != ERR_OK)
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
