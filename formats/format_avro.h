/*
 * format_avro - one Avro binary payload (what follows the schema id in the
 * Confluent wire format) read with its writer schema into the event model
 * every other format becomes: a jansson value. Pure: no I/O; where the
 * schema's text comes from (a registry, a directory) is the caller's.
 *
 * The schema is parsed by avro-c; the payload is read here, walking that
 * schema, so that nesting is bounded while reading (a recursive schema is
 * read up to max_depth levels, never past it), truncated data and trailing
 * bytes are told apart, and a rejection's detail names where in the value
 * it happened (a JSON pointer). The mapping:
 *
 *   record -> object (fields in schema order)   array -> array
 *   map -> object                               union -> its branch's value
 *   enum -> its symbol                          null -> null
 *   string -> string (UTF-8, no NUL)            boolean -> true/false
 *   int, long -> integer                        float, double -> real
 *   bytes, fixed -> base64 text (RFC 4648, padded)
 *
 * Logical types are their underlying value: a timestamp-millis is its
 * epoch milliseconds, a decimal its bytes in base64. A float that is NaN
 * or infinite has no JSON form and is refused.
 */
#ifndef STEWARD_FORMAT_AVRO_H
#define STEWARD_FORMAT_AVRO_H

#include <jansson.h>
#include <stddef.h>

typedef struct format_avro_schema format_avro_schema_t; /* opaque; immutable once made */

/*
 * Parses a writer schema from its JSON text (len bytes, as a registry
 * returns it). Returns a new schema (free with format_avro_schema_free()),
 * or NULL with avro-c's reason in errstr. A schema may be shared by
 * threads: reading never changes it.
 */
format_avro_schema_t *format_avro_schema_new(const char *text, size_t len, char *errstr,
                                             size_t errstr_size);
void format_avro_schema_free(format_avro_schema_t *schema); /* NULL is a no-op */

typedef enum format_avro_result {
    FORMAT_AVRO_OK = 0,
    FORMAT_AVRO_INVALID,      /* truncated, trailing bytes, a bad count, index or length */
    FORMAT_AVRO_TOO_DEEP,     /* records, arrays and maps nested over max_depth */
    FORMAT_AVRO_INVALID_UTF8, /* a string or map key that is not UTF-8, or holds NUL */
} format_avro_result_t;

/*
 * Reads `payload` (len bytes) with `schema`, at most max_depth records,
 * arrays and maps deep (the top-level record is depth 1). On
 * FORMAT_AVRO_OK *out is a new reference; otherwise *out is NULL and
 * `detail` says what and where ("at /items/2/sku: ...").
 */
format_avro_result_t format_avro_decode(const format_avro_schema_t *schema, const void *payload,
                                        size_t len, int max_depth, json_t **out, char *detail,
                                        size_t detail_size);

#endif
