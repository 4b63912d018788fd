/*
 * test_sched - lateness, failover and a scheduler that cannot wedge, end to
 * end: steward run on the real broker and PostgreSQL.
 *
 *   lateness      a completion 2 s late in a one-hour catch-up is recorded
 *                 as late (late_by_ms), though read before the scheduler
 *                 could judge its deadline
 *   unloadable    600 due instances on a recorded version that no longer
 *                 loads: the healthy instance beside them is alerted, one
 *                 alert names the version, SIGTERM stops steward at once
 *   retired_topic a new version drops a topic nobody produces to any more:
 *                 deadlines on the new version still fire
 *   failover      two replicas, one SIGKILLed: every stall is alerted within
 *                 its deadline + 15 s (the survivor takes over in time)
 *   unowned       the same with the takeover held off (a 45 s session): the
 *                 blind alert names the partitions without a live owner
 *   batch_locks   the scheduler's own passes (sched_tick) against a seeded
 *                 database: a due instance whose advisory lock another
 *                 transaction holds (as an intake batch does) is neither
 *                 judged nor changed, the others are, in full batches past
 *                 it; once the lock is released the next pass judges it
 */
#include "definitions/def.h"
#include "manager/sinks/routes.h"
#include "manager/intake/rows.h"
#include "manager/timing/scheduler.h"
#include "manager/intake/store.h"
#include "testlib.h"
#include "world.h"

#include <check.h>
#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static tw_world_t w;
static char *def_text; /* the filled alert_order definition, version 1 */

/* Topics (those named in `topics`, NULL: all three), the definition text
 * and a migrated database. */
static void world_init(const char *name, const char *d1, const char *d2, int partitions,
                       const char *const *topics)
{
    tw_init(&w, name);
    char *tpl = tl_source_path("tests/data/definitions/alert_order.json.in");
    char *text = tl_read_file(tpl);
    def_text = tw_fill(text, w.prefix, TW_LIST("@D1@", d1, "@D2@", d2));
    free(text);
    free(tpl);
    tw_create_topics(&w, topics != NULL ? topics : TW_LIST("orders", "payments", "shipping"),
                     partitions);
    tw_migrate(&w);
}

/* Writes config.json with the definition file `def_file` (in w.dir) and
 * `kafka` properties (a JSON object, taken). */
static void world_config(const char *def_file, const char *unowned_after, json_t *kafka)
{
    json_object_set_new(kafka, "topic.metadata.refresh.interval.ms", json_string("1000"));
    json_t *cfg = tw_config(&w, def_file);
    json_t *parts = json_pack(
        "{s:{s:s, s:s, s:s, s:s}, s:{s:s, s:s, s:s}, s:{s:s}, s:{s:[{s:s}]}, s:o}", "scheduler",
        "interval", "200ms", "grace", "200ms", "blind_after", "1m", "unowned_after", unowned_after,
        "notifier", "interval", "100ms", "timeout", "2s", "max_backoff", "1s", "http", "listen", "",
        "routes", "default", "type", "log", "kafka", kafka);
    ck_assert_int_eq(json_object_update(cfg, parts), 0);
    json_decref(parts);
    tw_config_write(&w, cfg);
}

static int world_start(const char *replica)
{
    return tw_spawn(&w, TW_LIST("--replica", replica));
}

static void teardown(void)
{
    tw_teardown(&w);
    free(def_text);
    def_text = NULL;
}

static void wait_sql(const char *sql, const char *expected, int timeout_s, const char *what)
{
    tw_wait(&w, sql, NULL, expected, timeout_s, what);
}

static long scalar_long(const char *sql)
{
    return tw_scalar_long(&w, sql, NULL);
}

static void send_event(tl_producer_t *p, const char *name, int partition, const char *type,
                       const char *key, long long ts)
{
    char value[256], *t = tw_topic(&w, name);
    snprintf(value, sizeof value, "{\"type\":\"%s\",\"id\":\"%s-%s\",\"order_id\":\"%s\"}", type,
             type, key, key);
    tl_produce(p, t, partition, value, -1, NULL, ts);
    free(t);
}

/* Waits until `n` partitions of the group are claimed by `owners` distinct replicas. */
static void wait_claimed(int n, int owners)
{
    char sql[512], expected[32];
    snprintf(sql, sizeof sql,
             "SELECT count(*) || ' ' || count(DISTINCT owner) FROM steward.offsets "
             "WHERE consumer_group = '%s'",
             w.group);
    snprintf(expected, sizeof expected, "%d %d", n, owners);
    wait_sql(sql, expected, 60, "partitions claimed");
}

/* ---- lateness ------------------------------------------------------------------ */

START_TEST(open_deadline_alert_stores_the_engines_lateness)
{
    /* The alert paged a deadline 10m before the event; the instance's
     * deadline moved since (an operator's re-send restarted it), and the
     * engine judged the step 5m late. The alert stores that figure, the
     * same as the history row's, not one of its own. */
    const char *url = tl_db_create("lateness_store");
    tl_migrate(url);
    PGconn *conn = tl_db_connect(url);
    tl_db_exec(conn, "INSERT INTO steward.alerts (kind, process, key, state, owner, summary, "
                     "  dedup_key, deadline_at) VALUES ('deadline', 'p', 'k', 'waiting', 'ops', "
                     "  'waiting stalled', 'd1', '2030-01-01T00:00:00Z'), "
                     "('deadline', 'p', 'k2', 'waiting', 'ops', 'waiting stalled', 'd2', "
                     "  '2030-01-01T00:00:00Z')");
    char errstr[512];
    store_config_t cfg = {url, "g", "replica-a"};
    store_t *store = store_new(&cfg, errstr, sizeof errstr);
    ck_assert_msg(store != NULL, "store_new: %s", errstr);
    rows_t rows;
    rows_init(&rows, "history", ROWS_HISTORY_COLUMNS);
    int64_t at = 1893456600000LL; /* 2030-01-01T00:10:00Z */
    rows_history_row_t row = {.process = "p",
                              .key = "k",
                              .version = 1,
                              .event_id = "e1",
                              .event_type = "Done",
                              .topic = "t",
                              .partition = 0,
                              .offset = 1,
                              .event_ms = at,
                              .from_state = "waiting",
                              .to_state = "done",
                              .outcome = "advanced",
                              .epoch = 1,
                              .late_by_ms = 5 * 60000,
                              .entered_ms = at,
                              .time_in_state_ms = 20 * 60000,
                              .deadline_late_by_ms = 5 * 60000};
    rows_add_history(&rows, &row);
    /* Late for the process's deadline alone: its deadline alert stays as it is. */
    row.key = "k2";
    row.event_id = "e2";
    row.deadline_late_by_ms = 0;
    rows_add_history(&rows, &row);
    ck_assert(store_begin(store, errstr, sizeof errstr) == ERR_OK);
    ck_assert_msg(store_write_history(store, &rows, true, errstr, sizeof errstr) == ERR_OK, "%s",
                  errstr);
    ck_assert(store_commit(store, errstr, sizeof errstr) == ERR_OK);
    rows_clear(&rows);
    store_free(store);
    char *late = tl_db_scalar(conn,
                              "SELECT string_agg(key || '=' || coalesce(late_by_ms::text, 'null'), "
                              "  ' ' ORDER BY key) FROM steward.alerts",
                              0, NULL);
    ck_assert_str_eq(late, "k=300000 k2=null");
    free(late);
    PQfinish(conn);
}
END_TEST

START_TEST(late_completion_in_a_catch_up_is_recorded_as_late)
{
    world_init("lateness", "1m", "1m", 1, NULL);
    free(tl_write_file(w.dir, "alert_order.json", def_text));
    world_config("alert_order.json", "15s", json_object());

    /* An hour of orders, one a minute, each paid after 30 s and shipped
     * after 50 s; L is paid 62 s after it was placed: 2 s past the
     * one-minute deadline, and shipped on time after that. */
    long long now = (long long) time(NULL) * 1000, t0 = now - 3600 * 1000LL;
    tl_producer_t *p = tl_producer_new();
    long messages = 0;
    for (int i = 0; i < 58; i++) {
        char key[16];
        long long placed = t0 + i * 60000LL;
        bool late = i == 29;
        snprintf(key, sizeof key, late ? "L" : "K%02d", i);
        send_event(p, "orders", 0, "OrderPlaced", key, placed);
        send_event(p, "payments", 0, "PaymentCaptured", key, placed + (late ? 62000 : 30000));
        send_event(p, "shipping", 0, "ShipmentDispatched", key, placed + (late ? 80000 : 50000));
        messages += 3;
    }
    tl_producer_free(p);

    /* Consumed in one go, after the fact. */
    w.pids[0] = world_start("late-a");
    char sql[512], total[32];
    snprintf(sql, sizeof sql,
             "SELECT coalesce(sum(next_offset), 0) FROM steward.offsets WHERE consumer_group = "
             "'%s' AND next_offset >= 0",
             w.group);
    snprintf(total, sizeof total, "%ld", messages);
    wait_sql(sql, total, 60, "the backlog consumed");
    wait_sql("SELECT count(*) FROM steward.instances WHERE status = 'success'", "58", 30,
             "every order completed");

    char *late = tl_db_scalar(w.conn,
                              "SELECT outcome || ' ' || late_by_ms || ' ' || detail "
                              "FROM steward.history WHERE key = 'L' "
                              "AND event_type = 'PaymentCaptured' AND outcome <> 'parked'",
                              0, NULL);
    ck_assert_msg(tl_contains(late, "advanced 2000 arrived 2s after the deadline of "
                                    "awaiting_payment"),
                  "history: %s", late);
    free(late);
    /* Nothing else was late. */
    ck_assert_int_eq(
        scalar_long("SELECT count(*) FROM steward.history WHERE late_by_ms IS NOT NULL"), 1);
}
END_TEST

/* ---- unloadable ---------------------------------------------------------------- */

START_TEST(unloadable_version_is_set_aside_and_the_healthy_instance_alerted)
{
    world_init("unloadable", "2s", "1h", 1, NULL);
    free(tl_write_file(w.dir, "alert_order.json", def_text));
    world_config("alert_order.json", "15s", json_object());

    /* Version 7 recorded by some earlier steward, which this one cannot
     * load (no states), and 600 instances on it, all long past their
     * deadline. */
    tl_db_exec(w.conn, "INSERT INTO steward.definitions (process, version, mode, document, "
                       "checksum) VALUES ('alert_order', 7, 'shadow', "
                       "'{\"process\": \"alert_order\", \"version\": 7}', 'x')");
    tl_db_exec(w.conn,
               "INSERT INTO steward.instances (process, key, version, state, started_at, "
               "state_entered_at, deadline_at, next_deadline_at) "
               "SELECT 'alert_order', 'BAD' || g, 7, 'awaiting_payment', now() - interval '2h', "
               "now() - interval '2h', now() - interval '1h', now() - interval '1h' "
               "FROM generate_series(1, 600) g");

    w.pids[0] = world_start("unloadable-a");
    wait_claimed(3, 1);
    tl_producer_t *p = tl_producer_new();
    send_event(p, "orders", -1, "OrderPlaced", "GOOD", 0);
    tl_producer_free(p);

    wait_sql("SELECT count(*) FROM steward.alerts WHERE kind = 'deadline' AND key = 'GOOD'", "1",
             20, "the healthy instance alerted");
    wait_sql("SELECT count(*) FROM steward.instances WHERE suspended IS NOT NULL "
             "AND next_deadline_at IS NULL",
             "600", 10, "the unloadable instances set aside");
    ck_assert_int_eq(scalar_long("SELECT count(*) FROM steward.alerts WHERE kind = 'deadline'"), 1);
    ck_assert_int_eq(scalar_long("SELECT count(*) FROM steward.alerts WHERE kind = 'unloadable'"),
                     1);
    char *summary = tl_db_scalar(
        w.conn, "SELECT summary FROM steward.alerts WHERE kind = 'unloadable'", 0, NULL);
    ck_assert_msg(tl_contains(summary, "alert_order on version 7") &&
                      tl_contains(summary, "no longer loads"),
                  "summary: %s", summary);
    free(summary);
    /* The failed load was remembered: read and logged once, not per row. */
    char *log = tl_read_file(w.log);
    const char *needle = "a recorded definition version no longer loads";
    int times = 0;
    for (const char *at = strstr(log, needle); at != NULL; at = strstr(at + 1, needle))
        times++;
    free(log);
    ck_assert_int_eq(times, 1);

    /* An event for an instance that cannot be judged does not stop
     * intake: it is kept in rejected, and the next event is applied. */
    p = tl_producer_new();
    send_event(p, "orders", -1, "OrderPlaced", "BAD1", 0);
    send_event(p, "orders", -1, "OrderPlaced", "GOOD2", 0);
    tl_producer_free(p);
    wait_sql("SELECT count(*) FROM steward.instances WHERE key = 'GOOD2'", "1", 20,
             "the event after the unjudgeable one applied");
    ck_assert_int_eq(scalar_long("SELECT count(*) FROM steward.rejected "
                                 "WHERE reason = 'unloadable_version' "
                                 "AND convert_from(value, 'UTF8') LIKE '%BAD1%'"),
                     1);
    ck_assert_msg(kill(w.pids[0], 0) == 0, "steward stopped on an unjudgeable instance");

    time_t asked = time(NULL);
    tw_stop(&w, 20);
    ck_assert_int_le(time(NULL) - asked, 10);
    /* The run's last summary of what it rejected names the reason (a
     * backtest replays one candidate version: it has no unloadable one). */
    char *final = tl_read_file(w.log);
    ck_assert_msg(tl_contains(final, "messages rejected since the last summary") &&
                      tl_contains(final, "\"by_reason\":\"unloadable_version 1\""),
                  "run's rejection summary:\n%s", final);
    free(final);
}
END_TEST

/* ---- retired topic -------------------------------------------------------------- */

START_TEST(deadlines_fire_after_a_new_version_drops_a_topic)
{
    /* The shipping topic is never created: only version 1 read it. */
    static const char *const topics[] = {"orders", "payments", NULL};
    world_init("retired", "2s", "1h", 1, topics);

    /* Version 1 was recorded by an earlier steward; no instance runs on it. */
    const char *params[1] = {def_text};
    PQclear(PQexecParams(w.conn,
                         "INSERT INTO steward.definitions (process, version, mode, document, "
                         "checksum) VALUES ('alert_order', 1, 'shadow', $1::jsonb, "
                         "md5(($1::jsonb)::text))",
                         1, NULL, params, NULL, NULL, 0));
    ck_assert_int_eq(scalar_long("SELECT count(*) FROM steward.definitions"), 1);

    /* Version 2: paid is done; no dispatch step, no shipping topic. */
    json_t *doc = json_loads(def_text, 0, NULL);
    ck_assert_ptr_nonnull(doc);
    json_object_set_new(doc, "version", json_integer(2));
    json_object_del(json_object_get(doc, "events"), "ShipmentDispatched");
    json_t *states = json_object_get(doc, "states");
    json_object_del(states, "awaiting_dispatch");
    json_object_set_new(json_object_get(states, "awaiting_payment"), "on",
                        json_pack("{s:s}", "PaymentCaptured", "completed"));
    char path[1200];
    snprintf(path, sizeof path, "%s/alert_order.v2.json", w.dir);
    ck_assert_int_eq(json_dump_file(doc, path, 0), 0);
    json_decref(doc);
    world_config("alert_order.v2.json", "15s", json_object());

    w.pids[0] = world_start("retired-a");
    wait_claimed(2, 1);
    tl_producer_t *p = tl_producer_new();
    send_event(p, "orders", -1, "OrderPlaced", "V2", 0);
    tl_producer_free(p);
    wait_sql("SELECT version FROM steward.instances WHERE key = 'V2'", "2", 30, "V2 started");
    wait_sql("SELECT count(*) FROM steward.alerts WHERE kind = 'deadline' AND key = 'V2'", "1", 20,
             "the deadline on version 2 alerted");
    ck_assert_int_eq(scalar_long("SELECT count(*) FROM steward.definitions WHERE current"), 1);
}
END_TEST

/* ---- failover ------------------------------------------------------------------- */

/* Two replicas owning a partition of each topic each; the one owning
 * orders[0] is SIGKILLed. Returns the index of the survivor in w.pids. */
static int kill_one_of_two(void)
{
    w.pids[0] = world_start("fo-a");
    w.pids[1] = world_start("fo-b");
    wait_claimed(6, 2);
    char *owner = tl_db_scalar(w.conn,
                               "SELECT owner FROM steward.offsets WHERE topic LIKE '%orders' "
                               "AND partition = 0",
                               0, NULL);
    int victim = strcmp(owner, "fo-a") == 0 ? 0 : 1;
    free(owner);
    ck_assert_int_eq(tl_stop(w.pids[victim], SIGKILL, 10), 128 + SIGKILL);
    w.pids[victim] = 0;
    return 1 - victim;
}

START_TEST(stalls_are_alerted_within_deadline_plus_15s_after_a_replica_dies)
{
    world_init("failover", "3s", "1h", 2, NULL);
    free(tl_write_file(w.dir, "alert_order.json", def_text));
    world_config("alert_order.json", "15s", json_object());
    kill_one_of_two();

    /* Orders on both partitions, none ever paid. */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    tl_producer_t *p = tl_producer_new();
    for (int i = 0; i < 20; i++) {
        char key[16];
        snprintf(key, sizeof key, "F%02d", i);
        send_event(p, "orders", i % 2, "OrderPlaced", key, 0);
    }
    tl_producer_free(p);
    wait_sql("SELECT count(*) FROM steward.alerts WHERE kind = 'deadline'", "20", 3 + 15,
             "every stall alerted within deadline + 15 s");
    clock_gettime(CLOCK_MONOTONIC, &t1);
    fprintf(stderr, "failover: every stall alerted %.1f s after the orders\n",
            (double) (t1.tv_sec - t0.tv_sec) + (double) (t1.tv_nsec - t0.tv_nsec) / 1e9);
}
END_TEST

START_TEST(partitions_without_a_live_owner_open_the_blind_alert)
{
    world_init("unowned", "1h", "1h", 2, NULL);
    free(tl_write_file(w.dir, "alert_order.json", def_text));
    /* The group notices the death only after 45 s (the user's setting
     * beats Steward's default); the blind alert must not wait for that. */
    world_config("alert_order.json", "3s", json_pack("{s:s}", "session.timeout.ms", "45000"));
    kill_one_of_two();
    char *victim = tl_db_scalar(w.conn,
                                "SELECT owner FROM steward.offsets WHERE topic LIKE '%orders' "
                                "AND partition = 0",
                                0, NULL);

    wait_sql("SELECT count(*) FROM steward.alerts WHERE kind = 'blind' AND resolved_at IS NULL",
             "1", 15, "the blind alert");
    char *summary =
        tl_db_scalar(w.conn, "SELECT summary FROM steward.alerts WHERE kind = 'blind'", 0, NULL);
    char expected[64];
    snprintf(expected, sizeof expected, "has no live owner (last %s)", victim);
    ck_assert_msg(tl_contains(summary, expected), "summary: %s", summary);
    /* The partitions are still the dead replica's: no takeover yet. */
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM steward.offsets WHERE owner = '%s'", victim);
    ck_assert_int_eq(scalar_long(sql), 3);
    free(summary);
    free(victim);
}
END_TEST

/* ---- advisory locks of batches -------------------------------------------------- */

static const char locks_def[] =
    "{\"process\": \"locks\", \"version\": 1, \"mode\": \"shadow\", \"owner\": \"fulfilment\","
    " \"key\": \"/order_id\","
    " \"events\": {\"OrderPlaced\": {\"topic\": \"locks.orders\"},"
    "            \"PaymentCaptured\": {\"topic\": \"locks.payments\"}},"
    " \"start\": {\"on\": \"OrderPlaced\", \"to\": \"awaiting_payment\"},"
    " \"states\": {\"awaiting_payment\": {\"deadline\": \"15m\", \"owner\": \"payments\","
    "                                   \"on\": {\"PaymentCaptured\": \"paid\"}},"
    "            \"paid\": {\"terminal\": \"success\"}}}";

/* What the scheduler did to instance `key`: "<alerts> <overdue> <due>". */
static char *judged(const char *key)
{
    const char *params[1] = {key};
    return tl_db_scalar(
        w.conn,
        "SELECT (SELECT count(*) FROM steward.alerts WHERE process = 'locks' "
        "  AND key = $1) || ' ' || overdue || ' ' || (next_deadline_at IS NOT NULL) "
        "FROM steward.instances WHERE process = 'locks' AND key = $1",
        1, params);
}

START_TEST(instances_a_batch_holds_are_left_for_a_later_pass)
{
    memset(&w, 0, sizeof w);
    w.db_url = tl_db_create("batchlocks");
    w.conn = tl_db_connect(w.db_url);
    tl_migrate(w.db_url);

    /* More due instances than one batch takes, each due a second after
     * the one before; the watermark is now, an hour past them all. */
    char seed[1024];
    snprintf(seed, sizeof seed,
             "INSERT INTO steward.instances (process, key, version, state, status, started_at, "
             "  state_entered_at, deadline_at, next_deadline_at, vars) "
             "SELECT 'locks', 'K' || lpad(g::text, 5, '0'), 1, 'awaiting_payment', 'active', e, "
             "  e, e + interval '15 minutes', e + interval '15 minutes', '{}' "
             "FROM (SELECT g, now() - interval '2 hours' + g * interval '1 second' AS e "
             "      FROM generate_series(1, %d) g) s",
             SCHED_DUE_BATCH + 100);
    const char *params[1] = {locks_def};
    PQclear(
        PQexecParams(w.conn,
                     "INSERT INTO steward.definitions (process, version, mode, document, "
                     "checksum) VALUES ('locks', 1, 'shadow', $1::jsonb, md5(($1::jsonb)::text))",
                     1, NULL, params, NULL, NULL, 0));
    tl_db_exec(w.conn, "INSERT INTO steward.offsets (consumer_group, topic, partition, "
                       "  next_offset, watermark, owner, epoch) "
                       "SELECT 'locks', t, 0, 0, now(), 'locks', 1 "
                       "FROM unnest(ARRAY['locks.orders', 'locks.payments']) t");
    tl_db_exec(w.conn, seed);

    /* Another transaction holds the lock of the first instance due and of
     * one in the middle of the second batch, as an intake batch does. */
    PGconn *batch = tl_db_connect(w.db_url);
    tl_db_exec(batch, "BEGIN");
    char lock[256];
    snprintf(lock, sizeof lock,
             "SELECT steward.lock_instance('locks', k) "
             "FROM unnest(ARRAY['K00001', 'K%05d']) k",
             SCHED_DUE_BATCH + 50);
    tl_db_exec(batch, lock);

    char *def_path = tl_write_file(tl_tmpdir(), "locks.json", locks_def);
    def_problems_t problems = {0};
    const char *paths[1] = {def_path};
    def_set_t *defs = def_set_load(paths, 1, &problems, NULL);
    ck_assert_ptr_nonnull(defs);
    char errstr[1024];
    json_t *routes_json = json_pack("{s:[{s:s}]}", "default", "type", "log");
    route_table_t *routes = route_table_new(routes_json, errstr, sizeof errstr);
    json_decref(routes_json);
    ck_assert_msg(routes != NULL, "routes: %s", errstr);
    sched_config_t cfg = {.conninfo = w.db_url,
                          .group = "locks",
                          .blind_after_ms = 3650LL * 86400000,
                          .blind_owner = "steward"};
    sched_t *sched = sched_new(&cfg, defs, routes, errstr, sizeof errstr);
    ck_assert_msg(sched != NULL, "scheduler: %s", errstr);

    sched_stats_t stats;
    ck_assert_msg(sched_tick(sched, &stats, errstr, sizeof errstr) == ERR_OK, "pass: %s", errstr);
    /* Every other instance is judged in this one pass, once: a held lock
     * does not end it early, and the pass's two transactions at once (the
     * default scheduler.transactions, on two connections) never take the
     * same instance. */
    ck_assert_int_eq(scalar_long("SELECT count(*) FROM pg_stat_activity WHERE datname = "
                                 "current_database() AND application_name = 'steward scheduler'"),
                     SCHED_DEFAULT_TRANSACTIONS);
    ck_assert_int_eq(stats.judged, SCHED_DUE_BATCH + 98);
    ck_assert_int_eq(stats.opened, SCHED_DUE_BATCH + 98);
    ck_assert_int_ge(stats.busy, 2);
    char *first = judged("K00001"), *other = judged("K00002");
    ck_assert_str_eq(first, "0 false true"); /* untouched: no alert, still due */
    ck_assert_str_eq(other, "1 true false");
    free(first);
    free(other);
    snprintf(lock, sizeof lock, "K%05d", SCHED_DUE_BATCH + 50);
    char *middle = judged(lock);
    ck_assert_str_eq(middle, "0 false true");
    free(middle);

    /* The batch commits: the next pass judges them. */
    tl_db_exec(batch, "COMMIT");
    ck_assert_msg(sched_tick(sched, &stats, errstr, sizeof errstr) == ERR_OK, "pass: %s", errstr);
    ck_assert_int_eq(stats.judged, 2);
    ck_assert_int_eq(stats.busy, 0);
    first = judged("K00001");
    ck_assert_str_eq(first, "1 true false");
    free(first);
    ck_assert_int_eq(scalar_long("SELECT count(*) FROM steward.alerts WHERE kind = 'deadline'"),
                     SCHED_DUE_BATCH + 100);
    ck_assert_int_eq(scalar_long("SELECT count(*) FROM steward.outbox"), SCHED_DUE_BATCH + 100);

    sched_free(sched);
    route_table_free(routes);
    def_set_free(defs);
    def_problems_clear(&problems);
    free(def_path);
    PQfinish(batch);
}
END_TEST

#define SCHED_SUITE(name, test)                                                                    \
    Suite *name##_suite(void)                                                                      \
    {                                                                                              \
        Suite *s = suite_create(#name);                                                            \
        TCase *tc = tcase_create(#name);                                                           \
        tcase_set_timeout(tc, 180);                                                                \
        tcase_add_checked_fixture(tc, NULL, teardown);                                             \
        tcase_add_test(tc, test);                                                                  \
        suite_add_tcase(s, tc);                                                                    \
        return s;                                                                                  \
    }

Suite *lateness_suite(void)
{
    Suite *s = suite_create("lateness");
    TCase *tc = tcase_create("lateness");
    tcase_set_timeout(tc, 180);
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_add_test(tc, late_completion_in_a_catch_up_is_recorded_as_late);
    suite_add_tcase(s, tc);
    TCase *store = tcase_create("store");
    tcase_add_test(store, open_deadline_alert_stores_the_engines_lateness);
    suite_add_tcase(s, store);
    return s;
}
SCHED_SUITE(unloadable, unloadable_version_is_set_aside_and_the_healthy_instance_alerted)
SCHED_SUITE(retired_topic, deadlines_fire_after_a_new_version_drops_a_topic)
SCHED_SUITE(failover, stalls_are_alerted_within_deadline_plus_15s_after_a_replica_dies)
SCHED_SUITE(unowned, partitions_without_a_live_owner_open_the_blind_alert)
SCHED_SUITE(batch_locks, instances_a_batch_holds_are_left_for_a_later_pass)
