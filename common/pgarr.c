/*
 * pgarr - text-form array literals; see pgarr.h.
 */
#include "common/pgarr.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool reserve(pgarr_t *arr, size_t more)
{
    if (arr->oom)
        return false;
    if (arr->len + more + 2 <= arr->cap) /* room for "}\0" */
        return true;
    size_t cap = arr->cap ? arr->cap : 256;
    while (cap < arr->len + more + 2)
        cap *= 2;
    char *buf = realloc(arr->buf, cap);
    if (buf == NULL) {
        arr->oom = true;
        return false;
    }
    arr->buf = buf;
    arr->cap = cap;
    return true;
}

/* Opens the literal or adds the separator before the next element. */
static bool begin_element(pgarr_t *arr, size_t more)
{
    if (!reserve(arr, more + 1))
        return false;
    arr->buf[arr->len++] = arr->n == 0 ? '{' : ',';
    arr->n++;
    return true;
}

void pgarr_add(pgarr_t *arr, const char *text)
{
    if (text == NULL) {
        if (begin_element(arr, 4)) {
            memcpy(arr->buf + arr->len, "NULL", 4);
            arr->len += 4;
        }
        return;
    }
    size_t n = strlen(text);
    if (!begin_element(arr, 2 * n + 2))
        return;
    arr->buf[arr->len++] = '"';
    for (size_t i = 0; i < n; i++) {
        if (text[i] == '"' || text[i] == '\\')
            arr->buf[arr->len++] = '\\';
        arr->buf[arr->len++] = text[i];
    }
    arr->buf[arr->len++] = '"';
}

void pgarr_add_int(pgarr_t *arr, int64_t value)
{
    char num[24];
    int n = snprintf(num, sizeof num, "%" PRId64, value);
    if (begin_element(arr, (size_t) n)) {
        memcpy(arr->buf + arr->len, num, (size_t) n);
        arr->len += (size_t) n;
    }
}

void pgarr_add_bool(pgarr_t *arr, bool value)
{
    if (begin_element(arr, 1))
        arr->buf[arr->len++] = value ? 't' : 'f';
}

void pgarr_add_hex(pgarr_t *arr, const void *bytes, size_t len)
{
    static const char hexdigits[] = "0123456789abcdef";
    const unsigned char *p = bytes;

    if (bytes == NULL) {
        pgarr_add(arr, NULL);
        return;
    }
    if (!begin_element(arr, 2 * len + 2))
        return;
    arr->buf[arr->len++] = '"';
    for (size_t i = 0; i < len; i++) {
        arr->buf[arr->len++] = hexdigits[p[i] >> 4];
        arr->buf[arr->len++] = hexdigits[p[i] & 0xF];
    }
    arr->buf[arr->len++] = '"';
}

const char *pgarr_text(pgarr_t *arr)
{
    if (arr->n == 0) {
        if (!reserve(arr, 1))
            return NULL;
        memcpy(arr->buf, "{}", 3);
        return arr->buf;
    }
    if (arr->oom)
        return NULL;
    /* reserve() always leaves room for the closing brace and the NUL. */
    arr->buf[arr->len] = '}';
    arr->buf[arr->len + 1] = '\0';
    return arr->buf;
}

void pgarr_reset(pgarr_t *arr)
{
    arr->len = 0;
    arr->n = 0;
    arr->oom = false;
}

void pgarr_free(pgarr_t *arr)
{
    free(arr->buf);
    memset(arr, 0, sizeof *arr);
}

bool pgarr_params(pgarr_t *const *arrays, size_t n, const char **params)
{
    for (size_t i = 0; i < n; i++) {
        if ((params[i] = pgarr_text(arrays[i])) == NULL)
            return false;
    }
    return true;
}
