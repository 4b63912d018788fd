/*
 * store - the SQL of intake: partition ownership, and the statements of
 * the batch transaction.
 *
 * store knows tables and statements, nothing of events or the engine: the
 * batch module (manager/intake/batch.h) decides what a batch reads and writes and
 * in which order, and calls these inside one transaction (store_begin() to
 * store_commit()). Reads hand each row to a callback, its strings borrowed
 * for the call; writes take the rows built with manager/intake/rows.h. Every
 * statement is parameterized; the rows' arrays are parameters too.
 *
 * A store owns one PGconn and is used by one thread.
 */
#ifndef STEWARD_STORE_H
#define STEWARD_STORE_H

#include "common/db.h"
#include "common/err.h"
#include "definitions/def.h"
#include "manager/intake/rows.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct store store_t;

typedef struct store_config {
    const char *conninfo; /* libpq connection string */
    const char *group;    /* the Kafka consumer group: offsets are per group */
    const char *replica;  /* this process's name in history and ownership_log */
} store_config_t;

/*
 * Returns a new store (free with store_free()) connected to the database,
 * or NULL with the reason in errstr. The strings in cfg are copied.
 */
store_t *store_new(const store_config_t *cfg, char *errstr, size_t errstr_size);
void store_free(store_t *store); /* NULL is a no-op */

/* The connection, borrowed: for what other modules write in the batch's
 * transaction (alerts, commands) and for reading recorded versions. */
PGconn *store_conn(store_t *store);
const char *store_replica(const store_t *store);

/* Reconnects after a lost connection; ERR_TRANSIENT while the server is away. */
err_class_t store_reconnect(store_t *store, char *errstr, size_t errstr_size);

/*
 * Records every definition of `defs` in steward.definitions. A version
 * already recorded with a different document is ERR_INVALID: a changed
 * definition needs a new version, since running instances keep theirs.
 */
err_class_t store_register_definitions(store_t *store, const def_set_t *defs, char *errstr,
                                       size_t errstr_size);

/* One partition this replica reads, and how far. */
typedef struct store_partition {
    const char *topic; /* borrowed */
    int32_t partition;
    int64_t epoch;        /* from store_claim() */
    int64_t next_offset;  /* from store_claim(); in a batch, the offset after the last
                             message read, or -1 when unchanged */
    int64_t watermark_ms; /* event time read up to; now when read to its end; -1: unchanged */
    bool fenced;          /* set by store_fence(): another replica owns it now */
} store_partition_t;

/* The index of (topic, partition) in parts[0..n), or SIZE_MAX. */
size_t store_partition_index(const store_partition_t *parts, size_t n, const char *topic,
                             int32_t partition);

/* The next offset of a partition never read: start from the beginning. */
#define STORE_OFFSET_BEGINNING (-2)

/*
 * Claims partitions for this replica: bumps each one's epoch, logs the
 * claim, and fills in epoch and next_offset (STORE_OFFSET_BEGINNING for a
 * partition never read by the group). From then on a former owner's
 * commits for them fail the fence.
 */
err_class_t store_claim(store_t *store, store_partition_t *parts, size_t n, char *errstr,
                        size_t errstr_size);

/* Why this replica stopped reading a partition, as ownership_log says it. */
typedef enum store_release_reason {
    STORE_RELEASED, /* revoked by a rebalance, after its last batch committed */
    STORE_LOST,     /* taken by the group without a revoke (session timed out) */
    STORE_FENCED,   /* a batch found another replica's newer epoch */
} store_release_reason_t;

/* Logs that this replica stopped reading `parts`, and why. */
err_class_t store_release(store_t *store, const store_partition_t *parts, size_t n,
                          store_release_reason_t reason, char *errstr, size_t errstr_size);

/* ---- the batch transaction ------------------------------------------------ */

err_class_t store_begin(store_t *store, char *errstr, size_t errstr_size);
err_class_t store_commit(store_t *store, char *errstr, size_t errstr_size);
void store_rollback(store_t *store); /* after a failed statement; never fails */

/*
 * The epoch fence: locks the offsets rows of `parts` (until the
 * transaction ends, so no claim lands mid-batch) and sets each one's
 * `fenced` when another replica claimed it since this one did.
 */
err_class_t store_fence(store_t *store, store_partition_t *parts, size_t n, char *errstr,
                        size_t errstr_size);

/* One instance: its process and key (borrowed). */
typedef struct store_key {
    const char *process;
    const char *key;
} store_key_t;

/* What store_lock_instances() found for one instance; strings borrowed
 * for the callback. */
typedef struct store_lock_row {
    const char *process, *key;
    int32_t objid;     /* the lock's second key; the first is STORE_LOCK_CLASS */
    bool locked;       /* this transaction holds the instance's lock now */
    bool has_deferred; /* steward.deferred holds events of it, older than the batch's */
    bool timed_out;    /* it was awaited for lock_timeout_ms in vain */
} store_lock_row_t;

/* The class id (first key) of every instance lock: "STWD" (migration 0018). */
#define STORE_LOCK_CLASS 1398036292

typedef err_class_t (*store_lock_fn)(void *arg, const store_lock_row_t *row, char *errstr,
                                     size_t errstr_size);

/*
 * Takes the transaction's advisory lock of every (process, key) in keys,
 * existing or not, in hash order (steward.lock_instances()): the one
 * global order every waiting taker locks in, so two transactions never
 * wait on each other in a circle. A busy lock is awaited at most
 * lock_timeout_ms, and not at all for an instance with deferred events;
 * one that is not had is left unlocked and said so. Calls fn once for each
 * distinct instance that is not simply locked now (not had, or with
 * deferred events); every other one of keys is locked.
 */
err_class_t store_lock_instances(store_t *store, const store_key_t *keys, size_t n,
                                 int lock_timeout_ms, store_lock_fn fn, void *arg, char *errstr,
                                 size_t errstr_size);

/* An instance with deferred events whose lock this transaction took;
 * strings borrowed for the callback. */
typedef err_class_t (*store_key_fn)(void *arg, const char *process, const char *key, char *errstr,
                                    size_t errstr_size);

/*
 * Tries the locks of instances with deferred events, oldest first, never
 * waiting (so it may follow store_lock_instances() in any order), until
 * it holds `limit` of them, and calls fn for each one it holds.
 */
err_class_t store_pick_deferred(store_t *store, size_t limit, store_key_fn fn, void *arg,
                                char *errstr, size_t errstr_size);

/*
 * An event kept for an instance: a row of steward.deferred (its lock was
 * not had) or of steward.parked (its state did not take it yet); strings
 * borrowed for the callback.
 */
typedef struct store_event_row {
    int64_t id;
    const char *process, *key, *event_id, *event_type, *topic;
    int32_t partition;
    int64_t offset, event_ms;
    const char *payload;     /* JSON text */
    int64_t token, epoch;    /* a deferred event's; 0 for a parked one */
    const char *traceparent; /* the event's W3C traceparent; NULL: none */
    const char *tracestate;  /* its tracestate; NULL: none */
} store_event_row_t;

typedef err_class_t (*store_event_fn)(void *arg, const store_event_row_t *row, char *errstr,
                                      size_t errstr_size);

/* Reads (and row-locks) the deferred events of `keys`, per instance oldest
 * first. Call only for instances this transaction holds the lock of. */
err_class_t store_read_deferred(store_t *store, const store_key_t *keys, size_t n,
                                store_event_fn fn, void *arg, char *errstr, size_t errstr_size);

/*
 * The server's shared lock table: max_locks_per_transaction x
 * (max_connections + max_prepared_transactions) locks for every session
 * together, read when the store connected. A transaction that takes more
 * fails with "out of shared memory" (SQLSTATE 53200).
 */
long store_lock_table(const store_t *store);

/* A row of steward.instances; strings borrowed for the callback. Times are
 * ms since the epoch, ROWS_NULL for NULL. */
typedef struct store_instance_row {
    const char *process, *key;
    int version;
    const char *state;
    int64_t started_ms, entered_ms, deadline_ms, process_deadline_ms;
    bool overdue, process_overdue;
    int attempt;
    const char *vars; /* JSON text; NULL unless asked for */
    int events_applied;
    int step;
    int64_t token;
    const char *lease_holder; /* NULL: no lease */
    int64_t lease_expires_ms, lease_renewed_ms;
    bool resend_pending;
} store_instance_row_t;

/* What a read hands each row to; an error stops the read and is returned. */
typedef err_class_t (*store_instance_fn)(void *arg, const store_instance_row_t *row, char *errstr,
                                         size_t errstr_size);

/*
 * Reads (and row-locks) the instances of `keys` that exist, in the order
 * of keys; their vars only where want_vars[i] is set (turning jsonb into
 * text costs the server, and most judgements only add to vars).
 */
err_class_t store_read_instances(store_t *store, const store_key_t *keys, const bool *want_vars,
                                 size_t n, store_instance_fn fn, void *arg, char *errstr,
                                 size_t errstr_size);

typedef err_class_t (*store_judged_fn)(void *arg, const char *process, const char *key,
                                       const char *event_id, char *errstr, size_t errstr_size);

/* Calls fn once for each (keys[i], event_ids[i]) that history holds a
 * judgement of already. */
err_class_t store_read_judged(store_t *store, const store_key_t *keys, const char *const *event_ids,
                              size_t n, store_judged_fn fn, void *arg, char *errstr,
                              size_t errstr_size);

/* Reads (and row-locks) the events parked for `keys`, per instance oldest
 * first (token and epoch 0). */
err_class_t store_read_parked(store_t *store, const store_key_t *keys, size_t n, store_event_fn fn,
                              void *arg, char *errstr, size_t errstr_size);

/*
 * The writes; each takes its table's rows (manager/intake/rows.h) and writes them
 * in one statement. store_write_history() with `lateness` also records, on
 * the open deadline alert of the step a late event ends, how late it was.
 * store_unpark() and store_write_offsets() return ERR_CONFLICT when fewer
 * rows than given were there to change: the batch must not commit on a
 * stale view (a parked event gone, a partition claimed mid-batch).
 * store_write_instances() merges each row's vars into the stored ones
 * (jsonb ||): a row may carry only the variables its batch captured.
 */
err_class_t store_write_history(store_t *store, rows_t *rows, bool lateness, char *errstr,
                                size_t errstr_size);
err_class_t store_write_parked(store_t *store, rows_t *rows, char *errstr, size_t errstr_size);
err_class_t store_unpark(store_t *store, rows_t *rows, char *errstr, size_t errstr_size);
err_class_t store_write_rejected(store_t *store, rows_t *rows, char *errstr, size_t errstr_size);
err_class_t store_write_instances(store_t *store, rows_t *rows, char *errstr, size_t errstr_size);
err_class_t store_write_offsets(store_t *store, rows_t *rows, char *errstr, size_t errstr_size);
/* steward.deferred: events of instances whose lock was not had, appended;
 * and those judged since, deleted (ERR_CONFLICT when one was gone). */
err_class_t store_write_deferred(store_t *store, rows_t *rows, char *errstr, size_t errstr_size);
err_class_t store_undefer(store_t *store, rows_t *rows, char *errstr, size_t errstr_size);

/* The texts of store_write_history() (without lateness) and
 * store_write_instances(), for bench/ceiling, which replays steward's own
 * statements on tables of another schema; and of the two reads whose plans
 * must stay index probes, for the test that explains them. */
const char *store_sql_write_history(void);
const char *store_sql_write_instances(void);
const char *store_sql_read_instances(void);
const char *store_sql_read_judged(void);

#endif
