/*
 * log - one JSON object per line on stderr.
 *
 * Every line carries ts, level and msg, then the caller's fields as string
 * pairs: LOG_INFO("partition claimed", "topic", t, "partition", p). The
 * macros test the level before evaluating their arguments, so a disabled
 * debug line costs one comparison. Lines are written with a single write(2)
 * and so never interleave between threads.
 *
 * The level is process-wide state set once at start (log_set_level()); it
 * and the rate-limit table are the module's only globals.
 */
#ifndef STEWARD_LOG_H
#define STEWARD_LOG_H

#include <stdbool.h>
#include <stddef.h>

typedef enum log_level {
    LOG_LEVEL_DEBUG = 0,
    LOG_LEVEL_INFO,
    LOG_LEVEL_WARN,
    LOG_LEVEL_ERROR,
} log_level_t;

void log_set_level(log_level_t level);
bool log_enabled(log_level_t level);

/* Parses "debug", "info", "warn" or "error"; false for anything else. */
bool log_parse_level(const char *name, log_level_t *out);

/*
 * Writes one line. The variadic part is pairs of (const char *key,
 * const char *value) ended by NULL; a NULL value prints as JSON null.
 * Prefer the macros below.
 */
void log_write(log_level_t level, const char *msg, ...);

/*
 * Like log_write(), but at most one line per `every_ms` for the same
 * `limit_key` (a static string naming the repeated error); the next line
 * that passes says how many were suppressed.
 */
void log_write_limited(log_level_t level, const char *limit_key, long every_ms, const char *msg,
                       ...);

#define LOG_AT(level, msg, ...)                                                                    \
    do {                                                                                           \
        if (log_enabled(level))                                                                    \
            log_write(level, msg, ##__VA_ARGS__, (const char *) 0);                                \
    } while (0)

#define LOG_DEBUG(msg, ...) LOG_AT(LOG_LEVEL_DEBUG, msg, ##__VA_ARGS__)
#define LOG_INFO(msg, ...)  LOG_AT(LOG_LEVEL_INFO, msg, ##__VA_ARGS__)
#define LOG_WARN(msg, ...)  LOG_AT(LOG_LEVEL_WARN, msg, ##__VA_ARGS__)
#define LOG_ERROR(msg, ...) LOG_AT(LOG_LEVEL_ERROR, msg, ##__VA_ARGS__)

#define LOG_LIMITED(level, key, every_ms, msg, ...)                                                \
    do {                                                                                           \
        if (log_enabled(level))                                                                    \
            log_write_limited(level, key, every_ms, msg, ##__VA_ARGS__, (const char *) 0);         \
    } while (0)

/*
 * Appends s to buf[pos..cap) as the body of a JSON string (no quotes):
 * quote, backslash and control characters escaped; stops quietly where the
 * escape of the next byte would not fit with room to spare. Returns the new
 * position. Pure; public so that unit tests can check the escaping.
 */
size_t log_escape(char *buf, size_t pos, size_t cap, const char *s);

#endif
