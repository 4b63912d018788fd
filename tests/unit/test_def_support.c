/*
 * test_def_support - the helpers the definition suites share; see
 * test_def_support.h.
 */
#include "test_def_support.h"

#include "definitions/def.h"
#include "definitions/jsonptr.h"
#include "testlib.h"

#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

def_problems_t dt_problems;

void dt_setup(void)
{
    memset(&dt_problems, 0, sizeof dt_problems);
}

void dt_teardown(void)
{
    def_problems_clear(&dt_problems);
}

const char *dt_listing(void)
{
    static char buf[8192];
    size_t len = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < dt_problems.n && len < sizeof buf; i++)
        len += (size_t) snprintf(buf + len, sizeof buf - len, "\n  %s: %s: %s",
                                 dt_problems.items[i].file, dt_problems.items[i].pointer,
                                 dt_problems.items[i].message);
    return dt_problems.n == 0 ? " (none)" : buf;
}

json_t *dt_base(void)
{
    char *path = tl_source_path("tests/data/definitions/base.json");
    json_error_t jerr;
    json_t *doc = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    ck_assert_msg(doc != NULL, "%s: %s", path, jerr.text);
    free(path);
    return doc;
}

/* The object holding ptr's last token, and that token (unescaped tokens only). */
static json_t *parent_of(json_t *doc, const char *ptr, const char **token)
{
    const char *slash = strrchr(ptr, '/');
    ck_assert_ptr_nonnull(slash);
    char *parent_ptr = strndup(ptr, (size_t) (slash - ptr));
    json_t *parent = jsonptr_get(doc, parent_ptr);
    ck_assert_msg(json_is_object(parent), "test bug: no object at '%s'", parent_ptr);
    free(parent_ptr);
    *token = slash + 1;
    return parent;
}

void dt_put(json_t *doc, const char *ptr, const char *value)
{
    const char *token;
    json_t *parent = parent_of(doc, ptr, &token);
    json_error_t jerr;
    json_t *v = json_loads(value, JSON_DECODE_ANY, &jerr);
    ck_assert_msg(v != NULL, "test bug: %s: %s", value, jerr.text);
    json_object_set_new(parent, token, v);
}

void dt_del(json_t *doc, const char *ptr)
{
    const char *token;
    json_t *parent = parent_of(doc, ptr, &token);
    ck_assert_msg(json_object_del(parent, token) == 0, "test bug: nothing at '%s'", ptr);
}

char *dt_dump(json_t *doc)
{
    char *text = json_dumps(doc, JSON_INDENT(2));
    ck_assert_ptr_nonnull(text);
    return text;
}

def_t *dt_load(json_t *doc)
{
    char *text = dt_dump(doc);
    json_decref(doc);
    def_t *def = def_load_json(text, strlen(text), "test.json", &dt_problems);
    free(text);
    return def;
}

def_t *dt_expect_valid(json_t *doc)
{
    def_t *def = dt_load(doc);
    ck_assert_msg(def != NULL && dt_problems.n == 0, "expected valid, got:%s", dt_listing());
    return def;
}

const char *dt_expect_problem(json_t *doc, bool only, const char *pointer, ...)
{
    const char *words[8];
    size_t n_words = 0;
    va_list ap;
    va_start(ap, pointer);
    for (const char *w = va_arg(ap, const char *); w != NULL; w = va_arg(ap, const char *)) {
        ck_assert_uint_lt(n_words, 8);
        words[n_words++] = w;
    }
    va_end(ap);

    def_t *def = dt_load(doc);
    ck_assert_msg(def == NULL, "loaded a definition that should be invalid");
    ck_assert_msg(dt_problems.n > 0, "NULL returned with no problem");
    for (size_t i = 0; i < dt_problems.n; i++) {
        const def_problem_t *p = &dt_problems.items[i];
        ck_assert_str_eq(p->file, "test.json");
        if (strcmp(p->pointer, pointer) != 0)
            continue;
        bool all = true;
        for (size_t w = 0; w < n_words && all; w++)
            all = strstr(p->message, words[w]) != NULL;
        if (!all)
            continue;
        ck_assert_msg(!only || dt_problems.n == 1, "expected only this problem, got:%s",
                      dt_listing());
        return p->message;
    }
    ck_abort_msg("no problem at '%s' with the expected words; got:%s", pointer, dt_listing());
    return NULL;
}

json_t *dt_with(const char *ptr, const char *value)
{
    json_t *doc = dt_base();
    dt_put(doc, ptr, value);
    return doc;
}

json_t *dt_without(const char *ptr)
{
    json_t *doc = dt_base();
    dt_del(doc, ptr);
    return doc;
}
