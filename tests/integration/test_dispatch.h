/*
 * test_dispatch.h - what the dispatch suites (test_dispatch.c: delivery,
 * order and the contract on a real broker; test_dispatch_faults.c: crashes,
 * a broker that goes away, replicas) share, in test_dispatch_common.c.
 *
 * The rows are inserted as the core's batch would queue them (same
 * columns, ce_id derived the same way), so the tests see the dispatcher
 * alone. One test at a time: `dt` is that test's world.
 */
#ifndef STEWARD_TEST_DISPATCH_H
#define STEWARD_TEST_DISPATCH_H

#include "testlib.h"
#include "world.h"

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <stdbool.h>
#include <stddef.h>

#define PROCESS "dp_order"

/* The lease every test's steward runs with, and librdkafka's delivery
 * timeout unless a test sets dt.timeout_set. */
#define DT_LEASE       "2s"
#define DT_LEASE_S     2.0
#define DT_TIMEOUT_SET "dispatch.timeout=2s"

typedef struct dispatch_test {
    tw_world_t w;
    char *events_topic;
    char *defs_dir;          /* dir/defs: only definitions, as steward reads every file */
    char *config;            /* a config file a test wrote; NULL: none */
    const char *brokers;     /* NULL: the test broker */
    const char *timeout_set; /* a test may want librdkafka's wait long */
    rd_kafka_t *mock_owner;
    rd_kafka_mock_cluster_t *mock;
} dispatch_test_t;

extern dispatch_test_t dt;

/* A database, a definition (PROCESS, shadow) whose event topic exists, a
 * group. */
void dt_setup(const char *name);

/* The fixture's teardown: the world, the mock cluster, and dt reset. */
void dt_teardown(void);

/*
 * Starts steward with short delivery timeouts, leases (DT_LEASE) and
 * backoffs, batches of 50, its HTTP server on `listen` ("" for none), with
 * env (NULL: none) besides the test's. Returns its pid.
 */
int dt_spawn(const char *listen, const char *const *env);
int dt_start_on(const char *listen);
int dt_start(void);

long long dt_scalar(const char *sql);
void dt_wait_for(const char *sql, const char *expected, int timeout_s);

/*
 * Queues `n` commands per key for keys K0001..K<keys>, step by step across
 * the keys (the order a busy system would queue them), as the core does:
 * step s, attempt 0, token s, ce_id the SHA-256 of process, key, step and
 * attempt joined by \x1f.
 */
void dt_add_commands(const char *process, const char *topic, int keys, int n);

/* Inserts one command of step 1 for `key` to `topic`. */
void dt_add_one(const char *topic, const char *key);

/* ---- reading the command topic ------------------------------------------------- */

typedef struct dt_seen {
    char *key, *value, *ce_id;
    char *headers; /* "name=value\n..." in order */
    int partition;
} dt_seen_t;

typedef struct dt_seen_list {
    dt_seen_t *items;
    size_t n;
} dt_seen_list_t;

/* Every message on topic's partitions, up to their high watermarks now. */
dt_seen_list_t dt_read_topic(const char *topic, int partitions);
void dt_seen_free(dt_seen_list_t *l);

/* The ce_ids in the order a reader first sees them for `key`, joined by ','
 * (malloc'd). */
char *dt_first_seen_order(const dt_seen_list_t *l, const char *key);

/* The ce_ids of the instance's rows in queue order, joined by ','
 * (malloc'd). */
char *dt_row_order(const char *process, const char *key);

/* ---- the broker down: librdkafka's mock cluster ------------------------------------- */

/* A one-broker mock cluster the stewards of this test use, with the events
 * topic and `topic` (one partition each). */
void dt_mock_start(const char *topic);

/* A steward running against the mock cluster whose dispatcher has
 * delivered (so its producer knows the broker), then the broker down. */
int dt_start_then_cut(const char *topic);

/* Waits up to timeout_s for steward's log to hold `needle`; whether it did. */
bool dt_wait_log(const char *needle, int timeout_s);

/* Monotonic seconds. */
double dt_now_s(void);

#endif
