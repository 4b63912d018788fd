/*
 * store - instance state in PostgreSQL, and the batch transaction that
 * changes it.
 *
 * An instance is one running copy of a process definition: one row in
 * steward.instances. A batch is what intake read from Kafka since the last
 * commit; store_apply_batch() turns it into one transaction: check that
 * this replica still owns every partition in it (the epoch fence), lock the
 * touched instances in key order, judge each event with the engine, and
 * write instances, history, parked and rejected rows and the partitions'
 * next offsets together. Either all of a batch's effects are committed,
 * with the offsets that caused them, or none are: every message changes
 * state exactly once across crashes, restarts and rebalances.
 *
 * A store owns one PGconn and is used by one thread.
 */
#ifndef STEWARD_STORE_H
#define STEWARD_STORE_H

#include "common/err.h"
#include "definitions/def.h"
#include "engine/decode.h"
#include "manager/routes.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct store store_t;

typedef struct store_config {
    const char *conninfo; /* libpq connection string */
    const char *group;    /* the Kafka consumer group: offsets are per group */
    const char *replica;  /* this process's name in history and ownership_log */
    decode_limits_t limits;
    route_table_t *routes; /* who hears of sequence alerts and resolves; borrowed */
    bool record_unknown;   /* also a rejected row (reason unknown_type) for each message no
                              loaded definition declares */
} store_config_t;

/*
 * Returns a new store (free with store_free()) connected to the database,
 * or NULL with the reason in errstr. `defs` is borrowed and must outlive
 * the store (store_set_definitions() swaps it). The strings in cfg are
 * copied.
 */
store_t *store_new(const store_config_t *cfg, const def_set_t *defs, char *errstr,
                   size_t errstr_size);
void store_free(store_t *store); /* NULL is a no-op */

/* Replaces the definitions and routes (borrowed, as in store_new()). */
void store_set_definitions(store_t *store, const def_set_t *defs, route_table_t *routes);

/* Reconnects after a lost connection; ERR_TRANSIENT while the server is away. */
err_class_t store_reconnect(store_t *store, char *errstr, size_t errstr_size);

/*
 * Records every definition of the set in steward.definitions. A version
 * already recorded with a different document is ERR_INVALID: a changed
 * definition needs a new version, since running instances keep theirs.
 */
err_class_t store_register_definitions(store_t *store, char *errstr, size_t errstr_size);

/* One partition this replica reads, and how far. */
typedef struct store_partition {
    const char *topic; /* borrowed */
    int32_t partition;
    int64_t epoch;        /* from store_claim() */
    int64_t next_offset;  /* from store_claim(); in a batch, the offset after the last
                             message read, or -1 when unchanged */
    int64_t watermark_ms; /* event time read up to; now when read to its end; -1: unchanged */
    bool fenced;          /* set by store_apply_batch(): another replica owns it now */
} store_partition_t;

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

typedef struct store_batch_stats {
    size_t messages; /* messages committed (fenced partitions' excluded) */
    size_t judged;   /* history rows written */
    size_t rejected; /* rejected rows written */
    size_t ignored;  /* messages no process declares */
    size_t fenced;   /* partitions found fenced */
} store_batch_stats_t;

/*
 * Applies a batch: msgs in the order read (per partition, by offset), and
 * the progress of every partition they came from (parts; each message's
 * partition must be among them). Partitions without messages may be passed
 * too, to advance their watermark. A partition another replica claimed
 * since is marked fenced and its messages are left alone; the rest commit.
 * On ERR_CONFLICT or ERR_TRANSIENT nothing was committed and the same
 * batch may be applied again. ERR_INVALID means PostgreSQL refused what
 * some message carried (SQLSTATE class 22, data exception, or 54, program
 * limit exceeded): nothing was committed, and the same batch would fail
 * again; apply parts of it to find the message, and record that one with
 * store_refuse_message(). errstr then holds the database's own words.
 *
 * Messages no loaded definition declares are counted per (topic, type) in
 * the metrics and logged at most once a minute per type, once committed.
 */
err_class_t store_apply_batch(store_t *store, const decode_input_t *msgs, size_t n_msgs,
                              store_partition_t *parts, size_t n_parts, store_batch_stats_t *stats,
                              char *errstr, size_t errstr_size);

/*
 * Records one message PostgreSQL refused (see store_apply_batch()) in
 * steward.rejected with reason database_refused and `detail` (the
 * database's error), and moves `part` (its partition, next_offset the
 * offset after it) past it, in one transaction. If the rejected row is
 * refused too, it is written again without key, value and headers.
 * Returns as store_apply_batch() does; part->fenced says whether another
 * replica owns the partition now (then nothing was written).
 */
err_class_t store_refuse_message(store_t *store, const decode_input_t *msg, store_partition_t *part,
                                 const char *detail, char *errstr, size_t errstr_size);

/*
 * Called once per rejected row after its batch committed, on the thread
 * that applied the batch: the message (borrowed for the call), the process
 * that rejected it (NULL: every process), the reason's name and the detail.
 * What intake mirrors to the dead-letter topic.
 */
typedef void (*store_reject_hook_t)(void *arg, const decode_input_t *msg, const char *process,
                                    const char *reason, const char *detail);

/* Sets the reject hook (NULL: none). */
void store_set_reject_hook(store_t *store, store_reject_hook_t hook, void *arg);

#endif
