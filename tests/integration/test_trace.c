/*
 * test_trace - W3C trace context end to end, on the real broker, PostgreSQL
 * and Alertmanager: an event with a `traceparent` Kafka header, one with
 * the CloudEvents extension (binary mode's ce_traceparent) and one with a
 * malformed traceparent (judged all the same, without a trace), and one
 * parked (it came before its instance's start) that keeps its traceparent
 * in steward.parked until it is judged. Their history rows keep the
 * traceparent; each stall's page carries the trace
 * id and the link tracing.link builds, in the webhook body and in
 * Alertmanager's annotations; `steward inspect` prints both.
 *
 *   trace       the three events, their history rows, pages and inspect
 */
#include "receiver.h"
#include "testlib.h"
#include "world.h"

#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TRACE_A "4bf92f3577b34da6a3ce929d0e0e4736"
#define TRACE_B "0af7651916cd43dd8448eb211c80319c"
#define TP_A    "00-" TRACE_A "-00f067aa0ba902b7-01"
#define TP_B    "00-" TRACE_B "-b7ad6b7169203331-01"
#define TP_D    "00-" TRACE_B "-1111111111111111-00"
#define LINK    "https://tempo.example/trace/"

static tw_world_t w;

static void teardown(void)
{
    tw_teardown(&w);
}

/* The webhook body among the receiver's first n whose alert's key is `key`
 * (new). */
static json_t *page_of(rcv_t *r, size_t n, const char *key)
{
    for (size_t i = 0; i < n; i++) {
        rcv_request_t req = rcv_get(r, i);
        json_t *doc = json_loads(req.body, 0, NULL);
        rcv_request_clear(&req);
        const char *k = json_string_value(json_object_get(json_object_get(doc, "alert"), "key"));
        if (k != NULL && strcmp(k, key) == 0)
            return doc;
        json_decref(doc);
    }
    ck_abort_msg("no page for %s among %zu", key, n);
    return NULL;
}

/* The annotations Alertmanager shows for the alert labelled key=`key` (new). */
static json_t *am_annotations(const char *am, const char *key)
{
    char url[512];
    long status = 0;
    snprintf(url, sizeof url, "%s/api/v2/alerts", am);
    char *body = tl_http_get(url, &status);
    ck_assert_int_eq(status, 200);
    json_t *list = json_loads(body, 0, NULL);
    free(body);
    ck_assert_ptr_nonnull(list);
    size_t i;
    json_t *alert;
    json_array_foreach(list, i, alert)
    {
        const char *k = json_string_value(json_object_get(json_object_get(alert, "labels"), "key"));
        if (k != NULL && strcmp(k, key) == 0) {
            json_t *annotations = json_incref(json_object_get(alert, "annotations"));
            json_decref(list);
            return annotations;
        }
    }
    json_decref(list);
    ck_abort_msg("Alertmanager has no alert for %s", key);
    return NULL;
}

static const char *text(const json_t *obj, const char *name)
{
    return json_string_value(json_object_get(obj, name));
}

START_TEST(events_pages_and_inspect_carry_the_trace)
{
    const char *am = getenv("STEWARD_TEST_ALERTMANAGER_URL");
    ck_assert_msg(am != NULL && *am, "STEWARD_TEST_ALERTMANAGER_URL is not set: run through "
                                     "scripts/test");
    rcv_t *r = rcv_new();
    tw_init(&w, "trace");
    free(tw_write_template(&w, "tests/data/definitions/alert_order.json.in", "alert_order.json",
                           TW_LIST("@D1@", "2s", "@D2@", "1h")));
    tw_create_topics(&w, TW_LIST("orders", "payments", "shipping"), 1);
    tw_migrate(&w);

    char routes[1024];
    snprintf(routes, sizeof routes,
             "{\"payments\":[{\"type\":\"webhook\",\"name\":\"hook\",\"url\":\"%s/hook\"},"
             "{\"type\":\"alertmanager\",\"name\":\"am\",\"url\":\"%s\"}],"
             "\"default\":[{\"type\":\"log\"}]}",
             rcv_url(r), am);
    json_t *cfg = tw_config(&w, "alert_order.json");
    json_t *parts = json_pack("{s:s, s:{s:s, s:s}, s:{s:s, s:s, s:s}, s:{s:s}, s:o, s:{s:s}}",
                              "brokers", tl_kafka_brokers(), "scheduler", "interval", "200ms",
                              "grace", "200ms", "notifier", "interval", "100ms", "timeout", "2s",
                              "alertmanager_resend", "1s", "http", "listen", "", "routes",
                              json_loads(routes, 0, NULL), "tracing", "link", LINK "${trace_id}");
    ck_assert_int_eq(json_object_update(cfg, parts), 0);
    json_decref(parts);
    tw_config_write(&w, cfg);
    w.pids[0] = tw_spawn(&w, NULL);
    tw_wait(&w, "SELECT count(*) FROM steward.offsets WHERE consumer_group = $1", TW_LIST(w.group),
            "3", 60, "partitions claimed");

    char *a = tl_unique("ORD-A-"), *b = tl_unique("ORD-B-"), *c = tl_unique("ORD-C-");
    char value[256], id[128], *orders = tw_topic(&w, "orders");
    tl_producer_t *p = tl_producer_new();
    /* A: plain JSON, the W3C header a tracing library sets */
    snprintf(value, sizeof value, "{\"type\":\"OrderPlaced\",\"id\":\"p-%s\",\"order_id\":\"%s\"}",
             a, a);
    tl_produce(p, orders, -1, value, -1, TW_LIST("traceparent", TP_A), 0);
    /* B: a binary-mode CloudEvent with the distributed-tracing extension */
    snprintf(value, sizeof value, "{\"order_id\":\"%s\"}", b);
    snprintf(id, sizeof id, "p-%s", b);
    tl_produce(p, orders, -1, value, -1,
               TW_LIST("ce_specversion", "1.0", "ce_type", "OrderPlaced", "ce_id", id, "ce_source",
                       "shop", "ce_traceparent", TP_B),
               0);
    /* C: a malformed traceparent (zero span id): ignored, not rejected */
    snprintf(value, sizeof value, "{\"type\":\"OrderPlaced\",\"id\":\"p-%s\",\"order_id\":\"%s\"}",
             c, c);
    tl_produce(p, orders, -1, value, -1,
               TW_LIST("traceparent", "00-" TRACE_A "-0000000000000000-01"), 0);
    tl_producer_free(p);
    free(orders);

    char keys[512];
    snprintf(keys, sizeof keys, "{%s,%s,%s}", a, b, c);
    tw_wait(&w,
            "SELECT count(*) FROM steward.history WHERE key = ANY($1::text[]) "
            "AND outcome = 'started'",
            TW_LIST(keys), "3", 30, "three instances started");
    tw_expect(&w,
              "SELECT string_agg(coalesce(traceparent, '-'), ' ' ORDER BY key) "
              "FROM steward.history WHERE key = ANY($1::text[]) AND outcome = 'started'",
              TW_LIST(keys), TP_A " " TP_B " -");
    tw_expect(&w, "SELECT count(*) FROM steward.rejected", NULL, "0");

    /* D: the payment first, parked with its trace; then the start, which
     * takes it from steward.parked into a history row with the trace. */
    char *d = tl_unique("ORD-D-"), *payments = tw_topic(&w, "payments");
    orders = tw_topic(&w, "orders");
    p = tl_producer_new();
    snprintf(value, sizeof value,
             "{\"type\":\"PaymentCaptured\",\"id\":\"c-%s\",\"order_id\":\"%s\"}", d, d);
    tl_produce(p, payments, -1, value, -1, TW_LIST("traceparent", TP_D), 0);
    tl_producer_free(p);
    tw_wait(&w, "SELECT traceparent FROM steward.parked WHERE key = $1", TW_LIST(d), TP_D, 30,
            "the early payment parked with its traceparent");
    p = tl_producer_new();
    snprintf(value, sizeof value, "{\"type\":\"OrderPlaced\",\"id\":\"p-%s\",\"order_id\":\"%s\"}",
             d, d);
    tl_produce(p, orders, -1, value, -1, NULL, 0);
    tl_producer_free(p);
    tw_wait(&w,
            "SELECT traceparent FROM steward.history WHERE key = $1 AND replayed "
            "AND outcome = 'advanced'",
            TW_LIST(d), TP_D, 30, "the parked payment judged with its traceparent");
    free(d);
    free(payments);
    free(orders);

    /* Each stall pages; A's and B's pages carry their trace and its link. */
    ck_assert_msg(rcv_wait(r, 3, 30000), "three pages within 30 s");
    json_t *pa = page_of(r, 3, a), *pb = page_of(r, 3, b), *pc = page_of(r, 3, c);
    json_t *alert_a = json_object_get(pa, "alert"), *alert_b = json_object_get(pb, "alert");
    json_t *alert_c = json_object_get(pc, "alert");
    ck_assert_str_eq(text(alert_a, "trace_id"), TRACE_A);
    ck_assert_str_eq(text(alert_a, "trace_link"), LINK TRACE_A);
    ck_assert_str_eq(text(alert_b, "trace_id"), TRACE_B);
    ck_assert_str_eq(text(alert_b, "trace_link"), LINK TRACE_B);
    ck_assert(json_is_null(json_object_get(alert_c, "trace_id")));
    ck_assert(json_is_null(json_object_get(alert_c, "trace_link")));
    json_decref(pa);
    json_decref(pb);
    json_decref(pc);

    tl_wait_am(am, a, "active", 20);
    tl_wait_am(am, b, "active", 20);
    json_t *am_a = am_annotations(am, a), *am_b = am_annotations(am, b);
    ck_assert_str_eq(text(am_a, "trace_id"), TRACE_A);
    ck_assert_str_eq(text(am_a, "trace_link"), LINK TRACE_A);
    ck_assert_str_eq(text(am_b, "trace_id"), TRACE_B);
    ck_assert_str_eq(text(am_b, "trace_link"), LINK TRACE_B);
    json_decref(am_a);
    json_decref(am_b);

    /* inspect: the trace id under the row, then its link */
    tl_output_t o =
        tl_steward(TW_LIST(NULL, "inspect", "--config", w.config, "alert_order", a), NULL);
    ck_assert_msg(o.status == 0, "inspect exit %d: %s", o.status, o.err);
    ck_assert_msg(tl_contains(o.out, "trace " TRACE_A "  " LINK TRACE_A), "inspect:\n%s", o.out);
    tl_output_free(&o);
    o = tl_steward(TW_LIST(NULL, "inspect", "--json", "--config", w.config, "alert_order", a),
                   NULL);
    ck_assert_msg(o.status == 0, "inspect --json exit %d: %s", o.status, o.err);
    json_t *inst = json_loads(o.out, 0, NULL);
    ck_assert_ptr_nonnull(inst);
    json_t *history = json_object_get(inst, "history");
    ck_assert_str_eq(text(json_array_get(history, 0), "trace_id"), TRACE_A);
    json_decref(inst);
    tl_output_free(&o);

    free(a);
    free(b);
    free(c);
    rcv_free(r);
}
END_TEST

Suite *trace_suite(void)
{
    Suite *s = suite_create("trace");
    TCase *tc = tcase_create("trace");
    tcase_set_timeout(tc, 120);
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_add_test(tc, events_pages_and_inspect_carry_the_trace);
    suite_add_tcase(s, tc);
    return s;
}
