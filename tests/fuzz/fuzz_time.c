/*
 * fuzz_time - decode_parse_time() on any text, as a CloudEvents ce_time or
 * a definition's time pointer gives it. A time it accepts and
 * decode_time_in_range() keeps formats back (decode_format_time()) to a
 * text that parses to the same instant; the range check itself never
 * overflows, whatever the text.
 */
#include "manager/decode.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_cstr(data, size);
    char buf[64];
    int64_t ms, back;

    if (decode_parse_time(text, &ms) && decode_time_in_range(ms)) {
        decode_format_time(ms, buf, sizeof buf);
        FUZZ_CHECK(decode_parse_time(buf, &back), "'%s' formats as '%s', which does not parse",
                   text, buf);
        FUZZ_CHECK(back == ms, "'%s' is %lld ms but its format '%s' is %lld ms", text,
                   (long long) ms, buf, (long long) back);
    }
    free(text);
    return 0;
}
