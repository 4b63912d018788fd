/*
 * test_def_envelopes - where each event's type, key, id and time are: the
 * process's envelope, a topic's own (`topics`) and an event's own, each
 * field defaulting to the level above; and the problems each level
 * reports, a topic's naming the topic.
 */
#include "definitions/def.h"
#include "test_def_support.h"
#include "testlib.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const def_event_t *event(const def_t *def, const char *name)
{
    long e = def_find_event(def, name);
    ck_assert_msg(e >= 0, "no event %s", name);
    return &def->events[e];
}

START_TEST(a_topic_envelope_applies_to_its_topic_only)
{
    json_t *doc = dt_base();
    dt_put(doc, "/envelope", "{\"time\": {\"pointer\": \"/at\", \"format\": \"rfc3339\"}}");
    dt_put(doc, "/topics",
           "{\"payments\": {\"envelope\": {\"type\": {\"header\": \"x-event\"},"
           "                             \"id\": \"/eventId\"}},"
           " \"shipping\": {\"key\": {\"from\": \"message_key\"},"
           "                \"envelope\": {\"time\": {\"from\": \"kafka_timestamp\"}}}}");
    def_t *def = dt_expect_valid(doc);

    /* orders keeps the process's envelope */
    const def_event_t *placed = event(def, "OrderPlaced");
    ck_assert(!placed->topic_envelope);
    ck_assert_str_eq(placed->envelope.type_pointer, "/type");
    ck_assert_ptr_null(placed->envelope.type_header);
    ck_assert_str_eq(placed->envelope.id_pointer, "/id");
    ck_assert_str_eq(placed->envelope.time_pointer, "/at");
    ck_assert_int_eq(placed->envelope.time_format, DEF_TIME_RFC3339);
    ck_assert_str_eq(placed->envelope.key_pointer, "/order_id");

    /* payments: its type and id, the process's time; an event's own key wins */
    const def_event_t *captured = event(def, "PaymentCaptured");
    const def_event_t *declined = event(def, "PaymentDeclined");
    ck_assert(captured->topic_envelope && declined->topic_envelope);
    ck_assert_str_eq(captured->envelope.type_header, "x-event");
    ck_assert_str_eq(declined->envelope.type_header, "x-event");
    ck_assert_str_eq(declined->envelope.id_pointer, "/eventId");
    ck_assert_str_eq(declined->envelope.time_pointer, "/at");
    ck_assert_str_eq(captured->envelope.key_pointer, "/payment/order_id");
    ck_assert_str_eq(declined->envelope.key_pointer, "/order_id");

    /* shipping: the message key and the Kafka timestamp */
    const def_event_t *shipped = event(def, "ShipmentDispatched");
    ck_assert(shipped->envelope.key_from_message);
    ck_assert_ptr_null(shipped->envelope.key_pointer);
    ck_assert_int_eq(shipped->envelope.time_format, DEF_TIME_KAFKA);
    ck_assert_str_eq(shipped->envelope.type_pointer, "/type");

    /* the process's own envelope is unchanged */
    ck_assert_ptr_null(def->envelope.type_header);
    ck_assert_str_eq(def->envelope.id_pointer, "/id");
    ck_assert_ptr_eq(def_topic_event(def, "payments"), captured);
    ck_assert_ptr_null(def_topic_event(def, "nowhere"));
    def_free(def);
}
END_TEST

START_TEST(a_topic_envelope_overrides_a_process_type_header)
{
    /* The process reads a header; one topic keeps its type in the payload. */
    json_t *doc = dt_base();
    dt_put(doc, "/envelope", "{\"type\": {\"header\": \"event-type\"}}");
    dt_put(doc, "/topics", "{\"orders\": {\"envelope\": {\"type\": \"/kind\"}}}");
    def_t *def = dt_expect_valid(doc);
    ck_assert_ptr_null(event(def, "OrderPlaced")->envelope.type_header);
    ck_assert_str_eq(event(def, "OrderPlaced")->envelope.type_pointer, "/kind");
    ck_assert_str_eq(event(def, "PaymentCaptured")->envelope.type_header, "event-type");
    def_free(def);
}
END_TEST

START_TEST(an_event_envelope_has_its_own_type_rule_id_and_time)
{
    json_t *doc = dt_base();
    dt_put(doc, "/topics", "{\"payments\": {\"envelope\": {\"id\": \"/eventId\"}}}");
    dt_put(doc, "/events/PaymentDeclined/envelope",
           "{\"type\": {\"header\": \"legacy-type\"}, \"time\": {\"pointer\": \"/ts\", "
           "\"format\": \"epoch_seconds\"}}");
    def_t *def = dt_expect_valid(doc);
    const def_event_t *declined = event(def, "PaymentDeclined");
    ck_assert_str_eq(declined->own_type_header, "legacy-type");
    ck_assert_ptr_null(declined->own_type_pointer);
    /* the topic's rule stays the topic's: other events are found by it */
    ck_assert_ptr_null(declined->envelope.type_header);
    ck_assert_str_eq(declined->envelope.id_pointer, "/eventId");
    ck_assert_str_eq(declined->envelope.time_pointer, "/ts");
    ck_assert_int_eq(declined->envelope.time_format, DEF_TIME_EPOCH_SECONDS);
    const def_event_t *captured = event(def, "PaymentCaptured");
    ck_assert_ptr_null(captured->own_type_header);
    ck_assert_ptr_null(captured->envelope.time_pointer);
    def_free(def);
}
END_TEST

START_TEST(topic_problems_name_the_topic)
{
    const char *msg = EXPECT_ONLY(
        dt_with("/topics", "{\"payments\": {\"envelope\": {\"type\": {\"header\": "
                           "\"event type\"}}}}"),
        "/topics/payments/envelope/type/header", "topic 'payments'", "'event type'", "spaces");
    ck_assert_msg(strncmp(msg, "topic 'payments': ", 18) == 0, "message: %s", msg);
    def_problems_clear(&dt_problems);

    EXPECT_ONLY(dt_with("/topics", "{\"payments\": {\"envelope\": {\"time\": {\"pointer\": "
                                   "\"/at\", \"format\": \"epoch\"}}}}"),
                "/topics/payments/envelope/time/format", "topic 'payments'", "'epoch'");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/topics", "{\"payments\": {\"key\": \"order_id\"}}"),
                "/topics/payments/key", "topic 'payments'", "bad JSON pointer");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/topics", "{\"payments\": {\"envelope\": {\"key\": \"/order_id\"}}}"),
                "/topics/payments/envelope/key", "topic 'payments'", "beside 'envelope'");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/topics", "{\"payments\": {\"envelop\": {}}}"), "/topics/payments/envelop",
                "topic 'payments'", "did you mean 'envelope'");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/topics", "{\"payments\": {\"envelope\": \"/type\"}}"),
                "/topics/payments/envelope", "topic 'payments'", "expected an object");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/topics", "{\"payments\": 5}"), "/topics/payments", "topic 'payments'",
                "expected an object");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/topics", "{\"paymnets\": {\"envelope\": {\"id\": \"/eventId\"}}}"),
                "/topics/paymnets", "topic 'paymnets'", "no event", "did you mean 'payments'");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/topics", "{\"pay ments\": {}}"), "/topics/pay ments",
                "not a valid Kafka topic name");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/topics", "[]"), "/topics", "expected an object", "array");
}
END_TEST

START_TEST(event_envelope_problems)
{
    EXPECT_ONLY(dt_with("/events/PaymentDeclined/envelope", "{\"id\": \"eventId\"}"),
                "/events/PaymentDeclined/envelope/id",
                "event 'PaymentDeclined' on topic 'payments'", "bad JSON pointer");
    def_problems_clear(&dt_problems);
    json_t *doc = dt_base();
    dt_put(doc, "/events/ShipmentDispatched/type_from_topic", "true");
    dt_put(doc, "/events/ShipmentDispatched/envelope", "{\"type\": \"/kind\"}");
    EXPECT_ONLY(doc, "/events/ShipmentDispatched/type_from_topic", "'shipping'",
                "no envelope.type");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/events/PaymentDeclined/envelope", "{\"key\": \"/x\"}"),
                "/events/PaymentDeclined/envelope/key", "beside 'envelope'");
}
END_TEST

START_TEST(mapped_topics_keep_their_envelopes)
{
    json_t *doc = dt_base();
    dt_put(doc, "/topics", "{\"payments\": {\"envelope\": {\"type\": {\"header\": \"x-event\"}}}}");
    def_t *def = dt_expect_valid(doc);
    ck_assert(def_map_topics(def, "prod.", NULL, &dt_problems));
    const def_event_t *first = def_topic_event(def, "prod.payments");
    ck_assert_ptr_nonnull(first);
    ck_assert_str_eq(first->envelope.type_header, "x-event");
    ck_assert_ptr_null(def_topic_event(def, "prod.orders")->envelope.type_header);
    def_free(def);
}
END_TEST

Suite *def_envelopes_suite(void)
{
    Suite *s = suite_create("def_envelopes");
    TCase *tc = tcase_create("envelopes");
    tcase_add_checked_fixture(tc, dt_setup, dt_teardown);
    tcase_add_test(tc, a_topic_envelope_applies_to_its_topic_only);
    tcase_add_test(tc, a_topic_envelope_overrides_a_process_type_header);
    tcase_add_test(tc, an_event_envelope_has_its_own_type_rule_id_and_time);
    tcase_add_test(tc, topic_problems_name_the_topic);
    tcase_add_test(tc, event_envelope_problems);
    tcase_add_test(tc, mapped_topics_keep_their_envelopes);
    suite_add_tcase(s, tc);
    return s;
}
