/*
 * registry - writer schemas by id from a schema registry or a directory;
 * see registry.h. The cache is an array sorted by id, searched by
 * bisection; it only grows.
 */
#include "registry/registry.h"

#include "common/secret.h"
#include "common/utf8.h"

#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

typedef struct entry {
    uint32_t id;
    registry_schema_type_t type;
    char *text;
} entry_t;

struct registry {
    char *url; /* without a trailing slash */
    char *username, *password;
    char *ca_file;
    char *directory;
    long timeout_ms;
    pthread_mutex_t lock; /* guards the cache */
    entry_t *cache;
    size_t n_cache, cap_cache;
};

const char *registry_result_name(registry_result_t result)
{
    switch (result) {
    case REGISTRY_FOUND:
        return "found";
    case REGISTRY_NOT_FOUND:
        return "not_found";
    case REGISTRY_UNAVAILABLE:
        return "unavailable";
    }
    return "unknown";
}

const char *registry_schema_type_name(registry_schema_type_t type)
{
    switch (type) {
    case REGISTRY_AVRO:
        return "AVRO";
    case REGISTRY_PROTOBUF:
        return "PROTOBUF";
    case REGISTRY_JSON:
        return "JSON";
    case REGISTRY_OTHER:
        break;
    }
    return "another type";
}

static char *dup_or_null(const char *s)
{
    return s != NULL && s[0] != '\0' ? strdup(s) : NULL;
}

registry_t *registry_new(const registry_config_t *cfg, char *errstr, size_t errstr_size)
{
    bool has_url = cfg->url != NULL && cfg->url[0] != '\0';
    bool has_dir = cfg->directory != NULL && cfg->directory[0] != '\0';
    if (!has_url && !has_dir) {
        snprintf(errstr, errstr_size,
                 "no schema registry: set schema_registry.url or schema_registry.directory");
        return NULL;
    }
    if (has_url && strncmp(cfg->url, "http://", 7) != 0 && strncmp(cfg->url, "https://", 8) != 0) {
        snprintf(errstr, errstr_size, "schema_registry.url %s is not an http:// or https:// URL",
                 cfg->url);
        return NULL;
    }
    if (!has_url) {
        struct stat st;
        if (stat(cfg->directory, &st) != 0 || !S_ISDIR(st.st_mode)) {
            snprintf(errstr, errstr_size, "schema_registry.directory %s is not a directory%s%s",
                     cfg->directory, errno != 0 ? ": " : "", errno != 0 ? strerror(errno) : "");
            return NULL;
        }
    }
    registry_t *reg = calloc(1, sizeof *reg);
    if (reg == NULL) {
        snprintf(errstr, errstr_size, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&reg->lock, NULL);
    reg->timeout_ms = cfg->timeout_ms > 0 ? cfg->timeout_ms : REGISTRY_DEFAULT_TIMEOUT_MS;
    if (has_url) {
        reg->url = strdup(cfg->url);
        size_t n = reg->url != NULL ? strlen(reg->url) : 0;
        while (n > 0 && reg->url[n - 1] == '/')
            reg->url[--n] = '\0';
        reg->username = dup_or_null(cfg->username);
        reg->ca_file = dup_or_null(cfg->ca_file);
        if (cfg->password != NULL && cfg->password[0] != '\0') {
            reg->password = strdup(cfg->password);
        } else if (cfg->password_file != NULL && cfg->password_file[0] != '\0') {
            char why[256];
            reg->password = secret_read_file(cfg->password_file, why, sizeof why);
            if (reg->password == NULL) {
                snprintf(errstr, errstr_size, "schema_registry.password_file: %s", why);
                registry_free(reg);
                return NULL;
            }
        }
    } else {
        reg->directory = strdup(cfg->directory);
    }
    if (has_url ? reg->url == NULL : reg->directory == NULL) {
        snprintf(errstr, errstr_size, "out of memory");
        registry_free(reg);
        return NULL;
    }
    return reg;
}

void registry_free(registry_t *reg)
{
    if (reg == NULL)
        return;
    for (size_t i = 0; i < reg->n_cache; i++)
        free(reg->cache[i].text);
    free(reg->cache);
    free(reg->url);
    free(reg->username);
    if (reg->password != NULL) {
        memset(reg->password, 0, strlen(reg->password));
        free(reg->password);
    }
    free(reg->ca_file);
    free(reg->directory);
    pthread_mutex_destroy(&reg->lock);
    free(reg);
}

const char *registry_source(const registry_t *reg)
{
    return reg->url != NULL ? reg->url : reg->directory;
}

/* The index of id in the cache, or where it would go (*found false). Lock held. */
static size_t cache_find(const registry_t *reg, uint32_t id, bool *found)
{
    size_t lo = 0, hi = reg->n_cache;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (reg->cache[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = lo < reg->n_cache && reg->cache[lo].id == id;
    return lo;
}

/* Keeps a copy of what was found; a full cache (or no memory) keeps nothing. */
static void cache_put(registry_t *reg, uint32_t id, registry_schema_type_t type, const char *text)
{
    pthread_mutex_lock(&reg->lock);
    bool found;
    size_t at = cache_find(reg, id, &found);
    if (!found && reg->n_cache < REGISTRY_MAX_CACHED) {
        if (reg->n_cache == reg->cap_cache) {
            size_t cap = reg->cap_cache ? reg->cap_cache * 2 : 16;
            entry_t *grown = realloc(reg->cache, cap * sizeof *grown);
            if (grown == NULL)
                goto done;
            reg->cache = grown;
            reg->cap_cache = cap;
        }
        char *copy = strdup(text);
        if (copy == NULL)
            goto done;
        memmove(&reg->cache[at + 1], &reg->cache[at], (reg->n_cache - at) * sizeof *reg->cache);
        reg->cache[at] = (entry_t){id, type, copy};
        reg->n_cache++;
    }
done:
    pthread_mutex_unlock(&reg->lock);
}

static registry_result_t from_directory(registry_t *reg, uint32_t id, char **text, char *errstr,
                                        size_t errstr_size)
{
    char path[4096], why[256];
    snprintf(path, sizeof path, "%s/%" PRIu32 ".avsc", reg->directory, id);
    struct stat st;
    if (stat(path, &st) != 0 && errno == ENOENT) {
        snprintf(errstr, errstr_size, "schema id %" PRIu32 ": no file %s", id, path);
        return REGISTRY_NOT_FOUND;
    }
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        snprintf(errstr, errstr_size, "schema id %" PRIu32 ": %s is not a file", id, path);
        return REGISTRY_UNAVAILABLE;
    }
    /* Unreadable, too big, not text: the operator's to mend, and the
     * messages wait for it rather than be rejected for it. */
    if ((*text = secret_read_file(path, why, sizeof why)) == NULL) {
        snprintf(errstr, errstr_size, "schema id %" PRIu32 ": %s", id, why);
        return REGISTRY_UNAVAILABLE;
    }
    if (!utf8_valid((const unsigned char *) *text, strlen(*text))) {
        free(*text);
        *text = NULL;
        snprintf(errstr, errstr_size, "schema id %" PRIu32 ": %s is not UTF-8 text", id, path);
        return REGISTRY_UNAVAILABLE;
    }
    return REGISTRY_FOUND;
}

typedef struct body {
    char *buf;
    size_t len;
    bool over;
} body_t;

static size_t on_body(char *data, size_t size, size_t nmemb, void *arg)
{
    body_t *b = arg;
    size_t n = size * nmemb;
    /* The schema is escaped inside a JSON string: room for twice its limit. */
    if (b->len + n > 2 * REGISTRY_MAX_SCHEMA_BYTES) {
        b->over = true;
        return 0;
    }
    char *grown = realloc(b->buf, b->len + n + 1);
    if (grown == NULL)
        return 0;
    b->buf = grown;
    memcpy(b->buf + b->len, data, n);
    b->len += n;
    b->buf[b->len] = '\0';
    return n;
}

static registry_schema_type_t type_of(const char *name)
{
    if (name == NULL || strcasecmp(name, "AVRO") == 0)
        return REGISTRY_AVRO;
    if (strcasecmp(name, "PROTOBUF") == 0)
        return REGISTRY_PROTOBUF;
    if (strcasecmp(name, "JSON") == 0)
        return REGISTRY_JSON;
    return REGISTRY_OTHER;
}

static registry_result_t from_url(registry_t *reg, uint32_t id, char **text,
                                  registry_schema_type_t *type, char *errstr, size_t errstr_size)
{
    char url[2048], curl_error[CURL_ERROR_SIZE] = "";
    body_t body = {0};
    registry_result_t result = REGISTRY_UNAVAILABLE;
    CURL *easy = curl_easy_init();
    if (easy == NULL) {
        snprintf(errstr, errstr_size, "schema id %" PRIu32 ": cannot start an HTTP request", id);
        return REGISTRY_UNAVAILABLE;
    }
    snprintf(url, sizeof url, "%s/schemas/ids/%" PRIu32, reg->url, id);
    curl_easy_setopt(easy, CURLOPT_URL, url);
#if LIBCURL_VERSION_NUM >= 0x075500
    curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https");
#else
    curl_easy_setopt(easy, CURLOPT_PROTOCOLS, (long) (CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
    curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, reg->timeout_ms);
    curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS, reg->timeout_ms);
    curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(easy, CURLOPT_WRITEDATA, &body);
    curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, curl_error);
    curl_easy_setopt(easy, CURLOPT_USERAGENT, "steward/" STEWARD_VERSION);
    if (reg->ca_file != NULL)
        curl_easy_setopt(easy, CURLOPT_CAINFO, reg->ca_file);
    if (reg->username != NULL) {
        curl_easy_setopt(easy, CURLOPT_HTTPAUTH, (long) CURLAUTH_BASIC);
        curl_easy_setopt(easy, CURLOPT_USERNAME, reg->username);
        curl_easy_setopt(easy, CURLOPT_PASSWORD, reg->password != NULL ? reg->password : "");
    }
    struct curl_slist *headers =
        curl_slist_append(NULL, "Accept: application/vnd.schemaregistry.v1+json, "
                                "application/json");
    curl_easy_setopt(easy, CURLOPT_HTTPHEADER, headers);

    CURLcode rc = curl_easy_perform(easy);
    long status = 0;
    curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
    if (rc != CURLE_OK) {
        snprintf(errstr, errstr_size, "schema id %" PRIu32 ": GET %s: %s", id, url,
                 body.over               ? "the answer is over its size limit"
                 : curl_error[0] != '\0' ? curl_error
                                         : curl_easy_strerror(rc));
    } else if (status == 404) {
        snprintf(errstr, errstr_size,
                 "schema id %" PRIu32 ": the registry has no such id (GET %s: 404)", id, url);
        result = REGISTRY_NOT_FOUND;
    } else if (status != 200) {
        /* 5xx; and 401/403 too: credentials an operator fixes, meanwhile
         * the messages wait rather than be rejected. */
        snprintf(errstr, errstr_size, "schema id %" PRIu32 ": GET %s: HTTP %ld%s%.120s", id, url,
                 status, body.len > 0 ? ": " : "", body.len > 0 ? body.buf : "");
    } else {
        json_error_t jerr;
        json_t *doc = json_loadb(body.buf != NULL ? body.buf : "", body.len, 0, &jerr);
        const char *schema = json_string_value(json_object_get(doc, "schema"));
        json_t *kind = json_object_get(doc, "schemaType");
        if (schema == NULL || (kind != NULL && !json_is_string(kind))) {
            snprintf(errstr, errstr_size,
                     "schema id %" PRIu32 ": GET %s: the answer has no \"schema\" string", id, url);
        } else if (strlen(schema) > REGISTRY_MAX_SCHEMA_BYTES) {
            snprintf(errstr, errstr_size, "schema id %" PRIu32 ": the schema is over %d bytes", id,
                     REGISTRY_MAX_SCHEMA_BYTES);
        } else if ((*text = strdup(schema)) == NULL) {
            snprintf(errstr, errstr_size, "out of memory");
        } else {
            *type = type_of(json_string_value(kind));
            result = REGISTRY_FOUND;
        }
        json_decref(doc);
    }
    utf8_scrub(errstr);
    curl_slist_free_all(headers);
    curl_easy_cleanup(easy);
    free(body.buf);
    return result;
}

registry_result_t registry_lookup(registry_t *reg, uint32_t id, char **text,
                                  registry_schema_type_t *type, int *cached, char *errstr,
                                  size_t errstr_size)
{
    bool found;
    *text = NULL;
    *type = REGISTRY_AVRO;
    *cached = 0;
    pthread_mutex_lock(&reg->lock);
    size_t at = cache_find(reg, id, &found);
    if (found) {
        *type = reg->cache[at].type;
        *text = strdup(reg->cache[at].text);
    }
    pthread_mutex_unlock(&reg->lock);
    if (found) {
        *cached = 1;
        if (*text == NULL) {
            snprintf(errstr, errstr_size, "out of memory");
            return REGISTRY_UNAVAILABLE;
        }
        return REGISTRY_FOUND;
    }
    registry_result_t result = reg->url != NULL
                                   ? from_url(reg, id, text, type, errstr, errstr_size)
                                   : from_directory(reg, id, text, errstr, errstr_size);
    if (result == REGISTRY_FOUND)
        cache_put(reg, id, *type, *text);
    return result;
}
