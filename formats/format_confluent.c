/*
 * format_confluent - the Confluent wire format's framing; see
 * format_confluent.h.
 */
#include "formats/format_confluent.h"

bool format_confluent_frame(const void *value, size_t len, uint32_t *schema_id,
                            const void **payload, size_t *payload_len)
{
    const unsigned char *b = value;
    if (b == NULL || len < FORMAT_CONFLUENT_HEADER_BYTES || b[0] != 0)
        return false;
    *schema_id = (uint32_t) b[1] << 24 | (uint32_t) b[2] << 16 | (uint32_t) b[3] << 8 | b[4];
    *payload = b + FORMAT_CONFLUENT_HEADER_BYTES;
    *payload_len = len - FORMAT_CONFLUENT_HEADER_BYTES;
    return true;
}
