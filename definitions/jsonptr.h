/*
 * jsonptr - JSON pointers (RFC 6901): "/payment/order_id", "/items/0",
 * with "~0" for '~' and "~1" for '/'. The empty pointer "" is the whole
 * document.
 */
#ifndef STEWARD_JSONPTR_H
#define STEWARD_JSONPTR_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* True if `ptr` is well-formed; otherwise false with the reason in errstr. */
bool jsonptr_valid(const char *ptr, char *errstr, size_t errstr_size);

/*
 * The value `ptr` names in `doc`, borrowed from doc (valid while doc lives),
 * or NULL when it names nothing or is malformed.
 */
json_t *jsonptr_get(const json_t *doc, const char *ptr);

/*
 * Appends one reference token, escaped, to the pointer in buf:
 * jsonptr_append(buf, size, "a/b") on "/events" gives "/events/a~1b".
 * Truncates rather than overflows, never inside an escape or a UTF-8
 * character. Returns buf.
 */
char *jsonptr_append(char *buf, size_t buf_size, const char *token);

/* What a JSON value is, as an error message says it ("an object", "an
 * integer", "a number with a fraction", ...). A static string. */
const char *jsonptr_kind(const json_t *v);

#endif
