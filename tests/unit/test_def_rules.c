/*
 * test_def_rules - the rules a definition's parts must keep: references to
 * states, events and template variables; the state graph (reachable,
 * finishing, deadlines, terminal states, on_timeout, retry); and values
 * (durations, JSON pointers, mode, names, version).
 */
#include "definitions/def.h"
#include "test_def_support.h"

#include <check.h>
#include <string.h>

/* ---- references ---- */

START_TEST(test_unknown_state)
{
    /* The graph checks stay quiet: 'shipped' is unreachable only because of the typo. */
    EXPECT_ONLY(dt_with("/states/awaiting_dispatch/on/ShipmentDispatched", "\"shiped\""),
                "/states/awaiting_dispatch/on/ShipmentDispatched",
                "transition on ShipmentDispatched goes to unknown state 'shiped'",
                "(did you mean 'shipped'?)");
    def_problems_clear(&dt_problems);
    const char *msg =
        EXPECT_ONLY(dt_with("/states/awaiting_dispatch/on/ShipmentDispatched", "\"warehouse\""),
                    "/states/awaiting_dispatch/on/ShipmentDispatched", "unknown state 'warehouse'");
    ck_assert_ptr_null(strstr(msg, "did you mean"));
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/states/awaiting_payment/on_timeout", "\"canceled\""),
                "/states/awaiting_payment/on_timeout",
                "on_timeout goes to unknown state 'canceled'", "did you mean 'cancelled'");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/start/to", "\"awaiting_paymnet\""), "/start/to",
                "start goes to unknown state 'awaiting_paymnet'",
                "did you mean 'awaiting_payment'");
}
END_TEST

START_TEST(test_undeclared_event)
{
    EXPECT_ONLY(dt_with("/states/awaiting_dispatch/on/ShipmentDispatchd", "\"shipped\""),
                "/states/awaiting_dispatch/on/ShipmentDispatchd",
                "event 'ShipmentDispatchd' is not declared in 'events'",
                "did you mean 'ShipmentDispatched'");
    def_problems_clear(&dt_problems);
    /* OrderPlaced is then unused too: that is a second, true, problem. */
    EXPECT(dt_with("/start/on", "\"CartCheckedOut\""), "/start/on",
           "event 'CartCheckedOut' is not declared in 'events'", "declare it there");
}
END_TEST

START_TEST(test_unused_event)
{
    EXPECT_ONLY(dt_with("/events/RefundIssued", "{\"topic\": \"payments\"}"),
                "/events/RefundIssued", "event 'RefundIssued' is declared but", "uses it");
}
END_TEST

START_TEST(test_templates)
{
    const char *payload = "/states/awaiting_payment/command/payload";
    char ptr[128];

    snprintf(ptr, sizeof ptr, "%s/amount", payload);
    EXPECT_ONLY(dt_with(ptr, "\"${vars.totl}\""), ptr,
                "${vars.totl} names a variable that nothing captures",
                "did you mean ${vars.total}?");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with(ptr, "\"${vars.discount}\""), ptr, "${vars.discount}",
                "add it to the 'capture'");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with(ptr, "\"${amount}\""), ptr, "unknown template variable ${amount}",
                "${vars.NAME}");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with(ptr, "\"${kye}\""), ptr, "unknown template variable ${kye}",
                "did you mean ${key}?");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with(ptr, "\"total: ${vars.total\""), ptr, "unclosed '${'");
    def_problems_clear(&dt_problems);

    /* Nested values are checked, with their pointers. */
    snprintf(ptr, sizeof ptr, "%s/lines", payload);
    char nested[160];
    snprintf(nested, sizeof nested, "%s/lines/1/sku", payload);
    EXPECT_ONLY(dt_with(ptr, "[{\"sku\": \"${vars.total}\"}, {\"sku\": \"${vars.skus}\"}]"), nested,
                "${vars.skus}");
    def_problems_clear(&dt_problems);

    /* With no capture anywhere, a ${vars.X} is still refused, not taken
     * as "any name". */
    snprintf(ptr, sizeof ptr, "%s/amount", payload);
    json_t *bare = dt_base();
    dt_del(bare, "/start/capture");
    dt_del(bare, "/events/PaymentCaptured/capture");
    EXPECT_ONLY(bare, ptr, "${vars.total} names a variable that nothing captures",
                "add it to the 'capture'");
    def_problems_clear(&dt_problems);

    /* Every built-in and a start capture are fine; so is a lone '$'. (An
     * event's capture counts only on paths through it: test_active_fields.) */
    snprintf(ptr, sizeof ptr, "%s/note", payload);
    def_free(dt_expect_valid(dt_with(ptr, "\"${key} ${process} ${state} ${attempt} ${token} "
                                          "${vars.total} costs $5\"")));
}
END_TEST

/* A command on an event topic would come back to Steward as an event. */
START_TEST(test_command_topic_is_not_an_event_topic)
{
    const char *ptr = "/states/awaiting_payment/command/topic";
    EXPECT_ONLY(dt_with(ptr, "\"payments\""), ptr, "command topic 'payments'",
                "event 'PaymentCaptured' arrives", "a topic of their own");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with(ptr, "\"orders\""), ptr, "event 'OrderPlaced'");
    def_problems_clear(&dt_problems);
    def_free(dt_expect_valid(dt_with(ptr, "\"payments-commands\"")));
}
END_TEST

/* ---- the state graph ---- */

START_TEST(test_unreachable)
{
    EXPECT_ONLY(dt_with("/states/limbo", "{\"deadline\": \"1h\", \"on\": {\"ShipmentDispatched\": "
                                         "\"shipped\"}}"),
                "/states/limbo", "state 'limbo' is unreachable");
    def_problems_clear(&dt_problems);
    /* Reachable through on_timeout alone is reachable. */
    json_t *doc = dt_base();
    dt_put(doc, "/states/awaiting_payment/on_timeout", "\"limbo\"");
    dt_put(doc, "/states/limbo",
           "{\"deadline\": \"1h\", \"on\": {\"PaymentDeclined\": "
           "\"cancelled\"}}");
    def_free(dt_expect_valid(doc));
}
END_TEST

START_TEST(test_no_terminal)
{
    json_t *doc = dt_base();
    dt_put(doc, "/states/shipped", "{\"deadline\": \"1h\"}");
    dt_put(doc, "/states/cancelled", "{\"deadline\": \"1h\"}");
    dt_del(doc, "/states/awaiting_payment/on_timeout"); /* keep the on_timeout rules out of it */
    EXPECT_ONLY(doc, "/states", "no terminal state", "\"terminal\"");
}
END_TEST

START_TEST(test_cannot_finish)
{
    json_t *doc = dt_base();
    dt_put(doc, "/states/awaiting_payment/on/PaymentDeclined", "\"stuck\"");
    dt_put(doc, "/states/stuck",
           "{\"deadline\": \"1h\", \"on\": {\"PaymentDeclined\": \"stuck\"}}");
    EXPECT_ONLY(doc, "/states/stuck", "no terminal state can be reached from state 'stuck'");
    def_problems_clear(&dt_problems);

    /* Two states feeding each other with no way out. */
    doc = dt_base();
    dt_put(doc, "/states/awaiting_dispatch/on/ShipmentDispatched", "\"loop_b\"");
    dt_put(doc, "/states/loop_b",
           "{\"deadline\": \"1h\", \"on\": {\"PaymentCaptured\": \"awaiting_dispatch\"}}");
    dt_put(doc, "/events/Late", "{\"topic\": \"shipping\"}");
    dt_put(doc, "/states/awaiting_payment/on/Late", "\"shipped\"");
    EXPECT(doc, "/states/awaiting_dispatch", "no terminal state can be reached");
    ck_assert_uint_eq(dt_problems.n, 2);
    ck_assert_str_eq(dt_problems.items[1].pointer, "/states/loop_b");
}
END_TEST

START_TEST(test_deadline_required)
{
    EXPECT_ONLY(dt_without("/states/awaiting_dispatch/deadline"), "/states/awaiting_dispatch",
                "state 'awaiting_dispatch' is not terminal and has no deadline",
                "add a 'deadline'");
    def_problems_clear(&dt_problems);
    json_t *doc = dt_without("/states/awaiting_dispatch/deadline");
    dt_put(doc, "/deadline", "\"10d\"");
    def_free(dt_expect_valid(doc));
}
END_TEST

START_TEST(test_terminal_restrictions)
{
    static const char *const fields[][2] = {
        {"on", "{\"PaymentDeclined\": \"cancelled\"}"},
        {"command", "{\"topic\": \"t\", \"type\": \"T\"}"},
        {"retry", "{\"max\": 1}"},
        {"on_timeout", "\"cancelled\""},
        {"deadline", "\"1h\""},
    };
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        char ptr[64], words[64];
        snprintf(ptr, sizeof ptr, "/states/shipped/%s", fields[i][0]);
        snprintf(words, sizeof words, "cannot have '%s'", fields[i][0]);
        EXPECT_ONLY(dt_with(ptr, fields[i][1]), ptr, "terminal state 'shipped'", words,
                    "is finished");
        def_problems_clear(&dt_problems);
    }
    /* An owner on a terminal state is fine: someone owns the outcome. */
    def_free(dt_expect_valid(dt_with("/states/shipped/owner", "\"shipping\"")));
}
END_TEST

START_TEST(test_start_to_terminal)
{
    EXPECT(dt_with("/start/to", "\"shipped\""), "/start/to",
           "start goes to terminal state 'shipped'");
}
END_TEST

START_TEST(test_on_timeout_rules)
{
    EXPECT_ONLY(dt_with("/states/awaiting_payment/on_timeout", "\"awaiting_payment\""),
                "/states/awaiting_payment/on_timeout",
                "on_timeout goes back to state 'awaiting_payment' itself");
    def_problems_clear(&dt_problems);

    json_t *doc = dt_without("/states/awaiting_payment/deadline");
    dt_put(doc, "/deadline", "\"10d\"");
    EXPECT(doc, "/states/awaiting_payment/on_timeout",
           "on_timeout needs the state's own 'deadline'");
    ck_assert_uint_eq(dt_problems.n, 2); /* and retry, below */
    def_problems_clear(&dt_problems);

    doc = dt_without("/states/awaiting_payment/deadline");
    dt_del(doc, "/states/awaiting_payment/retry");
    dt_put(doc, "/deadline", "\"10d\"");
    EXPECT_ONLY(doc, "/states/awaiting_payment/on_timeout", "needs the state's own 'deadline'");
}
END_TEST

START_TEST(test_retry_rules)
{
    EXPECT_ONLY(dt_with("/states/awaiting_payment/retry/max", "-1"),
                "/states/awaiting_payment/retry/max", "retry.max must be 0 or more, got -1");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/states/awaiting_payment/retry/max", "\"2\""),
                "/states/awaiting_payment/retry/max", "must be an integer", "a string");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/states/awaiting_payment/retry/max", "1000000"),
                "/states/awaiting_payment/retry/max", "at most 1000");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_without("/states/awaiting_payment/command"), "/states/awaiting_payment/retry",
                "retry re-sends the state's command", "has no 'command'");
    def_problems_clear(&dt_problems);

    json_t *doc = dt_without("/states/awaiting_payment/deadline");
    dt_del(doc, "/states/awaiting_payment/on_timeout");
    dt_put(doc, "/deadline", "\"10d\"");
    EXPECT_ONLY(doc, "/states/awaiting_payment/retry", "retry needs the state's own 'deadline'");
    def_problems_clear(&dt_problems);

    def_t *def = dt_expect_valid(dt_with("/states/awaiting_payment/retry/max", "0"));
    ck_assert_int_eq(def->states[0].retry_max, 0);
    def_free(def);
}
END_TEST

/* ---- values ---- */

START_TEST(test_bad_duration)
{
    EXPECT_ONLY(dt_with("/states/awaiting_payment/deadline", "\"15x\""),
                "/states/awaiting_payment/deadline", "bad duration '15x'", "unknown unit 'x'");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/states/awaiting_payment/deadline", "\"0s\""),
                "/states/awaiting_payment/deadline", "bad duration '0s'", "longer than zero");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/states/awaiting_payment/deadline", "900"),
                "/states/awaiting_payment/deadline", "expected a duration string", "an integer");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/deadline", "\"1h1h\""), "/deadline", "bad duration '1h1h'",
                "appears twice");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/reorder_window", "\"5\""), "/reorder_window", "bad duration '5'",
                "no unit");
    def_problems_clear(&dt_problems);
    /* A bad process deadline is one problem, not one per state without a deadline. */
    json_t *doc = dt_without("/states/awaiting_dispatch/deadline");
    dt_put(doc, "/deadline", "\"ten days\"");
    EXPECT_ONLY(doc, "/deadline", "bad duration 'ten days'");
    def_problems_clear(&dt_problems);
    /* Longer than the daemon can store or add: refused, at 100 years. */
    EXPECT_ONLY(dt_with("/states/awaiting_payment/deadline", "\"200000000d\""),
                "/states/awaiting_payment/deadline", "bad duration '200000000d'",
                "at most 36525d (100 years)");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/deadline", "\"106751991167d\""), "/deadline", "at most 36525d");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/reorder_window", "\"36525d1ms\""), "/reorder_window", "at most 36525d");
    def_problems_clear(&dt_problems);
    def_free(dt_expect_valid(dt_with("/deadline", "\"36525d\"")));
}
END_TEST

START_TEST(test_bad_pointer)
{
    EXPECT_ONLY(dt_with("/key", "\"order_id\""), "/key", "bad JSON pointer 'order_id'",
                "starts with '/'", "did you mean '/order_id'");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/events/PaymentCaptured/key", "\"/a~2\""), "/events/PaymentCaptured/key",
                "bad JSON pointer '/a~2'", "'~'");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/start/capture/total", "\"\""), "/start/capture/total",
                "bad JSON pointer ''", "empty pointer");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/envelope", "{\"time\": \"occurred_at\"}"), "/envelope/time",
                "bad JSON pointer 'occurred_at'");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/key", "7"), "/key", "expected a JSON pointer string", "an integer");
    def_problems_clear(&dt_problems);
    char long_ptr[300] = "\"/";
    memset(long_ptr + 2, 'a', 257);
    strcpy(long_ptr + 259, "\"");
    EXPECT_ONLY(dt_with("/key", long_ptr), "/key", "bad JSON pointer", "258 characters",
                "limit of 256");
}
END_TEST

START_TEST(test_mode)
{
    EXPECT_ONLY(dt_with("/mode", "\"shdow\""), "/mode", "mode 'shdow' is not valid",
                "expected 'shadow' or 'active'", "did you mean 'shadow'");
    def_problems_clear(&dt_problems);
    const char *msg =
        EXPECT_ONLY(dt_with("/mode", "\"live\""), "/mode", "mode 'live' is not valid");
    ck_assert_ptr_null(strstr(msg, "did you mean"));
}
END_TEST

START_TEST(test_names)
{
    EXPECT_ONLY(dt_with("/process", "\"Order-Fulfilment\""), "/process",
                "process name 'Order-Fulfilment' is not valid", "lowercase");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/process", "\"1orders\""), "/process", "starting with a letter");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(
        dt_with("/process", "\"a234567890123456789012345678901234567890123456789012345678901234\""),
        "/process", "at most 63 characters");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/owner", "\"Fulfilment Team\""), "/owner",
                "team name 'Fulfilment Team' is not valid");
    def_problems_clear(&dt_problems);
    def_free(dt_expect_valid(dt_with("/owner", "\"order-ops\"")));
    EXPECT_ONLY(dt_with("/states/awaiting_payment/owner", "\"\""), "/states/awaiting_payment/owner",
                "must not be empty");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/events/OrderPlaced/topic", "\"new orders\""), "/events/OrderPlaced/topic",
                "'new orders' is not a valid Kafka topic name");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/states/awaiting_payment/command/topic", "\"cmd/payments\""),
                "/states/awaiting_payment/command/topic", "not a valid Kafka topic name");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/start/capture/1total", "\"/total\""), "/start/capture/1total",
                "variable name '1total' is not valid");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/states/shipped/terminal", "\"Shipped OK\""), "/states/shipped/terminal",
                "outcome 'Shipped OK' is not valid");
    def_problems_clear(&dt_problems);

    /* A state with a bad name: its references still resolve (by the same bad name). */
    json_t *doc = dt_base();
    dt_put(doc, "/states/awaiting_dispatch/on/ShipmentDispatched", "\"Shipped\"");
    dt_put(doc, "/states/Shipped", "{\"terminal\": \"success\"}");
    dt_del(doc, "/states/shipped");
    EXPECT_ONLY(doc, "/states/Shipped", "state name 'Shipped' is not valid");
}
END_TEST

START_TEST(test_version)
{
    static const char *const bad[] = {"0", "-1", "2147483648"};
    for (size_t i = 0; i < 3; i++) {
        char words[64];
        snprintf(words, sizeof words, "got %s", bad[i]);
        EXPECT_ONLY(dt_with("/version", bad[i]), "/version", "version must be a positive integer",
                    words);
        def_problems_clear(&dt_problems);
    }
    EXPECT_ONLY(dt_with("/version", "1.5"), "/version", "positive integer",
                "a number with a fraction");
    def_problems_clear(&dt_problems);
    def_t *def = dt_expect_valid(dt_with("/version", "7"));
    ck_assert_int_eq(def->version, 7);
    def_free(def);
}
END_TEST

Suite *def_rules_suite(void);
Suite *def_rules_suite(void)
{
    Suite *s = suite_create("def_rules");

    TCase *tc = tcase_create("references");
    tcase_add_checked_fixture(tc, dt_setup, dt_teardown);
    tcase_add_test(tc, test_unknown_state);
    tcase_add_test(tc, test_undeclared_event);
    tcase_add_test(tc, test_unused_event);
    tcase_add_test(tc, test_templates);
    tcase_add_test(tc, test_command_topic_is_not_an_event_topic);
    suite_add_tcase(s, tc);

    tc = tcase_create("graph");
    tcase_add_checked_fixture(tc, dt_setup, dt_teardown);
    tcase_add_test(tc, test_unreachable);
    tcase_add_test(tc, test_no_terminal);
    tcase_add_test(tc, test_cannot_finish);
    tcase_add_test(tc, test_deadline_required);
    tcase_add_test(tc, test_terminal_restrictions);
    tcase_add_test(tc, test_start_to_terminal);
    tcase_add_test(tc, test_on_timeout_rules);
    tcase_add_test(tc, test_retry_rules);
    suite_add_tcase(s, tc);

    tc = tcase_create("values");
    tcase_add_checked_fixture(tc, dt_setup, dt_teardown);
    tcase_add_test(tc, test_bad_duration);
    tcase_add_test(tc, test_bad_pointer);
    tcase_add_test(tc, test_mode);
    tcase_add_test(tc, test_names);
    tcase_add_test(tc, test_version);
    suite_add_tcase(s, tc);
    return s;
}
