/*
 * defcache - the definition version an instance runs on. Instances keep
 * the version they started with, so a version no longer in the loaded
 * files is read back from steward.definitions and kept here.
 *
 * One cache per thread: it is not locked.
 */
#ifndef STEWARD_DEFCACHE_H
#define STEWARD_DEFCACHE_H

#include "definitions/def.h"

#include <libpq-fe.h>

typedef struct defcache defcache_t;

/* `defs` is borrowed and must outlive the cache (or be replaced first). */
defcache_t *defcache_new(const def_set_t *defs);
void defcache_free(defcache_t *cache); /* NULL is a no-op */

/* Replaces the loaded set (after a reload); versions read back are kept. */
void defcache_set_loaded(defcache_t *cache, const def_set_t *defs);
const def_set_t *defcache_loaded(const defcache_t *cache);

/*
 * The definition of (process, version), borrowed until defcache_free():
 * from the loaded set, else read from steward.definitions on conn. NULL
 * when neither has it or the recorded document no longer validates (the
 * reason is logged).
 */
const def_t *defcache_get(defcache_t *cache, PGconn *conn, const char *process, int version);

#endif
