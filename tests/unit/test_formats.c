/*
 * test_formats - message values as schema-registry serializers frame
 * them (the Confluent wire format: magic byte 0, a 4-byte schema id, the
 * payload): refused with the schema id unless the topic's format says
 * the payload is JSON, read then; and each process refuses framed values
 * its own definition did not declare. And the W3C traceparent of an
 * event, from its Kafka header or its CloudEvents extension (binary and
 * structured mode): kept when valid, ignored with its reason when not,
 * never a rejection.
 */
#include "formats/decode.h"
#include "formats/format_confluent.h"
#include "testlib.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

static decode_message_t msg;
static decode_envelope_t env;
static char detail[256];
static const decode_limits_t limits = {4096, 16};

static void setup(void)
{
    memset(&msg, 0, sizeof msg);
    memset(&env, 0, sizeof env);
}

static void teardown(void)
{
    decode_message_clear(&msg);
    decode_envelope_clear(&env);
}

/* The value `payload` framed with schema id 7, into buf; returns its length. */
static size_t framed(char *buf, size_t size, const char *payload, size_t payload_len)
{
    ck_assert_uint_le(payload_len + 5, size);
    memcpy(buf, "\0\0\0\0\7", 5);
    memcpy(buf + 5, payload, payload_len);
    return payload_len + 5;
}

static decode_input_t input(const char *topic, const char *value, size_t len)
{
    return (decode_input_t){.topic = topic,
                            .partition = 0,
                            .offset = 1,
                            .value = value,
                            .value_len = len,
                            .timestamp_ms = 1795000000000LL};
}

static def_t *load(const char *topics)
{
    char doc[2048];
    snprintf(doc, sizeof doc,
             "{\"process\":\"p\",\"version\":1,\"mode\":\"shadow\",\"owner\":\"team\","
             "\"key\":\"/order_id\",\"topics\":%s,"
             "\"events\":{\"Placed\":{\"topic\":\"orders\"},\"Paid\":{\"topic\":\"payments\"}},"
             "\"start\":{\"on\":\"Placed\",\"to\":\"open\"},"
             "\"states\":{\"open\":{\"deadline\":\"1h\",\"on\":{\"Paid\":\"done\"}},"
             "            \"done\":{\"terminal\":\"success\"}}}",
             topics);
    def_problems_t problems = {0};
    def_t *d = def_load_json(doc, strlen(doc), "formats.json", &problems);
    ck_assert_msg(d != NULL, "definition: %s: %s", problems.n ? problems.items[0].pointer : "",
                  problems.n ? problems.items[0].message : "?");
    def_problems_clear(&problems);
    return d;
}

START_TEST(the_framing)
{
    uint32_t id;
    const void *payload;
    size_t len;
    ck_assert(format_confluent_frame("\0\0\0\1\2{}", 7, &id, &payload, &len));
    ck_assert_uint_eq(id, 258);
    ck_assert_uint_eq(len, 2);
    ck_assert(memcmp(payload, "{}", 2) == 0);
    ck_assert(format_confluent_frame("\0\xff\xff\xff\xff", 5, &id, &payload, &len));
    ck_assert_uint_eq(id, 4294967295u);
    ck_assert_uint_eq(len, 0);
    ck_assert(!format_confluent_frame("\0\0\0\1", 4, &id, &payload, &len)); /* no whole id */
    ck_assert(!format_confluent_frame("{\"a\":1}", 7, &id, &payload, &len));
    ck_assert(!format_confluent_frame(NULL, 0, &id, &payload, &len));
}
END_TEST

START_TEST(framed_values_are_refused_with_their_schema_id)
{
    char buf[256];
    const char *json = "{\"type\":\"Placed\",\"order_id\":\"O-1\"}";
    size_t n = framed(buf, sizeof buf, json, strlen(json));
    decode_input_t in = input("orders", buf, n);
    ck_assert_int_eq(decode_message(&in, &limits, &msg, detail, sizeof detail),
                     DECODE_SCHEMA_REGISTRY_FORMAT);
    ck_assert_msg(strstr(detail, "Confluent wire format") != NULL &&
                      strstr(detail, "schema id 7") != NULL &&
                      strstr(detail, "confluent_json") != NULL,
                  "detail: %s", detail);
    ck_assert_str_eq(decode_reason_name(DECODE_SCHEMA_REGISTRY_FORMAT), "schema_registry_format");

    /* Avro (or Protobuf) after the id: refused the same way, also where
     * the format reads framed JSON */
    const char avro[] = "\x06O-1\x0cPlaced";
    n = framed(buf, sizeof buf, avro, sizeof avro - 1);
    in = input("orders", buf, n);
    ck_assert_int_eq(decode_message(&in, &limits, &msg, detail, sizeof detail),
                     DECODE_SCHEMA_REGISTRY_FORMAT);
    ck_assert_int_eq(
        decode_message_as(&in, &limits, DEF_FORMAT_CONFLUENT_JSON, &msg, detail, sizeof detail),
        DECODE_SCHEMA_REGISTRY_FORMAT);
    ck_assert_msg(strstr(detail, "schema id 7") != NULL &&
                      strstr(detail, "not a JSON object") != NULL,
                  "detail: %s", detail);

    /* A zero byte too short for a schema id is no framing: invalid JSON */
    in = input("orders", "\0\1", 2);
    ck_assert_int_eq(decode_message(&in, &limits, &msg, detail, sizeof detail),
                     DECODE_INVALID_JSON);
}
END_TEST

START_TEST(a_topic_in_confluent_json_is_read)
{
    def_t *d = load("{\"orders\": {\"format\": \"confluent_json\"}}");
    char buf[256];
    const char *json = " {\"type\":\"Placed\",\"order_id\":\"O-1\",\"id\":\"e-1\"}";
    size_t n = framed(buf, sizeof buf, json, strlen(json));
    decode_input_t in = input("orders", buf, n);
    ck_assert_int_eq(
        decode_message_as(&in, &limits, DEF_FORMAT_CONFLUENT_JSON, &msg, detail, sizeof detail),
        DECODE_OK);
    ck_assert_int_eq(msg.schema_id, 7);
    ck_assert_str_eq(decode_event_type(&msg, &in, d), "Placed");
    ck_assert_int_eq(decode_envelope(&msg, &in, d, 0, &env, detail, sizeof detail), DECODE_OK);
    ck_assert_str_eq(env.key, "O-1");
    ck_assert_str_eq(env.id, "e-1");
    decode_envelope_clear(&env);

    /* an unframed value on that topic is read as it is */
    decode_message_clear(&msg);
    in = input("orders", json, strlen(json));
    ck_assert_int_eq(
        decode_message_as(&in, &limits, DEF_FORMAT_CONFLUENT_JSON, &msg, detail, sizeof detail),
        DECODE_OK);
    ck_assert_int_eq(msg.schema_id, -1);
    def_free(d);
}
END_TEST

START_TEST(a_process_refuses_framed_values_it_did_not_declare)
{
    /* Another process reads orders in confluent_json; this one does not. */
    def_t *plain = load("{\"payments\": {\"format\": \"json\"}}");
    char buf[256];
    const char *json = "{\"type\":\"Placed\",\"order_id\":\"O-1\"}";
    size_t n = framed(buf, sizeof buf, json, strlen(json));
    decode_input_t in = input("orders", buf, n);
    ck_assert_int_eq(
        decode_message_as(&in, &limits, DEF_FORMAT_CONFLUENT_JSON, &msg, detail, sizeof detail),
        DECODE_OK);
    ck_assert_int_eq(decode_envelope(&msg, &in, plain, 0, &env, detail, sizeof detail),
                     DECODE_SCHEMA_REGISTRY_FORMAT);
    ck_assert_msg(strstr(detail, "schema id 7") != NULL && strstr(detail, "topic orders") != NULL,
                  "detail: %s", detail);
    ck_assert_ptr_null(env.key);
    def_free(plain);
}
END_TEST

START_TEST(the_format_is_checked_naming_the_topic)
{
    const char *bad =
        "{\"process\":\"p\",\"version\":1,\"mode\":\"shadow\",\"owner\":\"team\","
        "\"key\":\"/order_id\",\"topics\":{\"orders\":{\"format\":\"avro\"}},"
        "\"events\":{\"Placed\":{\"topic\":\"orders\"},\"Paid\":{\"topic\":\"orders\"}},"
        "\"start\":{\"on\":\"Placed\",\"to\":\"open\"},"
        "\"states\":{\"open\":{\"deadline\":\"1h\",\"on\":{\"Paid\":\"done\"}},"
        "            \"done\":{\"terminal\":\"success\"}}}";
    def_problems_t problems = {0};
    ck_assert_ptr_null(def_load_json(bad, strlen(bad), "bad.json", &problems));
    ck_assert_uint_eq(problems.n, 1);
    ck_assert_str_eq(problems.items[0].pointer, "/topics/orders/format");
    ck_assert_msg(strstr(problems.items[0].message, "topic 'orders'") != NULL &&
                      strstr(problems.items[0].message, "'avro'") != NULL &&
                      strstr(problems.items[0].message, "confluent_json") != NULL,
                  "%s", problems.items[0].message);
    def_problems_clear(&problems);
    def_t *d = load("{\"orders\": {\"format\": \"confluent_json\"}}");
    ck_assert_int_eq(d->events[0].format, DEF_FORMAT_CONFLUENT_JSON);
    ck_assert_int_eq(d->events[1].format, DEF_FORMAT_JSON);
    def_free(d);
}
END_TEST

#define TRACE_ID "4bf92f3577b34da6a3ce929d0e0e4736"
#define TP       "00-" TRACE_ID "-00f067aa0ba902b7-01"

START_TEST(a_traceparent_is_judged)
{
    static const struct {
        const char *text;
        decode_trace_t want;
    } cases[] = {
        {TP, DECODE_TRACE_OK},
        {"00-" TRACE_ID "-00f067aa0ba902b7-00", DECODE_TRACE_OK},
        {"01-" TRACE_ID "-00f067aa0ba902b7-01", DECODE_TRACE_BAD_VERSION},
        {"ff-" TRACE_ID "-00f067aa0ba902b7-01", DECODE_TRACE_BAD_VERSION},
        {"00-00000000000000000000000000000000-00f067aa0ba902b7-01", DECODE_TRACE_ZERO_TRACE_ID},
        {"00-" TRACE_ID "-0000000000000000-01", DECODE_TRACE_ZERO_SPAN_ID},
        {"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", DECODE_TRACE_BAD_FORMAT},
        {"00-" TRACE_ID "-00f067aa0ba902b7-1", DECODE_TRACE_BAD_FORMAT},
        {"00-" TRACE_ID "-00f067aa0ba902b7-01-", DECODE_TRACE_BAD_FORMAT},
        {"00-" TRACE_ID "x00f067aa0ba902b7-01", DECODE_TRACE_BAD_FORMAT},
        {"00-" TRACE_ID "-00f067aa0ba902g7-01", DECODE_TRACE_BAD_FORMAT},
        {"00-" TRACE_ID "-00f067aa0ba902b7-zz", DECODE_TRACE_BAD_FORMAT},
        {"", DECODE_TRACE_BAD_FORMAT},
        {"garbage", DECODE_TRACE_BAD_FORMAT},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char out[DECODE_TRACEPARENT_LEN + 1];
        decode_trace_t got = decode_traceparent(cases[i].text, strlen(cases[i].text), out);
        ck_assert_msg(got == cases[i].want, "%s: %s, expected %s", cases[i].text,
                      decode_trace_name(got), decode_trace_name(cases[i].want));
        ck_assert_str_eq(out, got == DECODE_TRACE_OK ? cases[i].text : "");
    }
}
END_TEST

/* The message with `headers`, decoded; the event is never rejected. */
static void decode_with(const char *value, const decode_header_t *headers, size_t n)
{
    decode_input_t in = input("orders", value, strlen(value));
    in.headers = headers;
    in.n_headers = n;
    ck_assert_int_eq(decode_message(&in, &limits, &msg, detail, sizeof detail), DECODE_OK);
}

START_TEST(the_kafka_header_carries_it)
{
    decode_header_t ok[] = {{"traceparent", TP, strlen(TP)}};
    decode_with("{\"order_id\":\"a\"}", ok, 1);
    ck_assert_int_eq(msg.trace, DECODE_TRACE_OK);
    ck_assert_str_eq(msg.traceparent, TP);
    decode_message_clear(&msg);

    decode_header_t bad[] = {{"traceparent", "00-zz", 5}};
    decode_with("{\"order_id\":\"a\"}", bad, 1);
    ck_assert_int_eq(msg.trace, DECODE_TRACE_BAD_FORMAT);
    ck_assert_str_eq(msg.traceparent, "");
    decode_message_clear(&msg);

    decode_with("{\"order_id\":\"a\"}", NULL, 0);
    ck_assert_int_eq(msg.trace, DECODE_TRACE_NONE);
    ck_assert_str_eq(msg.traceparent, "");
}
END_TEST

START_TEST(a_binary_cloudevent_carries_it_in_ce_traceparent)
{
    decode_header_t h[] = {{"ce_specversion", "1.0", 3},
                           {"ce_type", "Placed", 6},
                           {"ce_id", "1", 1},
                           {"ce_source", "shop", 4},
                           {"ce_traceparent", TP, strlen(TP)}};
    decode_with("{\"order_id\":\"a\"}", h, 5);
    ck_assert_int_eq(msg.trace, DECODE_TRACE_OK);
    ck_assert_str_eq(msg.traceparent, TP);
    decode_message_clear(&msg);

    const char *zero = "00-" TRACE_ID "-0000000000000000-01";
    h[4] = (decode_header_t){"ce_traceparent", zero, strlen(zero)};
    decode_with("{\"order_id\":\"a\"}", h, 5);
    ck_assert_int_eq(msg.trace, DECODE_TRACE_ZERO_SPAN_ID);
    ck_assert_str_eq(msg.traceparent, "");
}
END_TEST

START_TEST(a_structured_cloudevent_carries_it_as_an_attribute)
{
    decode_header_t ct[] = {{"content-type", "application/cloudevents+json", 28}};
    decode_with("{\"specversion\":\"1.0\",\"type\":\"Placed\",\"id\":\"1\",\"source\":\"shop\","
                "\"traceparent\":\"" TP "\",\"data\":{\"order_id\":\"a\"}}",
                ct, 1);
    ck_assert_int_eq(msg.trace, DECODE_TRACE_OK);
    ck_assert_str_eq(msg.traceparent, TP);
    decode_message_clear(&msg);

    /* mistyped: ignored, the event still decodes */
    decode_with("{\"specversion\":\"1.0\",\"type\":\"Placed\",\"id\":\"1\",\"source\":\"shop\","
                "\"traceparent\":7,\"data\":{\"order_id\":\"a\"}}",
                ct, 1);
    ck_assert_int_eq(msg.trace, DECODE_TRACE_BAD_FORMAT);
    decode_message_clear(&msg);

    decode_with("{\"specversion\":\"1.0\",\"type\":\"Placed\",\"id\":\"1\",\"source\":\"shop\","
                "\"traceparent\":\"01-" TRACE_ID "-00f067aa0ba902b7-01\","
                "\"data\":{\"order_id\":\"a\"}}",
                ct, 1);
    ck_assert_int_eq(msg.trace, DECODE_TRACE_BAD_VERSION);
}
END_TEST

START_TEST(the_kafka_header_comes_before_the_extension)
{
    const char *other = "00-" TRACE_ID "-1111111111111111-01";
    decode_header_t h[] = {{"ce_specversion", "1.0", 3},
                           {"ce_type", "Placed", 6},
                           {"ce_id", "1", 1},
                           {"ce_source", "shop", 4},
                           {"ce_traceparent", other, strlen(other)},
                           {"traceparent", TP, strlen(TP)}};
    decode_with("{\"order_id\":\"a\"}", h, 6);
    ck_assert_int_eq(msg.trace, DECODE_TRACE_OK);
    ck_assert_str_eq(msg.traceparent, TP);
}
END_TEST

/* The tracestate validator: W3C's list of at most 32 key=value members,
 * 512 bytes, printable ASCII; kept byte for byte when it passes. */
START_TEST(a_tracestate_is_judged)
{
    char long_text[600], many[400];
    /* two members of 256 and 256 bytes: 513 with the comma */
    memset(long_text, 'x', sizeof long_text);
    memcpy(long_text, "a=", 2);
    long_text[256] = ',';
    memcpy(long_text + 257, "b=", 2);
    long_text[513] = '\0';
    size_t n = 0;
    for (int i = 0; i < 33; i++)
        n += (size_t) snprintf(many + n, sizeof many - n, "%sk%d=v", i ? "," : "", i);
    const struct {
        const char *text;
        decode_tracestate_t want;
    } cases[] = {
        {"congo=t61rcWkgMzE", DECODE_TRACESTATE_OK},
        {"rojo=00f067aa0ba902b7,congo=t61rcWkgMzE", DECODE_TRACESTATE_OK},
        {"rojo=1 , congo=2\t", DECODE_TRACESTATE_OK}, /* OWS around commas */
        {"a,,b=1", DECODE_TRACESTATE_BAD_FORMAT},     /* a member without = */
        {",,rojo=1,", DECODE_TRACESTATE_OK},          /* empty members are allowed */
        {"tenant@system=x", DECODE_TRACESTATE_OK},
        {"vendor/id*_-=x", DECODE_TRACESTATE_OK},
        {"", DECODE_TRACESTATE_NONE},
        {" , ", DECODE_TRACESTATE_NONE},
        {"Rojo=1", DECODE_TRACESTATE_BAD_FORMAT}, /* uppercase key */
        {"rojo=", DECODE_TRACESTATE_BAD_FORMAT},  /* empty value */
        {"=1", DECODE_TRACESTATE_BAD_FORMAT},
        {"rojo=a=b", DECODE_TRACESTATE_BAD_FORMAT},
        {"rojo=caf\xc3\xa9", DECODE_TRACESTATE_BAD_FORMAT}, /* not ASCII */
        {"rojo=a\x01", DECODE_TRACESTATE_BAD_FORMAT},
        {"@x=1", DECODE_TRACESTATE_BAD_FORMAT},
        {"a@b@c=1", DECODE_TRACESTATE_BAD_FORMAT},
        {long_text, DECODE_TRACESTATE_TOO_LONG},
        {many, DECODE_TRACESTATE_TOO_MANY},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char out[DECODE_TRACESTATE_MAX + 1];
        decode_tracestate_t got = decode_tracestate(cases[i].text, strlen(cases[i].text), out);
        ck_assert_msg(got == cases[i].want, "%s: %s, expected %s", cases[i].text,
                      decode_tracestate_name(got), decode_tracestate_name(cases[i].want));
        ck_assert_str_eq(out, got == DECODE_TRACESTATE_OK ? cases[i].text : "");
    }
    /* 32 members pass; exactly 512 bytes pass */
    many[strlen(many) - strlen(",k32=v")] = '\0';
    char out[DECODE_TRACESTATE_MAX + 1];
    ck_assert_int_eq(decode_tracestate(many, strlen(many), out), DECODE_TRACESTATE_OK);
    long_text[512] = '\0';
    ck_assert_int_eq(decode_tracestate(long_text, 512, out), DECODE_TRACESTATE_OK);
    ck_assert_str_eq(out, long_text);
}
END_TEST

/* It travels with its traceparent's carrier, and only with a valid one. */
START_TEST(a_tracestate_goes_with_its_traceparent)
{
    const char *ts = "rojo=00f067aa0ba902b7";
    decode_header_t h[] = {{"traceparent", TP, strlen(TP)}, {"tracestate", ts, strlen(ts)}};
    decode_with("{\"order_id\":\"a\"}", h, 2);
    ck_assert_int_eq(msg.tracestate_fate, DECODE_TRACESTATE_OK);
    ck_assert_str_eq(msg.tracestate, ts);
    decode_message_clear(&msg);

    h[1] = (decode_header_t){"tracestate", "Bad=1", 5};
    decode_with("{\"order_id\":\"a\"}", h, 2);
    ck_assert_int_eq(msg.trace, DECODE_TRACE_OK); /* the traceparent is kept */
    ck_assert_int_eq(msg.tracestate_fate, DECODE_TRACESTATE_BAD_FORMAT);
    ck_assert_str_eq(msg.tracestate, "");
    decode_message_clear(&msg);

    h[0] = (decode_header_t){"traceparent", "00-zz", 5};
    h[1] = (decode_header_t){"tracestate", ts, strlen(ts)};
    decode_with("{\"order_id\":\"a\"}", h, 2);
    ck_assert_int_eq(msg.tracestate_fate, DECODE_TRACESTATE_NONE);
    ck_assert_str_eq(msg.tracestate, "");
    decode_message_clear(&msg);

    decode_header_t ce[] = {{"ce_specversion", "1.0", 3},
                            {"ce_type", "Placed", 6},
                            {"ce_id", "1", 1},
                            {"ce_source", "shop", 4},
                            {"ce_traceparent", TP, strlen(TP)},
                            {"ce_tracestate", ts, strlen(ts)}};
    decode_with("{\"order_id\":\"a\"}", ce, 6);
    ck_assert_str_eq(msg.tracestate, ts);
    decode_message_clear(&msg);
    ce[5] = (decode_header_t){"ce_tracestate", "rojo=1\0x", 8}; /* cut short by its NUL */
    decode_with("{\"order_id\":\"a\"}", ce, 6);
    ck_assert_int_eq(msg.tracestate_fate, DECODE_TRACESTATE_BAD_FORMAT);
    decode_message_clear(&msg);
    h[0] = (decode_header_t){"traceparent", TP, strlen(TP)};
    h[1] = (decode_header_t){"tracestate", "rojo=1\0x", 8};
    decode_with("{\"order_id\":\"a\"}", h, 2);
    ck_assert_int_eq(msg.tracestate_fate, DECODE_TRACESTATE_BAD_FORMAT);
    decode_message_clear(&msg);

    decode_header_t ct[] = {{"content-type", "application/cloudevents+json", 28}};
    decode_with("{\"specversion\":\"1.0\",\"type\":\"Placed\",\"id\":\"1\",\"source\":\"shop\","
                "\"traceparent\":\"" TP "\",\"tracestate\":\"congo=t61rcWkgMzE\","
                "\"data\":{\"order_id\":\"a\"}}",
                ct, 1);
    ck_assert_str_eq(msg.tracestate, "congo=t61rcWkgMzE");
    decode_message_clear(&msg);
    decode_with("{\"specversion\":\"1.0\",\"type\":\"Placed\",\"id\":\"1\",\"source\":\"shop\","
                "\"traceparent\":\"" TP "\",\"tracestate\":5,\"data\":{\"order_id\":\"a\"}}",
                ct, 1);
    ck_assert_int_eq(msg.tracestate_fate, DECODE_TRACESTATE_BAD_FORMAT);
}
END_TEST

Suite *formats_suite(void)
{
    Suite *s = suite_create("formats");
    TCase *tc = tcase_create("formats");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, the_framing);
    tcase_add_test(tc, framed_values_are_refused_with_their_schema_id);
    tcase_add_test(tc, a_topic_in_confluent_json_is_read);
    tcase_add_test(tc, a_process_refuses_framed_values_it_did_not_declare);
    tcase_add_test(tc, the_format_is_checked_naming_the_topic);
    tcase_add_test(tc, a_traceparent_is_judged);
    tcase_add_test(tc, the_kafka_header_carries_it);
    tcase_add_test(tc, a_binary_cloudevent_carries_it_in_ce_traceparent);
    tcase_add_test(tc, a_structured_cloudevent_carries_it_as_an_attribute);
    tcase_add_test(tc, the_kafka_header_comes_before_the_extension);
    tcase_add_test(tc, a_tracestate_is_judged);
    tcase_add_test(tc, a_tracestate_goes_with_its_traceparent);
    suite_add_tcase(s, tc);
    return s;
}
