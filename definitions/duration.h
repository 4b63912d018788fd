/*
 * duration - the durations of definitions and config: "500ms", "30s",
 * "15m", "2h", "7d" and combinations of them in descending order of unit
 * ("1h30m", "2d12h"), held as milliseconds.
 */
#ifndef STEWARD_DURATION_H
#define STEWARD_DURATION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Parses `text` into milliseconds. Returns false with the reason in errstr
 * (an empty string, an unknown unit, units out of order or repeated, a
 * number without a unit, a value that overflows).
 */
bool duration_parse(const char *text, int64_t *ms_out, char *errstr, size_t errstr_size);

/*
 * Formats `ms` in the largest units, at most two of them ("2d3h", "15m",
 * "1m30s", "250ms"); negative values get a leading '-'. Returns buf.
 */
char *duration_format(int64_t ms, char *buf, size_t buf_size);

/*
 * Formats `ms` for people reading a page: like duration_format(), but the
 * second unit is rounded and nothing below it shown ("1m" for 1m212ms,
 * "3d5h" for 3d4h31m, "45s" for 45.4s); under a second, milliseconds
 * ("250ms"). Returns buf.
 */
char *duration_format_rounded(int64_t ms, char *buf, size_t buf_size);

#endif
