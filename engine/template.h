/*
 * template - renders a step's command payload from its template and the
 * instance. Pure: no I/O.
 *
 * Strings of the template may hold ${key}, ${process}, ${state},
 * ${attempt}, ${token}, ${idempotency_key} and ${vars.NAME}. A string that is one variable and
 * nothing else becomes that value with its JSON type (a captured number
 * stays a number, ${attempt} and ${token} are integers); a variable inside
 * longer text is replaced by its text form (a string's own characters, any
 * other value as compact JSON). Object keys are not templated.
 */
#ifndef STEWARD_TEMPLATE_H
#define STEWARD_TEMPLATE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

typedef struct template_ctx {
    const char *key;
    const char *process;
    const char *state;
    int attempt;
    int64_t token;
    const json_t *vars; /* the instance's captured variables; borrowed; may be NULL */
    /* The step entry's (cmdq_idempotency_key()): the same for every
     * attempt of the entry. Borrowed; NULL where none is known, and then a
     * template that uses it is refused. */
    const char *idempotency_key;
} template_ctx_t;

/*
 * Renders `tmpl` (borrowed). Returns a new reference (the caller frees),
 * or NULL with the reason in errstr: a variable missing from vars names
 * the variable ("${vars.total} was never captured for this instance"), so
 * that the caller sends nothing rather than half a command.
 */
json_t *template_render(const json_t *tmpl, const template_ctx_t *ctx, char *errstr,
                        size_t errstr_size);

#endif
