/*
 * defcache - loaded and recorded definition versions; see defcache.h.
 */
#include "manager/runtime/defcache.h"

#include "common/db.h"
#include "common/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A version that cannot be loaded, and why. */
typedef struct unloadable {
    char *process;
    int version;
    char *why;
} unloadable_t;

struct defcache {
    const def_set_t *loaded; /* borrowed */
    def_t **recorded;        /* owned */
    size_t n_recorded;
    unloadable_t *failed; /* owned */
    size_t n_failed;
    bool quiet; /* failures are not logged */
};

defcache_t *defcache_new(const def_set_t *defs)
{
    defcache_t *cache = calloc(1, sizeof *cache);
    if (cache != NULL)
        cache->loaded = defs;
    return cache;
}

void defcache_free(defcache_t *cache)
{
    if (cache == NULL)
        return;
    for (size_t i = 0; i < cache->n_recorded; i++)
        def_free(cache->recorded[i]);
    free(cache->recorded);
    for (size_t i = 0; i < cache->n_failed; i++) {
        free(cache->failed[i].process);
        free(cache->failed[i].why);
    }
    free(cache->failed);
    free(cache);
}

void defcache_set_quiet(defcache_t *cache, bool quiet)
{
    cache->quiet = quiet;
}

void defcache_set_loaded(defcache_t *cache, const def_set_t *defs)
{
    cache->loaded = defs;
}

const def_set_t *defcache_loaded(const defcache_t *cache)
{
    return cache->loaded;
}

/* Remembers that (process, version) cannot load; returns the reason as
 * kept (or a static text when out of memory). */
static const char *remember_failure(defcache_t *cache, const char *process, int version,
                                    const char *why)
{
    unloadable_t *grown = realloc(cache->failed, (cache->n_failed + 1) * sizeof *grown);
    if (grown == NULL)
        return "out of memory";
    cache->failed = grown;
    unloadable_t *u = &cache->failed[cache->n_failed];
    u->process = strdup(process);
    u->version = version;
    u->why = strdup(why);
    if (u->process == NULL || u->why == NULL) {
        free(u->process);
        free(u->why);
        return "out of memory";
    }
    cache->n_failed++;
    return u->why;
}

const def_t *defcache_find(defcache_t *cache, PGconn *conn, const char *process, int version,
                           const char **why)
{
    *why = NULL;
    const def_t *def = def_set_find(cache->loaded, process, version);
    if (def != NULL)
        return def;
    for (size_t i = 0; i < cache->n_recorded; i++) {
        if (cache->recorded[i]->version == version &&
            strcmp(cache->recorded[i]->process, process) == 0)
            return cache->recorded[i];
    }
    for (size_t i = 0; i < cache->n_failed; i++) {
        if (cache->failed[i].version == version && strcmp(cache->failed[i].process, process) == 0) {
            *why = cache->failed[i].why;
            return NULL;
        }
    }

    char vtext[16], reason[512];
    snprintf(vtext, sizeof vtext, "%d", version);
    const char *params[2] = {process, vtext};
    PGresult *res = PQexecParams(conn,
                                 "SELECT document::text FROM steward.definitions "
                                 "WHERE process = $1 AND version = $2::int",
                                 2, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        PQclear(res);
        return NULL; /* the database, not the version: ask again next time */
    }
    if (PQntuples(res) == 0) {
        PQclear(res);
        snprintf(reason, sizeof reason, "version %d of %s is not recorded in steward.definitions",
                 version, process);
        if (!cache->quiet)
            LOG_ERROR("an instance's definition version is not recorded", "process", process,
                      "version", vtext);
        *why = remember_failure(cache, process, version, reason);
        return NULL;
    }
    def_problems_t problems = {0};
    const char *doc = PQgetvalue(res, 0, 0);
    def_t *loaded = def_load_json(doc, strlen(doc), "steward.definitions", &problems);
    PQclear(res);
    if (loaded != NULL && !def_set_map_like(cache->loaded, loaded, &problems)) {
        def_free(loaded);
        loaded = NULL;
    }
    if (loaded == NULL) {
        const char *problem = problems.n > 0 ? problems.items[0].message : "it does not validate";
        snprintf(reason, sizeof reason, "version %d of %s no longer loads: %s", version, process,
                 problem);
        if (!cache->quiet)
            LOG_ERROR("a recorded definition version no longer loads", "process", process,
                      "version", vtext, "problem", problem);
        def_problems_clear(&problems);
        *why = remember_failure(cache, process, version, reason);
        return NULL;
    }
    def_t **grown = realloc(cache->recorded, (cache->n_recorded + 1) * sizeof *grown);
    if (grown == NULL) {
        def_free(loaded);
        return NULL;
    }
    cache->recorded = grown;
    cache->recorded[cache->n_recorded++] = loaded;
    return loaded;
}

const def_t *defcache_get(defcache_t *cache, PGconn *conn, const char *process, int version)
{
    const char *why;
    return defcache_find(cache, conn, process, version, &why);
}

/* Versions with open instances; the index instances_open_version answers
 * each EXISTS, so this reads one row per recorded version. */
static const char open_versions_sql[] =
    "SELECT d.process, d.version FROM steward.definitions d "
    "WHERE EXISTS (SELECT 1 FROM steward.instances i WHERE i.process = d.process "
    "  AND i.version = d.version AND i.status = 'active') "
    "ORDER BY 1, 2";

err_class_t defcache_watch_topics(defcache_t *cache, PGconn *conn, engine_watch_topics_t *out,
                                  char *errstr, size_t errstr_size)
{
    err_class_t cls;
    engine_watch_topics_clear(out);
    PGresult *res = db_query(conn, "reading the versions with open instances", open_versions_sql, 0,
                             NULL, &cls, errstr, errstr_size);
    if (res == NULL)
        return cls;
    int n = PQntuples(res);
    const def_t **open = calloc((size_t) n + 1, sizeof *open);
    size_t n_open = 0;
    if (open == NULL) {
        PQclear(res);
        return err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
    }
    for (int row = 0; row < n; row++) {
        const char *why;
        const def_t *def = defcache_find(cache, conn, PQgetvalue(res, row, 0),
                                         atoi(PQgetvalue(res, row, 1)), &why);
        if (def != NULL)
            open[n_open++] = def;
    }
    PQclear(res);
    cls = engine_watch_topics(cache->loaded, open, n_open, out)
              ? ERR_OK
              : err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
    free(open);
    return cls;
}
