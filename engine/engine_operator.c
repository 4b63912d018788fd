/*
 * engine_operator - what a person does to an instance, judged as the
 * engine judges an event: a re-send (steward retry), a move (steward
 * move), a close (steward close). See engine.h.
 */
#include "engine/engine.h"
#include "engine/engine_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* The state of an instance an operator may act on (it exists and has not
 * finished), or NULL with the reason in detail. */
static const def_state_t *operable_state(const def_t *def, const engine_instance_t *inst,
                                         char *detail, size_t detail_size)
{
    if (!inst->exists || inst->state < 0 || (size_t) inst->state >= def->n_states) {
        snprintf(detail, detail_size, "the instance does not exist");
        return NULL;
    }
    const def_state_t *st = &def->states[inst->state];
    if (st->terminal != NULL) {
        snprintf(detail, detail_size, "the instance already finished (%s in %s)", st->terminal,
                 st->name);
        return NULL;
    }
    return st;
}

bool engine_operator_resend(const def_t *def, engine_instance_t *inst, int64_t now_ms,
                            engine_command_t *cmd, char *detail, size_t detail_size)
{
    memset(cmd, 0, sizeof *cmd);
    const def_state_t *st = operable_state(def, inst, detail, detail_size);
    if (st == NULL)
        return false;
    if (def->mode != DEF_MODE_ACTIVE) {
        snprintf(detail, detail_size,
                 "version %d of %s is in shadow mode: Steward only observes it and sends no "
                 "commands",
                 def->version, def->process);
        return false;
    }
    if (st->command == NULL) {
        snprintf(detail, detail_size, "state %s of %s version %d has no command to send", st->name,
                 def->process, def->version);
        return false;
    }
    inst->attempt++;
    inst->resend_pending = false;
    inst->overdue = false;
    engine_lease_clear(inst);
    *cmd = engine_plan_send(def, inst, true);
    inst->deadline_ms =
        st->deadline_ms > 0 ? time_add(now_ms, st->deadline_ms) : ENGINE_NO_DEADLINE;
    snprintf(detail, detail_size, "%s re-sent by an operator (attempt %d, token %" PRId64 ")",
             st->command->type, cmd->attempt, cmd->token);
    return true;
}

bool engine_operator_move(const def_t *def, engine_instance_t *inst, long state, int64_t now_ms,
                          engine_command_t *cmd, char *detail, size_t detail_size)
{
    memset(cmd, 0, sizeof *cmd);
    if (operable_state(def, inst, detail, detail_size) == NULL)
        return false;
    if (state < 0 || (size_t) state >= def->n_states || def->states[state].terminal != NULL) {
        snprintf(detail, detail_size, "not a non-terminal state of %s version %d", def->process,
                 def->version);
        return false;
    }
    engine_enter(def, inst, state, now_ms);
    *cmd = engine_plan_send(def, inst, false);
    if (cmd->send)
        snprintf(detail, detail_size, "%s sent on entry (step %d, token %" PRId64 ")",
                 def->states[state].command->type, cmd->step, cmd->token);
    else
        detail[0] = '\0';
    return true;
}

bool engine_operator_close(const def_t *def, engine_instance_t *inst, long state, int64_t now_ms,
                           const char **status, char *detail, size_t detail_size)
{
    *status = NULL;
    if (operable_state(def, inst, detail, detail_size) == NULL)
        return false;
    if (state < 0 || (size_t) state >= def->n_states || def->states[state].terminal == NULL) {
        snprintf(detail, detail_size, "not a terminal state of %s version %d", def->process,
                 def->version);
        return false;
    }
    engine_enter(def, inst, state, now_ms);
    *status = def->states[state].terminal;
    detail[0] = '\0';
    return true;
}
