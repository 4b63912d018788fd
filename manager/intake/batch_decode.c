/*
 * batch_decode - the decode stage (batch_prepare()): every message decoded
 * once and routed to each process that declares its type on its topic,
 * with that process's envelope read. Pure CPU, no I/O: it may run while
 * the previous batch's transaction does. See batch.h.
 */
#include "manager/intake/batch.h"

#include "manager/intake/batch_int.h"

#include "formats/format_confluent.h"

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

/* How the topic's values are framed: confluent_avro or confluent_json
 * when a process reading it says so, Avro first (either reads plain JSON
 * too; each process still refuses framed values it did not declare so,
 * in decode_envelope()). */
static def_format_t topic_format(const def_set_t *defs, const char *topic)
{
    def_format_t format = DEF_FORMAT_JSON;
    for (size_t d = 0; d < defs->n; d++) {
        const def_t *def = defs->defs[d];
        const def_event_t *ev = def_topic_event(def, topic);
        if (ev != NULL && def_set_latest(defs, def->process) == def &&
            ev->format != DEF_FORMAT_JSON && format != DEF_FORMAT_CONFLUENT_AVRO)
            format = ev->format;
    }
    return format;
}

/*
 * Decodes a framed value of a confluent_avro topic with its writer
 * schema. With fetch false (the decode stage: no I/O) a schema not cached
 * leaves the message awaiting (*awaiting true); with fetch true the
 * registry is asked, and its being unavailable is ERR_TRANSIENT.
 */
static err_class_t decode_avro(batch_t *b, size_t m, uint32_t id, bool fetch, bool *awaiting,
                               char *errstr, size_t errstr_size)
{
    const format_avro_schema_t *schema = NULL;
    char *detail = b->msg_detail[m];
    size_t detail_size = sizeof b->msg_detail[m];
    *awaiting = false;
    switch (schemas_get(b->schemas, id, fetch, &schema, detail, detail_size)) {
    case SCHEMAS_AVRO:
        b->msg_reason[m] = decode_message_avro(&b->msgs[m], b->limits, schema, &b->decoded[m],
                                               detail, detail_size);
        schemas_release(b->schemas, id, schema);
        return ERR_OK;
    case SCHEMAS_NOT_FOUND:
        b->msg_reason[m] = DECODE_UNKNOWN_SCHEMA;
        return ERR_OK;
    case SCHEMAS_WRONG_TYPE:
        b->msg_reason[m] = DECODE_UNSUPPORTED_SCHEMA_TYPE;
        return ERR_OK;
    case SCHEMAS_INVALID:
        b->msg_reason[m] = DECODE_INVALID_AVRO;
        return ERR_OK;
    case SCHEMAS_UNAVAILABLE:
        break;
    }
    if (!fetch) {
        *awaiting = true;
        detail[0] = '\0';
        return ERR_OK;
    }
    return err_set(ERR_TRANSIENT, errstr, errstr_size,
                   "the schema registry is unavailable; the batch waits: %s", detail);
}

/* Decodes every message and routes it to the processes that declare it.
 * Runs before the transaction; pure CPU unless `fetch` (see decode_avro()). */
static err_class_t batch_route(batch_t *b, const def_set_t *defs, bool fetch, char *errstr,
                               size_t errstr_size)
{
    for (size_t m = 0; m < b->n_msgs; m++) {
        const decode_input_t *in = &b->msgs[m];
        decode_message_t *msg = &b->decoded[m];

        b->msg_part[m] = store_partition_index(b->parts, b->n_parts, in->topic, in->partition);
        if (b->msg_part[m] == SIZE_MAX)
            return err_set(ERR_FATAL, errstr, errstr_size,
                           "internal error: message from %s[%" PRId32 "] has no partition entry",
                           in->topic, in->partition);
        def_format_t format = topic_format(defs, in->topic);
        uint32_t schema_id;
        const void *payload;
        size_t payload_len;
        if (format == DEF_FORMAT_CONFLUENT_AVRO && b->schemas != NULL &&
            in->value_len <= b->limits->max_bytes &&
            format_confluent_frame(in->value, in->value_len, &schema_id, &payload, &payload_len)) {
            bool awaiting;
            err_class_t cls = decode_avro(b, m, schema_id, fetch, &awaiting, errstr, errstr_size);
            if (cls != ERR_OK)
                return cls;
            if (awaiting) {
                b->n_awaiting++;
                continue;
            }
        } else {
            b->msg_reason[m] = decode_message_as(in, b->limits, format, msg, b->msg_detail[m],
                                                 sizeof b->msg_detail[m]);
        }
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
    b->schemas = ctx->schemas;
    if (!batch_alloc(b, n_msgs)) {
        err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
        batch_free(b);
        return NULL;
    }
    if (batch_route(b, ctx->defs, false, errstr, errstr_size) != ERR_OK) {
        batch_free(b);
        return NULL;
    }
    return b;
}

err_class_t batch_decode_awaiting(batch_t *b, char *errstr, size_t errstr_size)
{
    /* The schemas first, so that nothing is undone while one is missing. */
    for (size_t m = 0; m < b->n_msgs; m++) {
        uint32_t id;
        const void *payload;
        size_t payload_len;
        const format_avro_schema_t *schema;
        char detail[256];
        if (b->msg_reason[m] != DECODE_OK || b->decoded[m].value != NULL ||
            !format_confluent_frame(b->msgs[m].value, b->msgs[m].value_len, &id, &payload,
                                    &payload_len))
            continue;
        if (schemas_get(b->schemas, id, true, &schema, detail, sizeof detail) ==
            SCHEMAS_UNAVAILABLE)
            return err_set(ERR_TRANSIENT, errstr, errstr_size,
                           "the schema registry is unavailable; the batch waits: %s", detail);
        schemas_release(b->schemas, id, schema);
    }
    /* Then the whole batch again, in order: items must follow the messages'. */
    for (size_t m = 0; m < b->n_msgs; m++) {
        decode_message_clear(&b->decoded[m]);
        b->msg_reason[m] = DECODE_OK;
        b->msg_detail[m][0] = '\0';
        b->msg_type[m] = NULL;
    }
    for (size_t i = 0; i < b->n_items; i++)
        decode_envelope_clear(&b->items[i].env);
    b->n_items = 0;
    b->n_awaiting = 0;
    err_class_t cls = batch_route(b, b->defs_routed, true, errstr, errstr_size);
    if (cls != ERR_OK)
        b->n_awaiting = 1; /* routed in part: the next try starts over */
    return cls;
}
