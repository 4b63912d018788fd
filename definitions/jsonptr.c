/*
 * jsonptr - RFC 6901 JSON pointers; see jsonptr.h.
 *
 * A pointer is a sequence of reference tokens, each after a '/'. In a token
 * "~1" stands for '/' and "~0" for '~'; any other '~' is malformed. Whether
 * a token is an array index depends on the document, so well-formedness
 * (jsonptr_valid) says nothing about indices; jsonptr_get applies the
 * index rules when it meets an array: decimal digits, no leading zero
 * ("0" is fine, "01" is not), and "-" (the element after the last) names
 * nothing.
 */
#include "definitions/jsonptr.h"

#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool jsonptr_valid(const char *ptr, char *errstr, size_t errstr_size)
{
    if (ptr == NULL) {
        snprintf(errstr, errstr_size, "no pointer");
        return false;
    }
    if (*ptr == '\0')
        return true;
    if (*ptr != '/') {
        snprintf(errstr, errstr_size, "a JSON pointer starts with '/' (did you mean '/%s'?)", ptr);
        return false;
    }
    for (const char *p = ptr; *p != '\0'; p++) {
        if (*p == '~' && p[1] != '0' && p[1] != '1') {
            snprintf(errstr, errstr_size,
                     "'~' at offset %zu must be followed by '0' (for '~') or '1' (for '/')",
                     (size_t) (p - ptr));
            return false;
        }
    }
    return true;
}

/*
 * Copies the token starting at `p` (after its '/') into `out`, unescaped,
 * and returns where it ends (at the next '/' or the NUL). `out` must hold
 * strlen(p) + 1 bytes; unescaping only shrinks.
 */
static const char *next_token(const char *p, char *out)
{
    size_t n = 0;
    while (*p != '\0' && *p != '/') {
        if (p[0] == '~' && p[1] == '1') {
            out[n++] = '/';
            p += 2;
        } else if (p[0] == '~' && p[1] == '0') {
            out[n++] = '~';
            p += 2;
        } else {
            out[n++] = *p++;
        }
    }
    out[n] = '\0';
    return p;
}

/* The array index a token names, or false when it is not a valid index. */
static bool array_index(const char *token, size_t *out)
{
    if (*token == '\0')
        return false;
    if (token[0] == '0' && token[1] != '\0')
        return false; /* RFC 6901: no leading zeros */
    size_t value = 0;
    for (const char *p = token; *p != '\0'; p++) {
        if (!isdigit((unsigned char) *p))
            return false;
        size_t digit = (size_t) (*p - '0');
        if (value > (SIZE_MAX - digit) / 10)
            return false;
        value = value * 10 + digit;
    }
    *out = value;
    return true;
}

json_t *jsonptr_get(const json_t *doc, const char *ptr)
{
    if (doc == NULL || !jsonptr_valid(ptr, NULL, 0))
        return NULL;

    char *token = malloc(strlen(ptr) + 1);
    if (token == NULL)
        return NULL;

    json_t *cur = (json_t *) doc;
    const char *p = ptr;
    while (cur != NULL && *p == '/') {
        p = next_token(p + 1, token);
        if (json_is_object(cur)) {
            cur = json_object_get(cur, token);
        } else if (json_is_array(cur)) {
            size_t idx;
            cur = array_index(token, &idx) ? json_array_get(cur, idx) : NULL;
        } else {
            cur = NULL; /* a scalar has no children */
        }
    }
    free(token);
    return cur;
}

/*
 * How many bytes of `p` go in as one piece: an escape, or a character with
 * its UTF-8 continuation bytes, so that truncation never leaves half a
 * character in an error message.
 */
static size_t piece_length(const char *p)
{
    size_t n = 1;
    while (n < 4 && ((unsigned char) p[n] & 0xC0) == 0x80)
        n++;
    return n;
}

char *jsonptr_append(char *buf, size_t buf_size, const char *token)
{
    if (buf == NULL || buf_size == 0)
        return buf;
    size_t len = strnlen(buf, buf_size - 1);

    /* Each piece goes in whole or not at all, so a truncated pointer never
     * ends in half an escape or half a character. */
    if (len + 1 >= buf_size)
        return buf;
    buf[len++] = '/';
    for (const char *p = token; *p != '\0';) {
        const char *escape = *p == '~' ? "~0" : *p == '/' ? "~1" : NULL;
        size_t in_len = escape != NULL ? 1 : piece_length(p);
        size_t out_len = escape != NULL ? 2 : in_len;
        if (len + out_len >= buf_size)
            break;
        memcpy(buf + len, escape != NULL ? escape : p, out_len);
        len += out_len;
        p += in_len;
    }
    buf[len] = '\0';
    return buf;
}

const char *jsonptr_kind(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
        return "an integer";
    case JSON_REAL:
        return "a number with a fraction";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    case JSON_NULL:
        return "null";
    }
    return "an unknown value";
}
