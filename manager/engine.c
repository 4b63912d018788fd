/*
 * engine - the pure state machine of one instance; see engine.h.
 */
#include "manager/engine.h"

#include "definitions/duration.h"
#include "definitions/jsonptr.h"
#include "manager/utf8.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const outcome_names[ENGINE_N_OUTCOMES] = {
    "started", "advanced", "duplicate", "parked", "unexpected", "late", "violation",
};

/*
 * Time sums that cannot overflow. Decode only lets event times of the
 * years 0001-9999 through and check caps deadlines at 100 years, so these
 * never bind in practice; they keep a time that slipped past those checks
 * from becoming undefined behaviour. A result never equals
 * ENGINE_NO_DEADLINE (INT64_MIN).
 */
static int64_t time_add(int64_t a, int64_t b)
{
    int64_t sum;
    if (__builtin_add_overflow(a, b, &sum))
        return b > 0 ? INT64_MAX : INT64_MIN + 1;
    return sum == INT64_MIN ? INT64_MIN + 1 : sum;
}

static int64_t time_sub(int64_t a, int64_t b)
{
    int64_t diff;
    if (__builtin_sub_overflow(a, b, &diff))
        return b < 0 ? INT64_MAX : INT64_MIN + 1;
    return diff == INT64_MIN ? INT64_MIN + 1 : diff;
}

const char *engine_outcome_name(engine_outcome_t outcome)
{
    return outcome < ENGINE_N_OUTCOMES ? outcome_names[outcome] : "unknown";
}

void engine_instance_init(engine_instance_t *inst)
{
    memset(inst, 0, sizeof *inst);
    inst->state = -1;
    inst->deadline_ms = ENGINE_NO_DEADLINE;
    inst->process_deadline_ms = ENGINE_NO_DEADLINE;
}

void engine_instance_clear(engine_instance_t *inst)
{
    json_decref(inst->vars);
    engine_instance_init(inst);
}

const char *engine_status(const def_t *def, long state)
{
    const char *terminal = state >= 0 ? def->states[state].terminal : NULL;
    return terminal != NULL ? terminal : "active";
}

bool engine_may_accept(const def_t *def, long state, long event)
{
    /* Breadth-first over transitions and timeouts; definitions are small,
     * so a walk per call costs less than keeping a closure per state. */
    size_t n = def->n_states, head = 0, tail = 0;
    long *queue = malloc(n * sizeof *queue);
    bool *seen = calloc(n, sizeof *seen);
    bool found = false;

    if (queue == NULL || seen == NULL) {
        /* Out of memory: parking is the judgement that loses nothing. */
        free(queue);
        free(seen);
        return true;
    }
    queue[tail++] = state;
    seen[state] = true;
    while (head < tail && !found) {
        const def_state_t *st = &def->states[queue[head++]];
        for (size_t i = 0; i < st->n_on; i++) {
            if ((long) st->on[i].event == event) {
                found = true;
                break;
            }
            if (!seen[st->on[i].to]) {
                seen[st->on[i].to] = true;
                queue[tail++] = (long) st->on[i].to;
            }
        }
        if (st->on_timeout >= 0 && !seen[st->on_timeout]) {
            seen[st->on_timeout] = true;
            queue[tail++] = st->on_timeout;
        }
    }
    free(queue);
    free(seen);
    return found;
}

int64_t engine_next_deadline(const def_t *def, const engine_instance_t *inst)
{
    if (!inst->exists || def->states[inst->state].terminal != NULL)
        return ENGINE_NO_DEADLINE;
    int64_t next = inst->overdue ? ENGINE_NO_DEADLINE : inst->deadline_ms;
    if (inst->process_deadline_ms != ENGINE_NO_DEADLINE && !inst->process_overdue &&
        (next == ENGINE_NO_DEADLINE || inst->process_deadline_ms < next))
        next = inst->process_deadline_ms;
    return next;
}

/* Copies each captured value into vars; notes captures that found nothing. */
static void capture(json_t *vars, const def_capture_t *captures, size_t n, const json_t *data,
                    char *detail, size_t detail_size)
{
    for (size_t i = 0; i < n; i++) {
        json_t *value = jsonptr_get(data, captures[i].pointer);
        if (value != NULL) {
            json_object_set(vars, captures[i].var, value);
        } else {
            size_t len = strlen(detail);
            snprintf(detail + len, detail_size - len, "%scapture %s: nothing at %s",
                     len ? "; " : "", captures[i].var, captures[i].pointer);
        }
    }
}

/* Moves the instance into `state` at `at_ms`: a new step, a new deadline. */
static void enter(const def_t *def, engine_instance_t *inst, long state, int64_t at_ms)
{
    const def_state_t *st = &def->states[state];

    /* Events of one instance travel on several topics, so a later step's
     * event may carry an earlier time; time in a state never runs back. */
    if (at_ms < inst->state_entered_ms)
        at_ms = inst->state_entered_ms;
    inst->state = state;
    inst->state_entered_ms = at_ms;
    inst->overdue = false;
    inst->attempt = 0;
    inst->deadline_ms = st->terminal == NULL && st->deadline_ms > 0
                            ? time_add(at_ms, st->deadline_ms)
                            : ENGINE_NO_DEADLINE;
}

static engine_result_t result_of(engine_outcome_t outcome, long from, long to)
{
    engine_result_t r;
    r.outcome = outcome;
    r.from_state = from;
    r.to_state = to;
    r.late_by_ms = 0;
    r.detail[0] = '\0';
    return r;
}

static engine_result_t start(const def_t *def, engine_instance_t *inst, const engine_event_t *ev)
{
    engine_result_t r = result_of(ENGINE_STARTED, -1, (long) def->start_state);

    inst->exists = true;
    inst->version = def->version;
    inst->started_ms = ev->time_ms;
    inst->state_entered_ms = ev->time_ms;
    inst->process_deadline_ms =
        def->deadline_ms > 0 ? time_add(ev->time_ms, def->deadline_ms) : ENGINE_NO_DEADLINE;
    inst->events_applied = 1;
    if (inst->vars == NULL)
        inst->vars = json_object();
    capture(inst->vars, def->start_captures, def->n_start_captures, ev->data, r.detail,
            sizeof r.detail);
    capture(inst->vars, def->events[ev->event].captures, def->events[ev->event].n_captures,
            ev->data, r.detail, sizeof r.detail);
    enter(def, inst, (long) def->start_state, ev->time_ms);
    return r;
}

/* How long after `deadline_ms` the time `at_ms` lies; 0 when not after it
 * or there is no deadline. */
static int64_t late_by(int64_t at_ms, int64_t deadline_ms)
{
    if (deadline_ms == ENGINE_NO_DEADLINE || at_ms <= deadline_ms)
        return 0;
    return time_sub(at_ms, deadline_ms);
}

/* The judgement shared by a first arrival and a replay. */
static engine_result_t judge(const def_t *def, engine_instance_t *inst, const engine_event_t *ev)
{
    const def_event_t *event = &def->events[ev->event];

    if (!inst->exists) {
        if ((size_t) ev->event == def->start_event)
            return start(def, inst, ev);
        engine_result_t r = result_of(ENGINE_PARKED, -1, -1);
        snprintf(r.detail, sizeof r.detail, "no instance yet: waiting for %s",
                 def->events[def->start_event].name);
        return r;
    }

    long from = inst->state;
    const def_state_t *st = &def->states[from];
    if (st->terminal != NULL) {
        engine_result_t r = result_of(ENGINE_LATE, from, from);
        snprintf(r.detail, sizeof r.detail, "%s arrived after the instance ended in %s",
                 event->name, st->name);
        return r;
    }

    const def_transition_t *t = def_transition(def, (size_t) from, (size_t) ev->event);
    if (t != NULL) {
        engine_result_t r = result_of(ENGINE_ADVANCED, from, (long) t->to);
        /* Late, not lost: judged from the event's own time, so a step that
         * ends after its deadline is late whether the scheduler saw the
         * deadline pass or not (in a catch-up it usually has not). */
        int64_t late = late_by(ev->time_ms, inst->deadline_ms);
        const char *missed = st->name;
        if (def->states[t->to].terminal != NULL) {
            int64_t process_late = late_by(ev->time_ms, inst->process_deadline_ms);
            if (process_late > late) {
                late = process_late;
                missed = "the process";
            }
        }
        if (late > 0) {
            char text[32];
            duration_format(late, text, sizeof text);
            r.late_by_ms = late;
            snprintf(r.detail, sizeof r.detail, "arrived %s after the deadline of %s", text,
                     missed);
        }
        capture(inst->vars, event->captures, event->n_captures, ev->data, r.detail,
                sizeof r.detail);
        inst->events_applied++;
        enter(def, inst, (long) t->to, ev->time_ms);
        return r;
    }

    if (engine_may_accept(def, from, ev->event)) {
        engine_result_t r = result_of(ENGINE_PARKED, from, from);
        snprintf(r.detail, sizeof r.detail,
                 "%s is not accepted in %s yet: waiting for an earlier "
                 "step",
                 event->name, st->name);
        return r;
    }

    engine_result_t r = result_of(ENGINE_UNEXPECTED, from, from);
    if ((size_t) ev->event == def->start_event)
        snprintf(r.detail, sizeof r.detail, "a second %s for a running instance (in %s)",
                 event->name, st->name);
    else
        snprintf(r.detail, sizeof r.detail,
                 "%s is accepted neither in %s nor in any state after it", event->name, st->name);
    return r;
}

engine_result_t engine_apply(const def_t *def, engine_instance_t *inst, const engine_event_t *ev,
                             bool seen)
{
    if (seen) {
        long state = inst->exists ? inst->state : -1;
        engine_result_t r = result_of(ENGINE_DUPLICATE, state, state);
        snprintf(r.detail, sizeof r.detail, "event %s was already judged for this instance",
                 ev->id);
        utf8_scrub(r.detail); /* a long id cut inside a character; history.detail is text */
        return r;
    }
    engine_result_t r = judge(def, inst, ev);
    utf8_scrub(r.detail);
    return r;
}

engine_result_t engine_replay(const def_t *def, engine_instance_t *inst, const engine_event_t *ev)
{
    engine_result_t r = judge(def, inst, ev);
    utf8_scrub(r.detail); /* captures' notes may fill the detail: cut inside a character */
    return r;
}
