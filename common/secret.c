/*
 * secret - secrets read from files; see secret.h.
 */
#include "common/secret.h"

#include "common/err.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *secret_read_file(const char *path, char *errstr, size_t errstr_size)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        err_set(ERR_INVALID, errstr, errstr_size, "cannot read %s: %s", path, strerror(errno));
        return NULL;
    }
    /* Read whole or refused: a value cut at a buffer's end (a tokens file
     * missing its last lines) would be wrong without a word. */
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf != NULL) {
        if (n + 1 == cap) {
            char *grown = cap <= SECRET_MAX_BYTES ? realloc(buf, cap * 2) : NULL;
            if (grown == NULL)
                break;
            buf = grown;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        if (got == 0)
            break;
        n += got;
    }
    bool failed = ferror(f) != 0;
    fclose(f);
    if (buf == NULL || failed || n > SECRET_MAX_BYTES) {
        if (buf == NULL)
            err_set(ERR_FATAL, errstr, errstr_size, "reading %s: out of memory", path);
        else if (failed)
            err_set(ERR_INVALID, errstr, errstr_size, "cannot read %s", path);
        else
            err_set(ERR_INVALID, errstr, errstr_size, "%s is larger than %d bytes", path,
                    SECRET_MAX_BYTES);
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    if (memchr(buf, '\0', n) != NULL) {
        err_set(ERR_INVALID, errstr, errstr_size, "%s holds a NUL byte: expected text", path);
        free(buf);
        return NULL;
    }
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        buf[--n] = '\0';
    return buf;
}
