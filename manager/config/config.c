/*
 * config - the key table, the file, the environment; see config.h.
 */
#include "manager/config/config.h"

#include "common/namelist.h"
#include "common/secret.h"
#include "definitions/def.h"
#include "definitions/duration.h"
#include "manager/commands/dispatcher.h"
#include "manager/api/http.h"
#include "manager/intake/intake.h"
#include "manager/timing/scheduler.h"

#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef enum config_type {
    CONFIG_STRING,
    CONFIG_INT,
    CONFIG_DURATION,
    CONFIG_LOG_LEVEL,
    CONFIG_BOOL,         /* true/false, 1/0, yes/no, on/off */
    CONFIG_DURATION_OFF, /* a duration, or "off" for 0 */
    CONFIG_TOPIC_PREFIX, /* a string of Kafka topic characters; "" for none */
    CONFIG_TOPIC_MAP,    /* "name=broker_name,..." (or an object in the file) */
    CONFIG_NAME_LIST,    /* "a,b" or "*" (or an array of strings in the file) */
    CONFIG_TRACE_LINK,   /* "" or an http(s) URL holding ${trace_id} */
} config_type_t;

typedef struct config_key {
    const char *name; /* as in the file: "intake.batch_size" */
    config_type_t type;
    size_t offset;   /* into config_t */
    long min, max;   /* for CONFIG_INT; for durations, ms */
    const char *env; /* the STEWARD_* variable, or NULL */
    bool reload;     /* SIGHUP applies a change; false: it waits for a restart */
    /* What config_new() sets, parsed as a flag's value would be; NULL
     * leaves the field empty (NULL, 0, false): required, or worked out
     * where it is used. docs/operations.md shows it in its default column. */
    const char *def;
    const char *description; /* one line; docs/operations.md says more */
} config_key_t;

#define OFF(field) offsetof(config_t, field)
#define STR_(x)    #x
#define STR(x)     STR_(x)
#define YEARS_10   (INT64_C(3650) * 86400000)

/* One row per key. `kafka` and `routes` are objects and handled apart
 * (config_objects below). */
static const config_key_t config_keys[] = {
    {"database", CONFIG_STRING, OFF(database), 0, 0, "STEWARD_DATABASE_URL", false, "",
     "libpq connection string or URI; \"\": the PG* variables"},
    {"brokers", CONFIG_STRING, OFF(brokers), 0, 0, "STEWARD_KAFKA_BROKERS", false, NULL,
     "Kafka bootstrap servers (required)"},
    {"definitions", CONFIG_STRING, OFF(definitions), 0, 0, "STEWARD_DEFINITIONS", true, NULL,
     "a definition file or a directory of *.json (required)"},
    {"group", CONFIG_STRING, OFF(group), 0, 0, "STEWARD_GROUP", false, "steward",
     "consumer group; offsets and watermarks are per group"},
    {"replica", CONFIG_STRING, OFF(replica), 0, 0, "STEWARD_REPLICA", false, NULL,
     "this process's name in history and ownership_log; unset: host-pid"},
    {"log_level", CONFIG_LOG_LEVEL, OFF(log_level), 0, 0, "STEWARD_LOG_LEVEL", false, "info",
     "debug, info, warn or error"},
    {"intake.batch_size", CONFIG_INT, OFF(batch_size), 1, 100000, "STEWARD_BATCH_SIZE", false,
     "2000", "messages per transaction, at most"},
    {"intake.batch_ms", CONFIG_DURATION, OFF(batch_ms), 1, 60000, "STEWARD_BATCH_MS", false,
     "200ms", "how long a batch gathers, at most"},
    {"intake.transactions", CONFIG_INT, OFF(transactions), 1, INTAKE_MAX_TRANSACTIONS,
     "STEWARD_INTAKE_TRANSACTIONS", false, STR(INTAKE_DEFAULT_TRANSACTIONS),
     "batch transactions in flight at once, each on its own connection"},
    {"intake.lock_timeout", CONFIG_DURATION, OFF(lock_timeout_ms), 10, 600000, NULL, false, "3s",
     "how long a batch waits for a busy instance lock before setting the instance aside"},
    {"intake.max_message_bytes", CONFIG_INT, OFF(max_message_bytes), 64, 100 * 1024 * 1024, NULL,
     false, "1048576", "larger messages are rejected (too_large)"},
    {"intake.record_unknown", CONFIG_BOOL, OFF(record_unknown), 0, 0, NULL, false, "false",
     "a rejected row (unknown_type) for events no definition declares, too"},
    {"intake.dead_letter_topic", CONFIG_STRING, OFF(dead_letter_topic), 0, 0, NULL, false, "",
     "rejected messages are also produced to this topic; \"\": off"},
    {"intake.rejection_summary", CONFIG_DURATION_OFF, OFF(rejection_summary_ms), 1000, 86400000,
     NULL, false, "1m",
     "how often the messages rejected meanwhile are summarised in the log (by reason and topic, "
     "with a sample); off: never"},
    {"topics.prefix", CONFIG_TOPIC_PREFIX, OFF(topics_prefix), 0, 0, "STEWARD_TOPICS_PREFIX", false,
     "", "put in front of every topic a definition names"},
    {"topics.map", CONFIG_TOPIC_MAP, OFF(topics_map), 0, 0, "STEWARD_TOPICS_MAP", false, "",
     "a definition's topic name -> the broker's; wins over topics.prefix"},
    {"scheduler.interval", CONFIG_DURATION, OFF(scheduler_interval_ms), 10, 3600000, NULL, false,
     "1s", "between deadline passes"},
    {"scheduler.transactions", CONFIG_INT, OFF(scheduler_transactions), 1, SCHED_MAX_TRANSACTIONS,
     NULL, false, STR(SCHED_DEFAULT_TRANSACTIONS),
     "transactions of a deadline pass in flight at once"},
    {"scheduler.grace", CONFIG_DURATION, OFF(grace_ms), 0, 86400000, NULL, false, "1s",
     "a deadline is judged this long after the watermark passes it"},
    {"scheduler.blind_after", CONFIG_DURATION, OFF(blind_after_ms), 1000, 86400000, NULL, false,
     "2m", "a partition not advanced this long opens the blind alert"},
    {"scheduler.blind_owner", CONFIG_STRING, OFF(blind_owner), 0, 0, NULL, false, "steward",
     "the team the blind alert pages"},
    {"scheduler.unowned_after", CONFIG_DURATION, OFF(unowned_after_ms), 1000, 86400000, NULL, false,
     "15s", "a partition no live replica owns this long opens the blind alert"},
    {"notifier.interval", CONFIG_DURATION, OFF(notifier_interval_ms), 10, 3600000, NULL, false,
     "500ms", "between looks at the outbox"},
    {"notifier.timeout", CONFIG_DURATION, OFF(http_timeout_ms), 100, 600000, NULL, false, "10s",
     "one HTTP attempt, at most"},
    {"notifier.max_backoff", CONFIG_DURATION, OFF(max_backoff_ms), 100, 86400000, NULL, false, "5m",
     "the longest wait between attempts"},
    {"notifier.max_retry_after", CONFIG_DURATION, OFF(max_retry_after_ms), 1000, 86400000, NULL,
     false, "5m", "the longest Retry-After a sink is obeyed for"},
    {"notifier.group_window", CONFIG_DURATION, OFF(group_window_ms), 0, 3600000, NULL, false, "30s",
     "sequence pages of one process and state within it go out as one; 0: off"},
    {"notifier.alertmanager_resend", CONFIG_DURATION, OFF(alertmanager_resend_ms), 1000, 3600000,
     NULL, false, "1m", "open alerts are re-posted to Alertmanager this often"},
    {"http.listen", CONFIG_STRING, OFF(http_listen), 0, 0, "STEWARD_HTTP_LISTEN", false,
     "127.0.0.1:9464", "the metrics and API listener; \"\": off"},
    {"http.database", CONFIG_STRING, OFF(http_database), 0, 0, NULL, false, "",
     "the HTTP reads' own connection string; \"\": database"},
    {"retention.history", CONFIG_DURATION_OFF, OFF(retention_history_ms), 3600000, YEARS_10, NULL,
     false, "30d", "history partitions whose week ended this long ago are dropped"},
    {"retention.rejected", CONFIG_DURATION_OFF, OFF(retention_rejected_ms), 3600000, YEARS_10, NULL,
     false, "14d", "rejected messages recorded this long ago are deleted"},
    {"retention.outbox", CONFIG_DURATION_OFF, OFF(retention_outbox_ms), 3600000, YEARS_10, NULL,
     false, "7d", "outbox rows and commands finished this long ago are deleted"},
    {"retention.alerts", CONFIG_DURATION_OFF, OFF(retention_alerts_ms), 3600000, YEARS_10, NULL,
     false, "30d", "alerts resolved this long ago are deleted"},
    {"retention.ownership_log", CONFIG_DURATION_OFF, OFF(retention_ownership_log_ms), 3600000,
     YEARS_10, NULL, false, "30d", "ownership log rows this old are deleted"},
    /* Off: a finished instance is what makes a late or repeated event
     * `late` rather than a new start (manager/timing/retention.h). */
    {"retention.instances", CONFIG_DURATION_OFF, OFF(retention_instances_ms), 3600000, YEARS_10,
     NULL, false, "off", "finished instances whose terminal state is this old are deleted"},
    {"retention.interval", CONFIG_DURATION_OFF, OFF(retention_interval_ms), 1000, 86400000, NULL,
     false, "1h", "between retention passes of steward run; off: only steward prune"},
    /* Longer than any legitimate pass: the notifier marks progress every
     * 50 ms, the scheduler between batches of due instances. */
    {"http.stall_after", CONFIG_DURATION, OFF(stall_after_ms), 1000, 86400000, NULL, false, "5m",
     "/healthz fails when a worker thread made no progress this long"},
    {"migrate_on_start", CONFIG_BOOL, OFF(migrate_on_start), 0, 0, "STEWARD_MIGRATE_ON_START",
     false, "true", "apply pending migrations at start; false: only check the schema's version"},
    {"roles.owner", CONFIG_STRING, OFF(roles_owner), 0, 0, NULL, false, "steward_owner",
     "the role that owns the schema"},
    {"roles.runtime", CONFIG_STRING, OFF(roles_runtime), 0, 0, NULL, false, "steward_runtime",
     "the role steward run and steward prune log in as"},
    {"roles.reader", CONFIG_STRING, OFF(roles_reader), 0, 0, NULL, false, "steward_reader",
     "the role of the read commands, dashboards and the HTTP reads"},
    {"roles.operator", CONFIG_STRING, OFF(roles_operator), 0, 0, NULL, false, "steward_operator",
     "the role of the people who act on alerts and instances"},
    /* Set as http.tokens_file, like every secret: the file's text. */
    {"http.tokens", CONFIG_STRING, OFF(http_tokens), 0, 0, NULL, true, NULL,
     "the bearer tokens of the HTTP API, one NAME SCOPE SHA256-HEX per line; unset: none"},
    {"http.allow_anonymous_read", CONFIG_BOOL, OFF(http_allow_anonymous_read), 0, 0, NULL, false,
     "false", "reads without a token on a listener that is not loopback"},
    {"http.allowed_hosts", CONFIG_NAME_LIST, OFF(http_allowed_hosts), 0, 0, NULL, false, "",
     "Host names answered besides the loopback ones; *: any"},
    {"http.connections_per_client", CONFIG_INT, OFF(http_connections_per_client), 1,
     HTTP_MAX_CONNECTIONS, NULL, false, STR(HTTP_DEFAULT_PER_CLIENT),
     "open connections one client address may hold"},
    {"dispatch.interval", CONFIG_DURATION, OFF(dispatch_interval_ms), 10, 3600000, NULL, false,
     "100ms", "between looks at the command outbox"},
    {"dispatch.timeout", CONFIG_DURATION, OFF(dispatch_timeout_ms), 1000, 900000, NULL, false,
     "30s", "one delivery of a command, at most"},
    {"dispatch.max_backoff", CONFIG_DURATION, OFF(dispatch_max_backoff_ms), 1000, 86400000, NULL,
     false, "5m", "the longest wait between attempts of a command"},
    {"dispatch.batch_size", CONFIG_INT, OFF(dispatch_batch_size), 1, 10000, NULL, false, "500",
     "commands claimed per look"},
    {"dispatch.lease", CONFIG_DURATION, OFF(dispatch_lease_ms), 1000, 300000, NULL, false, "5s",
     "how long a claim holds a command row, renewed while in flight"},
    {"dispatch.source", CONFIG_STRING, OFF(dispatch_source), 0, 0, NULL, false,
     DISPATCHER_SOURCE_DEFAULT, "the CloudEvents source of commands; ${process}: its process"},
    /* Taken up on SIGHUP even when the definitions' reload is refused. */
    {"dispatch.paused", CONFIG_NAME_LIST, OFF(dispatch_paused), 0, 0, "STEWARD_DISPATCH_PAUSED",
     true, "", "processes whose commands wait in the outbox; *: all"},
    {"schema_registry.url", CONFIG_STRING, OFF(registry_url), 0, 0, "STEWARD_SCHEMA_REGISTRY_URL",
     false, "", "the schema registry's REST API (confluent_avro topics); \"\": none"},
    {"schema_registry.username", CONFIG_STRING, OFF(registry_username), 0, 0,
     "STEWARD_SCHEMA_REGISTRY_USERNAME", false, "", "basic auth's user; \"\": no auth"},
    /* Set as schema_registry.password_file, like every secret. */
    {"schema_registry.password", CONFIG_STRING, OFF(registry_password), 0, 0, NULL, false, "",
     "basic auth's password (give it as schema_registry.password_file)"},
    {"schema_registry.ca_file", CONFIG_STRING, OFF(registry_ca_file), 0, 0, NULL, false, "",
     "the CA bundle the registry's certificate is checked with; \"\": the system's"},
    {"schema_registry.timeout", CONFIG_DURATION, OFF(registry_timeout_ms), 100, 600000, NULL, false,
     "5s", "one request to the registry, at most"},
    {"schema_registry.directory", CONFIG_STRING, OFF(registry_directory), 0, 0,
     "STEWARD_SCHEMA_REGISTRY_DIRECTORY", false, "",
     "<id>.avsc files read instead of a registry when url is \"\""},
    {"tracing.link", CONFIG_TRACE_LINK, OFF(tracing_link), 0, 0, "STEWARD_TRACING_LINK", false, "",
     "a page's link to the trace of its last event; ${trace_id}: its trace id; \"\": none"},
};

#define N_KEYS (sizeof config_keys / sizeof config_keys[0])

/* The two keys whose values are objects, parsed apart from the table. */
static const config_key_info_t config_objects[] = {
    {"kafka", "{}", NULL, false, "librdkafka properties, passed as they are"},
    {"routes", "{\"default\": [{\"type\": \"log\"}]}", NULL, true, "team to sinks"},
};

#define ROUTES_DEFAULT (config_objects[1].default_value)

static const char *const sections[] = {"intake",    "scheduler",      "notifier", "http",
                                       "retention", "topics",         "roles",    "dispatch",
                                       "tracing",   "schema_registry"};

static err_class_t set_value(config_t *cfg, const config_key_t *key, const char *value,
                             char *errstr, size_t errstr_size);

config_t *config_new(void)
{
    config_t *cfg = calloc(1, sizeof *cfg);
    if (cfg == NULL)
        return NULL;
    for (size_t i = 0; i < N_KEYS; i++) {
        char why[256];
        /* A default that does not parse is a bug in the table; the unit
         * suite builds one config to catch it. */
        if (config_keys[i].def != NULL &&
            set_value(cfg, &config_keys[i], config_keys[i].def, why, sizeof why) != ERR_OK) {
            config_free(cfg);
            return NULL;
        }
    }
    cfg->routes = json_loads(ROUTES_DEFAULT, 0, NULL);
    if (cfg->routes == NULL) {
        config_free(cfg);
        return NULL;
    }
    return cfg;
}

bool config_key_info(size_t i, config_key_info_t *info)
{
    if (i < N_KEYS) {
        const config_key_t *key = &config_keys[i];
        *info = (config_key_info_t){key->name, key->def, key->env, key->reload, key->description};
        return true;
    }
    if (i - N_KEYS < sizeof config_objects / sizeof config_objects[0]) {
        *info = config_objects[i - N_KEYS];
        return true;
    }
    return false;
}

void config_free(config_t *cfg)
{
    if (cfg == NULL)
        return;
    for (size_t i = 0; i < N_KEYS; i++) {
        if (config_keys[i].type == CONFIG_STRING || config_keys[i].type == CONFIG_TOPIC_PREFIX ||
            config_keys[i].type == CONFIG_NAME_LIST || config_keys[i].type == CONFIG_TRACE_LINK)
            free(*(char **) ((char *) cfg + config_keys[i].offset));
    }
    for (size_t i = 0; i < cfg->n_kafka_props; i++)
        free(cfg->kafka_props[i]);
    free(cfg->kafka_props);
    json_decref(cfg->routes);
    json_decref(cfg->topics_map);
    free(cfg);
}

static const config_key_t *find_key(const char *name)
{
    for (size_t i = 0; i < N_KEYS; i++) {
        if (strcmp(config_keys[i].name, name) == 0)
            return &config_keys[i];
    }
    return NULL;
}

/* "unknown key 'x' (did you mean 'y'?)" */
static err_class_t unknown_key(const char *where, const char *name, char *errstr,
                               size_t errstr_size)
{
    const char *candidates[N_KEYS + 4];
    size_t n = 0;
    for (size_t i = 0; i < N_KEYS; i++)
        candidates[n++] = config_keys[i].name;
    candidates[n++] = "kafka";
    candidates[n++] = "routes";
    const char *hint = def_suggest(name, candidates, n);
    return err_set(ERR_INVALID, errstr, errstr_size, "%s%s: unknown key%s%s%s", where, name,
                   hint ? " (did you mean '" : "", hint ? hint : "", hint ? "'?)" : "");
}

/* Kafka's topic characters, [A-Za-z0-9._-]; at most 249 of them. */
static bool topic_chars(const char *s, size_t max)
{
    if (strlen(s) > max)
        return false;
    for (const char *p = s; *p != '\0'; p++) {
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '.' || *p == '_' || *p == '-'))
            return false;
    }
    return true;
}

/* Adds name -> broker to map, checking both; ERR_INVALID names the entry. */
static err_class_t topic_map_add(json_t *map, const char *key_name, const char *name,
                                 const char *broker, char *errstr, size_t errstr_size)
{
    if (*name == '\0' || !topic_chars(name, 249) || *broker == '\0' || !topic_chars(broker, 249))
        return err_set(ERR_INVALID, errstr, errstr_size,
                       "%s: '%s' -> '%s' is not a pair of Kafka topic names (letters, digits, "
                       "'.', '_' and '-', at most 249 characters)",
                       key_name, name, broker);
    if (json_object_get(map, name) != NULL)
        return err_set(ERR_INVALID, errstr, errstr_size, "%s: topic '%s' is mapped twice", key_name,
                       name);
    const char *other;
    json_t *v;
    json_object_foreach(map, other, v)
    {
        /* Two names for one broker topic could not be told apart on the way back. */
        if (strcmp(json_string_value(v), broker) == 0)
            return err_set(ERR_INVALID, errstr, errstr_size,
                           "%s: '%s' and '%s' both map to broker topic '%s'", key_name, other, name,
                           broker);
    }
    json_object_set_new(map, name, json_string(broker));
    return ERR_OK;
}

/* "name=broker,name=broker" into a new map; NULL with the problem in errstr. */
static json_t *parse_topic_map(const char *key_name, const char *text, char *errstr,
                               size_t errstr_size)
{
    json_t *map = json_object();
    char *copy = strdup(text);
    char *save = NULL;
    if (map == NULL || copy == NULL) {
        err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
        goto fail;
    }
    for (char *pair = strtok_r(copy, ",", &save); pair != NULL; pair = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(pair, '=');
        if (eq == NULL) {
            err_set(ERR_INVALID, errstr, errstr_size,
                    "%s: '%s' is not NAME=BROKER_NAME (e.g. orders=prod.orders.v2)", key_name,
                    pair);
            goto fail;
        }
        *eq = '\0';
        if (topic_map_add(map, key_name, pair, eq + 1, errstr, errstr_size) != ERR_OK)
            goto fail;
    }
    free(copy);
    return map;

fail:
    free(copy);
    json_decref(map);
    return NULL;
}

/* topics.map given as a JSON object in the config file. */
static err_class_t set_topic_map_object(config_t *cfg, const json_t *obj, char *errstr,
                                        size_t errstr_size)
{
    json_t *map = json_object();
    const char *name;
    json_t *v;
    if (map == NULL)
        return err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
    json_object_foreach((json_t *) obj, name, v)
    {
        err_class_t cls =
            json_is_string(v)
                ? topic_map_add(map, "topics.map", name, json_string_value(v), errstr, errstr_size)
                : err_set(ERR_INVALID, errstr, errstr_size,
                          "topics.map: %s: expected the broker's topic name as a string", name);
        if (cls != ERR_OK) {
            json_decref(map);
            return cls;
        }
    }
    json_decref(cfg->topics_map);
    cfg->topics_map = map;
    return ERR_OK;
}

static err_class_t set_value(config_t *cfg, const config_key_t *key, const char *value,
                             char *errstr, size_t errstr_size)
{
    void *field = (char *) cfg + key->offset;
    char why[160];

    switch (key->type) {
    case CONFIG_TRACE_LINK:
        /* Checked here, at load: a page is no place to learn the link is broken. */
        if (*value != '\0' &&
            ((strncmp(value, "http://", 7) != 0 && strncmp(value, "https://", 8) != 0) ||
             strstr(value, "${trace_id}") == NULL || strpbrk(value, " \t\r\n\"<>") != NULL))
            return err_set(ERR_INVALID, errstr, errstr_size,
                           "%s: '%.200s' is not an http:// or https:// URL holding ${trace_id} "
                           "(e.g. https://tempo.example/trace/${trace_id}); \"\": no link",
                           key->name, value);
        /* fall through */
    case CONFIG_STRING: {
        char *copy = strdup(value);
        if (copy == NULL)
            return err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
        free(*(char **) field);
        *(char **) field = copy;
        return ERR_OK;
    }
    case CONFIG_INT: {
        char *end;
        errno = 0;
        long n = strtol(value, &end, 10);
        if (*value == '\0' || *end != '\0' || errno != 0 || n < key->min || n > key->max)
            return err_set(ERR_INVALID, errstr, errstr_size,
                           "%s: '%s' is not a whole number from %ld to %ld", key->name, value,
                           key->min, key->max);
        *(long *) field = n;
        return ERR_OK;
    }
    case CONFIG_DURATION_OFF:
        if (strcmp(value, "off") == 0) {
            *(int64_t *) field = 0;
            return ERR_OK;
        }
        /* fall through */
    case CONFIG_DURATION: {
        int64_t ms;
        if (!duration_parse(value, &ms, why, sizeof why))
            return err_set(ERR_INVALID, errstr, errstr_size, "%s: %s", key->name, why);
        if (ms < key->min || ms > key->max) {
            char lo[32], hi[32];
            return err_set(ERR_INVALID, errstr, errstr_size, "%s: '%s' is outside %s to %s%s",
                           key->name, value, duration_format(key->min, lo, sizeof lo),
                           duration_format(key->max, hi, sizeof hi),
                           key->type == CONFIG_DURATION_OFF ? " (or \"off\")" : "");
        }
        *(int64_t *) field = ms;
        return ERR_OK;
    }
    case CONFIG_BOOL:
        if (strcasecmp(value, "true") == 0 || strcmp(value, "1") == 0 ||
            strcasecmp(value, "yes") == 0 || strcasecmp(value, "on") == 0)
            *(bool *) field = true;
        else if (strcasecmp(value, "false") == 0 || strcmp(value, "0") == 0 ||
                 strcasecmp(value, "no") == 0 || strcasecmp(value, "off") == 0)
            *(bool *) field = false;
        else
            return err_set(ERR_INVALID, errstr, errstr_size, "%s: '%s' is not true or false",
                           key->name, value);
        return ERR_OK;
    case CONFIG_TOPIC_PREFIX: {
        if (!topic_chars(value, 200))
            return err_set(ERR_INVALID, errstr, errstr_size,
                           "%s: '%s' is not a topic prefix: use letters, digits, '.', '_' and "
                           "'-' (at most 200 characters)",
                           key->name, value);
        char *copy = strdup(value);
        if (copy == NULL)
            return err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
        free(*(char **) field);
        *(char **) field = copy;
        return ERR_OK;
    }
    case CONFIG_TOPIC_MAP: {
        json_t *map = parse_topic_map(key->name, value, errstr, errstr_size);
        if (map == NULL)
            return ERR_INVALID;
        json_decref(*(json_t **) field);
        *(json_t **) field = map;
        return ERR_OK;
    }
    case CONFIG_NAME_LIST: {
        char *list = namelist_normalize(value);
        if (list == NULL)
            return err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
        free(*(char **) field);
        *(char **) field = list;
        return ERR_OK;
    }
    case CONFIG_LOG_LEVEL:
        if (!log_parse_level(value, (log_level_t *) field))
            return err_set(ERR_INVALID, errstr, errstr_size,
                           "%s: '%s' is not one of debug, info, warn, error", key->name, value);
        return ERR_OK;
    }
    return ERR_FATAL;
}

static bool secret_file_key(const char *key, char *base, size_t base_size);

/* NAME_file, as in the config file: the key NAME set to the text of the
 * file `value` names (a secret), so --set takes every key the file does. */
err_class_t config_set(config_t *cfg, const char *name, const char *value, char *errstr,
                       size_t errstr_size)
{
    char base[128], why[512];
    const config_key_t *key = find_key(name);
    if (key != NULL)
        return set_value(cfg, key, value, errstr, errstr_size);
    if (!secret_file_key(name, base, sizeof base) || (key = find_key(base)) == NULL)
        return unknown_key("", name, errstr, errstr_size);
    char *text = secret_read_file(value, why, sizeof why);
    if (text == NULL)
        return err_set(ERR_INVALID, errstr, errstr_size, "%s: %s", name, why);
    err_class_t cls = set_value(cfg, key, text, errstr, errstr_size);
    free(text);
    return cls;
}

/* The librdkafka properties Steward sets itself and relies on: one taken
 * from the user would quietly change which offsets, which messages or
 * which delivery guarantee Steward works with. Aliases are listed too. */
static const struct {
    const char *name;
    const char *instead; /* what to do instead, or why it is fixed */
} kafka_owned[] = {
    {"group.id", "set the consumer group with `group` (--group, STEWARD_GROUP): Steward keys "
                 "its offsets and watermarks by it"},
    {"bootstrap.servers", "set the brokers with `brokers` (--brokers, STEWARD_KAFKA_BROKERS)"},
    {"metadata.broker.list", "set the brokers with `brokers` (--brokers, STEWARD_KAFKA_BROKERS)"},
    {"enable.auto.commit", "Steward commits offsets in PostgreSQL, with the state they produced"},
    {"auto.commit.enable", "Steward commits offsets in PostgreSQL, with the state they produced"},
    {"enable.auto.offset.store",
     "Steward commits offsets in PostgreSQL, with the state they produced"},
    {"auto.offset.reset", "a partition without an offset in PostgreSQL is read from its start"},
    {"isolation.level", "Steward reads committed messages only"},
    {"partition.assignment.strategy",
     "Steward's rebalance handling needs the eager `range` assignor"},
    {"group.protocol", "Steward's rebalance handling needs the classic group protocol"},
    {"enable.idempotence", "Steward's producers are idempotent, with acks=all"},
    {"acks", "Steward's producers are idempotent, with acks=all"},
    {"request.required.acks", "Steward's producers are idempotent, with acks=all"},
};

err_class_t config_set_kafka(config_t *cfg, const char *name, const char *value, char *errstr,
                             size_t errstr_size)
{
    char *prop = NULL;
    size_t len = strlen(name);

    for (size_t i = 0; i < sizeof kafka_owned / sizeof kafka_owned[0]; i++) {
        if (strcmp(name, kafka_owned[i].name) == 0)
            return err_set(ERR_INVALID, errstr, errstr_size,
                           "kafka.%s: Steward sets this property itself and cannot take it: %s",
                           name, kafka_owned[i].instead);
    }

    if (asprintf(&prop, "%s=%s", name, value) < 0)
        return err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
    for (size_t i = 0; i < cfg->n_kafka_props; i++) {
        if (strncmp(cfg->kafka_props[i], name, len) == 0 && cfg->kafka_props[i][len] == '=') {
            free(cfg->kafka_props[i]);
            cfg->kafka_props[i] = prop;
            return ERR_OK;
        }
    }
    char **grown = realloc(cfg->kafka_props, (cfg->n_kafka_props + 1) * sizeof *grown);
    if (grown == NULL) {
        free(prop);
        return err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
    }
    cfg->kafka_props = grown;
    cfg->kafka_props[cfg->n_kafka_props++] = prop;
    return ERR_OK;
}

/*
 * The text of a scalar config value, resolving NAME_file secrets. Returns
 * a new string, or NULL with the problem in errstr.
 */
static char *scalar_text(const char *file, const char *name, json_t *value, bool from_file,
                         char *errstr, size_t errstr_size)
{
    char *text = NULL;
    if (from_file) {
        if (!json_is_string(value)) {
            err_set(ERR_INVALID, errstr, errstr_size, "%s: %s: expected a file path", file, name);
            return NULL;
        }
        char why[512];
        text = secret_read_file(json_string_value(value), why, sizeof why);
        if (text == NULL)
            err_set(ERR_INVALID, errstr, errstr_size, "%s: %s: %s", file, name, why);
        return text;
    }
    if (json_is_string(value))
        text = strdup(json_string_value(value));
    else if (json_is_integer(value))
        (void) !asprintf(&text, "%" JSON_INTEGER_FORMAT, json_integer_value(value));
    else if (json_is_boolean(value))
        text = strdup(json_is_true(value) ? "true" : "false");
    else
        err_set(ERR_INVALID, errstr, errstr_size, "%s: %s: expected a string or a number", file,
                name);
    return text;
}

/* Splits "x_file" into "x"; returns true when the key names a secret file. */
static bool secret_file_key(const char *key, char *base, size_t base_size)
{
    size_t len = strlen(key);
    if (len > 5 && strcmp(key + len - 5, "_file") == 0 && len - 5 < base_size) {
        memcpy(base, key, len - 5);
        base[len - 5] = '\0';
        return true;
    }
    snprintf(base, base_size, "%s", key);
    return false;
}

static err_class_t load_scalar(config_t *cfg, const char *file, const char *full_key, json_t *value,
                               char *errstr, size_t errstr_size)
{
    char name[128], why[512];
    /* A key of the table that ends in _file (schema_registry.ca_file, a
     * path) is itself, not the secret of a key without the suffix. */
    bool from_file = find_key(full_key) == NULL && secret_file_key(full_key, name, sizeof name);
    if (!from_file)
        snprintf(name, sizeof name, "%s", full_key);
    const config_key_t *key = find_key(name);
    if (key == NULL)
        return unknown_key("", full_key, why, sizeof why) == ERR_INVALID
                   ? err_set(ERR_INVALID, errstr, errstr_size, "%s: %s", file, why)
                   : ERR_FATAL;
    char *text = scalar_text(file, full_key, value, from_file, errstr, errstr_size);
    if (text == NULL)
        return ERR_INVALID;
    err_class_t cls = set_value(cfg, key, text, why, sizeof why);
    free(text);
    if (cls != ERR_OK)
        err_set(cls, errstr, errstr_size, "%s: %s", file, why);
    return cls;
}

/* A list of names given as a JSON array of strings in the config file. */
static err_class_t set_name_array(config_t *cfg, const char *file, const char *name,
                                  const json_t *arr, char *errstr, size_t errstr_size)
{
    size_t i, total = 1;
    json_t *v;
    json_array_foreach(arr, i, v)
    {
        if (!json_is_string(v) || strchr(json_string_value(v), ',') != NULL)
            return err_set(ERR_INVALID, errstr, errstr_size,
                           "%s: %s[%zu]: expected a process name (or \"*\" for all)", file, name,
                           i);
        total += strlen(json_string_value(v)) + 1;
    }
    char *joined = calloc(1, total);
    if (joined == NULL)
        return err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
    json_array_foreach(arr, i, v)
    {
        if (i > 0)
            strcat(joined, ",");
        strcat(joined, json_string_value(v));
    }
    char why[512];
    err_class_t cls = config_set(cfg, name, joined, why, sizeof why);
    free(joined);
    if (cls != ERR_OK)
        err_set(cls, errstr, errstr_size, "%s: %s", file, why);
    return cls;
}

/* Reads the parsed document (NULL when it did not parse, see jerr) over
 * cfg; `path` names it in messages. Takes root. */
static err_class_t load_root(config_t *cfg, json_t *root, const json_error_t *jerr,
                             const char *path, char *errstr, size_t errstr_size)
{
    err_class_t cls = ERR_OK;
    const char *top;
    json_t *value;

    if (root == NULL)
        return err_set(ERR_INVALID, errstr, errstr_size, "%s: line %d column %d: %s", path,
                       jerr->line, jerr->column, jerr->text);
    if (!json_is_object(root)) {
        json_decref(root);
        return err_set(ERR_INVALID, errstr, errstr_size, "%s: the config must be a JSON object",
                       path);
    }
    json_object_foreach(root, top, value)
    {
        if (cls != ERR_OK)
            break;
        if (strcmp(top, "kafka") == 0) {
            if (!json_is_object(value)) {
                cls = err_set(ERR_INVALID, errstr, errstr_size,
                              "%s: kafka: expected an object of librdkafka properties", path);
                break;
            }
            const char *prop;
            json_t *pv;
            json_object_foreach(value, prop, pv)
            {
                char name[128], full[160];
                bool from_file = secret_file_key(prop, name, sizeof name);
                snprintf(full, sizeof full, "kafka.%s", prop);
                char *text = scalar_text(path, full, pv, from_file, errstr, errstr_size);
                if (text == NULL) {
                    cls = ERR_INVALID;
                    break;
                }
                cls = config_set_kafka(cfg, name, text, errstr, errstr_size);
                free(text);
                if (cls != ERR_OK)
                    break;
            }
        } else if (strcmp(top, "routes") == 0) {
            if (!json_is_object(value)) {
                cls =
                    err_set(ERR_INVALID, errstr, errstr_size,
                            "%s: routes: expected an object of team names to lists of sinks", path);
                break;
            }
            json_decref(cfg->routes);
            cfg->routes = json_incref(value);
        } else {
            bool section = false;
            for (size_t i = 0; i < sizeof sections / sizeof sections[0]; i++)
                section = section || strcmp(top, sections[i]) == 0;
            if (section) {
                if (!json_is_object(value)) {
                    cls = err_set(ERR_INVALID, errstr, errstr_size, "%s: %s: expected an object",
                                  path, top);
                    break;
                }
                const char *sub;
                json_t *sv;
                json_object_foreach(value, sub, sv)
                {
                    char full[160];
                    snprintf(full, sizeof full, "%s.%s", top, sub);
                    if (strcmp(full, "dispatch.paused") == 0 && json_is_array(sv)) {
                        if ((cls = set_name_array(cfg, path, full, sv, errstr, errstr_size)) !=
                            ERR_OK)
                            break;
                        continue;
                    }
                    if (strcmp(full, "topics.map") == 0 && json_is_object(sv)) {
                        char why[512];
                        if ((cls = set_topic_map_object(cfg, sv, why, sizeof why)) != ERR_OK) {
                            err_set(cls, errstr, errstr_size, "%s: %s", path, why);
                            break;
                        }
                        continue;
                    }
                    if ((cls = load_scalar(cfg, path, full, sv, errstr, errstr_size)) != ERR_OK)
                        break;
                }
            } else {
                cls = load_scalar(cfg, path, top, value, errstr, errstr_size);
            }
        }
    }
    json_decref(root);
    return cls;
}

err_class_t config_load_file(config_t *cfg, const char *path, char *errstr, size_t errstr_size)
{
    json_error_t jerr;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    return load_root(cfg, root, &jerr, path, errstr, errstr_size);
}

err_class_t config_load_json(config_t *cfg, const char *text, size_t len, const char *source,
                             char *errstr, size_t errstr_size)
{
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    return load_root(cfg, root, &jerr, source, errstr, errstr_size);
}

err_class_t config_apply_env(config_t *cfg, char *errstr, size_t errstr_size)
{
    for (size_t i = 0; i < N_KEYS; i++) {
        const char *value = config_keys[i].env ? getenv(config_keys[i].env) : NULL;
        if (value == NULL || *value == '\0')
            continue;
        char why[512];
        if (set_value(cfg, &config_keys[i], value, why, sizeof why) != ERR_OK)
            return err_set(ERR_INVALID, errstr, errstr_size, "%s: %s", config_keys[i].env, why);
    }
    return ERR_OK;
}

err_class_t config_check(const config_t *cfg, char *errstr, size_t errstr_size)
{
    if (cfg->brokers == NULL || *cfg->brokers == '\0')
        return err_set(ERR_INVALID, errstr, errstr_size,
                       "brokers: not set: give --brokers, STEWARD_KAFKA_BROKERS or the config's "
                       "\"brokers\"");
    if (cfg->definitions == NULL || *cfg->definitions == '\0')
        return err_set(ERR_INVALID, errstr, errstr_size,
                       "definitions: not set: give --definitions, STEWARD_DEFINITIONS or the "
                       "config's \"definitions\"");
    if (cfg->group == NULL || *cfg->group == '\0')
        return err_set(ERR_INVALID, errstr, errstr_size, "group: must not be empty");
    return ERR_OK;
}

/* Splits "name=value"; false when there is no '=' or no name. */
static bool split_setting(const char *arg, char *name, size_t name_size, const char **value)
{
    const char *eq = strchr(arg, '=');
    if (eq == NULL || (size_t) (eq - arg) >= name_size || eq == arg)
        return false;
    memcpy(name, arg, (size_t) (eq - arg));
    name[eq - arg] = '\0';
    *value = eq + 1;
    return true;
}

config_t *config_build(const char *path, const config_flag_t *flags, size_t n_flags,
                       err_class_t *cls, char *errstr, size_t errstr_size)
{
    config_t *cfg = config_new();
    *cls = cfg != NULL ? ERR_OK : err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
    if (*cls == ERR_OK && path != NULL && *path != '\0')
        *cls = config_load_file(cfg, path, errstr, errstr_size);
    if (*cls == ERR_OK)
        *cls = config_apply_env(cfg, errstr, errstr_size);
    for (size_t i = 0; i < n_flags && *cls == ERR_OK; i++) {
        char name[128];
        const char *value;
        bool kafka = strcmp(flags[i].key, "kafka") == 0;
        if (!kafka && strcmp(flags[i].key, "set") != 0)
            *cls = config_set(cfg, flags[i].key, flags[i].value, errstr, errstr_size);
        else if (!split_setting(flags[i].value, name, sizeof name, &value))
            *cls = err_set(ERR_INVALID, errstr, errstr_size, "--%s %s: expected NAME=VALUE",
                           flags[i].key, flags[i].value);
        else if (kafka)
            *cls = config_set_kafka(cfg, name, value, errstr, errstr_size);
        else
            *cls = config_set(cfg, name, value, errstr, errstr_size);
    }
    if (*cls != ERR_OK) {
        config_free(cfg);
        return NULL;
    }
    return cfg;
}

/* Whether one key's value differs between a and b. */
static bool key_differs(const config_t *a, const config_t *b, const config_key_t *key)
{
    const void *fa = (const char *) a + key->offset, *fb = (const char *) b + key->offset;
    switch (key->type) {
    case CONFIG_TOPIC_MAP:
        return !json_equal(*(json_t *const *) fa, *(json_t *const *) fb);
    case CONFIG_STRING:
    case CONFIG_TRACE_LINK:
    case CONFIG_NAME_LIST:
    case CONFIG_TOPIC_PREFIX: {
        const char *sa = *(char *const *) fa, *sb = *(char *const *) fb;
        return (sa == NULL) != (sb == NULL) || (sa != NULL && strcmp(sa, sb) != 0);
    }
    case CONFIG_INT:
        return *(const long *) fa != *(const long *) fb;
    case CONFIG_DURATION:
    case CONFIG_DURATION_OFF:
        return *(const int64_t *) fa != *(const int64_t *) fb;
    case CONFIG_BOOL:
        return *(const bool *) fa != *(const bool *) fb;
    case CONFIG_LOG_LEVEL:
        return *(const log_level_t *) fa != *(const log_level_t *) fb;
    }
    return false;
}

bool config_key_reloads(const char *name)
{
    if (strcmp(name, "routes") == 0)
        return true;
    const config_key_t *key = find_key(name);
    return key != NULL && key->reload;
}

size_t config_restart_needed(const config_t *running, const config_t *next, const char **names,
                             size_t max)
{
    size_t n = 0;
    for (size_t i = 0; i < N_KEYS; i++) {
        if (!config_keys[i].reload && key_differs(running, next, &config_keys[i])) {
            if (n < max)
                names[n] = config_keys[i].name;
            n++;
        }
    }
    bool kafka = running->n_kafka_props != next->n_kafka_props;
    for (size_t i = 0; !kafka && i < running->n_kafka_props; i++)
        kafka = strcmp(running->kafka_props[i], next->kafka_props[i]) != 0;
    if (kafka) {
        if (n < max)
            names[n] = "kafka";
        n++;
    }
    return n;
}

void config_retention(const config_t *cfg, retention_config_t *out)
{
    out->keep_ms[RETENTION_HISTORY] = cfg->retention_history_ms;
    out->keep_ms[RETENTION_REJECTED] = cfg->retention_rejected_ms;
    out->keep_ms[RETENTION_OUTBOX] = cfg->retention_outbox_ms;
    out->keep_ms[RETENTION_ALERTS] = cfg->retention_alerts_ms;
    out->keep_ms[RETENTION_OWNERSHIP_LOG] = cfg->retention_ownership_log_ms;
    out->keep_ms[RETENTION_COMMANDS] = cfg->retention_outbox_ms;
    out->keep_ms[RETENTION_INSTANCES] = cfg->retention_instances_ms;
}
