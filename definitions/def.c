/*
 * def - reading process definitions; see def.h and docs/definitions.md.
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
 */
#include "definitions/def.h"

#include "definitions/duration.h"
#include "definitions/jsonptr.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PTR_MAX            1024
#define NAME_MAX_LEN       63 /* process, state, team, outcome and variable names */
#define EVENT_NAME_MAX_LEN 255
#define TOPIC_MAX_LEN      249 /* Kafka's own limit */
#define RETRY_MAX_LIMIT    1000
#define POINTER_MAX_LEN    256
#define FILE_MAX_BYTES     (4 * 1024 * 1024)
#define DEFAULT_REORDER_MS (5 * 60 * 1000)

/* ---- problems ---- */

static void def_problems_vadd(def_problems_t *problems, const char *file, const char *pointer,
                              const char *fmt, va_list ap)
{
    if (problems == NULL)
        return;

    va_list ap2;
    va_copy(ap2, ap);
    int len = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (len < 0)
        return;

    /* Out of memory the problem is dropped: the caller still learns of the
     * failure from the NULL it gets back. */
    char *message = malloc((size_t) len + 1);
    char *file_copy = strdup(file != NULL ? file : "");
    char *pointer_copy = strdup(pointer != NULL ? pointer : "");
    if (message == NULL || file_copy == NULL || pointer_copy == NULL)
        goto fail;
    vsnprintf(message, (size_t) len + 1, fmt, ap);

    if (problems->n == problems->cap) {
        size_t cap = problems->cap == 0 ? 8 : problems->cap * 2;
        def_problem_t *items = realloc(problems->items, cap * sizeof *items);
        if (items == NULL)
            goto fail;
        problems->items = items;
        problems->cap = cap;
    }
    problems->items[problems->n++] = (def_problem_t){file_copy, pointer_copy, message};
    return;

fail:
    free(message);
    free(file_copy);
    free(pointer_copy);
}

void def_problems_add(def_problems_t *problems, const char *file, const char *pointer,
                      const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    def_problems_vadd(problems, file, pointer, fmt, ap);
    va_end(ap);
}

void def_problems_clear(def_problems_t *problems)
{
    if (problems == NULL)
        return;
    for (size_t i = 0; i < problems->n; i++) {
        free(problems->items[i].file);
        free(problems->items[i].pointer);
        free(problems->items[i].message);
    }
    free(problems->items);
    problems->items = NULL;
    problems->n = problems->cap = 0;
}

/* ---- freeing ---- */

static void free_captures(def_capture_t *captures, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(captures[i].var);
        free(captures[i].pointer);
    }
    free(captures);
}

void def_free(def_t *def)
{
    if (def == NULL)
        return;
    free(def->process);
    free(def->owner);
    free(def->description);
    free(def->key_pointer);
    free(def->type_pointer);
    free(def->id_pointer);
    free(def->time_pointer);
    free(def->type_header);
    free(def->any);
    for (size_t i = 0; i < def->n_events; i++) {
        def_event_t *ev = &def->events[i];
        free(ev->name);
        free(ev->topic);
        free(ev->key_pointer);
        free_captures(ev->captures, ev->n_captures);
    }
    free(def->events);
    free_captures(def->start_captures, def->n_start_captures);
    for (size_t i = 0; i < def->n_states; i++) {
        def_state_t *st = &def->states[i];
        free(st->name);
        free(st->terminal);
        free(st->owner);
        free(st->on);
        if (st->command != NULL) {
            free(st->command->topic);
            free(st->command->type);
            json_decref(st->command->payload);
            free(st->command);
        }
        if (st->lease != NULL) {
            free(st->lease->holder_pointer);
            free(st->lease->renew);
            free(st->lease);
        }
        free(st->token.pointer);
        free(st->token.header);
    }
    free(def->states);
    free(def->source);
    json_decref(def->document);
    free(def);
}

/* ---- the loader ---- */

typedef struct loader {
    const char *file;
    def_problems_t *problems;
    size_t n_problems; /* counted even when def_problems_add drops one */
    def_t *def;

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

static void def_ld_problem(loader_t *ld, const char *pointer, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void def_ld_problem(loader_t *ld, const char *pointer, const char *fmt, ...)
{
    va_list ap;
    ld->n_problems++;
    va_start(ap, fmt);
    def_problems_vadd(ld->problems, ld->file, pointer, fmt, ap);
    va_end(ap);
}

static char *def_ld_strdup(loader_t *ld, const char *s)
{
    if (s == NULL)
        return NULL;
    char *copy = strdup(s);
    if (copy == NULL)
        def_ld_problem(ld, "", "out of memory");
    return copy;
}

static void *def_ld_calloc(loader_t *ld, size_t n, size_t size)
{
    void *p = calloc(n == 0 ? 1 : n, size);
    if (p == NULL)
        def_ld_problem(ld, "", "out of memory");
    return p;
}

/* base + "/" + token, escaped, into buf (PTR_MAX bytes). Returns buf. */
static char *def_ptr_join(char *buf, const char *base, const char *token)
{
    snprintf(buf, PTR_MAX, "%s", base);
    return jsonptr_append(buf, PTR_MAX, token);
}

/* " (did you mean 'X'?)" when a candidate is near `word`, else "". */
static const char *def_hint(char *buf, size_t size, const char *word, const char *const *candidates,
                            size_t n)
{
    const char *near = def_suggest(word, candidates, n);
    if (near == NULL)
        buf[0] = '\0';
    else
        snprintf(buf, size, " (did you mean '%s'?)", near);
    return buf;
}

static long def_find_name(const char *const *names, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++) {
        if (names[i] != NULL && strcmp(names[i], name) == 0)
            return (long) i;
    }
    return -1;
}

/* [a-z][a-z0-9_]*, plus the characters in `extra` after the first. */
static bool def_is_name(const char *s, const char *extra)
{
    if (s[0] < 'a' || s[0] > 'z' || strlen(s) > NAME_MAX_LEN)
        return false;
    for (const char *p = s + 1; *p != '\0'; p++) {
        bool ok = (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_' ||
                  (extra != NULL && strchr(extra, *p) != NULL);
        if (!ok)
            return false;
    }
    return true;
}

/* A variable for ${vars.NAME}: [A-Za-z_][A-Za-z0-9_]*. */
static bool is_var_name(const char *s)
{
    if (*s == '\0' || strlen(s) > NAME_MAX_LEN || (*s >= '0' && *s <= '9'))
        return false;
    for (const char *p = s; *p != '\0'; p++) {
        bool ok = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                  (*p >= '0' && *p <= '9') || *p == '_';
        if (!ok)
            return false;
    }
    return true;
}

/* Kafka's rule for topic names: [a-zA-Z0-9._-], at most 249 characters. */
static bool def_is_topic(const char *s)
{
    if (strlen(s) > TOPIC_MAX_LEN || strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
        return false;
    for (const char *p = s; *p != '\0'; p++) {
        bool ok = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                  (*p >= '0' && *p <= '9') || *p == '.' || *p == '_' || *p == '-';
        if (!ok)
            return false;
    }
    return true;
}

/* Reports every member of obj that is not in `allowed`. */
static void def_ld_check_fields(loader_t *ld, json_t *obj, const char *ptr,
                                const char *const *allowed, size_t n)
{
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v)
    {
        if (def_find_name(allowed, n, key) >= 0)
            continue;
        char p[PTR_MAX];
        def_ptr_join(p, ptr, key);
        const char *near = def_suggest(key, allowed, n);
        if (near != NULL) {
            def_ld_problem(ld, p, "unknown field '%s' (did you mean '%s'?)", key, near);
            continue;
        }
        char list[512] = "";
        size_t len = 0;
        for (size_t i = 0; i < n && len < sizeof list; i++)
            len += (size_t) snprintf(list + len, sizeof list - len, "%s'%s'", i > 0 ? ", " : "",
                                     allowed[i]);
        def_ld_problem(ld, p, "unknown field '%s': expected one of %s", key, list);
    }
}
#define CHECK_FIELDS(ld, obj, ptr, allowed)                                                        \
    def_ld_check_fields((ld), (obj), (ptr), (allowed), sizeof(allowed) / sizeof(allowed)[0])

/* The member `name` of obj; NULL when absent, which is a problem if required. */
static json_t *def_ld_member(loader_t *ld, json_t *obj, const char *ptr, const char *name,
                             bool required)
{
    json_t *v = json_object_get(obj, name);
    if (v == NULL && required)
        def_ld_problem(ld, ptr, "missing required field '%s'", name);
    return v;
}

/*
 * The non-empty string member `name` of obj, borrowed from the document;
 * NULL when absent (a problem if required) or not a non-empty string (a
 * problem).
 */
static const char *def_ld_get_string(loader_t *ld, json_t *obj, const char *ptr, const char *name,
                                     bool required)
{
    json_t *v = def_ld_member(ld, obj, ptr, name, required);
    if (v == NULL)
        return NULL;
    char p[PTR_MAX];
    def_ptr_join(p, ptr, name);
    if (!json_is_string(v)) {
        def_ld_problem(ld, p, "expected a string, got %s", jsonptr_kind(v));
        return NULL;
    }
    if (json_string_length(v) == 0) {
        def_ld_problem(ld, p, "'%s' must not be empty", name);
        return NULL;
    }
    return json_string_value(v);
}

/* True if `text` (at pointer p) is a JSON pointer a definition may use. */
static bool check_pointer(loader_t *ld, const char *text, const char *p)
{
    char err[256];
    if (*text == '\0') {
        def_ld_problem(
            ld, p,
            "bad JSON pointer '': the empty pointer names the whole payload; name a field, "
            "e.g. '/order_id'");
        return false;
    }
    /* Pointers are copied into PTR_MAX buffers and printed in rejection
     * details; nothing real needs more than a few dozen characters. */
    if (strlen(text) > POINTER_MAX_LEN) {
        def_ld_problem(ld, p, "bad JSON pointer: %zu characters, over the limit of %d",
                       strlen(text), POINTER_MAX_LEN);
        return false;
    }
    if (!jsonptr_valid(text, err, sizeof err)) {
        def_ld_problem(ld, p, "bad JSON pointer '%s': %s", text, err);
        return false;
    }
    return true;
}

/* Like def_ld_get_string(), for a JSON pointer. */
static const char *def_ld_get_pointer(loader_t *ld, json_t *obj, const char *ptr, const char *name,
                                      bool required)
{
    json_t *v = def_ld_member(ld, obj, ptr, name, required);
    if (v == NULL)
        return NULL;
    char p[PTR_MAX];
    def_ptr_join(p, ptr, name);
    if (!json_is_string(v)) {
        def_ld_problem(ld, p, "expected a JSON pointer string such as '/order_id', got %s",
                       jsonptr_kind(v));
        return NULL;
    }
    return check_pointer(ld, json_string_value(v), p) ? json_string_value(v) : NULL;
}

/*
 * A correlation key: a JSON pointer string, or {"from": "message_key"} for
 * the Kafka message key. Sets *pointer (borrowed) or *from_message. False
 * when absent (a problem if required) or wrong (reported).
 */
static bool def_ld_get_key(loader_t *ld, json_t *obj, const char *ptr, bool required,
                           const char **pointer, bool *from_message)
{
    *pointer = NULL;
    *from_message = false;
    json_t *v = def_ld_member(ld, obj, ptr, "key", required);
    if (v == NULL)
        return false;
    char p[PTR_MAX];
    def_ptr_join(p, ptr, "key");
    if (json_is_string(v)) {
        *pointer = def_ld_get_pointer(ld, obj, ptr, "key", required);
        return *pointer != NULL;
    }
    if (!json_is_object(v)) {
        def_ld_problem(ld, p,
                       "expected a JSON pointer string such as '/order_id' or {\"from\": "
                       "\"message_key\"}, got %s",
                       jsonptr_kind(v));
        return false;
    }
    static const char *const fields[] = {"from"};
    CHECK_FIELDS(ld, v, p, fields);
    const char *from = def_ld_get_string(ld, v, p, "from", true);
    if (from == NULL)
        return false;
    if (strcmp(from, "message_key") != 0) {
        char sub[PTR_MAX];
        def_ld_problem(
            ld, def_ptr_join(sub, p, "from"),
            "key source '%s' is not valid: expected 'message_key' (the Kafka message key); "
            "for a payload field give its JSON pointer as a string",
            from);
        return false;
    }
    *from_message = true;
    return true;
}

/* A Kafka header name as a definition may name it: 1 to 255 printable
 * ASCII characters without spaces. */
static bool def_is_header_name(const char *s)
{
    if (*s == '\0' || strlen(s) > 255)
        return false;
    for (const char *p = s; *p != '\0'; p++) {
        if (*p <= ' ' || *p > '~')
            return false;
    }
    return true;
}

/* envelope.type: a JSON pointer string, or {"header": NAME}. */
static void parse_envelope_type(loader_t *ld, json_t *env, const char **type_ptr,
                                const char **type_header)
{
    json_t *v = json_object_get(env, "type");
    if (v == NULL)
        return;
    if (json_is_string(v)) {
        *type_ptr = def_ld_get_pointer(ld, env, "/envelope", "type", false);
        return;
    }
    if (!json_is_object(v)) {
        def_ld_problem(
            ld, "/envelope/type",
            "expected a JSON pointer string such as '/type' or {\"header\": \"event-type\"}, "
            "got %s",
            jsonptr_kind(v));
        return;
    }
    static const char *const fields[] = {"header"};
    CHECK_FIELDS(ld, v, "/envelope/type", fields);
    const char *h = def_ld_get_string(ld, v, "/envelope/type", "header", true);
    if (h != NULL && !def_is_header_name(h)) {
        def_ld_problem(ld, "/envelope/type/header",
                       "header name '%s' is not valid: 1 to 255 printable ASCII characters without "
                       "spaces",
                       h);
        return;
    }
    *type_header = h;
}

/* envelope.time: a JSON pointer string, {"pointer": P, "format": F} or
 * {"from": "kafka_timestamp"}. */
static void parse_envelope_time(loader_t *ld, json_t *env, const char **time_ptr,
                                def_time_format_t *format)
{
    json_t *v = json_object_get(env, "time");
    if (v == NULL)
        return;
    if (json_is_string(v)) {
        *time_ptr = def_ld_get_pointer(ld, env, "/envelope", "time", false);
        return;
    }
    if (!json_is_object(v)) {
        def_ld_problem(
            ld, "/envelope/time",
            "expected a JSON pointer string such as '/occurred_at', {\"pointer\": \"/ts\", "
            "\"format\": \"epoch_millis\"} or {\"from\": \"kafka_timestamp\"}, got %s",
            jsonptr_kind(v));
        return;
    }
    static const char *const fields[] = {"pointer", "format", "from"};
    CHECK_FIELDS(ld, v, "/envelope/time", fields);
    if (json_object_get(v, "from") != NULL) {
        const char *from = def_ld_get_string(ld, v, "/envelope/time", "from", false);
        if (json_object_get(v, "pointer") != NULL || json_object_get(v, "format") != NULL)
            def_ld_problem(
                ld, "/envelope/time",
                "'from' takes the time from the Kafka message: it cannot have 'pointer' or "
                "'format' too");
        else if (from != NULL && strcmp(from, "kafka_timestamp") != 0)
            def_ld_problem(
                ld, "/envelope/time/from",
                "time source '%s' is not valid: expected 'kafka_timestamp'; for a payload "
                "field give 'pointer' and 'format'",
                from);
        else if (from != NULL)
            *format = DEF_TIME_KAFKA;
        return;
    }
    const char *pointer = def_ld_get_pointer(ld, v, "/envelope/time", "pointer", true);
    const char *f = def_ld_get_string(ld, v, "/envelope/time", "format", true);
    if (f == NULL || pointer == NULL)
        return;
    static const char *const formats[] = {"rfc3339", "epoch_seconds", "epoch_millis"};
    static const def_time_format_t values[] = {DEF_TIME_RFC3339, DEF_TIME_EPOCH_SECONDS,
                                               DEF_TIME_EPOCH_MILLIS};
    long k = def_find_name(formats, 3, f);
    if (k < 0) {
        char h[128];
        def_ld_problem(ld, "/envelope/time/format",
                       "time format '%s' is not valid: expected 'rfc3339', 'epoch_seconds' or "
                       "'epoch_millis'%s",
                       f, def_hint(h, sizeof h, f, formats, 3));
        return;
    }
    *time_ptr = pointer;
    *format = values[k];
}

/*
 * The duration member `name` of obj: 1 with *ms_out set when present and
 * valid, 0 when absent, -1 when present but wrong (reported). A zero is
 * wrong unless zero_ok.
 */
static int def_ld_get_duration(loader_t *ld, json_t *obj, const char *ptr, const char *name,
                               bool zero_ok, int64_t *ms_out)
{
    json_t *v = json_object_get(obj, name);
    if (v == NULL)
        return 0;
    char p[PTR_MAX];
    def_ptr_join(p, ptr, name);
    if (!json_is_string(v)) {
        def_ld_problem(ld, p, "expected a duration string such as \"15m\" or \"1h30m\", got %s",
                       jsonptr_kind(v));
        return -1;
    }
    const char *text = json_string_value(v);
    char err[256];
    int64_t ms;
    if (!duration_parse(text, &ms, err, sizeof err)) {
        def_ld_problem(ld, p, "bad duration '%s': %s", text, err);
        return -1;
    }
    if (ms == 0 && !zero_ok) {
        def_ld_problem(ld, p, "bad duration '%s': %s must be longer than zero", text, name);
        return -1;
    }
    if (ms > DEF_MAX_DURATION_MS) {
        def_ld_problem(ld, p, "bad duration '%s': %s may be at most 36525d (100 years)", text,
                       name);
        return -1;
    }
    *ms_out = ms;
    return 1;
}

/* A team name (owner): [a-z][a-z0-9_-]*; NULL when absent or wrong. */
static const char *def_ld_get_team(loader_t *ld, json_t *obj, const char *ptr, bool required)
{
    const char *team = def_ld_get_string(ld, obj, ptr, "owner", required);
    if (team != NULL && !def_is_name(team, "-")) {
        char p[PTR_MAX];
        def_ld_problem(ld, def_ptr_join(p, ptr, "owner"),
                       "team name '%s' is not valid: use lowercase letters, digits, '_' and '-', "
                       "starting with a letter (at most %d characters)",
                       team, NAME_MAX_LEN);
        return NULL;
    }
    return team;
}

static void add_var(loader_t *ld, const char *var)
{
    if (def_find_name(ld->vars, ld->n_vars, var) >= 0)
        return;
    if (ld->n_vars == ld->cap_vars) {
        size_t cap = ld->cap_vars == 0 ? 8 : ld->cap_vars * 2;
        const char **vars = realloc(ld->vars, cap * sizeof *vars);
        if (vars == NULL) {
            def_ld_problem(ld, "", "out of memory");
            return;
        }
        ld->vars = vars;
        ld->cap_vars = cap;
    }
    ld->vars[ld->n_vars++] = var;
}

/* A "capture" object: variable name -> JSON pointer into the payload. */
static void def_ld_parse_captures(loader_t *ld, json_t *obj, const char *ptr, def_capture_t **out,
                                  size_t *n_out)
{
    if (!json_is_object(obj)) {
        def_ld_problem(ld, ptr,
                       "expected an object mapping variable names to JSON pointers, e.g. "
                       "{\"total\": \"/total\"}, got %s",
                       jsonptr_kind(obj));
        ld->vars_unknown = true;
        return;
    }
    def_capture_t *caps = def_ld_calloc(ld, json_object_size(obj), sizeof *caps);
    if (caps == NULL)
        return;
    size_t n = 0;
    const char *var;
    json_t *v;
    json_object_foreach(obj, var, v)
    {
        char p[PTR_MAX];
        def_ptr_join(p, ptr, var);
        bool ok = true;
        if (!is_var_name(var)) {
            def_ld_problem(
                ld, p,
                "variable name '%s' is not valid: use letters, digits and '_', not starting "
                "with a digit (at most %d characters)",
                var, NAME_MAX_LEN);
            ok = false;
        }
        /* A valid name counts as captured even when its pointer is wrong:
         * the templates that use it are not what needs fixing. */
        char *name = ok ? def_ld_strdup(ld, var) : NULL;
        if (!json_is_string(v)) {
            def_ld_problem(ld, p, "expected a JSON pointer string such as '/total', got %s",
                           jsonptr_kind(v));
            ok = false;
        } else if (!check_pointer(ld, json_string_value(v), p)) {
            ok = false;
        }
        if (name != NULL)
            add_var(ld, name);
        caps[n].var = name; /* now owned by caps: freed with it even when !ok */
        if (ok)
            caps[n].pointer = def_ld_strdup(ld, json_string_value(v));
        n++;
    }
    *out = caps;
    *n_out = n;
}

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
    def_ld_get_key(ld, doc, "", true, &key_ptr, &def->key_from_message);
    def->key_pointer = def_ld_strdup(ld, key_ptr);

    v = json_object_get(doc, "$schema");
    if (v != NULL && !json_is_string(v))
        def_ld_problem(ld, "/$schema", "expected the JSON Schema's URI as a string, got %s",
                       jsonptr_kind(v));

    const char *type_ptr = "/type", *id_ptr = "/id", *time_ptr = NULL, *type_header = NULL;
    v = json_object_get(doc, "envelope");
    if (v != NULL && !json_is_object(v)) {
        def_ld_problem(ld, "/envelope",
                       "expected an object with JSON pointers for 'type', 'id' and 'time', got %s",
                       jsonptr_kind(v));
    } else if (v != NULL) {
        static const char *const fields[] = {"type", "id", "time"};
        CHECK_FIELDS(ld, v, "/envelope", fields);
        parse_envelope_type(ld, v, &type_ptr, &type_header);
        if (json_object_get(v, "id") != NULL)
            id_ptr = def_ld_get_pointer(ld, v, "/envelope", "id", false);
        parse_envelope_time(ld, v, &time_ptr, &def->time_format);
    }
    def->type_pointer = def_ld_strdup(ld, type_ptr);
    def->type_header = def_ld_strdup(ld, type_header);
    def->id_pointer = def_ld_strdup(ld, id_ptr);
    def->time_pointer = def_ld_strdup(ld, time_ptr);

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

    static const char *const fields[] = {"topic", "key", "capture", "type_from_topic"};
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

        const char *key;
        bool from_message;
        if (def_ld_get_key(ld, v, p, false, &key, &from_message)) {
            ev->key_pointer = def_ld_strdup(ld, key);
            ev->key_from_message = from_message;
        } else {
            ev->key_pointer = def_ld_strdup(ld, def->key_pointer);
            ev->key_from_message = def->key_from_message;
        }

        json_t *fixed = json_object_get(v, "type_from_topic");
        if (fixed != NULL && !json_is_boolean(fixed))
            def_ld_problem(ld, def_ptr_join(sub, p, "type_from_topic"),
                           "expected true or false, got %s", jsonptr_kind(fixed));
        else
            ev->type_from_topic = json_is_true(fixed);

        json_t *capture = json_object_get(v, "capture");
        if (capture != NULL)
            def_ld_parse_captures(ld, capture, def_ptr_join(sub, p, "capture"), &ev->captures,
                                  &ev->n_captures);
    }
}

/* The event `name` used at pointer p, marked used; -1 (reported) if undeclared. */
static long def_ld_use_event(loader_t *ld, const char *name, const char *p)
{
    long e = def_find_name(ld->event_names, ld->def->n_events, name);
    if (e < 0) {
        const char *near = def_suggest(name, ld->event_names, ld->def->n_events);
        if (near != NULL)
            def_ld_problem(ld, p, "event '%s' is not declared in 'events' (did you mean '%s'?)",
                           name, near);
        else
            def_ld_problem(
                ld, p, "event '%s' is not declared in 'events': declare it there with its topic",
                name);
        return -1;
    }
    ld->event_used[e] = true;
    return e;
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

/* "any": transitions every non-terminal state takes unless it names the event itself. */
static void def_ld_parse_any(loader_t *ld, json_t *doc)
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

static void def_ld_parse_states(loader_t *ld, json_t *doc)
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

    static const char *const fields[] = {
        "$schema",  "process",        "version",  "mode",   "owner", "description", "key",
        "envelope", "reorder_window", "deadline", "events", "start", "states",      "any"};
    CHECK_FIELDS(&ld, doc, "", fields);

    prescan(&ld, doc);
    parse_header(&ld, doc);
    parse_events(&ld, doc);
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

/* strerror_r's text with a lowercase first letter, as messages print it. */
static const char *errno_text(int errnum, char *buf, size_t size)
{
    char tmp[128];
    /* GNU strerror_r: the text may be in tmp or in a static string. */
    snprintf(buf, size, "%s", strerror_r(errnum, tmp, sizeof tmp));
    if (buf[0] >= 'A' && buf[0] <= 'Z')
        buf[0] = (char) (buf[0] - 'A' + 'a');
    return buf;
}

/* What a file that is not a regular one is, for the message. */
static const char *file_kind(mode_t mode)
{
    if (S_ISDIR(mode))
        return "a directory";
    if (S_ISFIFO(mode))
        return "a FIFO";
    if (S_ISSOCK(mode))
        return "a socket";
    if (S_ISCHR(mode) || S_ISBLK(mode))
        return "a device";
    return "not a regular file";
}

def_t *def_load_file(const char *path, def_problems_t *problems)
{
    char err[128];
    /* Opened without blocking and judged by the descriptor, not the name:
     * a FIFO would block open() or read() for ever, and a stat() before
     * the open could describe another file than the one read. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
        def_problems_add(problems, path, "", "%s", errno_text(errno, err, sizeof err));
        return NULL;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        def_problems_add(problems, path, "", "%s", errno_text(errno, err, sizeof err));
        close(fd);
        return NULL;
    }
    if (S_ISDIR(sb.st_mode)) {
        def_problems_add(problems, path, "", "is a directory, not a definition file");
        close(fd);
        return NULL;
    }
    if (!S_ISREG(sb.st_mode)) {
        def_problems_add(problems, path, "",
                         "is %s, not a regular file: a definition is read "
                         "from a regular file",
                         file_kind(sb.st_mode));
        close(fd);
        return NULL;
    }
    if (sb.st_size > FILE_MAX_BYTES) {
        def_problems_add(problems, path, "", "file is %lld bytes: a definition is at most %d bytes",
                         (long long) sb.st_size, FILE_MAX_BYTES);
        close(fd);
        return NULL;
    }

    /* Read up to one byte past the limit, in case the file grew since fstat(). */
    char *text = malloc(FILE_MAX_BYTES + 1);
    size_t len = 0;
    int read_error = 0;
    while (text != NULL && len < FILE_MAX_BYTES + 1) {
        ssize_t got = read(fd, text + len, FILE_MAX_BYTES + 1 - len);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            read_error = errno;
        if (got <= 0)
            break;
        len += (size_t) got;
    }
    close(fd);

    def_t *def = NULL;
    if (text == NULL)
        def_problems_add(problems, path, "", "out of memory");
    else if (read_error != 0)
        def_problems_add(problems, path, "", "%s", errno_text(read_error, err, sizeof err));
    else if (len > FILE_MAX_BYTES)
        def_problems_add(problems, path, "", "file is over %d bytes: too large for a definition",
                         FILE_MAX_BYTES);
    else
        def = def_load_json(text, len, path, problems);
    free(text);
    return def;
}

long def_find_state(const def_t *def, const char *name)
{
    for (size_t i = 0; i < def->n_states; i++) {
        if (def->states[i].name != NULL && strcmp(def->states[i].name, name) == 0)
            return (long) i;
    }
    return -1;
}

long def_find_event(const def_t *def, const char *name)
{
    for (size_t i = 0; i < def->n_events; i++) {
        if (def->events[i].name != NULL && strcmp(def->events[i].name, name) == 0)
            return (long) i;
    }
    return -1;
}

const def_transition_t *def_transition(const def_t *def, size_t state, size_t event)
{
    if (state >= def->n_states)
        return NULL;
    const def_state_t *st = &def->states[state];
    for (size_t k = 0; k < st->n_on; k++) {
        if (st->on[k].event == event)
            return &st->on[k];
    }
    if (st->terminal != NULL)
        return NULL;
    for (size_t k = 0; k < def->n_any; k++) {
        if (def->any[k].event == event)
            return &def->any[k];
    }
    return NULL;
}

const char *def_state_owner(const def_t *def, size_t state)
{
    if (state < def->n_states && def->states[state].owner != NULL)
        return def->states[state].owner;
    return def->owner;
}

/* ---- sets ---- */

typedef struct path_list {
    char **items;
    size_t n, cap;
} path_list_t;

static bool path_list_add(path_list_t *list, char *path)
{
    if (list->n == list->cap) {
        size_t cap = list->cap == 0 ? 16 : list->cap * 2;
        char **items = realloc(list->items, cap * sizeof *items);
        if (items == NULL)
            return false;
        list->items = items;
        list->cap = cap;
    }
    list->items[list->n++] = path;
    return true;
}

static void path_list_clear(path_list_t *list)
{
    for (size_t i = 0; i < list->n; i++)
        free(list->items[i]);
    free(list->items);
}

static int compare_strings(const void *a, const void *b)
{
    return strcmp(*(char *const *) a, *(char *const *) b);
}

static bool has_json_suffix(const char *name)
{
    size_t len = strlen(name);
    return len > 5 && strcmp(name + len - 5, ".json") == 0;
}

/* Appends dir's *.json files, in name order, to files. False (reported) on failure. */
static bool list_directory(const char *dir, path_list_t *files, def_problems_t *problems)
{
    char err[128];
    DIR *d = opendir(dir);
    if (d == NULL) {
        def_problems_add(problems, dir, "", "%s", errno_text(errno, err, sizeof err));
        return false;
    }
    path_list_t found = {0};
    bool ok = true;
    size_t dir_len = strlen(dir);
    const char *sep = dir_len > 0 && dir[dir_len - 1] == '/' ? "" : "/";
    struct dirent *ent;
    while ((ent = readdir(d)) != NULL) {
        /* Hidden files are editor backups and the like, not definitions. */
        if (ent->d_name[0] == '.' || !has_json_suffix(ent->d_name))
            continue;
        char *path = NULL;
        if (asprintf(&path, "%s%s%s", dir, sep, ent->d_name) < 0 || !path_list_add(&found, path)) {
            free(path);
            def_problems_add(problems, dir, "", "out of memory");
            ok = false;
            break;
        }
    }
    closedir(d);

    if (ok && found.n == 0) {
        def_problems_add(problems, dir, "", "no *.json files in this directory");
        ok = false;
    }
    if (found.n > 1)
        qsort(found.items, found.n, sizeof *found.items, compare_strings);
    for (size_t i = 0; ok && i < found.n; i++) {
        if (!path_list_add(files, found.items[i])) {
            def_problems_add(problems, dir, "", "out of memory");
            ok = false;
            break;
        }
        found.items[i] = NULL; /* now owned by files */
    }
    path_list_clear(&found);
    return ok;
}

/* True if `path` names the same file as one already in the set. */
static bool already_loaded(const char *const *real, size_t n, const char *path_real)
{
    return path_real != NULL && def_find_name(real, n, path_real) >= 0;
}

def_set_t *def_set_load(const char *const *paths, size_t n_paths, def_problems_t *problems,
                        size_t *files_read)
{
    char err[128];
    bool ok = true;
    path_list_t files = {0};
    path_list_t real = {0};
    def_set_t *set = calloc(1, sizeof *set);
    if (files_read != NULL)
        *files_read = 0;
    if (set == NULL) {
        def_problems_add(problems, "", "", "out of memory");
        return NULL;
    }

    for (size_t i = 0; i < n_paths; i++) {
        struct stat sb;
        if (stat(paths[i], &sb) != 0) {
            def_problems_add(problems, paths[i], "", "%s", errno_text(errno, err, sizeof err));
            ok = false;
        } else if (S_ISDIR(sb.st_mode)) {
            ok = list_directory(paths[i], &files, problems) && ok;
        } else {
            char *copy = strdup(paths[i]);
            if (copy == NULL || !path_list_add(&files, copy)) {
                free(copy);
                def_problems_add(problems, paths[i], "", "out of memory");
                ok = false;
            }
        }
    }

    for (size_t i = 0; i < files.n; i++) {
        /* The same file named twice (by itself and through its directory)
         * is one definition, not a duplicate. */
        char *path_real = realpath(files.items[i], NULL);
        if (already_loaded((const char *const *) real.items, real.n, path_real)) {
            free(path_real);
            continue;
        }
        if (path_real != NULL && !path_list_add(&real, path_real))
            free(path_real);

        if (files_read != NULL)
            (*files_read)++;
        def_t *def = def_load_file(files.items[i], problems);
        if (def == NULL) {
            ok = false;
            continue;
        }
        const def_t *dup = def_set_find(set, def->process, def->version);
        if (dup != NULL) {
            def_problems_add(problems, def->source, "/version",
                             "process '%s' version %d is already defined in %s: give this one "
                             "a new version",
                             def->process, def->version, dup->source);
            def_free(def);
            ok = false;
            continue;
        }
        def_t **defs = realloc(set->defs, (set->n + 1) * sizeof *defs);
        if (defs == NULL) {
            def_problems_add(problems, def->source, "", "out of memory");
            def_free(def);
            ok = false;
            continue;
        }
        set->defs = defs;
        set->defs[set->n++] = def; /* now owned by set */
    }

    path_list_clear(&files);
    path_list_clear(&real);
    if (!ok) {
        def_set_free(set);
        return NULL;
    }
    return set;
}

void def_set_free(def_set_t *set)
{
    if (set == NULL)
        return;
    for (size_t i = 0; i < set->n; i++)
        def_free(set->defs[i]);
    free(set->defs);
    free(set->topics_prefix);
    json_decref(set->topics_map);
    free(set);
}

/* *topic renamed as def_set_map_topics() says; false (reported) when too long. */
static bool map_topic(char **topic, const char *prefix, const json_t *map, const char *file,
                      const char *pointer, def_problems_t *problems)
{
    if (*topic == NULL)
        return true;
    json_t *mapped = map != NULL ? json_object_get(map, *topic) : NULL;
    char *name = NULL;
    if (mapped != NULL && json_is_string(mapped))
        name = strdup(json_string_value(mapped));
    else if (asprintf(&name, "%s%s", prefix != NULL ? prefix : "", *topic) < 0)
        name = NULL;
    if (name == NULL) {
        def_problems_add(problems, file, pointer, "out of memory");
        return false;
    }
    if (strlen(name) > TOPIC_MAX_LEN) {
        def_problems_add(problems, file, pointer,
                         "topic '%s' becomes '%s' with topics.prefix or topics.map: over Kafka's "
                         "%d characters",
                         *topic, name, TOPIC_MAX_LEN);
        free(name);
        return false;
    }
    free(*topic);
    *topic = name;
    return true;
}

bool def_map_topics(def_t *def, const char *prefix, const json_t *map, def_problems_t *problems)
{
    bool ok = true;
    if ((prefix == NULL || *prefix == '\0') && (map == NULL || json_object_size(map) == 0))
        return true;
    char p[PTR_MAX], sub[PTR_MAX];
    for (size_t e = 0; e < def->n_events; e++) {
        def_ptr_join(p, "/events", def->events[e].name);
        ok = map_topic(&def->events[e].topic, prefix, map, def->source,
                       def_ptr_join(sub, p, "topic"), problems) &&
             ok;
    }
    for (size_t i = 0; i < def->n_states; i++) {
        if (def->states[i].command == NULL)
            continue;
        def_ptr_join(p, "/states", def->states[i].name);
        def_ptr_join(sub, p, "command");
        ok = map_topic(&def->states[i].command->topic, prefix, map, def->source,
                       def_ptr_join(p, sub, "topic"), problems) &&
             ok;
    }
    return ok;
}

bool def_set_map_topics(def_set_t *set, const char *prefix, const json_t *map,
                        def_problems_t *problems)
{
    bool ok = true;
    if ((prefix == NULL || *prefix == '\0') && (map == NULL || json_object_size(map) == 0))
        return true;
    free(set->topics_prefix);
    json_decref(set->topics_map);
    set->topics_prefix = strdup(prefix != NULL ? prefix : "");
    set->topics_map = map != NULL ? json_deep_copy(map) : json_object();
    if (set->topics_prefix == NULL || set->topics_map == NULL) {
        def_problems_add(problems, "", "", "out of memory");
        return false;
    }
    for (size_t d = 0; d < set->n; d++)
        ok = def_map_topics(set->defs[d], prefix, map, problems) && ok;
    return ok;
}

bool def_set_map_like(const def_set_t *set, def_t *def, def_problems_t *problems)
{
    if (set == NULL)
        return true;
    return def_map_topics(def, set->topics_prefix, set->topics_map, problems);
}

json_t *def_set_mapping_json(const def_set_t *set)
{
    json_t *map = set->topics_map != NULL ? json_deep_copy(set->topics_map) : json_object();
    if (map == NULL)
        return NULL;
    return json_pack("{s:s, s:o}", "prefix", set->topics_prefix != NULL ? set->topics_prefix : "",
                     "map", map);
}

bool def_map_recorded(def_t *def, const json_t *mapping, def_problems_t *problems)
{
    if (!json_is_object(mapping))
        return true;
    json_t *map = json_object_get(mapping, "map");
    return def_map_topics(def, json_string_value(json_object_get(mapping, "prefix")),
                          json_is_object(map) ? map : NULL, problems);
}

const def_t *def_set_latest(const def_set_t *set, const char *process)
{
    const def_t *best = NULL;
    for (size_t i = 0; i < set->n; i++) {
        const def_t *d = set->defs[i];
        if (strcmp(d->process, process) == 0 && (best == NULL || d->version > best->version))
            best = d;
    }
    return best;
}

const def_t *def_set_find(const def_set_t *set, const char *process, int version)
{
    for (size_t i = 0; i < set->n; i++) {
        const def_t *d = set->defs[i];
        if (d->version == version && strcmp(d->process, process) == 0)
            return d;
    }
    return NULL;
}
