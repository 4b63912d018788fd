/*
 * batch - what intake read since the last commit, judged and committed as
 * one transaction.
 *
 * A batch goes through stages with one job each, in this order:
 *
 *   decode   batch_prepare(): every message decoded once and routed to
 *            each process that declares its type on its topic, with that
 *            process's envelope read. Pure CPU, no I/O: it may run while
 *            the previous batch's transaction does.
 *   read     BEGIN; the epoch fence; the advisory locks of every touched
 *            instance (a busy one awaited for lock_timeout at most, then
 *            set aside: its events go to steward.deferred, in order), and
 *            of instances with deferred events whose lock is free now; one
 *            round of reads for the locked ones (instances, deferred
 *            events, the event ids already judged, parked events).
 *   judge    deferred events first, oldest first, then the batch's.
 *            The engine over the batch, in memory, replaying parked events
 *            as instances move. No I/O.
 *   write    the rows (manager/intake/rows.h) in one statement per table, the
 *            alerts and commands the judgements made, the offsets.
 *   commit   COMMIT; then metrics, logs and the reject hook.
 *
 * store (manager/intake/store.h) holds the SQL of the read and write stages; this
 * module holds their order and everything between them. Either all of a
 * batch's effects are committed, with the offsets that caused them, or
 * none are: every message changes state exactly once across crashes,
 * restarts and rebalances.
 *
 * A batch_ctx_t is used by one thread at a time.
 */
#ifndef STEWARD_BATCH_H
#define STEWARD_BATCH_H

#include "common/err.h"
#include "definitions/def.h"
#include "formats/decode.h"
#include "manager/sinks/routes.h"
#include "manager/intake/schemas.h"
#include "manager/intake/store.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct batch_config {
    decode_limits_t limits;
    route_table_t *routes; /* who hears of sequence alerts and resolves; borrowed */
    bool record_unknown;   /* also a rejected row (reason unknown_type) for each message no
                              loaded definition declares */
    /* How long a batch awaits an instance lock someone else holds; then
     * the instance is set aside (0: BATCH_LOCK_TIMEOUT_MS). */
    int lock_timeout_ms;
    /* The most instances one transaction locks (0: no bound); see
     * batch_lock_budget(). */
    size_t lock_budget;
    /* The writer schemas of confluent_avro topics (borrowed); NULL: none,
     * and their framed values are rejected as unknown_schema. */
    schemas_t *schemas;
} batch_config_t;

#define BATCH_LOCK_TIMEOUT_MS 3000

/*
 * The instance locks one batch transaction may take: half of the server's
 * shared lock table (store_lock_table()) shared among `lanes`
 * transactions in flight at once, leaving the rest to the scheduler,
 * operator actions and every other session.
 */
size_t batch_lock_budget(long lock_table, size_t lanes);

typedef struct batch_ctx batch_ctx_t;

/*
 * Returns a new context (free with batch_ctx_free()), or NULL when out of
 * memory. `store` and `defs` are borrowed and must outlive it
 * (batch_set_definitions() swaps the definitions).
 */
batch_ctx_t *batch_ctx_new(const batch_config_t *cfg, store_t *store, const def_set_t *defs);
void batch_ctx_free(batch_ctx_t *ctx); /* NULL is a no-op */

/* Replaces the definitions and routes (borrowed, as in batch_ctx_new()).
 * No prepared batch may be outstanding: it was routed by the old ones. */
void batch_set_definitions(batch_ctx_t *ctx, const def_set_t *defs, route_table_t *routes);

/*
 * Called once per rejected row after its batch committed, on the thread
 * that committed it: the message (borrowed for the call), the process that
 * rejected it (NULL: every process), the reason's name and the detail.
 * What intake mirrors to the dead-letter topic.
 */
typedef void (*batch_reject_hook_t)(void *arg, const decode_input_t *msg, const char *process,
                                    const char *reason, const char *detail);

/* Sets the reject hook (NULL: none). */
void batch_set_reject_hook(batch_ctx_t *ctx, batch_reject_hook_t hook, void *arg);

typedef struct batch_stats {
    size_t messages; /* messages committed (fenced partitions' excluded) */
    size_t judged;   /* history rows written */
    size_t rejected; /* rejected rows written */
    size_t ignored;  /* messages no process declares */
    size_t fenced;   /* partitions found fenced */
} batch_stats_t;

typedef struct batch batch_t;

/*
 * The decode stage: msgs in the order read (per partition, by offset), and
 * the progress of every partition they came from (parts; each message's
 * partition must be among them). Partitions without messages may be passed
 * too, to advance their watermark. msgs and parts are borrowed until
 * batch_free(). Returns NULL with the reason in errstr (out of memory, or
 * a message from a partition not in parts).
 *
 * Reads only the context's definitions and limits: it may run on another
 * thread than the one committing, as long as the definitions are not
 * swapped meanwhile. No I/O: a framed Avro value whose schema is not
 * cached yet is left for batch_commit(), which fetches it first.
 */
batch_t *batch_prepare(const batch_ctx_t *ctx, const decode_input_t *msgs, size_t n_msgs,
                       store_partition_t *parts, size_t n_parts, char *errstr, size_t errstr_size);
void batch_free(batch_t *batch); /* NULL is a no-op */

/*
 * The read, judge, write and commit stages of a prepared batch. A
 * partition another replica claimed since is marked fenced and its
 * messages are left alone; the rest commit. On ERR_CONFLICT or
 * ERR_TRANSIENT nothing was committed and the same batch may be committed
 * again. ERR_INVALID means PostgreSQL refused what some message carried
 * (SQLSTATE class 22, data exception, or 54, program limit exceeded), or
 * the batch is too big for the server's resources (class 53 but 53300:
 * out of memory or of shared lock slots, or more instances than the lock
 * budget): nothing was committed, and the same batch would fail again;
 * commit parts of it to find the message, and record that one with
 * batch_refuse_message() (unless the refusal is one of resources: a single
 * message fits any budget, so retry it instead). errstr then holds the
 * database's own words.
 *
 * Messages no loaded definition declares are counted per (topic, type) in
 * the metrics and logged at most once a minute per type, once committed.
 *
 * Before the transaction, the writer schemas batch_prepare() did not have
 * are fetched and their messages decoded; while the registry is
 * unavailable it returns ERR_TRANSIENT (errstr names the registry, the
 * schema id and the error) with nothing done, so the batch waits, its
 * offsets uncommitted, and is retried like a lost connection.
 */
err_class_t batch_commit(batch_ctx_t *ctx, batch_t *batch, batch_stats_t *stats, char *errstr,
                         size_t errstr_size);

/* batch_prepare() and batch_commit() in one call. */
err_class_t batch_apply(batch_ctx_t *ctx, const decode_input_t *msgs, size_t n_msgs,
                        store_partition_t *parts, size_t n_parts, batch_stats_t *stats,
                        char *errstr, size_t errstr_size);

/*
 * Records one message PostgreSQL refused (see batch_commit()) in
 * steward.rejected with reason database_refused and `detail` (the
 * database's error), and moves `part` (its partition, next_offset the
 * offset after it) past it, in one transaction. If the rejected row is
 * refused too, it is written again without key, value and headers.
 * Returns as batch_commit() does; part->fenced says whether another
 * replica owns the partition now (then nothing was written).
 */
err_class_t batch_refuse_message(batch_ctx_t *ctx, const decode_input_t *msg,
                                 store_partition_t *part, const char *detail, char *errstr,
                                 size_t errstr_size);

#endif
