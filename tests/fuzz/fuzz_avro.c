/*
 * fuzz_avro - an Avro payload (what follows the schema id in the
 * Confluent wire format) read by format_avro with one of a few writer
 * schemas: every type of the mapping, unions, maps, a recursive record.
 * The input's first byte picks the schema, the rest is the payload. Any
 * bytes give an answer and never a crash; a value read is JSON text that
 * is UTF-8 without NUL bytes and nested no deeper than the limit; a
 * refusal says why.
 */
#include "common/utf8.h"
#include "formats/format_avro.h"
#include "fuzz.h"

#include <jansson.h>

static const char every_type[] =
    "{\"type\":\"record\",\"name\":\"All\",\"fields\":["
    "{\"name\":\"s\",\"type\":\"string\"},{\"name\":\"i\",\"type\":\"int\"},"
    "{\"name\":\"l\",\"type\":\"long\"},{\"name\":\"f\",\"type\":\"float\"},"
    "{\"name\":\"d\",\"type\":\"double\"},{\"name\":\"b\",\"type\":\"boolean\"},"
    "{\"name\":\"n\",\"type\":\"null\"},{\"name\":\"y\",\"type\":\"bytes\"},"
    "{\"name\":\"x\",\"type\":{\"type\":\"fixed\",\"name\":\"F\",\"size\":3}},"
    "{\"name\":\"e\",\"type\":{\"type\":\"enum\",\"name\":\"E\",\"symbols\":[\"A\",\"B\"]}},"
    "{\"name\":\"a\",\"type\":{\"type\":\"array\",\"items\":\"long\"}},"
    "{\"name\":\"m\",\"type\":{\"type\":\"map\",\"values\":[\"null\",\"string\"]}}]}";
static const char recursive[] =
    "{\"type\":\"record\",\"name\":\"Node\",\"fields\":[{\"name\":\"v\",\"type\":\"int\"},"
    "{\"name\":\"kids\",\"type\":{\"type\":\"array\",\"items\":\"Node\"}},"
    "{\"name\":\"next\",\"type\":[\"null\",\"Node\"]}]}";
static const char nested_maps[] =
    "{\"type\":\"map\",\"values\":{\"type\":\"array\",\"items\":{\"type\":\"map\",\"values\":"
    "\"bytes\"}}}";
static const char top_union[] =
    "[\"null\",\"string\",\"long\",{\"type\":\"array\",\"items\":\"double\"}]";

static const char *const schemas[] = {every_type, recursive, nested_maps, top_union};

#define N_SCHEMAS (sizeof schemas / sizeof *schemas)
#define MAX_DEPTH 16

static format_avro_schema_t *parsed[N_SCHEMAS];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void) argc, (void) argv;
    char errstr[256];
    for (size_t i = 0; i < N_SCHEMAS; i++) {
        parsed[i] = format_avro_schema_new(schemas[i], strlen(schemas[i]), errstr, sizeof errstr);
        FUZZ_CHECK(parsed[i] != NULL, "schema %zu: %s", i, errstr);
    }
    return 0;
}

/* The nesting of arrays and objects in v. */
static int depth(const json_t *v)
{
    int deepest = 0;
    size_t i;
    const char *k;
    json_t *c;
    if (json_is_array(v)) {
        json_array_foreach(v, i, c) if (depth(c) > deepest) deepest = depth(c);
    } else if (json_is_object(v)) {
        json_object_foreach((json_t *) v, k, c) if (depth(c) > deepest) deepest = depth(c);
    } else {
        return 0;
    }
    return deepest + 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    const format_avro_schema_t *schema = parsed[data[0] % N_SCHEMAS];
    char detail[256] = "x";
    json_t *out = NULL;
    format_avro_result_t res =
        format_avro_decode(schema, data + 1, size - 1, MAX_DEPTH, &out, detail, sizeof detail);
    if (res != FORMAT_AVRO_OK) {
        FUZZ_CHECK(out == NULL, "a refusal (%d) with a value", (int) res);
        FUZZ_CHECK(detail[0] != '\0' && utf8_valid((const unsigned char *) detail, strlen(detail)),
                   "a refusal (%d) without a UTF-8 detail", (int) res);
        return 0;
    }
    FUZZ_CHECK(out != NULL && detail[0] == '\0', "read, but no value or a detail: %s", detail);
    FUZZ_CHECK(depth(out) <= MAX_DEPTH, "read %d deep, over %d", depth(out), MAX_DEPTH);
    char *text = json_dumps(out, JSON_ENCODE_ANY | JSON_COMPACT);
    FUZZ_CHECK(text != NULL, "the value has no JSON text");
    FUZZ_CHECK(utf8_valid((const unsigned char *) text, strlen(text)), "not UTF-8: %s", text);
    json_error_t jerr;
    json_t *back = json_loads(text, JSON_DECODE_ANY, &jerr);
    FUZZ_CHECK(back != NULL && json_equal(back, out), "its JSON text does not read back: %s",
               jerr.text);
    json_decref(back);
    free(text);
    json_decref(out);
    return 0;
}
