/*
 * format_confluent - the Confluent wire format, as a schema registry's
 * serializers frame a message value: a magic byte 0, the schema id in 4
 * bytes (big-endian), then the payload (Avro, Protobuf, or JSON for the
 * JSON Schema serializer). Only the framing: what the payload is, and
 * whether Steward may read it, is decode's to judge. Pure.
 */
#ifndef STEWARD_FORMAT_CONFLUENT_H
#define STEWARD_FORMAT_CONFLUENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FORMAT_CONFLUENT_HEADER_BYTES 5

/*
 * True when `value` (len bytes) is framed so: it starts with the magic
 * byte and holds a whole schema id. Then *schema_id is the id and
 * *payload, *payload_len what follows it (borrowed from value). A JSON
 * value never starts with a zero byte, so a plain JSON message is never
 * taken for a framed one.
 */
bool format_confluent_frame(const void *value, size_t len, uint32_t *schema_id,
                            const void **payload, size_t *payload_len);

#endif
