/*
 * batch_read - the read stage: the advisory locks of every instance a
 * batch touches (a busy one awaited for lock_timeout at most, then set
 * aside), instances with deferred events whose lock is free taken up
 * besides, and one round of reads for the locked ones: the instances,
 * their deferred events, the event ids already judged, parked events.
 * The SQL is store's (store.h); this file fills the slots from it.
 */
#include "manager/intake/batch_int.h"

#include "common/log.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The instances with deferred events one batch takes up besides its own,
 * at most: judging them is a few rows each, and the lock budget counts
 * them too. */
#define BATCH_DRAIN_MAX 100

/* Builds the sorted, unique set of instances the live items touch. */
err_class_t batch_slots(batch_t *b, char *errstr, size_t errstr_size)
{
    b->slots = calloc(b->n_items + 1, sizeof *b->slots);
    if (b->slots == NULL)
        return err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
    for (size_t i = 0; i < b->n_items; i++) {
        item_t *item = &b->items[i];
        if (item->reject != DECODE_OK || batch_msg_fenced(b, item->msg))
            continue;
        slot_t *slot = &b->slots[b->n_slots++];
        slot->process = item->latest->process;
        slot->key = item->env.key;
        engine_instance_init(&slot->inst);
    }
    qsort(b->slots, b->n_slots, sizeof *b->slots, batch_slot_compare);
    size_t unique = 0;
    for (size_t i = 0; i < b->n_slots; i++) {
        if (unique > 0 && batch_slot_compare(&b->slots[unique - 1], &b->slots[i]) == 0)
            continue;
        b->slots[unique++] = b->slots[i];
    }
    b->n_slots = unique;
    for (size_t i = 0; i < b->n_items; i++) {
        item_t *item = &b->items[i];
        if (item->reject == DECODE_OK && !batch_msg_fenced(b, item->msg))
            item->slot = batch_find_slot(b, item->latest->process, item->env.key);
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
    slot_t *slot = batch_find_slot(b, row->process, row->key);
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
    slot_t *slot = batch_find_slot(arg, process, key);
    if (slot != NULL && !batch_slot_add_seen(slot, event_id))
        return err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
    return ERR_OK;
}

/*
 * One row of steward.parked or steward.deferred into its slot's parked or
 * deferred events. A deferred event's data may be any JSON value, as
 * add_deferred() wrote it; a parked one's is what a message carried.
 */
static err_class_t read_held(batch_t *b, const store_event_row_t *row, bool deferred, char *errstr,
                             size_t errstr_size)
{
    slot_t *slot = batch_find_slot(b, row->process, row->key);
    if (slot == NULL)
        return ERR_OK;
    held_t *h = deferred ? batch_held_add(&slot->deferred, &slot->n_deferred, &slot->cap_deferred)
                         : batch_held_add(&slot->parked, &slot->n_parked, &slot->cap_parked);
    if (h == NULL)
        return err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
    *h = (held_t){
        .db_id = row->id,
        .event_id = strdup(row->event_id),
        .event_type = strdup(row->event_type),
        .topic = strdup(row->topic),
        .partition = row->partition,
        .offset = row->offset,
        .time_ms = row->event_ms,
        .token = row->token,
        .epoch = row->epoch,
        .payload = json_loads(row->payload, deferred ? JSON_DECODE_ANY : 0, NULL),
    };
    if (row->traceparent != NULL && strlen(row->traceparent) == DECODE_TRACEPARENT_LEN)
        memcpy(h->traceparent, row->traceparent, DECODE_TRACEPARENT_LEN + 1);
    if (h->traceparent[0] != '\0' && row->tracestate != NULL &&
        strlen(row->tracestate) <= DECODE_TRACESTATE_MAX)
        snprintf(h->tracestate, sizeof h->tracestate, "%s", row->tracestate);
    if (h->event_id == NULL || h->event_type == NULL || h->topic == NULL || h->payload == NULL)
        return err_set(ERR_FATAL, errstr, errstr_size, "out of memory reading %s events",
                       deferred ? "deferred" : "parked");
    return ERR_OK;
}

static err_class_t read_parked(void *arg, const store_event_row_t *row, char *errstr,
                               size_t errstr_size)
{
    return read_held(arg, row, false, errstr, errstr_size);
}

/* store_lock_instances()'s callback: which slots are set aside. */
static err_class_t lock_row(void *arg, const store_lock_row_t *row, char *errstr,
                            size_t errstr_size)
{
    (void) errstr;
    (void) errstr_size;
    batch_t *b = arg;
    slot_t *slot = batch_find_slot(b, row->process, row->key);
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
    if (def == NULL || batch_find_slot(p->b, process, key) != NULL || p->n == BATCH_DRAIN_MAX)
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
        qsort(b->slots, b->n_slots, sizeof *b->slots, batch_slot_compare);
        for (size_t i = 0; i < b->n_items; i++) {
            item_t *item = &b->items[i];
            if (item->slot != NULL)
                item->slot = batch_find_slot(b, item->latest->process, item->env.key);
        }
    }
    for (size_t i = 0; i < p.n; i++)
        batch_slot_clear(&p.extra[i]);
    free(p.extra);
    return cls;
}

static err_class_t read_deferred(void *arg, const store_event_row_t *row, char *errstr,
                                 size_t errstr_size)
{
    return read_held(arg, row, true, errstr, errstr_size);
}

/*
 * Locks every touched instance, existing or not (a busy one awaited for
 * lock_timeout at most, then set aside), takes up instances with deferred
 * events whose lock is free, then reads in one round what judging the
 * locked ones needs: the instances that exist, their deferred events,
 * which of the event ids each has judged already, and its parked events.
 */
err_class_t batch_read(batch_t *b, char *errstr, size_t errstr_size)
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
