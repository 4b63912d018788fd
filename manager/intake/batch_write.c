/*
 * batch_write - the write stage: every row a batch writes, built from its
 * judgements, rejections, deferred and parked events and offsets
 * (rows.h), then one statement per table (store.h) and what the alerts and
 * the command outbox add to the transaction.
 */
#include "manager/intake/batch_int.h"

#include "common/utf8.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Compact, with 15 significant digits: what a double keeps of the decimal a
 * producer wrote (11.53 stays 11.53, not 11.529999999999999). */
#define JSON_NUMBERS (JSON_COMPACT | JSON_REAL_PRECISION(15))

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
    rows_add_deferred(
        &b->deferred,
        &(rows_deferred_row_t){
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
            .traceparent = b->decoded[item->msg].trace == DECODE_TRACE_OK
                               ? b->decoded[item->msg].traceparent
                               : NULL,
            .tracestate = b->decoded[item->msg].tracestate_fate == DECODE_TRACESTATE_OK
                              ? b->decoded[item->msg].tracestate
                              : NULL,
        });
    free(payload);
}

/* Builds every row the batch writes. */
void batch_rows(batch_t *b)
{
    /* Items were made message by message, so one cursor walks both. */
    size_t item = 0;
    for (size_t m = 0; m < b->n_msgs; m++) {
        size_t first = item;
        while (item < b->n_items && b->items[item].msg == m)
            item++;
        if (batch_msg_fenced(b, m))
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
            held_t *p = &slot->parked[i];
            if (p->db_id > 0 && p->settled) {
                rows_add_unparked(&b->unparked, &(rows_unparked_row_t){.id = p->db_id});
            } else if (p->db_id == 0 && !p->settled) {
                char *payload = json_dumps(p->payload, JSON_NUMBERS);
                rows_add_parked(
                    &b->parked,
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
                        .traceparent = p->traceparent[0] != '\0' ? p->traceparent : NULL,
                        .tracestate = p->tracestate[0] != '\0' ? p->tracestate : NULL,
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
                .deadline_ms = batch_nullable_ms(inst->deadline_ms),
                .process_deadline_ms = batch_nullable_ms(inst->process_deadline_ms),
                .next_deadline_ms = batch_nullable_ms(engine_next_deadline(slot->def, inst)),
                .overdue = inst->overdue,
                .process_overdue = inst->process_overdue,
                .attempt = inst->attempt,
                .vars = vars != NULL ? vars : "{}",
                .events_applied = inst->events_applied,
                .step = inst->step,
                .token = inst->token,
                .lease_holder = inst->lease_holder,
                .lease_expires_ms = batch_nullable_ms(inst->lease_expires_ms),
                .lease_renewed_ms = batch_nullable_ms(inst->lease_renewed_ms),
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

/* A table's write (store.h), for the rows built for it. */
typedef err_class_t (*table_write_fn)(store_t *store, rows_t *rows, char *errstr,
                                      size_t errstr_size);

/* One statement per table, then what other modules add to the transaction. */
err_class_t batch_write(batch_t *b, char *errstr, size_t errstr_size)
{
    store_t *store = b->ctx->store;
    /* In this order, after history; the offsets go last, below. */
    const struct {
        rows_t *rows;
        table_write_fn write;
    } tables[] = {
        {&b->parked, store_write_parked},     {&b->unparked, store_unpark},
        {&b->rejected, store_write_rejected}, {&b->instances, store_write_instances},
        {&b->deferred, store_write_deferred}, {&b->undeferred, store_undefer},
    };
    err_class_t cls = ERR_OK;

    if (b->history.n > 0 && (cls = store_write_history(store, &b->history, b->n_late > 0, errstr,
                                                       errstr_size)) != ERR_OK)
        return cls;
    for (size_t i = 0; i < sizeof tables / sizeof *tables; i++) {
        if (tables[i].rows->n > 0 &&
            (cls = tables[i].write(store, tables[i].rows, errstr, errstr_size)) != ERR_OK)
            return cls;
    }
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
