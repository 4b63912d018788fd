/*
 * batch_replay - parked events judged again: once an instance moves, each
 * event parked for it (read from steward.parked or parked by this batch)
 * is offered to the engine again, until none moves it further. A settled
 * one leaves steward.parked in the write stage.
 */
#include "manager/intake/batch_int.h"

/* Judges the instance's parked events again after it moved, until none
 * moves it further. */
void batch_replay_parked(batch_t *b, slot_t *slot, int64_t epoch)
{
    bool moved = true;
    while (moved) {
        moved = false;
        for (size_t i = 0; i < slot->n_parked && !moved; i++) {
            held_t *p = &slot->parked[i];
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
            const char *trace = p->traceparent[0] != '\0' ? p->traceparent : NULL;
            const char *state = p->tracestate[0] != '\0' ? p->tracestate : NULL;
            batch_add_history(b, slot, p->event_id, p->event_type, p->topic, p->partition,
                              p->offset, p->time_ms, &r, true, epoch, trace, state);
            batch_add_released(b, slot, p->event_id, p->event_type, p->topic, p->partition,
                               p->offset, p->time_ms, &r, true, epoch, trace, state);
            batch_note_alerts(b, slot, &r, was_overdue, was_process_overdue, p->event_type,
                              p->event_id);
            if (r.outcome == ENGINE_STARTED || r.outcome == ENGINE_ADVANCED) {
                slot->dirty = true;
                moved = true;
                batch_queue_command(b, slot, &r, trace, state);
            }
        }
    }
}
