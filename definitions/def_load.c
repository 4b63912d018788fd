/*
 * def_load - reading one process definition from its JSON text; see def.h
 * and docs/definitions.md.
 *
 * The loader reads a document field by field, filling a def_t and
 * reporting each problem where it finds it without stopping: whoever fixes
 * a file wants every mistake in one run. A wrong field is left empty and
 * the load fails at the end. Problems come out in a fixed order: the
 * top-level fields, then events, start and states in document order, then
 * the graph checks (def_validate.c). Those run only when every reference
 * to a state or an event resolved, because a broken edge would make them
 * report states that are fine ("shipped is unreachable" when the real
 * mistake is a transition to 'shiped').
 *
 * Events and states keep their document order in def_t (jansson keeps
 * object keys in insertion order), so an index is stable for a document.
 *
 * This file holds the document and its top-level fields; the states are
 * read in def_states.c, and the readers of one field in def_fields.c.
 */
#include "definitions/def.h"

#include "definitions/def_int.h"
#include "definitions/jsonptr.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Allocates def's events and states and names them, so that any field can
 * refer to any state or event whatever the order of the document. */
static void prescan(loader_t *ld, json_t *doc)
{
    def_t *def = ld->def;
    const char *key;
    json_t *v;
    size_t i;

    json_t *events = json_object_get(doc, "events");
    if (json_is_object(events) && json_object_size(events) > 0) {
        size_t n = json_object_size(events);
        def->events = def_ld_calloc(ld, n, sizeof *def->events);
        ld->event_names = def_ld_calloc(ld, n, sizeof *ld->event_names);
        ld->event_used = def_ld_calloc(ld, n, sizeof *ld->event_used);
        if (def->events != NULL && ld->event_names != NULL && ld->event_used != NULL) {
            def->n_events = n;
            i = 0;
            json_object_foreach(events, key, v)
            {
                def->events[i].name = def_ld_strdup(ld, key);
                ld->event_names[i] = def->events[i].name;
                i++;
            }
        }
    }

    json_t *states = json_object_get(doc, "states");
    if (json_is_object(states) && json_object_size(states) > 0) {
        size_t n = json_object_size(states);
        def->states = def_ld_calloc(ld, n, sizeof *def->states);
        ld->state_names = def_ld_calloc(ld, n, sizeof *ld->state_names);
        if (def->states != NULL && ld->state_names != NULL) {
            def->n_states = n;
            i = 0;
            json_object_foreach(states, key, v)
            {
                def->states[i].name = def_ld_strdup(ld, key);
                def->states[i].on_timeout = -1;
                ld->state_names[i] = def->states[i].name;
                i++;
            }
        }
    }
}

static void parse_header(loader_t *ld, json_t *doc)
{
    def_t *def = ld->def;
    const char *s;
    json_t *v;

    s = def_ld_get_string(ld, doc, "", "process", true);
    if (s != NULL && !def_is_name(s, NULL))
        def_ld_problem(ld, "/process",
                       "process name '%s' is not valid: use lowercase letters, digits and '_', "
                       "starting with a letter (at most %d characters)",
                       s, NAME_MAX_LEN);
    else
        def->process = def_ld_strdup(ld, s);

    v = def_ld_member(ld, doc, "", "version", true);
    if (v != NULL && !json_is_integer(v))
        def_ld_problem(ld, "/version", "version must be a positive integer (1, 2, ...), got %s",
                       jsonptr_kind(v));
    else if (v != NULL && (json_integer_value(v) < 1 || json_integer_value(v) > INT_MAX))
        def_ld_problem(ld, "/version",
                       "version must be a positive integer (1, 2, ...), got %" JSON_INTEGER_FORMAT,
                       json_integer_value(v));
    else if (v != NULL)
        def->version = (int) json_integer_value(v);

    s = def_ld_get_string(ld, doc, "", "mode", true);
    if (s != NULL) {
        static const char *const modes[] = {"shadow", "active"};
        char h[128];
        if (strcmp(s, "shadow") == 0)
            def->mode = DEF_MODE_SHADOW;
        else if (strcmp(s, "active") == 0)
            def->mode = DEF_MODE_ACTIVE;
        else
            def_ld_problem(ld, "/mode", "mode '%s' is not valid: expected 'shadow' or 'active'%s",
                           s, def_hint(h, sizeof h, s, modes, 2));
    }

    def->owner = def_ld_strdup(ld, def_ld_get_team(ld, doc, "", true));

    v = json_object_get(doc, "description");
    if (v != NULL && !json_is_string(v))
        def_ld_problem(ld, "/description", "expected a string, got %s", jsonptr_kind(v));
    else if (v != NULL)
        def->description = def_ld_strdup(ld, json_string_value(v));

    const char *key_ptr;
    bool from_message;
    def_ld_get_key(ld, doc, "", true, &key_ptr, &from_message);

    v = json_object_get(doc, "$schema");
    if (v != NULL && !json_is_string(v))
        def_ld_problem(ld, "/$schema", "expected the JSON Schema's URI as a string, got %s",
                       jsonptr_kind(v));

    /* The process's envelope over the format's defaults; its key is the
     * document's required `key`, read above. */
    const def_envelope_t defaults = {.type_pointer = "/type",
                                     .id_pointer = "/id",
                                     .key_pointer = (char *) key_ptr,
                                     .key_from_message = from_message};
    def_ld_envelope(ld, doc, "", false, &defaults, &def->envelope, NULL, NULL);

    ld->process_deadline_given = json_object_get(doc, "deadline") != NULL;
    def_ld_get_duration(ld, doc, "", "deadline", false, &def->deadline_ms);

    def->reorder_window_ms = DEFAULT_REORDER_MS;
    def_ld_get_duration(ld, doc, "", "reorder_window", true, &def->reorder_window_ms);
}

static void parse_events(loader_t *ld, json_t *doc)
{
    def_t *def = ld->def;
    json_t *events = def_ld_member(ld, doc, "", "events", true);
    if (events == NULL)
        return;
    if (!json_is_object(events)) {
        def_ld_problem(ld, "/events",
                       "expected an object mapping event types to their topics, got %s",
                       jsonptr_kind(events));
        return;
    }
    if (json_object_size(events) == 0) {
        def_ld_problem(ld, "/events",
                       "no events declared: declare at least the one that starts the process, e.g. "
                       "\"OrderPlaced\": {\"topic\": \"orders\"}");
        return;
    }
    if (def->n_events == 0)
        return; /* out of memory, reported */

    static const char *const fields[] = {"topic", "key", "envelope", "capture", "type_from_topic"};
    const char *name;
    json_t *v;
    size_t i = 0;
    json_object_foreach(events, name, v)
    {
        def_event_t *ev = &def->events[i++];
        char p[PTR_MAX], sub[PTR_MAX];
        def_ptr_join(p, "/events", name);

        if (*name == '\0' || strlen(name) > EVENT_NAME_MAX_LEN)
            def_ld_problem(ld, p, "an event type must be 1 to %d characters long",
                           EVENT_NAME_MAX_LEN);
        if (!json_is_object(v)) {
            def_ld_problem(ld, p, "expected an object such as {\"topic\": \"orders\"}, got %s",
                           jsonptr_kind(v));
            ld->vars_unknown = true;
            continue;
        }
        CHECK_FIELDS(ld, v, p, fields);

        const char *topic = def_ld_get_string(ld, v, p, "topic", true);
        if (topic != NULL && !def_is_topic(topic))
            def_ld_problem(
                ld, def_ptr_join(sub, p, "topic"),
                "'%s' is not a valid Kafka topic name: use letters, digits, '.', '_' and "
                "'-' (at most %d characters)",
                topic, TOPIC_MAX_LEN);
        else
            ev->topic = def_ld_strdup(ld, topic);

        /* The event's key and envelope over its topic's, else the process's. */
        const ld_topic_t *entry = def_ld_topic(ld, topic);
        const def_envelope_t *base = entry != NULL ? &entry->envelope : NULL;
        ev->topic_envelope = base != NULL;
        ev->format = entry != NULL ? entry->format : DEF_FORMAT_JSON;
        char context[EVENT_NAME_MAX_LEN + TOPIC_MAX_LEN + 32];
        snprintf(context, sizeof context, "event '%s' on topic '%s': ", name,
                 topic != NULL ? topic : "?");
        ld->context = json_object_get(v, "envelope") != NULL ? context : NULL;
        def_ld_envelope(ld, v, p, true, base != NULL ? base : &def->envelope, &ev->envelope,
                        &ev->own_type_pointer, &ev->own_type_header);
        ld->context = NULL;

        json_t *fixed = json_object_get(v, "type_from_topic");
        if (fixed != NULL && !json_is_boolean(fixed))
            def_ld_problem(ld, def_ptr_join(sub, p, "type_from_topic"),
                           "expected true or false, got %s", jsonptr_kind(fixed));
        else
            ev->type_from_topic = json_is_true(fixed);
        if (ev->type_from_topic && (ev->own_type_pointer != NULL || ev->own_type_header != NULL))
            def_ld_problem(ld, def_ptr_join(sub, p, "type_from_topic"),
                           "every message on topic '%s' is %s already: it needs no "
                           "envelope.type as well",
                           topic != NULL ? topic : "?", name);

        json_t *capture = json_object_get(v, "capture");
        if (capture != NULL)
            def_ld_parse_captures(ld, capture, def_ptr_join(sub, p, "capture"), &ev->captures,
                                  &ev->n_captures);
    }
}

static void parse_start(loader_t *ld, json_t *doc)
{
    def_t *def = ld->def;
    json_t *start = def_ld_member(ld, doc, "", "start", true);
    /* Until start.on is known, the start event would look unused. */
    ld->usage_unknown = true;
    if (start == NULL)
        return;
    if (!json_is_object(start)) {
        def_ld_problem(ld, "/start",
                       "expected an object such as {\"on\": \"OrderPlaced\", \"to\": "
                       "\"awaiting_payment\"}, got %s",
                       jsonptr_kind(start));
        ld->vars_unknown = true;
        return;
    }
    static const char *const fields[] = {"on", "to", "capture"};
    CHECK_FIELDS(ld, start, "/start", fields);

    long e = -1, s = -1;
    const char *on = def_ld_get_string(ld, start, "/start", "on", true);
    if (on != NULL) {
        e = def_ld_use_event(ld, on, "/start/on");
        ld->usage_unknown = false;
    }

    const char *to = def_ld_get_string(ld, start, "/start", "to", true);
    if (to != NULL) {
        s = def_find_name(ld->state_names, def->n_states, to);
        if (s < 0 && def->n_states > 0) {
            char h[300];
            def_ld_problem(ld, "/start/to", "start goes to unknown state '%s'%s", to,
                           def_hint(h, sizeof h, to, ld->state_names, def->n_states));
        }
    }
    if (e >= 0 && s >= 0) {
        def->start_event = (size_t) e;
        def->start_state = (size_t) s;
        ld->start_resolved = true;
    }

    json_t *capture = json_object_get(start, "capture");
    if (capture != NULL)
        def_ld_parse_captures(ld, capture, "/start/capture", &def->start_captures,
                              &def->n_start_captures);
}

/* An event whose topic fixes its type must be alone on that topic. */
static void check_fixed_types(loader_t *ld)
{
    def_t *def = ld->def;
    for (size_t i = 0; i < def->n_events; i++) {
        if (!def->events[i].type_from_topic || def->events[i].topic == NULL)
            continue;
        for (size_t j = 0; j < def->n_events; j++) {
            if (j == i || def->events[j].topic == NULL ||
                strcmp(def->events[j].topic, def->events[i].topic) != 0)
                continue;
            char p[PTR_MAX], sub[PTR_MAX];
            def_ptr_join(p, "/events", def->events[i].name);
            def_ld_problem(
                ld, def_ptr_join(sub, p, "type_from_topic"),
                "every message on topic '%s' would be %s, but %s is declared on that topic "
                "too: give one of them another topic, or read the type from the payload",
                def->events[i].topic, def->events[i].name, def->events[j].name);
            break;
        }
    }
}

/* Events nothing refers to are a mistake or dead weight: either way the
 * manager would read their topic for nothing. */
static void check_unused_events(loader_t *ld)
{
    if (ld->usage_unknown || ld->event_used == NULL)
        return;
    for (size_t i = 0; i < ld->def->n_events; i++) {
        if (ld->event_used[i] || ld->event_names[i] == NULL)
            continue;
        char p[PTR_MAX];
        def_ld_problem(ld, def_ptr_join(p, "/events", ld->event_names[i]),
                       "event '%s' is declared but neither 'start' nor any state's 'on' uses it",
                       ld->event_names[i]);
    }
}

def_t *def_load_json(const char *text, size_t len, const char *source, def_problems_t *problems)
{
    loader_t ld = {0};
    ld.file = source != NULL ? source : "<definition>";
    ld.problems = problems;

    json_error_t jerr;
    json_t *doc = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (doc == NULL) {
        def_ld_problem(&ld, "", "invalid JSON at line %d, column %d: %s", jerr.line, jerr.column,
                       jerr.text);
        return NULL;
    }
    if (!json_is_object(doc)) {
        def_ld_problem(&ld, "", "expected a JSON object at the top level, got %s",
                       jsonptr_kind(doc));
        json_decref(doc);
        return NULL;
    }

    ld.def = def_ld_calloc(&ld, 1, sizeof *ld.def);
    if (ld.def == NULL) {
        json_decref(doc);
        return NULL;
    }
    def_t *def = ld.def;
    def->source = def_ld_strdup(&ld, ld.file);

    static const char *const fields[] = {"$schema",        "process",     "version", "mode",
                                         "owner",          "description", "key",     "envelope",
                                         "reorder_window", "deadline",    "topics",  "events",
                                         "start",          "states",      "any"};
    CHECK_FIELDS(&ld, doc, "", fields);

    prescan(&ld, doc);
    parse_header(&ld, doc);
    def_ld_parse_topics(&ld, doc);
    parse_events(&ld, doc);
    def_ld_check_topics(&ld);
    parse_start(&ld, doc);
    def_ld_parse_states(&ld, doc);
    def_ld_parse_any(&ld, doc);
    check_fixed_types(&ld);
    check_unused_events(&ld);
    ld.n_problems += def_check_command_topics(def, problems);
    if (!ld.graph_unknown && ld.start_resolved) {
        ld.n_problems += def_check_graph(def, problems);
        if (!ld.vars_unknown)
            ld.n_problems += def_check_template_paths(def, problems);
    }

    def_ld_topics_free(&ld);
    free(ld.state_names);
    free(ld.event_names);
    free(ld.event_used);
    free(ld.vars);

    if (ld.n_problems > 0) {
        def_free(def);
        json_decref(doc);
        return NULL;
    }
    def->document = doc; /* now owned by def */
    return def;
}
