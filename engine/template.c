/*
 * template - renders command payloads; see template.h.
 */
#include "engine/template.h"

#include "common/utf8.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The value of variable `name` (len bytes), a new reference; NULL with
 * errstr set when it has none. */
static json_t *variable(const char *name, size_t len, const template_ctx_t *ctx, char *errstr,
                        size_t errstr_size)
{
#define IS(word) (len == strlen(word) && strncmp(name, word, len) == 0)
    if (IS("key"))
        return json_string(ctx->key);
    if (IS("process"))
        return json_string(ctx->process);
    if (IS("state"))
        return json_string(ctx->state);
    if (IS("attempt"))
        return json_integer(ctx->attempt);
    if (IS("token"))
        return json_integer(ctx->token);
    if (IS("idempotency_key")) {
        if (ctx->idempotency_key != NULL)
            return json_string(ctx->idempotency_key);
        snprintf(errstr, errstr_size, "${idempotency_key} is not known outside a step entry");
        return NULL;
    }
#undef IS
    if (len > 5 && strncmp(name, "vars.", 5) == 0) {
        char var[256];
        if (len - 5 < sizeof var) {
            memcpy(var, name + 5, len - 5);
            var[len - 5] = '\0';
            json_t *v = ctx->vars != NULL ? json_object_get(ctx->vars, var) : NULL;
            if (v != NULL)
                return json_deep_copy(v);
        }
        snprintf(errstr, errstr_size, "${%.*s} was never captured for this instance", (int) len,
                 name);
        utf8_scrub(errstr); /* a long name cut inside a character; the reason is alert text */
        return NULL;
    }
    snprintf(errstr, errstr_size, "unknown template variable ${%.*s}", (int) len, name);
    utf8_scrub(errstr);
    return NULL;
}

/* A growing string. */
typedef struct buf {
    char *s;
    size_t len, cap;
    bool oom;
} buf_t;

static void buf_add(buf_t *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->s, cap);
        if (p == NULL) {
            b->oom = true;
            return;
        }
        b->s = p;
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = '\0';
}

static json_t *render_string(const char *text, const template_ctx_t *ctx, char *errstr,
                             size_t errstr_size)
{
    const char *open = strstr(text, "${");
    if (open == NULL)
        return json_string(text);
    const char *close = strchr(open + 2, '}');
    /* The whole string is one variable: the value keeps its JSON type. */
    if (open == text && close != NULL && close[1] == '\0')
        return variable(open + 2, (size_t) (close - open - 2), ctx, errstr, errstr_size);

    buf_t b = {0};
    const char *p = text;
    while ((open = strstr(p, "${")) != NULL && (close = strchr(open + 2, '}')) != NULL) {
        buf_add(&b, p, (size_t) (open - p));
        json_t *v = variable(open + 2, (size_t) (close - open - 2), ctx, errstr, errstr_size);
        if (v == NULL) {
            free(b.s);
            return NULL;
        }
        if (json_is_string(v)) {
            buf_add(&b, json_string_value(v), json_string_length(v));
        } else {
            char *dump = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(15));
            if (dump == NULL)
                b.oom = true;
            else
                buf_add(&b, dump, strlen(dump));
            free(dump);
        }
        json_decref(v);
        p = close + 1;
    }
    buf_add(&b, p, strlen(p));
    json_t *out = b.oom ? NULL : json_stringn(b.s != NULL ? b.s : "", b.len);
    if (out == NULL)
        snprintf(errstr, errstr_size, "out of memory rendering a command");
    free(b.s);
    return out;
}

json_t *template_render(const json_t *tmpl, const template_ctx_t *ctx, char *errstr,
                        size_t errstr_size)
{
    if (json_is_string(tmpl))
        return render_string(json_string_value(tmpl), ctx, errstr, errstr_size);
    if (json_is_object(tmpl)) {
        json_t *out = json_object();
        const char *key;
        json_t *child;
        if (out == NULL)
            goto oom;
        json_object_foreach((json_t *) tmpl, key, child)
        {
            json_t *v = template_render(child, ctx, errstr, errstr_size);
            if (v == NULL || json_object_set_new(out, key, v) != 0) {
                json_decref(out);
                return NULL;
            }
        }
        return out;
    }
    if (json_is_array(tmpl)) {
        json_t *out = json_array();
        size_t i;
        json_t *child;
        if (out == NULL)
            goto oom;
        json_array_foreach(tmpl, i, child)
        {
            json_t *v = template_render(child, ctx, errstr, errstr_size);
            if (v == NULL || json_array_append_new(out, v) != 0) {
                json_decref(out);
                return NULL;
            }
        }
        return out;
    }
    json_t *copy = json_deep_copy(tmpl);
    if (copy != NULL)
        return copy;
oom:
    snprintf(errstr, errstr_size, "out of memory rendering a command");
    return NULL;
}
