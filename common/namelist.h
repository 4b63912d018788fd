/*
 * namelist - the one reader of comma-separated name lists ("a, b,*"), the
 * form of the list settings (dispatch.paused, http.allowed_hosts) and of
 * the pause list the generation carries: names trimmed of blanks, empty
 * ones skipped, "*" meaning every name. Pure.
 */
#ifndef STEWARD_NAMELIST_H
#define STEWARD_NAMELIST_H

#include <stdbool.h>

/*
 * Calls on_name (may be NULL) with each name of list (NULL: empty), in
 * order, "*" left out; returns whether the list holds "*". Out of memory,
 * it calls nothing and returns true, so a pause list is never read as
 * shorter than it is.
 */
bool namelist_each(const char *list, void (*on_name)(const char *name, void *arg), void *arg);

/*
 * The same walk for a reader that must tell "out of memory" from "*" (a
 * list that opens a door when it holds "*"): returns false, having called
 * nothing, when out of memory; else true with *all saying whether the list
 * holds "*".
 */
bool namelist_walk(const char *list, void (*on_name)(const char *name, void *arg), void *arg,
                   bool *all);

/*
 * "a, b,a" as "a,b": names trimmed, empty ones and repeats dropped; any
 * "*" makes the whole list "*". A new string (free it), or NULL when out
 * of memory.
 */
char *namelist_normalize(const char *list);

#endif
