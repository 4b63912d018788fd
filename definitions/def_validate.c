/*
 * def_validate - the checks that look across a whole definition, and the
 * "did you mean" suggestions in messages; see def.h.
 *
 * The loader (def_load.c, def_states.c) reads fields one by one; what
 * needs the whole picture lives here: the state graph (a terminal state
 * exists, every state is reachable, every reachable state can finish) and
 * the variables of command templates.
 */
#include "definitions/def.h"
#include "definitions/jsonptr.h"

#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t def_edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);

    /* Three rows of the optimal-string-alignment table: the swap of two
     * adjacent characters ("tpoic") needs the row before the previous. */
    size_t *rows = malloc(3 * (lb + 1) * sizeof *rows);
    if (rows == NULL)
        return SIZE_MAX;
    size_t *before = rows, *prev = rows + lb + 1, *cur = rows + 2 * (lb + 1);

    for (size_t j = 0; j <= lb; j++)
        prev[j] = j;
    for (size_t i = 1; i <= la; i++) {
        cur[0] = i;
        int ca = tolower((unsigned char) a[i - 1]);
        for (size_t j = 1; j <= lb; j++) {
            int cb = tolower((unsigned char) b[j - 1]);
            size_t best = prev[j - 1] + (ca == cb ? 0 : 1);
            if (prev[j] + 1 < best)
                best = prev[j] + 1;
            if (cur[j - 1] + 1 < best)
                best = cur[j - 1] + 1;
            if (i > 1 && j > 1 && ca == tolower((unsigned char) b[j - 2]) &&
                tolower((unsigned char) a[i - 2]) == cb && before[j - 2] + 1 < best)
                best = before[j - 2] + 1;
            cur[j] = best;
        }
        size_t *t = before;
        before = prev;
        prev = cur;
        cur = t;
    }
    size_t d = prev[lb];
    free(rows);
    return d;
}

const char *def_suggest(const char *word, const char *const *candidates, size_t n)
{
    if (word == NULL)
        return NULL;
    size_t len = strlen(word);
    /* One edit in a 3-letter word is a third of it: allow no more there. */
    size_t limit = len <= 3 ? 1 : 2;
    const char *best = NULL;
    size_t best_d = SIZE_MAX;

    for (size_t i = 0; i < n; i++) {
        if (candidates[i] == NULL)
            continue;
        size_t d = def_edit_distance(word, candidates[i]);
        if (d < best_d) {
            best_d = d;
            best = candidates[i];
        }
    }
    /* d < len: a one-letter word is one edit from every other one. */
    return best != NULL && best_d <= limit && best_d < len ? best : NULL;
}

/* Every state `from` leads to: its transitions' targets and on_timeout. */
static void mark_targets(const def_t *def, const def_state_t *st, bool *marks, size_t *stack,
                         size_t *top)
{
    /* "any" leads from every non-terminal state. */
    for (size_t k = 0; st->terminal == NULL && k < def->n_any; k++) {
        size_t to = def->any[k].to;
        if (!marks[to]) {
            marks[to] = true;
            stack[(*top)++] = to;
        }
    }
    for (size_t k = 0; k <= st->n_on; k++) {
        long to;
        if (k < st->n_on)
            to = (long) st->on[k].to;
        else
            to = st->on_timeout;
        if (to >= 0 && !marks[to]) {
            marks[to] = true;
            stack[(*top)++] = (size_t) to;
        }
    }
}

static bool leads_to(const def_t *def, const def_state_t *st, const bool *marks)
{
    for (size_t k = 0; st->terminal == NULL && k < def->n_any; k++) {
        if (marks[def->any[k].to])
            return true;
    }
    for (size_t k = 0; k < st->n_on; k++) {
        if (marks[st->on[k].to])
            return true;
    }
    return st->on_timeout >= 0 && marks[st->on_timeout];
}

static void state_pointer(char *buf, size_t size, const char *state)
{
    snprintf(buf, size, "/states");
    jsonptr_append(buf, size, state);
}

size_t def_check_graph(const def_t *def, def_problems_t *problems)
{
    size_t n = def->n_states, count = 0;
    if (n == 0 || def->start_state >= n)
        return 0;

    bool *reached = calloc(n, sizeof *reached);
    bool *finishes = calloc(n, sizeof *finishes);
    size_t *stack = calloc(n, sizeof *stack);
    if (reached == NULL || finishes == NULL || stack == NULL) {
        def_problems_add(problems, def->source, "", "out of memory checking the state graph");
        count++;
        goto done;
    }

    bool any_terminal = false;
    for (size_t i = 0; i < n; i++)
        any_terminal = any_terminal || def->states[i].terminal != NULL;
    if (!any_terminal) {
        def_problems_add(problems, def->source, "/states",
                         "no terminal state: mark each state where the process ends with "
                         "\"terminal\" and its outcome, e.g. \"terminal\": \"success\"");
        count++;
    }

    /* Forward from the start: every state must be somewhere an instance can be. */
    size_t top = 0;
    reached[def->start_state] = true;
    stack[top++] = def->start_state;
    while (top > 0)
        mark_targets(def, &def->states[stack[--top]], reached, stack, &top);

    char ptr[1024];
    for (size_t i = 0; i < n; i++) {
        if (reached[i])
            continue;
        state_pointer(ptr, sizeof ptr, def->states[i].name);
        def_problems_add(problems, def->source, ptr,
                         "state '%s' is unreachable: neither 'start' nor any transition or "
                         "on_timeout leads to it",
                         def->states[i].name);
        count++;
    }

    /* Backward from the terminal states, to a fixed point; definitions are
     * small enough that the quadratic loop is the clear choice. Only
     * reachable states are reported: an unreachable one already is. */
    if (any_terminal) {
        for (size_t i = 0; i < n; i++)
            finishes[i] = def->states[i].terminal != NULL;
        bool changed = true;
        while (changed) {
            changed = false;
            for (size_t i = 0; i < n; i++) {
                if (!finishes[i] && leads_to(def, &def->states[i], finishes)) {
                    finishes[i] = true;
                    changed = true;
                }
            }
        }
        for (size_t i = 0; i < n; i++) {
            if (!reached[i] || finishes[i])
                continue;
            state_pointer(ptr, sizeof ptr, def->states[i].name);
            def_problems_add(problems, def->source, ptr,
                             "no terminal state can be reached from state '%s': an instance "
                             "that enters it never finishes",
                             def->states[i].name);
            count++;
        }
    }

done:
    free(reached);
    free(finishes);
    free(stack);
    return count;
}

/* ---- command topics ---- */

size_t def_check_command_topics(const def_t *def, def_problems_t *problems)
{
    size_t count = 0;
    char ptr[1024];
    for (size_t i = 0; i < def->n_states; i++) {
        const def_command_t *cmd = def->states[i].command;
        if (cmd == NULL || cmd->topic == NULL || def->states[i].name == NULL)
            continue;
        for (size_t e = 0; e < def->n_events; e++) {
            if (def->events[e].topic == NULL || strcmp(def->events[e].topic, cmd->topic) != 0)
                continue;
            state_pointer(ptr, sizeof ptr, def->states[i].name);
            jsonptr_append(ptr, sizeof ptr, "command");
            jsonptr_append(ptr, sizeof ptr, "topic");
            def_problems_add(problems, def->source, ptr,
                             "command topic '%s' is also where event '%s' arrives: Steward "
                             "would read its own commands as events; send commands to a topic "
                             "of their own",
                             cmd->topic, def->events[e].name != NULL ? def->events[e].name : "?");
            count++;
            break;
        }
    }
    return count;
}

/* Calls on_string(arg, text, pointer) for every string in `v`, its pointer
 * in ptr (of ptr_size bytes), restoring ptr as it returns so the whole walk
 * shares one buffer. */
static void walk_strings(const json_t *v, char *ptr, size_t ptr_size,
                         void (*on_string)(void *arg, const char *text, const char *ptr), void *arg)
{
    size_t len = strlen(ptr);
    if (json_is_string(v)) {
        on_string(arg, json_string_value(v), ptr);
    } else if (json_is_object(v)) {
        const char *key;
        json_t *child;
        json_object_foreach((json_t *) v, key, child)
        {
            jsonptr_append(ptr, ptr_size, key);
            walk_strings(child, ptr, ptr_size, on_string, arg);
            ptr[len] = '\0';
        }
    } else if (json_is_array(v)) {
        size_t i;
        json_t *child;
        json_array_foreach(v, i, child)
        {
            char index[32];
            snprintf(index, sizeof index, "%zu", i);
            jsonptr_append(ptr, ptr_size, index);
            walk_strings(child, ptr, ptr_size, on_string, arg);
            ptr[len] = '\0';
        }
    }
}

/* ---- command templates ---- */

static const char *const template_builtins[] = {"key",     "process", "state",
                                                "attempt", "token",   "idempotency_key"};
#define N_BUILTINS (sizeof template_builtins / sizeof template_builtins[0])

typedef struct template_walk {
    const char *const *vars;
    size_t n_vars;
    const char *file;
    def_problems_t *problems;
    size_t count;
} template_walk_t;

static void check_template_string(void *arg, const char *text, const char *ptr)
{
    template_walk_t *w = arg;
    for (const char *p = strstr(text, "${"); p != NULL; p = strstr(p, "${")) {
        const char *name = p + 2;
        const char *end = strchr(name, '}');
        if (end == NULL) {
            def_problems_add(w->problems, w->file, ptr,
                             "unclosed '${' in template \"%s\": end the variable with '}'", text);
            w->count++;
            return;
        }
        int len = (int) (end - name);
        p = end + 1;

        bool builtin = false;
        for (size_t i = 0; i < N_BUILTINS; i++) {
            if (strlen(template_builtins[i]) == (size_t) len &&
                strncmp(template_builtins[i], name, (size_t) len) == 0)
                builtin = true;
        }
        if (builtin)
            continue;

        char *word = strndup(name, (size_t) len);
        if (word == NULL) {
            def_problems_add(w->problems, w->file, ptr, "out of memory checking a template");
            w->count++;
            return;
        }
        if (strncmp(word, "vars.", 5) == 0) {
            const char *var = word + 5;
            bool known = w->vars == NULL && *var != '\0';
            for (size_t i = 0; i < w->n_vars && !known; i++)
                known = w->vars[i] != NULL && strcmp(w->vars[i], var) == 0;
            if (!known) {
                const char *near = *var != '\0' ? def_suggest(var, w->vars, w->n_vars) : NULL;
                if (near != NULL)
                    def_problems_add(w->problems, w->file, ptr,
                                     "${%s} names a variable that nothing captures (did you "
                                     "mean ${vars.%s}?)",
                                     word, near);
                else
                    def_problems_add(w->problems, w->file, ptr,
                                     "${%s} names a variable that nothing captures: add it to "
                                     "the 'capture' of 'start' or of an event",
                                     word);
                w->count++;
            }
        } else {
            const char *near = def_suggest(word, template_builtins, N_BUILTINS);
            char hint[64] = "";
            if (near != NULL)
                snprintf(hint, sizeof hint, " (did you mean ${%s}?)", near);
            def_problems_add(w->problems, w->file, ptr,
                             "unknown template variable ${%s}%s: expected ${key}, ${process}, "
                             "${state}, ${attempt}, ${token} or ${vars.NAME}",
                             word, hint);
            w->count++;
        }
        free(word);
    }
}

size_t def_check_template(const json_t *payload, const char *const *vars, size_t n_vars,
                          const char *file, const char *pointer, def_problems_t *problems)
{
    /* vars NULL means "any name": the count that came with it is not a
     * length to walk. */
    template_walk_t w = {vars, vars != NULL ? n_vars : 0, file, problems, 0};
    char ptr[1024];
    snprintf(ptr, sizeof ptr, "%s", pointer != NULL ? pointer : "");
    walk_strings(payload, ptr, sizeof ptr, check_template_string, &w);
    return w.count;
}

/* ---- variables captured on the way to a state ---- */

static bool captures_var(const def_capture_t *caps, size_t n, const char *var)
{
    /* A capture with an invalid name has none (def_fields.c reported it). */
    for (size_t i = 0; i < n; i++)
        if (caps[i].var != NULL && strcmp(caps[i].var, var) == 0)
            return true;
    return false;
}

/*
 * Whether some path from the start reaches `target` having captured `var`:
 * a walk over (state, captured yet) pairs, so a loop is visited at most
 * twice per state.
 */
static bool captured_on_some_path(const def_t *def, size_t target, const char *var)
{
    size_t n = def->n_states;
    bool *seen = calloc(2 * n, sizeof *seen);
    size_t *stack = malloc(2 * n * sizeof *stack);
    bool found = false;
    if (seen == NULL || stack == NULL) {
        free(seen);
        free(stack);
        return true; /* out of memory: report nothing rather than a false problem */
    }
    size_t top = 0;
    bool at_start = captures_var(def->start_captures, def->n_start_captures, var) ||
                    captures_var(def->events[def->start_event].captures,
                                 def->events[def->start_event].n_captures, var);
    size_t first = def->start_state * 2 + (at_start ? 1 : 0);
    seen[first] = true;
    stack[top++] = first;
    while (top > 0 && !found) {
        size_t node = stack[--top];
        size_t s = node / 2;
        bool has = node % 2 == 1;
        if (s == target && has) {
            found = true;
            break;
        }
        const def_state_t *st = &def->states[s];
        if (st->terminal != NULL)
            continue;
        /* The state's own transitions, "any" where it does not override
         * them, and on_timeout (which captures nothing). */
        size_t n_edges = st->n_on + def->n_any + 1;
        for (size_t k = 0; k < n_edges; k++) {
            size_t to, event = SIZE_MAX;
            if (k < st->n_on) {
                to = st->on[k].to;
                event = st->on[k].event;
            } else if (k < st->n_on + def->n_any) {
                const def_transition_t *t = &def->any[k - st->n_on];
                if (def_transition(def, s, t->event) != t)
                    continue;
                to = t->to;
                event = t->event;
            } else {
                if (st->on_timeout < 0)
                    continue;
                to = (size_t) st->on_timeout;
            }
            bool next_has =
                has || (event != SIZE_MAX && captures_var(def->events[event].captures,
                                                          def->events[event].n_captures, var));
            size_t next = to * 2 + (next_has ? 1 : 0);
            if (!seen[next]) {
                seen[next] = true;
                stack[top++] = next;
            }
        }
    }
    free(seen);
    free(stack);
    return found;
}

typedef struct path_walk {
    const def_t *def;
    size_t state;
    def_problems_t *problems;
    size_t count;
} path_walk_t;

static void check_path_string(void *arg, const char *text, const char *ptr)
{
    path_walk_t *w = arg;
    for (const char *p = strstr(text, "${vars."); p != NULL; p = strstr(p, "${vars.")) {
        const char *name = p + 7;
        const char *end = strchr(name, '}');
        if (end == NULL || end == name)
            return; /* def_check_template reports it */
        char *var = strndup(name, (size_t) (end - name));
        p = end + 1;
        if (var == NULL)
            return;
        /* A variable nothing captures at all is def_check_template's to report. */
        bool anywhere = captures_var(w->def->start_captures, w->def->n_start_captures, var);
        for (size_t e = 0; e < w->def->n_events && !anywhere; e++)
            anywhere = captures_var(w->def->events[e].captures, w->def->events[e].n_captures, var);
        if (anywhere && !captured_on_some_path(w->def, w->state, var)) {
            def_problems_add(w->problems, w->def->source, ptr,
                             "${vars.%s} is never captured on a path that reaches state '%s': "
                             "capture it on 'start' or on an event that leads there",
                             var, w->def->states[w->state].name);
            w->count++;
        }
        free(var);
    }
}

size_t def_check_template_paths(const def_t *def, def_problems_t *problems)
{
    path_walk_t w = {def, 0, problems, 0};
    for (size_t i = 0; i < def->n_states; i++) {
        if (def->states[i].command == NULL)
            continue;
        char ptr[1024];
        state_pointer(ptr, sizeof ptr, def->states[i].name);
        size_t len = strlen(ptr);
        snprintf(ptr + len, sizeof ptr - len, "/command/payload");
        w.state = i;
        walk_strings(def->states[i].command->payload, ptr, sizeof ptr, check_path_string, &w);
    }
    return w.count;
}

bool def_lease_event(const def_t *def, size_t state, size_t event, bool *is_claim)
{
    const def_lease_t *lease = state < def->n_states ? def->states[state].lease : NULL;
    if (lease == NULL)
        return false;
    if (lease->claim == event) {
        if (is_claim != NULL)
            *is_claim = true;
        return true;
    }
    for (size_t i = 0; i < lease->n_renew; i++) {
        if (lease->renew[i] == event) {
            if (is_claim != NULL)
                *is_claim = false;
            return true;
        }
    }
    return false;
}
