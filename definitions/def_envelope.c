/*
 * def_envelope - where an event's type, key, id and time are: the
 * process's envelope (`key`, `envelope`), a topic's (`topics`) and an
 * event's own, each field defaulting to the level above; see def.h and
 * docs/definitions.md.
 *
 * One reader serves the three levels, so a rule reads and is reported the
 * same wherever it is written. A topic's problems name the topic in their
 * message as well as in their pointer: the team that owns that topic is
 * who fixes them.
 */
#include "definitions/def.h"

#include "definitions/def_int.h"
#include "definitions/jsonptr.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* *slot = a new copy of s (NULL stays NULL), the old value freed. */
static void set_string(loader_t *ld, char **slot, const char *s)
{
    char *copy = def_ld_strdup(ld, s);
    free(*slot);
    *slot = copy;
}

/* envelope.type at ptr ("/.../envelope"): a JSON pointer string, or
 * {"header": NAME}. Sets one of *pointer or *header (borrowed from the
 * document); false when absent or wrong (reported). */
static bool parse_type(loader_t *ld, json_t *env, const char *ptr, const char **pointer,
                       const char **header)
{
    char p[PTR_MAX], sub[PTR_MAX];
    json_t *v = json_object_get(env, "type");
    *pointer = *header = NULL;
    if (v == NULL)
        return false;
    def_ptr_join(p, ptr, "type");
    if (json_is_string(v)) {
        *pointer = def_ld_get_pointer(ld, env, ptr, "type", false);
        return *pointer != NULL;
    }
    if (!json_is_object(v)) {
        def_ld_problem(
            ld, p,
            "expected a JSON pointer string such as '/type' or {\"header\": \"event-type\"}, "
            "got %s",
            jsonptr_kind(v));
        return false;
    }
    static const char *const fields[] = {"header"};
    CHECK_FIELDS(ld, v, p, fields);
    const char *h = def_ld_get_string(ld, v, p, "header", true);
    if (h != NULL && !def_is_header_name(h)) {
        def_ld_problem(ld, def_ptr_join(sub, p, "header"),
                       "header name '%s' is not valid: 1 to 255 printable ASCII characters without "
                       "spaces",
                       h);
        return false;
    }
    *header = h;
    return h != NULL;
}

/* envelope.time at ptr: a JSON pointer string, {"pointer": P, "format": F}
 * or {"from": "kafka_timestamp"}. False when absent or wrong (reported). */
static bool parse_time(loader_t *ld, json_t *env, const char *ptr, const char **time_ptr,
                       def_time_format_t *format)
{
    char p[PTR_MAX], sub[PTR_MAX];
    json_t *v = json_object_get(env, "time");
    *time_ptr = NULL;
    *format = DEF_TIME_TEXT_OR_MS;
    if (v == NULL)
        return false;
    def_ptr_join(p, ptr, "time");
    if (json_is_string(v)) {
        *time_ptr = def_ld_get_pointer(ld, env, ptr, "time", false);
        return *time_ptr != NULL;
    }
    if (!json_is_object(v)) {
        def_ld_problem(
            ld, p,
            "expected a JSON pointer string such as '/occurred_at', {\"pointer\": \"/ts\", "
            "\"format\": \"epoch_millis\"} or {\"from\": \"kafka_timestamp\"}, got %s",
            jsonptr_kind(v));
        return false;
    }
    static const char *const fields[] = {"pointer", "format", "from"};
    CHECK_FIELDS(ld, v, p, fields);
    if (json_object_get(v, "from") != NULL) {
        const char *from = def_ld_get_string(ld, v, p, "from", false);
        if (json_object_get(v, "pointer") != NULL || json_object_get(v, "format") != NULL) {
            def_ld_problem(
                ld, p,
                "'from' takes the time from the Kafka message: it cannot have 'pointer' or "
                "'format' too");
            return false;
        }
        if (from != NULL && strcmp(from, "kafka_timestamp") != 0) {
            def_ld_problem(
                ld, def_ptr_join(sub, p, "from"),
                "time source '%s' is not valid: expected 'kafka_timestamp'; for a payload "
                "field give 'pointer' and 'format'",
                from);
            return false;
        }
        if (from == NULL)
            return false;
        *format = DEF_TIME_KAFKA;
        return true;
    }
    const char *pointer = def_ld_get_pointer(ld, v, p, "pointer", true);
    const char *f = def_ld_get_string(ld, v, p, "format", true);
    if (f == NULL || pointer == NULL)
        return false;
    static const char *const formats[] = {"rfc3339", "epoch_seconds", "epoch_millis"};
    static const def_time_format_t values[] = {DEF_TIME_RFC3339, DEF_TIME_EPOCH_SECONDS,
                                               DEF_TIME_EPOCH_MILLIS};
    long k = def_find_name(formats, 3, f);
    if (k < 0) {
        char h[128];
        def_ld_problem(ld, def_ptr_join(sub, p, "format"),
                       "time format '%s' is not valid: expected 'rfc3339', 'epoch_seconds' or "
                       "'epoch_millis'%s",
                       f, def_hint(h, sizeof h, f, formats, 3));
        return false;
    }
    *time_ptr = pointer;
    *format = values[k];
    return true;
}

bool def_ld_envelope(loader_t *ld, json_t *obj, const char *ptr, bool with_key,
                     const def_envelope_t *base, def_envelope_t *out, char **own_pointer,
                     char **own_header)
{
    bool declared = false;
    set_string(ld, &out->type_pointer, base->type_pointer);
    set_string(ld, &out->type_header, base->type_header);
    set_string(ld, &out->id_pointer, base->id_pointer);
    set_string(ld, &out->time_pointer, base->time_pointer);
    out->time_format = base->time_format;
    set_string(ld, &out->key_pointer, base->key_pointer);
    out->key_from_message = base->key_from_message;

    if (with_key) {
        const char *key;
        bool from_message;
        if (def_ld_get_key(ld, obj, ptr, false, &key, &from_message)) {
            set_string(ld, &out->key_pointer, key);
            out->key_from_message = from_message;
            declared = true;
        }
    }

    char p[PTR_MAX];
    def_ptr_join(p, ptr, "envelope");
    json_t *env = json_object_get(obj, "envelope");
    if (env == NULL)
        return declared;
    if (!json_is_object(env)) {
        def_ld_problem(ld, p,
                       "expected an object with JSON pointers for 'type', 'id' and 'time', got %s",
                       jsonptr_kind(env));
        return declared;
    }
    /* The key sits beside the envelope, as the process's does: say so
     * rather than list the fields. */
    static const char *const fields[] = {"type", "id", "time", "key"};
    CHECK_FIELDS(ld, env, p, fields);
    if (json_object_get(env, "key") != NULL) {
        char sub[PTR_MAX];
        def_ld_problem(ld, def_ptr_join(sub, p, "key"),
                       "the correlation key is not part of 'envelope': give it as 'key' beside "
                       "'envelope'");
    }

    const char *type_ptr, *type_header;
    if (parse_type(ld, env, p, &type_ptr, &type_header)) {
        declared = true;
        if (own_pointer != NULL) {
            set_string(ld, own_pointer, type_ptr);
            set_string(ld, own_header, type_header);
        } else {
            set_string(ld, &out->type_pointer, type_ptr != NULL ? type_ptr : "/type");
            set_string(ld, &out->type_header, type_header);
        }
    }
    if (json_object_get(env, "id") != NULL) {
        const char *id = def_ld_get_pointer(ld, env, p, "id", false);
        if (id != NULL) {
            set_string(ld, &out->id_pointer, id);
            declared = true;
        }
    }
    const char *time_ptr;
    def_time_format_t format;
    if (parse_time(ld, env, p, &time_ptr, &format)) {
        set_string(ld, &out->time_pointer, time_ptr);
        out->time_format = format;
        declared = true;
    }
    return declared;
}

/* ---- topics ---- */

/* topics.T.format: "json" (the default), "confluent_json" or
 * "confluent_avro". "confluent_protobuf" is refused with its reason: a
 * Protobuf payload is read only with code generated from its .proto
 * (protobuf-c), and a registry hands Steward the descriptor at run time. */
static def_format_t parse_format(loader_t *ld, json_t *entry, const char *ptr)
{
    if (json_object_get(entry, "format") == NULL)
        return DEF_FORMAT_JSON;
    const char *f = def_ld_get_string(ld, entry, ptr, "format", false);
    if (f == NULL)
        return DEF_FORMAT_JSON;
    static const char *const names[] = {"json", "confluent_json", "confluent_avro"};
    char p[PTR_MAX], h[128];
    if (strcmp(f, "confluent_protobuf") == 0) {
        def_ld_problem(ld, def_ptr_join(p, ptr, "format"),
                       "format 'confluent_protobuf' is not read: no packaged C library decodes "
                       "Protobuf from a descriptor fetched at run time (protobuf-c needs code "
                       "generated from the .proto); use 'confluent_avro' or 'confluent_json'");
        return DEF_FORMAT_JSON;
    }
    long k = def_find_name(names, 3, f);
    if (k < 0) {
        def_ld_problem(ld, def_ptr_join(p, ptr, "format"),
                       "format '%s' is not one Steward reads: 'json' (a JSON object), "
                       "'confluent_json' (the Confluent wire format around a JSON object, as "
                       "the JSON Schema serializer writes it) or 'confluent_avro' (around an "
                       "Avro payload, read with its schema from the schema registry)%s",
                       f, def_hint(h, sizeof h, f, names, 3));
        return DEF_FORMAT_JSON;
    }
    return k == 2   ? DEF_FORMAT_CONFLUENT_AVRO
           : k == 1 ? DEF_FORMAT_CONFLUENT_JSON
                    : DEF_FORMAT_JSON;
}

void def_ld_parse_topics(loader_t *ld, json_t *doc)
{
    json_t *topics = json_object_get(doc, "topics");
    if (topics == NULL)
        return;
    if (!json_is_object(topics)) {
        def_ld_problem(ld, "/topics",
                       "expected an object mapping topics to their envelopes, e.g. {\"payments\": "
                       "{\"envelope\": {\"type\": {\"header\": \"event-type\"}}}}, got %s",
                       jsonptr_kind(topics));
        return;
    }
    size_t n = json_object_size(topics);
    if (n == 0)
        return;
    ld->topics = def_ld_calloc(ld, n, sizeof *ld->topics);
    if (ld->topics == NULL)
        return;

    static const char *const fields[] = {"key", "envelope", "format"};
    const char *name;
    json_t *v;
    json_object_foreach(topics, name, v)
    {
        char p[PTR_MAX], context[TOPIC_MAX_LEN + 16];
        def_ptr_join(p, "/topics", name);
        if (!def_is_topic(name) || *name == '\0') {
            def_ld_problem(ld, p,
                           "'%s' is not a valid Kafka topic name: use letters, digits, '.', '_' "
                           "and '-' (at most %d characters)",
                           name, TOPIC_MAX_LEN);
            continue;
        }
        snprintf(context, sizeof context, "topic '%s': ", name);
        ld->context = context;
        if (!json_is_object(v)) {
            def_ld_problem(ld, p,
                           "expected an object such as {\"envelope\": {\"id\": \"/event_id\"}}, "
                           "got %s",
                           jsonptr_kind(v));
            ld->context = NULL;
            continue;
        }
        CHECK_FIELDS(ld, v, p, fields);
        ld_topic_t *t = &ld->topics[ld->n_topics++];
        t->name = name;
        def_ld_envelope(ld, v, p, true, &ld->def->envelope, &t->envelope, NULL, NULL);
        t->format = parse_format(ld, v, p);
        ld->context = NULL;
    }
}

const ld_topic_t *def_ld_topic(const loader_t *ld, const char *topic)
{
    for (size_t i = 0; topic != NULL && i < ld->n_topics; i++) {
        if (strcmp(ld->topics[i].name, topic) == 0)
            return &ld->topics[i];
    }
    return NULL;
}

void def_ld_check_topics(loader_t *ld)
{
    const def_t *def = ld->def;
    for (size_t i = 0; i < ld->n_topics; i++) {
        const char *name = ld->topics[i].name;
        if (def_topic_event(def, name) != NULL)
            continue;
        const char **topics = def_ld_calloc(ld, def->n_events, sizeof *topics);
        if (topics == NULL)
            return;
        for (size_t e = 0; e < def->n_events; e++)
            topics[e] = def->events[e].topic;
        char p[PTR_MAX], h[TOPIC_MAX_LEN + 32];
        def_ld_problem(ld, def_ptr_join(p, "/topics", name),
                       "topic '%s' has an envelope, but no event in 'events' arrives on it%s", name,
                       def_hint(h, sizeof h, name, topics, def->n_events));
        free(topics);
    }
}

void def_ld_topics_free(loader_t *ld)
{
    for (size_t i = 0; i < ld->n_topics; i++)
        def_envelope_clear(&ld->topics[i].envelope);
    free(ld->topics);
    ld->topics = NULL;
    ld->n_topics = 0;
}
