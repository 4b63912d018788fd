/*
 * steward-bench-avro - the decode stage's cost per message, an order in
 * Avro (format_avro, through decode_message_avro() with a parsed schema
 * as the schema cache holds it) against the same order as a JSON object
 * (decode_message()). No Kafka, no database: one thread, in memory, the
 * messages encoded beforehand (Avro by avro-c's writer). Prints messages
 * per second for each.
 *
 *   steward-bench-avro [MESSAGES]   (default 200000)
 */
#include "formats/decode.h"
#include "formats/format_avro.h"

#include <avro.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char schema_text[] =
    "{\"type\":\"record\",\"name\":\"Order\",\"fields\":["
    "{\"name\":\"type\",\"type\":\"string\"},{\"name\":\"order_id\",\"type\":\"string\"},"
    "{\"name\":\"amount\",\"type\":\"long\"},"
    "{\"name\":\"placed_at\",\"type\":{\"type\":\"long\",\"logicalType\":\"timestamp-millis\"}},"
    "{\"name\":\"coupon\",\"type\":[\"null\",\"string\"]},"
    "{\"name\":\"lines\",\"type\":{\"type\":\"array\",\"items\":{\"type\":\"record\","
    "\"name\":\"Line\",\"fields\":[{\"name\":\"sku\",\"type\":\"string\"},"
    "{\"name\":\"qty\",\"type\":\"int\"}]}}}]}";

static double seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 200000;
    if (n <= 0) {
        fprintf(stderr, "usage: steward-bench-avro [MESSAGES]\n");
        return 2;
    }
    avro_schema_t s;
    if (avro_schema_from_json_length(schema_text, strlen(schema_text), &s) != 0) {
        fprintf(stderr, "schema: %s\n", avro_strerror());
        return 1;
    }
    avro_value_iface_t *iface = avro_generic_class_from_schema(s);
    avro_value_t rec, f, line, g, branch;
    avro_generic_value_new(iface, &rec);
    char avro_buf[512], json_buf[512], id[32];
    size_t avro_len = 0, json_len = 0;
    decode_limits_t limits = {DECODE_DEFAULT_MAX_BYTES, DECODE_DEFAULT_MAX_DEPTH};
    char errstr[256], detail[256];
    format_avro_schema_t *schema =
        format_avro_schema_new(schema_text, strlen(schema_text), errstr, sizeof errstr);
    if (schema == NULL) {
        fprintf(stderr, "%s\n", errstr);
        return 1;
    }

    /* One order, encoded both ways (its id varies too little to matter). */
    snprintf(id, sizeof id, "order-%ld", n);
    avro_value_get_by_name(&rec, "type", &f, NULL);
    avro_value_set_string(&f, "OrderPlaced");
    avro_value_get_by_name(&rec, "order_id", &f, NULL);
    avro_value_set_string(&f, id);
    avro_value_get_by_name(&rec, "amount", &f, NULL);
    avro_value_set_long(&f, 125000);
    avro_value_get_by_name(&rec, "placed_at", &f, NULL);
    avro_value_set_long(&f, 1795000000123LL);
    avro_value_get_by_name(&rec, "coupon", &f, NULL);
    avro_value_set_branch(&f, 1, &branch);
    avro_value_set_string(&branch, "SAVE10");
    avro_value_get_by_name(&rec, "lines", &f, NULL);
    for (int i = 0; i < 3; i++) {
        avro_value_append(&f, &line, NULL);
        avro_value_get_by_name(&line, "sku", &g, NULL);
        avro_value_set_string(&g, i == 0 ? "SKU-1" : i == 1 ? "SKU-22" : "SKU-333");
        avro_value_get_by_name(&line, "qty", &g, NULL);
        avro_value_set_int(&g, i + 1);
    }
    memcpy(avro_buf, "\0\0\0\0\1", 5);
    avro_writer_t out = avro_writer_memory(avro_buf + 5, sizeof avro_buf - 5);
    avro_value_write(out, &rec);
    avro_len = 5 + (size_t) avro_writer_tell(out);
    avro_writer_free(out);
    json_len = (size_t) snprintf(
        json_buf, sizeof json_buf,
        "{\"type\":\"OrderPlaced\",\"order_id\":\"%s\",\"amount\":125000,"
        "\"placed_at\":1795000000123,\"coupon\":\"SAVE10\",\"lines\":[{\"sku\":\"SKU-1\","
        "\"qty\":1},{\"sku\":\"SKU-22\",\"qty\":2},{\"sku\":\"SKU-333\",\"qty\":3}]}",
        id);

    decode_input_t in = {.topic = "orders", .timestamp_ms = -1};
    decode_message_t msg;
    for (int round = 0; round < 2; round++) {
        bool avro = round == 0;
        in.value = avro ? avro_buf : json_buf;
        in.value_len = avro ? avro_len : json_len;
        double t0 = seconds();
        for (long i = 0; i < n; i++) {
            decode_reason_t r =
                avro ? decode_message_avro(&in, &limits, schema, &msg, detail, sizeof detail)
                     : decode_message(&in, &limits, &msg, detail, sizeof detail);
            if (r != DECODE_OK) {
                fprintf(stderr, "%s: %s\n", decode_reason_name(r), detail);
                return 1;
            }
            decode_message_clear(&msg);
        }
        double took = seconds() - t0;
        printf("%s: %ld messages of %zu bytes in %.3f s: %.0f messages/s, %.2f us each\n",
               avro ? "avro" : "json", n, in.value_len, took, (double) n / took,
               took / (double) n * 1e6);
    }
    format_avro_schema_free(schema);
    avro_value_decref(&rec);
    avro_value_iface_decref(iface);
    avro_schema_decref(s);
    return 0;
}
