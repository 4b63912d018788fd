/*
 * def_int - what the files of the definitions module share: the
 * format's limits, the loader's state and the readers of one field each.
 * Private to definitions/: nothing outside it includes this header, and
 * def.h stays the module's whole interface.
 *
 * A loader_t lives for one def_load_json() call (def_load.c); the field
 * readers are in def_fields.c, the states' in def_states.c, the envelopes'
 * (process, topics, events) in def_envelope.c. Every def_ld_*
 * reader reports what is wrong as a problem at its JSON pointer, counts
 * it in the loader, and lets the caller go on to the next field.
 */
#ifndef STEWARD_DEF_INT_H
#define STEWARD_DEF_INT_H

#include "definitions/def.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PTR_MAX            1024
#define NAME_MAX_LEN       63 /* process, state, team, outcome and variable names */
#define EVENT_NAME_MAX_LEN 255
#define TOPIC_MAX_LEN      249 /* Kafka's own limit */
#define RETRY_MAX_LIMIT    1000
#define POINTER_MAX_LEN    256
#define FILE_MAX_BYTES     (4 * 1024 * 1024)
#define DEFAULT_REORDER_MS (5 * 60 * 1000)

/* def_problems_add() with a va_list (def.c). */
void def_problems_vadd(def_problems_t *problems, const char *file, const char *pointer,
                       const char *fmt, va_list ap);

/* A topic's envelope (`topics`), over the process's; the name is
 * borrowed from the document. */
typedef struct ld_topic {
    const char *name;
    def_envelope_t envelope;
    def_format_t format;
} ld_topic_t;

typedef struct loader {
    const char *file;
    def_problems_t *problems;
    size_t n_problems; /* counted even when def_problems_add drops one */
    def_t *def;
    const char *context; /* put before each problem's message ("topic 'x': "); NULL: none */

    /* The topics' envelopes (def_envelope.c). */
    ld_topic_t *topics;
    size_t n_topics;

    /* Names in document order, borrowed from def, for lookups and hints. */
    const char **state_names;
    const char **event_names;
    bool *event_used;

    /* Every variable some capture sets, borrowed from def. */
    const char **vars;
    size_t n_vars, cap_vars;

    bool vars_unknown;           /* some capture could not be read: accept any ${vars.X} */
    bool process_deadline_given; /* present, valid or not: no "has no deadline" noise */
    bool start_resolved;
    bool graph_unknown; /* some edge or terminal could not be read */
    bool usage_unknown; /* some state's 'on' could not be read */
} loader_t;

/* ---- def_fields.c ---- */

/* A problem at `pointer` in the loader's file, counted even when
 * def_problems_add() has to drop it. */
void def_ld_problem(loader_t *ld, const char *pointer, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* strdup() and calloc() (of at least one element) that report running out
 * of memory; def_ld_strdup(ld, NULL) is NULL. */
char *def_ld_strdup(loader_t *ld, const char *s);
void *def_ld_calloc(loader_t *ld, size_t n, size_t size);

/* base + "/" + token, escaped, into buf (PTR_MAX bytes). Returns buf. */
char *def_ptr_join(char *buf, const char *base, const char *token);

/* " (did you mean 'X'?)" when a candidate is near `word`, else "". */
const char *def_hint(char *buf, size_t size, const char *word, const char *const *candidates,
                     size_t n);

/* The index of `name` in names (NULL entries skipped); -1 if absent. */
long def_find_name(const char *const *names, size_t n, const char *name);

/* [a-z][a-z0-9_]*, plus the characters in `extra` after the first. */
bool def_is_name(const char *s, const char *extra);

/* Kafka's rule for topic names: [a-zA-Z0-9._-], at most 249 characters. */
bool def_is_topic(const char *s);

/* Reports every member of obj that is not in `allowed`. */
void def_ld_check_fields(loader_t *ld, json_t *obj, const char *ptr, const char *const *allowed,
                         size_t n);
#define CHECK_FIELDS(ld, obj, ptr, allowed)                                                        \
    def_ld_check_fields((ld), (obj), (ptr), (allowed), sizeof(allowed) / sizeof(allowed)[0])

/* The member `name` of obj; NULL when absent, which is a problem if required. */
json_t *def_ld_member(loader_t *ld, json_t *obj, const char *ptr, const char *name, bool required);

/*
 * The non-empty string member `name` of obj, borrowed from the document;
 * NULL when absent (a problem if required) or not a non-empty string (a
 * problem).
 */
const char *def_ld_get_string(loader_t *ld, json_t *obj, const char *ptr, const char *name,
                              bool required);

/* Like def_ld_get_string(), for a JSON pointer. */
const char *def_ld_get_pointer(loader_t *ld, json_t *obj, const char *ptr, const char *name,
                               bool required);

/*
 * A correlation key: a JSON pointer string, or {"from": "message_key"} for
 * the Kafka message key. Sets *pointer (borrowed) or *from_message. False
 * when absent (a problem if required) or wrong (reported).
 */
bool def_ld_get_key(loader_t *ld, json_t *obj, const char *ptr, bool required, const char **pointer,
                    bool *from_message);

/* A Kafka header name as a definition may name it: 1 to 255 printable
 * ASCII characters without spaces. */
bool def_is_header_name(const char *s);

/*
 * The duration member `name` of obj: 1 with *ms_out set when present and
 * valid, 0 when absent, -1 when present but wrong (reported). A zero is
 * wrong unless zero_ok.
 */
int def_ld_get_duration(loader_t *ld, json_t *obj, const char *ptr, const char *name, bool zero_ok,
                        int64_t *ms_out);

/* A team name (owner): [a-z][a-z0-9_-]*; NULL when absent or wrong. */
const char *def_ld_get_team(loader_t *ld, json_t *obj, const char *ptr, bool required);

/* A "capture" object: variable name -> JSON pointer into the payload. */
void def_ld_parse_captures(loader_t *ld, json_t *obj, const char *ptr, def_capture_t **out,
                           size_t *n_out);

/* The event `name` used at pointer p, marked used; -1 (reported) if undeclared. */
long def_ld_use_event(loader_t *ld, const char *name, const char *p);

/* ---- def_envelope.c ---- */

/*
 * The envelope of obj (at ptr): its "envelope" member (type, id, time)
 * and, when with_key, its "key", each field over *base, into *out (new
 * strings; def_envelope_clear() it). With own_pointer and own_header not
 * NULL, a declared type rule goes to them (new strings) instead of *out:
 * an event's own rule. Returns true when obj declares any of them.
 */
bool def_ld_envelope(loader_t *ld, json_t *obj, const char *ptr, bool with_key,
                     const def_envelope_t *base, def_envelope_t *out, char **own_pointer,
                     char **own_header);

/* The 'topics' member: each topic's envelope over the process's, into
 * ld->topics. Run after the process's envelope is read. */
void def_ld_parse_topics(loader_t *ld, json_t *doc);

/* The entry of `topic` in 'topics', borrowed; NULL when it has none. */
const ld_topic_t *def_ld_topic(const loader_t *ld, const char *topic);

/* After the events are read: every topic in 'topics' is some event's. */
void def_ld_check_topics(loader_t *ld);

/* Frees ld->topics. */
void def_ld_topics_free(loader_t *ld);

/* ---- def_states.c ---- */

/* "any": transitions every non-terminal state takes unless it names the event itself. */
void def_ld_parse_any(loader_t *ld, json_t *doc);

/* The 'states' member: every state, in document order, with the checks that
 * need them all read (a start that goes to a terminal state). */
void def_ld_parse_states(loader_t *ld, json_t *doc);

#endif
