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
 * Formats `ms` for people: the one form of every measured duration Steward
 * shows (a time in a state, an age, a lateness, a percentile) in the CLI,
 * the report, the pages, the API's texts and the console (console.js
 * writes the same). Under a second, milliseconds ("250ms"); under ten
 * seconds, seconds to the hundredth, trailing zeros dropped ("9.01s",
 * "1.5s", "2s"); under a minute, whole seconds ("45s" for 45.4s); beyond,
 * the two largest units, the second rounded and nothing below it ("7m31s"
 * for 7m30.6s, "1m" for 1m212ms, "5h28m", "3d5h" for 3d4h31m). A value
 * that rounds up into the next form takes it ("1m" for 59.6s). Durations
 * people wrote (a deadline, a setting) print with duration_format().
 * Returns buf.
 */
char *duration_format_rounded(int64_t ms, char *buf, size_t buf_size);

#endif
