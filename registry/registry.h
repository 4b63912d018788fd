/*
 * registry - where the writer schemas of framed messages come from: a
 * schema registry speaking Confluent's REST API (GET {url}/schemas/ids/{id},
 * as Confluent Schema Registry, Apicurio's ccompat API and Redpanda serve
 * it), or a local directory of <id>.avsc files for setups without one.
 *
 * A schema id names one schema forever, so what was found is cached for
 * the life of the registry (up to REGISTRY_MAX_CACHED ids; past that
 * lookups go to the source each time). A lookup ends one of three ways,
 * and the caller's course differs for each: found; not found (a 404, no
 * file), which no retry changes; unavailable (no connection, a timeout, a
 * 5xx, an answer that makes no sense), which a later try may mend, so the
 * message must wait, not be rejected.
 *
 * Thread-safe: lanes look up schemas side by side. The HTTP request is
 * made outside the cache's lock.
 */
#ifndef STEWARD_REGISTRY_H
#define STEWARD_REGISTRY_H

#include <stddef.h>
#include <stdint.h>

typedef struct registry registry_t; /* opaque */

#define REGISTRY_MAX_CACHED         10000
#define REGISTRY_DEFAULT_TIMEOUT_MS 5000
#define REGISTRY_MAX_SCHEMA_BYTES   (1024 * 1024)

typedef struct registry_config {
    const char *url;           /* the API's base, e.g. http://host:8081; NULL: none */
    const char *username;      /* basic auth; NULL: none */
    const char *password;      /* basic auth's password; NULL or "": password_file */
    const char *password_file; /* the file holding it (common/secret); NULL: none */
    const char *ca_file;       /* the CA bundle for https; NULL: the system's */
    int timeout_ms;            /* per request; 0: REGISTRY_DEFAULT_TIMEOUT_MS */
    const char *directory;     /* <id>.avsc files; used when url is NULL */
} registry_config_t;

typedef enum registry_result {
    REGISTRY_FOUND = 0,
    REGISTRY_NOT_FOUND,   /* permanent: the registry has no such id */
    REGISTRY_UNAVAILABLE, /* transient: try again later */
} registry_result_t;

/* What kind of schema the registry holds for an id (its schemaType). */
typedef enum registry_schema_type {
    REGISTRY_AVRO = 0, /* also when the registry says nothing: the API's default */
    REGISTRY_PROTOBUF,
    REGISTRY_JSON,
    REGISTRY_OTHER,
} registry_schema_type_t;

const char *registry_result_name(registry_result_t result); /* found, not_found, unavailable */
const char *registry_schema_type_name(registry_schema_type_t type); /* AVRO, PROTOBUF, ... */

/*
 * Returns a new registry (free with registry_free()), or NULL with the
 * reason in errstr: neither url nor directory, a url that is not http(s),
 * a password file that cannot be read, a directory that is not one.
 * Nothing is fetched yet.
 */
registry_t *registry_new(const registry_config_t *cfg, char *errstr, size_t errstr_size);
void registry_free(registry_t *reg); /* NULL is a no-op */

/* The URL or directory schemas come from, for logs (borrowed). */
const char *registry_source(const registry_t *reg);

/*
 * The schema `id` names: from the cache, else from the source. On
 * REGISTRY_FOUND *text is a new string (free it) with the schema's text,
 * and *type its kind; otherwise *text is NULL and errstr says why (the
 * id, the URL or file, the HTTP status or connection error). *cached says
 * whether the cache answered (no request made).
 */
registry_result_t registry_lookup(registry_t *reg, uint32_t id, char **text,
                                  registry_schema_type_t *type, int *cached, char *errstr,
                                  size_t errstr_size);

#endif
