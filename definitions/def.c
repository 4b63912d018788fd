/*
 * def - the definition model of def.h: the problems list every load
 * appends to, freeing a def_t, and the lookups on one.
 *
 * Reading a definition is split by what it reads: def_load.c the document
 * and its top-level fields, def_states.c the states and their transitions,
 * def_fields.c the readers of one field each that both use. Files and sets
 * are in def_files.c, the topic mapping in def_topics.c, the checks that
 * look across a whole definition in def_validate.c.
 */
#include "definitions/def.h"

#include "definitions/def_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- problems ---- */

void def_problems_vadd(def_problems_t *problems, const char *file, const char *pointer,
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

void def_envelope_clear(def_envelope_t *env)
{
    if (env == NULL)
        return;
    free(env->type_pointer);
    free(env->type_header);
    free(env->id_pointer);
    free(env->time_pointer);
    free(env->key_pointer);
    memset(env, 0, sizeof *env);
}

void def_free(def_t *def)
{
    if (def == NULL)
        return;
    free(def->process);
    free(def->owner);
    free(def->description);
    def_envelope_clear(&def->envelope);
    free(def->any);
    for (size_t i = 0; i < def->n_events; i++) {
        def_event_t *ev = &def->events[i];
        free(ev->name);
        free(ev->topic);
        def_envelope_clear(&ev->envelope);
        free(ev->own_type_pointer);
        free(ev->own_type_header);
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

/* ---- lookups ---- */

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

const def_event_t *def_topic_event(const def_t *def, const char *topic)
{
    for (size_t i = 0; topic != NULL && i < def->n_events; i++) {
        if (def->events[i].topic != NULL && strcmp(def->events[i].topic, topic) == 0)
            return &def->events[i];
    }
    return NULL;
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
