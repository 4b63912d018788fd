/*
 * fuzz_template - a command's payload rendered from its template, as the
 * command outbox does it in active mode (cmdqueue.c): template_render()
 * on any template, captured variables and instance key, then the payload
 * dumped as the outbox row's text.
 *
 * What it asserts: a template that def_check_template() passes, with the
 * variables a definition could capture (names def.c accepts), renders;
 * a refusal says why in UTF-8 (the reason is quoted in the command_failed
 * alert, a text column and a JSON string); a rendered payload dumps, and
 * keeps the template's shape (a template without "${" renders as itself).
 *
 * Input: fields separated by 0xFF (never in UTF-8): the template (any JSON
 * value), then the captured variables (a JSON object; absent or not an
 * object: none), then the instance key (not UTF-8 or empty: "O-1", as
 * decode admits only UTF-8 keys). tests/fuzz/seeds.py writes seeds in this
 * form.
 */
#include "common/utf8.h"
#include "definitions/def.h"
#include "engine/template.h"
#include "fuzz.h"

#include <jansson.h>
#include <stdbool.h>

#define VAR_NAME_MAX 63 /* definitions/def_int.h's NAME_MAX_LEN */

/* A variable name a definition's "capture" accepts (definitions/def_fields.c, is_var_name). */
static bool var_name(const char *s)
{
    if (*s == '\0' || strlen(s) > VAR_NAME_MAX || (*s >= '0' && *s <= '9'))
        return false;
    for (const char *p = s; *p != '\0'; p++) {
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '_'))
            return false;
    }
    return true;
}

static bool has_variable(const json_t *v)
{
    if (json_is_string(v))
        return strstr(json_string_value(v), "${") != NULL;
    const char *key;
    size_t i;
    json_t *child;
    if (json_is_object(v)) {
        json_object_foreach((json_t *) v, key, child)
        {
            if (has_variable(child))
                return true;
        }
    } else if (json_is_array(v)) {
        json_array_foreach(v, i, child)
        {
            if (has_variable(child))
                return true;
        }
    }
    return false;
}

/* The shape a rendering keeps: containers with the same keys and sizes;
 * a string may become any value. */
static bool same_shape(const json_t *tmpl, const json_t *out)
{
    if (json_is_string(tmpl))
        return true;
    if (json_typeof(tmpl) != json_typeof(out))
        return false;
    const char *key;
    size_t i;
    json_t *child;
    if (json_is_object(tmpl)) {
        if (json_object_size(tmpl) != json_object_size(out))
            return false;
        json_object_foreach((json_t *) tmpl, key, child)
        {
            const json_t *o = json_object_get(out, key);
            if (o == NULL || !same_shape(child, o))
                return false;
        }
    } else if (json_is_array(tmpl)) {
        if (json_array_size(tmpl) != json_array_size(out))
            return false;
        json_array_foreach(tmpl, i, child)
        {
            if (!same_shape(child, json_array_get(out, i)))
                return false;
        }
    }
    return true;
}

static const uint8_t *field(const uint8_t **p, const uint8_t *end, size_t *len)
{
    const uint8_t *start = *p;
    const uint8_t *sep = memchr(start, 0xFF, (size_t) (end - start));
    const uint8_t *stop = sep != NULL ? sep : end;
    *len = (size_t) (stop - start);
    *p = sep != NULL ? sep + 1 : end;
    return start;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *p = data, *end = data + size;
    size_t tlen, vlen, klen;
    const uint8_t *t = field(&p, end, &tlen);
    const uint8_t *v = field(&p, end, &vlen);
    const uint8_t *k = field(&p, end, &klen);

    json_t *tmpl =
        json_loadb((const char *) t, tlen, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, NULL);
    if (tmpl == NULL)
        return 0;
    json_t *vars = json_loadb((const char *) v, vlen, JSON_REJECT_DUPLICATES, NULL);
    if (!json_is_object(vars)) {
        json_decref(vars);
        vars = NULL;
    }
    char *key = fuzz_cstr(k, klen);
    if (key[0] == '\0' || !utf8_valid((const unsigned char *) key, strlen(key))) {
        free(key);
        key = strdup("O-1");
    }

    /* The names a definition could have captured, as the validator sees them. */
    const char *names[64];
    size_t n_names = 0;
    const char *name;
    json_t *value;
    if (vars != NULL) {
        json_object_foreach(vars, name, value)
        {
            if (var_name(name) && n_names < sizeof names / sizeof names[0])
                names[n_names++] = name;
        }
    }
    def_problems_t problems = {0};
    size_t n_problems =
        def_check_template(tmpl, names, n_names, "fuzz.json", "/payload", &problems);
    def_problems_clear(&problems);

    template_ctx_t ctx = {
        key,  "fuzz_order",      "awaiting_payment", (int) (size % 7) + 1, (int64_t) size * 1000003,
        vars, "0123456789abcdef"};
    char err[512]; /* cmdqueue.c's */
    err[0] = '\0';
    json_t *out = template_render(tmpl, &ctx, err, sizeof err);
    if (out == NULL) {
        FUZZ_CHECK(n_problems > 0, "a template the definition check passes does not render: %s",
                   err);
        FUZZ_CHECK(err[0] != '\0', "a refusal without a reason");
        FUZZ_CHECK(utf8_valid((const unsigned char *) err, strlen(err)),
                   "the reason is not UTF-8: %s", err);
        json_t *details = json_pack("{s:s}", "reason", err); /* as the alert's details */
        FUZZ_CHECK(details != NULL, "the reason does not fit a JSON string");
        json_decref(details);
    } else {
        char *text = json_dumps(out, JSON_COMPACT | JSON_REAL_PRECISION(15) | JSON_ENCODE_ANY);
        FUZZ_CHECK(text != NULL, "a rendered payload does not dump");
        json_t *back = json_loads(text, JSON_DECODE_ANY, NULL);
        FUZZ_CHECK(back != NULL, "a rendered payload does not parse back: %s", text);
        json_decref(back);
        free(text);
        FUZZ_CHECK(same_shape(tmpl, out), "the payload lost the template's shape");
        if (!has_variable(tmpl))
            FUZZ_CHECK(json_equal(tmpl, out), "a template without variables changed");
        json_decref(out);
    }
    free(key);
    json_decref(vars);
    json_decref(tmpl);
    return 0;
}
