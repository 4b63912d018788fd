/*
 * format_avro - Avro binary read with its writer schema; see format_avro.h.
 * The encoding (Avro specification, "Binary Encoding"): int and long are
 * zig-zag varints; float and double little-endian IEEE 754; bytes and
 * string a long length, then the bytes; arrays and maps blocks of a long
 * count (negative: its absolute value, then the block's size in bytes)
 * ending with a count of 0; a union the long index of its branch, then the
 * branch's value; an enum the int index of its symbol; fixed its bytes.
 */
#include "formats/format_avro.h"

#include "common/utf8.h"

#include <avro.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct format_avro_schema {
    avro_schema_t schema; /* one reference, owned */
};

format_avro_schema_t *format_avro_schema_new(const char *text, size_t len, char *errstr,
                                             size_t errstr_size)
{
    avro_schema_t parsed = NULL;
    if (avro_schema_from_json_length(text, len, &parsed) != 0 || parsed == NULL) {
        snprintf(errstr, errstr_size, "not an Avro schema: %s", avro_strerror());
        utf8_scrub(errstr);
        return NULL;
    }
    format_avro_schema_t *s = calloc(1, sizeof *s);
    if (s == NULL) {
        avro_schema_decref(parsed);
        snprintf(errstr, errstr_size, "out of memory");
        return NULL;
    }
    s->schema = parsed;
    return s;
}

void format_avro_schema_free(format_avro_schema_t *schema)
{
    if (schema == NULL)
        return;
    avro_schema_decref(schema->schema);
    free(schema);
}

/* Where the reader is, and where in the value (a JSON pointer). */
typedef struct reader {
    const unsigned char *buf;
    size_t len, pos;
    int max_depth;
    char path[256];
    size_t path_len; /* strlen(path); segments past the buffer are cut, not lost track of */
    char *detail;
    size_t detail_size;
} reader_t;

static format_avro_result_t fail(reader_t *r, format_avro_result_t result, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static format_avro_result_t fail(reader_t *r, format_avro_result_t result, const char *fmt, ...)
{
    char what[192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    snprintf(r->detail, r->detail_size, "Avro payload at %s (byte %zu): %s",
             r->path_len > 0 ? r->path : "the top", r->pos, what);
    utf8_scrub(r->detail);
    return result;
}

/* Appends "/segment" to the path (~ and / escaped); returns the length to restore. */
static size_t path_push(reader_t *r, const char *segment, size_t seg_len)
{
    size_t old = r->path_len;
    size_t o = old;
    if (o + 1 < sizeof r->path)
        r->path[o++] = '/';
    for (size_t i = 0; i < seg_len && o + 2 < sizeof r->path; i++) {
        if (segment[i] == '~' || segment[i] == '/') {
            r->path[o++] = '~';
            r->path[o++] = segment[i] == '~' ? '0' : '1';
        } else {
            r->path[o++] = segment[i];
        }
    }
    r->path[o] = '\0';
    r->path_len = o;
    return old;
}

static void path_pop(reader_t *r, size_t old)
{
    r->path_len = old;
    r->path[old] = '\0';
}

static format_avro_result_t read_long(reader_t *r, int64_t *out)
{
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (r->pos >= r->len)
            return fail(r, FORMAT_AVRO_INVALID, "the payload ends inside a number (truncated)");
        unsigned char b = r->buf[r->pos++];
        if (shift == 63 && (b & 0x7e) != 0)
            return fail(r, FORMAT_AVRO_INVALID, "a varint over 64 bits");
        v |= (uint64_t) (b & 0x7f) << shift;
        if ((b & 0x80) == 0) {
            *out = (int64_t) (v >> 1) ^ -(int64_t) (v & 1);
            return FORMAT_AVRO_OK;
        }
    }
    return fail(r, FORMAT_AVRO_INVALID, "a varint longer than 10 bytes");
}

static format_avro_result_t read_int(reader_t *r, int32_t *out)
{
    int64_t v = 0;
    format_avro_result_t res = read_long(r, &v);
    if (res != FORMAT_AVRO_OK)
        return res;
    if (v < INT32_MIN || v > INT32_MAX)
        return fail(r, FORMAT_AVRO_INVALID, "an int out of 32 bits (%" PRId64 ")", v);
    *out = (int32_t) v;
    return FORMAT_AVRO_OK;
}

/* n bytes at the reader, borrowed; fails on truncation. */
static format_avro_result_t read_raw(reader_t *r, size_t n, const unsigned char **out,
                                     const char *what)
{
    if (n > r->len - r->pos)
        return fail(r, FORMAT_AVRO_INVALID, "%s of %zu bytes, but %zu are left (truncated)", what,
                    n, r->len - r->pos);
    *out = r->buf + r->pos;
    r->pos += n;
    return FORMAT_AVRO_OK;
}

/* A length-prefixed run of bytes (bytes, string, a map key). */
static format_avro_result_t read_sized(reader_t *r, const unsigned char **out, size_t *n,
                                       const char *what)
{
    int64_t len = 0;
    format_avro_result_t res = read_long(r, &len);
    if (res != FORMAT_AVRO_OK)
        return res;
    if (len < 0)
        return fail(r, FORMAT_AVRO_INVALID, "%s with a negative length (%" PRId64 ")", what, len);
    if ((uint64_t) len > r->len - r->pos)
        return fail(r, FORMAT_AVRO_INVALID, "%s of %" PRId64 " bytes, but %zu are left (truncated)",
                    what, len, r->len - r->pos);
    *n = (size_t) len;
    return read_raw(r, *n, out, what);
}

static format_avro_result_t read_text(reader_t *r, const unsigned char **out, size_t *n,
                                      const char *what)
{
    format_avro_result_t res = read_sized(r, out, n, what);
    if (res != FORMAT_AVRO_OK)
        return res;
    if (!utf8_valid(*out, *n) || memchr(*out, '\0', *n) != NULL)
        return fail(r, FORMAT_AVRO_INVALID_UTF8, "%s that is not UTF-8 or holds a NUL byte", what);
    return FORMAT_AVRO_OK;
}

static json_t *base64(const unsigned char *p, size_t n)
{
    static const char digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t out_len = (n + 2) / 3 * 4;
    char *out = malloc(out_len + 1);
    if (out == NULL)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t) p[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t) p[i + 1] << 8;
        if (i + 2 < n)
            v |= p[i + 2];
        out[o++] = digits[(v >> 18) & 63];
        out[o++] = digits[(v >> 12) & 63];
        out[o++] = i + 1 < n ? digits[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < n ? digits[v & 63] : '=';
    }
    out[o] = '\0';
    json_t *s = json_stringn(out, o);
    free(out);
    return s;
}

static format_avro_result_t read_value(reader_t *r, avro_schema_t schema, int depth, json_t **out);

static format_avro_result_t out_of_memory(reader_t *r)
{
    return fail(r, FORMAT_AVRO_INVALID, "out of memory");
}

/* The count of the next block of an array or map (0: the end). */
static format_avro_result_t read_block(reader_t *r, int64_t *count)
{
    format_avro_result_t res = read_long(r, count);
    if (res != FORMAT_AVRO_OK)
        return res;
    if (*count < 0) {
        int64_t size = 0;
        if (*count == INT64_MIN)
            return fail(r, FORMAT_AVRO_INVALID, "a block count out of range");
        *count = -*count;
        if ((res = read_long(r, &size)) != FORMAT_AVRO_OK)
            return res;
    }
    /* An item takes at least a byte but for null ones; a count past the
     * bytes left (plus some room for those) is garbage, and would spin. */
    if ((uint64_t) *count > r->len - r->pos + 1024)
        return fail(r, FORMAT_AVRO_INVALID, "a block of %" PRId64 " items, but %zu bytes are left",
                    *count, r->len - r->pos);
    return FORMAT_AVRO_OK;
}

static format_avro_result_t read_record(reader_t *r, avro_schema_t schema, int depth, json_t **out)
{
    size_t n = avro_schema_record_size(schema);
    json_t *obj = json_object();
    if (obj == NULL)
        return out_of_memory(r);
    for (size_t i = 0; i < n; i++) {
        const char *name = avro_schema_record_field_name(schema, (int) i);
        avro_schema_t field = avro_schema_record_field_get_by_index(schema, (int) i);
        size_t old = path_push(r, name, strlen(name));
        json_t *v = NULL;
        format_avro_result_t res = read_value(r, field, depth, &v);
        if (res != FORMAT_AVRO_OK) {
            json_decref(obj);
            return res;
        }
        path_pop(r, old);
        json_object_set_new(obj, name, v);
    }
    *out = obj;
    return FORMAT_AVRO_OK;
}

static format_avro_result_t read_array(reader_t *r, avro_schema_t schema, int depth, json_t **out)
{
    avro_schema_t items = avro_schema_array_items(schema);
    json_t *arr = json_array();
    format_avro_result_t res = FORMAT_AVRO_OK;
    int64_t count = 0;
    if (arr == NULL)
        return out_of_memory(r);
    while ((res = read_block(r, &count)) == FORMAT_AVRO_OK && count > 0) {
        for (int64_t k = 0; k < count && res == FORMAT_AVRO_OK; k++) {
            char index[24];
            int len = snprintf(index, sizeof index, "%zu", json_array_size(arr));
            size_t old = path_push(r, index, (size_t) len);
            json_t *v = NULL;
            if ((res = read_value(r, items, depth, &v)) == FORMAT_AVRO_OK) {
                path_pop(r, old);
                if (json_array_append_new(arr, v) != 0)
                    res = out_of_memory(r);
            }
        }
        if (res != FORMAT_AVRO_OK)
            break;
    }
    if (res != FORMAT_AVRO_OK) {
        json_decref(arr);
        return res;
    }
    *out = arr;
    return FORMAT_AVRO_OK;
}

static format_avro_result_t read_map(reader_t *r, avro_schema_t schema, int depth, json_t **out)
{
    avro_schema_t values = avro_schema_map_values(schema);
    json_t *obj = json_object();
    format_avro_result_t res = FORMAT_AVRO_OK;
    int64_t count = 0;
    if (obj == NULL)
        return out_of_memory(r);
    while ((res = read_block(r, &count)) == FORMAT_AVRO_OK && count > 0) {
        for (int64_t k = 0; k < count && res == FORMAT_AVRO_OK; k++) {
            const unsigned char *key = NULL;
            size_t key_len = 0;
            if ((res = read_text(r, &key, &key_len, "a map key")) != FORMAT_AVRO_OK)
                break;
            size_t old = path_push(r, (const char *) key, key_len);
            json_t *v = NULL;
            if ((res = read_value(r, values, depth, &v)) == FORMAT_AVRO_OK) {
                path_pop(r, old);
                if (json_object_setn_new(obj, (const char *) key, key_len, v) != 0)
                    res = out_of_memory(r);
            }
        }
        if (res != FORMAT_AVRO_OK)
            break;
    }
    if (res != FORMAT_AVRO_OK) {
        json_decref(obj);
        return res;
    }
    *out = obj;
    return FORMAT_AVRO_OK;
}

static format_avro_result_t read_value(reader_t *r, avro_schema_t schema, int depth, json_t **out)
{
    format_avro_result_t res;
    const unsigned char *p = NULL;
    size_t n = 0;

    while (is_avro_link(schema))
        schema = avro_schema_link_target(schema);
    *out = NULL;
    switch (avro_typeof(schema)) {
    case AVRO_NULL:
        *out = json_null();
        return FORMAT_AVRO_OK;
    case AVRO_BOOLEAN:
        if ((res = read_raw(r, 1, &p, "a boolean")) != FORMAT_AVRO_OK)
            return res;
        if (*p > 1) {
            r->pos--;
            return fail(r, FORMAT_AVRO_INVALID, "a boolean byte of %u (0 or 1)", *p);
        }
        *out = json_boolean(*p);
        return FORMAT_AVRO_OK;
    case AVRO_INT32: {
        int32_t v = 0;
        if ((res = read_int(r, &v)) != FORMAT_AVRO_OK)
            return res;
        *out = json_integer(v);
        break;
    }
    case AVRO_INT64: {
        int64_t v = 0;
        if ((res = read_long(r, &v)) != FORMAT_AVRO_OK)
            return res;
        *out = json_integer(v);
        break;
    }
    case AVRO_FLOAT:
    case AVRO_DOUBLE: {
        bool single = avro_typeof(schema) == AVRO_FLOAT;
        if ((res = read_raw(r, single ? 4 : 8, &p, single ? "a float" : "a double")) !=
            FORMAT_AVRO_OK)
            return res;
        uint64_t bits = 0;
        for (int i = single ? 3 : 7; i >= 0; i--)
            bits = bits << 8 | p[i];
        double d;
        if (single) {
            uint32_t b32 = (uint32_t) bits;
            float f;
            memcpy(&f, &b32, sizeof f);
            d = f;
        } else {
            memcpy(&d, &bits, sizeof d);
        }
        if (!isfinite(d))
            return fail(r, FORMAT_AVRO_INVALID, "a %s that is NaN or infinite (no JSON form)",
                        single ? "float" : "double");
        *out = json_real(d);
        break;
    }
    case AVRO_STRING:
        if ((res = read_text(r, &p, &n, "a string")) != FORMAT_AVRO_OK)
            return res;
        *out = json_stringn((const char *) p, n);
        break;
    case AVRO_BYTES:
        if ((res = read_sized(r, &p, &n, "bytes")) != FORMAT_AVRO_OK)
            return res;
        *out = base64(p, n);
        break;
    case AVRO_FIXED: {
        int64_t size = avro_schema_fixed_size(schema);
        if ((res = read_raw(r, (size_t) size, &p, "a fixed")) != FORMAT_AVRO_OK)
            return res;
        *out = base64(p, (size_t) size);
        break;
    }
    case AVRO_ENUM: {
        int32_t index = 0;
        if ((res = read_int(r, &index)) != FORMAT_AVRO_OK)
            return res;
        if (index < 0 || index >= avro_schema_enum_number_of_symbols(schema))
            return fail(r, FORMAT_AVRO_INVALID, "enum index %" PRId32 " of %d symbols", index,
                        avro_schema_enum_number_of_symbols(schema));
        *out = json_string(avro_schema_enum_get(schema, index));
        break;
    }
    case AVRO_UNION: {
        int64_t index = 0;
        if ((res = read_long(r, &index)) != FORMAT_AVRO_OK)
            return res;
        if (index < 0 || (uint64_t) index >= avro_schema_union_size(schema))
            return fail(r, FORMAT_AVRO_INVALID, "union branch %" PRId64 " of %zu", index,
                        avro_schema_union_size(schema));
        return read_value(r, avro_schema_union_branch(schema, (int) index), depth, out);
    }
    case AVRO_RECORD:
    case AVRO_ARRAY:
    case AVRO_MAP:
        if (depth + 1 > r->max_depth)
            return fail(r, FORMAT_AVRO_TOO_DEEP,
                        "records, arrays and maps nest deeper than %d levels", r->max_depth);
        if (avro_typeof(schema) == AVRO_RECORD)
            return read_record(r, schema, depth + 1, out);
        if (avro_typeof(schema) == AVRO_ARRAY)
            return read_array(r, schema, depth + 1, out);
        return read_map(r, schema, depth + 1, out);
    default:
        return fail(r, FORMAT_AVRO_INVALID, "a schema type this reader does not know");
    }
    return *out != NULL ? FORMAT_AVRO_OK : out_of_memory(r);
}

format_avro_result_t format_avro_decode(const format_avro_schema_t *schema, const void *payload,
                                        size_t len, int max_depth, json_t **out, char *detail,
                                        size_t detail_size)
{
    reader_t r = {.buf = payload,
                  .len = len,
                  .max_depth = max_depth,
                  .detail = detail,
                  .detail_size = detail_size};
    *out = NULL;
    detail[0] = '\0';
    json_t *v = NULL;
    format_avro_result_t res = read_value(&r, schema->schema, 0, &v);
    if (res == FORMAT_AVRO_OK && r.pos < r.len) {
        json_decref(v);
        r.path[0] = '\0', r.path_len = 0;
        return fail(&r, FORMAT_AVRO_INVALID,
                    "%zu bytes after the value's end (trailing data: another schema's "
                    "payload?)",
                    r.len - r.pos);
    }
    if (res == FORMAT_AVRO_OK)
        *out = v;
    return res;
}
