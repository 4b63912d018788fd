/*
 * scheduler_int - what the files of the scheduler share; private to
 * manager/timing/ (the interface is scheduler.h).
 *
 * The scheduler is one module, sched_, in four files, one per concern:
 *   scheduler.c         its life (new, free, reloads), one pass in order
 *                       (sched_tick: watermarks, due deadlines, expiry, the
 *                       blind check) and its thread (sched_run)
 *   scheduler_due.c     the due pass: due deadlines judged by the engine and
 *                       what they change (alerts; in active mode re-sends,
 *                       on_timeout and lease hand-offs, in history), the
 *                       instances set aside, the parallel workers
 *   scheduler_expiry.c  parked events whose reorder window passed
 *   scheduler_watch.c   what the watermark counts and whether intake can
 *                       see: the watched topics, the versions marked
 *                       current, the replica's heartbeat, blind and unowned
 *                       partitions, the watermarks published for /metrics
 *
 * Everything here runs on the scheduler's thread, except the due workers'
 * share of a pass (scheduler_due.c), which reads struct sched but writes
 * only their own connection and, under versions_lock, the version cache.
 */
#ifndef STEWARD_SCHEDULER_INT_H
#define STEWARD_SCHEDULER_INT_H

#include "manager/timing/scheduler.h"

#include "common/db.h"
#include "engine/engine.h"
#include "manager/runtime/defcache.h"
#include "manager/runtime/metrics.h"

#include <pthread.h>

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

/* Whether sched_run() was asked to stop: every loop of a pass checks it. */
bool sched_stopping(const sched_t *s);

/* A bigint column of milliseconds; ENGINE_NO_DEADLINE when NULL. */
int64_t sched_ms_column(const PGresult *res, int row, int col);

/* Makes sure *conn is open: a broken one is closed and opened anew. ERR_OK,
 * or ERR_TRANSIENT with the reason in errstr (*conn is then NULL). */
err_class_t sched_connect(const sched_t *s, PGconn **conn, char *errstr, size_t errstr_size);

/* scheduler_due.c: judges every due deadline of `process` at
 * `watermark_ms`, adding to stats; the first failure's class. */
err_class_t sched_judge_process(sched_t *s, const char *process, int64_t watermark_ms,
                                sched_stats_t *stats, char *errstr, size_t errstr_size);

/* scheduler_expiry.c: judges the parked events whose reorder window may
 * have passed; adds to stats->expired and stats->opened. */
err_class_t sched_expire_parked(sched_t *s, sched_stats_t *stats, char *errstr, size_t errstr_size);

/* scheduler_watch.c: stamps steward.replicas (nothing without a replica
 * name). Worker 0 of the due pass calls it too: a long pass must not look
 * like a dead replica. */
err_class_t sched_heartbeat(sched_t *s, char *errstr, size_t errstr_size);

/* scheduler_watch.c: marks the loaded versions current in
 * steward.definitions, and records their topic mapping. */
err_class_t sched_mark_current(sched_t *s, char *errstr, size_t errstr_size);

/* scheduler_watch.c: this pass's watched topics, as s->watch and
 * s->watch_processes / s->watch_topics; recorded in steward.watched_topics
 * when they changed. */
err_class_t sched_watch_topics(sched_t *s, char *errstr, size_t errstr_size);

/* scheduler_watch.c: opens or resolves the group's blind alert, marking
 * each process's causes in procs, and resolves the unloadable alerts of
 * versions with no instance set aside. */
err_class_t sched_check_blind(sched_t *s, metrics_watch_t *procs, size_t n_procs,
                              sched_stats_t *stats, char *errstr, size_t errstr_size);

/* scheduler_watch.c: publishes each process's watermark and causes
 * (metrics_set_watches()) after a blind check that succeeded. */
void sched_publish_watches(metrics_watch_t *procs, size_t n_procs);

#endif
