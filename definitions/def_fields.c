/*
 * def_fields - the loader's readers of one field each (a string, a JSON
 * pointer, a correlation key, a duration, a team, captures) and the rules
 * for names and topics. Each reports what is wrong at its JSON pointer and
 * returns NULL (or false, or -1) so that the caller carries on with the
 * next field. Shared by def_load.c and def_states.c (def_int.h).
 */
#include "definitions/def.h"

#include "definitions/def_int.h"
#include "definitions/duration.h"
#include "definitions/jsonptr.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void def_ld_problem(loader_t *ld, const char *pointer, const char *fmt, ...)
{
    va_list ap;
    ld->n_problems++;
    va_start(ap, fmt);
    if (ld->context == NULL) {
        def_problems_vadd(ld->problems, ld->file, pointer, fmt, ap);
    } else {
        char *message = NULL;
        if (vasprintf(&message, fmt, ap) < 0)
            message = NULL;
        def_problems_add(ld->problems, ld->file, pointer, "%s%s", ld->context,
                         message != NULL ? message : "out of memory");
        free(message);
    }
    va_end(ap);
}

char *def_ld_strdup(loader_t *ld, const char *s)
{
    if (s == NULL)
        return NULL;
    char *copy = strdup(s);
    if (copy == NULL)
        def_ld_problem(ld, "", "out of memory");
    return copy;
}

void *def_ld_calloc(loader_t *ld, size_t n, size_t size)
{
    void *p = calloc(n == 0 ? 1 : n, size);
    if (p == NULL)
        def_ld_problem(ld, "", "out of memory");
    return p;
}

char *def_ptr_join(char *buf, const char *base, const char *token)
{
    snprintf(buf, PTR_MAX, "%s", base);
    return jsonptr_append(buf, PTR_MAX, token);
}

const char *def_hint(char *buf, size_t size, const char *word, const char *const *candidates,
                     size_t n)
{
    const char *near = def_suggest(word, candidates, n);
    if (near == NULL)
        buf[0] = '\0';
    else
        snprintf(buf, size, " (did you mean '%s'?)", near);
    return buf;
}

long def_find_name(const char *const *names, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++) {
        if (names[i] != NULL && strcmp(names[i], name) == 0)
            return (long) i;
    }
    return -1;
}

bool def_is_name(const char *s, const char *extra)
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

bool def_is_topic(const char *s)
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

void def_ld_check_fields(loader_t *ld, json_t *obj, const char *ptr, const char *const *allowed,
                         size_t n)
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

json_t *def_ld_member(loader_t *ld, json_t *obj, const char *ptr, const char *name, bool required)
{
    json_t *v = json_object_get(obj, name);
    if (v == NULL && required)
        def_ld_problem(ld, ptr, "missing required field '%s'", name);
    return v;
}

/* Member `name` of obj as a string, its pointer written to p (PTR_MAX
 * bytes); NULL when absent (a problem if required) or not a string (a
 * problem: "expected <expected>, got <kind>"). */
static const char *member_string(loader_t *ld, json_t *obj, const char *ptr, const char *name,
                                 bool required, const char *expected, char *p)
{
    json_t *v = def_ld_member(ld, obj, ptr, name, required);
    if (v == NULL)
        return NULL;
    def_ptr_join(p, ptr, name);
    if (!json_is_string(v)) {
        def_ld_problem(ld, p, "expected %s, got %s", expected, jsonptr_kind(v));
        return NULL;
    }
    return json_string_value(v);
}

const char *def_ld_get_string(loader_t *ld, json_t *obj, const char *ptr, const char *name,
                              bool required)
{
    char p[PTR_MAX];
    const char *text = member_string(ld, obj, ptr, name, required, "a string", p);
    if (text != NULL && *text == '\0') {
        def_ld_problem(ld, p, "'%s' must not be empty", name);
        return NULL;
    }
    return text;
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

const char *def_ld_get_pointer(loader_t *ld, json_t *obj, const char *ptr, const char *name,
                               bool required)
{
    char p[PTR_MAX];
    const char *text =
        member_string(ld, obj, ptr, name, required, "a JSON pointer string such as '/order_id'", p);
    return text != NULL && check_pointer(ld, text, p) ? text : NULL;
}

bool def_ld_get_key(loader_t *ld, json_t *obj, const char *ptr, bool required, const char **pointer,
                    bool *from_message)
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

bool def_is_header_name(const char *s)
{
    if (*s == '\0' || strlen(s) > 255)
        return false;
    for (const char *p = s; *p != '\0'; p++) {
        if (*p <= ' ' || *p > '~')
            return false;
    }
    return true;
}

int def_ld_get_duration(loader_t *ld, json_t *obj, const char *ptr, const char *name, bool zero_ok,
                        int64_t *ms_out)
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

const char *def_ld_get_team(loader_t *ld, json_t *obj, const char *ptr, bool required)
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

void def_ld_parse_captures(loader_t *ld, json_t *obj, const char *ptr, def_capture_t **out,
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

long def_ld_use_event(loader_t *ld, const char *name, const char *p)
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
