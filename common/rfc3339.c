#include "common/rfc3339.h"

#include <ctype.h>
#include <stdio.h>
#include <time.h>

/* Days in month `mon` (1-12) of `year`, in the proleptic Gregorian calendar. */
static int days_in_month(int year, int mon)
{
    static const int days[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    return mon == 2 && leap ? 29 : days[mon - 1];
}

/* Parses exactly `n` digits at *p and advances it. */
static bool digits(const char **p, int n, int *out)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (!isdigit((unsigned char) (*p)[i]))
            return false;
        v = v * 10 + ((*p)[i] - '0');
    }
    *p += n;
    *out = v;
    return true;
}

bool rfc3339_parse(const char *text, int64_t *ms_out)
{
    const char *p = text;
    int year, mon, day, hour, min, sec, ms = 0;

    if (!digits(&p, 4, &year) || *p++ != '-' || !digits(&p, 2, &mon) || *p++ != '-' ||
        !digits(&p, 2, &day) || (*p != 'T' && *p != 't' && *p != ' '))
        return false;
    p++;
    if (!digits(&p, 2, &hour) || *p++ != ':' || !digits(&p, 2, &min) || *p++ != ':' ||
        !digits(&p, 2, &sec))
        return false;
    if (*p == '.') {
        p++;
        int scale = 100, n = 0;
        while (isdigit((unsigned char) *p)) {
            ms += (*p - '0') * scale;
            scale /= 10;
            p++;
            n++;
        }
        if (n == 0)
            return false;
    }
    int offset_min = 0;
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if (*p == '+' || *p == '-') {
        int sign = *p == '-' ? -1 : 1, oh, om;
        p++;
        if (!digits(&p, 2, &oh) || *p++ != ':' || !digits(&p, 2, &om) || oh > 23 || om > 59)
            return false;
        offset_min = sign * (oh * 60 + om);
    } else {
        return false;
    }
    /* timegm() would carry 2026-02-31 into March: a date that does not
     * exist is not a time. */
    if (*p != '\0' || mon < 1 || mon > 12 || day < 1 || day > days_in_month(year, mon) ||
        hour > 23 || min > 59 || sec > 60)
        return false;

    struct tm tm = {0};
    tm.tm_year = year - 1900;
    tm.tm_mon = mon - 1;
    tm.tm_mday = day;
    tm.tm_hour = hour;
    tm.tm_min = min;
    tm.tm_sec = sec;
    time_t secs = timegm(&tm);
    *ms_out = ((int64_t) secs - (int64_t) offset_min * 60) * 1000 + ms;
    return true;
}

/* Writes the seconds part of ms and returns the whole seconds (floored, so
 * before 1970 the milliseconds stay positive). */
static int64_t format_secs(int64_t ms, char *buf, size_t buf_size, size_t *len)
{
    int64_t secs = ms >= 0 ? ms / 1000 : (ms - 999) / 1000;
    time_t t = (time_t) secs;
    struct tm tm;
    gmtime_r(&t, &tm);
    /* Not strftime's %Y: it writes the year 1 as "1", which is not RFC 3339. */
    int n = snprintf(buf, buf_size, "%04d-%02d-%02dT%02d:%02d:%02d", tm.tm_year + 1900,
                     tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
    *len = n < 0 ? 0 : (size_t) n < buf_size ? (size_t) n : buf_size - 1;
    return secs;
}

char *rfc3339_format(int64_t ms, char *buf, size_t buf_size)
{
    size_t n;
    int64_t secs = format_secs(ms, buf, buf_size, &n);
    snprintf(buf + n, buf_size - n, ".%03dZ", (int) (ms - secs * 1000));
    return buf;
}
