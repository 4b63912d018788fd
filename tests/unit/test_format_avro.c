/*
 * test_format_avro - Avro payloads written by avro-c's own writer (the
 * encoder a producer would use) read back by format_avro into the JSON
 * the mapping promises: every type, unions, nested records, maps, enums,
 * logical types; and each payload that must not read refused with a
 * detail saying where: truncated, trailing bytes, too deep (a recursive
 * schema), a string that is not UTF-8. Then decode_message_avro(): the
 * framed message through to an event, and the format topics may declare
 * (confluent_avro read, confluent_protobuf refused with its reason).
 */
#include "formats/decode.h"
#include "formats/format_avro.h"
#include "testlib.h"

#include <avro.h>
#include <check.h>
#include <stdlib.h>
#include <string.h>

static char detail[256];
static char errstr[256];

/* The schema, parsed by format_avro; fails the test when it does not parse. */
static format_avro_schema_t *schema_of(const char *text)
{
    format_avro_schema_t *s = format_avro_schema_new(text, strlen(text), errstr, sizeof errstr);
    ck_assert_msg(s != NULL, "schema: %s", errstr);
    return s;
}

/* The avro-c value of `text`'s schema, for the test to fill. */
typedef struct writer {
    avro_schema_t schema;
    avro_value_iface_t *iface;
    avro_value_t value;
} writer_t;

static void writer_init(writer_t *w, const char *text)
{
    ck_assert_int_eq(avro_schema_from_json_length(text, strlen(text), &w->schema), 0);
    w->iface = avro_generic_class_from_schema(w->schema);
    ck_assert_ptr_nonnull(w->iface);
    ck_assert_int_eq(avro_generic_value_new(w->iface, &w->value), 0);
}

/* The value written by avro-c into buf; returns its length. */
static size_t writer_encode(writer_t *w, char *buf, size_t size)
{
    avro_writer_t out = avro_writer_memory(buf, (int64_t) size);
    ck_assert_int_eq(avro_value_write(out, &w->value), 0);
    size_t len = (size_t) avro_writer_tell(out);
    avro_writer_free(out);
    return len;
}

static void writer_clear(writer_t *w)
{
    avro_value_decref(&w->value);
    avro_value_iface_decref(w->iface);
    avro_schema_decref(w->schema);
}

static avro_value_t field(avro_value_t *record, const char *name)
{
    avro_value_t f;
    ck_assert_int_eq(avro_value_get_by_name(record, name, &f, NULL), 0);
    return f;
}

/* Reads buf with text's schema, expects `expected` (JSON text). */
static void expect_json(const char *schema_text, const char *buf, size_t len, const char *expected)
{
    format_avro_schema_t *s = schema_of(schema_text);
    json_t *got = NULL;
    format_avro_result_t res = format_avro_decode(s, buf, len, 16, &got, detail, sizeof detail);
    ck_assert_msg(res == FORMAT_AVRO_OK, "decode: %s", detail);
    json_t *want = json_loads(expected, 0, NULL);
    ck_assert_ptr_nonnull(want);
    char *g = json_dumps(got, JSON_SORT_KEYS | JSON_COMPACT);
    ck_assert_msg(json_equal(got, want), "got %s, want %s", g, expected);
    free(g);
    json_decref(got);
    json_decref(want);
    format_avro_schema_free(s);
}

static const char *const every_type =
    "{\"type\":\"record\",\"name\":\"Order\",\"fields\":["
    "{\"name\":\"order_id\",\"type\":\"string\"},"
    "{\"name\":\"qty\",\"type\":\"int\"},"
    "{\"name\":\"total_cents\",\"type\":\"long\"},"
    "{\"name\":\"ratio\",\"type\":\"float\"},"
    "{\"name\":\"price\",\"type\":\"double\"},"
    "{\"name\":\"paid\",\"type\":\"boolean\"},"
    "{\"name\":\"nothing\",\"type\":\"null\"},"
    "{\"name\":\"blob\",\"type\":\"bytes\"},"
    "{\"name\":\"digest\",\"type\":{\"type\":\"fixed\",\"name\":\"D4\",\"size\":4}},"
    "{\"name\":\"status\",\"type\":{\"type\":\"enum\",\"name\":\"S\",\"symbols\":[\"NEW\",\"PAID\"]"
    "}},"
    "{\"name\":\"placed_at\",\"type\":{\"type\":\"long\",\"logicalType\":\"timestamp-millis\"}},"
    "{\"name\":\"tags\",\"type\":{\"type\":\"array\",\"items\":\"string\"}},"
    "{\"name\":\"attrs\",\"type\":{\"type\":\"map\",\"values\":\"long\"}},"
    "{\"name\":\"coupon\",\"type\":[\"null\",\"string\"]},"
    "{\"name\":\"note\",\"type\":[\"null\",\"string\"]},"
    "{\"name\":\"customer\",\"type\":{\"type\":\"record\",\"name\":\"Customer\",\"fields\":["
    "  {\"name\":\"id\",\"type\":\"long\"},"
    "  {\"name\":\"address\",\"type\":{\"type\":\"record\",\"name\":\"Address\",\"fields\":["
    "    {\"name\":\"city\",\"type\":\"string\"}]}}]}}"
    "]}";

START_TEST(every_type_of_the_mapping_is_read)
{
    writer_t w;
    writer_init(&w, every_type);
    avro_value_t f, child, branch;
    f = field(&w.value, "order_id");
    avro_value_set_string(&f, "o-1");
    f = field(&w.value, "qty");
    avro_value_set_int(&f, -3);
    f = field(&w.value, "total_cents");
    avro_value_set_long(&f, 9007199254740993LL);
    f = field(&w.value, "ratio");
    avro_value_set_float(&f, 0.5f);
    f = field(&w.value, "price");
    avro_value_set_double(&f, 12.25);
    f = field(&w.value, "paid");
    avro_value_set_boolean(&f, 1);
    f = field(&w.value, "nothing");
    avro_value_set_null(&f);
    f = field(&w.value, "blob");
    avro_value_set_bytes(&f, "hi!?", 4);
    f = field(&w.value, "digest");
    avro_value_set_fixed(&f, "\x01\x02\x03\x04", 4);
    f = field(&w.value, "status");
    avro_value_set_enum(&f, 1);
    f = field(&w.value, "placed_at");
    avro_value_set_long(&f, 1795000000123LL);
    f = field(&w.value, "tags");
    avro_value_append(&f, &child, NULL);
    avro_value_set_string(&child, "a");
    avro_value_append(&f, &child, NULL);
    avro_value_set_string(&child, "b/c");
    f = field(&w.value, "attrs");
    avro_value_add(&f, "x", &child, NULL, NULL);
    avro_value_set_long(&child, 7);
    f = field(&w.value, "coupon");
    avro_value_set_branch(&f, 1, &branch);
    avro_value_set_string(&branch, "SAVE");
    f = field(&w.value, "note");
    avro_value_set_branch(&f, 0, &branch);
    avro_value_set_null(&branch);
    f = field(&w.value, "customer");
    child = field(&f, "id");
    avro_value_set_long(&child, 42);
    child = field(&f, "address");
    avro_value_t city = field(&child, "city");
    avro_value_set_string(&city, "Zürich");

    char buf[512];
    size_t len = writer_encode(&w, buf, sizeof buf);
    expect_json(every_type, buf, len,
                "{\"order_id\":\"o-1\",\"qty\":-3,\"total_cents\":9007199254740993,"
                "\"ratio\":0.5,\"price\":12.25,\"paid\":true,\"nothing\":null,"
                "\"blob\":\"aGkhPw==\",\"digest\":\"AQIDBA==\",\"status\":\"PAID\","
                "\"placed_at\":1795000000123,\"tags\":[\"a\",\"b/c\"],\"attrs\":{\"x\":7},"
                "\"coupon\":\"SAVE\",\"note\":null,"
                "\"customer\":{\"id\":42,\"address\":{\"city\":\"Zürich\"}}}");
    writer_clear(&w);
}
END_TEST

static const char *const small =
    "{\"type\":\"record\",\"name\":\"R\",\"fields\":["
    "{\"name\":\"order_id\",\"type\":\"string\"},{\"name\":\"n\",\"type\":\"long\"}]}";

/* The record {order_id: id, n: n} as avro-c writes it. */
static size_t small_record(char *buf, size_t size, const char *id, int64_t n)
{
    writer_t w;
    writer_init(&w, small);
    avro_value_t f = field(&w.value, "order_id");
    avro_value_set_string(&f, id);
    f = field(&w.value, "n");
    avro_value_set_long(&f, n);
    size_t len = writer_encode(&w, buf, size);
    writer_clear(&w);
    return len;
}

START_TEST(a_truncated_payload_is_refused_saying_where)
{
    char buf[64];
    size_t len = small_record(buf, sizeof buf, "order-123", 5);
    format_avro_schema_t *s = schema_of(small);
    json_t *got = NULL;
    /* Cut inside the string, then inside the long that follows. */
    ck_assert_int_eq(format_avro_decode(s, buf, 4, 16, &got, detail, sizeof detail),
                     FORMAT_AVRO_INVALID);
    ck_assert_ptr_null(got);
    ck_assert_msg(strstr(detail, "at /order_id") != NULL && strstr(detail, "truncated") != NULL,
                  "%s", detail);
    ck_assert_int_eq(format_avro_decode(s, buf, len - 1, 16, &got, detail, sizeof detail),
                     FORMAT_AVRO_INVALID);
    ck_assert_msg(strstr(detail, "at /n") != NULL && strstr(detail, "truncated") != NULL, "%s",
                  detail);
    ck_assert_int_eq(format_avro_decode(s, buf, 0, 16, &got, detail, sizeof detail),
                     FORMAT_AVRO_INVALID);
    format_avro_schema_free(s);
}
END_TEST

START_TEST(trailing_bytes_are_refused)
{
    char buf[64];
    size_t len = small_record(buf, sizeof buf, "a", 1);
    buf[len++] = 0x02;
    buf[len++] = 0x02;
    format_avro_schema_t *s = schema_of(small);
    json_t *got = NULL;
    ck_assert_int_eq(format_avro_decode(s, buf, len, 16, &got, detail, sizeof detail),
                     FORMAT_AVRO_INVALID);
    ck_assert_ptr_null(got);
    ck_assert_msg(strstr(detail, "2 bytes after the value's end") != NULL, "%s", detail);
    format_avro_schema_free(s);
}
END_TEST

START_TEST(a_string_that_is_not_utf8_is_refused)
{
    char buf[64];
    size_t len = small_record(buf, sizeof buf, "ab", 1);
    ck_assert_int_eq(buf[1], 'a');
    buf[1] = (char) 0xff; /* the string's first byte, after its length */
    format_avro_schema_t *s = schema_of(small);
    json_t *got = NULL;
    ck_assert_int_eq(format_avro_decode(s, buf, len, 16, &got, detail, sizeof detail),
                     FORMAT_AVRO_INVALID_UTF8);
    ck_assert_msg(strstr(detail, "at /order_id") != NULL && strstr(detail, "UTF-8") != NULL, "%s",
                  detail);
    buf[1] = '\0'; /* a NUL byte, which no JSON text of the event may hold */
    ck_assert_int_eq(format_avro_decode(s, buf, len, 16, &got, detail, sizeof detail),
                     FORMAT_AVRO_INVALID_UTF8);
    format_avro_schema_free(s);
}
END_TEST

/* A linked list: each node a record holding the next one or null. */
static const char *const list =
    "{\"type\":\"record\",\"name\":\"Node\",\"fields\":["
    "{\"name\":\"v\",\"type\":\"int\"},{\"name\":\"next\",\"type\":[\"null\",\"Node\"]}]}";

/* A list of n nodes, encoded by hand: per node v (zig-zag 1 = 0x02) and
 * the union's branch (1: a Node = 0x02), the last with branch 0 (null). */
static size_t list_of(char *buf, int n)
{
    size_t len = 0;
    for (int i = 0; i < n; i++) {
        buf[len++] = 0x02;
        buf[len++] = i + 1 < n ? 0x02 : 0x00;
    }
    return len;
}

START_TEST(nesting_is_bounded_while_reading)
{
    char buf[256];
    format_avro_schema_t *s = schema_of(list);
    json_t *got = NULL;
    size_t len = list_of(buf, 16);
    ck_assert_int_eq(format_avro_decode(s, buf, len, 16, &got, detail, sizeof detail),
                     FORMAT_AVRO_OK);
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(got, "next"), "v")), 1);
    json_decref(got);
    len = list_of(buf, 17);
    ck_assert_int_eq(format_avro_decode(s, buf, len, 16, &got, detail, sizeof detail),
                     FORMAT_AVRO_TOO_DEEP);
    ck_assert_ptr_null(got);
    ck_assert_msg(strstr(detail, "deeper than 16") != NULL && strstr(detail, "/next/next") != NULL,
                  "%s", detail);
    format_avro_schema_free(s);
}
END_TEST

START_TEST(bad_indexes_and_counts_are_refused)
{
    const char *u =
        "{\"type\":\"record\",\"name\":\"U\",\"fields\":["
        "{\"name\":\"c\",\"type\":[\"null\",\"string\"]},"
        "{\"name\":\"e\",\"type\":{\"type\":\"enum\",\"name\":\"E\",\"symbols\":[\"A\"]}},"
        "{\"name\":\"b\",\"type\":\"boolean\"},"
        "{\"name\":\"xs\",\"type\":{\"type\":\"array\",\"items\":\"null\"}}]}";
    format_avro_schema_t *s = schema_of(u);
    json_t *got = NULL;
    ck_assert_int_eq(format_avro_decode(s, "\x04", 1, 16, &got, detail, sizeof detail),
                     FORMAT_AVRO_INVALID);
    ck_assert_msg(strstr(detail, "union branch 2 of 2") != NULL, "%s", detail);
    ck_assert_int_eq(format_avro_decode(s, "\x00\x02", 2, 16, &got, detail, sizeof detail),
                     FORMAT_AVRO_INVALID);
    ck_assert_msg(strstr(detail, "at /e") != NULL && strstr(detail, "enum index 1") != NULL, "%s",
                  detail);
    ck_assert_int_eq(format_avro_decode(s, "\x00\x00\x07", 3, 16, &got, detail, sizeof detail),
                     FORMAT_AVRO_INVALID);
    ck_assert_msg(strstr(detail, "boolean") != NULL, "%s", detail);
    /* A block claiming 2^40 null items, which would spin. */
    ck_assert_int_eq(format_avro_decode(s, "\x00\x00\x01\x80\x80\x80\x80\x80\x40", 9, 16, &got,
                                        detail, sizeof detail),
                     FORMAT_AVRO_INVALID);
    ck_assert_msg(strstr(detail, "at /xs") != NULL && strstr(detail, "items") != NULL, "%s",
                  detail);
    /* Three nulls, in a block with its byte size (a negative count). */
    ck_assert_int_eq(
        format_avro_decode(s, "\x00\x00\x01\x05\x00\x00", 6, 16, &got, detail, sizeof detail),
        FORMAT_AVRO_OK);
    ck_assert_uint_eq(json_array_size(json_object_get(got, "xs")), 3);
    json_decref(got);
    format_avro_schema_free(s);
}
END_TEST

START_TEST(a_schema_that_does_not_parse_is_an_error)
{
    const char *bad[] = {"{\"type\":\"record\",\"name\":\"R\"}", "not json", "{\"type\":\"nope\"}"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        errstr[0] = '\0';
        ck_assert_ptr_null(format_avro_schema_new(bad[i], strlen(bad[i]), errstr, sizeof errstr));
        ck_assert_msg(strstr(errstr, "not an Avro schema") != NULL, "%s", errstr);
    }
    format_avro_schema_free(NULL);
}
END_TEST

START_TEST(a_framed_message_becomes_an_event)
{
    char buf[128];
    memcpy(buf, "\0\0\0\0\x2a", 5);
    size_t len = 5 + small_record(buf + 5, sizeof buf - 5, "o-9", 3);
    decode_input_t in = {.topic = "orders", .value = buf, .value_len = len, .timestamp_ms = -1};
    decode_limits_t limits = {4096, 16};
    decode_message_t msg;
    format_avro_schema_t *s = schema_of(small);
    ck_assert_int_eq(decode_message_avro(&in, &limits, s, &msg, detail, sizeof detail), DECODE_OK);
    ck_assert_int_eq(msg.schema_id, 42);
    ck_assert(msg.avro);
    ck_assert_str_eq(json_string_value(json_object_get(msg.data, "order_id")), "o-9");
    decode_message_clear(&msg);
    /* Cut: invalid_avro naming the schema id and where. */
    in.value_len = len - 1;
    ck_assert_int_eq(decode_message_avro(&in, &limits, s, &msg, detail, sizeof detail),
                     DECODE_INVALID_AVRO);
    ck_assert_msg(strstr(detail, "schema id 42") != NULL && strstr(detail, "at /n") != NULL, "%s",
                  detail);
    ck_assert_str_eq(decode_reason_name(DECODE_INVALID_AVRO), "invalid_avro");
    ck_assert_str_eq(decode_reason_name(DECODE_UNKNOWN_SCHEMA), "unknown_schema");
    ck_assert_str_eq(decode_reason_name(DECODE_UNSUPPORTED_SCHEMA_TYPE), "unsupported_schema_type");
    /* Over the size limit before anything is read. */
    limits.max_bytes = 8;
    in.value_len = len;
    ck_assert_int_eq(decode_message_avro(&in, &limits, s, &msg, detail, sizeof detail),
                     DECODE_TOO_LARGE);
    format_avro_schema_free(s);
}
END_TEST

/* A framed value on a "json" topic names both formats that would read it. */
START_TEST(a_framed_value_on_a_json_topic_says_how_to_read_it)
{
    char buf[64];
    memcpy(buf, "\0\0\0\0\x07", 5);
    size_t len = 5 + small_record(buf + 5, sizeof buf - 5, "o", 1);
    decode_input_t in = {.topic = "orders", .value = buf, .value_len = len, .timestamp_ms = -1};
    decode_limits_t limits = {4096, 16};
    decode_message_t msg;
    ck_assert_int_eq(decode_message(&in, &limits, &msg, detail, sizeof detail),
                     DECODE_SCHEMA_REGISTRY_FORMAT);
    ck_assert_msg(strstr(detail, "schema id 7") != NULL &&
                      strstr(detail, "\"confluent_avro\"") != NULL &&
                      strstr(detail, "\"confluent_json\"") != NULL,
                  "%s", detail);
}
END_TEST

static const char *definition_with(const char *format, char *doc, size_t size)
{
    snprintf(doc, size,
             "{\"process\":\"p\",\"version\":1,\"mode\":\"shadow\",\"owner\":\"team\","
             "\"key\":\"/order_id\",\"topics\":{\"orders\":{\"format\":\"%s\"}},"
             "\"events\":{\"Placed\":{\"topic\":\"orders\"},\"Paid\":{\"topic\":\"orders\"}},"
             "\"start\":{\"on\":\"Placed\",\"to\":\"open\"},"
             "\"states\":{\"open\":{\"deadline\":\"1h\",\"on\":{\"Paid\":\"done\"}},"
             "            \"done\":{\"terminal\":\"success\"}}}",
             format);
    return doc;
}

START_TEST(topics_declare_confluent_avro_and_not_protobuf)
{
    char doc[1024];
    def_problems_t problems = {0};
    definition_with("confluent_avro", doc, sizeof doc);
    def_t *d = def_load_json(doc, strlen(doc), "avro.json", &problems);
    ck_assert_ptr_nonnull(d);
    ck_assert_int_eq(d->events[0].format, DEF_FORMAT_CONFLUENT_AVRO);
    def_free(d);
    definition_with("confluent_protobuf", doc, sizeof doc);
    ck_assert_ptr_null(def_load_json(doc, strlen(doc), "proto.json", &problems));
    ck_assert_uint_eq(problems.n, 1);
    ck_assert_str_eq(problems.items[0].pointer, "/topics/orders/format");
    ck_assert_msg(strstr(problems.items[0].message, "protobuf-c") != NULL &&
                      strstr(problems.items[0].message, "descriptor") != NULL,
                  "%s", problems.items[0].message);
    def_problems_clear(&problems);
}
END_TEST

Suite *format_avro_suite(void)
{
    Suite *s = suite_create("format_avro");
    TCase *tc = tcase_create("format_avro");
    tcase_add_test(tc, every_type_of_the_mapping_is_read);
    tcase_add_test(tc, a_truncated_payload_is_refused_saying_where);
    tcase_add_test(tc, trailing_bytes_are_refused);
    tcase_add_test(tc, a_string_that_is_not_utf8_is_refused);
    tcase_add_test(tc, nesting_is_bounded_while_reading);
    tcase_add_test(tc, bad_indexes_and_counts_are_refused);
    tcase_add_test(tc, a_schema_that_does_not_parse_is_an_error);
    tcase_add_test(tc, a_framed_message_becomes_an_event);
    tcase_add_test(tc, a_framed_value_on_a_json_topic_says_how_to_read_it);
    tcase_add_test(tc, topics_declare_confluent_avro_and_not_protobuf);
    suite_add_tcase(s, tc);
    return s;
}
