/*
 * defcache - loaded and recorded definition versions; see defcache.h.
 */
#include "manager/defcache.h"

#include "manager/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct defcache {
    const def_set_t *loaded; /* borrowed */
    def_t **recorded;        /* owned */
    size_t n_recorded;
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
    free(cache);
}

void defcache_set_loaded(defcache_t *cache, const def_set_t *defs)
{
    cache->loaded = defs;
}

const def_set_t *defcache_loaded(const defcache_t *cache)
{
    return cache->loaded;
}

const def_t *defcache_get(defcache_t *cache, PGconn *conn, const char *process, int version)
{
    const def_t *def = def_set_find(cache->loaded, process, version);
    if (def != NULL)
        return def;
    for (size_t i = 0; i < cache->n_recorded; i++) {
        if (cache->recorded[i]->version == version &&
            strcmp(cache->recorded[i]->process, process) == 0)
            return cache->recorded[i];
    }

    char vtext[16];
    snprintf(vtext, sizeof vtext, "%d", version);
    const char *params[2] = {process, vtext};
    PGresult *res = PQexecParams(conn,
                                 "SELECT document::text FROM steward.definitions "
                                 "WHERE process = $1 AND version = $2::int",
                                 2, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) == 0) {
        PQclear(res);
        return NULL;
    }
    def_problems_t problems = {0};
    const char *doc = PQgetvalue(res, 0, 0);
    def_t *loaded = def_load_json(doc, strlen(doc), "steward.definitions", &problems);
    PQclear(res);
    if (loaded == NULL) {
        LOG_ERROR("a recorded definition version no longer loads", "process", process, "version",
                  vtext, "problem", problems.n > 0 ? problems.items[0].message : NULL);
        def_problems_clear(&problems);
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
