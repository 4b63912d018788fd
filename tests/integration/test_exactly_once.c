/*
 * test_exactly_once - every message changes state exactly once, whatever
 * happens to the process consuming it:
 *
 *   crash     SIGKILL steward at random points while it consumes; the state
 *             it ends with, two transactions in flight, equals an
 *             uninterrupted run's with one at a time, row for row
 *   fencing   two replicas in one group, one leaving and coming back
 *             mid-stream: each offset judged once, claims and releases logged
 *   zombie    a replica whose partition was claimed by another since
 *             cannot commit a batch for it (the epoch fence)
 *
 * The workload puts all of an instance's events on one topic, keyed to one
 * partition, so its order, and so every outcome, is the same in every run.
 */
#include "manager/intake/batch.h"
#include "manager/intake/store.h"
#include "schema/migrate.h"
#include "testlib.h"

#include <check.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PARTITIONS 4

static const char definition_template[] =
    "{\"process\":\"eo_order\",\"version\":1,\"mode\":\"shadow\",\"owner\":\"fulfilment\","
    "\"key\":\"/order_id\",\"deadline\":\"10d\",\"reorder_window\":\"1h\","
    "\"events\":{\"OrderPlaced\":{\"topic\":\"%1$s\",\"capture\":{\"total\":\"/total\"}},"
    "\"PaymentCaptured\":{\"topic\":\"%1$s\"},\"PaymentDeclined\":{\"topic\":\"%1$s\"},"
    "\"StockReserved\":{\"topic\":\"%1$s\"},\"ShipmentDispatched\":{\"topic\":\"%1$s\"}},"
    "\"start\":{\"on\":\"OrderPlaced\",\"to\":\"awaiting_payment\"},"
    "\"states\":{"
    "\"awaiting_payment\":{\"deadline\":\"15m\",\"on\":{\"PaymentCaptured\":\"awaiting_stock\","
    "\"PaymentDeclined\":\"cancelled\"}},"
    "\"awaiting_stock\":{\"deadline\":\"1h\",\"on\":{\"StockReserved\":\"awaiting_dispatch\"}},"
    "\"awaiting_dispatch\":{\"deadline\":\"2d\",\"on\":{\"ShipmentDispatched\":\"completed\"}},"
    "\"completed\":{\"terminal\":\"success\"},\"cancelled\":{\"terminal\":\"cancelled\"}}}";

typedef struct workload {
    char *topic;
    char *defs_dir;
    long messages;
} workload_t;

/*
 * Five events per instance, in one of five shapes (a duplicate, a step
 * before its predecessor, a late event, an unexpected one), produced step
 * by step across all instances.
 */
static workload_t make_workload(int instances, bool produce);
static void produce_workload(workload_t *w, int instances);

static workload_t make_workload(int instances, bool produce)
{
    workload_t w = {0};
    w.topic = tl_unique("eo.events.");
    const char *topics[1] = {w.topic};
    tl_kafka_create_topics(topics, 1, PARTITIONS);

    char definition[4096];
    snprintf(definition, sizeof definition, definition_template, w.topic);
    w.defs_dir = strdup(tl_tmpdir());
    free(tl_write_file(w.defs_dir, "eo_order.json", definition));
    if (produce)
        produce_workload(&w, instances);
    return w;
}

static void produce_workload(workload_t *w, int instances)
{
    static const char *const shapes[5][5] = {
        {"OrderPlaced", "PaymentCaptured", "StockReserved", "ShipmentDispatched",
         "PaymentCaptured"},
        {"OrderPlaced", "StockReserved", "PaymentCaptured", "ShipmentDispatched",
         "PaymentDeclined"},
        {"OrderPlaced", "PaymentCaptured", "PaymentCaptured", "StockReserved",
         "ShipmentDispatched"},
        {"OrderPlaced", "PaymentDeclined", "PaymentCaptured", "StockReserved",
         "ShipmentDispatched"},
        {"OrderPlaced", "PaymentCaptured", "StockReserved", "PaymentDeclined",
         "ShipmentDispatched"},
    };
    tl_producer_t *p = tl_producer_new();
    for (int step = 0; step < 5; step++) {
        for (int i = 0; i < instances; i++) {
            const char *type = shapes[i % 5][step];
            char value[256], id[32];
            /* A repeat of the same type in one shape is the same event (a duplicate). */
            int first = step;
            for (int s = 0; s < step; s++) {
                if (strcmp(shapes[i % 5][s], type) == 0) {
                    first = s;
                    break;
                }
            }
            snprintf(id, sizeof id, "K%05d-%d", i, first);
            snprintf(value, sizeof value,
                     "{\"type\":\"%s\",\"id\":\"%s\",\"order_id\":\"K%05d\",\"total\":%d}", type,
                     id, i, i);
            tl_produce(p, w->topic, i % PARTITIONS, value, -1, NULL, 0);
            w->messages++;
        }
    }
    tl_producer_free(p);
}

static void workload_free(workload_t *w)
{
    free(w->topic);
    free(w->defs_dir);
}

static const char committed_sql[] = "SELECT coalesce(sum(next_offset), 0) FROM steward.offsets "
                                    "WHERE consumer_group = $1 AND next_offset >= 0";

static long committed(PGconn *conn, const char *group)
{
    const char *params[1] = {group};
    char *value = tl_db_scalar(conn, committed_sql, 1, params);
    long n = atol(value);
    free(value);
    return n;
}

/* What committed_reaches() waits for: `group`'s committed count at least
 * `at_least`; the count last read is kept in `seen_count`. */
typedef struct commit_wait {
    PGconn *conn;
    const char *group;
    long at_least, seen_count;
} commit_wait_t;

static bool committed_reaches(void *arg, char *seen, size_t seen_size)
{
    commit_wait_t *c = arg;
    c->seen_count = committed(c->conn, c->group);
    snprintf(seen, seen_size, "%ld committed", c->seen_count);
    return c->seen_count >= c->at_least;
}

/* Waits (checking every 10 ms, so a kill lands close to the point) until
 * `group` has committed `at_least` offsets; returns the count seen then.
 * Aborts the test, with the log's tail, after 300 s. */
static long wait_committed(PGconn *conn, const char *group, long at_least, const char *log)
{
    commit_wait_t c = {conn, group, at_least, 0};
    tl_wait_every(committed_reaches, &c, 10, 300, "the committed offsets to reach the point", log);
    return c.seen_count;
}

/* `transactions`: intake.transactions, or NULL for the default (more than
 * one in flight, each over its share of the partitions). */
static int start_with(const char *url, const char *group, const workload_t *w, const char *log,
                      const char *transactions)
{
    /* A SIGKILLed member stays in the group until its session times out:
     * the broker's minimum keeps each restart's rebalance short. */
    const char *argv[] = {
        NULL, "run", "--brokers", tl_kafka_brokers(), "--database", url, "--definitions",
        w->defs_dir, "--group", group, "--batch-size", "100", "--batch-ms", "20", "--kafka",
        "session.timeout.ms=6000", "--kafka", "heartbeat.interval.ms=1000",
        /* Replicas share this machine: no HTTP port to fight over. */
        "--set", "http.listen=", transactions != NULL ? "--set" : NULL, transactions, NULL};
    return tl_steward_spawn(argv, NULL, log);
}

static int start(const char *url, const char *group, const workload_t *w, const char *log)
{
    return start_with(url, group, w, log, NULL);
}

static void wait_all(PGconn *conn, const char *group, long total, const char *log)
{
    char expected[32], *last = NULL;
    const char *params[1] = {group};
    snprintf(expected, sizeof expected, "%ld", total);
    if (!tl_db_wait(conn, committed_sql, 1, params, expected, 180, &last)) {
        tl_print_tail(log, 6000);
        ck_abort_msg("committed %s of %s (steward's log above)", last, expected);
    }
}

/* The state as a digest of rows, without processing times or who wrote them. */
static char *digest(PGconn *conn, const char *table)
{
    const char *sql =
        strcmp(table, "instances") == 0
            ? "SELECT count(*) || ' ' || md5(coalesce(string_agg(r, E'\\n' ORDER BY r), '')) FROM "
              "(SELECT concat_ws('|', process, key, version, state, status, started_at, "
              "state_entered_at, deadline_at, process_deadline_at, next_deadline_at, overdue, "
              "attempt, vars::text, events_applied) AS r FROM steward.instances) s"
            : "SELECT count(*) || ' ' || md5(coalesce(string_agg(r, E'\\n' ORDER BY r), '')) FROM "
              "(SELECT concat_ws('|', process, key, version, event_id, event_type, topic, "
              "partition, \"offset\", event_time, from_state, to_state, outcome, replayed, "
              "detail) AS r FROM steward.history) s";
    return tl_db_scalar(conn, sql, 0, NULL);
}

static long judged_twice(PGconn *conn)
{
    char *n = tl_db_scalar(conn,
                           "SELECT count(*) FROM (SELECT process, topic, partition, \"offset\" "
                           "FROM steward.history WHERE NOT replayed "
                           "GROUP BY 1, 2, 3, 4 HAVING count(*) > 1) s",
                           0, NULL);
    long v = atol(n);
    free(n);
    return v;
}

/* One uninterrupted run over the workload, one transaction at a time: the
 * reference a disturbed run, with its transactions side by side, must
 * equal. Returns a connection to its database (PQfinish it). */
static PGconn *reference_run(const workload_t *w, const char *suffix, const char *log)
{
    char *url = strdup(tl_db_create(suffix));
    char *group = tl_unique("ref");
    tl_migrate(url);
    PGconn *ref = tl_db_connect(url);
    int pid = start_with(url, group, w, log, "intake.transactions=1");
    wait_all(ref, group, w->messages, log);
    ck_assert_int_eq(tl_stop(pid, SIGTERM, 30), 0);
    free(url);
    free(group);
    return ref;
}

/* Instances and history equal the reference's row for row, and no offset
 * was judged twice. */
static void assert_same_as_reference(PGconn *ref, PGconn *conn, const char *label)
{
    char *ref_instances = digest(ref, "instances"), *got_instances = digest(conn, "instances");
    char *ref_history = digest(ref, "history"), *got_history = digest(conn, "history");
    printf("%s: instances %s / %s, history %s / %s\n", label, ref_instances, got_instances,
           ref_history, got_history);
    ck_assert_str_eq(got_instances, ref_instances);
    ck_assert_str_eq(got_history, ref_history);
    ck_assert_int_eq(judged_twice(conn), 0);
    free(ref_instances);
    free(got_instances);
    free(ref_history);
    free(got_history);
}

START_TEST(crash_at_random_points_loses_and_repeats_nothing)
{
    workload_t w = make_workload(4000, true);
    ck_assert_int_eq(w.messages, 20000);
    const char *log = tl_write_file(tl_tmpdir(), "crash.log", "");

    /* The reference: one uninterrupted run. */
    PGconn *ref = reference_run(&w, "eo_reference", log);
    int pid;

    /* The same input, SIGKILLed three times at random points. */
    char *url = strdup(tl_db_create("eo_crash"));
    char *group = tl_unique("crash");
    tl_migrate(url);
    PGconn *conn = tl_db_connect(url);
    unsigned seed = (unsigned) time(NULL);
    srand(seed);
    long points[3] = {2000 + rand() % 4000, 8000 + rand() % 4000, 14000 + rand() % 4000};
    printf("crash: seed %u, kill points %ld %ld %ld\n", seed, points[0], points[1], points[2]);
    for (int k = 0; k < 3; k++) {
        pid = start(url, group, &w, log);
        long at = wait_committed(conn, group, points[k], log);
        ck_assert_int_eq(tl_stop(pid, SIGKILL, 10), 128 + SIGKILL);
        printf("crash: killed at %ld committed\n", at);
        ck_assert_msg(at < w.messages, "the kill came after the end (%ld): no crash tested", at);
    }
    pid = start(url, group, &w, log);
    wait_all(conn, group, w.messages, log);
    ck_assert_int_eq(tl_stop(pid, SIGTERM, 30), 0);

    assert_same_as_reference(ref, conn, "crash");
    char *counts = tl_db_scalar(conn,
                                "SELECT (SELECT count(*) FROM steward.instances) || ' ' || "
                                "(SELECT count(*) FROM steward.history)",
                                0, NULL);
    /* 4,000 instances; 20,000 judgements plus the 800 parked events replayed. */
    ck_assert_str_eq(counts, "4000 20800");
    free(counts);

    /* Four claims per start (one per partition), each with a higher epoch. */
    char *claims = tl_db_scalar(conn,
                                "SELECT count(*) || ' ' || max(epoch) FROM steward.ownership_log "
                                "WHERE action = 'claim'",
                                0, NULL);
    ck_assert_str_eq(claims, "16 4");

    free(claims);
    PQfinish(ref);
    PQfinish(conn);
    free(url);
    free(group);
    workload_free(&w);
}
END_TEST

START_TEST(sigterm_mid_stream_loses_nothing)
{
    workload_t w = make_workload(2000, true);
    const char *log = tl_write_file(tl_tmpdir(), "sigterm.log", "");

    PGconn *ref = reference_run(&w, "eo_term_reference", log);
    int pid;

    /* Stopped cleanly mid-stream: exit 0, the batch in hand committed or
     * rolled back, then a restart finishes the work. */
    char *url = strdup(tl_db_create("eo_term"));
    char *group = tl_unique("term");
    tl_migrate(url);
    PGconn *conn = tl_db_connect(url);
    pid = start(url, group, &w, log);
    long at = wait_committed(conn, group, 3000, log);
    ck_assert_int_eq(tl_stop(pid, SIGTERM, 30), 0);
    long after = committed(conn, group);
    printf("sigterm: stopped at %ld committed (%ld when signalled)\n", after, at);
    ck_assert_msg(after < w.messages, "the stop came after the end: nothing tested");
    const char *params[1] = {group};
    char *released = tl_db_scalar(conn,
                                  "SELECT count(*) FROM steward.ownership_log WHERE "
                                  "consumer_group = $1 AND action = 'release'",
                                  1, params);
    ck_assert_int_eq(atoi(released), PARTITIONS);
    free(released);
    pid = start(url, group, &w, log);
    wait_all(conn, group, w.messages, log);
    ck_assert_int_eq(tl_stop(pid, SIGTERM, 30), 0);

    assert_same_as_reference(ref, conn, "sigterm");
    PQfinish(ref);
    PQfinish(conn);
    free(url);
    free(group);
    workload_free(&w);
}
END_TEST

START_TEST(replicas_share_a_group_and_judge_each_offset_once)
{
    workload_t w = make_workload(2000, false);
    const char *log = tl_write_file(tl_tmpdir(), "fencing.log", "");
    char *url = strdup(tl_db_create("eo_fencing"));
    char *group = tl_unique("fence");
    tl_migrate(url);
    PGconn *conn = tl_db_connect(url);

    /* Both replicas hold partitions before the first event is produced. */
    int a = start(url, group, &w, log);
    int b = start(url, group, &w, log);
    const char *params[1] = {group};
    if (!tl_db_wait(conn,
                    "SELECT count(DISTINCT owner) FROM steward.offsets "
                    "WHERE consumer_group = $1",
                    1, params, "2", 120, NULL)) {
        tl_print_tail(log, 8000);
        ck_abort_msg("the two replicas did not share the partitions within 120 s (log above)");
    }
    produce_workload(&w, 2000);
    wait_committed(conn, group, 2500, log);
    /* B leaves mid-stream: A takes its partitions; then B comes back. */
    ck_assert_int_eq(tl_stop(b, SIGTERM, 30), 0);
    long at_leave = committed(conn, group);
    wait_committed(conn, group, at_leave + 1500 < w.messages ? at_leave + 1500 : w.messages, log);
    b = start(url, group, &w, log);
    wait_all(conn, group, w.messages, log);
    ck_assert_int_eq(tl_stop(a, SIGTERM, 30), 0);
    ck_assert_int_eq(tl_stop(b, SIGTERM, 30), 0);

    ck_assert_int_eq(judged_twice(conn), 0);
    char *judged = tl_db_scalar(conn,
                                "SELECT count(DISTINCT (topic, partition, \"offset\")) FROM "
                                "steward.history WHERE NOT replayed",
                                0, NULL);
    ck_assert_int_eq(atol(judged), w.messages);
    free(judged);
    char *states = tl_db_scalar(conn,
                                "SELECT string_agg(state || '=' || n, ' ' ORDER BY state) FROM "
                                "(SELECT state, count(*) AS n FROM steward.instances GROUP BY 1) s",
                                0, NULL);
    ck_assert_str_eq(states, "cancelled=400 completed=1600");
    free(states);

    /* Three replicas claimed (A, B, B again); B's first life released. */
    char *claimers = tl_db_scalar(conn,
                                  "SELECT count(DISTINCT replica) FROM steward.ownership_log "
                                  "WHERE action = 'claim'",
                                  0, NULL);
    ck_assert_str_eq(claimers, "3");
    char *releases = tl_db_scalar(conn,
                                  "SELECT count(*) > 0 FROM steward.ownership_log "
                                  "WHERE action = 'release'",
                                  0, NULL);
    ck_assert_str_eq(releases, "t");
    /* Epochs only grow: every claim of a partition outranks the one before. */
    char *monotonic = tl_db_scalar(conn,
                                   "SELECT bool_and(epoch > prev) FROM (SELECT epoch, lag(epoch) "
                                   "OVER (PARTITION BY topic, partition ORDER BY id) AS prev FROM "
                                   "steward.ownership_log WHERE action = 'claim') s "
                                   "WHERE prev IS NOT NULL",
                                   0, NULL);
    ck_assert_str_eq(monotonic, "t");
    free(claimers);
    free(releases);
    free(monotonic);
    PQfinish(conn);
    free(url);
    free(group);
    workload_free(&w);
}
END_TEST

START_TEST(zombie_replica_is_fenced)
{
    const char *url = tl_db_create("eo_zombie");
    tl_migrate(url);
    char definition[4096], errstr[512];
    snprintf(definition, sizeof definition, definition_template, "zombie.events");
    def_problems_t problems = {0};
    def_t *def = def_load_json(definition, strlen(definition), "zombie", &problems);
    ck_assert_ptr_nonnull(def);
    def_set_t set = {&def, 1};

    store_config_t cfg_a = {url, "zgroup", "replica-a"};
    store_config_t cfg_b = {url, "zgroup", "replica-b"};
    store_t *a = store_new(&cfg_a, errstr, sizeof errstr);
    store_t *b = store_new(&cfg_b, errstr, sizeof errstr);
    ck_assert_msg(a != NULL && b != NULL, "store_new: %s", errstr);
    batch_config_t bcfg = {.limits = {4096, 16}};
    batch_ctx_t *batch_a = batch_ctx_new(&bcfg, a, &set);
    batch_ctx_t *batch_b = batch_ctx_new(&bcfg, b, &set);
    ck_assert(batch_a != NULL && batch_b != NULL);
    ck_assert_int_eq(store_register_definitions(a, &set, errstr, sizeof errstr), ERR_OK);

    store_partition_t part_a = {.topic = "zombie.events", .partition = 0};
    ck_assert_int_eq(store_claim(a, &part_a, 1, errstr, sizeof errstr), ERR_OK);
    ck_assert_int_eq(part_a.epoch, 1);
    ck_assert_int_eq(part_a.next_offset, STORE_OFFSET_BEGINNING);
    store_partition_t part_b = part_a;
    ck_assert_int_eq(store_claim(b, &part_b, 1, errstr, sizeof errstr), ERR_OK);
    ck_assert_int_eq(part_b.epoch, 2);

    const char *value = "{\"type\":\"OrderPlaced\",\"id\":\"z1\",\"order_id\":\"Z\"}";
    decode_input_t msg = {.topic = "zombie.events",
                          .partition = 0,
                          .offset = 0,
                          .value = value,
                          .value_len = strlen(value),
                          .timestamp_ms = 1795000000000LL};
    batch_stats_t stats;

    /* A still believes it owns the partition at epoch 1. */
    part_a.next_offset = 1;
    part_a.watermark_ms = -1;
    ck_assert_int_eq(batch_apply(batch_a, &msg, 1, &part_a, 1, &stats, errstr, sizeof errstr),
                     ERR_OK);
    ck_assert(part_a.fenced);
    ck_assert_int_eq(stats.messages, 0);
    ck_assert_int_eq(stats.fenced, 1);

    PGconn *conn = tl_db_connect(url);
    char *rows = tl_db_scalar(conn, "SELECT count(*) FROM steward.history", 0, NULL);
    ck_assert_str_eq(rows, "0");
    free(rows);
    char *offset = tl_db_scalar(conn, "SELECT next_offset FROM steward.offsets", 0, NULL);
    ck_assert_str_eq(offset, "-2");
    free(offset);

    /* B, the owner, commits the same message. */
    part_b.next_offset = 1;
    part_b.watermark_ms = -1;
    ck_assert_int_eq(batch_apply(batch_b, &msg, 1, &part_b, 1, &stats, errstr, sizeof errstr),
                     ERR_OK);
    ck_assert(!part_b.fenced);
    ck_assert_int_eq(stats.messages, 1);
    rows = tl_db_scalar(conn,
                        "SELECT string_agg(outcome || ' by ' || replica || ' at epoch ' || "
                        "epoch, ', ') FROM steward.history",
                        0, NULL);
    ck_assert_str_eq(rows, "started by replica-b at epoch 2");
    free(rows);
    offset = tl_db_scalar(conn, "SELECT next_offset FROM steward.offsets", 0, NULL);
    ck_assert_str_eq(offset, "1");
    free(offset);

    /* A changed definition under the same version is refused. */
    def->version = 1;
    json_object_set_new(def->document, "owner", json_string("someone-else"));
    ck_assert_int_eq(store_register_definitions(b, &set, errstr, sizeof errstr), ERR_INVALID);
    ck_assert_msg(tl_contains(errstr, "new version"), "got: %s", errstr);

    PQfinish(conn);
    batch_ctx_free(batch_a);
    batch_ctx_free(batch_b);
    store_free(a);
    store_free(b);
    def_free(def);
    def_problems_clear(&problems);
}
END_TEST

Suite *crash_suite(void)
{
    Suite *s = suite_create("crash");
    TCase *tc = tcase_create("crash");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, crash_at_random_points_loses_and_repeats_nothing);
    tcase_add_test(tc, sigterm_mid_stream_loses_nothing);
    suite_add_tcase(s, tc);
    return s;
}

Suite *fencing_suite(void)
{
    Suite *s = suite_create("fencing");
    TCase *tc = tcase_create("fencing");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, zombie_replica_is_fenced);
    tcase_add_test(tc, replicas_share_a_group_and_judge_each_offset_once);
    suite_add_tcase(s, tc);
    return s;
}
