/*
 * test_def_support - what the definition suites (test_def.c,
 * test_def_document.c, test_def_rules.c) share.
 *
 * Most cases start from tests/data/definitions/base.json (a small valid
 * order process), change one thing with dt_put()/dt_del() and check the
 * problem it causes: the JSON pointer exactly, and the words of the
 * message a person acts on. dt_setup() and dt_teardown() are every case's
 * checked fixture: they empty dt_problems around the case.
 */
#ifndef STEWARD_TEST_DEF_SUPPORT_H
#define STEWARD_TEST_DEF_SUPPORT_H

#include "definitions/def.h"

#include <jansson.h>
#include <stdbool.h>

/* The problems of the case's loads, as dt_load() appends them. */
extern def_problems_t dt_problems;

void dt_setup(void);
void dt_teardown(void);

/* All problems as text, for failure messages (static buffer). */
const char *dt_listing(void);

/* tests/data/definitions/base.json, a new reference. */
json_t *dt_base(void);

/* Sets the value at ptr to the JSON text `value`. */
void dt_put(json_t *doc, const char *ptr, const char *value);

/* Removes the value at ptr, which must be there. */
void dt_del(json_t *doc, const char *ptr);

/* doc as indented JSON text (free it). */
char *dt_dump(json_t *doc);

/* Loads doc (consumed) as "test.json". */
def_t *dt_load(json_t *doc);

/* Loads doc (consumed), which must be valid with no problem at all. */
def_t *dt_expect_valid(json_t *doc);

/*
 * Loads doc (consumed), which must fail with a problem at exactly `pointer`
 * whose message holds every word of the NULL-terminated list; with `only`,
 * that must be the sole problem. Returns the problem's message.
 */
const char *dt_expect_problem(json_t *doc, bool only, const char *pointer, ...);
#define EXPECT(doc, ptr, ...)                                                                      \
    dt_expect_problem((doc), false, (ptr), __VA_ARGS__, (const char *) NULL)
#define EXPECT_ONLY(doc, ptr, ...)                                                                 \
    dt_expect_problem((doc), true, (ptr), __VA_ARGS__, (const char *) NULL)

/* Loads base.json with one change; shorthand for the common case. */
json_t *dt_with(const char *ptr, const char *value);

/* base.json without the value at ptr. */
json_t *dt_without(const char *ptr);

#endif
