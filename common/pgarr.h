/*
 * pgarr - PostgreSQL array literals in text form ("{"a","b",NULL}"), the
 * way a batch sends many rows in one statement: one array per column,
 * unnest()ed on the server. Every element is quoted and escaped, so any
 * text is safe to pass; the literal is a parameter, never spliced into SQL.
 */
#ifndef STEWARD_PGARR_H
#define STEWARD_PGARR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct pgarr {
    char *buf; /* the literal so far, without its closing brace */
    size_t len;
    size_t cap;
    size_t n; /* elements added */
    bool oom; /* an allocation failed; pgarr_text() returns NULL */
} pgarr_t;

/* A zeroed pgarr_t is empty and ready. */
void pgarr_add(pgarr_t *arr, const char *text); /* NULL adds SQL NULL */
void pgarr_add_int(pgarr_t *arr, int64_t value);
void pgarr_add_bool(pgarr_t *arr, bool value);
/* Adds `len` bytes as lowercase hex text, for decode(x, 'hex') into bytea. */
void pgarr_add_hex(pgarr_t *arr, const void *bytes, size_t len);

/* The finished literal, borrowed until the next call on arr; NULL after an
 * allocation failure. */
const char *pgarr_text(pgarr_t *arr);

/* Fills params[0..n) with the finished literals of arrays[0..n), for a
 * statement whose parameters are those arrays in order. False when one of
 * them ran out of memory. */
bool pgarr_params(pgarr_t *const *arrays, size_t n, const char **params);

/* Empties the array, keeping its buffer. */
void pgarr_reset(pgarr_t *arr);
void pgarr_free(pgarr_t *arr);

#endif
