/*
 * discover_int - private to shadow/: what discover.c (the analysis) and
 * discover_keys.c (the candidate keys) share and no other file includes.
 *
 * A candidate key is a JSON pointer to a string or integer field, or the
 * Kafka message key. For each it counts the events of each type that
 * carry it and, per value, the types carrying that value (a bit mask, so
 * a value seen in two types' events *joins* them). Candidates are ranked
 * by the joins their values make, not by how common the field is: a
 * timestamp in every event joins nothing, a claim id joins each claim's
 * types.
 */
#ifndef STEWARD_DISCOVER_INT_H
#define STEWARD_DISCOVER_INT_H

#include "shadow/discover.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The candidate name of the Kafka message key: no JSON pointer is
 * spelled so (a pointer starts with '/'). */
#define DISCOVER_MESSAGE_KEY "message_key"

typedef struct candidate {
    char *pointer;    /* a JSON pointer, or DISCOVER_MESSAGE_KEY */
    bool message_key; /* the Kafka message key */
    size_t *carried;  /* per type: events carrying it */
    json_t *values;   /* value text -> mask of the types carrying it */
    size_t joining;   /* values carried by two or more types */
    size_t joins;     /* over the values: the types carrying it, less one */
    size_t distinct;  /* values */
    double share;     /* lowest, over the types kept, of the share carrying it */
    size_t hits;      /* scratch of discover_type_keys() */
} candidate_t;

typedef struct analysis {
    const discover_event_t *ev;
    size_t n;
    const discover_options_t *opts;
    json_t *types; /* type -> index */
    const char **type_names;
    size_t n_types;
    size_t *type_count;
    json_t **type_topics; /* per type: topic -> count */
    size_t *event_type;   /* per event: its type index, or SIZE_MAX when left out */
    candidate_t *cands;
    size_t n_cands, cap_cands;
    json_t *cand_index; /* pointer -> index */
    json_t *undecided;
    /* Per type: the candidate that keys it when its events carry the
     * chosen key's values elsewhere (the message key there, a field
     * here), else -1; from discover_type_keys(). */
    long *type_key;
    /* The topic fields of the event discover_collect() is walking, or
     * NULL: its topic is read as the process says. */
    const discover_topic_fields_t *collecting;
} analysis_t;

/* Appends a line to what a person must settle (printf-style). */
void discover_note(analysis_t *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Records every string or integer field of event i (and its message key)
 * as a candidate of its type. False when out of memory. */
bool discover_collect(analysis_t *a, size_t i);

/* Counts joins and shares and sorts the candidates, best first, over
 * the types not left out. A candidate with one value for every event is
 * never first while another joins anything: one value would make every
 * event one instance. */
void discover_rank(analysis_t *a);

/* The index of the candidate named `name` (a pointer or
 * DISCOVER_MESSAGE_KEY); -1 when no event carries it. */
long discover_find(const analysis_t *a, const char *name);

/* The text of candidate c in event i ("5" for an integer), in buf or
 * borrowed from the event; NULL when the event does not carry it. */
const char *discover_value(const analysis_t *a, const candidate_t *c, size_t i, char *buf,
                           size_t buf_size);

/*
 * For each type fewer than DISCOVER_MIN_KEY_SHARE of whose events carry
 * candidate `key`, the candidate whose values are key's values in at
 * least that share of them, noted and kept in a->type_key (the draft
 * gives the event that key). a->type_key has n_types entries.
 */
bool discover_type_keys(analysis_t *a, size_t key);

/* The candidate that keys event i: its type's, else `key`. */
const candidate_t *discover_key_of(const analysis_t *a, size_t key, size_t i);

/* The draft's "key" for candidate c: its pointer, or {"from": "message_key"}. */
json_t *discover_key_json(const candidate_t *c);

void discover_candidates_free(analysis_t *a);

#endif
