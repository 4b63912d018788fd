/*
 * world - the throwaway setting an end-to-end test runs steward in: a
 * unique topic prefix and consumer group, a fresh database (created,
 * connected, usually migrated), a scratch directory with steward's log, the
 * definition filled from a template under tests/data, and the stewards it
 * started.
 *
 * A world owns its names, its connection and the processes it spawned;
 * tw_teardown() ends what is left of them. What a suite's config holds, its
 * topics' partitions and its events stay in the suite: only the setting is
 * shared. Like testlib, everything here aborts the current test on failure,
 * with the tail of steward's log when steward's behaviour is what failed.
 */
#ifndef STEWARD_WORLD_H
#define STEWARD_WORLD_H

#include <jansson.h>
#include <libpq-fe.h>
#include <stdbool.h>

/* How many stewards one world runs at once (replicas sharing a group). */
#define TW_STEWARDS 2

typedef struct tw_world {
    char *prefix;          /* topic prefix: the unique name and a dot */
    char *group;           /* consumer group: the unique name */
    const char *db_url;    /* the world's own database, as the test's superuser */
    PGconn *conn;          /* to db_url */
    char *dir;             /* scratch directory: definitions, config.json */
    char *log;             /* dir/steward.log; every steward spawned appends to it */
    char *config;          /* dir/config.json: tw_config_write writes it, tw_spawn reads it */
    int pids[TW_STEWARDS]; /* stewards running; 0: none in that slot */
    char base[64];         /* "http://127.0.0.1:PORT" once tw_start waited for it */
} tw_world_t;

/* A NULL-terminated list of strings, for parameters and substitutions. */
#define TW_LIST(...) ((const char *const[]){__VA_ARGS__, NULL})

/*
 * Clears *w and gives it unique names after `name` (also the database's
 * suffix), a fresh database it is connected to, a scratch directory and an
 * empty log. The database is not migrated: see tw_migrate().
 */
void tw_init(tw_world_t *w, const char *name);

/* `steward migrate` on the world's database. */
void tw_migrate(const tw_world_t *w);

/* The topic `name` under the world's prefix (malloc'd; free it). */
char *tw_topic(const tw_world_t *w, const char *name);

/* Creates the topics in `names` (NULL-terminated) under the world's
 * prefix, `partitions` each, and waits until they are all there. */
void tw_create_topics(const tw_world_t *w, const char *const *names, int partitions);

/*
 * `text` with every "@P@" replaced by prefix and every token of `subs`
 * (token, value pairs ending in NULL; may be NULL) by its value, e.g.
 * TW_LIST("@D1@", "10s", "@D2@", "1h"). Returns a new string (free it).
 */
char *tw_fill(const char *text, const char *prefix, const char *const *subs);

/*
 * Reads the template at `template` (relative to the source tree), fills it
 * as tw_fill() does with the world's prefix, and writes it as dir/`file`.
 * Returns the path written (malloc'd; free it).
 */
char *tw_write_template(const tw_world_t *w, const char *template, const char *file,
                        const char *const *subs);

/*
 * A config object with what every world's config holds: brokers (the test
 * broker), database, definitions (dir/`definitions`, a file or a
 * directory), group and log_level info. Returns a new reference; the suite
 * adds its sections (json_object_update() replaces any of these).
 */
json_t *tw_config(const tw_world_t *w, const char *definitions);

/* Writes cfg (taken) as dir/config.json. */
void tw_config_write(const tw_world_t *w, json_t *cfg);

/* Starts `steward run --config dir/config.json` with `extra` arguments
 * (NULL-terminated; may be NULL) and returns its pid; the caller puts it
 * in a slot of pids to have the teardown stop it. */
int tw_spawn(const tw_world_t *w, const char *const *extra);

/* tw_spawn() into pids[0]; when `http`, waits for the listener and keeps
 * its address in base. */
void tw_start(tw_world_t *w, const char *const *extra, bool http);

/* Stops the steward in pids[0] (when there is one) with SIGTERM, waiting
 * up to timeout_s, and asserts it exited 0; the log's tail goes with the
 * failure. */
void tw_stop(tw_world_t *w, int timeout_s);

/* SIGKILLs every steward still running, closes the connection and frees
 * what the world holds, leaving it empty: for a checked fixture's
 * teardown. */
void tw_teardown(tw_world_t *w);

/*
 * Polls sql (one value; `params`, NULL-terminated, as $1...; may be NULL)
 * until it gives `expected`, for up to timeout_s; otherwise aborts with
 * `what`, the last value and the log's tail.
 */
void tw_wait(const tw_world_t *w, const char *sql, const char *const *params, const char *expected,
             int timeout_s, const char *what);

/* sql's one value, as tl_db_scalar() (malloc'd; NULL for SQL NULL). */
char *tw_scalar(const tw_world_t *w, const char *sql, const char *const *params);

/* sql's one value as a number; -1 for SQL NULL. */
long tw_scalar_long(const tw_world_t *w, const char *sql, const char *const *params);

/* Asserts that sql gives `expected` now. */
void tw_expect(const tw_world_t *w, const char *sql, const char *const *params,
               const char *expected);

#endif
