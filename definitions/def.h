/*
 * def - process definitions: the JSON format, its parsing and validation.
 *
 * A definition describes one process (order fulfilment, say): the events
 * it listens to and on which topics, how an event finds its instance (the
 * correlation key), the states an instance moves through with a deadline
 * on each, who owns each step, and in active mode the command each step
 * sends. docs/definitions.md documents the format field by field.
 *
 * Loading is all or nothing: def_load_*() returns a definition only when
 * the document is valid; otherwise every problem found is appended to the
 * caller's def_problems_t, each as (file, JSON pointer, message), and NULL
 * is returned. A def_t is immutable after loading and may be read by any
 * thread without locking.
 */
#ifndef STEWARD_DEF_H
#define STEWARD_DEF_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * The longest duration a definition may declare (deadlines, reorder
 * window): 100 years. An instance's deadline is its event time plus this,
 * stored as a PostgreSQL timestamptz; with event times capped at the year
 * 9999 (decode.h) the sum stays far inside timestamptz's range (294276 AD)
 * and inside an int64 of milliseconds. Longer "deadlines" are mistakes.
 */
#define DEF_MAX_DURATION_MS (36525LL * 86400000LL)

typedef enum def_mode {
    DEF_MODE_SHADOW = 0, /* observe and alert; emit nothing */
    DEF_MODE_ACTIVE,     /* also emit each step's command, retry, compensate */
} def_mode_t;

/* One variable captured from an event's payload into the instance's vars. */
typedef struct def_capture {
    char *var;     /* the name in vars ("total") */
    char *pointer; /* JSON pointer into the event payload ("/total") */
} def_capture_t;

/* How the event time is read at an envelope's time_pointer. */
typedef enum def_time_format {
    DEF_TIME_TEXT_OR_MS = 0, /* a plain pointer: RFC 3339 text or an integer of epoch ms */
    DEF_TIME_RFC3339,        /* RFC 3339 text only */
    DEF_TIME_EPOCH_SECONDS,  /* an integer of seconds since 1970 */
    DEF_TIME_EPOCH_MILLIS,   /* an integer of milliseconds since 1970 */
    DEF_TIME_KAFKA,          /* the Kafka message timestamp, declared ("from") */
} def_time_format_t;

/* How a topic's message values are framed (`topics.T.format`). */
typedef enum def_format {
    DEF_FORMAT_JSON = 0,       /* a JSON object, as it is */
    DEF_FORMAT_CONFLUENT_JSON, /* the Confluent wire format (magic byte 0, a 4-byte schema id)
                                  around a JSON object, or a JSON object as it is */
    DEF_FORMAT_CONFLUENT_AVRO  /* the Confluent wire format around an Avro payload, read with
                                  its schema from the schema registry; or a JSON object as it is */
} def_format_t;

/*
 * An envelope: where an event's type, correlation key, id and time are.
 * The process has one (its `key` and `envelope`); a topic may have its own
 * (`topics`), and an event too, each field defaulting to the one above.
 * CloudEvents attributes (ce_type, ce_id, ce_time) take precedence over
 * the payload's fields; a type header and a declared Kafka timestamp take
 * precedence over them.
 */
typedef struct def_envelope {
    char *type_pointer; /* default "/type" */
    char *type_header;  /* the message header naming the type; NULL: none */
    char *id_pointer;   /* default "/id" */
    char *time_pointer; /* NULL: the Kafka message timestamp */
    def_time_format_t time_format;
    char *key_pointer;     /* the correlation key, e.g. "/order_id"; NULL when
                              key_from_message */
    bool key_from_message; /* the correlation key is the Kafka message key */
} def_envelope_t;

typedef struct def_event {
    char *name;  /* the event type, as the payload or ce_type says it */
    char *topic; /* the Kafka topic it arrives on, as the definition names it */
    /* Where this event's type (its topic's rule), key, id and time are:
     * each from the event's own envelope (or `key`), else its topic's
     * (`topics`), else the process's. */
    def_envelope_t envelope;
    /* The event's own type rule (its envelope.type): a message on its topic
     * is this event when the rule reads its name there. Both NULL: none. */
    char *own_type_pointer;
    char *own_type_header;
    bool topic_envelope;     /* its topic has an envelope of its own (`topics`) */
    def_format_t format;     /* how its topic's values are framed (`topics`) */
    bool type_from_topic;    /* every message on its topic is this event, whatever it says */
    def_capture_t *captures; /* applied whenever this event moves an instance */
    size_t n_captures;
} def_event_t;

typedef struct def_transition {
    size_t event; /* index into def_t.events */
    size_t to;    /* index into def_t.states */
} def_transition_t;

typedef struct def_command {
    char *topic;     /* where active mode sends it */
    char *type;      /* the command's type (CloudEvents ce_type) */
    json_t *payload; /* template; strings may hold ${key}, ${process}, ${state},
                        ${attempt} and ${vars.NAME}; owned */
} def_command_t;

/*
 * A lease on a step: `claim` names who holds it (at `holder` in the claim
 * event's payload), each `renew` event extends it by `duration_ms`, never
 * past the state's own deadline. Claim and renew events are recorded and do
 * not move the instance.
 */
typedef struct def_lease {
    size_t claim;         /* index into def_t.events */
    char *holder_pointer; /* JSON pointer into the claim event's payload */
    size_t *renew;        /* indexes into def_t.events */
    size_t n_renew;
    int64_t duration_ms;
} def_lease_t;

/* Where a reply carries the fencing token: a JSON pointer into its payload
 * or a message header; both NULL: replies carry none. */
typedef struct def_token {
    char *pointer;
    char *header;
} def_token_t;

typedef struct def_state {
    char *name;
    char *terminal;       /* the outcome ("success", "cancelled"...) if terminal, else NULL */
    int64_t deadline_ms;  /* 0 when the state has none of its own */
    char *owner;          /* the team that owns this step; NULL: the process owner */
    def_transition_t *on; /* the events this state accepts */
    size_t n_on;
    def_command_t *command;       /* NULL when the step sends no command */
    int retry_max;                /* commands re-sent after a missed deadline (active mode) */
    int64_t retry_backoff_ms;     /* wait before the first re-send, doubling per attempt; 0: none */
    int64_t retry_max_backoff_ms; /* cap on the doubled wait; 0: no cap */
    long on_timeout;              /* state index taken after the last retry, or -1 */
    def_lease_t *lease;           /* NULL when the step has no lease */
    def_token_t token;            /* where replies carry the fencing token */
} def_state_t;

typedef struct def {
    char *process; /* the process's name: [a-z][a-z0-9_]* */
    int version;   /* >= 1; instances keep the version they started with */
    def_mode_t mode;
    char *owner;       /* the team that owns the outcome */
    char *description; /* may be NULL */

    /* The process's envelope: its `key` and `envelope`, the default of
     * every topic's and event's (def_event_t.envelope is what applies). */
    def_envelope_t envelope;

    int64_t deadline_ms;       /* start to terminal state; 0 when none */
    int64_t reorder_window_ms; /* how long an out-of-order event may wait */

    def_event_t *events; /* in document order */
    size_t n_events;

    size_t start_event; /* index into events */
    size_t start_state; /* index into states */
    def_capture_t *start_captures;
    size_t n_start_captures;

    def_state_t *states; /* in document order */
    size_t n_states;

    /* "any": transitions every non-terminal state takes unless its own
     * `on` names the same event. */
    def_transition_t *any;
    size_t n_any;

    char *source;     /* the file it came from, for messages */
    json_t *document; /* the whole document, owned; stored with the version */
} def_t;

/* One problem found while loading. */
typedef struct def_problem {
    char *file;
    char *pointer; /* JSON pointer to the offending value; "" for the document */
    char *message;
} def_problem_t;

typedef struct def_problems {
    def_problem_t *items;
    size_t n;
    size_t cap;
} def_problems_t;

/* def_problems_t is a plain struct: zero it, use it, def_problems_clear() it.
 * Out of memory, def_problems_add() drops the problem; loads still fail. */
void def_problems_add(def_problems_t *problems, const char *file, const char *pointer,
                      const char *fmt, ...) __attribute__((format(printf, 4, 5)));
void def_problems_clear(def_problems_t *problems);

/*
 * Parses and validates one definition from a JSON text. `source` names it
 * in messages (a file name). Returns a new def_t (free with def_free()), or
 * NULL with at least one problem appended.
 */
def_t *def_load_json(const char *text, size_t len, const char *source, def_problems_t *problems);

/* def_load_json() on a file's contents; an unreadable file is a problem too. */
def_t *def_load_file(const char *path, def_problems_t *problems);

void def_free(def_t *def); /* NULL is a no-op */

/* Lookups; -1 when there is no such name. */
long def_find_state(const def_t *def, const char *name);
long def_find_event(const def_t *def, const char *name);

/* The first event declared on `topic` (as def names it, mapped or not),
 * borrowed; NULL when none is. Every event on a topic has the same type
 * rule in its envelope (the topic's, else the process's). */
const def_event_t *def_topic_event(const def_t *def, const char *topic);

/* Frees what an envelope owns and zeroes it; NULL is a no-op. */
void def_envelope_clear(def_envelope_t *env);

/*
 * The transition `state` takes on `event`, borrowed from def; NULL if none.
 * A state's own `on` comes first, then the definition's `any` (for
 * non-terminal states only).
 */
const def_transition_t *def_transition(const def_t *def, size_t state, size_t event);

/* The team that owns `state`: its own owner, else the process owner. Borrowed. */
const char *def_state_owner(const def_t *def, size_t state);

/*
 * The checks that look across a whole definition, and the suggestions in
 * messages. The loader runs them; they are public for tests and for other
 * commands that want the same "did you mean" hints.
 */

/*
 * The edit distance between two words, ignoring case: insertions,
 * deletions, substitutions and swaps of two adjacent characters each
 * count one. SIZE_MAX when memory runs out.
 */
size_t def_edit_distance(const char *a, const char *b);

/*
 * The candidate close enough to `word` to be what was meant (an edit
 * distance of 1 for words up to 3 characters, 2 for longer ones), the
 * nearest and first in order; NULL if none is. NULL candidates are
 * skipped. Borrowed from candidates.
 */
const char *def_suggest(const char *word, const char *const *candidates, size_t n);

/*
 * The graph checks on a definition whose every reference resolved
 * (start_state, each transition's event and target, each on_timeout): a
 * terminal state exists, every state is reachable from the start, and a
 * terminal state is reachable from every reachable state. Appends each
 * problem (file: def->source) and returns how many.
 */
size_t def_check_graph(const def_t *def, def_problems_t *problems);

/*
 * Checks that no state's command goes to a topic one of the process's
 * events arrives on (as the definition names them). Appends each problem
 * and returns how many.
 */
size_t def_check_command_topics(const def_t *def, def_problems_t *problems);

/*
 * Checks that every ${vars.NAME} in a state's command is captured on some
 * path that reaches the state: by 'start', by the start event, or by an
 * event whose transition lies on a path from the start state to it. Run on
 * a definition whose every reference resolved. Appends each problem and
 * returns how many.
 */
size_t def_check_template_paths(const def_t *def, def_problems_t *problems);

/* Whether a lease names `event` (as its claim or a renewal) in `state`. */
bool def_lease_event(const def_t *def, size_t state, size_t event, bool *is_claim);

/*
 * Checks the ${...} variables in every string of a command payload
 * template: ${key}, ${process}, ${state}, ${attempt}, ${token},
 * ${idempotency_key}, and ${vars.NAME}
 * with NAME one of `vars` (the captured variables; with vars NULL, any
 * NAME, for when the captures themselves could not be read). `pointer` is
 * where payload sits in the document. Appends each problem and returns how
 * many.
 */
size_t def_check_template(const json_t *payload, const char *const *vars, size_t n_vars,
                          const char *file, const char *pointer, def_problems_t *problems);

/*
 * A set of loaded definitions: everything under some files and directories
 * (a directory contributes its *.json files, in name order). The set is
 * valid only if every file is and no (process, version) appears twice.
 */
typedef struct def_set {
    def_t **defs;
    size_t n;
    /* The mapping def_set_map_topics() applied (owned; NULL, NULL: none),
     * kept so that a version read back from steward.definitions is renamed
     * by the same rule as the loaded ones (def_set_map_like()). */
    char *topics_prefix;
    json_t *topics_map;
} def_set_t;

/*
 * Loads every path (files or directories). Returns a new set (free with
 * def_set_free()) when all of them are valid, else NULL with the problems
 * appended; `files_read`, when not NULL, receives how many files were read.
 */
def_set_t *def_set_load(const char *const *paths, size_t n_paths, def_problems_t *problems,
                        size_t *files_read);
void def_set_free(def_set_t *set); /* NULL is a no-op */

/*
 * Renames every topic in the set (events' and commands') to the broker's
 * name for it: its entry in `map` (an object of definition name -> broker
 * name; may be NULL), else `prefix` (may be NULL or "") + the name. One
 * definition then serves staging and production. Call it once, right
 * after def_set_load() and before the set is shared; the stored documents
 * keep the definitions' names. Returns false, with a problem appended per
 * topic, when a broker name would be over Kafka's 249 characters; the set
 * is then partly renamed and should be freed.
 */
bool def_set_map_topics(def_set_t *set, const char *prefix, const json_t *map,
                        def_problems_t *problems);

/*
 * The topic rule, for one definition: renames def's event and command
 * topics as def_set_map_topics() does. Same failure contract.
 */
bool def_map_topics(def_t *def, const char *prefix, const json_t *map, def_problems_t *problems);

/*
 * Renames a definition read back from steward.definitions (its document
 * keeps the definition's names) by the mapping `set` was renamed with, so
 * every version names the broker's topics alike. A set never mapped
 * changes nothing. Same failure contract as def_set_map_topics().
 */
bool def_set_map_like(const def_set_t *set, def_t *def, def_problems_t *problems);

/*
 * The mapping `set` was renamed with, as recorded beside the definitions
 * ({"prefix": "...", "map": {...}}, both always present): a new reference,
 * NULL when out of memory. def_map_recorded() applies it.
 */
json_t *def_set_mapping_json(const def_set_t *set);

/* Renames def by a mapping def_set_mapping_json() wrote; NULL (none
 * recorded) changes nothing. Same failure contract as def_set_map_topics(). */
bool def_map_recorded(def_t *def, const json_t *mapping, def_problems_t *problems);

/* The newest version of `process` in the set, borrowed; NULL if absent. */
const def_t *def_set_latest(const def_set_t *set, const char *process);

/* The exact version, borrowed; NULL if absent. */
const def_t *def_set_find(const def_set_t *set, const char *process, int version);

#endif
