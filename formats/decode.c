/*
 * decode - message checks and envelopes; see decode.h. The formats a
 * value may come in are their own files: format_cloudevents.c (binary,
 * structured, a bare ce_type) and format_confluent.c (the Confluent wire
 * format's framing).
 */
#include "formats/decode.h"

#include "formats/format_cloudevents.h"
#include "formats/format_confluent.h"

#include "common/rfc3339.h"
#include "common/utf8.h"
#include "definitions/jsonptr.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

static const char *const reason_names[DECODE_N_REASONS] = {
    "ok",
    "tombstone",
    "too_large",
    "invalid_utf8",
    "invalid_json",
    "too_deep",
    "not_an_object",
    "unsupported_specversion",
    "invalid_cloudevent",
    "missing_type",
    "missing_key",
    "invalid_key",
    "invalid_time",
    "invalid_id",
    "invalid_header",
    "database_refused",
    "unknown_type",
    "unloadable_version",
    "schema_registry_format",
    "unknown_schema",
    "invalid_avro",
    "unsupported_schema_type",
    "unsupported_data",
};

const char *decode_reason_name(decode_reason_t reason)
{
    return reason < DECODE_N_REASONS ? reason_names[reason] : "unknown";
}

static const char *const trace_names[DECODE_TRACE_N] = {
    "none", "ok", "bad_version", "bad_format", "zero_trace_id", "zero_span_id",
};

const char *decode_trace_name(decode_trace_t trace)
{
    return trace < DECODE_TRACE_N ? trace_names[trace] : "unknown";
}

/* n lowercase hex digits at s, and whether they are all zero. */
static bool lower_hex(const char *s, size_t n, bool *zero)
{
    *zero = true;
    for (size_t i = 0; i < n; i++) {
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
        if (s[i] != '0')
            *zero = false;
    }
    return true;
}

decode_trace_t decode_traceparent(const char *text, size_t len,
                                  char out[DECODE_TRACEPARENT_LEN + 1])
{
    bool zero;
    out[0] = '\0';
    if (len >= 3 && text[2] == '-' && lower_hex(text, 2, &zero) && memcmp(text, "00", 2) != 0)
        return DECODE_TRACE_BAD_VERSION;
    /* Version 00 has exactly these fields: a longer one is malformed too. */
    if (len != DECODE_TRACEPARENT_LEN || memcmp(text, "00-", 3) != 0 || text[35] != '-' ||
        text[52] != '-' || !lower_hex(text + 53, 2, &zero))
        return DECODE_TRACE_BAD_FORMAT;
    if (!lower_hex(text + 3, 32, &zero))
        return DECODE_TRACE_BAD_FORMAT;
    if (zero)
        return DECODE_TRACE_ZERO_TRACE_ID;
    if (!lower_hex(text + 36, 16, &zero))
        return DECODE_TRACE_BAD_FORMAT;
    if (zero)
        return DECODE_TRACE_ZERO_SPAN_ID;
    memcpy(out, text, DECODE_TRACEPARENT_LEN);
    out[DECODE_TRACEPARENT_LEN] = '\0';
    return DECODE_TRACE_OK;
}

static const char *const tracestate_names[DECODE_TRACESTATE_N] = {
    "none", "ok", "too_long", "too_many_members", "bad_format",
};

const char *decode_tracestate_name(decode_tracestate_t fate)
{
    return fate < DECODE_TRACESTATE_N ? tracestate_names[fate] : "unknown";
}

static bool key_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '*' ||
           c == '/';
}

/* One list member, OWS already trimmed: key=value (see decode.h). */
static bool tracestate_member(const char *m, size_t n)
{
    const char *eq = memchr(m, '=', n);
    if (eq == NULL || eq == m)
        return false;
    size_t klen = (size_t) (eq - m), vlen = n - klen - 1;
    if (klen > 256 || vlen == 0 || vlen > 256 ||
        !((m[0] >= 'a' && m[0] <= 'z') || (m[0] >= '0' && m[0] <= '9')))
        return false;
    bool at = false;
    for (size_t i = 0; i < klen; i++) {
        if (m[i] == '@' && !at && i > 0 && i + 1 < klen)
            at = true;
        else if (!key_char(m[i]))
            return false;
    }
    for (size_t i = klen + 1; i < n; i++)
        if (m[i] < 0x20 || m[i] > 0x7e || m[i] == ',' || m[i] == '=')
            return false;
    return m[n - 1] != ' ';
}

decode_tracestate_t decode_tracestate(const char *text, size_t len,
                                      char out[DECODE_TRACESTATE_MAX + 1])
{
    out[0] = '\0';
    if (len > DECODE_TRACESTATE_MAX)
        return DECODE_TRACESTATE_TOO_LONG;
    size_t members = 0;
    for (size_t i = 0; i <= len;) {
        size_t end = i;
        while (end < len && text[end] != ',')
            end++;
        size_t a = i, z = end;
        while (a < z && (text[a] == ' ' || text[a] == '\t'))
            a++;
        while (z > a && (text[z - 1] == ' ' || text[z - 1] == '\t'))
            z--;
        if (z > a) { /* an empty member is allowed, and not counted */
            if (!tracestate_member(text + a, z - a))
                return DECODE_TRACESTATE_BAD_FORMAT;
            if (++members > DECODE_TRACESTATE_MEMBERS)
                return DECODE_TRACESTATE_TOO_MANY;
        }
        i = end + 1;
    }
    if (members == 0)
        return DECODE_TRACESTATE_NONE;
    memcpy(out, text, len);
    out[len] = '\0';
    return DECODE_TRACESTATE_OK;
}

/* The deepest nesting of arrays and objects, outside strings; stops
 * counting once past `limit`. */
static int nesting_depth(const char *s, size_t len, int limit)
{
    int depth = 0, deepest = 0;
    bool in_string = false;

    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (in_string) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '{' || c == '[') {
            if (++depth > deepest && (deepest = depth) > limit)
                return deepest;
        } else if (c == '}' || c == ']') {
            depth--;
        }
    }
    return deepest;
}

bool decode_time_in_range(int64_t ms)
{
    return ms >= DECODE_MIN_TIME_MS && ms <= DECODE_MAX_TIME_MS;
}

/*
 * A copy of the JSON text in which every integer literal beyond int64
 * gets a ".0", so that jansson reads it as a real (the nearest double)
 * instead of refusing the whole message; every other integer stays an
 * integer. Returns a new buffer (free it) and its length, or NULL.
 */
static char *widen_big_integers(const char *s, size_t len, size_t *out_len)
{
    char *out = malloc(len + len / 2 + 3); /* at worst ".0" after every 2 bytes */
    size_t o = 0;
    bool in_string = false;

    if (out == NULL)
        return NULL;
    for (size_t i = 0; i < len;) {
        char c = s[i];
        if (in_string) {
            out[o++] = c;
            if (c == '\\' && i + 1 < len)
                out[o++] = s[++i];
            else if (c == '"')
                in_string = false;
            i++;
        } else if (c == '"') {
            in_string = true;
            out[o++] = s[i++];
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            size_t start = i, digits = 0;
            bool integer = true;
            if (s[i] == '-')
                i++;
            while (i < len && (isdigit((unsigned char) s[i]) || s[i] == '.' || s[i] == 'e' ||
                               s[i] == 'E' || s[i] == '+' || s[i] == '-')) {
                if (isdigit((unsigned char) s[i]))
                    digits++;
                else
                    integer = false;
                i++;
            }
            memcpy(out + o, s + start, i - start);
            o += i - start;
            if (integer && digits >= 19) {
                char buf[32];
                bool fits = false;
                if (i - start < sizeof buf) {
                    memcpy(buf, s + start, i - start);
                    buf[i - start] = '\0';
                    errno = 0;
                    (void) strtoll(buf, NULL, 10);
                    fits = errno != ERANGE;
                }
                if (!fits) {
                    out[o++] = '.';
                    out[o++] = '0';
                }
            }
        } else {
            out[o++] = s[i++];
        }
    }
    *out_len = o;
    return out;
}

void decode_message_clear(decode_message_t *msg)
{
    json_decref(msg->value);
    json_decref(msg->headers);
    format_cloudevents_clear(msg);
    memset(msg, 0, sizeof *msg);
}

/* The headers a definition may read as text (see decode_message_t). */
static json_t *text_headers(const decode_input_t *in)
{
    json_t *out = json_object();
    for (size_t i = 0; out != NULL && i < in->n_headers; i++) {
        const decode_header_t *h = &in->headers[i];
        if (h->name == NULL || h->value == NULL || h->len > DECODE_MAX_HEADER_BYTES ||
            memchr(h->value, 0, h->len) != NULL || !utf8_valid(h->value, h->len) ||
            json_object_get(out, h->name) != NULL)
            continue;
        json_object_set_new(out, h->name, json_stringn(h->value, h->len));
    }
    return out;
}

static const decode_header_t *header_named(const decode_input_t *in, const char *name)
{
    for (size_t i = 0; i < in->n_headers; i++)
        if (in->headers[i].name != NULL && strcasecmp(in->headers[i].name, name) == 0)
            return &in->headers[i];
    return NULL;
}

/* Its tracestate comes from the carrier of the traceparent kept, and only
 * with a valid one (W3C: a tracestate without its traceparent means
 * nothing). */
static void read_tracestate(const char *text, size_t len, decode_message_t *out)
{
    if (out->trace == DECODE_TRACE_OK && text != NULL)
        out->tracestate_fate = decode_tracestate(text, len, out->tracestate);
}

/* The event's traceparent (see decode_trace_t): the Kafka header, which
 * the last producer's instrumentation sets, else the CloudEvents
 * extension format_cloudevents() found. */
static void read_trace(const decode_input_t *in, decode_message_t *out)
{
    const decode_header_t *h = header_named(in, "traceparent");
    if (h != NULL) {
        out->trace = h->value != NULL ? decode_traceparent(h->value, h->len, out->traceparent)
                                      : DECODE_TRACE_BAD_FORMAT;
        const decode_header_t *st = header_named(in, "tracestate");
        if (st != NULL)
            read_tracestate(st->value != NULL ? st->value : "", st->value != NULL ? st->len : 0,
                            out);
        return;
    }
    if (out->ce_traceparent != NULL) {
        out->trace =
            decode_traceparent(out->ce_traceparent, strlen(out->ce_traceparent), out->traceparent);
        if (out->ce_tracestate != NULL)
            read_tracestate(out->ce_tracestate, strlen(out->ce_tracestate), out);
    }
}

static decode_reason_t judge_value(const decode_input_t *in, decode_message_t *out, char *detail,
                                   size_t detail_size);

/* What every message passes first, whatever its format: a value, and
 * not over the size limit. Empties *out. */
static decode_reason_t judge_present(const decode_input_t *in, const decode_limits_t *limits,
                                     decode_message_t *out, char *detail, size_t detail_size)
{
    memset(out, 0, sizeof *out);
    out->schema_id = -1;
    detail[0] = '\0';
    if (in->value == NULL) {
        snprintf(detail, detail_size, "the message has no value (a tombstone)");
        return DECODE_TOMBSTONE;
    }
    if (in->value_len > limits->max_bytes) {
        snprintf(detail, detail_size, "the value is %zu bytes, over the limit of %zu",
                 in->value_len, limits->max_bytes);
        return DECODE_TOO_LARGE;
    }
    return DECODE_OK;
}

static decode_reason_t judge_message(const decode_input_t *in, const decode_limits_t *limits,
                                     def_format_t format, decode_message_t *out, char *detail,
                                     size_t detail_size)
{
    json_error_t jerr;

    decode_reason_t why = judge_present(in, limits, out, detail, detail_size);
    if (why != DECODE_OK)
        return why;
    /* A value framed for a schema registry: read its payload where the
     * topic's format says it is JSON, refuse it with its schema id
     * otherwise (it would read as invalid_json, which blames the
     * producer for what Steward does not read). */
    const char *value = in->value;
    size_t value_len = in->value_len;
    uint32_t schema_id;
    const void *payload;
    size_t payload_len;
    if (format_confluent_frame(in->value, in->value_len, &schema_id, &payload, &payload_len)) {
        if (format == DEF_FORMAT_CONFLUENT_AVRO) {
            snprintf(detail, detail_size,
                     "Confluent wire format (magic byte 0), schema id %" PRIu32
                     ": the Avro payload was not read: its schema was not found",
                     schema_id);
            return DECODE_UNKNOWN_SCHEMA;
        }
        if (format != DEF_FORMAT_CONFLUENT_JSON) {
            snprintf(detail, detail_size,
                     "Confluent wire format (magic byte 0), schema id %" PRIu32
                     ": the value is framed for a schema registry; to read it, declare the "
                     "topic's \"format\": \"confluent_avro\" for an Avro payload (schemas from "
                     "schema_registry in the configuration) or \"confluent_json\" for a JSON "
                     "one (Protobuf is not read)",
                     schema_id);
            return DECODE_SCHEMA_REGISTRY_FORMAT;
        }
        const char *p = payload;
        size_t skip = 0;
        while (skip < payload_len &&
               (p[skip] == ' ' || p[skip] == '\t' || p[skip] == '\n' || p[skip] == '\r'))
            skip++;
        if (skip == payload_len || p[skip] != '{' || !utf8_valid(payload, payload_len)) {
            snprintf(detail, detail_size,
                     "Confluent wire format (magic byte 0), schema id %" PRIu32
                     ": the payload after the schema id is not a JSON object (Avro or "
                     "Protobuf?); the topic's format confluent_json reads JSON payloads only",
                     schema_id);
            return DECODE_SCHEMA_REGISTRY_FORMAT;
        }
        value = payload;
        value_len = payload_len;
        out->schema_id = schema_id;
    }
    why = format_cloudevents_content(in, detail, detail_size);
    if (why != DECODE_OK)
        return why;
    if (!utf8_valid((const unsigned char *) value, value_len)) {
        snprintf(detail, detail_size, "the value is not valid UTF-8");
        return DECODE_INVALID_UTF8;
    }
    int depth = nesting_depth(value, value_len, limits->max_depth);
    if (depth > limits->max_depth) {
        snprintf(detail, detail_size, "the value nests deeper than %d levels", limits->max_depth);
        return DECODE_TOO_DEEP;
    }
    /* JSON_DECODE_ANY: a bare string, number or null is valid JSON and
     * gets the same reason as an array, not_an_object. */
    out->value = json_loadb(value, value_len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
    if (out->value == NULL && json_error_code(&jerr) == json_error_numeric_overflow) {
        /* An integer beyond 64 bits somewhere in the event: read it as a
         * real rather than refuse the event for a field nobody may read. */
        size_t wide_len;
        char *wide = widen_big_integers(value, value_len, &wide_len);
        if (wide != NULL)
            out->value =
                json_loadb(wide, wide_len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
        free(wide);
    }
    if (out->value == NULL) {
        snprintf(detail, detail_size, "invalid JSON at line %d column %d: %s", jerr.line,
                 jerr.column, jerr.text);
        return DECODE_INVALID_JSON;
    }
    return judge_value(in, out, detail, detail_size);
}

/* The judgement of a parsed value (out->value), whatever format it came
 * in: an object, then its CloudEvents attributes, headers and trace. */
static decode_reason_t judge_value(const decode_input_t *in, decode_message_t *out, char *detail,
                                   size_t detail_size)
{
    decode_reason_t reason;
    if (!json_is_object(out->value)) {
        snprintf(detail, detail_size, "the value is %s but not an object",
                 out->avro ? "Avro" : "JSON");
        reason = DECODE_NOT_OBJECT;
        goto done;
    }
    out->data = out->value;

    reason = format_cloudevents(in, out, detail, detail_size);

    if (reason == DECODE_OK) {
        out->headers = text_headers(in);
        read_trace(in, out);
    }

done:
    if (reason != DECODE_OK)
        decode_message_clear(out);
    return reason;
}

decode_reason_t decode_message_avro(const decode_input_t *in, const decode_limits_t *limits,
                                    const format_avro_schema_t *schema, decode_message_t *out,
                                    char *detail, size_t detail_size)
{
    uint32_t schema_id;
    const void *payload;
    size_t payload_len;
    char why[224];

    decode_reason_t present = judge_present(in, limits, out, detail, detail_size);
    if (present != DECODE_OK)
        return present;
    if (!format_confluent_frame(in->value, in->value_len, &schema_id, &payload, &payload_len)) {
        snprintf(detail, detail_size, "the value is not in the Confluent wire format");
        return DECODE_INVALID_AVRO;
    }
    switch (format_avro_decode(schema, payload, payload_len, limits->max_depth, &out->value, why,
                               sizeof why)) {
    case FORMAT_AVRO_OK:
        break;
    case FORMAT_AVRO_TOO_DEEP:
        snprintf(detail, detail_size, "schema id %" PRIu32 ": %s", schema_id, why);
        return DECODE_TOO_DEEP;
    case FORMAT_AVRO_INVALID_UTF8:
        snprintf(detail, detail_size, "schema id %" PRIu32 ": %s", schema_id, why);
        return DECODE_INVALID_UTF8;
    default:
        snprintf(detail, detail_size, "schema id %" PRIu32 ": %s", schema_id, why);
        return DECODE_INVALID_AVRO;
    }
    out->schema_id = schema_id;
    out->avro = true;
    return judge_value(in, out, detail, detail_size);
}

/*
 * A detail becomes steward.rejected.detail, a text column, and may quote
 * what was cut inside a character: a value by "%.60s", the message itself
 * in jansson's error ("near '...'"). PostgreSQL refuses such text, and with
 * it the row that records the rejection.
 */
decode_reason_t decode_message(const decode_input_t *in, const decode_limits_t *limits,
                               decode_message_t *out, char *detail, size_t detail_size)
{
    return decode_message_as(in, limits, DEF_FORMAT_JSON, out, detail, detail_size);
}

decode_reason_t decode_message_as(const decode_input_t *in, const decode_limits_t *limits,
                                  def_format_t format, decode_message_t *out, char *detail,
                                  size_t detail_size)
{
    decode_reason_t reason = judge_message(in, limits, format, out, detail, detail_size);
    utf8_scrub(detail);
    return reason;
}

/* The type by one rule: the header's text when it names a header (header
 * names compare without case, as HTTP's and CloudEvents' do), else
 * ce_type, else the string at the pointer. */
static const char *type_by_rule(const decode_message_t *msg, const char *pointer,
                                const char *header)
{
    if (header != NULL) {
        const char *name;
        json_t *v;
        json_object_foreach(msg->headers, name, v)
        {
            if (strcasecmp(name, header) == 0 && json_string_length(v) > 0)
                return json_string_value(v);
        }
        return NULL;
    }
    if (msg->ce_type != NULL)
        return msg->ce_type;
    json_t *type = pointer != NULL ? jsonptr_get(msg->data, pointer) : NULL;
    return json_is_string(type) ? json_string_value(type) : NULL;
}

const char *decode_type_of(const decode_message_t *msg, const def_envelope_t *env)
{
    return type_by_rule(msg, env->type_pointer, env->type_header);
}

const char *decode_event_type(const decode_message_t *msg, const decode_input_t *in,
                              const def_t *def)
{
    const char *topic = in->topic;
    for (size_t i = 0; topic != NULL && i < def->n_events; i++) {
        if (def->events[i].type_from_topic && strcmp(def->events[i].topic, topic) == 0)
            return def->events[i].name;
    }
    /* An event with a rule of its own is itself when its rule reads its
     * name: one topic, several producers' conventions. */
    for (size_t i = 0; topic != NULL && i < def->n_events; i++) {
        const def_event_t *ev = &def->events[i];
        if ((ev->own_type_pointer == NULL && ev->own_type_header == NULL) ||
            strcmp(ev->topic, topic) != 0)
            continue;
        const char *type = type_by_rule(msg, ev->own_type_pointer, ev->own_type_header);
        if (type != NULL && strcmp(type, ev->name) == 0)
            return ev->name;
    }
    const def_event_t *first = def_topic_event(def, topic);
    return decode_type_of(msg, first != NULL ? &first->envelope : &def->envelope);
}

void decode_type_source(const def_t *def, const char *topic, char *buf, size_t size)
{
    const def_event_t *first = def_topic_event(def, topic);
    const def_envelope_t *env = first != NULL ? &first->envelope : &def->envelope;
    char whose[300];
    if (first != NULL && first->topic_envelope)
        snprintf(whose, sizeof whose, "the envelope.type of topic %.249s", first->topic);
    else
        snprintf(whose, sizeof whose, "the definition's envelope.type");
    if (env->type_header != NULL)
        snprintf(buf, size, "no text in header '%.255s' (%s)", env->type_header, whose);
    else
        snprintf(buf, size, "no ce_type header and no string at %s (%s)", env->type_pointer, whose);
}

/* The correlation key of event `name` by `env` into *key (new string). */
static decode_reason_t read_key(const decode_message_t *msg, const decode_input_t *in,
                                const def_envelope_t *env, const char *name, char **key,
                                char *detail, size_t detail_size)
{
    *key = NULL;
    if (env->key_from_message) {
        if (in->key == NULL || in->key_len == 0) {
            snprintf(detail, detail_size,
                     "%s has no Kafka message key, and its correlation key is the message key",
                     name);
            return DECODE_MISSING_KEY;
        }
        if (in->key_len > DECODE_MAX_KEY_BYTES) {
            snprintf(detail, detail_size,
                     "%s's Kafka message key is %zu bytes, over the limit of %d", name, in->key_len,
                     DECODE_MAX_KEY_BYTES);
            return DECODE_INVALID_KEY;
        }
        if (memchr(in->key, 0, in->key_len) != NULL || !utf8_valid(in->key, in->key_len)) {
            snprintf(detail, detail_size,
                     "%s's Kafka message key is not UTF-8 text without NUL bytes (a binary key "
                     "cannot be a correlation key)",
                     name);
            return DECODE_INVALID_KEY;
        }
        *key = strndup(in->key, in->key_len);
        return DECODE_OK;
    }

    json_t *v = env->key_pointer != NULL ? jsonptr_get(msg->data, env->key_pointer) : NULL;
    if (v == NULL || json_is_null(v)) {
        snprintf(detail, detail_size, "%s has no correlation key at %s", name, env->key_pointer);
        return DECODE_MISSING_KEY;
    }
    if (json_is_integer(v)) {
        /* A numeric id is its decimal text: 5 and "5" are the same instance. */
        if (asprintf(key, "%" JSON_INTEGER_FORMAT, json_integer_value(v)) < 0)
            *key = NULL;
        return DECODE_OK;
    }
    if (!json_is_string(v)) {
        snprintf(detail, detail_size,
                 "%s's correlation key at %s is %s: expected a string or an integer", name,
                 env->key_pointer, jsonptr_kind(v));
        return DECODE_INVALID_KEY;
    }
    if (json_string_length(v) == 0) {
        snprintf(detail, detail_size, "%s's correlation key at %s is an empty string", name,
                 env->key_pointer);
        return DECODE_INVALID_KEY;
    }
    if (json_string_length(v) > DECODE_MAX_KEY_BYTES) {
        snprintf(detail, detail_size,
                 "%s's correlation key at %s is %zu bytes, over the limit of %d", name,
                 env->key_pointer, json_string_length(v), DECODE_MAX_KEY_BYTES);
        return DECODE_INVALID_KEY;
    }
    *key = strdup(json_string_value(v));
    return DECODE_OK;
}

/* The event time of event `name` into *ms, as `env` declares it. */
static decode_reason_t read_time(const decode_message_t *msg, const decode_input_t *in,
                                 const def_envelope_t *env, const char *name, int64_t *ms,
                                 char *detail, size_t detail_size)
{
    static const char *const format_names[] = {"RFC 3339 text or epoch ms", "RFC 3339 text",
                                               "epoch seconds", "epoch milliseconds", ""};
    if (env->time_format == DEF_TIME_KAFKA) {
        if (in->timestamp_ms < 0) {
            snprintf(detail, detail_size,
                     "%s has no Kafka timestamp, and the definition takes its time from it", name);
            return DECODE_INVALID_TIME;
        }
        *ms = in->timestamp_ms;
        /* A producer may set the timestamp: it is outside input too. */
        if (!decode_time_in_range(*ms)) {
            snprintf(detail, detail_size,
                     "%s's Kafka timestamp %" PRId64
                     " ms is outside the years 0001 to 9999 Steward accepts",
                     name, *ms);
            return DECODE_INVALID_TIME;
        }
        return DECODE_OK;
    }

    /* CloudEvents time is the producer's own statement: it comes first. */
    const char *text = msg->ce_time;
    json_t *v = NULL;
    if (text == NULL && env->time_pointer != NULL) {
        v = jsonptr_get(msg->data, env->time_pointer);
        if (v == NULL && env->time_format == DEF_TIME_TEXT_OR_MS)
            goto kafka; /* a plain pointer falls back when the field is absent */
        if (v == NULL || json_is_null(v)) {
            snprintf(detail, detail_size, "%s has no time at %s (%s)", name, env->time_pointer,
                     format_names[env->time_format]);
            return DECODE_INVALID_TIME;
        }
        if (json_is_string(v))
            text = json_string_value(v);
    }
    if (text != NULL && v != NULL && env->time_format != DEF_TIME_TEXT_OR_MS &&
        env->time_format != DEF_TIME_RFC3339) {
        snprintf(detail, detail_size, "%s's time at %s is a string, not an integer of %s", name,
                 env->time_pointer, format_names[env->time_format]);
        return DECODE_INVALID_TIME;
    }
    if (text != NULL) {
        if (!rfc3339_parse(text, ms)) {
            snprintf(detail, detail_size, "%s's time '%.60s' is not an RFC 3339 timestamp", name,
                     text);
            return DECODE_INVALID_TIME;
        }
    } else if (v != NULL && json_is_integer(v) && env->time_format != DEF_TIME_RFC3339) {
        json_int_t n = json_integer_value(v);
        if (env->time_format == DEF_TIME_EPOCH_SECONDS) {
            /* Range first: the product must not overflow. */
            if (n < DECODE_MIN_TIME_MS / 1000 || n > DECODE_MAX_TIME_MS / 1000) {
                snprintf(detail, detail_size,
                         "%s's time %" JSON_INTEGER_FORMAT
                         " s is outside the years 0001 to 9999 Steward accepts",
                         name, n);
                return DECODE_INVALID_TIME;
            }
            *ms = (int64_t) n * 1000;
        } else {
            *ms = n;
        }
    } else if (v != NULL) {
        snprintf(detail, detail_size, "%s's time at %s is %s, not %s", name, env->time_pointer,
                 jsonptr_kind(v), format_names[env->time_format]);
        return DECODE_INVALID_TIME;
    } else {
    kafka:
        *ms = in->timestamp_ms >= 0 ? in->timestamp_ms : 0;
    }
    if (!decode_time_in_range(*ms)) {
        snprintf(detail, detail_size,
                 "%s's time %" PRId64 " ms%s is outside the years 0001 to 9999 Steward accepts",
                 name, *ms, v != NULL || text != NULL ? "" : " (Kafka)");
        return DECODE_INVALID_TIME;
    }
    return DECODE_OK;
}

void decode_envelope_clear(decode_envelope_t *env)
{
    free(env->key);
    free(env->id);
    env->key = env->id = NULL;
}

/* A fencing token: a positive integer, or its decimal text; 0 otherwise. */
static int64_t token_value(const json_t *v)
{
    if (json_is_integer(v))
        return json_integer_value(v) > 0 ? json_integer_value(v) : 0;
    if (!json_is_string(v))
        return 0;
    const char *s = json_string_value(v);
    char *end;
    errno = 0;
    long long n = strtoll(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || n <= 0 || *s < '0' || *s > '9')
        return 0;
    return n;
}

/* The token of a reply to `event`: read where the first state that accepts
 * it (in its `on` or as a lease event) and declares a token says. */
static int64_t read_token(const decode_message_t *msg, const def_t *def, size_t event)
{
    for (size_t i = 0; i < def->n_states; i++) {
        const def_state_t *st = &def->states[i];
        if (st->token.pointer == NULL && st->token.header == NULL)
            continue;
        bool accepts = def_lease_event(def, i, event, NULL);
        for (size_t k = 0; k < st->n_on && !accepts; k++)
            accepts = st->on[k].event == event;
        if (!accepts)
            continue;
        if (st->token.pointer != NULL)
            return token_value(jsonptr_get(msg->data, st->token.pointer));
        return msg->headers != NULL ? token_value(json_object_get(msg->headers, st->token.header))
                                    : 0;
    }
    return 0;
}

static decode_reason_t read_envelope(const decode_message_t *msg, const decode_input_t *in,
                                     const def_envelope_t *env, const char *name,
                                     decode_envelope_t *out, char *detail, size_t detail_size)
{
    decode_reason_t reason;

    memset(out, 0, sizeof *out);
    char *key = NULL;
    /* An envelope without a key (a reader that only orders events) reads none. */
    if (env->key_from_message || env->key_pointer != NULL) {
        reason = read_key(msg, in, env, name, &key, detail, detail_size);
        if (reason != DECODE_OK)
            return reason;
    }

    /* Identity: what the producer says, else where the message sits. */
    json_t *id = NULL;
    if (msg->cloudevent) {
        if (asprintf(&out->id, "%s#%s", msg->ce_source, msg->ce_id) < 0)
            out->id = NULL;
    } else if (env->id_pointer != NULL && (id = jsonptr_get(msg->data, env->id_pointer)) != NULL &&
               json_is_string(id) && json_string_length(id) > 0) {
        out->id = strdup(json_string_value(id));
    } else if (id != NULL && json_is_integer(id)) {
        if (asprintf(&out->id, "%" JSON_INTEGER_FORMAT, json_integer_value(id)) < 0)
            out->id = NULL;
    } else if (asprintf(&out->id, "%s/%" PRId32 "/%" PRId64, in->topic, in->partition, in->offset) <
               0) {
        out->id = NULL;
    }
    if (out->id != NULL && strlen(out->id) > DECODE_MAX_ID_BYTES) {
        snprintf(detail, detail_size, "%s's event id%s is %zu bytes, over the limit of %d", name,
                 msg->cloudevent ? " (CloudEvents source#id)" : "", strlen(out->id),
                 DECODE_MAX_ID_BYTES);
        reason = DECODE_INVALID_ID;
        goto fail;
    }

    reason = read_time(msg, in, env, name, &out->time_ms, detail, detail_size);
    if (reason != DECODE_OK)
        goto fail;
    out->key = key;
    return DECODE_OK;

fail:
    free(key);
    free(out->id);
    out->id = NULL;
    return reason;
}

decode_reason_t decode_read(const decode_message_t *msg, const decode_input_t *in,
                            const def_envelope_t *env, const char *event, decode_envelope_t *out,
                            char *detail, size_t detail_size)
{
    detail[0] = '\0';
    decode_reason_t reason = read_envelope(msg, in, env, event, out, detail, detail_size);
    utf8_scrub(detail);
    return reason;
}

/* The detail is a text column too: see decode_message(). */
decode_reason_t decode_envelope(const decode_message_t *msg, const decode_input_t *in,
                                const def_t *def, size_t event, decode_envelope_t *out,
                                char *detail, size_t detail_size)
{
    const def_event_t *ev = &def->events[event];
    def_format_t read_as = msg->avro ? DEF_FORMAT_CONFLUENT_AVRO : DEF_FORMAT_CONFLUENT_JSON;
    if (msg->schema_id >= 0 && ev->format != read_as) {
        /* Another process reads the topic's framed values; this one did
         * not say it does. */
        memset(out, 0, sizeof *out);
        snprintf(detail, detail_size,
                 "Confluent wire format (magic byte 0), schema id %" PRId64
                 ": %s's topic %s has no \"format\": \"%s\" in this definition",
                 msg->schema_id, ev->name, ev->topic,
                 msg->avro ? "confluent_avro" : "confluent_json");
        utf8_scrub(detail);
        return DECODE_SCHEMA_REGISTRY_FORMAT;
    }
    decode_reason_t reason =
        decode_read(msg, in, &ev->envelope, ev->name, out, detail, detail_size);
    if (reason == DECODE_OK)
        out->token = read_token(msg, def, event);
    return reason;
}

/* A new string: s with its control characters escaped (see decode.h);
 * NULL when s has none or memory is short. */
static char *printable(const char *s)
{
    size_t need = 0;
    bool any = false;
    for (const unsigned char *p = (const unsigned char *) s; *p; p++) {
        if (*p < 0x20 || *p == 0x7f) {
            need += 4, any = true;
        } else if (*p == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) {
            need += 6, any = true, p++;
        } else {
            need++;
        }
    }
    char *out = any ? malloc(need + 1) : NULL;
    if (out == NULL)
        return NULL;
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *) s; *p; p++) {
        if (*p < 0x20 || *p == 0x7f) {
            o += (size_t) snprintf(out + o, need + 1 - o, "\\x%02x", *p);
        } else if (*p == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) {
            o += (size_t) snprintf(out + o, need + 1 - o, "\\u%04x", p[1]);
            p++;
        } else {
            out[o++] = (char) *p;
        }
    }
    out[o] = '\0';
    return out;
}

void decode_json_printable(json_t *value)
{
    if (json_is_string(value)) {
        char *safe = printable(json_string_value(value));
        if (safe != NULL)
            json_string_set(value, safe);
        free(safe);
    } else if (json_is_array(value)) {
        for (size_t i = 0; i < json_array_size(value); i++)
            decode_json_printable(json_array_get(value, i));
    } else if (json_is_object(value)) {
        /* Keys cannot be changed in place: collect the ones to rename,
         * then rename them outside the iteration. */
        const char *name;
        json_t *member;
        json_t *renames = json_array();
        json_object_foreach(value, name, member)
        {
            decode_json_printable(member);
            char *safe = printable(name);
            if (safe != NULL)
                json_array_append_new(renames, json_string(name));
            free(safe);
        }
        for (size_t i = 0; i < json_array_size(renames); i++) {
            const char *old_name = json_string_value(json_array_get(renames, i));
            char *safe = printable(old_name);
            if (safe != NULL) {
                json_object_set(value, safe, json_object_get(value, old_name));
                json_object_del(value, old_name);
            }
            free(safe);
        }
        json_decref(renames);
    }
}
