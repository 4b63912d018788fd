/*
 * scheduler - judges deadlines, and says when intake cannot see.
 *
 * Every non-terminal state has a deadline running from the moment the
 * instance entered it, and a process may have one from start to finish.
 * Each instance row carries its next deadline still to be judged; the
 * scheduler finds due ones through a partial index, FOR UPDATE SKIP LOCKED
 * (replicas share the work; none judges an instance twice), and judges
 * them in the same transaction that marks them. It changes an instance
 * only while holding the instance's advisory lock (the one intake batches
 * and operator actions take, steward.try_lock_instance()), which it tries
 * and never awaits: an instance a batch holds is left for a later pass.
 *
 * "Due" is measured against the watermark, not the wall clock: a deadline
 * is judged only once intake has read every partition that could still
 * bring the awaited event up to the deadline's time (see
 * steward.topic_watermarks). A consumer catching up on a backlog
 * therefore raises no false alerts. If intake stops advancing a partition
 * for longer than blind_after, one `blind` alert says which, and resolves
 * when intake reads again. The same alert names a partition that has had
 * no live owner for unowned_after: each replica's scheduler stamps
 * steward.replicas every pass, so a replica that died before the group
 * noticed leaves partitions owned by a name no one has seen.
 *
 * An instance the scheduler cannot judge (its definition version does not
 * load, or its state is not in that version) is set aside: taken out of
 * the due scan with the reason in steward.instances.suspended, and one
 * `blind` alert per process and version names the version and the reason;
 * it resolves once no such instance is left open.
 *
 * Deadlines wait for the watermark of the topics that matter now: those of
 * the versions a replica loaded and of versions with open instances, by
 * their broker names (engine_watch_topics(), through defcache_watch_topics()),
 * decided here each pass and handed to SQL. The same blind alert watches
 * that watermark: a topic with no partition read (no watermark), a
 * partition read while its watermark stands still for blind_after
 * (frozen), and a topic only a version that is not loaded reads. Each
 * pass publishes each process's watermark and causes (metrics_set_watches())
 * for /metrics and /readyz.
 *
 * Each pass also expires parked events (moved here from the intake thread,
 * whose tick keeps only consumer work): an event parked past its reorder
 * window, against the same watermark, is a sequence violation. The engine
 * judges both (engine_judge_due(), engine_judge_parked()); the SQL here only
 * selects candidates by the times the engine computed and stores verdicts.
 *
 * In shadow mode a missed deadline opens an alert and marks the instance
 * overdue; nothing else changes. One scheduler per process, on its own
 * thread and PostgreSQL connection.
 */
#ifndef STEWARD_SCHEDULER_H
#define STEWARD_SCHEDULER_H

#include "common/err.h"
#include "definitions/def.h"
#include "manager/runtime/generation.h"
#include "manager/sinks/routes.h"

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sched sched_t;

/* The most due instances one transaction of a pass judges. (Not
 * SCHED_BATCH: <sched.h>, which <pthread.h> includes, defines that as a
 * scheduling policy, silently, being a system header.) */
#define SCHED_DUE_BATCH 500
/* The most expired parked events one expiry transaction judges, and so the
 * most instance locks it holds. */
#define SCHED_EXPIRY_BATCH 500
/* Transactions of a due pass in flight at once, by default and at most. */
#define SCHED_DEFAULT_TRANSACTIONS 2
#define SCHED_MAX_TRANSACTIONS     4

typedef struct sched_config {
    const char *conninfo;
    const char *group;   /* whose watermarks count */
    int64_t interval_ms; /* between passes */
    int64_t grace_ms;    /* judged this long after the watermark passes a deadline */
    int64_t blind_after_ms;
    const char *blind_owner;
    int64_t until_ms;         /* a replay's end: deadlines are judged up to it at most; 0 none */
    const char *replica;      /* stamped in steward.replicas each pass; NULL: none */
    int64_t unowned_after_ms; /* a partition without a live owner this long is blind; 0: never */
    /* Transactions judging one process's due instances at once, each on
     * its own connection (1 to SCHED_MAX_TRANSACTIONS; 0: the default). */
    size_t transactions;
} sched_config_t;

typedef struct sched_stats {
    size_t judged;    /* instances whose deadline was judged */
    size_t opened;    /* alerts opened */
    size_t resolved;  /* alerts resolved (blind) */
    size_t set_aside; /* instances taken out of the due scan: not judgeable */
    size_t busy;      /* due instances left for a later pass: a batch held their lock */
    size_t expired;   /* parked events judged violations: their reorder window passed */
    bool blind;       /* some partition is not being read */
} sched_stats_t;

/*
 * Returns a scheduler connected to the database (free with sched_free()),
 * or NULL with the reason in errstr. defs and routes are borrowed and must
 * outlive it (or be replaced with sched_set_definitions() first). The
 * strings in cfg are copied.
 */
sched_t *sched_new(const sched_config_t *cfg, const def_set_t *defs, route_table_t *routes,
                   char *errstr, size_t errstr_size);
void sched_free(sched_t *s); /* NULL is a no-op */

/* Replaces definitions and routes; call from the scheduler's thread, or
 * while it is not running. */
void sched_set_definitions(sched_t *s, const def_set_t *defs, route_table_t *routes);

/* One pass: every due deadline, expired parked events, then the blind check. */
err_class_t sched_tick(sched_t *s, sched_stats_t *stats, char *errstr, size_t errstr_size);

/* Passes every interval until *stop is set (every loop of a pass checks it
 * too, so a pass ends early on stop); reconnects after a lost connection;
 * takes up reloaded definitions and routes from `cur` between passes. Logs
 * what it cannot do and goes on. */
void sched_run(sched_t *s, volatile sig_atomic_t *stop, gen_current_t *cur);

#endif
