/*
 * test_sim_avro - steward-sim's Avro values: the record schema derived from
 * an event's JSON, the Confluent framing (magic 0, the id big-endian, the
 * binary record) byte for byte, a round trip through avro-c's reader, and
 * every value that does not fit its schema refused with the field named.
 */
#include "sim/sim_avro.h"

#include <avro.h>
#include <check.h>
#include <jansson.h>
#include <string.h>

static json_t *parse(const char *text)
{
    json_error_t jerr;
    json_t *v = json_loads(text, 0, &jerr);
    ck_assert_msg(v != NULL, "%s: %s", text, jerr.text);
    return v;
}

START_TEST(test_schema_from_value)
{
    json_t *v = parse("{\"type\":\"PaymentCaptured\",\"id\":\"evt-1\",\"amount\":12.5,"
                      "\"attempt\":2,\"retry\":false}");
    char buf[SIM_AVRO_SCHEMA_MAX], err[256];
    ck_assert_int_eq(sim_avro_schema_json("PaymentCaptured", v, buf, sizeof buf, err, sizeof err),
                     ERR_OK);
    ck_assert_str_eq(buf, "{\"type\":\"record\",\"name\":\"PaymentCaptured\",\"fields\":["
                          "{\"name\":\"type\",\"type\":\"string\"},"
                          "{\"name\":\"id\",\"type\":\"string\"},"
                          "{\"name\":\"amount\",\"type\":\"double\"},"
                          "{\"name\":\"attempt\",\"type\":\"long\"},"
                          "{\"name\":\"retry\",\"type\":\"boolean\"}]}");
    /* What avro-c takes as a record schema. */
    sim_avro_encoder_t *e = sim_avro_encoder_new(buf, 1, err, sizeof err);
    ck_assert_msg(e != NULL, "%s", err);
    sim_avro_encoder_free(e);

    /* Too small a buffer, a bad record name, a nested member, a bad field name. */
    ck_assert_int_eq(sim_avro_schema_json("PaymentCaptured", v, buf, 20, err, sizeof err),
                     ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(err, "more than fits"));
    ck_assert_int_eq(sim_avro_schema_json("payment-captured", v, buf, sizeof buf, err, sizeof err),
                     ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(err, "not an Avro name"));
    json_decref(v);
    v = parse("{\"a\":{\"b\":1}}");
    ck_assert_int_eq(sim_avro_schema_json("A", v, buf, sizeof buf, err, sizeof err), ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(err, "field 'a' of A is not a string, number or boolean"));
    json_decref(v);
    v = parse("{\"order-id\":\"x\"}");
    ck_assert_int_eq(sim_avro_schema_json("A", v, buf, sizeof buf, err, sizeof err), ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(err, "field 'order-id' of A is not an Avro name"));
    json_decref(v);
    v = parse("[1]");
    ck_assert_int_eq(sim_avro_schema_json("A", v, buf, sizeof buf, err, sizeof err), ERR_INVALID);
    json_decref(v);
}
END_TEST

START_TEST(test_frame_bytes)
{
    char err[256];
    sim_avro_encoder_t *e = sim_avro_encoder_new(
        "{\"type\":\"record\",\"name\":\"A\",\"fields\":[{\"name\":\"s\",\"type\":\"string\"},"
        "{\"name\":\"n\",\"type\":\"long\"},{\"name\":\"b\",\"type\":\"boolean\"}]}",
        0x01020304u, err, sizeof err);
    ck_assert_msg(e != NULL, "%s", err);
    json_t *v = parse("{\"n\":-3,\"s\":\"hi\",\"b\":true}"); /* member order is free */
    unsigned char out[64];
    size_t len = 0;
    ck_assert_int_eq(sim_avro_encode(e, v, out, sizeof out, &len, err, sizeof err), ERR_OK);
    /* magic 0, id 0x01020304 big-endian; "hi": zig-zag length 2 (0x04) and
     * its bytes; -3: zig-zag 5 (0x05); true: 0x01. */
    static const unsigned char want[] = {0x00, 0x01, 0x02, 0x03, 0x04, 0x04, 'h', 'i', 0x05, 0x01};
    ck_assert_uint_eq(len, sizeof want);
    ck_assert_int_eq(memcmp(out, want, sizeof want), 0);

    /* The same encoder again: nothing left over from the first value. */
    json_decref(v);
    v = parse("{\"s\":\"\",\"n\":64,\"b\":false}");
    ck_assert_int_eq(sim_avro_encode(e, v, out, sizeof out, &len, err, sizeof err), ERR_OK);
    static const unsigned char want2[] = {0x00, 0x01, 0x02, 0x03, 0x04, 0x00, 0x80, 0x01, 0x00};
    ck_assert_uint_eq(len, sizeof want2);
    ck_assert_int_eq(memcmp(out, want2, sizeof want2), 0);
    json_decref(v);
    sim_avro_encoder_free(e);
}
END_TEST

START_TEST(test_round_trip)
{
    const char *value = "{\"type\":\"OrderPlaced\",\"order_id\":\"ord-00042\",\"total\":99.95,"
                        "\"items\":3}";
    json_t *v = parse(value);
    char schema[SIM_AVRO_SCHEMA_MAX], err[256];
    ck_assert_int_eq(sim_avro_schema_json("OrderPlaced", v, schema, sizeof schema, err, sizeof err),
                     ERR_OK);
    sim_avro_encoder_t *e = sim_avro_encoder_new(schema, 7, err, sizeof err);
    ck_assert_msg(e != NULL, "%s", err);
    unsigned char out[256];
    size_t len;
    ck_assert_int_eq(sim_avro_encode(e, v, out, sizeof out, &len, err, sizeof err), ERR_OK);
    ck_assert_uint_eq(out[0], 0);
    ck_assert_uint_eq(
        ((uint32_t) out[1] << 24 | (uint32_t) out[2] << 16 | (uint32_t) out[3] << 8 | out[4]), 7);

    /* avro-c's reader gives every field back. */
    avro_schema_t s;
    ck_assert_int_eq(avro_schema_from_json_length(schema, strlen(schema), &s), 0);
    avro_value_iface_t *iface = avro_generic_class_from_schema(s);
    avro_value_t got;
    ck_assert_int_eq(avro_generic_value_new(iface, &got), 0);
    avro_reader_t r = avro_reader_memory((const char *) out + SIM_AVRO_HEADER_LEN,
                                         (int64_t) (len - SIM_AVRO_HEADER_LEN));
    ck_assert_int_eq(avro_value_read(r, &got), 0);
    avro_value_t f;
    const char *str;
    size_t n;
    double d;
    int64_t l;
    ck_assert_int_eq(avro_value_get_by_name(&got, "order_id", &f, NULL), 0);
    ck_assert_int_eq(avro_value_get_string(&f, &str, &n), 0);
    ck_assert_str_eq(str, "ord-00042");
    ck_assert_int_eq(avro_value_get_by_name(&got, "total", &f, NULL), 0);
    ck_assert_int_eq(avro_value_get_double(&f, &d), 0);
    ck_assert(d == 99.95);
    ck_assert_int_eq(avro_value_get_by_name(&got, "items", &f, NULL), 0);
    ck_assert_int_eq(avro_value_get_long(&f, &l), 0);
    ck_assert_int_eq(l, 3);
    avro_reader_free(r);
    avro_value_decref(&got);
    avro_value_iface_decref(iface);
    avro_schema_decref(s);
    sim_avro_encoder_free(e);
    json_decref(v);
}
END_TEST

START_TEST(test_refused)
{
    char err[256];
    const char *schema =
        "{\"type\":\"record\",\"name\":\"A\",\"fields\":["
        "{\"name\":\"s\",\"type\":\"string\"},{\"name\":\"n\",\"type\":\"long\"}]}";
    sim_avro_encoder_t *e = sim_avro_encoder_new(schema, 1, err, sizeof err);
    ck_assert_msg(e != NULL, "%s", err);
    unsigned char out[64];
    size_t len = 99;
    static const struct {
        const char *value, *reason;
    } bad[] = {
        {"{\"s\":\"x\"}", "has 1 fields, its schema 2"},
        {"{\"s\":\"x\",\"n\":1,\"m\":2}", "has 3 fields, its schema 2"},
        {"{\"s\":\"x\",\"m\":1}", "field 'n' is missing"},
        {"{\"s\":1,\"n\":1}", "field 's' is missing or not of its schema's type"},
        {"{\"s\":\"x\",\"n\":1.5}", "field 'n' is missing or not of its schema's type"},
        {"[]", "not an object"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        json_t *v = parse(bad[i].value);
        ck_assert_int_eq(sim_avro_encode(e, v, out, sizeof out, &len, err, sizeof err),
                         ERR_INVALID);
        ck_assert_msg(strstr(err, bad[i].reason) != NULL, "%s: %s", bad[i].value, err);
        ck_assert_uint_eq(len, 0);
        json_decref(v);
    }
    /* A buffer too small for the header, and one too small for the record. */
    json_t *v = parse("{\"s\":\"a long enough string\",\"n\":1}");
    ck_assert_int_eq(sim_avro_encode(e, v, out, 5, &len, err, sizeof err), ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(err, "holds no framed value"));
    ck_assert_int_eq(sim_avro_encode(e, v, out, 12, &len, err, sizeof err), ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(err, "does not fit in 12 bytes"));
    json_decref(v);
    sim_avro_encoder_free(e);

    /* Schemas it cannot encode. */
    ck_assert_ptr_null(sim_avro_encoder_new("{\"type\":", 1, err, sizeof err));
    ck_assert_ptr_nonnull(strstr(err, "does not parse"));
    ck_assert_ptr_null(sim_avro_encoder_new("\"string\"", 1, err, sizeof err));
    ck_assert_ptr_nonnull(strstr(err, "not a record"));
    ck_assert_ptr_null(sim_avro_encoder_new("{\"type\":\"record\",\"name\":\"A\",\"fields\":["
                                            "{\"name\":\"m\",\"type\":{\"type\":\"map\","
                                            "\"values\":\"long\"}}]}",
                                            1, err, sizeof err));
    ck_assert_ptr_nonnull(strstr(err, "field 'm' is not a string"));
}
END_TEST

Suite *sim_avro_suite(void);
Suite *sim_avro_suite(void)
{
    Suite *s = suite_create("sim_avro");
    TCase *tc = tcase_create("sim_avro");
    tcase_add_test(tc, test_schema_from_value);
    tcase_add_test(tc, test_frame_bytes);
    tcase_add_test(tc, test_round_trip);
    tcase_add_test(tc, test_refused);
    suite_add_tcase(s, tc);
    return s;
}
