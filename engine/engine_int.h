/*
 * engine_int - private to engine/: what the engine's own .c files share,
 * included by them alone (engine.h is the engine's whole interface; no
 * module outside engine/ includes this header). The time arithmetic every
 * rule uses, and the moves of an instance that more than one rule makes:
 * entering a step, planning its command, ending its lease.
 *
 *   engine.c           judging an event (the instance, outcomes, fencing,
 *                      lease claims and renewals, time in a state,
 *                      lateness, parked events); defines the moves below
 *   engine_due.c       due times: deadlines, re-sends, on_timeout, lease
 *                      expiry and hand-offs, the standing figures
 *   engine_operator.c  an operator's re-send, move, close and upgrade
 *   engine_alert.c     the words of alerts; defines engine_expected_events()
 *   engine_topics.c    the watermark's topics
 */
#ifndef STEWARD_ENGINE_INT_H
#define STEWARD_ENGINE_INT_H

#include "engine/engine.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Time sums that cannot overflow. Decode only lets event times of the
 * years 0001-9999 through and check caps deadlines at 100 years, so these
 * never bind in practice; they keep a time that slipped past those checks
 * from becoming undefined behaviour. A result never equals
 * ENGINE_NO_DEADLINE (INT64_MIN).
 */
static inline int64_t time_add(int64_t a, int64_t b)
{
    int64_t sum;
    if (__builtin_add_overflow(a, b, &sum))
        return b > 0 ? INT64_MAX : INT64_MIN + 1;
    return sum == INT64_MIN ? INT64_MIN + 1 : sum;
}

static inline int64_t time_sub(int64_t a, int64_t b)
{
    int64_t diff;
    if (__builtin_sub_overflow(a, b, &diff))
        return b < 0 ? INT64_MAX : INT64_MIN + 1;
    return diff == INT64_MIN ? INT64_MIN + 1 : diff;
}

/* How long after `deadline_ms` the time `at_ms` lies; 0 when not after it
 * or there is no deadline. */
static inline int64_t late_by(int64_t at_ms, int64_t deadline_ms)
{
    if (deadline_ms == ENGINE_NO_DEADLINE || at_ms <= deadline_ms)
        return 0;
    return time_sub(at_ms, deadline_ms);
}

/* Ends the step's lease: no holder, no expiry, no renewal. */
void engine_lease_clear(engine_instance_t *inst);

/*
 * Moves the instance into `state` at `at_ms`: a new step, a new deadline,
 * and in an active version a new fencing token, whether or not the state
 * sends a command: the token names the step entry, so a reply to the step
 * the instance left carries an older one and is stale.
 */
void engine_enter(const def_t *def, engine_instance_t *inst, long state, int64_t at_ms);

/* A result of `outcome` from state `from` to `to`, with nothing else said
 * yet (no lateness, no detail, no command). */
engine_result_t engine_result_of(engine_outcome_t outcome, long from, long to);

/*
 * The command the instance's current state sends now, if its version is
 * active and the state has one: the current step and attempt, with the
 * token of the step entry (engine_enter() took it) or, for a re-send
 * (`resend`), the next one. Shadow versions send nothing, so an instance
 * started before a promotion is never commanded.
 */
engine_command_t engine_plan_send(const def_t *def, engine_instance_t *inst, bool resend);

/* "ShipmentDispatched" or "StockReserved or StockUnavailable"; list may be NULL. */
void engine_expected_events(const def_t *def, size_t state, char *buf, size_t size, json_t *list);

#endif
