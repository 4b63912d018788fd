/*
 * engine_operator - what a person does to an instance, judged as the
 * engine judges an event: a re-send (steward retry), a move (steward
 * move), a close (steward close), an upgrade to a newer version (steward
 * upgrade). See engine.h.
 */
#include "engine/engine.h"
#include "engine/engine_int.h"

#include "common/utf8.h"
#include "definitions/duration.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
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

/* ---- an upgrade ------------------------------------------------------------- */

/* The state of the newer version `map` sends `name` to: the one it names
 * for `name`, else `name` itself. */
static const char *mapped_name(const engine_upgrade_map_t *map, const char *name)
{
    for (size_t i = 0; map != NULL && i < map->n; i++)
        if (strcmp(map->from[i], name) == 0)
            return map->to[i];
    return name;
}

bool engine_upgrade_targets(const def_t *from, const def_t *to, const engine_upgrade_map_t *map,
                            const bool *only, long *targets, char *why, size_t why_size)
{
    bool allow_terminal = map != NULL && map->allow_terminal;
    for (size_t s = 0; s < from->n_states; s++)
        targets[s] = -1;
    for (size_t s = 0; s < from->n_states; s++) {
        const def_state_t *st = &from->states[s];
        if (st->terminal != NULL || (only != NULL && !only[s]))
            continue;
        const char *name = mapped_name(map, st->name);
        long t = def_find_state(to, name);
        if (t < 0 && name == st->name) {
            snprintf(why, why_size,
                     "version %d of %s has no state %s, which instances of version %d may be "
                     "in: map it to one (--map %s=STATE)",
                     to->version, to->process, st->name, from->version, st->name);
            return false;
        }
        if (t < 0) {
            snprintf(why, why_size, "--map %s=%s: version %d of %s has no state %s", st->name, name,
                     to->version, to->process, name);
            return false;
        }
        if (to->states[t].terminal != NULL && !allow_terminal) {
            snprintf(why, why_size,
                     "%s of version %d would go to %s, a terminal state of version %d: its "
                     "instances would finish (as %s); map it to a non-terminal state, or allow "
                     "it (--allow-terminal)",
                     st->name, from->version, to->states[t].name, to->version,
                     to->states[t].terminal);
            return false;
        }
        targets[s] = t;
    }
    return true;
}

/*
 * When the instance's current attempt began: the entry into its state, or
 * for a re-sent attempt (which has the state's whole deadline from its
 * send) the send, as its deadline tells it; never before the entry. A
 * re-send waiting out its backoff waits from the deadline that was missed.
 */
static int64_t attempt_began(const def_t *def, const engine_instance_t *inst)
{
    const def_state_t *st = &def->states[inst->state];
    if (inst->deadline_ms == ENGINE_NO_DEADLINE || st->deadline_ms <= 0)
        return inst->state_entered_ms;
    int64_t end = inst->deadline_ms;
    if (inst->resend_pending)
        end = time_sub(end, engine_retry_backoff(def, inst->state, inst->attempt + 1));
    int64_t began = time_sub(end, st->deadline_ms);
    return began > inst->state_entered_ms ? began : inst->state_entered_ms;
}

/* Whether `deadline_ms` has passed at `judge_ms` (at == deadline counts). */
static bool passed(int64_t deadline_ms, int64_t judge_ms)
{
    return deadline_ms != ENGINE_NO_DEADLINE && deadline_ms <= judge_ms;
}

/* Appends to the detail (cut when full, on a character boundary). */
static void say(char *buf, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void say(char *buf, size_t size, const char *fmt, ...)
{
    size_t len = strlen(buf);
    va_list ap;
    va_start(ap, fmt);
    if (len + 1 < size)
        vsnprintf(buf + len, size - len, fmt, ap);
    va_end(ap);
}

/* "; deadline 1h -> 15m" when the figures differ; "none" for no deadline. */
static void say_change(char *buf, size_t size, const char *what, int64_t before_ms,
                       int64_t after_ms)
{
    if (before_ms == after_ms)
        return;
    char a[32] = "none", b[32] = "none";
    if (before_ms > 0)
        duration_format(before_ms, a, sizeof a);
    if (after_ms > 0)
        duration_format(after_ms, b, sizeof b);
    say(buf, size, "; %s %s -> %s", what, a, b);
}

/* What the scheduler's next pass, at `judge_ms`, does to the instance as
 * the upgrade leaves it: judged on a copy, which keeps nothing. */
static void probe_due(const def_t *to, const engine_instance_t *inst, int64_t judge_ms,
                      int64_t now_ms, engine_upgrade_t *up)
{
    engine_instance_t probe = *inst;
    probe.vars = NULL;
    probe.lease_holder = inst->lease_holder != NULL ? strdup(inst->lease_holder) : NULL;
    engine_due_t d = engine_judge_due(to, &probe, judge_ms, 0, now_ms);
    if (d.n > 0) {
        up->due = true;
        up->due_kind = d.actions[0].kind;
        up->due_ms = d.actions[0].deadline_ms;
    } else if (probe.resend_pending) {
        /* The deadline passed with attempts left: the re-send waits out
         * its backoff from the pass. */
        up->due = true;
        up->due_kind = ENGINE_DUE_RESEND;
        up->due_ms = inst->deadline_ms;
    }
    engine_instance_clear(&probe);
}

bool engine_operator_upgrade(const def_t *from, const def_t *to, engine_instance_t *inst,
                             long to_state, bool send_current, int64_t watermark_ms, int64_t now_ms,
                             engine_upgrade_t *up)
{
    memset(up, 0, sizeof *up);
    up->to_state = -1;
    up->due_kind = ENGINE_DUE_N_KINDS;
    up->due_ms = ENGINE_NO_DEADLINE;
    const def_state_t *st = operable_state(from, inst, up->detail, sizeof up->detail);
    if (st == NULL)
        return false;
    if (strcmp(from->process, to->process) != 0 || to->version <= from->version) {
        snprintf(up->detail, sizeof up->detail,
                 "version %d of %s is not newer than version %d of %s", to->version, to->process,
                 from->version, from->process);
        return false;
    }
    if (to_state < 0 || (size_t) to_state >= to->n_states) {
        snprintf(up->detail, sizeof up->detail, "not a state of %s version %d", to->process,
                 to->version);
        return false;
    }
    const def_state_t *next = &to->states[to_state];
    int64_t judge_ms =
        watermark_ms == ENGINE_NO_DEADLINE ? now_ms : engine_judge_time(watermark_ms, now_ms);

    up->to_state = to_state;
    up->deadline_before_ms = inst->deadline_ms;
    up->process_deadline_before_ms = inst->process_deadline_ms;
    up->promoted = from->mode != DEF_MODE_ACTIVE && to->mode == DEF_MODE_ACTIVE;
    up->cancel_unsent = to->mode != DEF_MODE_ACTIVE;
    snprintf(up->detail, sizeof up->detail, "from version %d (%s) to version %d (%s)",
             from->version, st->name, to->version, next->name);
    inst->version = to->version;

    if (next->terminal != NULL) {
        /* Finished, as a close finishes it. */
        engine_enter(to, inst, to_state, now_ms);
        up->status = next->terminal;
        up->resolve_all = up->cancel_unsent = true;
        up->deadline_after_ms = ENGINE_NO_DEADLINE;
        up->process_deadline_after_ms = inst->process_deadline_ms;
        say(up->detail, sizeof up->detail, ": finished as %s", next->terminal);
        utf8_scrub(up->detail);
        return true;
    }

    up->status = "active";
    int64_t began = attempt_began(from, inst);
    inst->state = to_state;
    inst->resend_pending = false;
    inst->deadline_ms =
        next->deadline_ms > 0 ? time_add(began, next->deadline_ms) : ENGINE_NO_DEADLINE;
    inst->process_deadline_ms =
        to->deadline_ms > 0 ? time_add(inst->started_ms, to->deadline_ms) : ENGINE_NO_DEADLINE;
    if (up->promoted && send_current && next->command != NULL) {
        /* The step's first send, unless the instance ran on an active
         * version before and this step may have been sent: then the next
         * attempt, so no command id is used twice. */
        if (inst->token > 0)
            inst->attempt++;
        up->command = engine_plan_send(to, inst, true);
        inst->deadline_ms =
            next->deadline_ms > 0 ? time_add(now_ms, next->deadline_ms) : ENGINE_NO_DEADLINE;
    }

    bool was = inst->overdue, process_was = inst->process_overdue;
    inst->overdue = was && passed(inst->deadline_ms, judge_ms);
    inst->process_overdue = process_was && passed(inst->process_deadline_ms, judge_ms);
    up->resolve_deadline = was && !inst->overdue;
    up->resolve_process_deadline = process_was && !inst->process_overdue;

    if (next->lease == NULL) {
        engine_lease_clear(inst);
    } else if (inst->lease_renewed_ms != ENGINE_NO_DEADLINE) {
        /* As the last claim or renewal would have set it. */
        int64_t until = time_add(inst->lease_renewed_ms, next->lease->duration_ms);
        if (inst->deadline_ms != ENGINE_NO_DEADLINE && !inst->overdue && until > inst->deadline_ms)
            until = inst->deadline_ms > inst->lease_renewed_ms ? inst->deadline_ms
                                                               : inst->lease_renewed_ms;
        inst->lease_expires_ms = until;
    }
    up->deadline_after_ms = inst->deadline_ms;
    up->process_deadline_after_ms = inst->process_deadline_ms;

    say_change(up->detail, sizeof up->detail, "deadline", st->deadline_ms, next->deadline_ms);
    say_change(up->detail, sizeof up->detail, "process deadline", from->deadline_ms,
               to->deadline_ms);
    if (up->command.send)
        say(up->detail, sizeof up->detail,
            "; promoted to active: %s sent now (step %d, attempt %d, token %" PRId64 ")",
            next->command->type, up->command.step, up->command.attempt, up->command.token);
    else if (up->promoted)
        say(up->detail, sizeof up->detail,
            "; promoted to active: nothing sent now, the next state's command on entry");
    probe_due(to, inst, judge_ms, now_ms, up);
    utf8_scrub(up->detail);
    return true;
}
