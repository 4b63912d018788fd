/*
 * routes - the team-to-sinks table; see routes.h.
 */
#include "manager/sinks/routes.h"

#include "common/log.h"
#include "common/sha256.h"
#include "definitions/def.h"
#include "common/secret.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct route {
    char *team;
    const sink_t **sinks; /* borrowed from the table's sink list */
    char **legacy;        /* "TEAM.TYPE.INDEX" of each unnamed sink, else NULL */
    size_t n;
} route_t;

struct route_table {
    sink_t *sinks;
    size_t n_sinks;
    route_t *routes;
    size_t n_routes;
    const route_t *fallback;
    pthread_mutex_t lock; /* guards warned */
    char **warned;        /* teams whose fallback was logged */
    size_t n_warned;
};

static void sink_clear(sink_t *sink)
{
    free(sink->name);
    free(sink->url);
    free(sink->routing_key);
    free(sink->severity);
    memset(sink, 0, sizeof *sink);
}

static bool same_text(const char *a, const char *b)
{
    return (a == NULL && b == NULL) || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

static bool same_sink(const sink_t *a, const sink_t *b)
{
    return a->type == b->type && same_text(a->url, b->url) &&
           same_text(a->routing_key, b->routing_key) && same_text(a->severity, b->severity);
}

void route_table_free(route_table_t *t)
{
    if (t == NULL)
        return;
    for (size_t i = 0; i < t->n_sinks; i++)
        sink_clear(&t->sinks[i]);
    for (size_t i = 0; i < t->n_routes; i++) {
        for (size_t k = 0; k < t->routes[i].n && t->routes[i].legacy != NULL; k++)
            free(t->routes[i].legacy[k]);
        free(t->routes[i].legacy);
        free(t->routes[i].team);
        free(t->routes[i].sinks);
    }
    for (size_t i = 0; i < t->n_warned; i++)
        free(t->warned[i]);
    pthread_mutex_destroy(&t->lock);
    free(t->warned);
    free(t->sinks);
    free(t->routes);
    free(t);
}

/* A string member, or its NAME_file twin read from disk; NULL when neither. */
static char *secret_member(const json_t *obj, const char *name, const char *where, bool *bad,
                           char *errstr, size_t errstr_size)
{
    char file_key[64];
    snprintf(file_key, sizeof file_key, "%s_file", name);
    json_t *value = json_object_get(obj, name), *file = json_object_get(obj, file_key);

    if (value != NULL && !json_is_string(value)) {
        *bad = true;
        err_set(ERR_INVALID, errstr, errstr_size, "%s.%s: expected a string", where, name);
        return NULL;
    }
    if (value != NULL)
        return strdup(json_string_value(value));
    if (file == NULL)
        return NULL;
    char why[512] = "expected a file path";
    char *text =
        json_is_string(file) ? secret_read_file(json_string_value(file), why, sizeof why) : NULL;
    if (text == NULL) {
        *bad = true;
        err_set(ERR_INVALID, errstr, errstr_size, "%s.%s: %s", where, file_key, why);
    }
    return text;
}

/* Whether url is http:// or https:// (any case, as libcurl takes it)
 * followed by a host. */
static bool http_url(const char *url)
{
    size_t scheme = strncasecmp(url, "http://", 7) == 0    ? 7
                    : strncasecmp(url, "https://", 8) == 0 ? 8
                                                           : 0;
    return scheme > 0 && url[scheme] != '\0' && url[scheme] != '/';
}

static bool parse_sink(sink_t *sink, const json_t *obj, const char *team, size_t idx, char *errstr,
                       size_t errstr_size)
{
    static const char *const allowed[] = {
        "type", "name", "url", "url_file", "routing_key", "routing_key_file", "severity"};
    char where[160];
    const char *key;
    json_t *value;
    bool bad = false;

    snprintf(where, sizeof where, "routes.%s[%zu]", team, idx);
    if (!json_is_object(obj)) {
        err_set(ERR_INVALID, errstr, errstr_size, "%s: expected an object with a \"type\"", where);
        return false;
    }
    json_object_foreach((json_t *) obj, key, value)
    {
        bool known = false;
        for (size_t i = 0; i < sizeof allowed / sizeof allowed[0]; i++)
            known = known || strcmp(key, allowed[i]) == 0;
        if (!known) {
            const char *hint = def_suggest(key, allowed, sizeof allowed / sizeof allowed[0]);
            err_set(ERR_INVALID, errstr, errstr_size, "%s.%s: unknown key%s%s%s", where, key,
                    hint ? " (did you mean '" : "", hint ? hint : "", hint ? "'?)" : "");
            return false;
        }
    }
    const char *type = json_string_value(json_object_get(obj, "type"));
    sink->type = sink_type_from_name(type);
    if (sink->type == SINK_N_TYPES) {
        char types[256];
        err_set(ERR_INVALID, errstr, errstr_size, "%s.type: %s%s%s: expected %s", where,
                type ? "'" : "missing", type ? type : "", type ? "'" : "",
                sink_type_list(types, sizeof types));
        return false;
    }

    json_t *name_value = json_object_get(obj, "name");
    const char *name = json_string_value(name_value);
    if (name_value != NULL) {
        size_t len = name != NULL ? strlen(name) : 0;
        if (name == NULL || len == 0 || len > ROUTE_NAME_MAX ||
            strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") !=
                len) {
            err_set(ERR_INVALID, errstr, errstr_size,
                    "%s.name: expected 1 to %d letters, digits, '.', '_' or '-'", where,
                    ROUTE_NAME_MAX);
            return false;
        }
        sink->name = strdup(name);
    }
    sink->url = secret_member(obj, "url", where, &bad, errstr, errstr_size);
    if (!bad)
        sink->routing_key = secret_member(obj, "routing_key", where, &bad, errstr, errstr_size);
    const char *severity = json_string_value(json_object_get(obj, "severity"));
    sink->severity = strdup(severity != NULL ? severity : "error");
    if (bad)
        return false;
    if (sink->name == NULL) {
        /* Derived from what the sink is, never from where it is listed, so
         * adding or moving a sink leaves the others' names (and the outbox
         * rows that name them) alone. The secrets enter only the hash. */
        char *what = NULL, hex[SHA256_HEX_SIZE];
        if (asprintf(&what, "%s\n%s\n%s\n%s", type, sink->url ? sink->url : "",
                     sink->routing_key ? sink->routing_key : "",
                     sink->severity ? sink->severity : "") < 0)
            return false;
        sha256_hex(what, strlen(what), hex);
        free(what);
        if (asprintf(&sink->name, "%s-%.12s", type, hex) < 0)
            sink->name = NULL;
    }

    /* Whatever the sink, its URL is something to POST to: a file:// or
     * other scheme would have libcurl read or write where it points. The
     * URL may be a secret, so the message does not repeat it. */
    if (sink->url != NULL && !http_url(sink->url)) {
        err_set(ERR_INVALID, errstr, errstr_size,
                "%s.url: expected an http:// or https:// URL with a host", where);
        return false;
    }
    if (!sink_ops(sink->type)->validate(sink, where, errstr, errstr_size))
        return false;
    static const char *const severities[] = {"critical", "error", "warning", "info"};
    bool known_severity = false;
    for (size_t i = 0; i < sizeof severities / sizeof severities[0]; i++)
        known_severity = known_severity || strcmp(sink->severity, severities[i]) == 0;
    if (!known_severity) {
        err_set(ERR_INVALID, errstr, errstr_size,
                "%s.severity: '%s': expected critical, error, warning or info", where,
                sink->severity);
        return false;
    }
    return sink->name != NULL;
}

route_table_t *route_table_new(const json_t *routes, char *errstr, size_t errstr_size)
{
    route_table_t *t = calloc(1, sizeof *t);
    const char *team;
    json_t *list;
    size_t total = 0;

    if (t == NULL)
        return NULL;
    pthread_mutex_init(&t->lock, NULL);
    if (!json_is_object(routes)) {
        err_set(ERR_INVALID, errstr, errstr_size, "routes: expected an object");
        goto fail;
    }
    json_object_foreach((json_t *) routes, team, list)
    {
        if (!json_is_array(list) || json_array_size(list) == 0) {
            err_set(ERR_INVALID, errstr, errstr_size,
                    "routes.%s: expected a non-empty list of sinks", team);
            goto fail;
        }
        total += json_array_size(list);
    }
    if (json_object_get(routes, "default") == NULL) {
        err_set(ERR_INVALID, errstr, errstr_size,
                "routes.default: missing: teams without a route of their own need it");
        goto fail;
    }
    t->sinks = calloc(total, sizeof *t->sinks);
    t->routes = calloc(json_object_size(routes), sizeof *t->routes);
    if (t->sinks == NULL || t->routes == NULL)
        goto fail;
    json_object_foreach((json_t *) routes, team, list)
    {
        route_t *r = &t->routes[t->n_routes++];
        r->team = strdup(team);
        r->sinks = calloc(json_array_size(list), sizeof *r->sinks);
        r->legacy = calloc(json_array_size(list), sizeof *r->legacy);
        if (r->team == NULL || r->sinks == NULL || r->legacy == NULL)
            goto fail;
        size_t i;
        json_t *entry;
        json_array_foreach(list, i, entry)
        {
            sink_t *sink = &t->sinks[t->n_sinks++];
            if (!parse_sink(sink, entry, team, i, errstr, errstr_size))
                goto fail;
            /* One name, one sink: the same sink listed for several teams is
             * shared; a name given to two different sinks is refused. */
            for (size_t k = 0; k + 1 < t->n_sinks; k++) {
                if (strcmp(t->sinks[k].name, sink->name) != 0)
                    continue;
                if (!same_sink(&t->sinks[k], sink)) {
                    err_set(ERR_INVALID, errstr, errstr_size,
                            "routes.%s[%zu].name: '%s' names another sink too; names must be "
                            "unique",
                            team, i, sink->name);
                    goto fail;
                }
                for (size_t j = 0; j < r->n; j++) {
                    if (r->sinks[j] == &t->sinks[k]) {
                        err_set(ERR_INVALID, errstr, errstr_size,
                                "routes.%s[%zu]: the same sink ('%s') is listed twice; each "
                                "page would be sent twice",
                                team, i, sink->name);
                        goto fail;
                    }
                }
                sink_clear(sink);
                t->n_sinks--;
                sink = &t->sinks[k];
                break;
            }
            /* The name an unnamed sink had before names were derived, so
             * pages queued by an older Steward still find their sink. */
            if (json_object_get(entry, "name") == NULL &&
                asprintf(&r->legacy[r->n], "%s.%s.%zu", team, sink_type_name(sink->type), i) < 0)
                r->legacy[r->n] = NULL;
            r->sinks[r->n++] = sink;
        }
        if (strcmp(team, "default") == 0)
            t->fallback = r;
    }
    return t;

fail:
    route_table_free(t);
    return NULL;
}

const sink_t *const *route_sinks(route_table_t *t, const char *team, size_t *n)
{
    for (size_t i = 0; i < t->n_routes; i++) {
        if (strcmp(t->routes[i].team, team) == 0) {
            *n = t->routes[i].n;
            return t->routes[i].sinks;
        }
    }
    bool first = true;
    pthread_mutex_lock(&t->lock);
    for (size_t i = 0; i < t->n_warned && first; i++)
        first = strcmp(t->warned[i], team) != 0;
    if (first) {
        char **grown = realloc(t->warned, (t->n_warned + 1) * sizeof *grown);
        if (grown != NULL) {
            t->warned = grown;
            t->warned[t->n_warned++] = strdup(team);
        }
    }
    pthread_mutex_unlock(&t->lock);
    if (first)
        LOG_WARN("team has no route of its own; paging it through the default route", "team", team);
    *n = t->fallback->n;
    return t->fallback->sinks;
}

const sink_t *route_find_sink(const route_table_t *t, const char *name)
{
    for (size_t i = 0; i < t->n_sinks; i++) {
        if (strcmp(t->sinks[i].name, name) == 0)
            return &t->sinks[i];
    }
    for (size_t i = 0; i < t->n_routes; i++) {
        for (size_t k = 0; k < t->routes[i].n; k++) {
            if (t->routes[i].legacy[k] != NULL && strcmp(t->routes[i].legacy[k], name) == 0)
                return t->routes[i].sinks[k];
        }
    }
    return NULL;
}

const sink_t *route_sink_at(const route_table_t *t, size_t i)
{
    return i < t->n_sinks ? &t->sinks[i] : NULL;
}

size_t route_sink_count(const route_table_t *t)
{
    return t->n_sinks;
}
