/*
 * test_def_document - a valid definition and what it loads into (base.json
 * and the shipped examples), and a document that is not one: bad JSON, a
 * duplicate key, a missing, mistyped or unknown field, every problem
 * reported in one run.
 */
#include "definitions/def.h"
#include "test_def_support.h"
#include "testlib.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

/* ---- a valid definition and what it loads into ---- */

START_TEST(test_base_valid)
{
    def_t *def = dt_expect_valid(dt_base());
    ck_assert_str_eq(def->process, "order_fulfilment");
    ck_assert_int_eq(def->version, 1);
    ck_assert_int_eq(def->mode, DEF_MODE_SHADOW);
    ck_assert_str_eq(def->owner, "fulfilment");
    ck_assert_ptr_null(def->description);
    ck_assert_str_eq(def->envelope.key_pointer, "/order_id");
    ck_assert_str_eq(def->envelope.type_pointer, "/type");
    ck_assert_str_eq(def->envelope.id_pointer, "/id");
    ck_assert_ptr_null(def->envelope.time_pointer);
    ck_assert(def->deadline_ms == 0);
    ck_assert(def->reorder_window_ms == 5 * 60 * 1000);
    ck_assert_str_eq(def->source, "test.json");
    ck_assert_ptr_nonnull(def->document);

    /* Events in document order, keys defaulted to the process's. */
    ck_assert_uint_eq(def->n_events, 4);
    ck_assert_str_eq(def->events[0].name, "OrderPlaced");
    ck_assert_str_eq(def->events[0].topic, "orders");
    ck_assert_str_eq(def->events[0].envelope.key_pointer, "/order_id");
    ck_assert_str_eq(def->events[1].name, "PaymentCaptured");
    ck_assert_str_eq(def->events[1].envelope.key_pointer, "/payment/order_id");
    ck_assert_uint_eq(def->events[1].n_captures, 1);
    ck_assert_str_eq(def->events[1].captures[0].var, "payment_id");
    ck_assert_str_eq(def->events[1].captures[0].pointer, "/payment/id");
    ck_assert_str_eq(def->events[3].name, "ShipmentDispatched");

    ck_assert_uint_eq(def->start_event, 0);
    ck_assert_uint_eq(def->start_state, 0);
    ck_assert_uint_eq(def->n_start_captures, 1);
    ck_assert_str_eq(def->start_captures[0].var, "total");
    ck_assert_str_eq(def->start_captures[0].pointer, "/total");

    /* States in document order. */
    ck_assert_uint_eq(def->n_states, 4);
    const def_state_t *pay = &def->states[0];
    ck_assert_str_eq(pay->name, "awaiting_payment");
    ck_assert_ptr_null(pay->terminal);
    ck_assert(pay->deadline_ms == 15 * 60 * 1000);
    ck_assert_str_eq(pay->owner, "payments");
    ck_assert_uint_eq(pay->n_on, 2);
    ck_assert_uint_eq(pay->on[0].event, 1);
    ck_assert_uint_eq(pay->on[0].to, 1);
    ck_assert_uint_eq(pay->on[1].event, 2);
    ck_assert_uint_eq(pay->on[1].to, 3);
    ck_assert_ptr_nonnull(pay->command);
    ck_assert_str_eq(pay->command->topic, "payment-commands");
    ck_assert_str_eq(pay->command->type, "CapturePayment");
    ck_assert_str_eq(json_string_value(json_object_get(pay->command->payload, "amount")),
                     "${vars.total}");
    ck_assert_int_eq(pay->retry_max, 2);
    ck_assert_int_eq(pay->on_timeout, 3);

    const def_state_t *dispatch = &def->states[1];
    ck_assert_ptr_null(dispatch->owner);
    ck_assert_ptr_null(dispatch->command);
    ck_assert_int_eq(dispatch->retry_max, 0);
    ck_assert_int_eq(dispatch->on_timeout, -1);
    ck_assert(dispatch->deadline_ms == 2 * 86400000LL);

    ck_assert_str_eq(def->states[2].terminal, "success");
    ck_assert_str_eq(def->states[3].terminal, "cancelled");
    ck_assert(def->states[2].deadline_ms == 0);
    def_free(def);
}
END_TEST

START_TEST(test_lookups)
{
    def_t *def = dt_expect_valid(dt_base());
    ck_assert_int_eq(def_find_state(def, "shipped"), 2);
    ck_assert_int_eq(def_find_state(def, "nowhere"), -1);
    ck_assert_int_eq(def_find_event(def, "PaymentDeclined"), 2);
    ck_assert_int_eq(def_find_event(def, "paymentdeclined"), -1);

    const def_transition_t *t = def_transition(def, 0, 2);
    ck_assert_ptr_nonnull(t);
    ck_assert_uint_eq(t->to, 3);
    ck_assert_ptr_null(def_transition(def, 0, 3));  /* awaiting_payment ignores shipments */
    ck_assert_ptr_null(def_transition(def, 2, 0));  /* terminal: nothing */
    ck_assert_ptr_null(def_transition(def, 99, 0)); /* no such state */

    ck_assert_str_eq(def_state_owner(def, 0), "payments");
    ck_assert_str_eq(def_state_owner(def, 1), "fulfilment"); /* falls back to the process */
    def_free(def);
    def_free(NULL);
}
END_TEST

START_TEST(test_optional_fields)
{
    json_t *doc = dt_base();
    dt_put(doc, "/description", "\"Orders from checkout to the door.\"");
    dt_put(doc, "/deadline", "\"10d\"");
    dt_put(doc, "/reorder_window", "\"0s\"");
    dt_put(doc, "/mode", "\"active\"");
    dt_put(doc, "/envelope",
           "{\"type\": \"/event_type\", \"id\": \"/meta/id\", \"time\": \"/at\"}");
    dt_put(doc, "/states/awaiting_dispatch/description", "\"Waiting for the warehouse.\"");
    dt_del(doc, "/states/awaiting_dispatch/deadline"); /* the process deadline covers it */
    def_t *def = dt_expect_valid(doc);
    ck_assert_str_eq(def->description, "Orders from checkout to the door.");
    ck_assert(def->deadline_ms == 10 * 86400000LL);
    ck_assert(def->reorder_window_ms == 0);
    ck_assert_int_eq(def->mode, DEF_MODE_ACTIVE);
    ck_assert_str_eq(def->envelope.type_pointer, "/event_type");
    ck_assert_str_eq(def->envelope.id_pointer, "/meta/id");
    ck_assert_str_eq(def->envelope.time_pointer, "/at");
    ck_assert(def->states[1].deadline_ms == 0);
    def_free(def);
}
END_TEST

START_TEST(test_examples)
{
    char *path = tl_source_path("definitions/examples/order_fulfilment.json");
    def_t *def = def_load_file(path, &dt_problems);
    ck_assert_msg(def != NULL, "%s invalid:%s", path, dt_listing());
    free(path);

    ck_assert_str_eq(def->process, "order_fulfilment");
    ck_assert_int_eq(def->mode, DEF_MODE_SHADOW);
    ck_assert_str_eq(def->owner, "fulfilment");

    /* Events from six services' topics, each with its team owning a step. */
    static const char *const services[] = {"orders",   "payments", "inventory",
                                           "shipping", "delivery", "notifications"};
    for (size_t s = 0; s < 6; s++) {
        bool topic = false, owner = false;
        for (size_t i = 0; i < def->n_events; i++)
            topic = topic || strcmp(def->events[i].topic, services[s]) == 0;
        for (size_t i = 0; i < def->n_states; i++)
            owner = owner || strcmp(def_state_owner(def, i), services[s]) == 0;
        ck_assert_msg(topic, "no event on topic %s", services[s]);
        ck_assert_msg(owner, "no state owned by %s", services[s]);
    }

    /* The decline path and the compensation path. */
    long pay = def_find_state(def, "awaiting_payment");
    long stock = def_find_state(def, "awaiting_stock");
    long refunding = def_find_state(def, "refunding");
    ck_assert_int_ge(pay, 0);
    ck_assert_int_ge(stock, 0);
    ck_assert_int_ge(refunding, 0);
    const def_transition_t *t =
        def_transition(def, (size_t) pay, (size_t) def_find_event(def, "PaymentDeclined"));
    ck_assert_ptr_nonnull(t);
    ck_assert_str_eq(def->states[t->to].terminal, "cancelled");
    t = def_transition(def, (size_t) stock, (size_t) def_find_event(def, "StockUnavailable"));
    ck_assert_ptr_nonnull(t);
    ck_assert_uint_eq(t->to, (size_t) refunding);
    t = def_transition(def, (size_t) refunding, (size_t) def_find_event(def, "RefundIssued"));
    ck_assert_ptr_nonnull(t);
    ck_assert_str_eq(def->states[t->to].terminal, "refunded");

    /* Every non-terminal state has an owner and a deadline of its own; some send commands. */
    size_t commands = 0;
    for (size_t i = 0; i < def->n_states; i++) {
        if (def->states[i].terminal != NULL)
            continue;
        ck_assert_ptr_nonnull(def->states[i].owner);
        ck_assert(def->states[i].deadline_ms > 0);
        commands += def->states[i].command != NULL;
    }
    ck_assert_uint_ge(commands, 1);
    def_free(def);

    path = tl_source_path("definitions/examples/loan_application.json");
    def = def_load_file(path, &dt_problems);
    ck_assert_msg(def != NULL, "%s invalid:%s", path, dt_listing());
    free(path);
    ck_assert_str_eq(def->envelope.time_pointer, "/occurred_at");
    def_free(def);
}
END_TEST

/* ---- the document ---- */

START_TEST(test_syntax_error)
{
    const char *text = "{\n  \"process\": \"x\",\n  \"version\": 1,\n}\n";
    ck_assert_ptr_null(def_load_json(text, strlen(text), "broken.json", &dt_problems));
    ck_assert_uint_eq(dt_problems.n, 1);
    ck_assert_str_eq(dt_problems.items[0].file, "broken.json");
    ck_assert_str_eq(dt_problems.items[0].pointer, "");
    ck_assert_msg(strstr(dt_problems.items[0].message, "invalid JSON at line 4, column 1") != NULL,
                  "%s", dt_problems.items[0].message);
}
END_TEST

START_TEST(test_duplicate_key)
{
    const char *text = "{\"process\": \"a\",\n \"process\": \"b\"}";
    ck_assert_ptr_null(def_load_json(text, strlen(text), "dup.json", &dt_problems));
    ck_assert_uint_eq(dt_problems.n, 1);
    ck_assert_str_eq(dt_problems.items[0].pointer, "");
    ck_assert_ptr_nonnull(strstr(dt_problems.items[0].message, "line 2"));
    ck_assert_ptr_nonnull(strstr(dt_problems.items[0].message, "duplicate object key"));
}
END_TEST

START_TEST(test_not_an_object)
{
    const char *text = "[1, 2]";
    ck_assert_ptr_null(def_load_json(text, strlen(text), "arr.json", &dt_problems));
    ck_assert_uint_eq(dt_problems.n, 1);
    ck_assert_str_eq(dt_problems.items[0].pointer, "");
    ck_assert_ptr_nonnull(strstr(dt_problems.items[0].message, "expected a JSON object"));
    ck_assert_ptr_nonnull(strstr(dt_problems.items[0].message, "an array"));
}
END_TEST

START_TEST(test_missing_required)
{
    static const char *const fields[] = {"process", "version", "mode",  "owner",
                                         "key",     "events",  "start", "states"};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        char ptr[64], words[64];
        snprintf(ptr, sizeof ptr, "/%s", fields[i]);
        snprintf(words, sizeof words, "missing required field '%s'", fields[i]);
        EXPECT(dt_without(ptr), "", words);
        def_problems_clear(&dt_problems);
    }
    EXPECT_ONLY(dt_without("/events/OrderPlaced/topic"), "/events/OrderPlaced",
                "missing required field 'topic'");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_without("/start/to"), "/start", "missing required field 'to'");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_without("/states/awaiting_payment/command/type"),
                "/states/awaiting_payment/command", "missing required field 'type'");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/states/awaiting_payment/retry", "{}"), "/states/awaiting_payment/retry",
                "missing required field 'max'");
}
END_TEST

START_TEST(test_wrong_types)
{
    EXPECT_ONLY(dt_with("/owner", "5"), "/owner", "expected a string, got an integer");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/description", "[\"a\"]"), "/description", "expected a string",
                "an array");
    def_problems_clear(&dt_problems);
    EXPECT(dt_with("/events", "[]"), "/events", "expected an object", "an array");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/events/OrderPlaced", "\"orders\""), "/events/OrderPlaced",
                "expected an object", "a string");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/start", "\"OrderPlaced\""), "/start", "expected an object");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/states/shipped/terminal", "true"), "/states/shipped/terminal",
                "naming the outcome", "a boolean");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/states/awaiting_dispatch/on", "[\"shipped\"]"),
                "/states/awaiting_dispatch/on", "expected an object", "an array");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/states/awaiting_dispatch/on/ShipmentDispatched", "2"),
                "/states/awaiting_dispatch/on/ShipmentDispatched", "expected the name of the state",
                "an integer");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/events/PaymentCaptured/capture", "\"/payment/id\""),
                "/events/PaymentCaptured/capture", "expected an object mapping variable names");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/states/awaiting_payment/command/payload", "\"x\""),
                "/states/awaiting_payment/command/payload", "expected an object");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/states/awaiting_dispatch", "null"), "/states/awaiting_dispatch",
                "expected an object describing the state", "null");
}
END_TEST

START_TEST(test_unknown_fields)
{
    const char *msg = EXPECT_ONLY(dt_with("/states/awaiting_dispatch/deadlin", "\"1h\""),
                                  "/states/awaiting_dispatch/deadlin", "unknown field 'deadlin'",
                                  "(did you mean 'deadline'?)");
    (void) msg;
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/events/OrderPlaced/tpoic", "\"orders\""), "/events/OrderPlaced/tpoic",
                "unknown field 'tpoic'", "did you mean 'topic'");
    def_problems_clear(&dt_problems);
    msg = EXPECT_ONLY(dt_with("/colour", "\"blue\""), "/colour", "unknown field 'colour'",
                      "expected one of", "'process'", "'states'");
    ck_assert_ptr_null(strstr(msg, "did you mean"));
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/envelope", "{\"tyep\": \"/t\"}"), "/envelope/tyep",
                "did you mean 'type'");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/states/awaiting_payment/retry/maximum", "3"),
                "/states/awaiting_payment/retry/maximum", "unknown field 'maximum'");
}
END_TEST

START_TEST(test_all_problems_reported)
{
    json_t *doc = dt_base();
    dt_put(doc, "/mode", "\"shadowy\"");
    dt_put(doc, "/version", "0");
    dt_put(doc, "/states/awaiting_dispatch/deadline", "\"2 days\"");
    dt_put(doc, "/states/awaiting_dispatch/on/ShipmentDispatched", "\"shiped\"");
    def_t *def = dt_load(doc);
    ck_assert_ptr_null(def);
    ck_assert_msg(dt_problems.n == 4, "expected 4 problems, got:%s", dt_listing());
    /* In document order. */
    ck_assert_str_eq(dt_problems.items[0].pointer, "/version");
    ck_assert_str_eq(dt_problems.items[1].pointer, "/mode");
    ck_assert_str_eq(dt_problems.items[2].pointer, "/states/awaiting_dispatch/deadline");
    ck_assert_str_eq(dt_problems.items[3].pointer,
                     "/states/awaiting_dispatch/on/ShipmentDispatched");
}
END_TEST

Suite *def_document_suite(void);
Suite *def_document_suite(void)
{
    Suite *s = suite_create("def_document");

    TCase *tc = tcase_create("valid");
    tcase_add_checked_fixture(tc, dt_setup, dt_teardown);
    tcase_add_test(tc, test_base_valid);
    tcase_add_test(tc, test_lookups);
    tcase_add_test(tc, test_optional_fields);
    tcase_add_test(tc, test_examples);
    suite_add_tcase(s, tc);

    tc = tcase_create("document");
    tcase_add_checked_fixture(tc, dt_setup, dt_teardown);
    tcase_add_test(tc, test_syntax_error);
    tcase_add_test(tc, test_duplicate_key);
    tcase_add_test(tc, test_not_an_object);
    tcase_add_test(tc, test_missing_required);
    tcase_add_test(tc, test_wrong_types);
    tcase_add_test(tc, test_unknown_fields);
    tcase_add_test(tc, test_all_problems_reported);
    suite_add_tcase(s, tc);
    return s;
}
