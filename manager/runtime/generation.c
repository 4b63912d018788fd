/*
 * generation - reference-counted definitions and routes; see generation.h.
 */
#include "manager/runtime/generation.h"

#include "common/namelist.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

struct gen_current {
    pthread_mutex_t lock; /* guards current: acquiring it and taking a
                             reference happen together */
    gen_t *current;
    char *paused;           /* guarded by lock; NULL: never set ("") */
    unsigned paused_number; /* bumped by each gen_set_paused() */
};

/* The reference count lives beside the public fields. */
typedef struct gen_box {
    gen_t gen;
    atomic_int refs;
} gen_box_t;

gen_t *gen_new(def_set_t *defs, route_table_t *routes)
{
    gen_box_t *box = calloc(1, sizeof *box);
    if (box == NULL)
        return NULL;
    box->gen.defs = defs;
    box->gen.routes = routes;
    box->gen.number = 1;
    atomic_init(&box->refs, 1);
    return &box->gen;
}

static void gen_free(gen_t *gen)
{
    def_set_free(gen->defs);
    route_table_free(gen->routes);
    free((gen_box_t *) gen);
}

void gen_release(gen_t *gen)
{
    if (gen != NULL && atomic_fetch_sub(&((gen_box_t *) gen)->refs, 1) == 1)
        gen_free(gen);
}

gen_current_t *gen_current_new(gen_t *first)
{
    gen_current_t *cur = calloc(1, sizeof *cur);
    if (cur == NULL)
        return NULL;
    pthread_mutex_init(&cur->lock, NULL);
    cur->current = first;
    return cur;
}

void gen_current_free(gen_current_t *cur)
{
    if (cur == NULL)
        return;
    gen_release(cur->current);
    free(cur->paused);
    pthread_mutex_destroy(&cur->lock);
    free(cur);
}

gen_t *gen_acquire(gen_current_t *cur)
{
    pthread_mutex_lock(&cur->lock);
    gen_t *gen = cur->current;
    atomic_fetch_add(&((gen_box_t *) gen)->refs, 1);
    pthread_mutex_unlock(&cur->lock);
    return gen;
}

void gen_publish(gen_current_t *cur, gen_t *next)
{
    pthread_mutex_lock(&cur->lock);
    gen_t *old = cur->current;
    next->number = old->number + 1;
    cur->current = next;
    pthread_mutex_unlock(&cur->lock);
    gen_release(old);
}

bool gen_refresh(gen_current_t *cur, gen_t **held)
{
    pthread_mutex_lock(&cur->lock);
    bool newer = cur->current != *held;
    pthread_mutex_unlock(&cur->lock);
    if (!newer)
        return false;
    gen_t *next = gen_acquire(cur);
    gen_release(*held);
    *held = next;
    return true;
}

bool gen_set_paused(gen_current_t *cur, const char *list)
{
    char *copy = strdup(list != NULL ? list : "");
    if (copy == NULL)
        return false;
    pthread_mutex_lock(&cur->lock);
    char *old = cur->paused;
    cur->paused = copy;
    /* never 0: a reader's first look always sees it */
    if (++cur->paused_number == 0)
        cur->paused_number = 1;
    pthread_mutex_unlock(&cur->lock);
    free(old);
    return true;
}

char *gen_paused_refresh(gen_current_t *cur, unsigned *seen)
{
    char *copy = NULL;
    pthread_mutex_lock(&cur->lock);
    if (cur->paused_number != *seen) {
        copy = strdup(cur->paused != NULL ? cur->paused : "");
        if (copy != NULL)
            *seen = cur->paused_number;
    }
    pthread_mutex_unlock(&cur->lock);
    return copy;
}

bool gen_pause_each(const char *list, void (*on_name)(const char *name, void *arg), void *arg)
{
    return namelist_each(list, on_name, arg);
}

typedef struct pause_find {
    const char *process;
    bool found;
} pause_find_t;

static void pause_match(const char *name, void *arg)
{
    pause_find_t *f = arg;
    f->found = f->found || strcmp(name, f->process) == 0;
}

bool gen_pause_holds(const char *list, const char *process)
{
    pause_find_t f = {process, false};
    return gen_pause_each(list, pause_match, &f) || f.found;
}
