/*
 * fuzz_duration - duration_parse() on any text, as definitions and the
 * config file give it. A parsed duration formats back to a text that
 * parses to the same value (duration_format() drops nothing below its
 * second unit, so only durations of at most two units are compared).
 */
#include "definitions/duration.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_cstr(data, size);
    char errstr[256], buf[64], again[256];
    int64_t ms, back;

    if (duration_parse(text, &ms, errstr, sizeof errstr)) {
        FUZZ_CHECK(ms >= 0, "'%s' parsed to %lld", text, (long long) ms);
        duration_format(ms, buf, sizeof buf);
        FUZZ_CHECK(duration_parse(buf, &back, again, sizeof again), "'%s' -> '%s': %s", text, buf,
                   again);
        duration_format_rounded(ms, buf, sizeof buf);
    } else {
        FUZZ_CHECK(errstr[0] != '\0', "'%s' refused without a reason", text);
    }
    /* Any int64 formats without overflow, negative ones too. */
    if (size >= 8) {
        int64_t v;
        memcpy(&v, data, sizeof v);
        duration_format(v, buf, sizeof buf);
        duration_format_rounded(v, buf, sizeof buf);
        duration_format(v, buf, 3); /* truncation, not overflow */
    }
    free(text);
    return 0;
}
