/*
 * err - the error classes every Steward module reports.
 *
 * A failing function returns one of these classes and fills the caller's
 * (errstr, errstr_size) with a sentence a person can act on. The class
 * decides what the caller does next; the text says why:
 *
 *   ERR_TRANSIENT  the world may heal (connection lost, broker down): retry
 *                  with backoff.
 *   ERR_INVALID    the input is wrong (a malformed event, definition,
 *                  config or request): record it, report it, carry on.
 *   ERR_CONFLICT   another actor got there first (serialization failure,
 *                  deadlock, a fenced epoch): reload and retry.
 *   ERR_FATAL      nothing sensible can continue: stop.
 *
 * main() alone turns classes into exit codes (err_exit_code()).
 */
#ifndef STEWARD_ERR_H
#define STEWARD_ERR_H

#include <stddef.h>

typedef enum err_class {
    ERR_OK = 0,
    ERR_TRANSIENT,
    ERR_INVALID,
    ERR_CONFLICT,
    ERR_FATAL,
} err_class_t;

/* Exit codes of the steward command. */
enum {
    EXIT_OK = 0,
    EXIT_RUNTIME = 1, /* a runtime failure: database, broker, unknown instance */
    EXIT_USAGE = 2,   /* usage, config or definition error */
};

/* The class's name as logs print it ("transient", ...); never NULL. */
const char *err_class_name(err_class_t cls);

/*
 * Formats into errstr (when errstr is not NULL and errstr_size > 0) and
 * returns cls, so a failure path reads `return err_set(ERR_INVALID, ...)`.
 */
err_class_t err_set(err_class_t cls, char *errstr, size_t errstr_size, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
