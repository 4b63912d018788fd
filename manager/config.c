/*
 * config - the key table, the file, the environment; see config.h.
 */
#include "manager/config.h"

#include "definitions/def.h"
#include "definitions/duration.h"

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
} config_type_t;

typedef struct config_key {
    const char *name; /* as in the file: "intake.batch_size" */
    config_type_t type;
    size_t offset;   /* into config_t */
    long min, max;   /* for CONFIG_INT; for durations, ms */
    const char *env; /* the STEWARD_* variable, or NULL */
} config_key_t;

#define OFF(field) offsetof(config_t, field)

/* One row per key. `kafka` and `routes` are objects and handled apart. */
static const config_key_t config_keys[] = {
    {"database", CONFIG_STRING, OFF(database), 0, 0, "STEWARD_DATABASE_URL"},
    {"brokers", CONFIG_STRING, OFF(brokers), 0, 0, "STEWARD_KAFKA_BROKERS"},
    {"definitions", CONFIG_STRING, OFF(definitions), 0, 0, "STEWARD_DEFINITIONS"},
    {"group", CONFIG_STRING, OFF(group), 0, 0, "STEWARD_GROUP"},
    {"replica", CONFIG_STRING, OFF(replica), 0, 0, "STEWARD_REPLICA"},
    {"log_level", CONFIG_LOG_LEVEL, OFF(log_level), 0, 0, "STEWARD_LOG_LEVEL"},
    {"intake.batch_size", CONFIG_INT, OFF(batch_size), 1, 100000, "STEWARD_BATCH_SIZE"},
    {"intake.batch_ms", CONFIG_DURATION, OFF(batch_ms), 1, 60000, "STEWARD_BATCH_MS"},
    {"intake.max_message_bytes", CONFIG_INT, OFF(max_message_bytes), 64, 100 * 1024 * 1024, NULL},
    {"intake.record_unknown", CONFIG_BOOL, OFF(record_unknown), 0, 0, NULL},
    {"intake.dead_letter_topic", CONFIG_STRING, OFF(dead_letter_topic), 0, 0, NULL},
    {"scheduler.interval", CONFIG_DURATION, OFF(scheduler_interval_ms), 10, 3600000, NULL},
    {"scheduler.grace", CONFIG_DURATION, OFF(grace_ms), 0, 86400000, NULL},
    {"scheduler.blind_after", CONFIG_DURATION, OFF(blind_after_ms), 1000, 86400000, NULL},
    {"scheduler.blind_owner", CONFIG_STRING, OFF(blind_owner), 0, 0, NULL},
    {"scheduler.unowned_after", CONFIG_DURATION, OFF(unowned_after_ms), 1000, 86400000, NULL},
    {"notifier.interval", CONFIG_DURATION, OFF(notifier_interval_ms), 10, 3600000, NULL},
    {"notifier.timeout", CONFIG_DURATION, OFF(http_timeout_ms), 100, 600000, NULL},
    {"notifier.max_backoff", CONFIG_DURATION, OFF(max_backoff_ms), 100, 86400000, NULL},
    {"notifier.max_retry_after", CONFIG_DURATION, OFF(max_retry_after_ms), 1000, 86400000, NULL},
    {"notifier.group_window", CONFIG_DURATION, OFF(group_window_ms), 0, 3600000, NULL},
    {"notifier.alertmanager_resend", CONFIG_DURATION, OFF(alertmanager_resend_ms), 1000, 3600000,
     NULL},
    {"http.listen", CONFIG_STRING, OFF(http_listen), 0, 0, "STEWARD_HTTP_LISTEN"},
    {"retention.history", CONFIG_DURATION_OFF, OFF(retention_history_ms), 3600000,
     INT64_C(3650) * 86400000, NULL},
    {"retention.rejected", CONFIG_DURATION_OFF, OFF(retention_rejected_ms), 3600000,
     INT64_C(3650) * 86400000, NULL},
    {"retention.outbox", CONFIG_DURATION_OFF, OFF(retention_outbox_ms), 3600000,
     INT64_C(3650) * 86400000, NULL},
    {"retention.alerts", CONFIG_DURATION_OFF, OFF(retention_alerts_ms), 3600000,
     INT64_C(3650) * 86400000, NULL},
    {"retention.ownership_log", CONFIG_DURATION_OFF, OFF(retention_ownership_log_ms), 3600000,
     INT64_C(3650) * 86400000, NULL},
    {"retention.interval", CONFIG_DURATION_OFF, OFF(retention_interval_ms), 1000, 86400000, NULL},
    {"http.stall_after", CONFIG_DURATION, OFF(stall_after_ms), 1000, 86400000, NULL},
};

#define N_KEYS (sizeof config_keys / sizeof config_keys[0])

static const char *const sections[] = {"intake", "scheduler", "notifier", "http", "retention"};

config_t *config_new(void)
{
    config_t *cfg = calloc(1, sizeof *cfg);
    if (cfg == NULL)
        return NULL;
    cfg->database = strdup("");
    cfg->group = strdup("steward");
    cfg->log_level = LOG_LEVEL_INFO;
    cfg->batch_size = 2000;
    cfg->batch_ms = 200;
    cfg->max_message_bytes = 1024 * 1024;
    cfg->scheduler_interval_ms = 1000;
    cfg->grace_ms = 1000;
    cfg->blind_after_ms = 120000;
    cfg->unowned_after_ms = 15000;
    cfg->blind_owner = strdup("steward");
    cfg->notifier_interval_ms = 500;
    cfg->http_timeout_ms = 10000;
    cfg->max_backoff_ms = 300000;
    cfg->max_retry_after_ms = 300000;
    cfg->group_window_ms = 30000;
    cfg->alertmanager_resend_ms = 60000;
    cfg->routes = json_pack("{s:[{s:s}]}", "default", "type", "log");
    cfg->http_listen = strdup("127.0.0.1:9464");
    cfg->retention_history_ms = 30 * 86400000LL;
    cfg->retention_rejected_ms = 14 * 86400000LL;
    cfg->retention_outbox_ms = 7 * 86400000LL;
    cfg->retention_alerts_ms = 30 * 86400000LL;
    cfg->retention_ownership_log_ms = 30 * 86400000LL;
    cfg->retention_interval_ms = 3600000;
    /* Longer than any legitimate pass: the notifier marks progress every
     * 50 ms, the scheduler between batches of due instances. */
    cfg->stall_after_ms = 300000;
    if (cfg->database == NULL || cfg->group == NULL || cfg->blind_owner == NULL ||
        cfg->routes == NULL || cfg->http_listen == NULL) {
        config_free(cfg);
        return NULL;
    }
    return cfg;
}

void config_free(config_t *cfg)
{
    if (cfg == NULL)
        return;
    for (size_t i = 0; i < N_KEYS; i++) {
        if (config_keys[i].type == CONFIG_STRING)
            free(*(char **) ((char *) cfg + config_keys[i].offset));
    }
    for (size_t i = 0; i < cfg->n_kafka_props; i++)
        free(cfg->kafka_props[i]);
    free(cfg->kafka_props);
    json_decref(cfg->routes);
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

static err_class_t set_value(config_t *cfg, const config_key_t *key, const char *value,
                             char *errstr, size_t errstr_size)
{
    void *field = (char *) cfg + key->offset;
    char why[160];

    switch (key->type) {
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
    case CONFIG_LOG_LEVEL:
        if (!log_parse_level(value, (log_level_t *) field))
            return err_set(ERR_INVALID, errstr, errstr_size,
                           "%s: '%s' is not one of debug, info, warn, error", key->name, value);
        return ERR_OK;
    }
    return ERR_FATAL;
}

err_class_t config_set(config_t *cfg, const char *name, const char *value, char *errstr,
                       size_t errstr_size)
{
    const config_key_t *key = find_key(name);
    if (key == NULL)
        return unknown_key("", name, errstr, errstr_size);
    return set_value(cfg, key, value, errstr, errstr_size);
}

err_class_t config_set_kafka(config_t *cfg, const char *name, const char *value, char *errstr,
                             size_t errstr_size)
{
    char *prop = NULL;
    size_t len = strlen(name);

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

char *config_read_secret(const char *path, char *errstr, size_t errstr_size)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        err_set(ERR_INVALID, errstr, errstr_size, "cannot read %s: %s", path, strerror(errno));
        return NULL;
    }
    char buf[4096];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        buf[--n] = '\0';
    return strdup(buf);
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
        text = config_read_secret(json_string_value(value), why, sizeof why);
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
    bool from_file = secret_file_key(full_key, name, sizeof name);
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
