/*
 * test_backtest - trying a definition on retained events: the backtest
 * raises the alerts a live run raised on the same topics (a step that
 * finished late, a step still open), and no row of live state changes;
 * the messages it could not read are counted by reason and topic.
 */
#include "testlib.h"
#include "world.h"

#include <check.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static char *prefix, *defs_dir, *def_path;

static void setup(void)
{
    char *base = tl_unique("bt");
    ck_assert_int_ge(asprintf(&prefix, "%s.", base), 0);
    free(base);
    defs_dir = strdup(tl_tmpdir());
    char *tpl_path = tl_source_path("tests/data/definitions/alert_order.json.in");
    char *tpl = tl_read_file(tpl_path);
    char *def = tw_fill(tpl, prefix, TW_LIST("@D1@", "2s", "@D2@", "1h"));
    def_path = tl_write_file(defs_dir, "alert_order.json", def);
    free(def);
    free(tpl);
    free(tpl_path);
}

static void send(tl_producer_t *p, const char *name, const char *type, const char *key,
                 long long ts)
{
    char topic[256], value[256];
    snprintf(topic, sizeof topic, "%s%s", prefix, name);
    snprintf(value, sizeof value, "{\"type\":\"%s\",\"id\":\"%s-%s\",\"order_id\":\"%s\"}", type,
             type, key, key);
    tl_produce(p, topic, 0, value, -1, NULL, ts);
}

/* Everything steward keeps about the live run, as one digest. */
static char *live_digest(PGconn *conn)
{
    return tl_db_scalar(
        conn,
        "SELECT md5(string_agg(t, '|' ORDER BY t)) FROM ("
        "  SELECT 'i' || row_to_json(i)::text AS t FROM steward.instances i "
        "  UNION ALL SELECT 'h' || row_to_json(h)::text FROM steward.history h "
        "  UNION ALL SELECT 'a' || row_to_json(a)::text FROM steward.alerts a "
        "  UNION ALL SELECT 'o' || row_to_json(o)::text FROM steward.outbox o "
        "  UNION ALL SELECT 'f' || row_to_json(f)::text FROM steward.offsets f "
        "  UNION ALL SELECT 'd' || row_to_json(d)::text FROM steward.definitions d) s",
        0, NULL);
}

/* key:state of every deadline alert, sorted. */
static char *live_alerts(PGconn *conn)
{
    return tl_db_scalar(conn,
                        "SELECT string_agg(key || ':' || state, ' ' ORDER BY key) "
                        "FROM steward.alerts WHERE kind = 'deadline'",
                        0, NULL);
}

START_TEST(backtest_raises_what_the_live_run_raised)
{
    char topics[3][256];
    const char *names[] = {"orders", "payments", "shipping"};
    const char *list[3];
    for (int i = 0; i < 3; i++) {
        snprintf(topics[i], sizeof topics[i], "%s%s", prefix, names[i]);
        list[i] = topics[i];
    }
    tl_kafka_create_topics(list, 3, 1);

    /* The live run, in real time: A pays in time, B late, C never. */
    const char *live = tl_db_create("backtest_live");
    PGconn *conn = tl_db_connect(live);
    char *group = tl_unique("live");
    char *log = tl_write_file(defs_dir, "live.log", "");
    const char *run[] = {NULL,
                         "run",
                         "--brokers",
                         tl_kafka_brokers(),
                         "--database",
                         live,
                         "--definitions",
                         def_path,
                         "--group",
                         group,
                         "--set",
                         "http.listen=",
                         "--set",
                         "scheduler.interval=200ms",
                         "--set",
                         "scheduler.grace=200ms",
                         NULL};
    tl_migrate(live);
    int pid = tl_steward_spawn(run, NULL, log);
    const char *params[1] = {group};
    ck_assert_msg(tl_db_wait(conn, "SELECT count(*) FROM steward.offsets WHERE consumer_group = $1",
                             1, params, "3", 60, NULL),
                  "the live run claimed nothing");
    tl_producer_t *p = tl_producer_new();
    send(p, "orders", "OrderPlaced", "A", 0);
    send(p, "orders", "OrderPlaced", "B", 0);
    send(p, "orders", "OrderPlaced", "C", 0);
    tl_producer_free(p);
    /* A pays once its order is in (an earlier payment would be a reordered
     * event, another scenario), well within its 2 s. */
    ck_assert_msg(
        tl_db_wait(conn, "SELECT count(*) FROM steward.instances", 0, NULL, "3", 30, NULL),
        "the live run did not start A, B and C");
    p = tl_producer_new();
    send(p, "payments", "PaymentCaptured", "A", 0);
    tl_producer_free(p);
    ck_assert_msg(tl_db_wait(conn, "SELECT count(*) FROM steward.alerts", 0, NULL, "2", 30, NULL),
                  "the live run did not alert B and C");
    /* Time passing is the scenario: B's payment must carry a time well past
     * its deadline, since the backtest judges by event time, not by when
     * the live run happened to alert. */
    sleep(3);
    p = tl_producer_new();
    send(p, "payments", "PaymentCaptured", "B", 0);
    tl_producer_free(p);
    ck_assert_msg(tl_db_wait(conn,
                             "SELECT count(*) FROM steward.alerts WHERE resolved_at IS NOT NULL", 0,
                             NULL, "1", 30, NULL),
                  "B's late payment did not resolve its alert");
    ck_assert_int_eq(tl_stop(pid, SIGTERM, 30), 0);
    char *raised = live_alerts(conn);
    ck_assert_str_eq(raised, "B:awaiting_payment C:awaiting_payment");

    /* The backtest over the same topics, into a scratch database. */
    char *before = live_digest(conn);
    const char *argv[] = {NULL,         "backtest", "--definition", def_path,
                          "--from",     "10m",      "--brokers",    tl_kafka_brokers(),
                          "--database", live,       "--json",       NULL};
    tl_output_t o = tl_steward(argv, NULL);
    ck_assert_msg(o.status == 0, "backtest exited %d: %s", o.status, o.err);
    json_error_t jerr;
    json_t *doc = json_loads(o.out, 0, &jerr);
    ck_assert_msg(doc != NULL, "not JSON: %s", o.out);
    json_t *alerts = json_object_get(doc, "alerts");
    ck_assert_msg(json_is_array(alerts), "no alerts: %s", o.out);
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(doc, "rejected"), "total")),
                     0);
    char got[512] = "";
    size_t i, len = 0;
    json_t *a;
    /* Sorted by key, as live_alerts() lists them. */
    const char *keys[8];
    const char *states[8];
    size_t n = 0;
    json_array_foreach(alerts, i, a)
    {
        if (n < 8) {
            keys[n] = json_string_value(json_object_get(a, "key"));
            states[n++] = json_string_value(json_object_get(a, "state"));
        }
    }
    for (size_t x = 0; x < n; x++) {
        for (size_t y = x + 1; y < n; y++) {
            if (strcmp(keys[y], keys[x]) < 0) {
                const char *tk = keys[x], *ts = states[x];
                keys[x] = keys[y], states[x] = states[y];
                keys[y] = tk, states[y] = ts;
            }
        }
    }
    for (size_t x = 0; x < n; x++)
        len += (size_t) snprintf(got + len, sizeof got - len, "%s%s:%s", len ? " " : "", keys[x],
                                 states[x]);
    ck_assert_str_eq(got, raised);
    json_decref(doc);
    tl_output_free(&o);

    /* No row of live state changed. */
    char *after = live_digest(conn);
    ck_assert_str_eq(after, before);
    free(after);
    free(before);
    free(raised);
    free(log);
    free(group);
    PQfinish(conn);
}
END_TEST

/* The advanced steps of `key`: from_state:time_in_state_ms, in order. */
static char *stays(PGconn *conn, const char *key)
{
    const char *params[1] = {key};
    return tl_db_scalar(conn,
                        "SELECT string_agg(from_state || ':' || time_in_state_ms, ' ' ORDER BY id) "
                        "FROM steward.history WHERE key = $1 AND outcome = 'advanced'",
                        1, params);
}

/*
 * A reordered event: R's payment carries a time 65 minutes before its order
 * (another topic, another clock), and its dispatch comes 5 minutes after the
 * order. The engine enters awaiting_dispatch at the order's time, so R spent
 * 5 minutes there, within its 1h deadline; counting from the payment's own
 * time would make it 70 minutes and page. Backtest must count as the live
 * run did: the same alerts (none) and the same time in each state.
 */
START_TEST(backtest_of_reordered_events_matches_the_live_run)
{
    char topics[3][256];
    const char *names[] = {"orders", "payments", "shipping"};
    const char *list[3];
    for (int i = 0; i < 3; i++) {
        snprintf(topics[i], sizeof topics[i], "%s%s", prefix, names[i]);
        list[i] = topics[i];
    }
    tl_kafka_create_topics(list, 3, 1);
    long long now = (long long) time(NULL) * 1000;
    tl_producer_t *p = tl_producer_new();
    send(p, "orders", "OrderPlaced", "R", now - 80 * 60000LL);
    send(p, "payments", "PaymentCaptured", "R", now - 145 * 60000LL);
    send(p, "payments", "PaymentCaptured", "R", now - 145 * 60000LL); /* duplicated */
    send(p, "shipping", "ShipmentDispatched", "R", now - 75 * 60000LL);
    tl_producer_free(p);

    const char *live = tl_db_create("backtest_reorder");
    PGconn *conn = tl_db_connect(live);
    char *group = tl_unique("live");
    char *log = tl_write_file(defs_dir, "live.log", "");
    tl_migrate(live);
    const char *run[] = {NULL,
                         "run",
                         "--brokers",
                         tl_kafka_brokers(),
                         "--database",
                         live,
                         "--definitions",
                         def_path,
                         "--group",
                         group,
                         "--set",
                         "http.listen=",
                         "--set",
                         "scheduler.interval=200ms",
                         NULL};
    int pid = tl_steward_spawn(run, NULL, log);
    ck_assert_msg(tl_db_wait(conn, "SELECT status FROM steward.instances WHERE key = 'R'", 0, NULL,
                             "success", 60, NULL),
                  "the live run did not finish R");
    ck_assert_int_eq(tl_stop(pid, SIGTERM, 30), 0);
    char *live_stays = stays(conn, "R");
    ck_assert_str_eq(live_stays, "awaiting_payment:0 awaiting_dispatch:300000");
    char *live_count = tl_db_scalar(
        conn, "SELECT count(*) FROM steward.alerts WHERE kind NOT IN ('blind', 'unloadable')", 0,
        NULL);
    ck_assert_str_eq(live_count, "0");

    const char *argv[] = {NULL,         "backtest", "--definition", def_path,
                          "--from",     "3h",       "--brokers",    tl_kafka_brokers(),
                          "--database", live,       "--json",       "--keep",
                          NULL};
    tl_output_t o = tl_steward(argv, NULL);
    ck_assert_msg(o.status == 0, "backtest exited %d: %s", o.status, o.err);
    json_error_t jerr;
    json_t *doc = json_loads(o.out, 0, &jerr);
    ck_assert_msg(doc != NULL, "not JSON: %s", o.out);
    json_t *alerts = json_object_get(doc, "alerts");
    ck_assert_msg(json_is_array(alerts) && json_array_size(alerts) == 0,
                  "backtest raised what the live run did not: %s", o.out);
    json_decref(doc);

    /* The kept scratch database: the same time in each state. */
    const char *mark = strstr(o.err, "kept the scratch database ");
    ck_assert_msg(mark != NULL, "no scratch database named: %s", o.err);
    char scratch[128];
    ck_assert_int_eq(sscanf(mark + strlen("kept the scratch database "), "%127s", scratch), 1);
    const char *kw[] = {"dbname", "dbname", NULL}, *val[] = {live, scratch, NULL};
    PGconn *sc = PQconnectdbParams(kw, val, 1);
    ck_assert_msg(PQstatus(sc) == CONNECTION_OK, "scratch: %s", PQerrorMessage(sc));
    char *replayed = stays(sc, "R");
    PQfinish(sc);
    ck_assert_str_eq(replayed, live_stays);
    char drop[256];
    snprintf(drop, sizeof drop, "DROP DATABASE IF EXISTS \"%s\" WITH (FORCE)", scratch);
    PQclear(PQexec(conn, drop));
    tl_output_free(&o);

    free(replayed);
    free(live_count);
    free(live_stays);
    free(log);
    free(group);
    PQfinish(conn);
}
END_TEST

/*
 * Messages the definition cannot read are counted, by reason and by
 * topic with a sample detail, in the text and in the JSON: a rejected
 * message must not pass for a quiet window.
 */
START_TEST(backtest_reports_rejections)
{
    char topics[3][256];
    const char *names[] = {"orders", "payments", "shipping"};
    const char *list[3];
    for (int i = 0; i < 3; i++) {
        snprintf(topics[i], sizeof topics[i], "%s%s", prefix, names[i]);
        list[i] = topics[i];
    }
    tl_kafka_create_topics(list, 3, 1);
    tl_producer_t *p = tl_producer_new();
    send(p, "orders", "OrderPlaced", "G", 0);
    tl_produce(p, topics[0], 0, "{\"type\": \"OrderPlaced\", ", -1, NULL, 0);
    tl_produce(p, topics[1], 0, "{\"order_id\": \"G\"}", -1, NULL, 0);
    tl_produce(p, topics[1], 0, "{\"order_id\": \"H\"}", -1, NULL, 0);
    tl_producer_free(p);
    const char *live = tl_db_create("backtest_rejections");

    const char *argv[] = {NULL,         "backtest", "--definition", def_path,
                          "--from",     "10m",      "--brokers",    tl_kafka_brokers(),
                          "--database", live,       "--json",       NULL};
    tl_output_t o = tl_steward(argv, NULL);
    ck_assert_msg(o.status == 0, "backtest exited %d: %s", o.status, o.err);
    json_error_t jerr;
    json_t *doc = json_loads(o.out, 0, &jerr);
    ck_assert_msg(doc != NULL, "not JSON: %s", o.out);
    json_t *rejected = json_object_get(doc, "rejected");
    ck_assert_int_eq(json_integer_value(json_object_get(rejected, "total")), 3);
    json_t *by_reason = json_object_get(rejected, "by_reason");
    ck_assert_int_eq(json_integer_value(json_object_get(by_reason, "invalid_json")), 1);
    ck_assert_int_eq(json_integer_value(json_object_get(by_reason, "missing_type")), 2);
    json_t *first = json_array_get(json_object_get(rejected, "by_topic"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(first, "topic")), topics[1]);
    ck_assert_str_eq(json_string_value(json_object_get(first, "reason")), "missing_type");
    ck_assert_int_eq(json_integer_value(json_object_get(first, "count")), 2);
    ck_assert_msg(tl_contains(json_string_value(json_object_get(first, "sample")), "at /type"),
                  "sample: %s", o.out);
    json_decref(doc);
    tl_output_free(&o);

    const char *text_argv[] = {NULL,  "backtest",  "--definition",     def_path,     "--from",
                               "10m", "--brokers", tl_kafka_brokers(), "--database", live,
                               NULL};
    o = tl_steward(text_argv, NULL);
    ck_assert_msg(o.status == 0, "backtest exited %d: %s", o.status, o.err);
    ck_assert_msg(tl_contains(o.out, "messages rejected: 3 (") &&
                      tl_contains(o.out, "invalid_json 1") && tl_contains(o.out, "missing_type 2"),
                  "%s", o.out);
    char line[512];
    snprintf(line, sizeof line, "%s", topics[0]);
    ck_assert_msg(tl_contains(o.out, line) && tl_contains(o.out, "e.g. invalid JSON"), "%s", o.out);
    tl_output_free(&o);
}
END_TEST

START_TEST(bad_arguments_exit_2)
{
    const char *no_from[] = {NULL, "backtest", "--definition", def_path, "--brokers", "x", NULL};
    tl_output_t o = tl_steward(no_from, NULL);
    ck_assert_int_eq(o.status, 2);
    ck_assert_msg(tl_contains(o.err, "--from is required"), "got: %s", o.err);
    tl_output_free(&o);

    const char *bad_from[] = {NULL, "backtest", "--definition", def_path, "--brokers",
                              "x",  "--from",   "last tuesday", NULL};
    o = tl_steward(bad_from, NULL);
    ck_assert_int_eq(o.status, 2);
    ck_assert_msg(tl_contains(o.err, "--from is neither RFC 3339 nor a duration"), "got: %s",
                  o.err);
    tl_output_free(&o);

    char *broken = tl_write_file(defs_dir, "broken.json", "{\"process\": 1}");
    const char *bad_def[] = {NULL, "backtest", "--definition", broken, "--brokers",
                             "x",  "--from",   "1h",           NULL};
    o = tl_steward(bad_def, NULL);
    ck_assert_int_eq(o.status, 2);
    ck_assert_msg(tl_contains(o.err, "candidate definition is invalid"), "got: %s", o.err);
    tl_output_free(&o);
    free(broken);
}
END_TEST

Suite *backtest_suite(void)
{
    Suite *s = suite_create("backtest");
    TCase *tc = tcase_create("backtest");
    tcase_set_timeout(tc, 180);
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, backtest_raises_what_the_live_run_raised);
    tcase_add_test(tc, backtest_of_reordered_events_matches_the_live_run);
    tcase_add_test(tc, backtest_reports_rejections);
    tcase_add_test(tc, bad_arguments_exit_2);
    suite_add_tcase(s, tc);
    return s;
}
