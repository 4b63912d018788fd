/*
 * batch_effects - what a judgement alerts or commands, inside the batch's
 * transaction: the alerts it opens or resolves (alerts.h) and, in active
 * mode, the command it queues on entering a state and the unsent ones it
 * cancels on leaving one (cmdqueue.h).
 */
#include "manager/intake/batch_int.h"

#include <stdio.h>

/*
 * The alerts a judgement opens or resolves: the late event that ends a
 * missed deadline, the terminal state that ends a missed process deadline
 * and any sequence alerts, and an event out of sequence.
 */
void batch_note_alerts(batch_t *b, const slot_t *slot, const engine_result_t *r, bool was_overdue,
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
 * cancels what is unsent for the step it left. The command continues the
 * trace of the event that entered the state. */
void batch_queue_command(batch_t *b, slot_t *slot, const engine_result_t *r,
                         const char *traceparent, const char *tracestate)
{
    /* Only an active version has commands to leave behind. */
    if (r->outcome == ENGINE_ADVANCED && slot->def->mode == DEF_MODE_ACTIVE)
        cmdq_left(&b->commands, slot->process, slot->key);
    /* The event decided it: its trace, or none (never an older one). */
    cmdq_trace_t trace = {.traceparent = traceparent, .tracestate = tracestate};
    if (r->command.send)
        cmdq_add(&b->commands, &b->alerts, slot->def, slot->key, slot->inst.vars, &r->command,
                 &trace);
}
