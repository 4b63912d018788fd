/*
 * retention - keeps the tables that grow with traffic bounded.
 *
 * Terms:
 *   a week       a history partition: recorded_at from Monday 00:00 UTC to
 *                the next Monday, named history_pYYYYMMDD after its first
 *                day (schema/migrations/0006_bounded_tables.sql).
 *   keep         how long a table's rows are kept, per table (config keys
 *                retention.*); 0 keeps them forever.
 *   the cutoff   now - keep: rows older than it go.
 *   a pass       creates the current and the next RETENTION_AHEAD weeks'
 *                partitions, drops every history partition whose upper
 *                bound is at or before the cutoff, deletes old rows from the
 *                DEFAULT partition, and deletes old rows from rejected,
 *                outbox, alerts, ownership_log, commands and instances in
 *                batches of RETENTION_BATCH rows, one statement each, so no
 *                pass holds a lock for long.
 *   finished     an instance in a terminal state; its age counts from
 *                state_entered_at, when it entered that state.
 *
 * What is never removed: an outbox row not yet delivered or failed, a
 * command not yet sent, an open alert, a resolved alert any outbox row
 * still references, an instance not finished, and a finished one with an
 * open alert or a command neither sent nor cancelled. An instance row a
 * batch or an operator holds is skipped and taken by a later pass.
 *
 * What removing an instance costs: an event for its key is judged as if
 * the key were new (a start event starts it again; another waits in parked
 * and, its reorder window passed, is a violation). retention.instances is
 * therefore off unless set, and is meant to be longer than the topics'
 * Kafka retention and retention.history.
 * `steward run` runs a pass every retention.interval on a thread of its own
 * (retention_thread_main); `steward prune` runs one on demand.
 */
#ifndef STEWARD_RETENTION_H
#define STEWARD_RETENTION_H

#include "common/err.h"

#include <jansson.h>
#include <libpq-fe.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RETENTION_WEEK_MS ((int64_t) 7 * 86400000)
/* Weeks created ahead of the current one. */
#define RETENTION_AHEAD 2
/* Rows per DELETE statement. */
#define RETENTION_BATCH 5000

typedef enum retention_table {
    RETENTION_HISTORY,
    RETENTION_REJECTED,
    RETENTION_OUTBOX,
    RETENTION_ALERTS,
    RETENTION_OWNERSHIP_LOG,
    RETENTION_COMMANDS,  /* sent commands, kept as long as the outbox (retention.outbox) */
    RETENTION_INSTANCES, /* finished instances */
    RETENTION_N_TABLES,
} retention_table_t;

/* The table's name in steward.* and in the config ("ownership_log"). */
const char *retention_table_name(retention_table_t t);

/* How long each table's rows are kept, in ms; 0 keeps them forever. */
typedef struct retention_config {
    int64_t keep_ms[RETENTION_N_TABLES];
} retention_config_t;

/* What one pass removed (or, dry, would remove). */
typedef struct retention_result {
    bool dry_run;
    int64_t now_ms;
    long long rows[RETENTION_N_TABLES]; /* rows removed, history's dropped partitions included */
    char **dropped;                     /* history partitions dropped, "history_p20261102" */
    size_t n_dropped;
    char **created; /* history partitions created */
    size_t n_created;
} retention_result_t;

/* Frees the names a result holds and zeroes it. */
void retention_result_clear(retention_result_t *r);

/* The result as a new JSON object (json_decref() it): docs/operations.md. */
json_t *retention_result_json(const retention_result_t *r, const retention_config_t *cfg);

/*
 * One pass at time now_ms on conn (borrowed, not inside a transaction).
 * Passes of several processes exclude each other with an advisory lock:
 * with `wait` false a pass finding it taken does nothing and sets
 * *skipped. Dry, nothing changes and *out says what would go. Stops
 * between batches once *stop is set (stop may be NULL). On failure what
 * was already removed stays removed, *out counts it, and the class is
 * returned with the reason in errstr. Clear *out with
 * retention_result_clear() in either case.
 */
err_class_t retention_pass(PGconn *conn, const retention_config_t *cfg, int64_t now_ms,
                           bool dry_run, bool wait, volatile sig_atomic_t *stop, bool *skipped,
                           retention_result_t *out, char *errstr, size_t errstr_size);

/* What retention_thread_main() needs; borrowed for the thread's life. */
typedef struct retention_loop {
    const char *database;
    retention_config_t keep;
    int64_t interval_ms; /* retention.interval; 0 runs no pass */
    volatile sig_atomic_t *stop;
} retention_loop_t;

/*
 * A thread's body (pthread_create(..., retention_thread_main, loop)): a pass
 * at once, then every retention.interval, on its own connection, until
 * *loop->stop is set; checks the flag every 100 ms. Logs what each pass
 * removed and what failed, and goes on. Returns NULL.
 */
void *retention_thread_main(void *loop);

/*
 * The pure parts, public for the unit tests.
 */

/* A partition of steward.history as the catalog gives it. */
typedef struct retention_partition {
    char name[64];
    bool is_default;
    bool has_lower, has_upper; /* false: MINVALUE / MAXVALUE */
    int64_t lower_ms, upper_ms;
} retention_partition_t;

/* The start of the week holding t_ms: Monday 00:00 UTC, as ms. */
int64_t retention_week_start(int64_t t_ms);

/* "history_p20261130" for the week starting at start_ms. Returns buf. */
char *retention_week_name(int64_t start_ms, char *buf, size_t buf_size);

/* True when p is a range partition whose every row is older than
 * now_ms - keep_ms (its upper bound is at or before it); never for the
 * DEFAULT partition or with keep_ms 0. */
bool retention_partition_expired(const retention_partition_t *p, int64_t now_ms, int64_t keep_ms);

/*
 * The weeks to create at now_ms: the current one and RETENTION_AHEAD after
 * it, less those any existing range partition overlaps. Writes their
 * starts to starts[] (room for RETENTION_AHEAD + 1) and returns how many.
 */
size_t retention_weeks_to_create(const retention_partition_t *parts, size_t n, int64_t now_ms,
                                 int64_t *starts);

#endif
