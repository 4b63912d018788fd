/*
 * batch - the batch context, the batch's memory and the order of its
 * stages: batch_commit() runs read, judge and write in one transaction and
 * counts what committed; batch_apply() and batch_refuse_message() are
 * built on it. The stages are the other batch_*.c files (batch_int.h
 * lists them). See batch.h.
 */
#include "manager/intake/batch.h"

#include "common/clock.h"
#include "common/failpoint.h"
#include "common/log.h"
#include "manager/intake/batch_int.h"
#include "manager/runtime/metrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* How often the same undeclared (topic, type) is logged, at most. */
#define BATCH_UNKNOWN_LOG_MS 60000

/* ---- the context ---------------------------------------------------------- */

batch_ctx_t *batch_ctx_new(const batch_config_t *cfg, store_t *store, const def_set_t *defs)
{
    batch_ctx_t *ctx = calloc(1, sizeof *ctx);
    if (ctx == NULL)
        return NULL;
    ctx->store = store;
    ctx->defs = defs;
    ctx->routes = cfg->routes;
    ctx->limits = cfg->limits;
    ctx->record_unknown = cfg->record_unknown;
    ctx->lock_timeout_ms = cfg->lock_timeout_ms > 0 ? cfg->lock_timeout_ms : BATCH_LOCK_TIMEOUT_MS;
    ctx->lock_budget = cfg->lock_budget;
    ctx->schemas = cfg->schemas;
    if ((ctx->versions = defcache_new(defs)) == NULL) {
        free(ctx);
        return NULL;
    }
    return ctx;
}

size_t batch_lock_budget(long lock_table, size_t lanes)
{
    size_t share = lock_table > 0 ? (size_t) lock_table / 2 / (lanes > 0 ? lanes : 1) : 0;
    return share > 0 ? share : 1;
}

void batch_ctx_free(batch_ctx_t *ctx)
{
    if (ctx == NULL)
        return;
    defcache_free(ctx->versions);
    free(ctx);
}

void batch_set_definitions(batch_ctx_t *ctx, const def_set_t *defs, route_table_t *routes)
{
    ctx->defs = defs;
    ctx->routes = routes;
    defcache_set_loaded(ctx->versions, defs);
}

void batch_set_reject_hook(batch_ctx_t *ctx, batch_reject_hook_t hook, void *arg)
{
    ctx->reject_hook = hook;
    ctx->reject_arg = arg;
}

/* ---- slots and the batch's memory ----------------------------------------- */

/* Frees held[0..n) and the array. */
static void held_free(held_t *held, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(held[i].event_id);
        free(held[i].event_type);
        free(held[i].topic);
        json_decref(held[i].payload);
    }
    free(held);
}

void batch_slot_clear(slot_t *slot)
{
    engine_instance_clear(&slot->inst);
    for (size_t i = 0; i < slot->n_seen; i++)
        free(slot->seen[i]);
    free(slot->seen);
    held_free(slot->parked, slot->n_parked);
    held_free(slot->deferred, slot->n_deferred);
    free(slot->owned_key);
}

bool batch_slot_seen(const slot_t *slot, const char *id)
{
    for (size_t i = 0; i < slot->n_seen; i++) {
        if (strcmp(slot->seen[i], id) == 0)
            return true;
    }
    return false;
}

bool batch_slot_add_seen(slot_t *slot, const char *id)
{
    if (slot->n_seen == slot->cap_seen) {
        size_t cap = slot->cap_seen ? slot->cap_seen * 2 : 4;
        char **grown = realloc(slot->seen, cap * sizeof *grown);
        if (grown == NULL)
            return false;
        slot->seen = grown;
        slot->cap_seen = cap;
    }
    if ((slot->seen[slot->n_seen] = strdup(id)) == NULL)
        return false;
    slot->n_seen++;
    return true;
}

held_t *batch_held_add(held_t **held, size_t *n, size_t *cap)
{
    if (*n == *cap) {
        size_t grown_cap = *cap ? *cap * 2 : 4;
        held_t *grown = realloc(*held, grown_cap * sizeof *grown);
        if (grown == NULL)
            return NULL;
        *held = grown;
        *cap = grown_cap;
    }
    held_t *h = &(*held)[(*n)++];
    memset(h, 0, sizeof *h);
    return h;
}

int batch_slot_compare(const void *a, const void *b)
{
    const slot_t *x = a, *y = b;
    int c = strcmp(x->process, y->process);
    return c != 0 ? c : strcmp(x->key, y->key);
}

slot_t *batch_find_slot(batch_t *b, const char *process, const char *key)
{
    slot_t probe = {.process = process, .key = key};
    return bsearch(&probe, b->slots, b->n_slots, sizeof *b->slots, batch_slot_compare);
}

/* Empties what a commit builds, keeping the decoded messages and items. */
void batch_reset(batch_t *b)
{
    const struct {
        rows_t *rows;
        const char *table;
        size_t n_columns;
    } tables[] = {
        {&b->history, "history", ROWS_HISTORY_COLUMNS},
        {&b->parked, "parked", ROWS_PARKED_COLUMNS},
        {&b->unparked, "unparked", ROWS_UNPARKED_COLUMNS},
        {&b->rejected, "rejected", ROWS_REJECTED_COLUMNS},
        {&b->instances, "instances", ROWS_INSTANCES_COLUMNS},
        {&b->offsets, "offsets", ROWS_OFFSETS_COLUMNS},
        {&b->deferred, "deferred", ROWS_DEFERRED_COLUMNS},
        {&b->undeferred, "undeferred", ROWS_UNDEFERRED_COLUMNS},
    };

    for (size_t i = 0; i < b->n_slots; i++)
        batch_slot_clear(&b->slots[i]);
    free(b->slots);
    b->slots = NULL;
    b->n_slots = 0;
    for (size_t i = 0; i < b->n_items; i++) {
        b->items[i].slot = NULL;
        b->items[i].aside = NULL;
    }
    for (size_t i = 0; i < sizeof tables / sizeof *tables; i++) {
        rows_clear(tables[i].rows);
        rows_init(tables[i].rows, tables[i].table, tables[i].n_columns);
    }
    b->n_lock_timeouts = 0;
    b->n_late = 0;
    alert_batch_clear(&b->alerts);
    cmdq_clear(&b->commands);
    memset(&b->alerts, 0, sizeof b->alerts);
    memset(&b->commands, 0, sizeof b->commands);
    memset(b->outcome_counts, 0, sizeof b->outcome_counts);
    memset(b->reject_counts, 0, sizeof b->reject_counts);
    memset(&b->stats, 0, sizeof b->stats);
    b->n_rejections = 0;
    b->n_stays = 0;
}

void batch_free(batch_t *b)
{
    if (b == NULL)
        return;
    batch_reset(b); /* every table's rows are empty now */
    for (size_t i = 0; i < b->n_msgs; i++)
        decode_message_clear(&b->decoded[i]);
    for (size_t i = 0; i < b->n_items; i++)
        decode_envelope_clear(&b->items[i].env);
    free(b->stays);
    free(b->decoded);
    free(b->msg_reason);
    free(b->msg_detail);
    free(b->msg_part);
    free(b->msg_type);
    free(b->rejections);
    free(b->items);
    free(b);
}

/* ---- commit ---------------------------------------------------------------- */

/* After COMMIT: count and log undeclared types, tell the reject hook. */
static void batch_committed(batch_t *b)
{
    int64_t now = clock_monotonic_ms();
    size_t item = 0;

    for (size_t m = 0; m < b->n_msgs; m++) {
        size_t first = item;
        while (item < b->n_items && b->items[item].msg == m)
            item++;
        if (batch_msg_fenced(b, m) || b->msg_reason[m] != DECODE_OK || first != item)
            continue;
        const char *type = b->msg_type[m];
        if (metrics_count_unknown(b->msgs[m].topic, type, now, BATCH_UNKNOWN_LOG_MS))
            LOG_WARN("no loaded definition declares this event type on this topic: ignored "
                     "(logged once a minute per type)",
                     "topic", b->msgs[m].topic, "type", type != NULL ? type : "(none)");
    }
    for (size_t i = 0; b->ctx->reject_hook != NULL && i < b->n_rejections; i++) {
        const struct rejection *r = &b->rejections[i];
        b->ctx->reject_hook(b->ctx->reject_arg, &b->msgs[r->msg], r->process,
                            decode_reason_name(r->reason), r->detail);
    }
}

err_class_t batch_commit(batch_ctx_t *ctx, batch_t *b, batch_stats_t *stats, char *errstr,
                         size_t errstr_size)
{
    err_class_t cls;

    memset(stats, 0, sizeof *stats);
    if (b->defs_routed != ctx->defs)
        return err_set(ERR_FATAL, errstr, errstr_size,
                       "internal error: a batch routed by replaced definitions was committed");
    b->ctx = ctx;
    batch_reset(b);
    if (b->n_awaiting > 0 && (cls = batch_decode_awaiting(b, errstr, errstr_size)) != ERR_OK)
        return cls;
    if ((cls = store_begin(ctx->store, errstr, errstr_size)) != ERR_OK)
        return cls;
    if ((cls = store_fence(ctx->store, b->parts, b->n_parts, errstr, errstr_size)) != ERR_OK ||
        (cls = batch_slots(b, errstr, errstr_size)) != ERR_OK)
        goto done;
    for (size_t i = 0; i < b->n_parts; i++) {
        if (b->parts[i].fenced)
            b->stats.fenced++;
    }
    if (ctx->lock_budget > 0 && b->n_slots > ctx->lock_budget) {
        /* One lock per instance: more than the server's lock table spares
         * one transaction would fail with "out of shared memory". */
        cls = err_set(ERR_INVALID, errstr, errstr_size,
                      "the batch touches %zu instances, more than the %zu instance locks one "
                      "transaction may take (a share of the server's lock table, "
                      "max_locks_per_transaction x (max_connections + "
                      "max_prepared_transactions)): committing it in parts",
                      b->n_slots, ctx->lock_budget);
        goto done;
    }
    if ((cls = batch_read(b, errstr, errstr_size)) != ERR_OK)
        goto done;
    for (size_t i = 0; i < b->n_slots; i++) {
        if ((cls = batch_judge_deferred(b, &b->slots[i], errstr, errstr_size)) != ERR_OK)
            goto done;
    }
    for (size_t i = 0; i < b->n_items; i++) {
        if (b->items[i].slot != NULL &&
            (cls = batch_judge_item(b, &b->items[i], errstr, errstr_size)) != ERR_OK)
            goto done;
    }
    batch_rows(b);
    if ((cls = batch_write(b, errstr, errstr_size)) != ERR_OK ||
        (b->n_msgs > 0 &&
         (cls = FAILPOINT_ERROR("intake.before_commit", errstr, errstr_size)) != ERR_OK) ||
        (cls = store_commit(ctx->store, errstr, errstr_size)) != ERR_OK)
        goto done;
    if (b->n_msgs > 0) /* batches that only move a caught-up watermark are no test */
        FAILPOINT("intake.after_commit");

    /* Counted once committed, so retried batches are not counted twice. */
    for (size_t i = 0; i < ENGINE_N_OUTCOMES; i++)
        metrics_add(&metrics.outcomes[i], b->outcome_counts[i]);
    for (size_t i = 0; i < DECODE_N_REASONS; i++)
        metrics_add(&metrics.rejected[i], b->reject_counts[i]);
    for (size_t m = 0; m < b->n_msgs; m++) {
        decode_trace_t trace = b->decoded[m].trace;
        if (!batch_msg_fenced(b, m) && b->msg_reason[m] == DECODE_OK &&
            trace != DECODE_TRACE_NONE && trace != DECODE_TRACE_OK)
            metrics_add(&metrics.traceparent_ignored[trace], 1);
        decode_tracestate_t state = b->decoded[m].tracestate_fate;
        if (!batch_msg_fenced(b, m) && b->msg_reason[m] == DECODE_OK &&
            state > DECODE_TRACESTATE_OK)
            metrics_add(&metrics.tracestate_ignored[state], 1);
    }
    metrics_add(&metrics.events_ignored, (long long) b->stats.ignored);
    metrics_add(&metrics.batches_committed, 1);
    metrics_add(&metrics.events_deferred, (long long) b->deferred.n);
    metrics_add(&metrics.deferred_judged, (long long) b->undeferred.n);
    metrics_add(&metrics.instance_lock_timeouts, (long long) b->n_lock_timeouts);
    for (size_t i = 0; i < b->n_stays; i++)
        metrics_observe_step(b->stays[i].process, b->stays[i].state, b->stays[i].ms);
    b->stats.judged = b->history.n;
    b->stats.rejected = b->rejected.n;
    *stats = b->stats;
    batch_committed(b);
done:
    if (cls != ERR_OK)
        store_rollback(ctx->store);
    return cls;
}

err_class_t batch_apply(batch_ctx_t *ctx, const decode_input_t *msgs, size_t n_msgs,
                        store_partition_t *parts, size_t n_parts, batch_stats_t *stats,
                        char *errstr, size_t errstr_size)
{
    memset(stats, 0, sizeof *stats);
    batch_t *b = batch_prepare(ctx, msgs, n_msgs, parts, n_parts, errstr, errstr_size);
    if (b == NULL)
        return ERR_FATAL;
    err_class_t cls = batch_commit(ctx, b, stats, errstr, errstr_size);
    batch_free(b);
    return cls;
}

err_class_t batch_refuse_message(batch_ctx_t *ctx, const decode_input_t *msg,
                                 store_partition_t *part, const char *detail, char *errstr,
                                 size_t errstr_size)
{
    err_class_t cls = ERR_OK;

    /* Twice at most: if even the rejected row is refused (its headers or
     * detail), record the message by its position alone. */
    for (int bare = 0; bare < 2; bare++) {
        batch_t *b = calloc(1, sizeof *b);
        if (b == NULL)
            return err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
        *b = (batch_t){
            .ctx = ctx, .msgs = msg, .n_msgs = 1, .parts = part, .n_parts = 1, .bare = bare != 0};
        if (!batch_alloc(b, 1)) {
            batch_free(b);
            return err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
        }
        b->msg_reason[0] = DECODE_DATABASE_REFUSED;
        snprintf(b->msg_detail[0], sizeof b->msg_detail[0], "%s", detail);
        if ((cls = store_begin(ctx->store, errstr, errstr_size)) == ERR_OK) {
            if ((cls = store_fence(ctx->store, part, 1, errstr, errstr_size)) == ERR_OK) {
                batch_rows(b);
                if ((cls = batch_write(b, errstr, errstr_size)) == ERR_OK)
                    cls = store_commit(ctx->store, errstr, errstr_size);
            }
            if (cls != ERR_OK)
                store_rollback(ctx->store);
        }
        if (cls == ERR_OK) {
            for (size_t i = 0; i < DECODE_N_REASONS; i++)
                metrics_add(&metrics.rejected[i], b->reject_counts[i]);
            metrics_add(&metrics.batches_committed, 1);
            batch_committed(b);
        }
        batch_free(b);
        if (cls != ERR_INVALID)
            break;
    }
    return cls;
}
