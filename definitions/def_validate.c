/*
 * def_validate - the checks that look across a whole definition, and the
 * "did you mean" suggestions in messages; see def.h.
 *
 * def.c reads fields one by one; what needs the whole picture lives here:
 * the state graph (a terminal state exists, every state is reachable, every
 * reachable state can finish) and the variables of command templates.
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

/* ---- command templates ---- */

static const char *const template_builtins[] = {"key", "process", "state", "attempt"};
#define N_BUILTINS (sizeof template_builtins / sizeof template_builtins[0])

typedef struct template_walk {
    const char *const *vars;
    size_t n_vars;
    const char *file;
    def_problems_t *problems;
    size_t count;
} template_walk_t;

static void check_template_string(template_walk_t *w, const char *text, const char *ptr)
{
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
                             "${state}, ${attempt} or ${vars.NAME}",
                             word, hint);
            w->count++;
        }
        free(word);
    }
}

/* Walks `v` with its pointer in ptr (of ptr_size bytes), restoring ptr as
 * it returns so the whole walk shares one buffer. */
static void walk_template(template_walk_t *w, const json_t *v, char *ptr, size_t ptr_size)
{
    size_t len = strlen(ptr);
    if (json_is_string(v)) {
        check_template_string(w, json_string_value(v), ptr);
    } else if (json_is_object(v)) {
        const char *key;
        json_t *child;
        json_object_foreach((json_t *) v, key, child)
        {
            jsonptr_append(ptr, ptr_size, key);
            walk_template(w, child, ptr, ptr_size);
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
            walk_template(w, child, ptr, ptr_size);
            ptr[len] = '\0';
        }
    }
}

size_t def_check_template(const json_t *payload, const char *const *vars, size_t n_vars,
                          const char *file, const char *pointer, def_problems_t *problems)
{
    template_walk_t w = {vars, n_vars, file, problems, 0};
    char ptr[1024];
    snprintf(ptr, sizeof ptr, "%s", pointer != NULL ? pointer : "");
    walk_template(&w, payload, ptr, sizeof ptr);
    return w.count;
}
