/*
 * rfc3339 - the one RFC 3339 parser and formatter: every timestamp Steward
 * reads from a message or an argument, and every one it writes into a log
 * line, a payload, a report or a message, goes through here (or through
 * its twin in SQL, steward.rfc3339()). Pure and
 * thread-safe (gmtime_r, timegm).
 */
#ifndef STEWARD_RFC3339_H
#define STEWARD_RFC3339_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Big enough for any formatted timestamp, terminator included. */
#define RFC3339_BUF 40

/* Parses RFC 3339 ("2026-11-29T21:06:03.250+01:00", 'T', 't' or ' ' between
 * date and time, fraction optional and cut to milliseconds) into epoch ms.
 * False, *ms_out untouched, when text is not one. */
bool rfc3339_parse(const char *text, int64_t *ms_out);

/* Formats epoch ms in UTC with milliseconds ("2026-11-29T21:06:03.250Z"),
 * before 1970 too: the one form of every time Steward writes (logs, the
 * API, reports, pages, payloads, the CLI), as steward.rfc3339() writes it
 * in SQL (migration 0008). Returns buf. */
char *rfc3339_format(int64_t ms, char *buf, size_t buf_size);

#endif
