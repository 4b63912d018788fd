/*
 * batch - the stages of a batch and their order; see batch.h.
 */
#include "manager/intake/batch.h"

#include "common/clock.h"
#include "common/failpoint.h"
#include "common/log.h"
#include "common/utf8.h"
#include "engine/engine.h"
#include "manager/alerting/alerts.h"
#include "manager/commands/cmdqueue.h"
#include "manager/runtime/defcache.h"
#include "manager/runtime/metrics.h"
#include "manager/intake/rows.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
};

/* Compact, with 15 significant digits: what a double keeps of the decimal a
 * producer wrote (11.53 stays 11.53, not 11.529999999999999). */
#define JSON_NUMBERS (JSON_COMPACT | JSON_REAL_PRECISION(15))

/* How often the same undeclared (topic, type) is logged, at most. */
#define BATCH_UNKNOWN_LOG_MS 60000

/* A parked event, read from steward.parked or parked in this batch. */
typedef struct parked {
    int64_t db_id; /* 0 when parked by this batch */
    char *event_id;
    char *event_type;
    char *topic;
    int32_t partition;
    int64_t offset;
    int64_t time_ms;
    json_t *payload; /* owned */
    bool settled;    /* judged again in this batch and no longer parked */
} parked_t;

/* An event of steward.deferred, judged before the batch's own. */
typedef struct deferred {
    int64_t db_id;
    char *event_id, *event_type, *topic;
    int32_t partition;
    int64_t offset, time_ms, token, epoch;
    json_t *payload; /* owned */
} deferred_t;

/* The instances with deferred events one batch takes up besides its own,
 * at most: judging them is a few rows each, and the lock budget counts
 * them too. */
#define BATCH_DRAIN_MAX 100

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
    parked_t *parked;
    size_t n_parked, cap_parked;
    char unjudgeable[192]; /* why this replica cannot judge it; "" when it can */
    char *owned_key;       /* the key, when no item of the batch holds it (drained) */
    bool aside;            /* its lock was not had: its events go to steward.deferred */
    bool has_deferred;     /* steward.deferred holds older events of it */
    deferred_t *deferred;  /* those, read once locked, oldest first */
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

static void slot_clear(slot_t *slot)
{
    engine_instance_clear(&slot->inst);
    for (size_t i = 0; i < slot->n_seen; i++)
        free(slot->seen[i]);
    free(slot->seen);
    for (size_t i = 0; i < slot->n_parked; i++) {
        free(slot->parked[i].event_id);
        free(slot->parked[i].event_type);
        free(slot->parked[i].topic);
        json_decref(slot->parked[i].payload);
    }
    free(slot->parked);
    for (size_t i = 0; i < slot->n_deferred; i++) {
        free(slot->deferred[i].event_id);
        free(slot->deferred[i].event_type);
        free(slot->deferred[i].topic);
        json_decref(slot->deferred[i].payload);
    }
    free(slot->deferred);
    free(slot->owned_key);
}

static bool slot_seen(const slot_t *slot, const char *id)
{
    for (size_t i = 0; i < slot->n_seen; i++) {
        if (strcmp(slot->seen[i], id) == 0)
            return true;
    }
    return false;
}

static bool slot_add_seen(slot_t *slot, const char *id)
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

static parked_t *slot_add_parked(slot_t *slot)
{
    if (slot->n_parked == slot->cap_parked) {
        size_t cap = slot->cap_parked ? slot->cap_parked * 2 : 4;
        parked_t *grown = realloc(slot->parked, cap * sizeof *grown);
        if (grown == NULL)
            return NULL;
        slot->parked = grown;
        slot->cap_parked = cap;
    }
    parked_t *p = &slot->parked[slot->n_parked++];
    memset(p, 0, sizeof *p);
    return p;
}

static int slot_compare(const void *a, const void *b)
{
    const slot_t *x = a, *y = b;
    int c = strcmp(x->process, y->process);
    return c != 0 ? c : strcmp(x->key, y->key);
}

static slot_t *find_slot(batch_t *b, const char *process, const char *key)
{
    slot_t probe = {.process = process, .key = key};
    return bsearch(&probe, b->slots, b->n_slots, sizeof *b->slots, slot_compare);
}

/* Empties what a commit builds, keeping the decoded messages and items. */
static void batch_reset(batch_t *b)
{
    for (size_t i = 0; i < b->n_slots; i++)
        slot_clear(&b->slots[i]);
    free(b->slots);
    b->slots = NULL;
    b->n_slots = 0;
    for (size_t i = 0; i < b->n_items; i++) {
        b->items[i].slot = NULL;
        b->items[i].aside = NULL;
    }
    rows_clear(&b->deferred);
    rows_clear(&b->undeferred);
    rows_init(&b->deferred, "deferred", ROWS_DEFERRED_COLUMNS);
    rows_init(&b->undeferred, "undeferred", ROWS_UNDEFERRED_COLUMNS);
    b->n_lock_timeouts = 0;
    rows_clear(&b->history);
    rows_clear(&b->parked);
    rows_clear(&b->unparked);
    rows_clear(&b->rejected);
    rows_clear(&b->instances);
    rows_clear(&b->offsets);
    rows_init(&b->history, "history", ROWS_HISTORY_COLUMNS);
    rows_init(&b->parked, "parked", ROWS_PARKED_COLUMNS);
    rows_init(&b->unparked, "unparked", ROWS_UNPARKED_COLUMNS);
    rows_init(&b->rejected, "rejected", ROWS_REJECTED_COLUMNS);
    rows_init(&b->instances, "instances", ROWS_INSTANCES_COLUMNS);
    rows_init(&b->offsets, "offsets", ROWS_OFFSETS_COLUMNS);
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
    batch_reset(b);
    rows_clear(&b->history);
    rows_clear(&b->parked);
    rows_clear(&b->unparked);
    rows_clear(&b->rejected);
    rows_clear(&b->instances);
    rows_clear(&b->offsets);
    rows_clear(&b->deferred);
    rows_clear(&b->undeferred);
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

static bool msg_fenced(const batch_t *b, size_t m)
{
    return b->parts[b->msg_part[m]].fenced;
}

/* ---- decode ---------------------------------------------------------------- */

static bool reads_topic(const def_t *def, const char *topic)
{
    for (size_t i = 0; i < def->n_events; i++) {
        if (strcmp(def->events[i].topic, topic) == 0)
            return true;
    }
    return false;
}

/* The event `type` on `topic`, or -1 when the definition does not declare it there. */
static long declared_event(const def_t *def, const char *type, const char *topic)
{
    long idx = def_find_event(def, type);
    return idx >= 0 && strcmp(def->events[idx].topic, topic) == 0 ? idx : -1;
}

/* Decodes every message and routes it to the processes that declare it.
 * Pure CPU; runs before the transaction. */
static err_class_t batch_route(batch_t *b, const def_set_t *defs, char *errstr, size_t errstr_size)
{
    for (size_t m = 0; m < b->n_msgs; m++) {
        const decode_input_t *in = &b->msgs[m];
        decode_message_t *msg = &b->decoded[m];

        b->msg_part[m] = store_partition_index(b->parts, b->n_parts, in->topic, in->partition);
        if (b->msg_part[m] == SIZE_MAX)
            return err_set(ERR_FATAL, errstr, errstr_size,
                           "internal error: message from %s[%" PRId32 "] has no partition entry",
                           in->topic, in->partition);
        b->msg_reason[m] =
            decode_message(in, b->limits, msg, b->msg_detail[m], sizeof b->msg_detail[m]);
        if (b->msg_reason[m] != DECODE_OK)
            continue;

        bool listened = false, typed = false;
        const def_t *listener = NULL;
        for (size_t d = 0; d < defs->n; d++) {
            const def_t *def = defs->defs[d];
            if (def_set_latest(defs, def->process) != def || !reads_topic(def, in->topic))
                continue;
            listened = true;
            if (listener == NULL)
                listener = def;
            const char *type = decode_event_type(msg, in, def);
            if (type == NULL)
                continue;
            typed = true;
            if (b->msg_type[m] == NULL)
                b->msg_type[m] = type;
            long event = declared_event(def, type, in->topic);
            if (event < 0)
                continue;

            if (b->n_items == b->cap_items) {
                size_t cap = b->cap_items ? b->cap_items * 2 : 64;
                item_t *grown = realloc(b->items, cap * sizeof *grown);
                if (grown == NULL)
                    return err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
                b->items = grown;
                b->cap_items = cap;
            }
            item_t *item = &b->items[b->n_items++];
            memset(item, 0, sizeof *item);
            item->msg = m;
            item->latest = def;
            item->type = type;
            /* A rejection here is for this process only; others may take it. */
            item->reject = decode_envelope(msg, in, def, (size_t) event, &item->env,
                                           item->reject_detail, sizeof item->reject_detail);
        }
        if (!listened) {
            /* Intake reads a topic no loaded definition reads only for an
             * older version with open instances (intake.c, subscription()):
             * its events cannot be judged until that version is loaded again,
             * so each is kept in steward.rejected, never dropped (the
             * scheduler's blind alert names the topic). */
            b->msg_type[m] = msg->ce_type;
            snprintf(b->msg_detail[m], sizeof b->msg_detail[m],
                     "topic %s is read only by an older version with open instances, which is "
                     "not loaded: load it again to judge its events",
                     in->topic);
            b->msg_reason[m] = DECODE_UNKNOWN_TYPE;
            decode_message_clear(msg);
        }
        if (listened && !typed) {
            /* Name the rule of the first process reading the topic: that is
             * the one a person fixes the producer (or the definition) for. */
            decode_type_source(listener, b->msg_detail[m], sizeof b->msg_detail[m]);
            b->msg_reason[m] = DECODE_MISSING_TYPE;
            decode_message_clear(msg);
        }
    }
    return ERR_OK;
}

/* The arrays of the decode stage, for n messages; false when out of memory. */
static bool batch_alloc(batch_t *b, size_t n)
{
    b->decoded = calloc(n + 1, sizeof *b->decoded);
    b->msg_reason = calloc(n + 1, sizeof *b->msg_reason);
    b->msg_detail = calloc(n + 1, sizeof *b->msg_detail);
    b->msg_part = calloc(n + 1, sizeof *b->msg_part);
    b->msg_type = calloc(n + 1, sizeof *b->msg_type);
    batch_reset(b);
    return b->decoded != NULL && b->msg_reason != NULL && b->msg_detail != NULL &&
           b->msg_part != NULL && b->msg_type != NULL;
}

batch_t *batch_prepare(const batch_ctx_t *ctx, const decode_input_t *msgs, size_t n_msgs,
                       store_partition_t *parts, size_t n_parts, char *errstr, size_t errstr_size)
{
    batch_t *b = calloc(1, sizeof *b);
    if (b == NULL) {
        err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
        return NULL;
    }
    b->msgs = msgs;
    b->n_msgs = n_msgs;
    b->parts = parts;
    b->n_parts = n_parts;
    b->defs_routed = ctx->defs;
    b->limits = &ctx->limits;
    if (!batch_alloc(b, n_msgs)) {
        err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
        batch_free(b);
        return NULL;
    }
    if (batch_route(b, ctx->defs, errstr, errstr_size) != ERR_OK) {
        batch_free(b);
        return NULL;
    }
    return b;
}

/* ---- read ------------------------------------------------------------------ */

/* Builds the sorted, unique set of instances the live items touch. */
static err_class_t batch_slots(batch_t *b, char *errstr, size_t errstr_size)
{
    b->slots = calloc(b->n_items + 1, sizeof *b->slots);
    if (b->slots == NULL)
        return err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
    for (size_t i = 0; i < b->n_items; i++) {
        item_t *item = &b->items[i];
        if (item->reject != DECODE_OK || msg_fenced(b, item->msg))
            continue;
        slot_t *slot = &b->slots[b->n_slots++];
        slot->process = item->latest->process;
        slot->key = item->env.key;
        engine_instance_init(&slot->inst);
    }
    qsort(b->slots, b->n_slots, sizeof *b->slots, slot_compare);
    size_t unique = 0;
    for (size_t i = 0; i < b->n_slots; i++) {
        if (unique > 0 && slot_compare(&b->slots[unique - 1], &b->slots[i]) == 0)
            continue;
        b->slots[unique++] = b->slots[i];
    }
    b->n_slots = unique;
    for (size_t i = 0; i < b->n_items; i++) {
        item_t *item = &b->items[i];
        if (item->reject == DECODE_OK && !msg_fenced(b, item->msg))
            item->slot = find_slot(b, item->latest->process, item->env.key);
    }
    return ERR_OK;
}

/*
 * Whether judging needs all of an instance's vars: only to fill in the
 * commands of an active version. Captures only add to vars, so otherwise
 * the batch keeps just what it captured and the write merges it in.
 */
static bool needs_full_vars(const def_t *def)
{
    return def != NULL && def->mode == DEF_MODE_ACTIVE;
}

static int64_t engine_ms(int64_t ms)
{
    return ms == ROWS_NULL ? ENGINE_NO_DEADLINE : ms;
}

/* store_read_instances()'s callback: one existing instance into its slot. */
static err_class_t read_instance(void *arg, const store_instance_row_t *row, char *errstr,
                                 size_t errstr_size)
{
    batch_t *b = arg;
    slot_t *slot = find_slot(b, row->process, row->key);
    if (slot == NULL)
        return ERR_OK;
    const def_t *def =
        defcache_get(b->ctx->versions, store_conn(b->ctx->store), slot->process, row->version);
    /* An instance this replica cannot judge must not stop intake: its
     * events are kept in steward.rejected, and the scheduler sets the
     * instance aside with an `unloadable` alert naming the version. */
    long state = def != NULL ? def_find_state(def, row->state) : -1;
    if (def == NULL) {
        snprintf(slot->unjudgeable, sizeof slot->unjudgeable,
                 "instance %s runs on version %d of %s, which is neither loaded nor recorded in "
                 "steward.definitions",
                 slot->key, row->version, slot->process);
        return ERR_OK;
    }
    if (state < 0) {
        snprintf(slot->unjudgeable, sizeof slot->unjudgeable,
                 "instance %s is in state '%s', which version %d of %s does not declare", slot->key,
                 row->state, row->version, slot->process);
        return ERR_OK;
    }
    engine_instance_t *inst = &slot->inst;
    slot->def = def;
    inst->exists = true;
    inst->version = row->version;
    inst->state = state;
    inst->started_ms = engine_ms(row->started_ms);
    inst->state_entered_ms = engine_ms(row->entered_ms);
    inst->deadline_ms = engine_ms(row->deadline_ms);
    inst->process_deadline_ms = engine_ms(row->process_deadline_ms);
    inst->overdue = row->overdue;
    inst->attempt = row->attempt;
    if (slot->full_vars && row->vars != NULL)
        inst->vars = json_loads(row->vars, 0, NULL);
    if (inst->vars == NULL)
        inst->vars = json_object();
    inst->events_applied = row->events_applied;
    inst->process_overdue = row->process_overdue;
    inst->step = row->step;
    inst->token = row->token;
    inst->lease_holder = row->lease_holder != NULL ? strdup(row->lease_holder) : NULL;
    inst->lease_expires_ms = engine_ms(row->lease_expires_ms);
    inst->lease_renewed_ms = engine_ms(row->lease_renewed_ms);
    inst->resend_pending = row->resend_pending;
    if (inst->vars == NULL || (row->lease_holder != NULL && inst->lease_holder == NULL))
        return err_set(ERR_FATAL, errstr, errstr_size, "out of memory reading instances");
    return ERR_OK;
}

static err_class_t read_judged(void *arg, const char *process, const char *key,
                               const char *event_id, char *errstr, size_t errstr_size)
{
    slot_t *slot = find_slot(arg, process, key);
    if (slot != NULL && !slot_add_seen(slot, event_id))
        return err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
    return ERR_OK;
}

static err_class_t read_parked(void *arg, const store_parked_row_t *row, char *errstr,
                               size_t errstr_size)
{
    slot_t *slot = find_slot(arg, row->process, row->key);
    if (slot == NULL)
        return ERR_OK;
    parked_t *p = slot_add_parked(slot);
    if (p == NULL)
        return err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
    p->db_id = row->id;
    p->event_id = strdup(row->event_id);
    p->event_type = strdup(row->event_type);
    p->topic = strdup(row->topic);
    p->partition = row->partition;
    p->offset = row->offset;
    p->time_ms = row->event_ms;
    p->payload = json_loads(row->payload, 0, NULL);
    if (p->event_id == NULL || p->event_type == NULL || p->topic == NULL || p->payload == NULL)
        return err_set(ERR_FATAL, errstr, errstr_size, "out of memory reading parked events");
    return ERR_OK;
}

/* store_lock_instances()'s callback: which slots are set aside. */
static err_class_t lock_row(void *arg, const store_lock_row_t *row, char *errstr,
                            size_t errstr_size)
{
    (void) errstr;
    (void) errstr_size;
    batch_t *b = arg;
    slot_t *slot = find_slot(b, row->process, row->key);
    if (slot == NULL)
        return ERR_OK;
    slot->aside = !row->locked;
    slot->has_deferred = row->has_deferred;
    if (row->timed_out) {
        char lock[40];
        snprintf(lock, sizeof lock, "%d/%" PRId32, STORE_LOCK_CLASS, row->objid);
        LOG_WARN("instance lock busy: another session holds it; the instance's events are set "
                 "aside in steward.deferred and judged in order once the lock is free",
                 "process", row->process, "key", row->key, "lock", lock);
        b->n_lock_timeouts++;
    }
    return ERR_OK;
}

/* An instance with deferred events picked up besides the batch's own. */
typedef struct picked {
    batch_t *b;
    slot_t *extra; /* room for BATCH_DRAIN_MAX slots */
    size_t n;
} picked_t;

static err_class_t pick_row(void *arg, const char *process, const char *key, char *errstr,
                            size_t errstr_size)
{
    picked_t *p = arg;
    const def_t *def = def_set_latest(p->b->ctx->defs, process);
    /* A process no longer loaded, or an instance the batch has already. */
    if (def == NULL || find_slot(p->b, process, key) != NULL || p->n == BATCH_DRAIN_MAX)
        return ERR_OK;
    slot_t *slot = &p->extra[p->n];
    memset(slot, 0, sizeof *slot);
    slot->process = def->process;
    if ((slot->owned_key = strdup(key)) == NULL)
        return err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
    slot->key = slot->owned_key;
    slot->has_deferred = true;
    engine_instance_init(&slot->inst);
    p->n++;
    return ERR_OK;
}

/* Takes up to `room` instances with deferred events whose lock is free
 * into the batch's slots. */
static err_class_t batch_pick_deferred(batch_t *b, size_t room, char *errstr, size_t errstr_size)
{
    if (room > BATCH_DRAIN_MAX)
        room = BATCH_DRAIN_MAX;
    if (room == 0)
        return ERR_OK;
    picked_t p = {b, calloc(BATCH_DRAIN_MAX, sizeof(slot_t)), 0};
    if (p.extra == NULL)
        return err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
    err_class_t cls = store_pick_deferred(b->ctx->store, room, pick_row, &p, errstr, errstr_size);
    slot_t *grown =
        cls == ERR_OK && p.n > 0 ? realloc(b->slots, (b->n_slots + p.n + 1) * sizeof *grown) : NULL;
    if (cls == ERR_OK && p.n > 0 && grown == NULL)
        cls = err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
    if (grown != NULL) {
        memcpy(grown + b->n_slots, p.extra, p.n * sizeof *grown);
        b->slots = grown;
        b->n_slots += p.n;
        p.n = 0; /* now owned by the slots */
        qsort(b->slots, b->n_slots, sizeof *b->slots, slot_compare);
        for (size_t i = 0; i < b->n_items; i++) {
            item_t *item = &b->items[i];
            if (item->slot != NULL)
                item->slot = find_slot(b, item->latest->process, item->env.key);
        }
    }
    for (size_t i = 0; i < p.n; i++)
        slot_clear(&p.extra[i]);
    free(p.extra);
    return cls;
}

static err_class_t read_deferred(void *arg, const store_deferred_row_t *row, char *errstr,
                                 size_t errstr_size)
{
    slot_t *slot = find_slot(arg, row->process, row->key);
    if (slot == NULL)
        return ERR_OK;
    if (slot->n_deferred == slot->cap_deferred) {
        size_t cap = slot->cap_deferred ? slot->cap_deferred * 2 : 4;
        deferred_t *grown = realloc(slot->deferred, cap * sizeof *grown);
        if (grown == NULL)
            return err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
        slot->deferred = grown;
        slot->cap_deferred = cap;
    }
    deferred_t *d = &slot->deferred[slot->n_deferred++];
    *d = (deferred_t){
        .db_id = row->id,
        .event_id = strdup(row->event_id),
        .event_type = strdup(row->event_type),
        .topic = strdup(row->topic),
        .partition = row->partition,
        .offset = row->offset,
        .time_ms = row->event_ms,
        .token = row->token,
        .epoch = row->epoch,
        .payload = json_loads(row->payload, JSON_DECODE_ANY, NULL),
    };
    if (d->event_id == NULL || d->event_type == NULL || d->topic == NULL || d->payload == NULL)
        return err_set(ERR_FATAL, errstr, errstr_size, "out of memory reading deferred events");
    return ERR_OK;
}

/*
 * Locks every touched instance, existing or not (a busy one awaited for
 * lock_timeout at most, then set aside), takes up instances with deferred
 * events whose lock is free, then reads in one round what judging the
 * locked ones needs: the instances that exist, their deferred events,
 * which of the event ids each has judged already, and its parked events.
 */
static err_class_t batch_read(batch_t *b, char *errstr, size_t errstr_size)
{
    store_t *store = b->ctx->store;
    size_t room = b->ctx->lock_budget == 0           ? BATCH_DRAIN_MAX
                  : b->ctx->lock_budget > b->n_slots ? b->ctx->lock_budget - b->n_slots
                                                     : 0;
    store_key_t *keys = NULL;
    bool *full = NULL;
    const char **ids = NULL;
    err_class_t cls = ERR_OK;

    keys = calloc(b->n_slots + 1, sizeof *keys);
    if (keys == NULL)
        return err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
    for (size_t i = 0; i < b->n_slots; i++)
        keys[i] = (store_key_t){b->slots[i].process, b->slots[i].key};
    if (b->n_slots > 0 &&
        (cls = store_lock_instances(store, keys, b->n_slots, b->ctx->lock_timeout_ms, lock_row, b,
                                    errstr, errstr_size)) != ERR_OK)
        goto done;
    free(keys);
    keys = NULL;
    /* After the batch's own locks, and only tried: nothing waits while
     * holding these, so the hash order of the waits stays whole. */
    if ((cls = batch_pick_deferred(b, room, errstr, errstr_size)) != ERR_OK)
        goto done;

    size_t n_deferred_ids = 0;
    for (size_t i = 0; i < b->n_items; i++) {
        item_t *item = &b->items[i];
        if (item->slot != NULL && item->slot->aside) {
            item->aside = item->slot;
            item->slot = NULL;
        }
    }
    keys = calloc(b->n_slots + b->n_items + 1, sizeof *keys);
    full = calloc(b->n_slots + 1, sizeof *full);
    if (keys == NULL || full == NULL) {
        cls = err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
        goto done;
    }
    size_t n_keys = 0, n_with_deferred = 0;
    for (size_t i = 0; i < b->n_slots; i++) {
        slot_t *slot = &b->slots[i];
        if (slot->aside)
            continue;
        /* Any active version of the process reads vars: the row says which
         * version the instance runs only once read, and a wrong guess only
         * reads more. */
        for (size_t d = 0; d < b->ctx->defs->n && !slot->full_vars; d++) {
            const def_t *def = b->ctx->defs->defs[d];
            if (strcmp(def->process, slot->process) == 0 && needs_full_vars(def))
                slot->full_vars = true;
        }
        full[n_keys] = slot->full_vars;
        keys[n_keys++] = (store_key_t){slot->process, slot->key};
    }
    if (n_keys == 0)
        goto done;
    if ((cls = store_read_instances(store, keys, full, n_keys, read_instance, b, errstr,
                                    errstr_size)) != ERR_OK)
        goto done;
    for (size_t i = 0; i < b->n_slots; i++) {
        slot_t *slot = &b->slots[i];
        if (!slot->aside && slot->has_deferred)
            keys[n_with_deferred++] = (store_key_t){slot->process, slot->key};
    }
    if (n_with_deferred > 0 &&
        (cls = store_read_deferred(store, keys, n_with_deferred, read_deferred, b, errstr,
                                   errstr_size)) != ERR_OK)
        goto done;

    for (size_t i = 0; i < b->n_slots; i++) {
        slot_t *slot = &b->slots[i];
        if (!slot->aside && slot->def == NULL && slot->unjudgeable[0] == '\0')
            slot->def = def_set_latest(b->ctx->defs, slot->process);
        n_deferred_ids += slot->n_deferred;
    }
    ids = calloc(b->n_items + n_deferred_ids + 1, sizeof *ids);
    store_key_t *id_keys = calloc(b->n_items + n_deferred_ids + 1, sizeof *id_keys);
    if (ids == NULL || id_keys == NULL) {
        free(id_keys);
        cls = err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
        goto done;
    }
    size_t n_ids = 0;
    for (size_t i = 0; i < b->n_slots; i++) {
        slot_t *slot = &b->slots[i];
        for (size_t k = 0; slot->unjudgeable[0] == '\0' && k < slot->n_deferred; k++) {
            id_keys[n_ids] = (store_key_t){slot->process, slot->key};
            ids[n_ids++] = slot->deferred[k].event_id;
        }
    }
    for (size_t i = 0; i < b->n_items; i++) {
        item_t *item = &b->items[i];
        if (item->slot == NULL)
            continue;
        if (item->slot->unjudgeable[0] != '\0') {
            item->reject = DECODE_UNLOADABLE_VERSION;
            snprintf(item->reject_detail, sizeof item->reject_detail, "%s",
                     item->slot->unjudgeable);
            item->slot = NULL;
            continue;
        }
        id_keys[n_ids] = (store_key_t){item->slot->process, item->slot->key};
        ids[n_ids++] = item->env.id;
    }
    cls = store_read_judged(store, id_keys, ids, n_ids, read_judged, b, errstr, errstr_size);
    free(id_keys);
    if (cls != ERR_OK)
        goto done;
    n_keys = 0;
    for (size_t i = 0; i < b->n_slots; i++) {
        if (!b->slots[i].aside)
            keys[n_keys++] = (store_key_t){b->slots[i].process, b->slots[i].key};
    }
    cls = store_read_parked(store, keys, n_keys, read_parked, b, errstr, errstr_size);
done:
    free(keys);
    free(full);
    free(ids);
    return cls;
}

/* ---- judge ----------------------------------------------------------------- */

static int64_t nullable_ms(int64_t ms)
{
    return ms == ENGINE_NO_DEADLINE ? ROWS_NULL : ms;
}

static void add_history(batch_t *b, const slot_t *slot, const char *event_id,
                        const char *event_type, const char *topic, int32_t partition,
                        int64_t offset, int64_t time_ms, const engine_result_t *r, bool replayed,
                        int64_t epoch)
{
    const def_t *def = slot->def;

    rows_add_history(
        &b->history,
        &(rows_history_row_t){
            .process = slot->process,
            .key = slot->key,
            .version = slot->inst.exists ? slot->inst.version : def->version,
            .event_id = event_id,
            .event_type = event_type,
            .topic = topic,
            .partition = partition,
            .offset = offset,
            .event_ms = time_ms,
            .from_state = r->from_state >= 0 ? def->states[r->from_state].name : NULL,
            .to_state = r->to_state >= 0 ? def->states[r->to_state].name : NULL,
            .outcome = engine_outcome_name(r->outcome),
            .replayed = replayed,
            .detail = r->detail[0] ? r->detail : NULL,
            .epoch = epoch,
            .late_by_ms = r->late_by_ms > 0 ? r->late_by_ms : ROWS_NULL,
            .entered_ms = nullable_ms(r->entered_ms),
            .time_in_state_ms = r->time_in_state_ms >= 0 ? r->time_in_state_ms : ROWS_NULL,
            .deadline_late_by_ms = r->deadline_late_by_ms,
        });
    if (r->late_by_ms > 0)
        b->n_late++;
    if (r->time_in_state_ms >= 0 && r->from_state >= 0) {
        if (b->n_stays == b->cap_stays) {
            size_t cap = b->cap_stays > 0 ? b->cap_stays * 2 : 64;
            struct stay *grown = realloc(b->stays, cap * sizeof *grown);
            if (grown != NULL) {
                b->stays = grown;
                b->cap_stays = cap;
            }
        }
        if (b->n_stays < b->cap_stays) /* out of memory: one observation less */
            b->stays[b->n_stays++] =
                (struct stay){slot->process, def->states[r->from_state].name, r->time_in_state_ms};
    }
    b->outcome_counts[r->outcome]++;
}

/*
 * The alerts a judgement opens or resolves: the late event that ends a
 * missed deadline, the terminal state that ends a missed process deadline
 * and any sequence alerts, and an event out of sequence.
 */
static void note_alerts(batch_t *b, const slot_t *slot, const engine_result_t *r, bool was_overdue,
                        bool was_process_overdue, const char *type, const char *event_id)
{
    const def_t *def = slot->def;
    char text[512];

    if (r->outcome == ENGINE_ADVANCED || r->outcome == ENGINE_STARTED) {
        if (was_overdue && r->from_state >= 0) {
            snprintf(text, sizeof text, "%s %s", type, r->detail[0] ? r->detail : "arrived");
            alert_batch_resolve(&b->alerts, ALERT_DEADLINE, slot->process, slot->key,
                                def->states[r->from_state].name, text);
        }
        const char *terminal = def->states[r->to_state].terminal;
        if (terminal != NULL) {
            snprintf(text, sizeof text, "the instance finished in %s (%s)",
                     def->states[r->to_state].name, terminal);
            if (was_process_overdue)
                alert_batch_resolve(&b->alerts, ALERT_PROCESS_DEADLINE, slot->process, slot->key,
                                    NULL, text);
            alert_batch_resolve(&b->alerts, ALERT_SEQUENCE, slot->process, slot->key, NULL, text);
        }
    } else if (r->outcome == ENGINE_UNEXPECTED) {
        long state = slot->inst.exists ? slot->inst.state : -1;
        engine_alert_text_t words;
        json_t *details = engine_sequence_alert(def, slot->process, slot->key,
                                                state >= 0 ? def->states[state].name : NULL, type,
                                                event_id, r->detail, &words);
        alert_batch_open(&b->alerts, ALERT_SEQUENCE, slot->process, slot->key, words.state,
                         words.owner, words.summary, details,
                         words.identity != NULL ? words.identity : words.summary, -1);
        engine_alert_text_clear(&words);
        json_decref(details);
    }
}

/* Queues the command the engine decided on entering a state, in the
 * batch's transaction: committed with the state change or not at all; and
 * cancels what is unsent for the step it left. */
static void queue_command(batch_t *b, slot_t *slot, const engine_result_t *r)
{
    /* Only an active version has commands to leave behind. */
    if (r->outcome == ENGINE_ADVANCED && slot->def->mode == DEF_MODE_ACTIVE)
        cmdq_left(&b->commands, slot->process, slot->key);
    if (r->command.send)
        cmdq_add(&b->commands, &b->alerts, slot->def, slot->key, slot->inst.vars, &r->command);
}

/* The `released` row of a move out of a held lease, beside the event's own. */
static void add_released(batch_t *b, const slot_t *slot, const char *event_id,
                         const char *event_type, const char *topic, int32_t partition,
                         int64_t offset, int64_t time_ms, const engine_result_t *r, bool replayed,
                         int64_t epoch)
{
    if (r->released[0] == '\0')
        return;
    engine_result_t rel = *r;
    rel.outcome = ENGINE_RELEASED;
    rel.to_state = r->from_state;
    rel.late_by_ms = 0;
    rel.deadline_late_by_ms = 0;
    rel.entered_ms = ENGINE_NO_DEADLINE;
    rel.time_in_state_ms = -1;
    snprintf(rel.detail, sizeof rel.detail, "%s", r->released);
    add_history(b, slot, event_id, event_type, topic, partition, offset, time_ms, &rel, replayed,
                epoch);
}

/* Judges the instance's parked events again after it moved, until none
 * moves it further. */
static void replay_parked(batch_t *b, slot_t *slot, int64_t epoch)
{
    bool moved = true;
    while (moved) {
        moved = false;
        for (size_t i = 0; i < slot->n_parked && !moved; i++) {
            parked_t *p = &slot->parked[i];
            if (p->settled)
                continue;
            long event = def_find_event(slot->def, p->event_type);
            bool was_overdue = slot->inst.overdue;
            bool was_process_overdue = slot->inst.process_overdue;
            engine_result_t r;
            if (event < 0) {
                r = engine_undeclared(slot->def, &slot->inst, p->event_type);
            } else {
                engine_event_t ev = {event, p->event_id, p->time_ms, p->payload};
                r = engine_replay(slot->def, &slot->inst, &ev);
            }
            if (r.outcome == ENGINE_PARKED)
                continue;
            p->settled = true;
            add_history(b, slot, p->event_id, p->event_type, p->topic, p->partition, p->offset,
                        p->time_ms, &r, true, epoch);
            add_released(b, slot, p->event_id, p->event_type, p->topic, p->partition, p->offset,
                         p->time_ms, &r, true, epoch);
            note_alerts(b, slot, &r, was_overdue, was_process_overdue, p->event_type, p->event_id);
            if (r.outcome == ENGINE_STARTED || r.outcome == ENGINE_ADVANCED) {
                slot->dirty = true;
                moved = true;
                queue_command(b, slot, &r);
            }
        }
    }
}

/* One event to judge: a message of the batch or a deferred one; all
 * borrowed. */
typedef struct event_view {
    const char *id, *type, *topic;
    int32_t partition;
    int64_t offset, time_ms, token, epoch;
    json_t *data;
} event_view_t;

static err_class_t judge_event(batch_t *b, slot_t *slot, const event_view_t *v, char *errstr,
                               size_t errstr_size)
{
    long event = def_find_event(slot->def, v->type);
    bool seen = slot_seen(slot, v->id);
    bool was_overdue = slot->inst.overdue;
    bool was_process_overdue = slot->inst.process_overdue;
    engine_result_t r;

    if (seen || event >= 0) {
        engine_event_t ev = {event, v->id, v->time_ms, v->data, v->token};
        r = engine_apply(slot->def, &slot->inst, &ev, seen);
    } else {
        r = engine_undeclared(slot->def, &slot->inst, v->type);
    }
    add_history(b, slot, v->id, v->type, v->topic, v->partition, v->offset, v->time_ms, &r, false,
                v->epoch);
    add_released(b, slot, v->id, v->type, v->topic, v->partition, v->offset, v->time_ms, &r, false,
                 v->epoch);
    note_alerts(b, slot, &r, was_overdue, was_process_overdue, v->type, v->id);
    if (!seen && !slot_add_seen(slot, v->id))
        return err_set(ERR_FATAL, errstr, errstr_size, "out of memory");

    if (r.outcome == ENGINE_PARKED) {
        parked_t *p = slot_add_parked(slot);
        if (p == NULL)
            return err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
        p->event_id = strdup(v->id);
        p->event_type = strdup(v->type);
        p->topic = strdup(v->topic);
        p->partition = v->partition;
        p->offset = v->offset;
        p->time_ms = v->time_ms;
        p->payload = json_incref(v->data);
        if (p->event_id == NULL || p->event_type == NULL || p->topic == NULL)
            return err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
    } else if (r.outcome == ENGINE_STARTED || r.outcome == ENGINE_ADVANCED) {
        slot->dirty = true;
        queue_command(b, slot, &r);
        replay_parked(b, slot, v->epoch);
    } else if (r.outcome == ENGINE_CLAIMED || r.outcome == ENGINE_RENEWED) {
        slot->dirty = true; /* the lease moved; the state did not */
    }
    return ERR_OK;
}

static err_class_t judge_item(batch_t *b, item_t *item, char *errstr, size_t errstr_size)
{
    const decode_input_t *in = &b->msgs[item->msg];
    event_view_t v = {
        .id = item->env.id,
        .type = item->type,
        .topic = in->topic,
        .partition = in->partition,
        .offset = in->offset,
        .time_ms = item->env.time_ms,
        .token = item->env.token,
        .epoch = b->parts[b->msg_part[item->msg]].epoch,
        .data = (json_t *) b->decoded[item->msg].data,
    };
    return judge_event(b, item->slot, &v, errstr, errstr_size);
}

/* Judges a locked instance's deferred events, oldest first, before any of
 * the batch's own: they were read earlier. */
static err_class_t judge_deferred(batch_t *b, slot_t *slot, char *errstr, size_t errstr_size)
{
    err_class_t cls = ERR_OK;
    if (slot->aside || slot->def == NULL || slot->unjudgeable[0] != '\0')
        return ERR_OK; /* an unjudgeable instance's deferred events wait */
    for (size_t i = 0; i < slot->n_deferred && cls == ERR_OK; i++) {
        const deferred_t *d = &slot->deferred[i];
        event_view_t v = {
            .id = d->event_id,
            .type = d->event_type,
            .topic = d->topic,
            .partition = d->partition,
            .offset = d->offset,
            .time_ms = d->time_ms,
            .token = d->token,
            .epoch = d->epoch,
            .data = d->payload,
        };
        cls = judge_event(b, slot, &v, errstr, errstr_size);
        rows_add_undeferred(&b->undeferred, &(rows_undeferred_row_t){.id = d->db_id});
    }
    return cls;
}

/* bytes as a new JSON string of hex digits (NULL when out of memory). */
static json_t *hex_string(const void *bytes, size_t len)
{
    char *hex = malloc(2 * len + 1);
    json_t *str = NULL;
    for (size_t k = 0; hex != NULL && k < len; k++)
        sprintf(hex + 2 * k, "%02x", ((const unsigned char *) bytes)[k]);
    if (hex != NULL) {
        hex[2 * len] = '\0';
        str = json_string(hex);
    }
    free(hex);
    return str;
}

/* The message's headers as a JSON array, values as text when they are
 * UTF-8 and as hex otherwise. Returns a new string (free it). */
static char *headers_json(const decode_input_t *in)
{
    json_t *arr = json_array();
    for (size_t i = 0; i < in->n_headers; i++) {
        const decode_header_t *h = &in->headers[i];
        /* A header name is bytes too: text only when it is UTF-8. */
        json_t *obj = json_object();
        if (utf8_valid((const unsigned char *) h->name, strlen(h->name)))
            json_object_set_new(obj, "name", json_string(h->name));
        else
            json_object_set_new(obj, "name_hex", hex_string(h->name, strlen(h->name)));
        if (h->value == NULL) {
            json_object_set_new(obj, "value", json_null());
        } else if (utf8_valid(h->value, h->len) && memchr(h->value, 0, h->len) == NULL) {
            json_object_set_new(obj, "value", json_stringn(h->value, h->len));
        } else {
            json_object_set_new(obj, "value_hex", hex_string(h->value, h->len));
        }
        json_array_append_new(arr, obj);
    }
    char *text = json_dumps(arr, JSON_COMPACT);
    json_decref(arr);
    return text;
}

static void add_rejected(batch_t *b, size_t m, const char *process, decode_reason_t reason,
                         const char *detail)
{
    const decode_input_t *in = &b->msgs[m];
    char *headers = b->bare ? NULL : headers_json(in);

    if (b->n_rejections == b->cap_rejections) {
        size_t cap = b->cap_rejections ? b->cap_rejections * 2 : 8;
        struct rejection *grown = realloc(b->rejections, cap * sizeof *grown);
        if (grown != NULL) {
            b->rejections = grown;
            b->cap_rejections = cap;
        }
    }
    if (b->n_rejections < b->cap_rejections)
        b->rejections[b->n_rejections++] = (struct rejection){m, process, detail, reason};
    rows_add_rejected(&b->rejected, &(rows_rejected_row_t){
                                        .topic = in->topic,
                                        .partition = in->partition,
                                        .offset = in->offset,
                                        .process = process,
                                        .reason = decode_reason_name(reason),
                                        .detail = detail,
                                        .value = {b->bare ? NULL : in->value, in->value_len},
                                        .headers = headers,
                                        .kafka_ms = in->timestamp_ms >= 0 &&
                                                            decode_time_in_range(in->timestamp_ms)
                                                        ? in->timestamp_ms
                                                        : ROWS_NULL,
                                        .epoch = b->parts[b->msg_part[m]].epoch,
                                        .message_key = {b->bare ? NULL : in->key, in->key_len},
                                    });
    free(headers);
    b->reject_counts[reason]++;
}

/* ---- write ----------------------------------------------------------------- */

/* A message for an instance whose lock was not had, into steward.deferred. */
static void add_deferred(batch_t *b, const item_t *item)
{
    const decode_input_t *in = &b->msgs[item->msg];
    const json_t *data = b->decoded[item->msg].data;
    char *payload = data != NULL ? json_dumps(data, JSON_NUMBERS | JSON_ENCODE_ANY) : NULL;
    rows_add_deferred(&b->deferred, &(rows_deferred_row_t){
                                        .process = item->aside->process,
                                        .key = item->aside->key,
                                        .event_id = item->env.id,
                                        .event_type = item->type,
                                        .topic = in->topic,
                                        .partition = in->partition,
                                        .offset = in->offset,
                                        .event_ms = item->env.time_ms,
                                        .payload = payload != NULL ? payload : "null",
                                        .token = item->env.token,
                                        .epoch = b->parts[b->msg_part[item->msg]].epoch,
                                    });
    free(payload);
}

/* Builds every row the batch writes. */
static void batch_rows(batch_t *b)
{
    /* Items were made message by message, so one cursor walks both. */
    size_t item = 0;
    for (size_t m = 0; m < b->n_msgs; m++) {
        size_t first = item;
        while (item < b->n_items && b->items[item].msg == m)
            item++;
        if (msg_fenced(b, m))
            continue;
        b->stats.messages++;
        if (b->msg_reason[m] != DECODE_OK) {
            add_rejected(b, m, NULL, b->msg_reason[m], b->msg_detail[m]);
            continue;
        }
        if (first == item) {
            b->stats.ignored++;
            if (b->ctx->record_unknown) {
                snprintf(b->msg_detail[m], sizeof b->msg_detail[m],
                         "no loaded definition declares type '%.100s' on topic %s",
                         b->msg_type[m] != NULL ? b->msg_type[m] : "(none)", b->msgs[m].topic);
                add_rejected(b, m, NULL, DECODE_UNKNOWN_TYPE, b->msg_detail[m]);
            }
        }
        for (size_t i = first; i < item; i++) {
            if (b->items[i].reject != DECODE_OK)
                add_rejected(b, m, b->items[i].latest->process, b->items[i].reject,
                             b->items[i].reject_detail);
            else if (b->items[i].aside != NULL)
                add_deferred(b, &b->items[i]);
        }
    }

    for (size_t s = 0; s < b->n_slots; s++) {
        slot_t *slot = &b->slots[s];
        for (size_t i = 0; i < slot->n_parked; i++) {
            parked_t *p = &slot->parked[i];
            if (p->db_id > 0 && p->settled) {
                rows_add_unparked(&b->unparked, &(rows_unparked_row_t){.id = p->db_id});
            } else if (p->db_id == 0 && !p->settled) {
                char *payload = json_dumps(p->payload, JSON_NUMBERS);
                rows_add_parked(&b->parked,
                                &(rows_parked_row_t){
                                    .process = slot->process,
                                    .key = slot->key,
                                    .event_id = p->event_id,
                                    .event_type = p->event_type,
                                    .topic = p->topic,
                                    .partition = p->partition,
                                    .offset = p->offset,
                                    .event_ms = p->time_ms,
                                    .payload = payload,
                                    .expires_ms = engine_park_expires_at(slot->def, p->time_ms),
                                });
                free(payload);
            }
        }
        if (!slot->dirty)
            continue;
        const engine_instance_t *inst = &slot->inst;
        char *vars = inst->vars != NULL ? json_dumps(inst->vars, JSON_NUMBERS) : NULL;
        rows_add_instances(
            &b->instances,
            &(rows_instances_row_t){
                .process = slot->process,
                .key = slot->key,
                .version = inst->version,
                .state = slot->def->states[inst->state].name,
                .status = engine_status(slot->def, inst->state),
                .started_ms = inst->started_ms,
                .entered_ms = inst->state_entered_ms,
                .deadline_ms = nullable_ms(inst->deadline_ms),
                .process_deadline_ms = nullable_ms(inst->process_deadline_ms),
                .next_deadline_ms = nullable_ms(engine_next_deadline(slot->def, inst)),
                .overdue = inst->overdue,
                .process_overdue = inst->process_overdue,
                .attempt = inst->attempt,
                .vars = vars != NULL ? vars : "{}",
                .events_applied = inst->events_applied,
                .step = inst->step,
                .token = inst->token,
                .lease_holder = inst->lease_holder,
                .lease_expires_ms = nullable_ms(inst->lease_expires_ms),
                .lease_renewed_ms = nullable_ms(inst->lease_renewed_ms),
                .resend_pending = inst->resend_pending,
            });
        free(vars);
    }

    for (size_t i = 0; i < b->n_parts; i++) {
        const store_partition_t *part = &b->parts[i];
        if (!part->fenced)
            rows_add_offsets(&b->offsets, &(rows_offsets_row_t){
                                              .topic = part->topic,
                                              .partition = part->partition,
                                              .next_offset = part->next_offset,
                                              .watermark_ms = part->watermark_ms,
                                              .epoch = part->epoch,
                                          });
    }
}

/* One statement per table, then what other modules add to the transaction. */
static err_class_t batch_write(batch_t *b, char *errstr, size_t errstr_size)
{
    store_t *store = b->ctx->store;
    err_class_t cls = ERR_OK;

    if (b->history.n > 0 && (cls = store_write_history(store, &b->history, b->n_late > 0, errstr,
                                                       errstr_size)) != ERR_OK)
        return cls;
    if (b->parked.n > 0 &&
        (cls = store_write_parked(store, &b->parked, errstr, errstr_size)) != ERR_OK)
        return cls;
    if (b->unparked.n > 0 &&
        (cls = store_unpark(store, &b->unparked, errstr, errstr_size)) != ERR_OK)
        return cls;
    if (b->rejected.n > 0 &&
        (cls = store_write_rejected(store, &b->rejected, errstr, errstr_size)) != ERR_OK)
        return cls;
    if (b->instances.n > 0 &&
        (cls = store_write_instances(store, &b->instances, errstr, errstr_size)) != ERR_OK)
        return cls;
    if (b->deferred.n > 0 &&
        (cls = store_write_deferred(store, &b->deferred, errstr, errstr_size)) != ERR_OK)
        return cls;
    if (b->undeferred.n > 0 &&
        (cls = store_undefer(store, &b->undeferred, errstr, errstr_size)) != ERR_OK)
        return cls;
    if ((cls = cmdq_write(store_conn(store), &b->commands, errstr, errstr_size)) != ERR_OK)
        return cls;
    if (!alert_batch_empty(&b->alerts)) {
        alert_counts_t counts = {0};
        if ((cls = alert_batch_write(store_conn(store), &b->alerts, b->ctx->routes, &counts, errstr,
                                     errstr_size)) != ERR_OK)
            return cls;
    }
    if (b->offsets.n > 0)
        cls = store_write_offsets(store, &b->offsets, errstr, errstr_size);
    return cls;
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
        if (msg_fenced(b, m) || b->msg_reason[m] != DECODE_OK || first != item)
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
        if ((cls = judge_deferred(b, &b->slots[i], errstr, errstr_size)) != ERR_OK)
            goto done;
    }
    for (size_t i = 0; i < b->n_items; i++) {
        if (b->items[i].slot != NULL &&
            (cls = judge_item(b, &b->items[i], errstr, errstr_size)) != ERR_OK)
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
