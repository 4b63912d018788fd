/*
 * schemas - parsed writer schemas by id, and the registry's outages; see
 * schemas.h. The cache is an array sorted by id; entries are never freed
 * before the cache, so a borrowed schema outlives every batch using it.
 */
#include "manager/intake/schemas.h"

#include "common/log.h"
#include "manager/runtime/metrics.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct entry {
    uint32_t id;
    schemas_result_t result; /* SCHEMAS_AVRO, _WRONG_TYPE or _INVALID: permanent verdicts */
    format_avro_schema_t *schema;
    char *detail; /* why not, for the other two */
} entry_t;

struct schemas {
    registry_t *reg;
    pthread_mutex_t lock; /* the cache and `down` */
    entry_t *cache;
    size_t n, cap;
    bool down; /* the last request found the registry unavailable */
};

schemas_t *schemas_new(registry_t *reg)
{
    schemas_t *s = calloc(1, sizeof *s);
    if (s == NULL)
        return NULL;
    s->reg = reg;
    pthread_mutex_init(&s->lock, NULL);
    metrics_set(&metrics.registry_down, 0);
    return s;
}

void schemas_free(schemas_t *s)
{
    if (s == NULL)
        return;
    for (size_t i = 0; i < s->n; i++) {
        format_avro_schema_free(s->cache[i].schema);
        free(s->cache[i].detail);
    }
    free(s->cache);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

/* Where id is or would go in the cache; lock held. */
static size_t find(const schemas_t *s, uint32_t id, bool *found)
{
    size_t lo = 0, hi = s->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->cache[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = lo < s->n && s->cache[lo].id == id;
    return lo;
}

/* Answers from an entry; lock held. */
static schemas_result_t answer(const entry_t *e, const format_avro_schema_t **schema, char *detail,
                               size_t detail_size)
{
    if (e->result == SCHEMAS_AVRO)
        *schema = e->schema;
    else
        snprintf(detail, detail_size, "%s", e->detail);
    return e->result;
}

/* Keeps a verdict (taking schema and detail); false when it was not kept
 * (the cache is full, or another thread kept one first). Lock held. */
static bool keep(schemas_t *s, uint32_t id, schemas_result_t result, format_avro_schema_t *schema,
                 char *detail)
{
    bool found;
    size_t at = find(s, id, &found);
    if (found || s->n >= SCHEMAS_MAX)
        return false;
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        entry_t *grown = realloc(s->cache, cap * sizeof *grown);
        if (grown == NULL)
            return false;
        s->cache = grown;
        s->cap = cap;
    }
    memmove(&s->cache[at + 1], &s->cache[at], (s->n - at) * sizeof *s->cache);
    s->cache[at] = (entry_t){id, result, schema, detail};
    s->n++;
    return true;
}

/* The registry's state after a request: an outage logged once when it
 * starts and once when it ends. */
static void note_request(schemas_t *s, registry_result_t result, uint32_t id, const char *why)
{
    metrics_add(&metrics.registry_requests[result], 1);
    pthread_mutex_lock(&s->lock);
    bool was_down = s->down;
    s->down = result == REGISTRY_UNAVAILABLE;
    pthread_mutex_unlock(&s->lock);
    metrics_set(&metrics.registry_down, result == REGISTRY_UNAVAILABLE);
    char schema_id[16];
    snprintf(schema_id, sizeof schema_id, "%" PRIu32, id);
    if (result == REGISTRY_UNAVAILABLE && !was_down)
        LOG_WARN("schema registry unavailable: messages whose schema is not in hand wait, "
                 "uncommitted, and are retried with backoff",
                 "registry", registry_source(s->reg), "error", why, "schema_id", schema_id);
    else if (result != REGISTRY_UNAVAILABLE && was_down)
        LOG_INFO("schema registry reachable again", "registry", registry_source(s->reg),
                 "schema_id", schema_id);
}

schemas_result_t schemas_get(schemas_t *s, uint32_t id, bool fetch,
                             const format_avro_schema_t **schema, char *detail, size_t detail_size)
{
    bool found;
    schemas_result_t result = SCHEMAS_UNAVAILABLE;
    *schema = NULL;
    pthread_mutex_lock(&s->lock);
    size_t at = find(s, id, &found);
    if (found)
        result = answer(&s->cache[at], schema, detail, detail_size);
    pthread_mutex_unlock(&s->lock);
    if (found)
        return result;
    if (!fetch) {
        snprintf(detail, detail_size, "schema id %" PRIu32 ": not fetched yet", id);
        return SCHEMAS_UNAVAILABLE;
    }

    char *text = NULL, why[512] = "";
    registry_schema_type_t type;
    int cached;
    registry_result_t got = registry_lookup(s->reg, id, &text, &type, &cached, why, sizeof why);
    if (!cached)
        note_request(s, got, id, why);
    if (got == REGISTRY_NOT_FOUND) {
        snprintf(detail, detail_size, "unknown schema id %" PRIu32 " (%s): %s", id,
                 registry_source(s->reg), why);
        return SCHEMAS_NOT_FOUND;
    }
    if (got == REGISTRY_UNAVAILABLE) {
        snprintf(detail, detail_size, "%s", why);
        return SCHEMAS_UNAVAILABLE;
    }

    format_avro_schema_t *parsed = NULL;
    char verdict[512], parse_error[384];
    if (type != REGISTRY_AVRO) {
        result = SCHEMAS_WRONG_TYPE;
        snprintf(verdict, sizeof verdict,
                 "schema id %" PRIu32 " is a %s schema in the registry; the topic's format "
                 "confluent_avro reads Avro only",
                 id, registry_schema_type_name(type));
    } else if ((parsed = format_avro_schema_new(text, strlen(text), parse_error,
                                                sizeof parse_error)) == NULL) {
        result = SCHEMAS_INVALID;
        snprintf(verdict, sizeof verdict, "schema id %" PRIu32 ": %s", id, parse_error);
    } else {
        result = SCHEMAS_AVRO;
        verdict[0] = '\0';
    }
    free(text);
    char *kept_detail = result != SCHEMAS_AVRO ? strdup(verdict) : NULL;
    pthread_mutex_lock(&s->lock);
    bool kept =
        (result == SCHEMAS_AVRO || kept_detail != NULL) && keep(s, id, result, parsed, kept_detail);
    if (!kept) {
        at = find(s, id, &found);
        if (found) { /* another thread kept it first: use that one */
            format_avro_schema_free(parsed);
            parsed = NULL;
            result = answer(&s->cache[at], schema, detail, detail_size);
        }
    }
    pthread_mutex_unlock(&s->lock);
    if (!kept)
        free(kept_detail);
    if (kept || !found) {
        if (result == SCHEMAS_AVRO)
            *schema = parsed; /* not kept: the caller releases it */
        else
            snprintf(detail, detail_size, "%s", verdict);
    }
    return result;
}

void schemas_release(schemas_t *s, uint32_t id, const format_avro_schema_t *schema)
{
    bool found;
    if (schema == NULL)
        return;
    pthread_mutex_lock(&s->lock);
    size_t at = find(s, id, &found);
    bool cached = found && s->cache[at].schema == schema;
    pthread_mutex_unlock(&s->lock);
    if (!cached)
        format_avro_schema_free((format_avro_schema_t *) schema);
}

const def_event_t *schemas_avro_event(const def_set_t *defs)
{
    for (size_t d = 0; defs != NULL && d < defs->n; d++) {
        for (size_t i = 0; i < defs->defs[d]->n_events; i++) {
            if (defs->defs[d]->events[i].format == DEF_FORMAT_CONFLUENT_AVRO)
                return &defs->defs[d]->events[i];
        }
    }
    return NULL;
}
