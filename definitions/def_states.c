/*
 * def_states - reading a definition's states: each state's fields (outcome,
 * owner, deadline, command, retry, on_timeout, lease, token) and the
 * transitions of its 'on' and of the top-level 'any'. def_load_json()
 * (def_load.c) calls in once every state and event has been named, so any
 * field can refer to any of them.
 */
#include "definitions/def.h"

#include "definitions/def_int.h"
#include "definitions/jsonptr.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An object mapping events to target states, into *out (allocated). */
static void parse_transition_map(loader_t *ld, json_t *on, const char *ptr, def_transition_t **out,
                                 size_t *n_out)
{
    if (!json_is_object(on)) {
        def_ld_problem(
            ld, ptr,
            "expected an object mapping event types to states, e.g. {\"PaymentCaptured\": "
            "\"awaiting_stock\"}, got %s",
            jsonptr_kind(on));
        ld->graph_unknown = ld->usage_unknown = true;
        return;
    }
    def_transition_t *list = def_ld_calloc(ld, json_object_size(on), sizeof *list);
    if (list == NULL)
        return;
    *out = list;

    const char *event;
    json_t *target;
    json_object_foreach(on, event, target)
    {
        char p[PTR_MAX], h[300];
        def_ptr_join(p, ptr, event);
        long e = def_ld_use_event(ld, event, p);
        if (!json_is_string(target)) {
            def_ld_problem(ld, p, "expected the name of the state to go to, got %s",
                           jsonptr_kind(target));
            ld->graph_unknown = true;
            continue;
        }
        const char *to = json_string_value(target);
        long s = def_find_name(ld->state_names, ld->def->n_states, to);
        if (s < 0) {
            def_ld_problem(ld, p, "transition on %s goes to unknown state '%s'%s", event, to,
                           def_hint(h, sizeof h, to, ld->state_names, ld->def->n_states));
            ld->graph_unknown = true;
            continue;
        }
        if (e < 0) {
            ld->graph_unknown = true;
            continue;
        }
        list[(*n_out)++] = (def_transition_t){(size_t) e, (size_t) s};
    }
}

static void parse_transitions(loader_t *ld, size_t i, json_t *on, const char *ptr)
{
    def_state_t *st = &ld->def->states[i];
    parse_transition_map(ld, on, ptr, &st->on, &st->n_on);
}

void def_ld_parse_any(loader_t *ld, json_t *doc)
{
    json_t *any = json_object_get(doc, "any");
    if (any == NULL)
        return;
    if (ld->def->n_states == 0) {
        ld->graph_unknown = true;
        return;
    }
    parse_transition_map(ld, any, "/any", &ld->def->any, &ld->def->n_any);
}

static void parse_command(loader_t *ld, size_t i, json_t *cmd, const char *ptr)
{
    def_state_t *st = &ld->def->states[i];
    if (!json_is_object(cmd)) {
        def_ld_problem(ld, ptr, "expected an object with 'topic', 'type' and 'payload', got %s",
                       jsonptr_kind(cmd));
        return;
    }
    static const char *const fields[] = {"topic", "type", "payload"};
    CHECK_FIELDS(ld, cmd, ptr, fields);

    char p[PTR_MAX];
    const char *topic = def_ld_get_string(ld, cmd, ptr, "topic", true);
    if (topic != NULL && !def_is_topic(topic)) {
        def_ld_problem(
            ld, def_ptr_join(p, ptr, "topic"),
            "'%s' is not a valid Kafka topic name: use letters, digits, '.', '_' and '-' "
            "(at most %d characters)",
            topic, TOPIC_MAX_LEN);
        topic = NULL;
    }
    const char *type = def_ld_get_string(ld, cmd, ptr, "type", true);

    json_t *payload = json_object_get(cmd, "payload");
    if (payload != NULL && !json_is_object(payload)) {
        def_ld_problem(ld, def_ptr_join(p, ptr, "payload"),
                       "expected an object (the command's JSON payload, a template), got %s",
                       jsonptr_kind(payload));
        payload = NULL;
    } else if (payload != NULL) {
        /* NULL tells the check "any name"; with nothing captured at all
         * it must get an empty list instead, so every ${vars.X} is refused. */
        static const char *const no_vars[1] = {NULL};
        const char *const *vars = ld->vars != NULL ? (const char *const *) ld->vars : no_vars;
        ld->n_problems +=
            def_check_template(payload, ld->vars_unknown ? NULL : vars, ld->n_vars, ld->file,
                               def_ptr_join(p, ptr, "payload"), ld->problems);
    }

    st->command = def_ld_calloc(ld, 1, sizeof *st->command);
    if (st->command == NULL)
        return;
    st->command->topic = def_ld_strdup(ld, topic);
    st->command->type = def_ld_strdup(ld, type);
    /* A copy, not a reference into the document: jansson's reference
     * counts are best left alone by threads that only read a def_t. */
    st->command->payload = payload != NULL ? json_deep_copy(payload) : json_object();
    if (st->command->payload == NULL)
        def_ld_problem(ld, "", "out of memory");
}

static void parse_retry(loader_t *ld, size_t i, json_t *retry, const char *ptr)
{
    if (!json_is_object(retry)) {
        def_ld_problem(ld, ptr, "expected an object such as {\"max\": 2}, got %s",
                       jsonptr_kind(retry));
        return;
    }
    static const char *const fields[] = {"max", "backoff", "max_backoff"};
    CHECK_FIELDS(ld, retry, ptr, fields);
    def_state_t *st = &ld->def->states[i];
    int backoff = def_ld_get_duration(ld, retry, ptr, "backoff", false, &st->retry_backoff_ms);
    int cap = def_ld_get_duration(ld, retry, ptr, "max_backoff", false, &st->retry_max_backoff_ms);
    json_t *max = json_object_get(retry, "max");
    if (max == NULL) {
        if (backoff != 0)
            def_ld_problem(
                ld, ptr,
                "retry.backoff is the wait between re-sends, and retry has no 'max': add "
                "how many times to re-send, e.g. \"max\": 3");
        else
            def_ld_problem(ld, ptr, "missing required field 'max'");
        return;
    }
    if (cap != 0 && backoff == 0)
        def_ld_problem(ld, ptr, "retry.max_backoff caps retry.backoff, and retry has no 'backoff'");
    if (cap > 0 && backoff > 0 && st->retry_max_backoff_ms < st->retry_backoff_ms)
        def_ld_problem(ld, ptr,
                       "retry.max_backoff is shorter than retry.backoff: the cap would bind "
                       "before the first re-send");
    char p[PTR_MAX];
    def_ptr_join(p, ptr, "max");
    if (!json_is_integer(max))
        def_ld_problem(ld, p, "retry.max must be an integer, got %s", jsonptr_kind(max));
    else if (json_integer_value(max) < 0)
        def_ld_problem(ld, p, "retry.max must be 0 or more, got %" JSON_INTEGER_FORMAT,
                       json_integer_value(max));
    else if (json_integer_value(max) > RETRY_MAX_LIMIT)
        def_ld_problem(ld, p, "retry.max must be at most %d, got %" JSON_INTEGER_FORMAT,
                       RETRY_MAX_LIMIT, json_integer_value(max));
    else
        ld->def->states[i].retry_max = (int) json_integer_value(max);
}

static void parse_on_timeout(loader_t *ld, size_t i, json_t *v, const char *ptr)
{
    def_state_t *st = &ld->def->states[i];
    if (!json_is_string(v)) {
        def_ld_problem(ld, ptr, "expected the name of the state to go to, got %s", jsonptr_kind(v));
        ld->graph_unknown = true;
        return;
    }
    const char *to = json_string_value(v);
    long s = def_find_name(ld->state_names, ld->def->n_states, to);
    if (s < 0) {
        char h[300];
        def_ld_problem(ld, ptr, "on_timeout goes to unknown state '%s'%s", to,
                       def_hint(h, sizeof h, to, ld->state_names, ld->def->n_states));
        ld->graph_unknown = true;
        return;
    }
    if ((size_t) s == i)
        def_ld_problem(ld, ptr,
                       "on_timeout goes back to state '%s' itself: the instance would wait for the "
                       "same deadline forever; go to a state that handles the delay",
                       to);
    st->on_timeout = s;
}

/* The declared event named by v (at `ptr`); -1 (reported) if it is not one. */
static long lease_event(loader_t *ld, json_t *v, const char *ptr)
{
    if (!json_is_string(v)) {
        def_ld_problem(ld, ptr, "expected the name of an event, got %s", jsonptr_kind(v));
        return -1;
    }
    const char *name = json_string_value(v);
    long e = def_find_name(ld->event_names, ld->def->n_events, name);
    if (e < 0) {
        char h[300];
        def_ld_problem(ld, ptr, "lease event '%s' is not declared in 'events'%s", name,
                       def_hint(h, sizeof h, name, ld->event_names, ld->def->n_events));
        return -1;
    }
    ld->event_used[e] = true;
    return e;
}

static void parse_lease(loader_t *ld, size_t i, json_t *v, const char *ptr, bool has_deadline)
{
    def_state_t *st = &ld->def->states[i];
    if (!json_is_object(v)) {
        def_ld_problem(
            ld, ptr,
            "expected an object such as {\"claim\": \"PickStarted\", \"holder\": "
            "\"/worker_id\", \"renew\": [\"PickHeartbeat\"], \"duration\": \"10m\"}, got %s",
            jsonptr_kind(v));
        return;
    }
    static const char *const fields[] = {"claim", "holder", "renew", "duration"};
    CHECK_FIELDS(ld, v, ptr, fields);
    if (!has_deadline)
        def_ld_problem(ld, ptr,
                       "a lease needs the state's own 'deadline': it is the hard limit a renewal "
                       "never extends past");
    char p[PTR_MAX];
    def_lease_t lease = {0};
    bool ok = true;
    json_t *claim = def_ld_member(ld, v, ptr, "claim", true);
    long c = claim != NULL ? lease_event(ld, claim, def_ptr_join(p, ptr, "claim")) : -1;
    ok = ok && c >= 0;
    const char *holder = def_ld_get_pointer(ld, v, ptr, "holder", true);
    ok = ok && holder != NULL;
    if (def_ld_get_duration(ld, v, ptr, "duration", false, &lease.duration_ms) <= 0) {
        if (json_object_get(v, "duration") == NULL)
            def_ld_problem(ld, ptr, "missing required field 'duration'");
        ok = false;
    }
    json_t *renew = json_object_get(v, "renew");
    size_t n_renew = 0;
    if (renew != NULL && !json_is_array(renew)) {
        def_ld_problem(ld, def_ptr_join(p, ptr, "renew"),
                       "expected an array of event names, got %s", jsonptr_kind(renew));
        ok = false;
    } else if (renew != NULL) {
        n_renew = json_array_size(renew);
        lease.renew = n_renew > 0 ? def_ld_calloc(ld, n_renew, sizeof *lease.renew) : NULL;
        ok = ok && (n_renew == 0 || lease.renew != NULL);
        for (size_t k = 0; k < n_renew; k++) {
            char idx[32], q[PTR_MAX];
            snprintf(idx, sizeof idx, "%zu", k);
            def_ptr_join(q, def_ptr_join(p, ptr, "renew"), idx);
            long e = lease_event(ld, json_array_get(renew, k), q);
            if (e < 0)
                ok = false;
            else if (lease.renew != NULL)
                lease.renew[k] = (size_t) e;
        }
    }
    if (!ok) {
        free(lease.renew);
        return;
    }
    lease.claim = (size_t) c;
    lease.n_renew = n_renew;
    lease.holder_pointer = def_ld_strdup(ld, holder);
    st->lease = def_ld_calloc(ld, 1, sizeof *st->lease);
    if (st->lease == NULL) {
        free(lease.renew);
        free(lease.holder_pointer);
        return;
    }
    *st->lease = lease;
}

static void parse_token(loader_t *ld, size_t i, json_t *v, const char *ptr)
{
    def_state_t *st = &ld->def->states[i];
    if (!json_is_object(v)) {
        def_ld_problem(ld, ptr,
                       "expected {\"pointer\": \"/steward_token\"} or {\"header\": "
                       "\"ce_stewardtoken\"}, got %s",
                       jsonptr_kind(v));
        return;
    }
    static const char *const fields[] = {"pointer", "header"};
    CHECK_FIELDS(ld, v, ptr, fields);
    bool has_ptr = json_object_get(v, "pointer") != NULL;
    bool has_hdr = json_object_get(v, "header") != NULL;
    if (has_ptr == has_hdr) {
        def_ld_problem(ld, ptr, "token names exactly one of 'pointer' or 'header'");
        return;
    }
    if (has_ptr) {
        const char *pointer = def_ld_get_pointer(ld, v, ptr, "pointer", true);
        st->token.pointer = def_ld_strdup(ld, pointer);
        return;
    }
    const char *h = def_ld_get_string(ld, v, ptr, "header", true);
    if (h != NULL && !def_is_header_name(h)) {
        char p[PTR_MAX];
        def_ld_problem(ld, def_ptr_join(p, ptr, "header"),
                       "header name '%s' is not valid: 1 to 255 printable ASCII characters without "
                       "spaces",
                       h);
        return;
    }
    st->token.header = def_ld_strdup(ld, h);
}

static void parse_state(loader_t *ld, size_t i, const char *name, json_t *v)
{
    static const char *const fields[] = {"terminal",   "deadline",   "owner", "on",
                                         "command",    "retry",      "lease", "token",
                                         "on_timeout", "description"};
    static const char *const terminal_forbids[] = {"on",    "command",    "retry",   "lease",
                                                   "token", "on_timeout", "deadline"};
    def_state_t *st = &ld->def->states[i];
    char p[PTR_MAX], sub[PTR_MAX];
    def_ptr_join(p, "/states", name);

    if (!def_is_name(name, NULL))
        def_ld_problem(ld, p,
                       "state name '%s' is not valid: use lowercase letters, digits and '_', "
                       "starting with a letter (at most %d characters)",
                       name, NAME_MAX_LEN);
    if (!json_is_object(v)) {
        def_ld_problem(ld, p, "expected an object describing the state, got %s", jsonptr_kind(v));
        ld->graph_unknown = ld->usage_unknown = true;
        return;
    }
    CHECK_FIELDS(ld, v, p, fields);

    json_t *terminal = json_object_get(v, "terminal");
    if (terminal != NULL) {
        def_ptr_join(sub, p, "terminal");
        if (!json_is_string(terminal)) {
            def_ld_problem(
                ld, sub,
                "expected a string naming the outcome, e.g. \"terminal\": \"success\", got "
                "%s",
                jsonptr_kind(terminal));
            ld->graph_unknown = true;
        } else if (!def_is_name(json_string_value(terminal), NULL)) {
            def_ld_problem(
                ld, sub,
                "outcome '%s' is not valid: use lowercase letters, digits and '_', starting "
                "with a letter, e.g. 'success' or 'cancelled'",
                json_string_value(terminal));
            ld->graph_unknown = true;
        } else {
            st->terminal = def_ld_strdup(ld, json_string_value(terminal));
        }
    }

    const char *owner = def_ld_get_team(ld, v, p, false);
    st->owner = def_ld_strdup(ld, owner);

    json_t *desc = json_object_get(v, "description");
    if (desc != NULL && !json_is_string(desc))
        def_ld_problem(ld, def_ptr_join(sub, p, "description"), "expected a string, got %s",
                       jsonptr_kind(desc));

    if (terminal != NULL) {
        /* A terminal state is where an instance ends: nothing may happen
         * there. Its 'on' still counts as using events, so a misplaced
         * transition is reported once, here. */
        for (size_t k = 0; k < sizeof terminal_forbids / sizeof terminal_forbids[0]; k++) {
            const char *f = terminal_forbids[k];
            if (json_object_get(v, f) == NULL)
                continue;
            def_ld_problem(ld, def_ptr_join(sub, p, f),
                           "terminal state '%s' cannot have '%s': an instance that reaches it is "
                           "finished",
                           name, f);
        }
        json_t *on = json_object_get(v, "on");
        if (json_is_object(on)) {
            const char *event;
            json_t *target;
            json_object_foreach(on, event, target)
            {
                long e = def_find_name(ld->event_names, ld->def->n_events, event);
                if (e >= 0)
                    ld->event_used[e] = true;
            }
        }
        return;
    }

    int deadline = def_ld_get_duration(ld, v, p, "deadline", false, &st->deadline_ms);
    if (deadline == 0 && !ld->process_deadline_given)
        def_ld_problem(ld, p,
                       "state '%s' is not terminal and has no deadline, nor has the process: add a "
                       "'deadline' (e.g. \"deadline\": \"1h\") so that a stuck instance is noticed",
                       name);

    json_t *on = json_object_get(v, "on");
    if (on != NULL)
        parse_transitions(ld, i, on, def_ptr_join(sub, p, "on"));

    json_t *command = json_object_get(v, "command");
    if (command != NULL)
        parse_command(ld, i, command, def_ptr_join(sub, p, "command"));

    json_t *retry = json_object_get(v, "retry");
    if (retry != NULL) {
        parse_retry(ld, i, retry, def_ptr_join(sub, p, "retry"));
        if (command == NULL)
            def_ld_problem(ld, sub,
                           "retry re-sends the state's command, and state '%s' has no 'command'",
                           name);
        else if (deadline == 0)
            def_ld_problem(
                ld, sub,
                "retry needs the state's own 'deadline': the command is re-sent each time "
                "it passes");
    }

    json_t *on_timeout = json_object_get(v, "on_timeout");
    if (on_timeout != NULL) {
        parse_on_timeout(ld, i, on_timeout, def_ptr_join(sub, p, "on_timeout"));
        if (deadline == 0)
            def_ld_problem(
                ld, sub,
                "on_timeout needs the state's own 'deadline': it names where an instance "
                "goes when that deadline passes");
    }

    json_t *lease = json_object_get(v, "lease");
    if (lease != NULL)
        parse_lease(ld, i, lease, def_ptr_join(sub, p, "lease"), deadline != 0);

    json_t *token = json_object_get(v, "token");
    if (token != NULL)
        parse_token(ld, i, token, def_ptr_join(sub, p, "token"));
}

void def_ld_parse_states(loader_t *ld, json_t *doc)
{
    def_t *def = ld->def;
    json_t *states = def_ld_member(ld, doc, "", "states", true);
    if (states == NULL) {
        ld->graph_unknown = ld->usage_unknown = true;
        return;
    }
    if (!json_is_object(states)) {
        def_ld_problem(ld, "/states", "expected an object mapping state names to states, got %s",
                       jsonptr_kind(states));
        ld->graph_unknown = ld->usage_unknown = true;
        return;
    }
    if (json_object_size(states) == 0) {
        def_ld_problem(
            ld, "/states",
            "no states declared: a process needs at least the state 'start' goes to and a "
            "terminal state");
        ld->graph_unknown = true;
        return;
    }
    if (def->n_states == 0) {
        ld->graph_unknown = ld->usage_unknown = true;
        return; /* out of memory, reported */
    }

    const char *name;
    json_t *v;
    size_t i = 0;
    json_object_foreach(states, name, v)
    {
        parse_state(ld, i, name, v);
        i++;
    }

    if (ld->start_resolved && def->states[def->start_state].terminal != NULL)
        def_ld_problem(ld, "/start/to",
                       "start goes to terminal state '%s': an instance would finish as it starts; "
                       "start in the first step to watch",
                       def->states[def->start_state].name);
}
