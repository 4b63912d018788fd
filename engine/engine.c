/*
 * engine - the pure state machine of one instance; see engine.h.
 */
#include "engine/engine.h"

#include "common/backoff.h"
#include "common/rfc3339.h"
#include "common/sha256.h"
#include "common/utf8.h"
#include "definitions/duration.h"
#include "definitions/jsonptr.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const outcome_names[ENGINE_N_OUTCOMES] = {
    "started", "advanced",  "duplicate",     "parked",     "unexpected",
    "late",    "violation", "timeout",       "retried",    "stale",
    "claimed", "renewed",   "lease_expired", "handed_off", "released",
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

static void lease_clear(engine_instance_t *inst)
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
        /* "any" applies in every non-terminal state its own `on` does not override. */
        for (size_t i = 0; st->terminal == NULL && !found && i < def->n_any; i++) {
            if (def_transition(def, (size_t) (st - def->states), def->any[i].event) != &def->any[i])
                continue;
            if ((long) def->any[i].event == event) {
                found = true;
                break;
            }
            if (!seen[def->any[i].to]) {
                seen[def->any[i].to] = true;
                queue[tail++] = (long) def->any[i].to;
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

/*
 * Moves the instance into `state` at `at_ms`: a new step, a new deadline,
 * and in an active version a new fencing token, whether or not the state
 * sends a command: the token names the step entry, so a reply to the step
 * the instance left carries an older one and is stale.
 */
static void enter(const def_t *def, engine_instance_t *inst, long state, int64_t at_ms)
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
    lease_clear(inst);
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
    r.deadline_late_by_ms = 0;
    r.entered_ms = ENGINE_NO_DEADLINE;
    r.time_in_state_ms = -1;
    r.detail[0] = '\0';
    r.released[0] = '\0';
    memset(&r.command, 0, sizeof r.command);
    return r;
}

/*
 * The command the instance's current state sends now, if its version is
 * active and the state has one: the current step and attempt, with the
 * token of the step entry (enter() took it) or, for a re-send (`resend`),
 * the next one. Shadow versions send nothing, so an instance started
 * before a promotion is never commanded.
 */
static engine_command_t plan_send(const def_t *def, engine_instance_t *inst, bool resend)
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
    inst->step = 0;
    enter(def, inst, (long) def->start_state, ev->time_ms);
    r.entered_ms = inst->state_entered_ms;
    r.command = plan_send(def, inst, false);
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

/* Whether a state reachable from `from` (not `from` itself) leases on
 * `event`: the lease event came before the instance got there, and waits. */
static bool lease_ahead(const def_t *def, long from, size_t event)
{
    size_t n = def->n_states, head = 0, tail = 0;
    long *queue = malloc(n * sizeof *queue);
    bool *seen = calloc(n, sizeof *seen);
    bool found = false;
    if (queue == NULL || seen == NULL) {
        free(queue);
        free(seen);
        return true; /* out of memory: parking loses nothing */
    }
    queue[tail++] = from;
    seen[from] = true;
    while (head < tail && !found) {
        size_t s = (size_t) queue[head++];
        const def_state_t *st = &def->states[s];
        if ((long) s != from && def_lease_event(def, s, event, NULL)) {
            found = true;
            break;
        }
        if (st->terminal != NULL)
            continue;
        for (size_t i = 0; i < st->n_on + def->n_any; i++) {
            const def_transition_t *t = i < st->n_on ? &st->on[i] : &def->any[i - st->n_on];
            if (i >= st->n_on && def_transition(def, s, t->event) != t)
                continue;
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
        result_of(claim ? ENGINE_CLAIMED : ENGINE_RENEWED, inst->state, inst->state);

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
        engine_result_t r = result_of(ENGINE_PARKED, -1, -1);
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
        engine_result_t r = result_of(ENGINE_STALE, from, from);
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
        engine_result_t r = result_of(ENGINE_LATE, from, from);
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
            engine_result_t r = result_of(ENGINE_PARKED, from, from);
            snprintf(r.detail, sizeof r.detail,
                     "%s claims or renews a lease of a later step than %s: waiting for it",
                     event->name, st->name);
            return r;
        }
        engine_result_t r = result_of(ENGINE_STALE, from, from);
        snprintf(r.detail, sizeof r.detail,
                 "%s is a lease event of a step the instance left (in %s)", event->name, st->name);
        return r;
    }

    if (t != NULL) {
        engine_result_t r = result_of(ENGINE_ADVANCED, from, (long) t->to);
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
            duration_format(late, text, sizeof text);
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
        enter(def, inst, (long) t->to, ev->time_ms);
        r.entered_ms = inst->state_entered_ms;
        r.time_in_state_ms = engine_time_in_state(entered, ev->time_ms);
        r.command = plan_send(def, inst, false);
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
    engine_result_t r = result_of(ENGINE_UNEXPECTED, state, state);
    snprintf(r.detail, sizeof r.detail, "version %d of %s does not declare %s", def->version,
             def->process, event_type);
    utf8_scrub(r.detail); /* a long type (a header's text) cut inside a character */
    return r;
}

/* ---- due times ------------------------------------------------------------ */

/* Due at `judge_ms` (the watermark less the grace) unless already judged. */
static bool due(int64_t deadline_ms, bool judged, int64_t judge_ms)
{
    return !judged && deadline_ms != ENGINE_NO_DEADLINE && deadline_ms <= judge_ms;
}

int64_t engine_due_bound(int64_t watermark_ms, int64_t grace_ms)
{
    return time_sub(watermark_ms, grace_ms);
}

int64_t engine_judge_time(int64_t watermark_ms, int64_t now_ms)
{
    return watermark_ms < now_ms ? watermark_ms : now_ms;
}

int64_t engine_retry_backoff(const def_t *def, long state, int attempt)
{
    const def_state_t *st = &def->states[state];
    if (st->retry_backoff_ms <= 0 || attempt < 1)
        return 0;
    /* Without retry.max_backoff, no wait outlasts the longest duration a
     * definition may state. */
    return backoff_doubling_ms(attempt, st->retry_backoff_ms,
                               st->retry_max_backoff_ms > 0 ? st->retry_max_backoff_ms
                                                            : DEF_MAX_DURATION_MS);
}

void engine_command_id(const char *process, const char *key, int step, int attempt, char out[65])
{
    char *text = NULL;
    int len = asprintf(&text, "%s\x1f%s\x1f%d\x1f%d", process, key, step, attempt);
    if (len < 0) {
        out[0] = '\0';
        return;
    }
    sha256_hex(text, (size_t) len, out);
    free(text);
}

static void expected_events(const def_t *def, size_t state, char *buf, size_t size, json_t *list);

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
    lease_clear(inst);
    *cmd = plan_send(def, inst, true);
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
    enter(def, inst, state, now_ms);
    *cmd = plan_send(def, inst, false);
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
    enter(def, inst, state, now_ms);
    *status = def->states[state].terminal;
    detail[0] = '\0';
    return true;
}

engine_standing_t engine_standing(int64_t deadline_ms, bool overdue, int64_t watermark_ms)
{
    engine_standing_t s = {ENGINE_NO_DEADLINE, ENGINE_NO_DEADLINE};
    if (deadline_ms == ENGINE_NO_DEADLINE || watermark_ms == ENGINE_NO_DEADLINE)
        return s;
    s.to_deadline_ms = time_sub(deadline_ms, watermark_ms);
    s.overdue_ms = overdue ? late_by(watermark_ms, deadline_ms) : 0;
    return s;
}

static int64_t later(int64_t a, int64_t b)
{
    return a > b ? a : b;
}

/* snprintf() for the words of a page, whose parts (a definition's names,
 * a holder's) have no bound the compiler can see: cut to `size`, like the
 * detail they fill. */
static int words(char *buf, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int words(char *buf, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, size, fmt, ap);
    va_end(ap);
    /* A long command type or list of events is cut, visibly: the detail is
     * for a person, the alert carries the rest. */
    if (n >= 0 && (size_t) n >= size && size >= 4)
        memcpy(buf + size - 4, "...", 4);
    return n;
}

/*
 * What the current step tried up to `deadline_ms`, in a page's words:
 * "ReserveStock sent 3 times over 1h10m, no StockReserved or
 * StockUnavailable". With the step's command rows counted
 * (sends_queued, sends_delivered) it says what reached the broker, so a
 * page never claims a send that did not happen: "queued 2, delivered 0:
 * see dispatch_failed"; unknown counts count the engine's attempts.
 * Returns what snprintf() returns.
 */
static int tried(const def_t *def, const engine_instance_t *inst, int64_t deadline_ms, char *buf,
                 size_t size)
{
    const def_state_t *st = &def->states[inst->state];
    char expected[200], over[32];
    expected_events(def, (size_t) inst->state, expected, sizeof expected, NULL);
    duration_format(time_sub(deadline_ms, inst->state_entered_ms), over, sizeof over);
    const char *type = st->command->type, *none = expected[0] ? expected : "reply";
    int queued = inst->sends_queued, sent = inst->sends_delivered;

    if (queued < 0 || sent < 0)
        sent = inst->attempt + 1;
    else if (sent == 0 && queued > 0 && inst->sends_paused)
        /* Held on purpose: no alert of the dispatcher's explains it. */
        return words(buf, size,
                     "%s queued %d, delivered 0: dispatch is paused (dispatch.paused) (over %s, "
                     "no %s)",
                     type, queued, over, none);
    else if (sent == 0)
        /* Nothing left Steward: the dispatcher's alert (or, with nothing
         * queued, the template's) says why. */
        return words(buf, size, "%s queued %d, delivered 0: see %s (over %s, no %s)", type, queued,
                     queued > 0 ? "dispatch_failed" : "command_failed", over, none);
    else if (sent < queued)
        return words(buf, size, "%s queued %d, delivered %d over %s, no %s", type, queued, sent,
                     over, none);
    return words(buf, size, "%s sent %d time%s over %s, no %s", type, sent, sent == 1 ? "" : "s",
                 over, none);
}

/*
 * The last attempt of the step missed (its deadline, or its lease, passed
 * at a->deadline_ms), judged at `pass_ms`: in active mode on_timeout is
 * taken, the state entered when the pass takes it (never before the miss,
 * so its own deadline counts from its command's send), with that state's
 * command; otherwise the page, and the deadline is judged.
 */
static void take_timeout(const def_t *def, engine_instance_t *inst, engine_due_action_t *a,
                         int64_t pass_ms)
{
    const def_state_t *st = &def->states[inst->state];
    if (def->mode != DEF_MODE_ACTIVE || st->on_timeout < 0) {
        a->kind = ENGINE_DUE_DEADLINE;
        inst->overdue = true;
        return;
    }
    long to = st->on_timeout;
    size_t len = strlen(a->detail);
    snprintf(a->detail + len, sizeof a->detail - len, "%stook on_timeout \u2192 %s",
             len ? "; " : "", def->states[to].name);
    a->kind = ENGINE_DUE_TIMEOUT;
    a->to_state = to;
    enter(def, inst, to, later(a->deadline_ms, pass_ms));
    a->command = plan_send(def, inst, false);
}

/* "held by picker-7, last heartbeat 12m ago, lease 10m"; returns what
 * snprintf() returns. */
static int held_by(const def_t *def, const engine_instance_t *inst, int64_t watermark_ms, char *buf,
                   size_t size)
{
    char ago[32], lease[32];
    duration_format(time_sub(watermark_ms, inst->lease_renewed_ms), ago, sizeof ago);
    duration_format(def->states[inst->state].lease->duration_ms, lease, sizeof lease);
    return snprintf(buf, size, "held by %s, last heartbeat %s ago, lease %s",
                    inst->lease_holder != NULL ? inst->lease_holder : "an unnamed holder", ago,
                    lease);
}

/*
 * A lease that ran out at `judge_ms`: shadow alerts. Active hands the step
 * over with a new token while attempts are left (a hand-off is an attempt:
 * it counts against retry.max); after the last one the lease running out
 * is the last attempt missed (take_timeout()). On a step already judged
 * overdue (paged, nothing left to send) it alerts, as in shadow mode. The
 * state's own deadline (the hard limit) is judged by the deadline rule,
 * not here. Returns true when it judged the step's last attempt, which
 * leaves the deadline rule nothing to judge.
 */
static bool judge_lease(const def_t *def, engine_instance_t *inst, int64_t watermark_ms,
                        int64_t judge_ms, int64_t pass_ms, engine_due_t *d)
{
    const def_state_t *st = &def->states[inst->state];
    if (inst->lease_expires_ms == ENGINE_NO_DEADLINE || inst->lease_expires_ms > judge_ms ||
        st->lease == NULL)
        return false;
    if (inst->deadline_ms != ENGINE_NO_DEADLINE && !inst->overdue &&
        inst->lease_expires_ms >= inst->deadline_ms) {
        lease_clear(inst); /* the state's deadline, judged below, covers it */
        return false;
    }
    bool active = def->mode == DEF_MODE_ACTIVE && st->command != NULL;
    engine_due_action_t *a = &d->actions[d->n++];
    memset(a, 0, sizeof *a);
    a->kind = ENGINE_DUE_LEASE_EXPIRED;
    a->deadline_ms = inst->lease_expires_ms;
    a->since_ms = inst->lease_renewed_ms;
    a->overdue_ms = time_sub(watermark_ms, inst->lease_expires_ms);
    a->from_state = a->to_state = inst->state;
    if (!active || inst->overdue) {
        held_by(def, inst, watermark_ms, a->detail, sizeof a->detail);
        lease_clear(inst);
        return false;
    }
    if (inst->attempt < st->retry_max) {
        int len = held_by(def, inst, watermark_ms, a->detail, sizeof a->detail);
        lease_clear(inst);
        a->kind = ENGINE_DUE_HANDOFF;
        inst->attempt++;
        a->command = plan_send(def, inst, true);
        if (len > 0 && (size_t) len < sizeof a->detail)
            snprintf(a->detail + len, sizeof a->detail - (size_t) len,
                     ": %s re-sent with token %" PRId64, st->command->type, a->command.token);
        return false;
    }
    int len = tried(def, inst, a->deadline_ms, a->detail, sizeof a->detail);
    static const char ran_out[] = "; the lease ran out, ";
    if (len > 0 && (size_t) len + sizeof ran_out < sizeof a->detail) {
        memcpy(a->detail + len, ran_out, sizeof ran_out);
        size_t at = (size_t) len + sizeof ran_out - 1;
        held_by(def, inst, watermark_ms, a->detail + at, sizeof a->detail - at);
    }
    lease_clear(inst);
    take_timeout(def, inst, a, pass_ms);
    return true;
}

engine_due_t engine_judge_due(const def_t *def, engine_instance_t *inst, int64_t watermark_ms,
                              int64_t grace_ms, int64_t now_ms)
{
    engine_due_t d = {.n = 0, .next_ms = ENGINE_NO_DEADLINE};
    if (!inst->exists || inst->state < 0 || (size_t) inst->state >= def->n_states ||
        def->states[inst->state].terminal != NULL)
        return d;
    int64_t judge_ms = engine_due_bound(watermark_ms, grace_ms);
    /* A send decided in this pass goes out now, so the next attempt's
     * deadline (and a backoff) counts from the pass, not from a deadline
     * the watermark passed long ago (after a catch-up every re-send would
     * be due at once); nor from before the watermark it is judged
     * against, should that run ahead of the clock. */
    int64_t pass_ms = later(now_ms, judge_ms);

    bool settled = judge_lease(def, inst, watermark_ms, judge_ms, pass_ms, &d);

    const def_state_t *st = &def->states[inst->state];
    bool active = def->mode == DEF_MODE_ACTIVE;
    if (settled) {
        /* The lease's end was the last attempt's: judged above. */
    } else if (due(inst->deadline_ms, inst->overdue, judge_ms) && active && st->command != NULL &&
               !inst->resend_pending && inst->attempt < st->retry_max &&
               engine_retry_backoff(def, inst->state, inst->attempt + 1) > 0) {
        /* Attempts left, with a backoff: wait it out before re-sending, so
         * that a reply arriving meanwhile moves the instance instead. */
        inst->deadline_ms = time_add(later(inst->deadline_ms, pass_ms),
                                     engine_retry_backoff(def, inst->state, inst->attempt + 1));
        inst->resend_pending = true;
        lease_clear(inst);
    } else if (due(inst->deadline_ms, inst->overdue, judge_ms)) {
        engine_due_action_t *a = &d.actions[d.n++];
        memset(a, 0, sizeof *a);
        int64_t wait =
            inst->resend_pending ? engine_retry_backoff(def, inst->state, inst->attempt + 1) : 0;
        a->kind = ENGINE_DUE_DEADLINE;
        /* The one that was missed (after a backoff: when its wait began). */
        a->deadline_ms = time_sub(inst->deadline_ms, wait);
        a->since_ms = inst->state_entered_ms;
        a->overdue_ms = time_sub(watermark_ms, a->deadline_ms);
        a->from_state = a->to_state = inst->state;
        if (active && st->command != NULL)
            tried(def, inst, a->deadline_ms, a->detail, sizeof a->detail);

        if (active && st->command != NULL &&
            (inst->resend_pending || inst->attempt < st->retry_max)) {
            /* The re-send, now; its attempt gets the state's whole
             * deadline again, from the send. */
            int64_t sent_at = later(inst->deadline_ms, pass_ms);
            a->kind = ENGINE_DUE_RESEND;
            inst->resend_pending = false;
            inst->attempt++;
            lease_clear(inst);
            a->command = plan_send(def, inst, true);
            inst->deadline_ms = time_add(sent_at, st->deadline_ms);
            size_t len = strlen(a->detail);
            char w[32];
            duration_format(wait, w, sizeof w);
            snprintf(a->detail + len, sizeof a->detail - len, "; re-sent (attempt %d)%s%s",
                     inst->attempt, wait > 0 ? " after a backoff of " : "", wait > 0 ? w : "");
        } else {
            take_timeout(def, inst, a, pass_ms);
        }
    }
    if (due(inst->process_deadline_ms, inst->process_overdue, judge_ms)) {
        engine_due_action_t *a = &d.actions[d.n++];
        memset(a, 0, sizeof *a);
        a->kind = ENGINE_DUE_PROCESS_DEADLINE;
        a->deadline_ms = inst->process_deadline_ms;
        a->since_ms = inst->started_ms;
        a->overdue_ms = time_sub(watermark_ms, inst->process_deadline_ms);
        a->from_state = a->to_state = inst->state;
        inst->process_overdue = true;
    }
    /* A lease holder's name fills a detail too: cut inside a character. */
    for (size_t i = 0; i < d.n; i++)
        utf8_scrub(d.actions[i].detail);
    d.next_ms = engine_next_deadline(def, inst);
    return d;
}

/* "ShipmentDispatched" or "StockReserved or StockUnavailable"; list may be NULL. */
static void expected_events(const def_t *def, size_t state, char *buf, size_t size, json_t *list)
{
    size_t len = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < def->states[state].n_on; i++) {
        const char *name = def->events[def->states[state].on[i].event].name;
        len += (size_t) snprintf(buf + len, len < size ? size - len : 0, "%s%s",
                                 i > 0 ? " or " : "", name);
        if (list != NULL)
            json_array_append_new(list, json_string(name));
    }
}

void engine_alert_text_clear(engine_alert_text_t *text)
{
    free(text->identity);
    text->identity = NULL;
}

json_t *engine_due_alert(const def_t *def, const char *key, const engine_instance_t *inst,
                         const engine_due_action_t *action, engine_alert_text_t *text)
{
    const def_state_t *st = &def->states[inst->state];
    bool process_wide = action->kind == ENGINE_DUE_PROCESS_DEADLINE;
    char expected[512], limit[32], deadline_at[40], entered_at[40], since_at[40];
    json_t *events = json_array();

    expected_events(def, (size_t) inst->state, expected, sizeof expected, events);
    text->state = st->name;
    text->owner = process_wide ? def->owner : def_state_owner(def, (size_t) inst->state);
    duration_format(process_wide ? def->deadline_ms : st->deadline_ms, limit, sizeof limit);
    rfc3339_format(action->deadline_ms, deadline_at, sizeof deadline_at);
    rfc3339_format(inst->state_entered_ms, entered_at, sizeof entered_at);
    rfc3339_format(action->since_ms, since_at, sizeof since_at);

    if (action->kind == ENGINE_DUE_LEASE_EXPIRED) {
        char lease_at[40];
        rfc3339_format(action->deadline_ms, lease_at, sizeof lease_at);
        snprintf(text->summary, sizeof text->summary,
                 "%s %s: the lease on %s expired at %s, %s; owner %s", def->process, key, st->name,
                 lease_at, action->detail, text->owner);
        if (asprintf(&text->identity, "steward:lease_expired:%s:%s:%s:%" PRId64, def->process, key,
                     st->name, action->deadline_ms) < 0)
            text->identity = NULL;
    } else if (process_wide) {
        snprintf(text->summary, sizeof text->summary,
                 "%s %s not finished, started %s, process deadline %s: in %s, expected %s; "
                 "owner %s",
                 def->process, key, since_at, limit, st->name, expected, text->owner);
        if (asprintf(&text->identity, "steward:process_deadline:%s:%s:%" PRId64, def->process, key,
                     inst->started_ms) < 0)
            text->identity = NULL;
    } else {
        if (action->detail[0] != '\0')
            /* Active mode: what was tried before the page. */
            snprintf(text->summary, sizeof text->summary,
                     "%s %s stalled in %s since %s, deadline %s: %s; owner %s", def->process, key,
                     st->name, since_at, limit, action->detail, text->owner);
        else
            snprintf(text->summary, sizeof text->summary,
                     "%s %s stalled in %s since %s, deadline %s: expected %s; owner %s",
                     def->process, key, st->name, since_at, limit, expected, text->owner);
        if (asprintf(&text->identity, "steward:deadline:%s:%s:%s:%" PRId64, def->process, key,
                     st->name, inst->state_entered_ms) < 0)
            text->identity = NULL;
    }
    return json_pack("{s:s, s:s, s:s, s:o, s:s, s:s, s:s, s:s, s:I, s:i, s:s, s:I}", "process",
                     def->process, "key", key, "state", st->name, "expected", events, "deadline",
                     limit, "deadline_at", deadline_at, "entered_at", entered_at, "owner",
                     text->owner, "overdue_ms", (json_int_t) action->overdue_ms, "version",
                     def->version, "since", since_at, "since_ms", (json_int_t) action->since_ms);
}

json_t *engine_sequence_alert(const def_t *def, const char *process, const char *key,
                              const char *state, const char *event_type, const char *event_id,
                              const char *detail, engine_alert_text_t *text)
{
    long st = def != NULL && state != NULL ? def_find_state(def, state) : -1;
    text->state = st >= 0 ? def->states[st].name : NULL;
    text->owner = def == NULL ? "default"
                  : st >= 0   ? def_state_owner(def, (size_t) st)
                              : def->owner;
    /* A sequence summary stays within 511 bytes, as it always has: a long
     * key is in the details and the identity in full. */
    snprintf(text->summary, 512, "%s %s out of sequence%s%s: %s (%s); owner %s", process, key,
             state ? " in " : "", state ? state : "", detail, event_type, text->owner);
    if (asprintf(&text->identity, "steward:sequence:%s:%s:%s", process, key, event_id) < 0)
        text->identity = NULL;
    return json_pack("{s:s, s:s, s:s?, s:s, s:s, s:s}", "process", process, "key", key, "state",
                     state, "event_type", event_type, "event_id", event_id, "detail", detail);
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
        return result_of(ENGINE_PARKED, -1, -1);
    engine_result_t r = result_of(ENGINE_VIOLATION, -1, -1);
    if (state == NULL)
        snprintf(r.detail, sizeof r.detail, "the instance did not start within the reorder window");
    else
        snprintf(r.detail, sizeof r.detail, "%s waited past its reorder window in %s", event_type,
                 state);
    return r;
}

/* ---- the watermark's topics ---------------------------------------------- */

/* Adds (process, topic) unless listed; false when out of memory. */
static bool watch_add(engine_watch_topics_t *out, size_t *cap, const char *process,
                      const char *topic, int old_version)
{
    for (size_t i = 0; i < out->n; i++) {
        engine_watch_topic_t *t = &out->items[i];
        if (strcmp(t->topic, topic) == 0 && strcmp(t->process, process) == 0) {
            if (t->old_version > 0 && (old_version == 0 || old_version > t->old_version))
                t->old_version = old_version;
            return true;
        }
    }
    if (out->n == *cap) {
        size_t grown_cap = *cap ? *cap * 2 : 16;
        engine_watch_topic_t *grown = realloc(out->items, grown_cap * sizeof *grown);
        if (grown == NULL)
            return false;
        out->items = grown;
        *cap = grown_cap;
    }
    out->items[out->n++] = (engine_watch_topic_t){process, topic, old_version};
    return true;
}

bool engine_watch_topics(const def_set_t *loaded, const def_t *const *open, size_t n_open,
                         engine_watch_topics_t *out)
{
    size_t cap = 0;
    engine_watch_topics_clear(out);
    for (size_t d = 0; loaded != NULL && d < loaded->n; d++) {
        const def_t *def = loaded->defs[d];
        for (size_t e = 0; e < def->n_events; e++) {
            if (!watch_add(out, &cap, def->process, def->events[e].topic, 0))
                goto oom;
        }
    }
    for (size_t d = 0; d < n_open; d++) {
        const def_t *def = open[d];
        if (loaded != NULL && def_set_find(loaded, def->process, def->version) == def)
            continue;
        for (size_t e = 0; e < def->n_events; e++) {
            if (!watch_add(out, &cap, def->process, def->events[e].topic, def->version))
                goto oom;
        }
    }
    return true;
oom:
    engine_watch_topics_clear(out);
    return false;
}

void engine_watch_topics_clear(engine_watch_topics_t *topics)
{
    free(topics->items);
    topics->items = NULL;
    topics->n = 0;
}
