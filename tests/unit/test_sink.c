/*
 * test_sink - the table of sink operations walked type by type: every
 * type has a row with a name, a validator and a body builder, the routes
 * accept it by that name, its bodies are JSON for every event it takes,
 * and every array by type covers it.
 */
#include "manager/runtime/metrics.h"
#include "manager/sinks/payload.h"
#include "manager/sinks/routes.h"
#include "manager/sinks/sink.h"
#include "testlib.h"

#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NOW 1795953600000LL /* 2026-11-29T12:00:00Z */

static const payload_alert_t alert = {
    .id = 7,
    .kind = "sequence",
    .process = "order_fulfilment",
    .key = "ORD-7",
    .state = "awaiting_payment",
    .owner = "payments",
    .summary = "order_fulfilment ORD-7: ShipmentDispatched out of sequence",
    .dedup_key = "steward:sequence:order_fulfilment:ORD-7:1",
    .opened_at = "2026-11-29T11:00:00.000Z",
};

/* Takes text; fails the test unless it is JSON. */
static void assert_json(char *text, const char *type, const char *what)
{
    ck_assert_msg(text != NULL, "%s: no %s body", type, what);
    json_error_t jerr;
    json_t *doc = json_loads(text, 0, &jerr);
    ck_assert_msg(doc != NULL, "%s: %s body is not JSON (%s): %s", type, what, jerr.text, text);
    json_decref(doc);
    free(text);
}

START_TEST(every_type_has_a_complete_row)
{
    for (int t = 0; t < SINK_N_TYPES; t++) {
        const sink_ops_t *ops = sink_ops((sink_type_t) t);
        ck_assert_msg(ops != NULL, "sink type %d has no row in the table", t);
        ck_assert_msg(ops->name != NULL && *ops->name != '\0', "sink type %d has no name", t);
        ck_assert_msg(ops->validate != NULL, "%s has no validator", ops->name);
        ck_assert_msg(ops->body != NULL, "%s has no body builder", ops->name);
        ck_assert_msg(ops->judge == NULL || ops->path != NULL, "%s is posted without a path",
                      ops->name);
        ck_assert_msg(ops->judge != NULL || (!ops->acknowledges && ops->group == NULL &&
                                             ops->refresh == NULL && !ops->retry_after),
                      "%s is written, not posted, yet has HTTP-only operations", ops->name);
        ck_assert_str_eq(sink_type_name((sink_type_t) t), ops->name);
        ck_assert_int_eq(sink_type_from_name(ops->name), t);
        for (int o = 0; o < t; o++)
            ck_assert_str_ne(sink_ops((sink_type_t) o)->name, ops->name);
    }
    ck_assert_ptr_null(sink_ops(SINK_N_TYPES));
    ck_assert_str_eq(sink_type_name(SINK_N_TYPES), "?");
    ck_assert_int_eq(sink_type_from_name("sms"), SINK_N_TYPES);
    ck_assert_int_eq(sink_type_from_name(NULL), SINK_N_TYPES);
}
END_TEST

START_TEST(metric_arrays_cover_every_type)
{
    ck_assert_uint_eq(sizeof metrics.notifications / sizeof metrics.notifications[0], SINK_N_TYPES);
    ck_assert_uint_eq(sizeof metrics.notifications[0] / sizeof metrics.notifications[0][0],
                      SINK_N_VERDICTS);
    for (int v = 0; v < SINK_N_VERDICTS; v++)
        ck_assert_str_ne(sink_verdict_name((sink_verdict_t) v), "?");
    ck_assert_str_eq(sink_verdict_name(SINK_DELIVERED), "delivered");
    ck_assert_str_eq(sink_verdict_name(SINK_RETRY), "retried");
    ck_assert_str_eq(sink_verdict_name(SINK_FAILED), "failed");
    ck_assert_str_eq(sink_verdict_name(SINK_N_VERDICTS), "?");
}
END_TEST

START_TEST(every_type_builds_its_bodies)
{
    for (int t = 0; t < SINK_N_TYPES; t++) {
        const sink_ops_t *ops = sink_ops((sink_type_t) t);
        char err[512] = "";
        sink_t sink = {.name = strdup("s"),
                       .type = (sink_type_t) t,
                       .url = strdup("http://sink.invalid"),
                       .routing_key = strdup("R0UTING"),
                       .severity = strdup("error")};
        ck_assert_msg(ops->validate(&sink, "routes.default[0]", err, sizeof err), "%s: %s",
                      ops->name, err);
        assert_json(ops->body(&sink, &alert, SINK_TRIGGER, NOW, 60000), ops->name, "trigger");
        assert_json(ops->body(&sink, &alert, SINK_RESOLVE, NOW, 60000), ops->name, "resolve");
        if (ops->acknowledges)
            assert_json(ops->body(&sink, &alert, SINK_ACKNOWLEDGE, NOW, 60000), ops->name,
                        "acknowledge");
        if (ops->group != NULL)
            assert_json(ops->group(&sink, &alert, 1, "steward:sequence:g", NOW), ops->name,
                        "group");
        if (ops->refresh != NULL)
            assert_json(ops->refresh(&sink, &alert, 1, NOW, 60000), ops->name, "refresh");
        if (ops->judge != NULL) {
            ck_assert_int_eq(ops->judge(202), SINK_DELIVERED);
            ck_assert_int_eq(ops->judge(0), SINK_RETRY);
        }
        free(sink.name);
        free(sink.url);
        free(sink.routing_key);
        free(sink.severity);
    }
}
END_TEST

/* The routes know every type by its row's name, and ask its validator. */
START_TEST(routes_accept_every_type_by_name)
{
    char text[512], err[512], types[256];
    for (int t = 0; t < SINK_N_TYPES; t++) {
        const char *name = sink_type_name((sink_type_t) t);
        snprintf(text, sizeof text,
                 "{\"default\":[{\"type\":\"%s\",\"url\":\"http://sink.invalid\","
                 "\"routing_key\":\"R0UTING\"}]}",
                 name);
        json_t *doc = json_loads(text, 0, NULL);
        route_table_t *table = route_table_new(doc, err, sizeof err);
        json_decref(doc);
        ck_assert_msg(table != NULL, "%s: %s", name, err);
        size_t n = 0;
        const sink_t *const *sinks = route_sinks(table, "default", &n);
        ck_assert_uint_eq(n, 1);
        ck_assert_int_eq(sinks[0]->type, t);
        route_table_free(table);
    }

    json_t *doc = json_loads("{\"default\":[{\"type\":\"sms\"}]}", 0, NULL);
    ck_assert_ptr_null(route_table_new(doc, err, sizeof err));
    json_decref(doc);
    ck_assert_str_eq(sink_type_list(types, sizeof types),
                     "log, webhook, pagerduty or alertmanager");
    ck_assert_msg(strstr(err, types) != NULL, "%s", err);
    for (int t = 0; t < SINK_N_TYPES; t++)
        ck_assert_msg(strstr(err, sink_type_name((sink_type_t) t)) != NULL, "%s", err);
}
END_TEST

Suite *sink_suite(void)
{
    Suite *s = suite_create("sink");
    TCase *tc = tcase_create("sink");
    tcase_add_test(tc, every_type_has_a_complete_row);
    tcase_add_test(tc, metric_arrays_cover_every_type);
    tcase_add_test(tc, every_type_builds_its_bodies);
    tcase_add_test(tc, routes_accept_every_type_by_name);
    suite_add_tcase(s, tc);
    return s;
}
