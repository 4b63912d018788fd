/*
 * engine_due - what happens at a due time (engine_judge_due()): a state's
 * and the process's deadlines against the watermark, and in active mode
 * re-sends after their backoff, on_timeout (compensation) once the
 * attempts are spent, a lease's end (an alert, or a hand-off with a new
 * token), and the page's words of what was tried; the bound and time they
 * are judged at, how an instance stands against its deadline, a command's
 * id. See engine.h.
 */
#include "engine/engine.h"
#include "engine/engine_int.h"

#include "common/backoff.h"
#include "common/sha256.h"
#include "common/utf8.h"
#include "definitions/duration.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    engine_expected_events(def, (size_t) inst->state, expected, sizeof expected, NULL);
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
    engine_enter(def, inst, to, later(a->deadline_ms, pass_ms));
    a->command = engine_plan_send(def, inst, false);
}

/* "held by picker-7, last heartbeat 12m ago, lease 10m"; returns what
 * snprintf() returns. */
static int held_by(const def_t *def, const engine_instance_t *inst, int64_t watermark_ms, char *buf,
                   size_t size)
{
    char ago[32], lease[32];
    duration_format_rounded(time_sub(watermark_ms, inst->lease_renewed_ms), ago, sizeof ago);
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
        engine_lease_clear(inst); /* the state's deadline, judged below, covers it */
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
        engine_lease_clear(inst);
        return false;
    }
    if (inst->attempt < st->retry_max) {
        int len = held_by(def, inst, watermark_ms, a->detail, sizeof a->detail);
        engine_lease_clear(inst);
        a->kind = ENGINE_DUE_HANDOFF;
        inst->attempt++;
        a->command = engine_plan_send(def, inst, true);
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
    engine_lease_clear(inst);
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
        engine_lease_clear(inst);
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
            engine_lease_clear(inst);
            a->command = engine_plan_send(def, inst, true);
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
