/*
 * test_sim_def - steward-sim and the definition it simulates: the flow read
 * from the example (topics, the state after each event, deadlines), the
 * durations it writes, and the rewrite of a definition for one run.
 */
#include "definitions/def.h"
#include "definitions/duration.h"
#include "sim/sim.h"
#include "sim/sim_def.h"
#include "test_sim.h"
#include "testlib.h"

#include <check.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static def_t *load_example(void)
{
    return tl_def_load("definitions/examples/order_fulfilment.json");
}

START_TEST(test_flow)
{
    def_t *def = load_example();
    sim_def_flow_t flow;
    char err[512];
    ck_assert_int_eq(sim_def_flow(def, "t1.", NULL, &flow, err, sizeof err), ERR_OK);
    ck_assert_str_eq(flow.topic[SIM_ORDER_PLACED], "t1.orders");
    ck_assert_str_eq(flow.topic[SIM_REFUND_ISSUED], "t1.payments");
    ck_assert_str_eq(flow.topic[SIM_CUSTOMER_NOTIFIED], "t1.notifications");
    ck_assert_str_eq(flow.state_after[SIM_ORDER_PLACED], "awaiting_payment");
    ck_assert_str_eq(flow.expected_after[SIM_ORDER_PLACED],
                     "[\"PaymentCaptured\",\"PaymentDeclined\"]");
    ck_assert_str_eq(flow.state_after[SIM_PAYMENT_CAPTURED], "awaiting_stock");
    ck_assert_str_eq(flow.state_after[SIM_STOCK_UNAVAILABLE], "refunding");
    ck_assert_str_eq(flow.expected_after[SIM_STOCK_UNAVAILABLE], "[\"RefundIssued\"]");
    ck_assert_str_eq(flow.state_after[SIM_ORDER_DELIVERED], "delivered");
    ck_assert_str_eq(flow.state_after[SIM_CUSTOMER_NOTIFIED], "completed");
    ck_assert_int_eq(flow.deadline_ms[SIM_PAYMENT_CAPTURED], 15 * 60000);
    ck_assert_int_eq(flow.deadline_ms[SIM_ORDER_DELIVERED], 5 * 86400000LL);
    ck_assert_int_eq(flow.deadline_ms[SIM_ORDER_PLACED], 0);
    sim_def_flow_clear(&flow);

    ck_assert_int_eq(sim_def_flow(def, "t1.", "all-events", &flow, err, sizeof err), ERR_OK);
    for (int k = 0; k < SIM_N_KINDS; k++)
        ck_assert_str_eq(flow.topic[k], "all-events");
    sim_def_flow_clear(&flow);
    def_free(def);

    /* A definition without the flow is refused with a reason. */
    const char *doc = "{\"process\":\"p\",\"version\":1,\"mode\":\"shadow\",\"owner\":\"team\","
                      "\"key\":\"/order_id\",\"events\":{\"OrderPlaced\":{\"topic\":\"o\"}},"
                      "\"start\":{\"on\":\"OrderPlaced\",\"to\":\"open\"},"
                      "\"states\":{\"open\":{\"deadline\":\"1h\",\"on\":{\"OrderPlaced\":\"d\"}},"
                      "\"d\":{\"terminal\":\"success\"}}}";
    def_problems_t problems = {0};
    def = def_load_json(doc, strlen(doc), "small.json", &problems);
    ck_assert_ptr_nonnull(def);
    ck_assert_int_eq(sim_def_flow(def, "", NULL, &flow, err, sizeof err), ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(err, "PaymentCaptured"));
    def_free(def);
}
END_TEST

START_TEST(test_format_duration)
{
    char buf[64];
    ck_assert_str_eq(sim_def_format_duration(900, buf, sizeof buf), "900ms");
    ck_assert_str_eq(sim_def_format_duration(3600, buf, sizeof buf), "3s600ms");
    ck_assert_str_eq(sim_def_format_duration(864000, buf, sizeof buf), "14m24s");
    ck_assert_str_eq(sim_def_format_duration(0, buf, sizeof buf), "0s");
    ck_assert_str_eq(sim_def_format_duration(93784005, buf, sizeof buf), "1d2h3m4s5ms");
    ck_assert_int_eq(sim_def_scale_ms(15 * 60000, 0.001), 900);
    ck_assert_int_eq(sim_def_scale_ms(1000, 0.0001), 1); /* never zero */
    ck_assert_int_eq(sim_def_scale_ms(0, 0.5), 0);

    /* Every value survives format then parse, exactly. */
    for (int64_t ms = 1; ms < 400LL * 86400000; ms = ms * 3 + 7) {
        int64_t back;
        char err[128];
        EXPECT(
            duration_parse(sim_def_format_duration(ms, buf, sizeof buf), &back, err, sizeof err));
        EXPECT(back == ms);
    }
}
END_TEST

START_TEST(test_rewrite)
{
    char *path = tl_source_path("definitions/examples/order_fulfilment.json");
    json_error_t jerr;
    json_t *doc = json_load_file(path, 0, &jerr);
    ck_assert_ptr_nonnull(doc);
    char err[512];
    ck_assert_int_eq(sim_def_rewrite(doc, "run7.", NULL, 0.001, err, sizeof err), ERR_OK);

    ck_assert_str_eq(json_string_value(json_object_get(doc, "deadline")), "14m24s");
    ck_assert_str_eq(json_string_value(json_object_get(doc, "reorder_window")), "120ms");
    json_t *states = json_object_get(doc, "states");
    json_t *ap = json_object_get(states, "awaiting_payment");
    ck_assert_str_eq(json_string_value(json_object_get(ap, "deadline")), "900ms");
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(ap, "command"), "topic")),
                     "run7.payment-commands");
    ck_assert_str_eq(
        json_string_value(json_object_get(json_object_get(states, "awaiting_stock"), "deadline")),
        "3s600ms");
    ck_assert_str_eq(
        json_string_value(json_object_get(json_object_get(states, "shipped"), "deadline")),
        "7m12s");
    const char *name;
    json_t *ev;
    json_object_foreach(json_object_get(doc, "events"), name, ev)
    {
        const char *topic = json_string_value(json_object_get(ev, "topic"));
        ck_assert_msg(strncmp(topic, "run7.", 5) == 0, "%s: %s", name, topic);
    }
    /* Payload templates are left alone. */
    ck_assert_str_eq(json_string_value(json_object_get(
                         json_object_get(json_object_get(ap, "command"), "payload"), "amount")),
                     "${vars.total}");

    /* The result is a valid definition with the scaled deadlines. */
    char *text = json_dumps(doc, 0);
    def_problems_t problems = {0};
    def_t *def = def_load_json(text, strlen(text), "rewritten", &problems);
    ck_assert_msg(def != NULL, "%s", problems.n ? problems.items[0].message : "?");
    ck_assert_int_eq(def->states[def_find_state(def, "awaiting_payment")].deadline_ms, 900);
    ck_assert_int_eq(def->deadline_ms, 864000);
    ck_assert_str_eq(def->events[def_find_event(def, "OrderPlaced")].topic, "run7.orders");
    def_free(def);
    free(text);
    json_decref(doc);

    /* A single topic for every event; commands keep their own. */
    doc = json_load_file(path, 0, &jerr);
    ck_assert_int_eq(sim_def_rewrite(doc, "p.", "one", 1.0, err, sizeof err), ERR_OK);
    json_object_foreach(json_object_get(doc, "events"), name, ev)
    {
        ck_assert_str_eq(json_string_value(json_object_get(ev, "topic")), "one");
    }
    json_t *refunding = json_object_get(json_object_get(doc, "states"), "refunding");
    ck_assert_str_eq(json_string_value(json_object_get(refunding, "deadline")), "1d");
    ck_assert_str_eq(
        json_string_value(json_object_get(json_object_get(refunding, "command"), "topic")),
        "p.payment-commands");
    json_decref(doc);

    /* Not a definition. */
    doc = json_loads("{\"deadline\": 5}", 0, &jerr);
    ck_assert_int_eq(sim_def_rewrite(doc, "", NULL, 1.0, err, sizeof err), ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(err, "deadline"));
    json_decref(doc);
    free(path);
}
END_TEST

Suite *sim_def_suite(void)
{
    Suite *s = suite_create("sim_def");
    TCase *tc = tcase_create("sim_def");
    tcase_add_test(tc, test_flow);
    tcase_add_test(tc, test_format_duration);
    tcase_add_test(tc, test_rewrite);
    suite_add_tcase(s, tc);
    return s;
}
