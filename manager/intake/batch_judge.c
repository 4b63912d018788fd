/*
 * batch_judge - the judge stage: the engine over each event of a locked
 * instance, deferred events first, in memory and without I/O; the history
 * rows each judgement makes (and the `released` row of a move out of a
 * held lease); a parked event kept for the replay (batch_replay.c).
 */
#include "manager/intake/batch_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void batch_add_history(batch_t *b, const slot_t *slot, const char *event_id, const char *event_type,
                       const char *topic, int32_t partition, int64_t offset, int64_t time_ms,
                       const engine_result_t *r, bool replayed, int64_t epoch,
                       const char *traceparent, const char *tracestate)
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
            .entered_ms = batch_nullable_ms(r->entered_ms),
            .time_in_state_ms = r->time_in_state_ms >= 0 ? r->time_in_state_ms : ROWS_NULL,
            .deadline_late_by_ms = r->deadline_late_by_ms,
            .traceparent = traceparent,
            .tracestate = tracestate,
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

/* The `released` row of a move out of a held lease, beside the event's own. */
void batch_add_released(batch_t *b, const slot_t *slot, const char *event_id,
                        const char *event_type, const char *topic, int32_t partition,
                        int64_t offset, int64_t time_ms, const engine_result_t *r, bool replayed,
                        int64_t epoch, const char *traceparent, const char *tracestate)
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
    batch_add_history(b, slot, event_id, event_type, topic, partition, offset, time_ms, &rel,
                      replayed, epoch, traceparent, tracestate);
}

/* One event to judge: a message of the batch or a deferred one; all
 * borrowed. */
typedef struct event_view {
    const char *id, *type, *topic;
    int32_t partition;
    int64_t offset, time_ms, token, epoch;
    json_t *data;
    const char *traceparent; /* NULL: none */
    const char *tracestate;  /* NULL: none */
} event_view_t;

static err_class_t judge_event(batch_t *b, slot_t *slot, const event_view_t *v, char *errstr,
                               size_t errstr_size)
{
    long event = def_find_event(slot->def, v->type);
    bool seen = batch_slot_seen(slot, v->id);
    bool was_overdue = slot->inst.overdue;
    bool was_process_overdue = slot->inst.process_overdue;
    engine_result_t r;

    if (seen || event >= 0) {
        engine_event_t ev = {event, v->id, v->time_ms, v->data, v->token};
        r = engine_apply(slot->def, &slot->inst, &ev, seen);
    } else {
        r = engine_undeclared(slot->def, &slot->inst, v->type);
    }
    batch_add_history(b, slot, v->id, v->type, v->topic, v->partition, v->offset, v->time_ms, &r,
                      false, v->epoch, v->traceparent, v->tracestate);
    batch_add_released(b, slot, v->id, v->type, v->topic, v->partition, v->offset, v->time_ms, &r,
                       false, v->epoch, v->traceparent, v->tracestate);
    batch_note_alerts(b, slot, &r, was_overdue, was_process_overdue, v->type, v->id);
    if (!seen && !batch_slot_add_seen(slot, v->id))
        return err_set(ERR_FATAL, errstr, errstr_size, "out of memory");

    if (r.outcome == ENGINE_PARKED) {
        held_t *p = batch_held_add(&slot->parked, &slot->n_parked, &slot->cap_parked);
        if (p == NULL)
            return err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
        p->event_id = strdup(v->id);
        p->event_type = strdup(v->type);
        p->topic = strdup(v->topic);
        p->partition = v->partition;
        p->offset = v->offset;
        p->time_ms = v->time_ms;
        p->payload = json_incref(v->data);
        if (v->traceparent != NULL)
            snprintf(p->traceparent, sizeof p->traceparent, "%s", v->traceparent);
        if (v->tracestate != NULL)
            snprintf(p->tracestate, sizeof p->tracestate, "%s", v->tracestate);
        if (p->event_id == NULL || p->event_type == NULL || p->topic == NULL)
            return err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
    } else if (r.outcome == ENGINE_STARTED || r.outcome == ENGINE_ADVANCED) {
        slot->dirty = true;
        batch_queue_command(b, slot, &r, v->traceparent, v->tracestate);
        batch_replay_parked(b, slot, v->epoch);
    } else if (r.outcome == ENGINE_CLAIMED || r.outcome == ENGINE_RENEWED) {
        slot->dirty = true; /* the lease moved; the state did not */
    }
    return ERR_OK;
}

err_class_t batch_judge_item(batch_t *b, item_t *item, char *errstr, size_t errstr_size)
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
        .traceparent = b->decoded[item->msg].trace == DECODE_TRACE_OK
                           ? b->decoded[item->msg].traceparent
                           : NULL,
        .tracestate = b->decoded[item->msg].tracestate_fate == DECODE_TRACESTATE_OK
                          ? b->decoded[item->msg].tracestate
                          : NULL,
    };
    return judge_event(b, item->slot, &v, errstr, errstr_size);
}

/* Judges a locked instance's deferred events, oldest first, before any of
 * the batch's own: they were read earlier. */
err_class_t batch_judge_deferred(batch_t *b, slot_t *slot, char *errstr, size_t errstr_size)
{
    err_class_t cls = ERR_OK;
    if (slot->aside || slot->def == NULL || slot->unjudgeable[0] != '\0')
        return ERR_OK; /* an unjudgeable instance's deferred events wait */
    for (size_t i = 0; i < slot->n_deferred && cls == ERR_OK; i++) {
        const held_t *d = &slot->deferred[i];
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
            .traceparent = d->traceparent[0] != '\0' ? d->traceparent : NULL,
            .tracestate = d->tracestate[0] != '\0' ? d->tracestate : NULL,
        };
        cls = judge_event(b, slot, &v, errstr, errstr_size);
        rows_add_undeferred(&b->undeferred, &(rows_undeferred_row_t){.id = d->db_id});
    }
    return cls;
}
