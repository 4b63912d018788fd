/*
 * fuzz_retry_after - notifier_parse_retry_after() on any header value, for
 * any cap and clock. The input is 8 bytes of cap, 8 of wall clock, then the
 * value. The wait is -1 (no usable value) or from 0 to the cap; never an
 * overflow.
 */
#include "formats/decode.h"
#include "manager/alerting/notifier.h"
#include "fuzz.h"

#include <inttypes.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int64_t cap = NOTIFIER_MAX_RETRY_AFTER_MS, now = 1764500000000LL;
    if (size >= 16) {
        uint64_t c, n;
        memcpy(&c, data, 8);
        memcpy(&n, data + 8, 8);
        /* Any cap a caller could pass (the config allows up to a day);
         * a clock within the times Steward handles. */
        cap = (int64_t) (c & INT64_MAX);
        now = (int64_t) (n % (uint64_t) DECODE_MAX_TIME_MS);
        data += 16;
        size -= 16;
    }
    char *value = fuzz_cstr(data, size);
    int64_t wait = notifier_parse_retry_after(value, now, cap);
    FUZZ_CHECK(wait == -1 || (wait >= 0 && wait <= cap),
               "'%s' (cap %" PRId64 ", now %" PRId64 ") waits %" PRId64, value, cap, now, wait);
    free(value);
    return 0;
}
