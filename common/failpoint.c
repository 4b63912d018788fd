/*
 * failpoint - named fault injection for tests; see failpoint.h.
 */
#include "common/failpoint.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef STEWARD_FAILPOINTS

typedef enum { FP_OFF, FP_CRASH, FP_ERROR, FP_PAUSE } fp_action_t;

typedef struct {
    const char *name;
    bool can_error;
    fp_action_t action; /* set by fp_init, read-only after */
    long nth;           /* 0: every hit */
    long pause_ms;
    atomic_long hits;
} fp_point_t;

#define FP_ROW(name, can_error) {name, can_error, FP_OFF, 0, 0, 0},
static fp_point_t points[] = {FP_LIST(FP_ROW)};
#undef FP_ROW

#define FP_N (sizeof points / sizeof points[0])

static fp_point_t *find(const char *name, size_t len)
{
    for (size_t i = 0; i < FP_N; i++) {
        if (strlen(points[i].name) == len && strncmp(points[i].name, name, len) == 0)
            return &points[i];
    }
    return NULL;
}

/* A positive decimal of [s, end), or -1. */
static long number(const char *s, const char *end)
{
    long v = 0;
    if (s == end)
        return -1;
    for (; s < end; s++) {
        if (*s < '0' || *s > '9' || v > (LONG_MAX - 9) / 10)
            return -1;
        v = v * 10 + (*s - '0');
    }
    return v;
}

static void known_names(char *buf, size_t size)
{
    size_t len = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < FP_N && len < size; i++) {
        int n = snprintf(buf + len, size - len, "%s%s", i > 0 ? ", " : "", points[i].name);
        if (n < 0)
            break;
        len += (size_t) n;
    }
}

/* One NAME=ACTION[@N] of [s, end) into *out (its point). */
static err_class_t parse_entry(const char *s, const char *end, fp_point_t **point, fp_point_t *out,
                               char *errstr, size_t errstr_size)
{
    const char *eq = memchr(s, '=', (size_t) (end - s));
    int len = (int) (end - s);
    if (eq == NULL)
        return err_set(ERR_INVALID, errstr, errstr_size,
                       "STEWARD_FAILPOINTS: \"%.*s\" is not NAME=ACTION (ACTION: crash, error or "
                       "pause(MS), optionally followed by @N)",
                       len, s);
    if ((*point = find(s, (size_t) (eq - s))) == NULL) {
        char names[1024];
        known_names(names, sizeof names);
        return err_set(ERR_INVALID, errstr, errstr_size,
                       "STEWARD_FAILPOINTS: no failpoint is named \"%.*s\"; the failpoints are: %s",
                       (int) (eq - s), s, names);
    }
    *out = **point;
    const char *act = eq + 1, *at = memchr(act, '@', (size_t) (end - act));
    const char *act_end = at != NULL ? at : end;
    size_t act_len = (size_t) (act_end - act);
    out->nth = 0;
    if (at != NULL && (out->nth = number(at + 1, end)) <= 0)
        return err_set(ERR_INVALID, errstr, errstr_size,
                       "STEWARD_FAILPOINTS: \"%.*s\": after @ comes the hit to act on, a number "
                       "from 1 (crash@3: the third time)",
                       len, s);
    if (act_len == 5 && strncmp(act, "crash", 5) == 0) {
        out->action = FP_CRASH;
    } else if (act_len == 5 && strncmp(act, "error", 5) == 0) {
        if (!out->can_error)
            return err_set(ERR_INVALID, errstr, errstr_size,
                           "STEWARD_FAILPOINTS: failpoint %s has no error path; it takes crash "
                           "or pause(MS)",
                           out->name);
        out->action = FP_ERROR;
    } else if (act_len > 7 && strncmp(act, "pause(", 6) == 0 && act_end[-1] == ')' &&
               (out->pause_ms = number(act + 6, act_end - 1)) >= 0) {
        out->action = FP_PAUSE;
    } else {
        return err_set(ERR_INVALID, errstr, errstr_size,
                       "STEWARD_FAILPOINTS: \"%.*s\": the action is crash, error or pause(MS)", len,
                       s);
    }
    return ERR_OK;
}

err_class_t fp_init(const char *spec, char *errstr, size_t errstr_size)
{
    fp_point_t parsed[FP_N];
    err_class_t cls;

    memcpy(parsed, points, sizeof parsed);
    for (size_t i = 0; i < FP_N; i++) {
        parsed[i].action = FP_OFF;
        parsed[i].nth = 0;
        parsed[i].pause_ms = 0;
    }
    /* Nothing is set unless the whole text parses: a half-applied list
     * would test something else than was asked for. */
    for (const char *s = spec != NULL ? spec : ""; *s != '\0';) {
        const char *end = strchr(s, ';');
        if (end == NULL)
            end = s + strlen(s);
        while (s < end && (*s == ' ' || *s == '\t'))
            s++;
        const char *last = end;
        while (last > s && (last[-1] == ' ' || last[-1] == '\t'))
            last--;
        if (last > s) {
            fp_point_t *point, entry;
            if ((cls = parse_entry(s, last, &point, &entry, errstr, errstr_size)) != ERR_OK)
                return cls;
            parsed[point - points] = entry;
        }
        s = *end == ';' ? end + 1 : end;
    }
    for (size_t i = 0; i < FP_N; i++) {
        points[i].action = parsed[i].action;
        points[i].nth = parsed[i].nth;
        points[i].pause_ms = parsed[i].pause_ms;
        atomic_store(&points[i].hits, 0);
    }
    return ERR_OK;
}

bool fp_enabled(void)
{
    return true;
}

size_t fp_count(void)
{
    return FP_N;
}

const char *fp_name(size_t i)
{
    return i < FP_N ? points[i].name : NULL;
}

long fp_hits(const char *name)
{
    fp_point_t *p = find(name, strlen(name));
    return p != NULL ? atomic_load(&p->hits) : -1;
}

bool fp_hit(const char *name)
{
    fp_point_t *p = find(name, strlen(name));
    if (p == NULL) {
        fprintf(stderr, "failpoint %s is not in FP_LIST (common/failpoint.h)\n", name);
        abort();
    }
    long hit = atomic_fetch_add(&p->hits, 1) + 1;
    if (p->action == FP_OFF || (p->nth > 0 && hit != p->nth))
        return false;
    switch (p->action) {
    case FP_CRASH: {
        /* One line on stderr (the log) so a test's output says which point
         * fired; write(2) alone, as nothing else may run before the kill. */
        char line[160];
        int n =
            snprintf(line, sizeof line,
                     "{\"level\":\"error\",\"msg\":\"failpoint: crashing\",\"failpoint\":\"%s\","
                     "\"hit\":%ld}\n",
                     name, hit);
        if (n > 0 && write(STDERR_FILENO, line, (size_t) n) < 0) {
            /* nothing to be done: the kill follows */
        }
        raise(SIGKILL);
        _exit(137); /* SIGKILL cannot be caught; this is never reached */
    }
    case FP_PAUSE: {
        struct timespec ts = {p->pause_ms / 1000, (p->pause_ms % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
        return false;
    }
    case FP_ERROR:
        return true;
    default:
        return false;
    }
}

err_class_t fp_hit_error(const char *name, char *errstr, size_t errstr_size)
{
    if (!fp_hit(name))
        return ERR_OK;
    return err_set(ERR_TRANSIENT, errstr, errstr_size,
                   "failpoint %s: an injected transient error (STEWARD_FAILPOINTS)", name);
}

#else /* a build without failpoints: none of the names is compiled in */

err_class_t fp_init(const char *spec, char *errstr, size_t errstr_size)
{
    if (spec == NULL || spec[strspn(spec, " \t;")] == '\0')
        return ERR_OK;
    return err_set(ERR_INVALID, errstr, errstr_size,
                   "STEWARD_FAILPOINTS is set, but this build has no failpoints (configure with "
                   "-DSTEWARD_FAILPOINTS=ON)");
}

bool fp_enabled(void)
{
    return false;
}

size_t fp_count(void)
{
    return 0;
}

const char *fp_name(size_t i)
{
    (void) i;
    return NULL;
}

long fp_hits(const char *name)
{
    (void) name;
    return -1;
}

bool fp_hit(const char *name)
{
    (void) name;
    return false;
}

err_class_t fp_hit_error(const char *name, char *errstr, size_t errstr_size)
{
    (void) name;
    (void) errstr;
    (void) errstr_size;
    return ERR_OK;
}

#endif
