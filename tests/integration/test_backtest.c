/*
 * test_backtest - trying a definition on retained events: the alerts it
 * would have raised (late steps and steps still open at the window's end),
 * nothing before the window, and no trace left in the live database.
 */
#include "testlib.h"

#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static char *prefix, *defs_dir, *def_path;

static void setup(void)
{
    char *base = tl_unique("bt");
    ck_assert_int_ge(asprintf(&prefix, "%s.", base), 0);
    free(base);
    defs_dir = strdup(tl_tmpdir());
    char *tpl_path = tl_source_path("tests/data/definitions/alert_order.json.in");
    char *tpl = tl_read_file(tpl_path);
    size_t cap = strlen(tpl) + 1024, len = 0;
    char *def = calloc(1, cap);
    for (const char *p = tpl; *p;) {
        const char *with = strncmp(p, "@P@", 3) == 0    ? prefix
                           : strncmp(p, "@D1@", 4) == 0 ? "2s"
                           : strncmp(p, "@D2@", 4) == 0 ? "1h"
                                                        : NULL;
        if (with != NULL) {
            len += (size_t) snprintf(def + len, cap - len, "%s", with);
            p += p[2] == '@' ? 3 : 4;
        } else {
            def[len++] = *p++;
        }
    }
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

START_TEST(backtest_reports_what_would_have_paged)
{
    char topics[3][256];
    const char *names[] = {"orders", "payments", "shipping"};
    const char *list[3];
    for (int i = 0; i < 3; i++) {
        snprintf(topics[i], sizeof topics[i], "%s%s", prefix, names[i]);
        list[i] = topics[i];
    }
    tl_kafka_create_topics(list, 3, 1);

    long long now = (long long) time(NULL) * 1000, t0 = now - 30 * 60 * 1000LL;
    tl_producer_t *p = tl_producer_new();
    send(p, "orders", "OrderPlaced", "D", t0 - 2 * 3600 * 1000LL); /* before the window */
    send(p, "orders", "OrderPlaced", "A", t0);
    send(p, "orders", "OrderPlaced", "B", t0);
    send(p, "orders", "OrderPlaced", "C", t0);
    send(p, "payments", "PaymentCaptured", "A", t0 + 1000); /* inside its 2s */
    send(p, "payments", "PaymentCaptured", "B", t0 + 5000); /* 3s late */
    tl_producer_free(p);

    const char *live = tl_db_create("backtest_live");
    PGconn *conn = tl_db_connect(live);
    char *before = tl_db_scalar(conn,
                                "SELECT count(*) FROM pg_database WHERE datname LIKE "
                                "'steward\\_backtest\\_%'",
                                0, NULL);
    const char *argv[] = {NULL,         "backtest", "--definition", def_path,
                          "--from",     "1h",       "--brokers",    tl_kafka_brokers(),
                          "--database", live,       "--json",       NULL};
    tl_output_t o = tl_steward(argv, NULL);
    ck_assert_msg(o.status == 0, "backtest exited %d: %s", o.status, o.err);
    json_error_t jerr;
    json_t *alerts = json_loads(o.out, 0, &jerr);
    ck_assert_msg(alerts != NULL, "not JSON: %s", o.out);
    ck_assert_int_eq(json_array_size(alerts), 2);
    char got[512] = "";
    size_t i, len = 0;
    json_t *a;
    json_array_foreach(alerts, i, a)
    {
        len += (size_t) snprintf(got + len, sizeof got - len, "%s%s:%s:%s", len ? " " : "",
                                 json_string_value(json_object_get(a, "key")),
                                 json_string_value(json_object_get(a, "state")),
                                 json_is_true(json_object_get(a, "open_at_end")) ? "open" : "late");
    }
    ck_assert_str_eq(got, "C:awaiting_payment:open B:awaiting_payment:late");
    json_decref(alerts);
    tl_output_free(&o);

    /* The live database is untouched and the scratch one is gone. */
    char *schema = tl_db_scalar(conn, "SELECT to_regclass('steward.instances') IS NULL", 0, NULL);
    ck_assert_str_eq(schema, "t");
    char *after = tl_db_scalar(conn,
                               "SELECT count(*) FROM pg_database WHERE datname LIKE "
                               "'steward\\_backtest\\_%'",
                               0, NULL);
    ck_assert_str_eq(after, before);
    free(schema);
    free(after);
    free(before);
    PQfinish(conn);
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
    tcase_add_test(tc, backtest_reports_what_would_have_paged);
    tcase_add_test(tc, bad_arguments_exit_2);
    suite_add_tcase(s, tc);
    return s;
}
