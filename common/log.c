/*
 * log - JSON lines on stderr; see log.h.
 */
#include "common/log.h"

#include "common/rfc3339.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define LOG_LINE_MAX    8192
#define LOG_LIMIT_SLOTS 64

static atomic_int log_level = LOG_LEVEL_INFO;

/* Rate-limit slots, keyed by the address of a static string. */
static struct {
    const char *key;
    long long last_ms;
    long suppressed;
} log_limits[LOG_LIMIT_SLOTS];
static pthread_mutex_t log_limits_lock = PTHREAD_MUTEX_INITIALIZER;

static const char *const level_names[] = {"debug", "info", "warn", "error"};

void log_set_level(log_level_t level)
{
    atomic_store(&log_level, (int) level);
}

bool log_enabled(log_level_t level)
{
    return (int) level >= atomic_load(&log_level);
}

bool log_parse_level(const char *name, log_level_t *out)
{
    for (size_t i = 0; i < sizeof level_names / sizeof level_names[0]; i++) {
        if (strcmp(name, level_names[i]) == 0) {
            *out = (log_level_t) i;
            return true;
        }
    }
    return false;
}

size_t log_escape(char *buf, size_t pos, size_t cap, const char *s)
{
    for (const unsigned char *p = (const unsigned char *) s; *p && pos + 7 < cap; p++) {
        switch (*p) {
        case '"':
            buf[pos++] = '\\';
            buf[pos++] = '"';
            break;
        case '\\':
            buf[pos++] = '\\';
            buf[pos++] = '\\';
            break;
        case '\n':
            buf[pos++] = '\\';
            buf[pos++] = 'n';
            break;
        case '\t':
            buf[pos++] = '\\';
            buf[pos++] = 't';
            break;
        default:
            if (*p < 0x20)
                pos += (size_t) snprintf(buf + pos, cap - pos, "\\u%04x", *p);
            else
                buf[pos++] = (char) *p;
        }
    }
    return pos;
}

static size_t append_raw(char *buf, size_t pos, size_t cap, const char *s)
{
    size_t n = strlen(s);
    if (pos + n >= cap)
        n = cap - pos - 1;
    memcpy(buf + pos, s, n);
    return pos + n;
}

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void log_vwrite(log_level_t level, const char *msg, const char *extra_key,
                       const char *extra_value, va_list ap)
{
    char buf[LOG_LINE_MAX];
    size_t cap = sizeof buf - 2; /* room for "}\n" */
    struct timespec ts;
    char stamp[RFC3339_BUF];

    clock_gettime(CLOCK_REALTIME, &ts);
    rfc3339_format((int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000, stamp, sizeof stamp);

    size_t pos = 0;
    pos += (size_t) snprintf(buf, cap, "{\"ts\":\"%s\",\"level\":\"%s\",\"msg\":\"", stamp,
                             level_names[level]);
    pos = log_escape(buf, pos, cap, msg);
    pos = append_raw(buf, pos, cap, "\"");

    for (;;) {
        const char *key = va_arg(ap, const char *);
        if (key == NULL)
            break;
        const char *value = va_arg(ap, const char *);
        pos = append_raw(buf, pos, cap, ",\"");
        pos = log_escape(buf, pos, cap, key);
        if (value == NULL) {
            pos = append_raw(buf, pos, cap, "\":null");
        } else {
            pos = append_raw(buf, pos, cap, "\":\"");
            pos = log_escape(buf, pos, cap, value);
            pos = append_raw(buf, pos, cap, "\"");
        }
    }
    if (extra_key != NULL) {
        pos = append_raw(buf, pos, cap, ",\"");
        pos = log_escape(buf, pos, cap, extra_key);
        pos = append_raw(buf, pos, cap, "\":\"");
        pos = log_escape(buf, pos, cap, extra_value);
        pos = append_raw(buf, pos, cap, "\"");
    }
    buf[pos++] = '}';
    buf[pos++] = '\n';
    /* A short write to stderr has nowhere to be reported. */
    ssize_t written = write(STDERR_FILENO, buf, pos);
    (void) written;
}

void log_write(log_level_t level, const char *msg, ...)
{
    va_list ap;
    va_start(ap, msg);
    log_vwrite(level, msg, NULL, NULL, ap);
    va_end(ap);
}

void log_write_limited(log_level_t level, const char *limit_key, long every_ms, const char *msg,
                       ...)
{
    long long now = now_ms();
    long suppressed = 0;
    bool emit = true; /* with the table full, an unknown key is never silenced */

    pthread_mutex_lock(&log_limits_lock);
    for (size_t i = 0; i < LOG_LIMIT_SLOTS; i++) {
        if (log_limits[i].key == limit_key || log_limits[i].key == NULL) {
            if (log_limits[i].key == NULL || now - log_limits[i].last_ms >= every_ms) {
                log_limits[i].key = limit_key;
                log_limits[i].last_ms = now;
                suppressed = log_limits[i].suppressed;
                log_limits[i].suppressed = 0;
            } else {
                log_limits[i].suppressed++;
                emit = false;
            }
            break;
        }
    }
    pthread_mutex_unlock(&log_limits_lock);
    if (!emit)
        return;

    char count[32];
    snprintf(count, sizeof count, "%ld", suppressed);
    va_list ap;
    va_start(ap, msg);
    log_vwrite(level, msg, suppressed > 0 ? "suppressed" : NULL, count, ap);
    va_end(ap);
}
