/*
 * engine - judging one event for one instance: the instance itself, the
 * outcomes of an event (fencing tokens and lease claims and renewals
 * included), time in a state and lateness, parked events; see engine.h.
 * Due times are engine_due.c's, an operator's actions engine_operator.c's,
 * the words of alerts engine_alert.c's, the watermark's topics
 * engine_topics.c's.
 */
#include "engine/engine.h"
#include "engine/engine_int.h"

#include "common/rfc3339.h"
#include "common/utf8.h"
#include "definitions/duration.h"
#include "definitions/jsonptr.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const outcome_names[ENGINE_N_OUTCOMES] = {
    "started", "advanced",  "duplicate",     "parked",     "unexpected",
    "late",    "violation", "timeout",       "retried",    "stale",
    "claimed", "renewed",   "lease_expired", "handed_off", "released",
};

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
    inst->lease_expires_ms = ENGINE_NO_DEADLINE;
    inst->lease_renewed_ms = ENGINE_NO_DEADLINE;
    inst->sends_queued = -1;
    inst->sends_delivered = -1;
}

void engine_instance_clear(engine_instance_t *inst)
{
    json_decref(inst->vars);
    free(inst->lease_holder);
    engine_instance_init(inst);
}

void engine_lease_clear(engine_instance_t *inst)
{
    free(inst->lease_holder);
    inst->lease_holder = NULL;
    inst->lease_expires_ms = ENGINE_NO_DEADLINE;
    inst->lease_renewed_ms = ENGINE_NO_DEADLINE;
}

const char *engine_status(const def_t *def, long state)
{
    const char *terminal = state >= 0 ? def->states[state].terminal : NULL;
    return terminal != NULL ? terminal : "active";
}

/*
 * Breadth-first from `from` over transitions ("any" where the state's own
 * `on` does not override it) and timeouts: whether some transition on the
 * way matches on_edge, or some state reached matches on_state (`from`
 * itself included; each predicate may be NULL). Definitions are small, so
 * a walk per call costs less than keeping a closure per state. Out of
 * memory it answers true: parking is the judgement that loses nothing.
 */
typedef struct reach_goal {
    bool (*on_edge)(const struct reach_goal *g, const def_transition_t *t);
    bool (*on_state)(const struct reach_goal *g, const def_t *def, long s);
    long from;
    size_t event;
} reach_goal_t;

static bool reaches(const def_t *def, const reach_goal_t *goal)
{
    size_t n = def->n_states, head = 0, tail = 0;
    long *queue = malloc(n * sizeof *queue);
    bool *seen = calloc(n, sizeof *seen);
    bool found = false;
    if (queue == NULL || seen == NULL) {
        free(queue);
        free(seen);
        return true;
    }
    queue[tail++] = goal->from;
    seen[goal->from] = true;
    while (head < tail && !found) {
        size_t s = (size_t) queue[head++];
        const def_state_t *st = &def->states[s];
        if (goal->on_state != NULL && goal->on_state(goal, def, (long) s)) {
            found = true;
            break;
        }
        size_t n_any = st->terminal == NULL ? def->n_any : 0;
        for (size_t i = 0; !found && i < st->n_on + n_any; i++) {
            const def_transition_t *t = i < st->n_on ? &st->on[i] : &def->any[i - st->n_on];
            if (i >= st->n_on && def_transition(def, s, t->event) != t)
                continue;
            if (goal->on_edge != NULL && goal->on_edge(goal, t)) {
                found = true;
                break;
            }
            if (!seen[t->to]) {
                seen[t->to] = true;
                queue[tail++] = (long) t->to;
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

static bool edge_takes_event(const reach_goal_t *g, const def_transition_t *t)
{
    return t->event == g->event;
}

bool engine_may_accept(const def_t *def, long state, long event)
{
    if (event < 0)
        return false;
    reach_goal_t goal = {edge_takes_event, NULL, state, (size_t) event};
    return reaches(def, &goal);
}

int64_t engine_next_deadline(const def_t *def, const engine_instance_t *inst)
{
    if (!inst->exists || def->states[inst->state].terminal != NULL)
        return ENGINE_NO_DEADLINE;
    int64_t next = inst->overdue ? ENGINE_NO_DEADLINE : inst->deadline_ms;
    if (inst->lease_expires_ms != ENGINE_NO_DEADLINE &&
        (next == ENGINE_NO_DEADLINE || inst->lease_expires_ms < next))
        next = inst->lease_expires_ms;
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

void engine_enter(const def_t *def, engine_instance_t *inst, long state, int64_t at_ms)
{
    const def_state_t *st = &def->states[state];

    at_ms = engine_entered_at(inst->state_entered_ms, at_ms);
    inst->state = state;
    inst->state_entered_ms = at_ms;
    inst->overdue = false;
    inst->resend_pending = false;
    inst->attempt = 0;
    inst->step++;
    if (def->mode == DEF_MODE_ACTIVE)
        inst->token++;
    engine_lease_clear(inst);
    inst->deadline_ms = st->terminal == NULL && st->deadline_ms > 0
                            ? time_add(at_ms, st->deadline_ms)
                            : ENGINE_NO_DEADLINE;
}

engine_result_t engine_result_of(engine_outcome_t outcome, long from, long to)
{
    engine_result_t r;
    r.outcome = outcome;
    r.from_state = from;
    r.to_state = to;
    r.late_by_ms = 0;
    r.deadline_late_by_ms = 0;
    r.entered_ms = ENGINE_NO_DEADLINE;
    r.time_in_state_ms = -1;
    r.detail[0] = '\0';
    r.released[0] = '\0';
    memset(&r.command, 0, sizeof r.command);
    return r;
}

engine_command_t engine_plan_send(const def_t *def, engine_instance_t *inst, bool resend)
{
    engine_command_t c = {0};
    const def_state_t *st = &def->states[inst->state];
    if (def->mode != DEF_MODE_ACTIVE || st->command == NULL || st->terminal != NULL)
        return c;
    if (resend)
        inst->token++;
    c.send = true;
    c.state = inst->state;
    c.step = inst->step;
    c.attempt = inst->attempt;
    c.token = inst->token;
    return c;
}

static engine_result_t start(const def_t *def, engine_instance_t *inst, const engine_event_t *ev)
{
    engine_result_t r = engine_result_of(ENGINE_STARTED, -1, (long) def->start_state);

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
    inst->step = 0;
    engine_enter(def, inst, (long) def->start_state, ev->time_ms);
    r.entered_ms = inst->state_entered_ms;
    r.command = engine_plan_send(def, inst, false);
    return r;
}

/* Whether a state reachable from `from` (not `from` itself) leases on
 * `event`: the lease event came before the instance got there, and waits. */
static bool state_leases_on(const reach_goal_t *g, const def_t *def, long s)
{
    return s != g->from && def_lease_event(def, (size_t) s, g->event, NULL);
}

static bool lease_ahead(const def_t *def, long from, size_t event)
{
    reach_goal_t goal = {NULL, state_leases_on, from, event};
    return reaches(def, &goal);
}

/* Whether some state of the definition leases on `event`. */
static bool lease_event_elsewhere(const def_t *def, size_t event)
{
    for (size_t i = 0; i < def->n_states; i++)
        if (def_lease_event(def, i, event, NULL))
            return true;
    return false;
}

/* The holder named in a claim: a string, or any other value as JSON text. */
static char *holder_of(const def_lease_t *lease, const json_t *data)
{
    const json_t *v = data != NULL ? jsonptr_get(data, lease->holder_pointer) : NULL;
    if (v == NULL)
        return NULL;
    if (json_is_string(v))
        return strndup(json_string_value(v), 200);
    return json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
}

/*
 * A claim or renewal: the lease runs to min(event time + duration, the
 * state's deadline), which is never extended, and never ends before the
 * event. Once the state's deadline was judged missed (the step's owner
 * paged, its attempts spent) it caps nothing: a late claim holds the step
 * for the whole duration instead of running out at once.
 */
static engine_result_t lease_event(const def_t *def, engine_instance_t *inst,
                                   const engine_event_t *ev, bool claim)
{
    const def_state_t *st = &def->states[inst->state];
    const def_lease_t *lease = st->lease;
    engine_result_t r =
        engine_result_of(claim ? ENGINE_CLAIMED : ENGINE_RENEWED, inst->state, inst->state);

    if (claim) {
        char *holder = holder_of(lease, ev->data);
        free(inst->lease_holder);
        inst->lease_holder = holder;
    }
    int64_t until = time_add(ev->time_ms, lease->duration_ms);
    if (inst->deadline_ms != ENGINE_NO_DEADLINE && !inst->overdue && until > inst->deadline_ms)
        until = inst->deadline_ms > ev->time_ms ? inst->deadline_ms : ev->time_ms;
    if (inst->lease_renewed_ms == ENGINE_NO_DEADLINE || ev->time_ms > inst->lease_renewed_ms)
        inst->lease_renewed_ms = ev->time_ms;
    if (inst->lease_expires_ms == ENGINE_NO_DEADLINE || until > inst->lease_expires_ms)
        inst->lease_expires_ms = until;
    char at[40];
    rfc3339_format(inst->lease_expires_ms, at, sizeof at);
    snprintf(r.detail, sizeof r.detail, "%s %s by %s until %s", st->name,
             claim ? "claimed" : "renewed",
             inst->lease_holder != NULL ? inst->lease_holder : "an unnamed holder", at);
    return r;
}

/* The judgement shared by a first arrival and a replay. */
static engine_result_t judge(const def_t *def, engine_instance_t *inst, const engine_event_t *ev)
{
    const def_event_t *event = &def->events[ev->event];

    if (!inst->exists) {
        if ((size_t) ev->event == def->start_event)
            return start(def, inst, ev);
        engine_result_t r = engine_result_of(ENGINE_PARKED, -1, -1);
        snprintf(r.detail, sizeof r.detail, "no instance yet: waiting for %s",
                 def->events[def->start_event].name);
        return r;
    }

    long from = inst->state;
    const def_state_t *st = &def->states[from];

    /* Fencing, in an active version (a shadow one issues no tokens): every
     * step entry and every send within it takes the next token, so only
     * the instance's current one answers what it waits for, whatever state
     * it is in now. An older token answers a step or send that is over (a
     * late or duplicate reply, a worker the step was taken from); a newer
     * one was never issued. Either changes nothing and pages nobody. */
    if (ev->token > 0 && def->mode == DEF_MODE_ACTIVE && ev->token != inst->token) {
        engine_result_t r = engine_result_of(ENGINE_STALE, from, from);
        if (ev->token < inst->token)
            snprintf(r.detail, sizeof r.detail,
                     "%s carries token %" PRId64 ", older than the instance's %" PRId64
                     ": a reply to a step or send that is over (in %s)",
                     event->name, ev->token, inst->token, st->name);
        else
            snprintf(r.detail, sizeof r.detail,
                     "%s carries token %" PRId64 ", newer than the instance's %" PRId64
                     ": forged (Steward never issued it), refused (in %s)",
                     event->name, ev->token, inst->token, st->name);
        return r;
    }
    if (st->terminal != NULL) {
        engine_result_t r = engine_result_of(ENGINE_LATE, from, from);
        snprintf(r.detail, sizeof r.detail, "%s arrived after the instance ended in %s",
                 event->name, st->name);
        return r;
    }

    const def_transition_t *t = def_transition(def, (size_t) from, (size_t) ev->event);
    bool claim = false;
    bool leased = t == NULL && def_lease_event(def, (size_t) from, (size_t) ev->event, &claim);

    if (leased)
        return lease_event(def, inst, ev, claim);
    if (t == NULL && lease_event_elsewhere(def, (size_t) ev->event)) {
        if (lease_ahead(def, from, (size_t) ev->event)) {
            engine_result_t r = engine_result_of(ENGINE_PARKED, from, from);
            snprintf(r.detail, sizeof r.detail,
                     "%s claims or renews a lease of a later step than %s: waiting for it",
                     event->name, st->name);
            return r;
        }
        engine_result_t r = engine_result_of(ENGINE_STALE, from, from);
        snprintf(r.detail, sizeof r.detail,
                 "%s is a lease event of a step the instance left (in %s)", event->name, st->name);
        return r;
    }

    if (t != NULL) {
        engine_result_t r = engine_result_of(ENGINE_ADVANCED, from, (long) t->to);
        /* Late, not lost: judged from the event's own time, so a step that
         * ends after its deadline is late whether the scheduler saw the
         * deadline pass or not (in a catch-up it usually has not). */
        int64_t late = late_by(ev->time_ms, inst->deadline_ms);
        const char *missed = st->name;
        r.deadline_late_by_ms = late;
        if (def->states[t->to].terminal != NULL) {
            int64_t process_late = late_by(ev->time_ms, inst->process_deadline_ms);
            if (process_late > late) {
                late = process_late;
                missed = "the process";
            }
        }
        if (late > 0) {
            char text[32];
            duration_format_rounded(late, text, sizeof text);
            r.late_by_ms = late;
            snprintf(r.detail, sizeof r.detail, "arrived %s after the deadline of %s", text,
                     missed);
        }
        capture(inst->vars, event->captures, event->n_captures, ev->data, r.detail,
                sizeof r.detail);
        inst->events_applied++;
        if (inst->lease_holder != NULL)
            snprintf(r.released, sizeof r.released, "%s released by %s", st->name,
                     inst->lease_holder);
        int64_t entered = inst->state_entered_ms;
        engine_enter(def, inst, (long) t->to, ev->time_ms);
        r.entered_ms = inst->state_entered_ms;
        r.time_in_state_ms = engine_time_in_state(entered, ev->time_ms);
        r.command = engine_plan_send(def, inst, false);
        return r;
    }

    if (engine_may_accept(def, from, ev->event)) {
        engine_result_t r = engine_result_of(ENGINE_PARKED, from, from);
        snprintf(r.detail, sizeof r.detail,
                 "%s is not accepted in %s yet: waiting for an earlier "
                 "step",
                 event->name, st->name);
        return r;
    }

    engine_result_t r = engine_result_of(ENGINE_UNEXPECTED, from, from);
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
        engine_result_t r = engine_result_of(ENGINE_DUPLICATE, state, state);
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

int64_t engine_entered_at(int64_t entered_ms, int64_t event_ms)
{
    /* Events of one instance travel on several topics, so a later step's
     * event may carry an earlier time; time in a state never runs back. */
    if (entered_ms != ENGINE_NO_DEADLINE && event_ms < entered_ms)
        return entered_ms;
    return event_ms;
}

int64_t engine_time_in_state(int64_t entered_ms, int64_t event_ms)
{
    return time_sub(engine_entered_at(entered_ms, event_ms), entered_ms);
}

int64_t engine_state_late_by(const def_t *def, long from_state, int64_t time_in_state_ms)
{
    if (from_state < 0 || (size_t) from_state >= def->n_states)
        return 0;
    int64_t limit = def->states[from_state].deadline_ms;
    if (limit <= 0 || time_in_state_ms <= limit)
        return 0;
    return time_sub(time_in_state_ms, limit);
}

engine_result_t engine_undeclared(const def_t *def, const engine_instance_t *inst,
                                  const char *event_type)
{
    long state = inst != NULL && inst->exists ? inst->state : -1;
    engine_result_t r = engine_result_of(ENGINE_UNEXPECTED, state, state);
    snprintf(r.detail, sizeof r.detail, "version %d of %s does not declare %s", def->version,
             def->process, event_type);
    utf8_scrub(r.detail); /* a long type (a header's text) cut inside a character */
    return r;
}

/* ---- parked events -------------------------------------------------------- */

int64_t engine_park_expires_at(const def_t *def, int64_t event_ms)
{
    return time_add(event_ms, def->reorder_window_ms);
}

engine_result_t engine_judge_parked(const char *event_type, const char *state, int64_t expires_ms,
                                    int64_t watermark_ms)
{
    if (!(expires_ms < watermark_ms))
        return engine_result_of(ENGINE_PARKED, -1, -1);
    engine_result_t r = engine_result_of(ENGINE_VIOLATION, -1, -1);
    if (state == NULL)
        snprintf(r.detail, sizeof r.detail, "the instance did not start within the reorder window");
    else
        snprintf(r.detail, sizeof r.detail, "%s waited past its reorder window in %s", event_type,
                 state);
    return r;
}
