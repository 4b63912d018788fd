/*
 * schemas - the parsed writer schemas of confluent_avro topics, by schema
 * id, over a registry (registry/registry.h) that fetches their text. What
 * a schema id names never changes, so a parsed schema (or the verdict
 * that the id holds no Avro schema) is kept for the life of the cache, up
 * to SCHEMAS_MAX ids; past that a schema is parsed for each use.
 *
 * Also where a registry outage is told: one log line when it starts (the
 * registry's URL, the error, the schema id), one when it ends, and the
 * metrics steward_schema_registry_requests_total{result} and
 * steward_schema_registry_up.
 *
 * Thread-safe: the decode stage and every lane's commit use one cache.
 */
#ifndef STEWARD_SCHEMAS_H
#define STEWARD_SCHEMAS_H

#include "definitions/def.h"
#include "formats/format_avro.h"
#include "registry/registry.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SCHEMAS_MAX 10000

typedef struct schemas schemas_t; /* opaque */

/* A new cache over `reg` (borrowed; must outlive it), or NULL when out of memory. */
schemas_t *schemas_new(registry_t *reg);
void schemas_free(schemas_t *s); /* NULL is a no-op */

typedef enum schemas_result {
    SCHEMAS_AVRO = 0,    /* *schema set */
    SCHEMAS_NOT_FOUND,   /* the registry has no such id: unknown_schema */
    SCHEMAS_WRONG_TYPE,  /* PROTOBUF or JSON: unsupported_schema_type */
    SCHEMAS_INVALID,     /* the text is not an Avro schema: invalid_avro */
    SCHEMAS_UNAVAILABLE, /* not in hand: the message must wait */
} schemas_result_t;

/*
 * The schema `id` names. With fetch false only what is cached answers
 * (no I/O: the decode stage), and an id not cached is
 * SCHEMAS_UNAVAILABLE; with fetch true the registry is asked. On
 * SCHEMAS_AVRO *schema is borrowed until schemas_release(id, *schema) (a
 * no-op for a cached one, which lives as long as the cache). Otherwise
 * detail says why, naming the id.
 */
schemas_result_t schemas_get(schemas_t *s, uint32_t id, bool fetch,
                             const format_avro_schema_t **schema, char *detail, size_t detail_size);
void schemas_release(schemas_t *s, uint32_t id, const format_avro_schema_t *schema);

/* The first event of `defs` on a confluent_avro topic, or NULL: what a
 * missing registry is refused for. */
const def_event_t *schemas_avro_event(const def_set_t *defs);

#endif
