/*
 * generation - the definitions and routes in force, swapped whole on
 * SIGHUP while the threads run.
 *
 * A generation is one validated (definitions, routes) pair. The current one
 * is published in a gen_current_t; each thread holds a reference to the
 * generation it works with and, between passes, trades it for the current
 * one if a newer was published. The last reference frees a generation, so
 * a thread in the middle of a pass never sees its definitions freed.
 *
 * The pause list (dispatch.paused) is published beside the generation, not
 * in it: a SIGHUP whose definitions are refused still pauses or resumes,
 * since the switch is what an operator reaches for when things go wrong.
 */
#ifndef STEWARD_GENERATION_H
#define STEWARD_GENERATION_H

#include "definitions/def.h"
#include "manager/sinks/routes.h"

#include <stdbool.h>

typedef struct gen {
    def_set_t *defs;       /* owned */
    route_table_t *routes; /* owned */
    int number;            /* 1 for the first, then each reload */
} gen_t;

typedef struct gen_current gen_current_t;

/* Takes ownership of defs and routes; the new generation holds one reference. */
gen_t *gen_new(def_set_t *defs, route_table_t *routes);

/* Drops one reference; the last frees the generation. NULL is a no-op. */
void gen_release(gen_t *gen);

/* Publishes `first` (its reference moves to the holder). */
gen_current_t *gen_current_new(gen_t *first);
void gen_current_free(gen_current_t *cur); /* drops the holder's reference */

/* A new reference to the current generation; release it with gen_release(). */
gen_t *gen_acquire(gen_current_t *cur);

/* Makes `next` current (its reference moves to the holder) and numbers it. */
void gen_publish(gen_current_t *cur, gen_t *next);

/*
 * Trades *held for the current generation if a newer one was published.
 * Returns true when *held changed (the caller then applies it).
 */
bool gen_refresh(gen_current_t *cur, gen_t **held);

/* Publishes the pause list ("" none, "*" all, else names separated by
 * commas; copied). Any thread. False when out of memory (nothing changed). */
bool gen_set_paused(gen_current_t *cur, const char *list);

/*
 * When the pause list changed since *seen (0 before the first call), sets
 * *seen and returns a new copy of it (free it); else NULL. Any thread.
 */
char *gen_paused_refresh(gen_current_t *cur, unsigned *seen);

/*
 * The pause list's one reading rule: names separated by commas, blanks
 * around each ignored, "*" for every process. Calls on_name(name, arg) for
 * each name but "*" (the name is borrowed for the call) and returns whether
 * "*" is among them. A NULL list is "". On out of memory every process is
 * held: *all is returned true, so nothing is sent that should wait.
 */
bool gen_pause_each(const char *list, void (*on_name)(const char *name, void *arg), void *arg);

/* Whether the pause list holds `process`'s commands. */
bool gen_pause_holds(const char *list, const char *process);

#endif
