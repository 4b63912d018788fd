/*
 * fuzz_time - rfc3339_parse() on any text, as a CloudEvents ce_time or
 * a definition's time pointer gives it. A time it accepts and
 * decode_time_in_range() keeps formats back (rfc3339_format()) to a
 * text that parses to the same instant; the range check itself never
 * overflows, whatever the text.
 */
#include "common/rfc3339.h"
#include "formats/decode.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_cstr(data, size);
    char buf[64];
    int64_t ms, back;

    if (rfc3339_parse(text, &ms) && decode_time_in_range(ms)) {
        rfc3339_format(ms, buf, sizeof buf);
        FUZZ_CHECK(rfc3339_parse(buf, &back), "'%s' formats as '%s', which does not parse", text,
                   buf);
        FUZZ_CHECK(back == ms, "'%s' is %lld ms but its format '%s' is %lld ms", text,
                   (long long) ms, buf, (long long) back);
    }
    free(text);
    return 0;
}
