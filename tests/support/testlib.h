/*
 * testlib - what the test suites share: running the steward binary and
 * capturing its output, scratch files, and the services scripts/test
 * started (a PostgreSQL named by STEWARD_TEST_DATABASE_URL, a Kafka broker
 * named by STEWARD_TEST_KAFKA_BROKERS).
 *
 * Everything here aborts the current test (ck_abort) on failure, so a test
 * reads as its scenario.
 */
#ifndef STEWARD_TESTLIB_H
#define STEWARD_TESTLIB_H

#include <check.h>
#include <jansson.h>
#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>

/* Declares every suite of the tier being built (its suites.h), so each
 * suite function has a prototype where it is defined. */
#define SUITE(name) Suite *name##_suite(void);
#include "suites.h"
#undef SUITE

/* What one run of a command printed and how it ended. */
typedef struct tl_output {
    int status; /* exit code; 128 + signal when killed */
    char *out;  /* stdout, NUL-terminated, owned */
    char *err;  /* stderr, NUL-terminated, owned */
} tl_output_t;

void tl_output_free(tl_output_t *o);

/*
 * Runs the steward binary with argv (argv[0] is ignored and may be NULL;
 * the list ends with NULL) and `env` (NAME=value strings added to the
 * environment, NULL-terminated, may be NULL). Blocks until it exits.
 */
tl_output_t tl_steward(const char *const *argv, const char *const *env);

/* A new private directory under $TMPDIR; the path is owned by testlib. */
const char *tl_tmpdir(void);

/* Writes `content` to dir/name and returns the path (malloc'd; free it). */
char *tl_write_file(const char *dir, const char *name, const char *content);

/* Reads a whole file (malloc'd, NUL-terminated; free it). Aborts if unreadable. */
char *tl_read_file(const char *path);

/* Prints the last `bytes` of a file to stderr (a log, before an abort:
 * check's failure messages cannot carry much). */
void tl_print_tail(const char *path, size_t bytes);

/* Waits (30 s at most) for the JSON log at log_path to say "http
 * listening" with an address, and writes "http://ADDRESS" into base;
 * aborts the test with the log's tail otherwise. */
void tl_wait_http_listening(const char *log_path, char *base, size_t size);

/* A path under the source tree (malloc'd; free it). */
char *tl_source_path(const char *relative);

typedef struct def def_t;

/* Loads the definition at `relative` (under the source tree) and returns it
 * (free with def_free()); aborts with its first problem when it is invalid. */
def_t *tl_def_load(const char *relative);

/* The broker list scripts/test started; aborts when unset. */
const char *tl_kafka_brokers(void);

/*
 * Creates a fresh, empty database for one suite, named after the run's own
 * database and `suffix`, and returns its connection string (owned by
 * testlib; valid until the process exits). scripts/test drops it at the end
 * of the run with the run's database.
 */
const char *tl_db_create(const char *suffix);

/* `steward migrate` on conninfo, aborting the test with steward's error
 * unless it exits 0. */
void tl_migrate(const char *conninfo);

/* Connects to a database, aborting the test on failure. */
PGconn *tl_db_connect(const char *conninfo);

/*
 * Runs a query with text parameters and returns the first column of the
 * first row as a new string ("" for no row, NULL for SQL NULL).
 */
char *tl_db_scalar(PGconn *conn, const char *sql, int nparams, const char *const *params);

/* Runs a statement that must succeed. */
void tl_db_exec(PGconn *conn, const char *sql);

/* ---- Kafka ---------------------------------------------------------- */

/* Creates topics with `partitions` each on the test brokers (existing ones
 * are fine) and waits until their metadata shows every partition. */
void tl_kafka_create_topics(const char *const *topics, size_t n, int partitions);

/* A unique name for this run: prefix + pid + a counter (static buffer per call
 * is not kept: the result is malloc'd; free it). */
char *tl_unique(const char *prefix);

typedef struct tl_producer tl_producer_t;

tl_producer_t *tl_producer_new(void);

/* A producer with extra librdkafka properties (name, value pairs ending in NULL). */
tl_producer_t *tl_producer_new_conf(const char *const *props);

/*
 * Produces one message to topic/partition (-1: any). value NULL is a
 * tombstone; value_len -1 means strlen(value). headers is NULL or a
 * NULL-terminated list of name, value pairs. timestamp_ms 0 lets Kafka
 * stamp it. Aborts on failure.
 */
void tl_produce(tl_producer_t *p, const char *topic, int partition, const char *value,
                long value_len, const char *const *headers, long long timestamp_ms);

/* Waits for every produced message to be acknowledged, then frees p. */
void tl_producer_free(tl_producer_t *p);

/* ---- processes and waiting ------------------------------------------ */

/*
 * Starts the steward binary in the background with argv (as tl_steward())
 * and env, its stdout and stderr appended to log_path. Returns its pid.
 * log_path NULL: stdout and stderr are a pipe whose reader is gone.
 */
int tl_steward_spawn(const char *const *argv, const char *const *env, const char *log_path);

/* Sends sig to pid and waits up to timeout_s for it; returns its exit code
 * (128 + signal when killed), or -1 when it did not exit in time (it is
 * then killed with SIGKILL). */
int tl_stop(int pid, int sig, int timeout_s);

/*
 * A condition a test waits for: returns true once it holds. It may write
 * what it saw (the value it compares, a count, a state) into seen (an empty
 * string of seen_size bytes on each call), so that a timeout can say how far
 * things got.
 */
typedef bool (*tl_pred_t)(void *arg, char *seen, size_t seen_size);

/*
 * Checks pred at once and then every 100 ms until it holds or timeout_s
 * seconds (on the monotonic clock, however long pred itself takes) have
 * passed. Returns true when it held; on timeout returns false with pred's
 * last description in seen (when seen is not NULL).
 */
bool tl_poll(tl_pred_t pred, void *arg, int timeout_s, char *seen, size_t seen_size);

/* tl_poll() checking every interval_ms: for a test that must act close to
 * the moment a condition starts to hold (a kill at a chosen point). */
bool tl_poll_every(tl_pred_t pred, void *arg, int interval_ms, int timeout_s, char *seen,
                   size_t seen_size);

/*
 * tl_poll() that aborts the test on timeout with "waited N s for WHAT; last
 * seen: ..."; when log_path is not NULL its tail is printed first.
 */
void tl_wait_until(tl_pred_t pred, void *arg, int timeout_s, const char *what,
                   const char *log_path);

/* tl_wait_until() checking every interval_ms. */
void tl_wait_every(tl_pred_t pred, void *arg, int interval_ms, int timeout_s, const char *what,
                   const char *log_path);

/* Waits until the file at path contains needle; aborts as tl_wait_until()
 * does, with the file's tail. */
void tl_wait_file(const char *path, const char *needle, int timeout_s);

/*
 * Polls `sql` (one value, text parameters) every 100 ms until it equals
 * `expected` or timeout_s passes. Returns 1 when it matched; on timeout
 * returns 0 and leaves the last value in *last when last is not NULL
 * (malloc'd; free it).
 */
int tl_db_wait(PGconn *conn, const char *sql, int nparams, const char *const *params,
               const char *expected, int timeout_s, char **last);

/*
 * Takes the advisory lock of one instance (steward.instance_lock_objid)
 * on a connection of its own, as a batch of intake holds it, and returns
 * that connection; tl_release_instance_lock() lets it go and closes it.
 * For the races of an operator action with a batch.
 */
PGconn *tl_hold_instance_lock(const char *db_url, const char *process, const char *key);
void tl_release_instance_lock(PGconn *holder, const char *process, const char *key);

/*
 * Waits (aborting after timeout_s with `what`) until exactly n sessions
 * of the test's database wait for an advisory lock: those whose
 * application_name is `application` (a steward command names itself so),
 * or all of them when it is NULL.
 */
void tl_wait_lock_waiters(PGconn *conn, const char *application, int n, int timeout_s,
                          const char *what);

/* GETs url and returns the body (malloc'd), with the status in *status. */
char *tl_http_get(const char *url, long *status);

/* Listens on 127.0.0.1 at a free port, written to *port, and returns the
 * socket (close it): a port someone else holds. */
int tl_hold_port(int *port);

/* Waits up to timeout_s until a GET of url answers `expected`; aborts
 * with the last status and body otherwise. */
void tl_wait_http_status(const char *url, long expected, int timeout_s);

/* Waits up to timeout_s until base's /metrics holds `line`; aborts with
 * the last scrape's size otherwise. */
void tl_wait_metric(const char *base, const char *line, int timeout_s);

/* The Alertmanager at `am`'s state of the alert labelled key=`key`:
 * "active", "suppressed", or "" when it does not list one (malloc'd). */
char *tl_am_state(const char *am, const char *key);

/* Waits up to timeout_s for tl_am_state() to be `expected`. */
void tl_wait_am(const char *am, const char *key, const char *expected, int timeout_s);

/* The item of a JSON array whose string `field` is `value` (borrowed, as
 * long as array lives); aborts the test when there is none. */
json_t *tl_json_find(json_t *array, const char *field, const char *value);

/* True if `needle` occurs in `haystack`. */
int tl_contains(const char *haystack, const char *needle);

#endif
