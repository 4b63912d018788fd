/*
 * prom - a writer of the Prometheus text exposition format, version 0.0.4:
 * the body GET /metrics answers.
 *
 * A family is one metric name with its # HELP and # TYPE lines and every
 * sample of that name (a histogram's family also holds its _bucket, _sum
 * and _count samples); a sample is one line, `name{label="value",...} v`.
 * The format wants a family's lines together, so write a family whole
 * before starting the next.
 *
 * The writer only appends to a buffer it owns: no I/O, no clock, no
 * globals. Names are checked (a bad one is a bug in the caller: the text
 * is refused at prom_finish()); label values and help texts are escaped,
 * so they may hold anything a database or a broker returns.
 */
#ifndef STEWARD_PROM_H
#define STEWARD_PROM_H

#include <stdbool.h>
#include <stddef.h>

typedef struct prom prom_t; /* opaque; owns the text being written */

/* A new, empty writer (free it with prom_free(), or hand its text over
 * with prom_finish()); NULL when out of memory. */
prom_t *prom_new(void);
void prom_free(prom_t *p); /* NULL is a no-op */

/* Starts a family: `# HELP name help` and `# TYPE name type`, type being
 * "counter", "gauge", "histogram" or "untyped". */
void prom_family(prom_t *p, const char *name, const char *type, const char *help);

/*
 * One sample line. labels is NULL or (name, value) pairs ended by NULL:
 * (const char *[]){"outcome", "started", NULL}.
 */
void prom_sample(prom_t *p, const char *name, const char *const *labels, double value);

/* The same with an integer value, printed exactly however large. */
void prom_sample_int(prom_t *p, const char *name, const char *const *labels, long long value);

/*
 * A whole histogram family: `name_bucket{le="..."}` for each of the
 * n_bounds ascending upper bounds and `le="+Inf"`, then `name_sum` and
 * `name_count`. counts[i] (n_bounds + 1 of them, the last for values above
 * every bound) are per bucket, not cumulative: the writer sums them, so
 * the +Inf bucket always equals _count even when the counts were read one
 * by one while others added to them.
 */
void prom_histogram(prom_t *p, const char *name, const char *help, const double *bounds,
                    const long long *counts, size_t n_bounds, double sum);

/*
 * Ends the writer and returns its text (malloc'd, NUL-terminated: free()
 * it), with its length in *len; p is freed either way. NULL, with the
 * reason in errstr, when memory ran out or a name was invalid.
 */
char *prom_finish(prom_t *p, size_t *len, char *errstr, size_t errstr_size);

/* Whether `name` is a valid metric name ([a-zA-Z_:][a-zA-Z0-9_:]*). */
bool prom_valid_name(const char *name);

/* Whether `name` is a valid label name ([a-zA-Z_][a-zA-Z0-9_]*, and not
 * starting with the reserved "__"). */
bool prom_valid_label_name(const char *name);

/*
 * Writes a sample value as the format spells it into buf: "+Inf", "-Inf",
 * "NaN", integers without a fraction, anything else in the fewest digits
 * that read back as the same double. Returns buf.
 */
char *prom_format_value(double value, char *buf, size_t buf_size);

#endif
