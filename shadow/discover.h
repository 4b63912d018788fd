/*
 * discover - a first draft of a process definition from the traffic on a
 * set of topics: the analysis behind `steward discover`.
 *
 * Terms:
 *
 *   an event      one message read, as (type, topic, time, id, payload).
 *   a candidate   a correlation key: a JSON pointer to a string or integer
 *                 field, or the Kafka message key. A value *joins* when
 *                 events of two or more types carry it; the candidate's
 *                 *joins* count, over its values, the types each joins
 *                 beyond the first, and rank it: a field that joins types
 *                 comes before one that is merely in every event. Its
 *                 *share* is the lowest, over the event types, of the
 *                 fraction of that type's events carrying it. A type whose
 *                 events carry the key's values elsewhere (the message key
 *                 there, a field here) gets that as its own key.
 *   a trace       the events of one key value, in event time order,
 *                 repeats of one (type, id) dropped. A type none of whose
 *                 key values another type shares is set aside (an
 *                 unrelated event on a shared topic), noted, not fatal.
 *   the graph     the directly-follows graph: for each pair (A, B), how
 *                 many times B came right after A in a trace.
 *   a step        the time from an event of type A to the next event of
 *                 its trace; its percentiles and suggested deadline follow
 *                 the report's rule (report_suggest()).
 *
 * The draft names one state after each event type: the state an instance
 * is in once that event was its last. The start event is the type that
 * most often opens a trace; a type that is never followed by another is
 * terminal. What the traffic cannot settle (an owner, a key with no value
 * joining, a state too rarely left to suggest a deadline) is listed as
 * "undecided" and stands in the draft's top-level description, which
 * begins with DISCOVER_DRAFT_MARKER.
 *
 * Pure: no I/O, no clock reads. Every pointer in the input is borrowed for
 * the call only.
 */
#ifndef STEWARD_DISCOVER_H
#define STEWARD_DISCOVER_H

#include "common/err.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The first word of a draft's description, until a person reviews it. */
#define DISCOVER_DRAFT_MARKER "DRAFT"
/* A candidate key must be carried by at least this share of every type's
 * events. */
#define DISCOVER_MIN_KEY_SHARE 0.9
/* Pointers deeper than this many members are not considered as keys. */
#define DISCOVER_MAX_KEY_DEPTH 3

typedef struct discover_event {
    const char *type;        /* the event type; not NULL */
    const char *topic;       /* not NULL */
    int64_t time_ms;         /* the event time: what orders a trace */
    const char *id;          /* its identity, for dropping repeats; may be NULL */
    const json_t *payload;   /* what pointers read: an object; not NULL */
    const char *message_key; /* the Kafka message key as text; NULL: none, or not text */
} discover_event_t;

/* A topic whose events keep their type, id or time in fields of their
 * own (the topic's envelope): those fields are never keys there. NULL:
 * the process's (discover_options_t) on that topic too. */
typedef struct discover_topic_fields {
    const char *topic;
    const char *type_pointer;
    const char *id_pointer;
    const char *time_pointer;
} discover_topic_fields_t;

typedef struct discover_options {
    const char *process;      /* the draft's process name; NULL: "discovered" */
    const char *type_pointer; /* a field that is the type, never a key; NULL: "/type" */
    const char *id_pointer;   /* a field that is the id, never a key; NULL: "/id" */
    const char *time_pointer; /* a field that is the time, never a key; may be NULL */
    const char *key;          /* the key, not chosen: a pointer or "message_key"; NULL: choose */
    const json_t *envelope;   /* the draft's "envelope" (where the type, id and time
                                 were read); NULL or empty: none */
    const discover_topic_fields_t *topic_fields; /* per topic; may be NULL */
    size_t n_topic_fields;
    const char *source; /* where the events came from, for the description */
    bool kafka_time;    /* the times are the broker's (no time field was named) */
} discover_options_t;

/*
 * Analyses n events into *out, a new JSON object (json_decref() it):
 *
 *   events     how many were analysed
 *   types      [{type, count, topics: {topic: count}, set_aside}], by count
 *   keys       [{pointer | from: "message_key", share, joining, joins,
 *                distinct}], the chosen key first
 *   key        the chosen key as the draft says it: a pointer, or
 *              {"from": "message_key"}
 *   starts     {type: traces it opened}
 *   graph      [{from, to, count}], by count
 *   steps      [{state, after, samples, p50_ms, p90_ms, p99_ms, p999_ms,
 *                max_ms, suggested_ms (null without enough samples),
 *                deadline}]
 *   undecided  [text], what a person must settle
 *   draft      the draft definition, which def_load_json() accepts
 *
 * ERR_INVALID, with the reason in errstr, when there is nothing to draft
 * from (no events, no field any two types share, or a --key no event
 * carries); ERR_FATAL out of memory.
 */
err_class_t discover_analyse(const discover_event_t *events, size_t n,
                             const discover_options_t *opts, json_t **out, char *errstr,
                             size_t errstr_size);

/* The draft's name for the state after event `type`: snake case, within
 * [a-z][a-z0-9_]* and 63 characters ("OrderPlaced" -> "order_placed").
 * Returns buf. */
char *discover_state_name(const char *type, char *buf, size_t buf_size);

/* percentile_disc as PostgreSQL computes it, over n sorted values (n > 0). */
int64_t discover_percentile(const int64_t *sorted, size_t n, double fraction);

#endif
