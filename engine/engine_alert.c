/*
 * engine_alert - the words of the engine's alerts: a missed deadline, a
 * process deadline, a lease that ran out (engine_due_alert()), an event
 * out of sequence (engine_sequence_alert()). See engine.h.
 */
#include "engine/engine.h"
#include "engine/engine_int.h"

#include "common/rfc3339.h"
#include "definitions/duration.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

void engine_expected_events(const def_t *def, size_t state, char *buf, size_t size, json_t *list)
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

    engine_expected_events(def, (size_t) inst->state, expected, sizeof expected, events);
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
