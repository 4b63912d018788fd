/*
 * batch_int - private to manager/intake/: what the files of the batch
 * module share, included by them alone (batch.h is the module's whole
 * interface; nothing outside manager/intake/batch*.c includes this
 * header). The context, the batch and what a commit builds in it (slots,
 * items, parked and deferred events), and the stages each file holds:
 *
 *   batch.c          the context, the batch's memory, and the stages'
 *                    order: commit, apply, a refused message
 *   batch_decode.c   decode: messages decoded and routed to processes
 *   batch_read.c     read: the instance locks, then one round of reads
 *   batch_judge.c    judge: the engine over each event, history rows
 *   batch_replay.c   parked events judged again as an instance moves
 *   batch_effects.c  what a judgement alerts or commands
 *   batch_write.c    write: the rows of every table, one statement each
 */
#ifndef STEWARD_BATCH_INT_H
#define STEWARD_BATCH_INT_H

#include "engine/engine.h"
#include "manager/alerting/alerts.h"
#include "manager/commands/cmdqueue.h"
#include "manager/intake/batch.h"
#include "manager/intake/rows.h"
#include "manager/runtime/defcache.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct batch_ctx {
    store_t *store;        /* borrowed */
    const def_set_t *defs; /* borrowed */
    defcache_t *versions;  /* the versions instances run on */
    route_table_t *routes; /* borrowed */
    decode_limits_t limits;
    bool record_unknown; /* a rejected row for each message of an undeclared type */
    int lock_timeout_ms; /* how long a batch awaits a busy instance lock */
    size_t lock_budget;  /* instance locks one transaction may take; 0: no bound */
    batch_reject_hook_t reject_hook;
    void *reject_arg;
    schemas_t *schemas; /* borrowed; NULL: none */
};

/*
 * An event kept for an instance: parked (read from steward.parked, or
 * parked in this batch) until its state takes it, or deferred (read from
 * steward.deferred) because its instance's lock was not had, and judged
 * before the batch's own.
 */
typedef struct held {
    int64_t db_id; /* its row's id; 0 when parked by this batch */
    char *event_id, *event_type, *topic;
    int32_t partition;
    int64_t offset, time_ms;
    int64_t token, epoch;                         /* a deferred event's */
    json_t *payload;                              /* owned */
    char traceparent[DECODE_TRACEPARENT_LEN + 1]; /* "": none */
    char tracestate[DECODE_TRACESTATE_MAX + 1];   /* "": none */
    bool settled; /* parked: judged again in this batch and no longer parked */
} held_t;

/* One touched instance. */
typedef struct slot {
    const char *process;    /* borrowed from the definitions */
    const char *key;        /* borrowed from an item's envelope */
    const def_t *def;       /* the version the instance runs (or would start) on */
    engine_instance_t inst; /* vars: all of them when full_vars, else only what this batch
                               captured (the write merges them into the stored ones) */
    bool full_vars;
    bool dirty;
    char **seen; /* event ids already judged for this instance */
    size_t n_seen, cap_seen;
    held_t *parked;
    size_t n_parked, cap_parked;
    char unjudgeable[192]; /* why this replica cannot judge it; "" when it can */
    char *owned_key;       /* the key, when no item of the batch holds it (drained) */
    bool aside;            /* its lock was not had: its events go to steward.deferred */
    bool has_deferred;     /* steward.deferred holds older events of it */
    held_t *deferred;      /* those, read once locked, oldest first */
    size_t n_deferred, cap_deferred;
} slot_t;

/* One (message, process) pair to judge, or to reject for that process. */
typedef struct item {
    size_t msg;
    const def_t *latest;
    const char *type; /* borrowed from the decoded message */
    decode_envelope_t env;
    slot_t *slot;
    decode_reason_t reject; /* DECODE_OK, or why this process cannot take it */
    char reject_detail[192];
    slot_t *aside; /* its instance's lock was not had: deferred, not judged */
} item_t;

struct batch {
    batch_ctx_t *ctx;             /* set by batch_commit() */
    const def_set_t *defs_routed; /* the definitions batch_prepare() routed with */
    const decode_input_t *msgs;
    size_t n_msgs;
    store_partition_t *parts;
    size_t n_parts;
    bool bare; /* rejected rows without key, value and headers (see batch_refuse_message()) */

    /* decode: filled by batch_prepare(), kept across retries */
    size_t *msg_part;            /* each message's index in parts */
    decode_message_t *decoded;   /* per message; empty when rejected as a whole */
    decode_reason_t *msg_reason; /* per message: why it was rejected as a whole */
    char (*msg_detail)[256];
    const char **msg_type; /* per message: the type no process declares, when ignored */
    item_t *items;
    size_t n_items, cap_items;
    const decode_limits_t *limits;
    schemas_t *schemas; /* the context's */
    size_t n_awaiting;  /* messages whose schema batch_prepare() did not have */

    /* read, judge, write: built again by each batch_commit() */
    slot_t *slots;
    size_t n_slots;
    rows_t history, parked, unparked, rejected, instances, offsets, deferred, undeferred;
    size_t n_lock_timeouts; /* instances whose lock was awaited in vain */
    size_t n_late;          /* history rows of late events */
    alert_batch_t alerts;
    cmdq_t commands; /* the commands the batch's state changes send */
    long long outcome_counts[ENGINE_N_OUTCOMES];
    long long reject_counts[DECODE_N_REASONS];
    batch_stats_t stats;
    struct rejection {
        size_t msg;
        const char *process, *detail; /* borrowed from the batch */
        decode_reason_t reason;
    } * rejections; /* what the reject hook hears once committed */
    size_t n_rejections, cap_rejections;
    struct stay {
        const char *process, *state; /* borrowed from the batch's slots */
        int64_t ms;
    } * stays; /* states left, for steward_step_duration_seconds once committed */
    size_t n_stays, cap_stays;
    char refused_detail[256]; /* batch_refuse_message()'s detail */
};

/* ---- the batch's memory (batch.c) ----------------------------------------- */

void batch_slot_clear(slot_t *slot);
bool batch_slot_seen(const slot_t *slot, const char *id);
/* false when out of memory */
bool batch_slot_add_seen(slot_t *slot, const char *id);
/* A zeroed event at the end of a slot's parked or deferred ones (held[0..n),
 * room for cap); NULL when out of memory. */
held_t *batch_held_add(held_t **held, size_t *n, size_t *cap);
/* Orders slots by process, then key: b->slots is kept sorted so. */
int batch_slot_compare(const void *a, const void *b);
/* The slot of (process, key), or NULL. */
slot_t *batch_find_slot(batch_t *b, const char *process, const char *key);
/* Empties what a commit builds, keeping the decoded messages and items. */
void batch_reset(batch_t *b);

/* Whether message m's partition was found fenced. */
static inline bool batch_msg_fenced(const batch_t *b, size_t m)
{
    return b->parts[b->msg_part[m]].fenced;
}

/* A time of the engine's as a row's value: no deadline is SQL NULL. */
static inline int64_t batch_nullable_ms(int64_t ms)
{
    return ms == ENGINE_NO_DEADLINE ? ROWS_NULL : ms;
}

/* ---- the stages ------------------------------------------------------------ */

/* decode (batch_decode.c): the arrays of the decode stage, for n messages;
 * false when out of memory. */
bool batch_alloc(batch_t *b, size_t n);

/* decode (batch_decode.c), again, at the start of batch_commit(): when
 * some message awaits its writer schema, the schemas fetched and the
 * whole batch decoded and routed anew, in order. ERR_TRANSIENT while the
 * registry is unavailable (nothing changed then). */
err_class_t batch_decode_awaiting(batch_t *b, char *errstr, size_t errstr_size);

/* read (batch_read.c): the sorted, unique set of instances the live items
 * touch; then their locks and what judging the locked ones needs. */
err_class_t batch_slots(batch_t *b, char *errstr, size_t errstr_size);
err_class_t batch_read(batch_t *b, char *errstr, size_t errstr_size);

/* judge (batch_judge.c): a locked instance's deferred events, and one item
 * of the batch; the history rows of a judgement and of a lease released. */
err_class_t batch_judge_deferred(batch_t *b, slot_t *slot, char *errstr, size_t errstr_size);
err_class_t batch_judge_item(batch_t *b, item_t *item, char *errstr, size_t errstr_size);
/* traceparent, tracestate: the event's W3C trace context, NULL when it
 * carried none. */
void batch_add_history(batch_t *b, const slot_t *slot, const char *event_id, const char *event_type,
                       const char *topic, int32_t partition, int64_t offset, int64_t time_ms,
                       const engine_result_t *r, bool replayed, int64_t epoch,
                       const char *traceparent, const char *tracestate);
void batch_add_released(batch_t *b, const slot_t *slot, const char *event_id,
                        const char *event_type, const char *topic, int32_t partition,
                        int64_t offset, int64_t time_ms, const engine_result_t *r, bool replayed,
                        int64_t epoch, const char *traceparent, const char *tracestate);

/* batch_replay.c: the instance's parked events judged again after it
 * moved, until none moves it further. */
void batch_replay_parked(batch_t *b, slot_t *slot, int64_t epoch);

/* batch_effects.c: the alerts a judgement opens or resolves, and the
 * command it queues or cancels. */
void batch_note_alerts(batch_t *b, const slot_t *slot, const engine_result_t *r, bool was_overdue,
                       bool was_process_overdue, const char *type, const char *event_id);
/* traceparent, tracestate: the trace context of the event that entered the
 * state (NULL: none), which its command continues. */
void batch_queue_command(batch_t *b, slot_t *slot, const engine_result_t *r,
                         const char *traceparent, const char *tracestate);

/* write (batch_write.c): every row the batch writes, then one statement
 * per table and what other modules add to the transaction. */
void batch_rows(batch_t *b);
err_class_t batch_write(batch_t *b, char *errstr, size_t errstr_size);

#endif
