/*
 * batch_decode - the decode stage (batch_prepare()): every message decoded
 * once and routed to each process that declares its type on its topic,
 * with that process's envelope read. Pure CPU, no I/O: it may run while
 * the previous batch's transaction does. See batch.h.
 */
#include "manager/intake/batch.h"

#include "manager/intake/batch_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* How the topic's values are framed: confluent_json when a process reading
 * it says so (it reads plain JSON too; each process still refuses framed
 * values it did not declare, in decode_envelope()). */
static def_format_t topic_format(const def_set_t *defs, const char *topic)
{
    for (size_t d = 0; d < defs->n; d++) {
        const def_t *def = defs->defs[d];
        const def_event_t *ev = def_topic_event(def, topic);
        if (ev != NULL && def_set_latest(defs, def->process) == def &&
            ev->format == DEF_FORMAT_CONFLUENT_JSON)
            return DEF_FORMAT_CONFLUENT_JSON;
    }
    return DEF_FORMAT_JSON;
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
        b->msg_reason[m] = decode_message_as(in, b->limits, topic_format(defs, in->topic), msg,
                                             b->msg_detail[m], sizeof b->msg_detail[m]);
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
            decode_type_source(listener, in->topic, b->msg_detail[m], sizeof b->msg_detail[m]);
            b->msg_reason[m] = DECODE_MISSING_TYPE;
            decode_message_clear(msg);
        }
    }
    return ERR_OK;
}

/* The arrays of the decode stage, for n messages; false when out of memory. */
bool batch_alloc(batch_t *b, size_t n)
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
