/*
 * decode - from a Kafka message to an event: the checks every message
 * passes, CloudEvents (binary and structured mode), and the envelope a
 * definition reads (type, correlation key, identity, time).
 *
 * Decoding happens in two steps. decode_message() judges the message as a
 * whole (size, UTF-8, JSON, nesting, CloudEvents attributes) once, however
 * many processes listen on its topic. decode_envelope() then reads what
 * one process needs from it through that definition's JSON pointers.
 * Either step may reject: the reason is one of decode_reason_t, named in
 * steward.rejected, and the detail says what was wrong.
 */
#ifndef STEWARD_DECODE_H
#define STEWARD_DECODE_H

#include "definitions/def.h"
#include "formats/format_avro.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum decode_reason {
    DECODE_OK = 0,
    DECODE_TOMBSTONE, /* a null value */
    DECODE_TOO_LARGE, /* over limits.max_bytes */
    DECODE_INVALID_UTF8,
    DECODE_INVALID_JSON,
    DECODE_TOO_DEEP,   /* nesting over limits.max_depth */
    DECODE_NOT_OBJECT, /* valid JSON, but not an object */
    DECODE_UNSUPPORTED_SPECVERSION,
    DECODE_INVALID_CLOUDEVENT,      /* a required attribute missing or mistyped */
    DECODE_MISSING_TYPE,            /* no ce_type and nothing at the type pointer */
    DECODE_MISSING_KEY,             /* nothing at the correlation key's pointer */
    DECODE_INVALID_KEY,             /* the key is not a non-empty string or an integer */
    DECODE_INVALID_TIME,            /* an event time not in its declared format, or
                                       outside DECODE_MIN_TIME_MS..DECODE_MAX_TIME_MS */
    DECODE_INVALID_ID,              /* an event id over DECODE_MAX_ID_BYTES */
    DECODE_INVALID_HEADER,          /* a CloudEvents header that is not UTF-8, holds a NUL
                                       byte or is over DECODE_MAX_HEADER_BYTES */
    DECODE_DATABASE_REFUSED,        /* passed decode, but PostgreSQL refused its content */
    DECODE_UNKNOWN_TYPE,            /* no loaded definition declares its type on its topic
                                       (recorded only with intake.record_unknown) */
    DECODE_UNLOADABLE_VERSION,      /* its instance runs on a definition version (or is in a
                                       state) this replica cannot load */
    DECODE_SCHEMA_REGISTRY_FORMAT,  /* the Confluent wire format (magic byte 0, a schema id)
                                       where the topic's format does not say so, or around
                                       a payload that is not JSON; the detail names the id */
    DECODE_UNKNOWN_SCHEMA,          /* a confluent_avro topic's schema id the registry does not
                                       have (404, or no <id>.avsc file); the detail names it */
    DECODE_INVALID_AVRO,            /* the payload does not read with its schema (or the schema
                                       text is not an Avro schema); the detail says where */
    DECODE_UNSUPPORTED_SCHEMA_TYPE, /* the registry's schema for the id is PROTOBUF or JSON on a
                                       confluent_avro topic; the detail names id and type */
    DECODE_UNSUPPORTED_DATA,        /* a CloudEvent whose data is not JSON (its datacontenttype
                                       says another type, or it is data_base64) or that is in
                                       a structured format other than JSON; the detail names
                                       the type */
    DECODE_N_REASONS
} decode_reason_t;

/* The reason's name as steward.rejected and the metrics say it. */
const char *decode_reason_name(decode_reason_t reason);

typedef struct decode_header {
    const char *name;
    const void *value; /* may be NULL */
    size_t len;
} decode_header_t;

/* A message as it came from Kafka; every pointer is borrowed. */
typedef struct decode_input {
    const char *topic;
    int32_t partition;
    int64_t offset;
    const void *key; /* the Kafka message key; may be NULL */
    size_t key_len;
    const void *value; /* NULL for a tombstone */
    size_t value_len;
    const decode_header_t *headers;
    size_t n_headers;
    int64_t timestamp_ms; /* the Kafka timestamp; -1 when absent */
} decode_input_t;

typedef struct decode_limits {
    size_t max_bytes;
    int max_depth;
} decode_limits_t;

#define DECODE_DEFAULT_MAX_BYTES (1024 * 1024)
#define DECODE_DEFAULT_MAX_DEPTH 64

/*
 * What PostgreSQL can store, checked here so that no message reaches the
 * database with something it refuses (which would fail its whole batch).
 *
 * Key and id: history and parked index (process, key, event_id), and a
 * btree index entry must fit in a third of a page (2704 bytes with 8 kB
 * pages); a process name is at most 63 bytes, so 1024 + 1024 + 63 plus
 * tuple overhead leaves room. Keys that long are never meant: the limit
 * only catches garbage. The id of a CloudEvent is "source#id", and the
 * limit is on that whole string.
 *
 * Headers: the CloudEvents attributes read from headers become text
 * columns, so they must be UTF-8 without NUL bytes; their size is capped
 * like the id, which is made of two of them.
 *
 * Times: the years 0001 to 9999 of RFC 3339, in epoch milliseconds.
 * PostgreSQL's timestamptz reaches 294276 AD, so a time in this range
 * plus the longest deadline a definition may declare (DEF_MAX_DURATION_MS,
 * 100 years) still fits, and the sums cannot overflow an int64.
 */
#define DECODE_MAX_KEY_BYTES    1024
#define DECODE_MAX_ID_BYTES     1024
#define DECODE_MAX_HEADER_BYTES 1024
#define DECODE_MIN_TIME_MS      (-62135596800000LL) /* 0001-01-01T00:00:00Z */
#define DECODE_MAX_TIME_MS      253402300799999LL   /* 9999-12-31T23:59:59.999Z */

/* True if `ms` is an event time Steward accepts (see above). */
bool decode_time_in_range(int64_t ms);

/*
 * W3C Trace Context: the traceparent of an event, read from its Kafka
 * header `traceparent`, else its CloudEvents distributed-tracing
 * extension (binary mode's `ce_traceparent` header, structured mode's
 * `traceparent` attribute). Version 00 only: "00-" 32 lowercase hex
 * digits (the trace id, not all zero) "-" 16 (the span id, not all zero)
 * "-" 2 (the flags). A malformed one never rejects the event: it is
 * ignored, and its reason counted (metrics.traceparent_ignored).
 */
typedef enum decode_trace {
    DECODE_TRACE_NONE = 0,    /* the event carries none */
    DECODE_TRACE_OK,          /* a valid one, kept */
    DECODE_TRACE_BAD_VERSION, /* a version other than 00 */
    DECODE_TRACE_BAD_FORMAT,  /* not 00-<32 hex>-<16 hex>-<2 hex> in lowercase */
    DECODE_TRACE_ZERO_TRACE_ID,
    DECODE_TRACE_ZERO_SPAN_ID,
    DECODE_TRACE_N
} decode_trace_t;

#define DECODE_TRACEPARENT_LEN 55 /* "00-" + 32 + "-" + 16 + "-" + 2 */

/* The name of a traceparent's fate, as the metric's reason label says it. */
const char *decode_trace_name(decode_trace_t trace);

/*
 * Judges one traceparent (len bytes, not NUL-terminated). On
 * DECODE_TRACE_OK `out` holds it as text; otherwise out is "".
 */
decode_trace_t decode_traceparent(const char *text, size_t len,
                                  char out[DECODE_TRACEPARENT_LEN + 1]);

/*
 * W3C Trace Context's tracestate: vendor data that travels with a
 * traceparent, read from the same carrier as the traceparent kept (the
 * Kafka header `tracestate`, or the CloudEvents `ce_tracestate` header /
 * structured `tracestate` attribute) and only with a valid one. Kept and
 * forwarded exactly as sent once it passes: at most DECODE_TRACESTATE_MAX
 * bytes of printable ASCII (tabs and spaces only around commas), at most
 * DECODE_TRACESTATE_MEMBERS list members, each `key=value` with a key of
 * lowercase letters, digits and _-*\/ (one @ for tenant@system, 256 bytes
 * at most) and a value of 1 to 256 printable characters but `,` and `=`
 * that does not end in a space. A malformed one is dropped (the event and
 * its traceparent are kept) and its reason counted
 * (steward_tracestate_ignored_total).
 */
typedef enum decode_tracestate {
    DECODE_TRACESTATE_NONE = 0,   /* none sent (or no valid traceparent to go with) */
    DECODE_TRACESTATE_OK,         /* kept */
    DECODE_TRACESTATE_TOO_LONG,   /* over DECODE_TRACESTATE_MAX bytes */
    DECODE_TRACESTATE_TOO_MANY,   /* over DECODE_TRACESTATE_MEMBERS list members */
    DECODE_TRACESTATE_BAD_FORMAT, /* not printable ASCII, or a member not key=value */
    DECODE_TRACESTATE_N
} decode_tracestate_t;

#define DECODE_TRACESTATE_MAX     512
#define DECODE_TRACESTATE_MEMBERS 32

/* The name of a tracestate's fate, as the metric's reason label says it. */
const char *decode_tracestate_name(decode_tracestate_t fate);

/*
 * Judges one tracestate (len bytes, not NUL-terminated). On
 * DECODE_TRACESTATE_OK `out` holds it unchanged as text; otherwise "".
 * An empty one (or one of empty members only) is DECODE_TRACESTATE_NONE.
 */
decode_tracestate_t decode_tracestate(const char *text, size_t len,
                                      char out[DECODE_TRACESTATE_MAX + 1]);

/* A message that passed decode_message(). */
typedef struct decode_message {
    json_t *value;      /* the parsed value; owned */
    const json_t *data; /* what pointers read: CloudEvents structured mode's
                           "data", else the value; borrowed from value */
    bool cloudevent;    /* binary or structured CloudEvents */
    char *ce_type;      /* owned; NULL when not a CloudEvent and no ce_type header
                           names the type (a bare ce_type header: cloudevent false) */
    char *ce_id;
    char *ce_source;
    char *ce_time; /* may be NULL in a CloudEvent too */
    char *ce_subject;
    char *ce_traceparent; /* the distributed-tracing extension as sent, unjudged; NULL:
                             none (what counts is trace and traceparent below) */
    char *ce_tracestate;  /* its tracestate as sent, unjudged; NULL: none */
    int64_t schema_id;    /* the Confluent wire format's schema id; -1: not framed */
    bool avro;            /* framed, and the payload was Avro (decode_message_avro()) */
    decode_trace_t trace; /* what became of the event's traceparent (see above) */
    char traceparent[DECODE_TRACEPARENT_LEN + 1]; /* "" unless trace is DECODE_TRACE_OK */
    decode_tracestate_t tracestate_fate;          /* what became of its tracestate (see above) */
    char tracestate[DECODE_TRACESTATE_MAX + 1];   /* "" unless tracestate_fate is OK */
    json_t *headers; /* name -> text of each header that is UTF-8 without NUL bytes
                      and at most DECODE_MAX_HEADER_BYTES (the first of a name);
                      owned; what a definition's type header is read from */
} decode_message_t;

/*
 * Judges the whole message. On DECODE_OK *out holds the message (release
 * it with decode_message_clear()); otherwise *out is empty and `detail`
 * says what was wrong.
 */
decode_reason_t decode_message(const decode_input_t *in, const decode_limits_t *limits,
                               decode_message_t *out, char *detail, size_t detail_size);

/*
 * decode_message() for a topic whose values are in `format`: with
 * DEF_FORMAT_CONFLUENT_JSON a value in the Confluent wire format is the
 * JSON object after its schema id (msg->schema_id set), and an unframed
 * one is read as it is. With DEF_FORMAT_JSON (decode_message()) a framed
 * value is refused as DECODE_SCHEMA_REGISTRY_FORMAT, naming its schema id
 * and the format that would read it. With DEF_FORMAT_CONFLUENT_AVRO an
 * unframed value is read as JSON, and a framed one needs its schema:
 * decode_message_avro() (here it is refused as DECODE_UNKNOWN_SCHEMA).
 */
decode_reason_t decode_message_as(const decode_input_t *in, const decode_limits_t *limits,
                                  def_format_t format, decode_message_t *out, char *detail,
                                  size_t detail_size);

/*
 * decode_message_as() for a framed value on a confluent_avro topic whose
 * writer schema (`schema`, the one its schema id names) the caller has
 * found: the Avro payload read into the event (format_avro.h), nested at
 * most limits->max_depth, then judged as a JSON value is (an object,
 * CloudEvents attributes). An Avro string that is not UTF-8 is
 * DECODE_INVALID_UTF8, nesting DECODE_TOO_DEEP, anything else that does
 * not read DECODE_INVALID_AVRO. `in` must be framed
 * (format_confluent_frame()).
 */
decode_reason_t decode_message_avro(const decode_input_t *in, const decode_limits_t *limits,
                                    const format_avro_schema_t *schema, decode_message_t *out,
                                    char *detail, size_t detail_size);

void decode_message_clear(decode_message_t *msg);

/*
 * The event type as `def` reads it on the message's topic, in this order:
 * the event whose topic fixes its type (type_from_topic); an event of the
 * topic whose own type rule (its envelope.type) reads its name; then the
 * topic's rule (its envelope in `topics`, else the process's): the type
 * header when it names one, else ce_type, else the string at the type
 * pointer. Borrowed from msg or def; NULL when there is none.
 */
const char *decode_event_type(const decode_message_t *msg, const decode_input_t *in,
                              const def_t *def);

/* The type by one envelope's rule alone (its header, else ce_type, else
 * its pointer), borrowed from msg; NULL when there is none. */
const char *decode_type_of(const decode_message_t *msg, const def_envelope_t *env);

/* Where `def` looks for an event type on `topic`, in words for a
 * rejection's detail (naming the topic when its envelope is its own). */
void decode_type_source(const def_t *def, const char *topic, char *buf, size_t size);

/* What one process reads from an event it declares. */
typedef struct decode_envelope {
    char *key;       /* the correlation key; owned */
    char *id;        /* the identity deduplication uses; owned */
    int64_t time_ms; /* the event time */
    int64_t token;   /* the fencing token the reply carries (see below); 0: none */
} decode_envelope_t;

/*
 * Reads the envelope of event `event` (an index into def->events) from a
 * decoded message, where the event's envelope says (def_event_t.envelope:
 * its own, its topic's or the process's). Key: the Kafka message key or the value at the key
 * pointer, a non-empty string or an integer (its decimal text). Identity:
 * CloudEvents source and id, else the string or integer at the id pointer,
 * else topic/partition/offset. Time: the Kafka timestamp when declared
 * ("from": "kafka_timestamp"); else ce_time; else the time pointer read as
 * its declared format (a plain pointer: RFC 3339 text or integer epoch
 * milliseconds); else the Kafka timestamp. Token: where a state that
 * accepts the event (in its `on` or its lease) says replies carry it (a
 * JSON pointer or a header), a positive integer or its decimal text;
 * anything else counts as no token, so the reply is judged as one from a
 * producer that ignores Steward. A framed value (msg->schema_id set) for
 * an event whose topic's format is not the one it was read in
 * (confluent_json, or confluent_avro for an Avro payload) is refused as
 * DECODE_SCHEMA_REGISTRY_FORMAT. On a rejection *out is empty.
 */
decode_reason_t decode_envelope(const decode_message_t *msg, const decode_input_t *in,
                                const def_t *def, size_t event, decode_envelope_t *out,
                                char *detail, size_t detail_size);

/*
 * decode_envelope() by an envelope alone, without a definition (no
 * token): `event` names the event in details. For readers that know where
 * things are without a definition (`steward discover`). An envelope with
 * neither a key pointer nor key_from_message reads no key (out->key NULL).
 */
decode_reason_t decode_read(const decode_message_t *msg, const decode_input_t *in,
                            const def_envelope_t *env, const char *event, decode_envelope_t *out,
                            char *detail, size_t detail_size);

void decode_envelope_clear(decode_envelope_t *env);

/*
 * Makes every string in `value` (recursively, in place; object keys too)
 * safe to print on a terminal: control characters (C0, DEL and the C1
 * range U+0080-U+009F, which include ESC and CSI) become visible escapes
 * such as "\x1b" and "\u009b". What came from a message (keys, types,
 * details) is printed by `steward stuck` and `inspect`; an escape sequence
 * in a key must not drive the operator's terminal. JSON output needs none
 * of this: jansson escapes control characters itself.
 */
void decode_json_printable(json_t *value);

#endif
