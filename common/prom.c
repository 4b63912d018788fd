/*
 * prom - the Prometheus text writer; see prom.h.
 */
#include "common/prom.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct prom {
    char *text;
    size_t len, cap;
    bool out_of_memory;
    char bad_name[128]; /* the first invalid name written; "" while none */
};

prom_t *prom_new(void)
{
    prom_t *p = calloc(1, sizeof *p);
    if (p == NULL)
        return NULL;
    p->cap = 4096;
    p->text = malloc(p->cap);
    if (p->text == NULL) {
        free(p);
        return NULL;
    }
    p->text[0] = '\0';
    return p;
}

void prom_free(prom_t *p)
{
    if (p == NULL)
        return;
    free(p->text);
    free(p);
}

static bool failed(const prom_t *p)
{
    return p->out_of_memory || p->bad_name[0] != '\0';
}

/* Makes room for n more bytes and the NUL. */
static bool reserve(prom_t *p, size_t n)
{
    if (p->len + n + 1 <= p->cap)
        return true;
    size_t cap = p->cap;
    while (p->len + n + 1 > cap)
        cap *= 2;
    char *grown = realloc(p->text, cap);
    if (grown == NULL) {
        p->out_of_memory = true;
        return false;
    }
    p->text = grown;
    p->cap = cap;
    return true;
}

static void put(prom_t *p, const char *s, size_t n)
{
    if (failed(p) || !reserve(p, n))
        return;
    memcpy(p->text + p->len, s, n);
    p->len += n;
    p->text[p->len] = '\0';
}

static void put_str(prom_t *p, const char *s)
{
    put(p, s, strlen(s));
}

/*
 * Appends s escaped: backslash and newline always (help texts and label
 * values), the double quote too inside label values.
 */
static void put_escaped(prom_t *p, const char *s, bool quote)
{
    const char *run = s;
    for (; *s; s++) {
        const char *with = *s == '\\'           ? "\\\\"
                           : *s == '\n'         ? "\\n"
                           : *s == '"' && quote ? "\\\""
                                                : NULL;
        if (with == NULL)
            continue;
        put(p, run, (size_t) (s - run));
        put_str(p, with);
        run = s + 1;
    }
    put(p, run, (size_t) (s - run));
}

static void check_name(prom_t *p, const char *name, bool (*valid)(const char *))
{
    if (p->bad_name[0] == '\0' && !valid(name))
        snprintf(p->bad_name, sizeof p->bad_name, "%s", name != NULL ? name : "(null)");
}

bool prom_valid_name(const char *name)
{
    if (name == NULL || *name == '\0')
        return false;
    for (const char *c = name; *c; c++) {
        bool alpha = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || *c == '_' || *c == ':';
        if (!alpha && !(c > name && *c >= '0' && *c <= '9'))
            return false;
    }
    return true;
}

bool prom_valid_label_name(const char *name)
{
    if (name == NULL || *name == '\0' || strncmp(name, "__", 2) == 0)
        return false;
    for (const char *c = name; *c; c++) {
        bool alpha = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || *c == '_';
        if (!alpha && !(c > name && *c >= '0' && *c <= '9'))
            return false;
    }
    return true;
}

char *prom_format_value(double value, char *buf, size_t buf_size)
{
    if (isnan(value))
        snprintf(buf, buf_size, "NaN");
    else if (isinf(value))
        snprintf(buf, buf_size, value > 0 ? "+Inf" : "-Inf");
    else if (value == floor(value) && fabs(value) < 1e15)
        snprintf(buf, buf_size, "%.0f", value);
    else {
        /* The shortest of 15, 16 or 17 significant digits that reads back
         * as the same double: 0.1, not 0.10000000000000001. */
        for (int digits = 15; digits <= 17; digits++) {
            snprintf(buf, buf_size, "%.*g", digits, value);
            if (strtod(buf, NULL) == value)
                break;
        }
    }
    return buf;
}

void prom_family(prom_t *p, const char *name, const char *type, const char *help)
{
    check_name(p, name, prom_valid_name);
    put_str(p, "# HELP ");
    put_str(p, name);
    put_str(p, " ");
    put_escaped(p, help, false);
    put_str(p, "\n# TYPE ");
    put_str(p, name);
    put_str(p, " ");
    put_str(p, type);
    put_str(p, "\n");
}

static void put_sample(prom_t *p, const char *name, const char *const *labels, const char *value)
{
    check_name(p, name, prom_valid_name);
    put_str(p, name);
    if (labels != NULL && labels[0] != NULL) {
        put_str(p, "{");
        for (const char *const *l = labels; l[0] != NULL; l += 2) {
            check_name(p, l[0], prom_valid_label_name);
            if (l != labels)
                put_str(p, ",");
            put_str(p, l[0]);
            put_str(p, "=\"");
            put_escaped(p, l[1] != NULL ? l[1] : "", true);
            put_str(p, "\"");
        }
        put_str(p, "}");
    }
    put_str(p, " ");
    put_str(p, value);
    put_str(p, "\n");
}

void prom_sample(prom_t *p, const char *name, const char *const *labels, double value)
{
    char buf[64];
    put_sample(p, name, labels, prom_format_value(value, buf, sizeof buf));
}

void prom_sample_int(prom_t *p, const char *name, const char *const *labels, long long value)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%lld", value);
    put_sample(p, name, labels, buf);
}

void prom_histogram(prom_t *p, const char *name, const char *help, const double *bounds,
                    const long long *counts, size_t n_bounds, double sum)
{
    char sample[256], le[64];
    long long total = 0;

    prom_family(p, name, "histogram", help);
    snprintf(sample, sizeof sample, "%s_bucket", name);
    for (size_t i = 0; i <= n_bounds; i++) {
        total += counts[i];
        prom_format_value(i < n_bounds ? bounds[i] : INFINITY, le, sizeof le);
        prom_sample_int(p, sample, (const char *const[]){"le", le, NULL}, total);
    }
    snprintf(sample, sizeof sample, "%s_sum", name);
    prom_sample(p, sample, NULL, sum);
    snprintf(sample, sizeof sample, "%s_count", name);
    prom_sample_int(p, sample, NULL, total);
}

char *prom_finish(prom_t *p, size_t *len, char *errstr, size_t errstr_size)
{
    char *text = NULL;

    *len = 0;
    if (p == NULL || p->out_of_memory) {
        snprintf(errstr, errstr_size, "out of memory");
    } else if (p->bad_name[0] != '\0') {
        snprintf(errstr, errstr_size, "invalid metric or label name '%s'", p->bad_name);
    } else {
        text = p->text;
        *len = p->len;
        p->text = NULL;
    }
    prom_free(p);
    return text;
}
