/*
 * defcache - the definition version an instance runs on. Instances keep
 * the version they started with, so a version no longer in the loaded
 * files is read back from steward.definitions and kept here. A version
 * that cannot be loaded (not recorded, or its recorded document no longer
 * validates) is remembered too, with the reason: a recorded document never
 * changes, so asking again would only cost a query per instance.
 * A version read back is renamed by the loaded set's topic mapping
 * (def_set_map_like()): its document keeps the definition's names, and
 * every version must name the broker's.
 *
 * Not locked: a cache is used by one thread at a time. Threads that share
 * one hold a lock of their own around every call (the scheduler's due
 * workers share theirs under its versions_lock, so a version that does
 * not load is read and logged once); the definitions it returns stay
 * valid after the lock is let go, until defcache_free().
 */
#ifndef STEWARD_DEFCACHE_H
#define STEWARD_DEFCACHE_H

#include "definitions/def.h"
#include "engine/engine.h"

#include "common/err.h"

#include <libpq-fe.h>

typedef struct defcache defcache_t;

/* `defs` is borrowed and must outlive the cache (or be replaced first). */
defcache_t *defcache_new(const def_set_t *defs);
void defcache_free(defcache_t *cache); /* NULL is a no-op */

/* Failures to load are remembered but not logged: for a reader whose
 * failures someone else reports (intake's subscription; the scheduler
 * logs and alerts about the same versions). */
void defcache_set_quiet(defcache_t *cache, bool quiet);

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

/*
 * As defcache_get(), and says why not. On NULL, *why is the reason the
 * version can never be loaded (borrowed until defcache_free(); the failure
 * is remembered and logged once), or NULL when the database could not be
 * asked (transient: nothing is remembered; try again later).
 */
const def_t *defcache_find(defcache_t *cache, PGconn *conn, const char *process, int version,
                           const char **why);

/*
 * The topics that hold each process's watermark (engine_watch_topics()): those
 * of the loaded set and of the recorded versions that still have open
 * instances, read on conn (a version that cannot load is left out: the
 * scheduler sets its instances aside). Fills *out, whose names are
 * borrowed until defcache_free() or the next defcache_set_loaded(). On
 * error, the class with the reason in errstr and *out empty.
 */
err_class_t defcache_watch_topics(defcache_t *cache, PGconn *conn, engine_watch_topics_t *out,
                                  char *errstr, size_t errstr_size);

#endif
