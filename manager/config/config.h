/*
 * config - the runtime configuration of `steward run`: one JSON file,
 * overridden by STEWARD_* environment variables, overridden by flags.
 *
 * Every key is a row of one table (config.c) with its type, its default,
 * its variable, whether SIGHUP reloads it and a one-line description;
 * config_new() takes its defaults from there, and the unit suite checks
 * that docs/operations.md's configuration table shows the same. A bad
 * file is refused whole, with the key and the problem named. Secrets
 * (the database password, sasl.password, routing keys, webhook URLs) may
 * come from files: any string key `NAME` may be given as `NAME_file`
 * instead, whose contents (trailing newline removed) are the value.
 */
#ifndef STEWARD_CONFIG_H
#define STEWARD_CONFIG_H

#include "common/err.h"
#include "common/log.h"
#include "manager/timing/retention.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct config {
    char *database;    /* libpq connection string */
    char *brokers;     /* Kafka bootstrap servers */
    char *definitions; /* a file or a directory */
    char *group;       /* Kafka consumer group */
    char *replica;     /* NULL: host-pid */
    log_level_t log_level;

    char **kafka_props; /* "name=value" strings for librdkafka */
    size_t n_kafka_props;

    long batch_size;
    int64_t batch_ms;
    long transactions;       /* intake transactions in flight at once */
    int64_t lock_timeout_ms; /* a busy instance lock is awaited this long, then set aside */
    long max_message_bytes;
    bool record_unknown;     /* a rejected row (unknown_type) for undeclared events too */
    char *dead_letter_topic; /* rejected messages are also produced here; NULL or "": off */
    int64_t
        rejection_summary_ms; /* how often rejected messages are summarised in the log; 0: never */

    /* How the topic names in definitions become the broker's, so that one
     * definition serves every environment: a topic named in topics_map
     * becomes its value there, any other gets topics_prefix in front
     * (def_set_map_topics()). */
    char *topics_prefix; /* NULL or "": none */
    json_t *topics_map;  /* definition's name -> broker's name; never NULL */

    int64_t scheduler_interval_ms; /* how often deadlines are looked for */
    long scheduler_transactions;   /* due-pass transactions in flight at once */
    int64_t grace_ms;              /* a deadline is judged this long after the watermark
                                      passes it, for clock skew between producers */
    int64_t blind_after_ms;        /* a partition unread this long opens a blind alert */
    char *blind_owner;             /* the team a blind alert pages */
    int64_t unowned_after_ms;      /* a partition no live replica owns this long opens it too */

    int64_t notifier_interval_ms;
    int64_t http_timeout_ms;        /* one delivery attempt, at most */
    int64_t max_backoff_ms;         /* the longest wait between attempts */
    int64_t max_retry_after_ms;     /* the longest Retry-After a sink is obeyed for */
    int64_t group_window_ms;        /* sequence pages grouped over this long; 0: off */
    int64_t alertmanager_resend_ms; /* open alerts are re-posted this often */

    json_t *routes; /* team -> list of sinks; validated by routes.c */

    char *http_listen;              /* "127.0.0.1:9464"; "" disables the HTTP server */
    char *http_database;            /* the HTTP reads' own login (a reader); "": database */
    char *http_tokens;              /* the text of http.tokens_file (http.h); NULL: none */
    bool http_allow_anonymous_read; /* reads without a token off the loopback */
    int64_t stall_after_ms;         /* /healthz: a worker thread silent this long is stuck */

    /* Host names answered besides loopback ones, "a,b" ("*": any; http.h). */
    char *http_allowed_hosts;
    long http_connections_per_client; /* open connections one address may hold */

    /* How long rows are kept (manager/timing/retention.h); 0 ("off"): forever. */
    int64_t retention_history_ms;
    int64_t retention_rejected_ms;
    int64_t retention_outbox_ms; /* delivered or failed rows */
    int64_t retention_alerts_ms; /* resolved alerts */
    int64_t retention_ownership_log_ms;
    int64_t retention_instances_ms; /* finished instances; 0 (the default): forever */
    int64_t retention_interval_ms;  /* between passes of `steward run`; 0: none */

    /* `steward run` applies pending migrations at start (true: the
     * single-user setup); false: it only checks the schema's version and
     * refuses to start on a mismatch (a runtime role that cannot migrate). */
    bool migrate_on_start;

    /* The database roles `steward migrate --create-roles` sets up. */
    char *roles_owner;
    char *roles_runtime;
    char *roles_reader;
    char *roles_operator;

    /* The command dispatcher (manager/commands/dispatcher.h). */
    int64_t dispatch_interval_ms;    /* between looks at the command outbox */
    int64_t dispatch_timeout_ms;     /* one delivery, at most */
    int64_t dispatch_max_backoff_ms; /* the longest wait between attempts of a command */
    long dispatch_batch_size;        /* commands claimed per look */
    int64_t dispatch_lease_ms;       /* a claim's hold on a row, renewed while in flight */
    char *dispatch_source;           /* ce_source; "${process}" is the process name */
    /* Processes whose commands wait in the outbox: "" none, "*" all, else
     * names separated by commas (normalized). Reloaded on SIGHUP. */
    char *dispatch_paused;

    /* W3C trace context: the link template of a page's trace
     * ("https://tempo.example/trace/${trace_id}"); "": none. */
    char *tracing_link;

    /* Where confluent_avro topics' writer schemas come from
     * (registry/registry.h): the registry's URL, else a directory of
     * <id>.avsc files; both "": none, and such a definition is refused. */
    char *registry_url;
    char *registry_username;
    char *registry_password; /* schema_registry.password_file's text */
    char *registry_ca_file;
    int64_t registry_timeout_ms;
    char *registry_directory;
} config_t;

/* A configuration holding every default; free with config_free(). */
config_t *config_new(void);
void config_free(config_t *cfg); /* NULL is a no-op */

/*
 * Reads a JSON config file over cfg. On a problem returns ERR_INVALID with
 * "FILE: key: problem" in errstr and leaves cfg partly updated (the caller
 * discards it).
 */
err_class_t config_load_file(config_t *cfg, const char *path, char *errstr, size_t errstr_size);

/* config_load_file() on a JSON text; `source` names it in messages. */
err_class_t config_load_json(config_t *cfg, const char *text, size_t len, const char *source,
                             char *errstr, size_t errstr_size);

/* Applies STEWARD_* environment variables over cfg (see docs/operations.md). */
err_class_t config_apply_env(config_t *cfg, char *errstr, size_t errstr_size);

/*
 * Sets one key from a flag or variable ("intake.batch_size", "100"),
 * parsing it as the table says; NAME_file ("http.tokens_file", a path)
 * sets NAME to that file's text, as in the config file. ERR_INVALID names
 * the key and the problem.
 */
err_class_t config_set(config_t *cfg, const char *key, const char *value, char *errstr,
                       size_t errstr_size);

/* Adds or replaces a librdkafka property. A property Steward sets itself
 * and relies on (group.id, enable.auto.commit, acks, ...) is ERR_INVALID,
 * the message naming the setting to use instead. */
err_class_t config_set_kafka(config_t *cfg, const char *name, const char *value, char *errstr,
                             size_t errstr_size);

/* A command-line setting: a config key and its value, or "kafka" or "set"
 * with NAME=VALUE (a librdkafka property, any config key). */
typedef struct config_flag {
    const char *key;
    const char *value;
} config_flag_t;

/*
 * The configuration every subcommand reads: the defaults, then the file at
 * path (NULL or "": none), the STEWARD_* environment, then the flags in
 * order. NULL on a problem, with ERR_INVALID and "where: problem" in
 * errstr, or ERR_FATAL when out of memory. No config_check(): a command
 * that needs every required key asks for it.
 */
config_t *config_build(const char *path, const config_flag_t *flags, size_t n_flags,
                       err_class_t *cls, char *errstr, size_t errstr_size);

/* Whether SIGHUP applies a change of key `name` ("definitions", "routes");
 * false for every key a running daemon only reads at start. */
bool config_key_reloads(const char *name);

/*
 * The keys (and "kafka" for librdkafka properties) whose values differ
 * between the running configuration and next but which SIGHUP does not
 * apply: they need a restart. Fills names (borrowed, static strings) with
 * up to max of them and returns how many there are.
 */
size_t config_restart_needed(const config_t *running, const config_t *next, const char **names,
                             size_t max);

/* One key as the table holds it: what docs/operations.md shows. */
typedef struct config_key_info {
    const char *name;          /* "intake.batch_size"; "kafka" and "routes" are objects */
    const char *default_value; /* as a flag gives it ("200ms", ""); NULL: none (required,
                                  or worked out where it is used, as `replica`) */
    const char *env;           /* the STEWARD_* variable; NULL: none */
    bool reload;               /* SIGHUP applies a change */
    const char *description;   /* one line */
} config_key_info_t;

/* Fills info (static strings) with the i-th key, counting from 0, and
 * returns true; false past the last. */
bool config_key_info(size_t i, config_key_info_t *info);

/* Checks what no single key can: required keys present. */
err_class_t config_check(const config_t *cfg, char *errstr, size_t errstr_size);

/* The retention.* keys: how long retention keeps each table's rows. */
void config_retention(const config_t *cfg, retention_config_t *out);

#endif
