/*
 * test_decode - every way a message is judged before the engine sees it:
 * the bad-input kinds, CloudEvents in binary and structured mode, and the
 * envelope (key, identity, time) a definition reads.
 */
#include "common/rfc3339.h"
#include "common/utf8.h"
#include "formats/decode.h"
#include "testlib.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

static def_t *def;
static decode_message_t msg;
static decode_envelope_t env;
static char detail[256];
static const decode_limits_t limits = {1024, 8};

static void setup(void)
{
    def_problems_t problems = {0};
    const char *doc = "{\"process\":\"p\",\"version\":1,\"mode\":\"shadow\",\"owner\":\"team\","
                      "\"key\":\"/order_id\",\"envelope\":{\"type\":\"/kind\",\"id\":\"/event_id\","
                      "\"time\":\"/at\"},"
                      "\"events\":{\"Placed\":{\"topic\":\"orders\"},"
                      "            \"Paid\":{\"topic\":\"payments\",\"key\":\"/payment/order\"}},"
                      "\"start\":{\"on\":\"Placed\",\"to\":\"open\"},"
                      "\"states\":{\"open\":{\"deadline\":\"1h\",\"on\":{\"Paid\":\"done\"}},"
                      "            \"done\":{\"terminal\":\"success\"}}}";
    def = def_load_json(doc, strlen(doc), "test", &problems);
    ck_assert_msg(def != NULL, "definition: %s", problems.n ? problems.items[0].message : "?");
    def_problems_clear(&problems);
    memset(&msg, 0, sizeof msg);
    memset(&env, 0, sizeof env);
}

static void teardown(void)
{
    decode_message_clear(&msg);
    decode_envelope_clear(&env);
    def_free(def);
}

static decode_input_t input(const char *topic, const char *value)
{
    return (decode_input_t){.topic = topic,
                            .partition = 3,
                            .offset = 77,
                            .value = value,
                            .value_len = value != NULL ? strlen(value) : 0,
                            .timestamp_ms = 1795000000000LL};
}

static decode_reason_t judge(const decode_input_t *in)
{
    decode_message_clear(&msg);
    return decode_message(in, &limits, &msg, detail, sizeof detail);
}

START_TEST(bad_messages_are_rejected_with_their_reason)
{
    decode_input_t in = input("orders", NULL);
    ck_assert_int_eq(judge(&in), DECODE_TOMBSTONE);

    char big[2048];
    memset(big, ' ', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    in = input("orders", big);
    ck_assert_int_eq(judge(&in), DECODE_TOO_LARGE);
    ck_assert_msg(strstr(detail, "2047 bytes") != NULL, "detail: %s", detail);

    in = input("orders", "{\"a\":\"\xc3\x28\"}");
    ck_assert_int_eq(judge(&in), DECODE_INVALID_UTF8);

    in = input("orders", "{\"a\": 1,\n \"b\": }");
    ck_assert_int_eq(judge(&in), DECODE_INVALID_JSON);
    ck_assert_msg(strstr(detail, "line 2") != NULL, "detail: %s", detail);

    in = input("orders", "{\"a\":1,\"a\":2}");
    ck_assert_int_eq(judge(&in), DECODE_INVALID_JSON);

    in = input("orders", "[1,2,3]");
    ck_assert_int_eq(judge(&in), DECODE_NOT_OBJECT);
    /* Valid JSON that is not an object is one reason, whatever it is. */
    static const char *const scalars[] = {"\"text\"", "null", "42", "-1.5e3", "true", " 7 "};
    for (size_t i = 0; i < sizeof scalars / sizeof scalars[0]; i++) {
        in = input("orders", scalars[i]);
        ck_assert_msg(judge(&in) == DECODE_NOT_OBJECT, "%s: %s", scalars[i], detail);
    }
    in = input("orders", "123456789012345678901234567890");
    ck_assert_int_eq(judge(&in), DECODE_NOT_OBJECT);
    in = input("orders", "\"unclosed");
    ck_assert_int_eq(judge(&in), DECODE_INVALID_JSON);

    in = input("orders", "{\"a\":[[[[[[[[[1]]]]]]]]]}");
    ck_assert_int_eq(judge(&in), DECODE_TOO_DEEP);
    /* brackets inside strings do not count */
    in = input("orders", "{\"a\":\"[[[[[[[[[[[[[[\"}");
    ck_assert_int_eq(judge(&in), DECODE_OK);
    ck_assert_ptr_eq(msg.data, msg.value);
    ck_assert(!msg.cloudevent);
}
END_TEST

START_TEST(utf8_validation)
{
    ck_assert(utf8_valid((const unsigned char *) "plain", 5));
    ck_assert(utf8_valid((const unsigned char *) "\xe2\x82\xac", 3));      /* € */
    ck_assert(utf8_valid((const unsigned char *) "\xf0\x9f\x98\x80", 4));  /* 😀 */
    ck_assert(!utf8_valid((const unsigned char *) "\xc0\xaf", 2));         /* overlong */
    ck_assert(!utf8_valid((const unsigned char *) "\xed\xa0\x80", 3));     /* surrogate */
    ck_assert(!utf8_valid((const unsigned char *) "\xe2\x82", 2));         /* truncated */
    ck_assert(!utf8_valid((const unsigned char *) "\xf4\x90\x80\x80", 4)); /* > U+10FFFF */
    ck_assert(!utf8_valid((const unsigned char *) "\xff", 1));
}
END_TEST

START_TEST(plain_json_envelope)
{
    decode_input_t in = input("orders", "{\"kind\":\"Placed\",\"order_id\":\"O-1\","
                                        "\"event_id\":\"evt-9\",\"at\":\"2026-11-29T10:00:00Z\"}");
    ck_assert_int_eq(judge(&in), DECODE_OK);
    ck_assert_str_eq(decode_event_type(&msg, &in, def), "Placed");
    ck_assert_int_eq(decode_envelope(&msg, &in, def, 0, &env, detail, sizeof detail), DECODE_OK);
    ck_assert_str_eq(env.key, "O-1");
    ck_assert_str_eq(env.id, "evt-9");
    ck_assert_int_eq(env.time_ms, 1795946400000LL);
}
END_TEST

START_TEST(envelope_fallbacks_and_event_key_pointer)
{
    /* No id, integer time in ms, and the event's own key pointer. */
    decode_input_t in = input("payments", "{\"kind\":\"Paid\",\"payment\":{\"order\":\"O-2\"},"
                                          "\"at\":1795000000123}");
    ck_assert_int_eq(judge(&in), DECODE_OK);
    ck_assert_int_eq(decode_envelope(&msg, &in, def, 1, &env, detail, sizeof detail), DECODE_OK);
    ck_assert_str_eq(env.key, "O-2");
    ck_assert_str_eq(env.id, "payments/3/77");
    ck_assert_int_eq(env.time_ms, 1795000000123LL);
    decode_envelope_clear(&env);

    /* No time at all: the Kafka timestamp; an integer id. */
    in = input("orders", "{\"kind\":\"Placed\",\"order_id\":\"O-3\",\"event_id\":12}");
    ck_assert_int_eq(judge(&in), DECODE_OK);
    ck_assert_int_eq(decode_envelope(&msg, &in, def, 0, &env, detail, sizeof detail), DECODE_OK);
    ck_assert_str_eq(env.id, "12");
    ck_assert_int_eq(env.time_ms, 1795000000000LL);
}
END_TEST

START_TEST(envelope_rejections)
{
    decode_input_t in = input("orders", "{\"kind\":\"Placed\"}");
    ck_assert_int_eq(judge(&in), DECODE_OK);
    ck_assert_int_eq(decode_envelope(&msg, &in, def, 0, &env, detail, sizeof detail),
                     DECODE_MISSING_KEY);
    ck_assert_msg(strstr(detail, "/order_id") != NULL, "detail: %s", detail);
    ck_assert_ptr_null(env.key);

    in = input("orders", "{\"kind\":\"Placed\",\"order_id\":17.5}");
    ck_assert_int_eq(judge(&in), DECODE_OK);
    ck_assert_int_eq(decode_envelope(&msg, &in, def, 0, &env, detail, sizeof detail),
                     DECODE_INVALID_KEY);
    ck_assert_msg(strstr(detail, "a number with a fraction: expected a string or an integer") !=
                      NULL,
                  "detail: %s", detail);

    in = input("orders", "{\"kind\":\"Placed\",\"order_id\":true}");
    ck_assert_int_eq(judge(&in), DECODE_OK);
    ck_assert_int_eq(decode_envelope(&msg, &in, def, 0, &env, detail, sizeof detail),
                     DECODE_INVALID_KEY);

    in = input("orders", "{\"kind\":\"Placed\",\"order_id\":\"O\",\"at\":\"yesterday\"}");
    ck_assert_int_eq(judge(&in), DECODE_OK);
    ck_assert_int_eq(decode_envelope(&msg, &in, def, 0, &env, detail, sizeof detail),
                     DECODE_INVALID_TIME);
    ck_assert_msg(strstr(detail, "yesterday") != NULL, "detail: %s", detail);
    ck_assert_ptr_null(env.id);

    in = input("orders", "{\"order_id\":\"O\"}");
    ck_assert_int_eq(judge(&in), DECODE_OK);
    ck_assert_ptr_null(decode_event_type(&msg, &in, def));
}
END_TEST

START_TEST(cloudevents_binary_mode)
{
    decode_header_t headers[] = {
        {"ce_specversion", "1.0", 3},
        {"ce_type", "Paid", 4},
        {"ce_id", "A-1", 3},
        {"ce_source", "/payments", 9},
        {"ce_time", "2026-11-29T10:00:00.250+01:00", 29},
    };
    decode_input_t in = input("payments", "{\"kind\":\"Ignored\",\"payment\":{\"order\":\"O-5\"}}");
    in.headers = headers;
    in.n_headers = 5;
    ck_assert_int_eq(judge(&in), DECODE_OK);
    ck_assert(msg.cloudevent);
    ck_assert_str_eq(decode_event_type(&msg, &in, def), "Paid");
    ck_assert_int_eq(decode_envelope(&msg, &in, def, 1, &env, detail, sizeof detail), DECODE_OK);
    ck_assert_str_eq(env.id, "/payments#A-1");
    ck_assert_str_eq(env.key, "O-5");
    ck_assert_int_eq(env.time_ms, 1795942800250LL);

    headers[0].value = "0.3";
    ck_assert_int_eq(judge(&in), DECODE_UNSUPPORTED_SPECVERSION);
    ck_assert_msg(strstr(detail, "0.3") != NULL, "detail: %s", detail);

    headers[0].value = "1.0";
    in.n_headers = 2; /* no id, no source */
    ck_assert_int_eq(judge(&in), DECODE_INVALID_CLOUDEVENT);
    ck_assert_msg(strstr(detail, "'id'") != NULL, "detail: %s", detail);
}
END_TEST

/* A ce_type header alone names the type; the message stays a plain JSON
 * event, its id and time read by the envelope. */
START_TEST(a_bare_ce_type_header_names_the_type)
{
    decode_header_t headers[] = {
        {"ce_type", "Placed", 6},
        {"ce_id", "ignored", 7},
        {"ce_time", "2000-01-01T00:00:00Z", 20},
    };
    decode_input_t in = input("orders", "{\"order_id\":\"O-1\",\"event_id\":\"e-9\","
                                        "\"at\":\"2026-11-29T10:00:00Z\"}");
    in.headers = headers;
    in.n_headers = 1;
    ck_assert_int_eq(judge(&in), DECODE_OK);
    ck_assert(!msg.cloudevent);
    ck_assert_str_eq(decode_event_type(&msg, &in, def), "Placed");
    ck_assert_int_eq(decode_envelope(&msg, &in, def, 0, &env, detail, sizeof detail), DECODE_OK);
    ck_assert_str_eq(env.key, "O-1");
    ck_assert_str_eq(env.id, "e-9");
    ck_assert_int_eq(env.time_ms, 1795946400000LL);
    decode_envelope_clear(&env);

    /* ce_id and ce_time without ce_specversion are not CloudEvents attributes */
    in.n_headers = 3;
    ck_assert_int_eq(judge(&in), DECODE_OK);
    ck_assert_int_eq(decode_envelope(&msg, &in, def, 0, &env, detail, sizeof detail), DECODE_OK);
    ck_assert_str_eq(env.id, "e-9");
    ck_assert_int_eq(env.time_ms, 1795946400000LL);
    decode_envelope_clear(&env);

    /* the header still becomes a text column: it must be text */
    headers[0] = (decode_header_t){"ce_type", "Pl\xc3\x28", 4};
    in.n_headers = 1;
    ck_assert_int_eq(judge(&in), DECODE_INVALID_HEADER);
    ck_assert_msg(strstr(detail, "ce_type") != NULL, "detail: %s", detail);

    /* with ce_specversion it is a CloudEvent, and the detail names the
     * headers it lacks */
    decode_header_t binary[] = {{"ce_specversion", "1.0", 3}, {"ce_type", "Placed", 6}};
    in.headers = binary;
    in.n_headers = 2;
    ck_assert_int_eq(judge(&in), DECODE_INVALID_CLOUDEVENT);
    ck_assert_msg(strstr(detail, "header ce_id") != NULL && strstr(detail, "ce_source") != NULL,
                  "detail: %s", detail);
}
END_TEST

START_TEST(cloudevents_structured_mode)
{
    decode_header_t ctype[] = {{"content-type", "application/cloudevents+json; charset=utf-8", 44}};
    decode_input_t in =
        input("orders", "{\"specversion\":\"1.0\",\"type\":\"Placed\",\"id\":\"x1\","
                        "\"source\":\"/orders\",\"data\":{\"order_id\":\"O-7\"}}");
    in.headers = ctype;
    in.n_headers = 1;
    ck_assert_int_eq(judge(&in), DECODE_OK);
    ck_assert(msg.cloudevent);
    ck_assert_ptr_ne(msg.data, msg.value);
    ck_assert_str_eq(decode_event_type(&msg, &in, def), "Placed");
    ck_assert_int_eq(decode_envelope(&msg, &in, def, 0, &env, detail, sizeof detail), DECODE_OK);
    ck_assert_str_eq(env.key, "O-7");
    ck_assert_str_eq(env.id, "/orders#x1");

    in = input("orders", "{\"specversion\":\"2.0\",\"type\":\"Placed\",\"id\":\"x1\","
                         "\"source\":\"/orders\",\"data\":{}}");
    in.headers = ctype;
    in.n_headers = 1;
    ck_assert_int_eq(judge(&in), DECODE_UNSUPPORTED_SPECVERSION);

    in = input("orders", "{\"specversion\":\"1.0\",\"type\":\"Placed\",\"id\":\"x1\","
                         "\"source\":\"/orders\",\"data_base64\":\"AAAA\"}");
    in.headers = ctype;
    in.n_headers = 1;
    ck_assert_int_eq(judge(&in), DECODE_UNSUPPORTED_DATA);
    ck_assert_str_eq(detail, "CloudEvent data_base64 is not supported: send JSON data");

    in = input("orders", "{\"specversion\":\"1.0\",\"type\":\"Placed\",\"id\":\"x1\","
                         "\"source\":\"/orders\",\"data\":\"text\"}");
    in.headers = ctype;
    in.n_headers = 1;
    ck_assert_int_eq(judge(&in), DECODE_NOT_OBJECT);

    in = input("orders", "{\"specversion\":\"1.0\",\"type\":7,\"id\":\"x1\",\"source\":\"s\","
                         "\"data\":{}}");
    in.headers = ctype;
    in.n_headers = 1;
    ck_assert_int_eq(judge(&in), DECODE_INVALID_CLOUDEVENT);
}
END_TEST

/*
 * A valid CloudEvent whose data is not JSON is refused as Steward's
 * limit (unsupported_data), naming its type, not as bad JSON from the
 * producer; JSON types (application/json, +json, parameters, none) read.
 */
START_TEST(cloudevents_data_that_is_not_json)
{
    decode_header_t ctype[] = {{"content-type", "application/cloudevents+json", 28}};
    static const char *const json_types[] = {"application/json",
                                             "application/json; charset=utf-8",
                                             "APPLICATION/JSON",
                                             "application/vnd.orders.v1+json",
                                             " application/ld+json ;profile=x",
                                             NULL};
    char value[512];
    for (int i = 0; i <= 5; i++) {
        const char *t = i < 5 ? json_types[i] : NULL; /* the last: none declared */
        char attr[128] = "";
        if (t != NULL)
            snprintf(attr, sizeof attr, "\"datacontenttype\":\"%s\",", t);
        snprintf(value, sizeof value,
                 "{\"specversion\":\"1.0\",\"type\":\"Placed\",\"id\":\"x1\","
                 "\"source\":\"/orders\",%s\"data\":{\"order_id\":\"O-7\"}}",
                 attr);
        decode_input_t in = input("orders", value);
        in.headers = ctype;
        in.n_headers = 1;
        ck_assert_msg(judge(&in) == DECODE_OK, "%s: %s", t != NULL ? t : "(none)", detail);
        ck_assert_str_eq(json_string_value(json_object_get(msg.data, "order_id")), "O-7");
    }

    /* structured mode: the datacontenttype attribute */
    decode_input_t in = input("orders", "{\"specversion\":\"1.0\",\"type\":\"Placed\","
                                        "\"id\":\"x1\",\"source\":\"/orders\","
                                        "\"datacontenttype\":\"text/plain\",\"data\":\"hello\"}");
    in.headers = ctype;
    in.n_headers = 1;
    ck_assert_int_eq(judge(&in), DECODE_UNSUPPORTED_DATA);
    ck_assert_str_eq(detail, "CloudEvent datacontenttype \"text/plain\" is not JSON: Steward "
                             "reads JSON data only (application/json or a +json type)");
    ck_assert_str_eq(decode_reason_name(DECODE_UNSUPPORTED_DATA), "unsupported_data");
    /* even with an object for data: the event says it is no JSON */
    in = input("orders", "{\"specversion\":\"1.0\",\"type\":\"Placed\",\"id\":\"x1\","
                         "\"source\":\"/orders\",\"datacontenttype\":\"application/xml\","
                         "\"data\":{\"order_id\":\"O-7\"}}");
    in.headers = ctype;
    in.n_headers = 1;
    ck_assert_int_eq(judge(&in), DECODE_UNSUPPORTED_DATA);
    ck_assert_msg(strstr(detail, "\"application/xml\" is not JSON") != NULL, "%s", detail);
    /* "json" alone is no +json suffix */
    in = input("orders", "{\"specversion\":\"1.0\",\"type\":\"Placed\",\"id\":\"x1\","
                         "\"source\":\"/orders\",\"datacontenttype\":\"application/jsonx\","
                         "\"data\":{}}");
    in.headers = ctype;
    in.n_headers = 1;
    ck_assert_int_eq(judge(&in), DECODE_UNSUPPORTED_DATA);
    /* an invalid CloudEvent is the producer's: its own reason first */
    in = input("orders", "{\"specversion\":\"1.0\",\"type\":\"Placed\",\"source\":\"/o\","
                         "\"datacontenttype\":\"text/plain\",\"data\":\"hello\"}");
    in.headers = ctype;
    in.n_headers = 1;
    ck_assert_int_eq(judge(&in), DECODE_INVALID_CLOUDEVENT);
    ck_assert_msg(strstr(detail, "'id'") != NULL, "%s", detail);
    in = input("orders", "{\"specversion\":\"1.0\",\"type\":\"Placed\",\"id\":\"x1\","
                         "\"source\":\"/o\",\"datacontenttype\":7,\"data\":{}}");
    in.headers = ctype;
    in.n_headers = 1;
    ck_assert_int_eq(judge(&in), DECODE_INVALID_CLOUDEVENT);
    /* structured mode in another format than JSON */
    decode_header_t avro_ctype[] = {{"content-type", "application/cloudevents+avro", 28}};
    in = input("orders", "\x02\x0cPlaced");
    in.headers = avro_ctype;
    in.n_headers = 1;
    ck_assert_int_eq(judge(&in), DECODE_UNSUPPORTED_DATA);
    ck_assert_msg(strstr(detail, "\"application/cloudevents+avro\"") != NULL &&
                      strstr(detail, "JSON only") != NULL,
                  "%s", detail);

    /* binary mode: the content-type header (the Kafka binding's), else
     * ce_datacontenttype */
    decode_header_t binary[] = {
        {"ce_specversion", "1.0", 3}, {"ce_type", "Placed", 6},           {"ce_id", "A-1", 3},
        {"ce_source", "/orders", 7},  {"content-type", "text/plain", 10},
    };
    in = input("orders", "O-7 was placed");
    in.headers = binary;
    in.n_headers = 5;
    ck_assert_int_eq(judge(&in), DECODE_UNSUPPORTED_DATA);
    ck_assert_str_eq(detail, "binary-mode CloudEvent's content-type \"text/plain\" (its "
                             "datacontenttype) is not JSON: Steward reads JSON data only "
                             "(application/json or a +json type)");
    /* not UTF-8 either: the content type is what is said */
    in = input("orders", "\xff\xfe<x/>");
    in.headers = binary;
    in.n_headers = 5;
    binary[4] = (decode_header_t){"Content-Type", "application/xml; charset=utf-16", 31};
    ck_assert_int_eq(judge(&in), DECODE_UNSUPPORTED_DATA);
    ck_assert_msg(strstr(detail, "\"application/xml; charset=utf-16\"") != NULL, "%s", detail);
    binary[4] = (decode_header_t){"ce_datacontenttype", "application/octet-stream", 24};
    ck_assert_int_eq(judge(&in), DECODE_UNSUPPORTED_DATA);
    ck_assert_msg(strstr(detail, "ce_datacontenttype \"application/octet-stream\"") != NULL, "%s",
                  detail);
    /* JSON types read, as does none */
    in = input("orders", "{\"order_id\":\"O-7\"}");
    in.headers = binary;
    for (int i = 0; i <= 5; i++) {
        in.n_headers = i < 5 ? 5 : 4;
        if (i < 5)
            binary[4] = (decode_header_t){i % 2 ? "ce_datacontenttype" : "content-type",
                                          json_types[i], strlen(json_types[i])};
        ck_assert_msg(judge(&in) == DECODE_OK, "%s: %s", i < 5 ? json_types[i] : "(none)", detail);
        ck_assert(msg.cloudevent);
        ck_assert_str_eq(decode_event_type(&msg, &in, def), "Placed");
    }
    /* a JSON value whose CloudEvent says it is not JSON is refused too */
    binary[4] = (decode_header_t){"content-type", "text/plain", 10};
    in.n_headers = 5;
    ck_assert_int_eq(judge(&in), DECODE_UNSUPPORTED_DATA);
    /* without ce_specversion a content-type is no CloudEvent's: the value
     * is read as the JSON it is */
    in.headers = binary + 4;
    in.n_headers = 1;
    ck_assert_int_eq(judge(&in), DECODE_OK);
    ck_assert(!msg.cloudevent);
    in = input("orders", "O-7 was placed");
    in.headers = binary + 4;
    in.n_headers = 1;
    ck_assert_int_eq(judge(&in), DECODE_INVALID_JSON);
}
END_TEST

START_TEST(rfc3339_times)
{
    int64_t ms;
    ck_assert(rfc3339_parse("1970-01-01T00:00:00Z", &ms));
    ck_assert_int_eq(ms, 0);
    ck_assert(rfc3339_parse("1970-01-01T01:00:00.5+01:00", &ms));
    ck_assert_int_eq(ms, 500);
    ck_assert(rfc3339_parse("1969-12-31T23:00:00-01:00", &ms));
    ck_assert_int_eq(ms, 0);
    ck_assert(rfc3339_parse("2026-11-29t10:00:00.123456z", &ms));
    ck_assert_int_eq(ms, 1795946400123LL);
    ck_assert(!rfc3339_parse("2026-11-29", &ms));
    ck_assert(!rfc3339_parse("2026-11-29T10:00:00", &ms)); /* no zone */
    ck_assert(!rfc3339_parse("2026-13-01T10:00:00Z", &ms));
    ck_assert(!rfc3339_parse("2026-11-29T10:00:00Zjunk", &ms));
    ck_assert(!rfc3339_parse("2026-11-29T10:00:00.Z", &ms));
    /* Days per month, leap years included. */
    ck_assert(!rfc3339_parse("2026-02-31T00:00:00Z", &ms));
    ck_assert(!rfc3339_parse("2026-02-29T00:00:00Z", &ms));
    ck_assert(!rfc3339_parse("2026-04-31T00:00:00Z", &ms));
    ck_assert(!rfc3339_parse("1900-02-29T00:00:00Z", &ms));
    ck_assert(!rfc3339_parse("2026-01-00T00:00:00Z", &ms));
    ck_assert(rfc3339_parse("2028-02-29T00:00:00Z", &ms));
    ck_assert(rfc3339_parse("2000-02-29T00:00:00Z", &ms));
    ck_assert(rfc3339_parse("2026-12-31T23:59:59Z", &ms));
    ck_assert(rfc3339_parse("2026-04-30T00:00:00Z", &ms));
}
END_TEST

START_TEST(times_format_back_to_what_they_parse_from)
{
    char buf[40];
    int64_t ms;
    ck_assert_str_eq(rfc3339_format(1795946400123LL, buf, sizeof buf), "2026-11-29T10:00:00.123Z");
    ck_assert(rfc3339_parse(buf, &ms));
    ck_assert_int_eq(ms, 1795946400123LL);
    ck_assert_str_eq(rfc3339_format(-1, buf, sizeof buf), "1969-12-31T23:59:59.999Z");
    ck_assert(rfc3339_parse(buf, &ms));
    ck_assert_int_eq(ms, -1);
}
END_TEST

START_TEST(reason_names)
{
    ck_assert_str_eq(decode_reason_name(DECODE_TOMBSTONE), "tombstone");
    ck_assert_str_eq(decode_reason_name(DECODE_UNSUPPORTED_SPECVERSION), "unsupported_specversion");
    ck_assert_str_eq(decode_reason_name(DECODE_INVALID_TIME), "invalid_time");
    ck_assert_str_eq(decode_reason_name(DECODE_INVALID_ID), "invalid_id");
    ck_assert_str_eq(decode_reason_name(DECODE_INVALID_HEADER), "invalid_header");
    ck_assert_str_eq(decode_reason_name(DECODE_DATABASE_REFUSED), "database_refused");
    ck_assert_str_eq(decode_reason_name(DECODE_UNKNOWN_TYPE), "unknown_type");
    ck_assert_str_eq(decode_reason_name(DECODE_UNLOADABLE_VERSION), "unloadable_version");
    for (int i = 0; i < DECODE_N_REASONS; i++)
        ck_assert_str_ne(decode_reason_name(i), "unknown");
}
END_TEST

/* Limits that let the values below through as a whole. */
static decode_reason_t judge_large(const decode_input_t *in)
{
    static const decode_limits_t large = {1 << 20, 8};
    decode_message_clear(&msg);
    return decode_message(in, &large, &msg, detail, sizeof detail);
}

static decode_reason_t envelope_of(const char *value)
{
    decode_input_t in = input("orders", value);
    decode_envelope_clear(&env);
    ck_assert_int_eq(judge_large(&in), DECODE_OK);
    return decode_envelope(&msg, &in, def, 0, &env, detail, sizeof detail);
}

START_TEST(keys_and_ids_over_the_limits)
{
    char value[8192], big[3001];

    memset(big, 'k', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    snprintf(value, sizeof value, "{\"kind\":\"Placed\",\"order_id\":\"%.*s\"}",
             DECODE_MAX_KEY_BYTES, big);
    ck_assert_int_eq(envelope_of(value), DECODE_OK); /* at the limit: fine */
    snprintf(value, sizeof value, "{\"kind\":\"Placed\",\"order_id\":\"%.*s\"}", 2800, big);
    ck_assert_int_eq(envelope_of(value), DECODE_INVALID_KEY);
    ck_assert_msg(strstr(detail, "2800 bytes, over the limit of 1024") != NULL, "detail: %s",
                  detail);
    ck_assert_ptr_null(env.key);
    ck_assert_ptr_null(env.id);

    snprintf(value, sizeof value, "{\"kind\":\"Placed\",\"order_id\":\"O\",\"event_id\":\"%s\"}",
             big);
    ck_assert_int_eq(envelope_of(value), DECODE_INVALID_ID);
    ck_assert_msg(strstr(detail, "3000 bytes") != NULL, "detail: %s", detail);
    ck_assert_ptr_null(env.id);

    /* A CloudEvent's id is source#id: two headers within their limit can
     * still make an id over it. */
    char half[700];
    memset(half, 'h', sizeof half - 1);
    half[sizeof half - 1] = '\0';
    decode_header_t headers[] = {{"ce_specversion", "1.0", 3},
                                 {"ce_type", "Placed", 6},
                                 {"ce_id", half, strlen(half)},
                                 {"ce_source", half, strlen(half)}};
    decode_input_t in = input("orders", "{\"order_id\":\"O\"}");
    in.headers = headers;
    in.n_headers = 4;
    ck_assert_int_eq(judge_large(&in), DECODE_OK);
    ck_assert_int_eq(decode_envelope(&msg, &in, def, 0, &env, detail, sizeof detail),
                     DECODE_INVALID_ID);
    ck_assert_msg(strstr(detail, "source#id") != NULL, "detail: %s", detail);

    headers[2].value = big;
    headers[2].len = 3000;
    ck_assert_int_eq(judge_large(&in), DECODE_INVALID_ID);
    ck_assert_msg(strstr(detail, "ce_id is 3000 bytes") != NULL, "detail: %s", detail);
}
END_TEST

START_TEST(cloudevents_headers_must_be_text)
{
    decode_header_t headers[] = {{"ce_specversion", "1.0", 3},
                                 {"ce_type", "Placed", 6},
                                 {"ce_id", "A-1", 3},
                                 {"ce_source", "shop\xff", 5}};
    decode_input_t in = input("orders", "{\"order_id\":\"O\"}");
    in.headers = headers;
    in.n_headers = 4;
    ck_assert_int_eq(judge_large(&in), DECODE_INVALID_HEADER);
    ck_assert_msg(strstr(detail, "ce_source is not valid UTF-8") != NULL, "detail: %s", detail);

    headers[3].value = "sh\0p";
    headers[3].len = 4;
    ck_assert_int_eq(judge_large(&in), DECODE_INVALID_HEADER);
    ck_assert_msg(strstr(detail, "ce_source holds a NUL byte") != NULL, "detail: %s", detail);

    char big[1100];
    memset(big, 't', sizeof big);
    headers[3] = (decode_header_t){"ce_source", "shop", 4};
    headers[1] = (decode_header_t){"ce_type", big, sizeof big};
    ck_assert_int_eq(judge_large(&in), DECODE_INVALID_HEADER);
    ck_assert_msg(strstr(detail, "ce_type is 1100 bytes") != NULL, "detail: %s", detail);
}
END_TEST

START_TEST(times_outside_what_postgresql_stores)
{
    ck_assert_int_eq(envelope_of("{\"kind\":\"Placed\",\"order_id\":\"O\",\"at\":1e16}"),
                     DECODE_INVALID_TIME); /* a real: not epoch ms at all */
    ck_assert_int_eq(
        envelope_of("{\"kind\":\"Placed\",\"order_id\":\"O\",\"at\":10000000000000000}"),
        DECODE_INVALID_TIME);
    ck_assert_msg(strstr(detail, "outside the years 0001 to 9999") != NULL, "detail: %s", detail);
    ck_assert_ptr_null(env.id);
    ck_assert_int_eq(
        envelope_of("{\"kind\":\"Placed\",\"order_id\":\"O\",\"at\":9223372036854775000}"),
        DECODE_INVALID_TIME);
    ck_assert_int_eq(
        envelope_of("{\"kind\":\"Placed\",\"order_id\":\"O\",\"at\":-9223372036854775000}"),
        DECODE_INVALID_TIME);
    ck_assert_int_eq(
        envelope_of("{\"kind\":\"Placed\",\"order_id\":\"O\",\"at\":\"0000-12-31T23:59:59Z\"}"),
        DECODE_INVALID_TIME);
    /* The edges themselves are fine. */
    ck_assert_int_eq(envelope_of("{\"kind\":\"Placed\",\"order_id\":\"O\",\"at\":253402300799999}"),
                     DECODE_OK);
    ck_assert_int_eq(
        envelope_of("{\"kind\":\"Placed\",\"order_id\":\"O\",\"at\":\"0001-01-01T00:00:00Z\"}"),
        DECODE_OK);
    ck_assert_int_eq(env.time_ms, DECODE_MIN_TIME_MS);
    decode_envelope_clear(&env);

    /* A Kafka timestamp a producer set out of range, when there is no other time. */
    decode_input_t in = input("orders", "{\"kind\":\"Placed\",\"order_id\":\"O\"}");
    in.timestamp_ms = 10000000000000000LL;
    ck_assert_int_eq(judge_large(&in), DECODE_OK);
    ck_assert_int_eq(decode_envelope(&msg, &in, def, 0, &env, detail, sizeof detail),
                     DECODE_INVALID_TIME);
    ck_assert_msg(strstr(detail, "(Kafka)") != NULL, "detail: %s", detail);

    /* A CloudEvent's time, in RFC 3339 but before the year 1. */
    decode_header_t headers[] = {{"ce_specversion", "1.0", 3},
                                 {"ce_type", "Placed", 6},
                                 {"ce_id", "A-1", 3},
                                 {"ce_source", "shop", 4},
                                 {"ce_time", "0000-06-01T00:00:00Z", 20}};
    in.headers = headers;
    in.n_headers = 5;
    ck_assert_int_eq(judge_large(&in), DECODE_INVALID_TIME);
}
END_TEST

START_TEST(integers_beyond_64_bits_become_reals)
{
    decode_input_t in = input("orders", "{\"kind\":\"Placed\",\"order_id\":\"O\","
                                        "\"big\":123456789012345678901234567890,"
                                        "\"neg\":-99999999999999999999,\"small\":42,"
                                        "\"edge\":9223372036854775807,"
                                        "\"text\":\"123456789012345678901234567890\","
                                        "\"list\":[1, 18446744073709551616]}");
    ck_assert_int_eq(judge_large(&in), DECODE_OK);
    json_t *big = json_object_get(msg.data, "big");
    ck_assert(json_is_real(big));
    ck_assert(json_real_value(big) > 1.2e29 && json_real_value(big) < 1.3e29);
    ck_assert(json_is_real(json_object_get(msg.data, "neg")));
    ck_assert(json_is_integer(json_object_get(msg.data, "small")));
    ck_assert_int_eq(json_integer_value(json_object_get(msg.data, "small")), 42);
    ck_assert(json_is_integer(json_object_get(msg.data, "edge")));
    ck_assert_str_eq(json_string_value(json_object_get(msg.data, "text")),
                     "123456789012345678901234567890");
    ck_assert(json_is_real(json_array_get(json_object_get(msg.data, "list"), 1)));
    ck_assert_int_eq(decode_envelope(&msg, &in, def, 0, &env, detail, sizeof detail), DECODE_OK);

    /* Beyond a double too: still invalid JSON. */
    char huge[600] = "{\"kind\":\"Placed\",\"x\":";
    size_t len = strlen(huge);
    memset(huge + len, '9', 400);
    strcpy(huge + len + 400, "}");
    in = input("orders", huge);
    ck_assert_int_eq(judge_large(&in), DECODE_INVALID_JSON);
}
END_TEST

START_TEST(control_characters_made_printable)
{
    json_t *doc =
        json_pack("{s:s, s:[s, s], s:{s:s}}", "key", "K\x1b]0;owned\x07-1", "list", "plain",
                  "csi\xc2\x9b"
                  "2J",
                  "nested", "a\x1b", "tab\there");
    decode_json_printable(doc);
    ck_assert_str_eq(json_string_value(json_object_get(doc, "key")), "K\\x1b]0;owned\\x07-1");
    ck_assert_str_eq(json_string_value(json_array_get(json_object_get(doc, "list"), 0)), "plain");
    ck_assert_str_eq(json_string_value(json_array_get(json_object_get(doc, "list"), 1)),
                     "csi\\u009b2J");
    json_t *nested = json_object_get(doc, "nested");
    ck_assert_ptr_null(json_object_get(nested, "a\x1b"));
    ck_assert_str_eq(json_string_value(json_object_get(nested, "a\\x1b")), "tab\\x09here");
    json_decref(doc);
}
END_TEST

/* A definition like setup()'s with `envelope` and the Placed event replaced. */
static def_t *def_with(const char *key, const char *envelope, const char *placed)
{
    char doc[2048];
    def_problems_t problems = {0};
    snprintf(doc, sizeof doc,
             "{\"process\":\"p\",\"version\":1,\"mode\":\"shadow\",\"owner\":\"team\","
             "\"key\":%s,\"envelope\":%s,"
             "\"events\":{\"Placed\":%s,\"Paid\":{\"topic\":\"payments\"}},"
             "\"start\":{\"on\":\"Placed\",\"to\":\"open\"},"
             "\"states\":{\"open\":{\"deadline\":\"1h\",\"on\":{\"Paid\":\"done\"}},"
             "            \"done\":{\"terminal\":\"success\"}}}",
             key, envelope, placed);
    def_t *d = def_load_json(doc, strlen(doc), "test", &problems);
    ck_assert_msg(d != NULL, "definition: %s", problems.n ? problems.items[0].message : "?");
    def_problems_clear(&problems);
    return d;
}

START_TEST(integer_keys_are_their_decimal_text)
{
    decode_input_t in = input("orders", "{\"kind\":\"Placed\",\"order_id\":5}");
    ck_assert_int_eq(judge(&in), DECODE_OK);
    ck_assert_int_eq(decode_envelope(&msg, &in, def, 0, &env, detail, sizeof detail), DECODE_OK);
    ck_assert_str_eq(env.key, "5");
    decode_envelope_clear(&env);

    in = input("orders", "{\"kind\":\"Placed\",\"order_id\":-9223372036854775807}");
    ck_assert_int_eq(judge(&in), DECODE_OK);
    ck_assert_int_eq(decode_envelope(&msg, &in, def, 0, &env, detail, sizeof detail), DECODE_OK);
    ck_assert_str_eq(env.key, "-9223372036854775807");
}
END_TEST

START_TEST(message_key_as_correlation_key)
{
    def_t *d = def_with("{\"from\":\"message_key\"}", "{}", "{\"topic\":\"orders\"}");
    decode_input_t in = input("orders", "{\"type\":\"Placed\",\"order_id\":\"not-this\"}");
    in.key = "O-42";
    in.key_len = 4;
    ck_assert_int_eq(judge(&in), DECODE_OK);
    ck_assert_int_eq(decode_envelope(&msg, &in, d, 0, &env, detail, sizeof detail), DECODE_OK);
    ck_assert_str_eq(env.key, "O-42");
    decode_envelope_clear(&env);

    in.key = NULL;
    in.key_len = 0;
    ck_assert_int_eq(decode_envelope(&msg, &in, d, 0, &env, detail, sizeof detail),
                     DECODE_MISSING_KEY);
    ck_assert_msg(strstr(detail, "no Kafka message key") != NULL, "detail: %s", detail);

    in.key = "O\0X";
    in.key_len = 3;
    ck_assert_int_eq(decode_envelope(&msg, &in, d, 0, &env, detail, sizeof detail),
                     DECODE_INVALID_KEY);
    ck_assert_msg(strstr(detail, "NUL") != NULL, "detail: %s", detail);
    def_free(d);
}
END_TEST

START_TEST(type_from_a_named_header_or_the_topic)
{
    def_t *d = def_with("\"/order_id\"", "{\"type\":{\"header\":\"event-type\"}}",
                        "{\"topic\":\"orders\"}");
    decode_header_t h[] = {{"Event-Type", "Placed", 6}, {"ce_type", "Other", 5}};
    decode_input_t in = input("orders", "{\"type\":\"Paid\",\"order_id\":\"O\"}");
    in.headers = h;
    in.n_headers = 1;
    ck_assert_int_eq(judge(&in), DECODE_OK);
    ck_assert_str_eq(decode_event_type(&msg, &in, d), "Placed");

    in.n_headers = 0; /* the payload's "type" is not where this definition looks */
    ck_assert_int_eq(judge(&in), DECODE_OK);
    ck_assert_ptr_null(decode_event_type(&msg, &in, d));
    decode_type_source(d, "orders", detail, sizeof detail);
    ck_assert_msg(strstr(detail, "header 'event-type'") != NULL, "detail: %s", detail);
    def_free(d);

    d = def_with("\"/order_id\"", "{}", "{\"topic\":\"orders\",\"type_from_topic\":true}");
    in = input("orders", "{\"type\":\"Anything\",\"order_id\":\"O\"}");
    ck_assert_int_eq(judge(&in), DECODE_OK);
    ck_assert_str_eq(decode_event_type(&msg, &in, d), "Placed");
    in = input("payments", "{\"type\":\"Paid\",\"order_id\":\"O\"}");
    ck_assert_int_eq(judge(&in), DECODE_OK);
    ck_assert_str_eq(decode_event_type(&msg, &in, d), "Paid");
    def_free(d);
}
END_TEST

static decode_reason_t time_of(const def_t *d, const char *value, int64_t kafka_ms)
{
    decode_input_t in = input("orders", value);
    in.timestamp_ms = kafka_ms;
    decode_envelope_clear(&env);
    ck_assert_int_eq(judge(&in), DECODE_OK);
    return decode_envelope(&msg, &in, d, 0, &env, detail, sizeof detail);
}

START_TEST(declared_time_formats)
{
    const char *placed = "{\"topic\":\"orders\"}";
    def_t *s = def_with("\"/id\"", "{\"time\":{\"pointer\":\"/at\",\"format\":\"epoch_seconds\"}}",
                        placed);
    ck_assert_int_eq(time_of(s, "{\"id\":\"O\",\"at\":1795946400}", 5), DECODE_OK);
    ck_assert_int_eq(env.time_ms, 1795946400000LL);
    ck_assert_int_eq(time_of(s, "{\"id\":\"O\",\"at\":\"2026-11-29T10:00:00Z\"}", 5),
                     DECODE_INVALID_TIME);
    ck_assert_msg(strstr(detail, "not an integer of epoch seconds") != NULL, "detail: %s", detail);
    ck_assert_int_eq(time_of(s, "{\"id\":\"O\"}", 5), DECODE_INVALID_TIME);
    ck_assert_msg(strstr(detail, "no time at /at") != NULL, "detail: %s", detail);
    ck_assert_int_eq(time_of(s, "{\"id\":\"O\",\"at\":9223372036854775807}", 5),
                     DECODE_INVALID_TIME);
    ck_assert_msg(strstr(detail, "years 0001 to 9999") != NULL, "detail: %s", detail);
    def_free(s);

    def_t *ms =
        def_with("\"/id\"", "{\"time\":{\"pointer\":\"/at\",\"format\":\"epoch_millis\"}}", placed);
    ck_assert_int_eq(time_of(ms, "{\"id\":\"O\",\"at\":1795946400123}", 5), DECODE_OK);
    ck_assert_int_eq(env.time_ms, 1795946400123LL);
    ck_assert_int_eq(time_of(ms, "{\"id\":\"O\",\"at\":1795946400.5}", 5), DECODE_INVALID_TIME);
    ck_assert_msg(strstr(detail, "a number with a fraction, not epoch milliseconds") != NULL,
                  "detail: %s", detail);
    def_free(ms);

    def_t *text =
        def_with("\"/id\"", "{\"time\":{\"pointer\":\"/at\",\"format\":\"rfc3339\"}}", placed);
    ck_assert_int_eq(time_of(text, "{\"id\":\"O\",\"at\":\"2026-11-29T10:00:00Z\"}", 5), DECODE_OK);
    ck_assert_int_eq(env.time_ms, 1795946400000LL);
    ck_assert_int_eq(time_of(text, "{\"id\":\"O\",\"at\":1795946400000}", 5), DECODE_INVALID_TIME);
    def_free(text);

    def_t *kafka = def_with("\"/id\"", "{\"time\":{\"from\":\"kafka_timestamp\"}}", placed);
    ck_assert_int_eq(time_of(kafka, "{\"id\":\"O\",\"at\":\"2026-11-29T10:00:00Z\"}", 1234),
                     DECODE_OK);
    ck_assert_int_eq(env.time_ms, 1234);
    ck_assert_int_eq(time_of(kafka, "{\"id\":\"O\"}", -1), DECODE_INVALID_TIME);
    ck_assert_msg(strstr(detail, "no Kafka timestamp") != NULL, "detail: %s", detail);
    def_free(kafka);
}
END_TEST

Suite *decode_suite(void)
{
    Suite *s = suite_create("decode");
    TCase *tc = tcase_create("decode");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, bad_messages_are_rejected_with_their_reason);
    tcase_add_test(tc, utf8_validation);
    tcase_add_test(tc, plain_json_envelope);
    tcase_add_test(tc, envelope_fallbacks_and_event_key_pointer);
    tcase_add_test(tc, integer_keys_are_their_decimal_text);
    tcase_add_test(tc, message_key_as_correlation_key);
    tcase_add_test(tc, type_from_a_named_header_or_the_topic);
    tcase_add_test(tc, declared_time_formats);
    tcase_add_test(tc, envelope_rejections);
    tcase_add_test(tc, cloudevents_binary_mode);
    tcase_add_test(tc, a_bare_ce_type_header_names_the_type);
    tcase_add_test(tc, cloudevents_structured_mode);
    tcase_add_test(tc, cloudevents_data_that_is_not_json);
    tcase_add_test(tc, rfc3339_times);
    tcase_add_test(tc, times_format_back_to_what_they_parse_from);
    tcase_add_test(tc, reason_names);
    tcase_add_test(tc, keys_and_ids_over_the_limits);
    tcase_add_test(tc, cloudevents_headers_must_be_text);
    tcase_add_test(tc, times_outside_what_postgresql_stores);
    tcase_add_test(tc, integers_beyond_64_bits_become_reals);
    tcase_add_test(tc, control_characters_made_printable);
    suite_add_tcase(s, tc);
    return s;
}
