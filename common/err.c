/*
 * err - error classes and the errstr convention; see err.h.
 */
#include "common/err.h"

#include <stdarg.h>
#include <stdio.h>

const char *err_class_name(err_class_t cls)
{
    switch (cls) {
    case ERR_OK:
        return "ok";
    case ERR_TRANSIENT:
        return "transient";
    case ERR_INVALID:
        return "invalid input";
    case ERR_CONFLICT:
        return "conflict";
    case ERR_FATAL:
        return "fatal";
    }
    return "unknown";
}

err_class_t err_set(err_class_t cls, char *errstr, size_t errstr_size, const char *fmt, ...)
{
    if (errstr != NULL && errstr_size > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(errstr, errstr_size, fmt, ap);
        va_end(ap);
    }
    return cls;
}
