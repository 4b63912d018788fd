/*
 * duration - "1h30m" and friends; see duration.h.
 *
 * A duration is a sequence of (number, unit) groups with units taken from
 * d, h, m, s, ms, each at most once and from the largest to the smallest.
 * The strict order is there so a duration reads one way only: "30m1h" is
 * rejected rather than guessed at. No sign, spaces or fractions: a
 * definition that needs 1.5h writes 1h30m.
 */
#include "definitions/duration.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

typedef struct duration_unit {
    const char *name;
    int64_t ms;
} duration_unit_t;

/* Largest first: a group's unit must come later in this table than the
 * previous group's. */
static const duration_unit_t units[] = {
    {"d", 86400000}, {"h", 3600000}, {"m", 60000}, {"s", 1000}, {"ms", 1},
};
#define N_UNITS (sizeof units / sizeof units[0])

static long unit_index(const char *name, size_t len)
{
    for (size_t i = 0; i < N_UNITS; i++) {
        if (strlen(units[i].name) == len && memcmp(units[i].name, name, len) == 0)
            return (long) i;
    }
    return -1;
}

bool duration_parse(const char *text, int64_t *ms_out, char *errstr, size_t errstr_size)
{
    if (text == NULL || *text == '\0') {
        snprintf(errstr, errstr_size, "empty duration: expected e.g. '30s', '15m' or '1h30m'");
        return false;
    }

    const char *p = text;
    long last_unit = -1;
    int64_t total = 0;

    while (*p != '\0') {
        if (!isdigit((unsigned char) *p)) {
            snprintf(errstr, errstr_size,
                     "expected a number at '%s' (a duration is digits and a unit, e.g. '15m')", p);
            return false;
        }
        int64_t value = 0;
        while (isdigit((unsigned char) *p)) {
            int digit = *p - '0';
            if (value > (INT64_MAX - digit) / 10) {
                snprintf(errstr, errstr_size, "the number is too large");
                return false;
            }
            value = value * 10 + digit;
            p++;
        }

        if (*p == '.' || *p == ',') {
            snprintf(errstr, errstr_size,
                     "fractions are not allowed: combine units instead, e.g. '1h30m' for 1.5h");
            return false;
        }

        const char *unit = p;
        while (isalpha((unsigned char) *p))
            p++;
        size_t unit_len = (size_t) (p - unit);
        if (unit_len == 0) {
            snprintf(errstr, errstr_size,
                     "the number %" PRId64 " has no unit (expected ms, s, m, h or d)", value);
            return false;
        }
        long idx = unit_index(unit, unit_len);
        if (idx < 0) {
            snprintf(errstr, errstr_size, "unknown unit '%.*s' (expected ms, s, m, h or d)",
                     (int) unit_len, unit);
            return false;
        }
        if (idx == last_unit) {
            snprintf(errstr, errstr_size, "unit '%s' appears twice", units[idx].name);
            return false;
        }
        if (idx < last_unit) {
            snprintf(errstr, errstr_size,
                     "unit '%s' comes after '%s': units go from the largest to the smallest "
                     "(e.g. '1h30m')",
                     units[idx].name, units[last_unit].name);
            return false;
        }
        last_unit = idx;

        if (value > (INT64_MAX - total) / units[idx].ms) {
            snprintf(errstr, errstr_size, "the duration is too long");
            return false;
        }
        total += value * units[idx].ms;
    }

    *ms_out = total;
    return true;
}

char *duration_format(int64_t ms, char *buf, size_t buf_size)
{
    if (buf == NULL || buf_size == 0)
        return buf;

    /* Work unsigned so INT64_MIN has a magnitude. */
    uint64_t rest = ms < 0 ? (uint64_t) 0 - (uint64_t) ms : (uint64_t) ms;
    size_t len = 0;
    buf[0] = '\0';
    if (ms < 0)
        len += (size_t) snprintf(buf, buf_size, "-");
    if (rest == 0) {
        snprintf(buf + len, buf_size - len, "0s");
        return buf;
    }

    int written = 0;
    for (size_t i = 0; i < N_UNITS && written < 2 && rest > 0; i++) {
        uint64_t unit_ms = (uint64_t) units[i].ms;
        uint64_t n = rest / unit_ms;
        if (n == 0)
            continue; /* 1d and 5m print as "1d5m": skip the empty hours */
        if (len < buf_size)
            len += (size_t) snprintf(buf + len, buf_size - len, "%" PRIu64 "%s", n, units[i].name);
        rest -= n * unit_ms;
        written++;
    }
    return buf;
}

char *duration_format_rounded(int64_t ms, char *buf, size_t buf_size)
{
    uint64_t mag = ms < 0 ? (uint64_t) 0 - (uint64_t) ms : (uint64_t) ms;
    if (buf == NULL || buf_size == 0 || mag < 1000)
        return duration_format(ms, buf, buf_size);
    /* Under ten seconds, to the hundredth: "9.01s", "1.5s", "2s". */
    uint64_t cs = (mag + 5) / 10;
    if (cs < 1000) {
        char frac[4] = "";
        if (cs % 100 != 0)
            snprintf(frac, sizeof frac, ".%02u", (unsigned) (cs % 100));
        if (frac[0] != '\0' && frac[2] == '0')
            frac[2] = '\0';
        snprintf(buf, buf_size, "%s%u%ss", ms < 0 ? "-" : "", (unsigned) (cs / 100), frac);
        return buf;
    }

    /* Round to the unit below the largest one that fits (to whole seconds
     * below a minute): 1m0.212s reads "1m", 3d4h31m reads "3d5h". */
    size_t largest = 0;
    while ((uint64_t) units[largest].ms > mag)
        largest++;
    uint64_t step = (uint64_t) units[largest + 1 < 4 ? largest + 1 : 3].ms;
    uint64_t rounded = mag / step * step;
    if (mag - rounded >= step / 2 && rounded <= (uint64_t) INT64_MAX - step)
        rounded += step;
    if (rounded > (uint64_t) INT64_MAX)
        rounded = mag / step * step;
    size_t len = 0;
    if (ms < 0)
        len = (size_t) snprintf(buf, buf_size, "-");
    if (len < buf_size)
        duration_format((int64_t) rounded, buf + len, buf_size - len);
    return buf;
}
