/*
 * http_auth - who may ask: the tokens file (http.h's format, parsed whole,
 * swapped on reload under tokens_lock) and the check of a request's
 * "Authorization: Bearer" secret against it, in constant time. Probes are
 * open; reads are open on a loopback listener or with
 * http.allow_anonymous_read, else need a token; actions need an operate
 * token. Neither a secret nor the header is ever logged or echoed.
 */
#include "manager/api/http_int.h"

#include "common/sha256.h"
#include "common/utf8.h"
#include "manager/operator/actions.h"

#include <microhttpd.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct http_token {
    char *name;
    bool operate; /* scope operate (else read) */
    uint8_t hash[32];
} http_token_t;

struct http_tokens {
    http_token_t *items;
    size_t n;
};

void http_tokens_free(http_tokens_t *t)
{
    if (t == NULL)
        return;
    for (size_t i = 0; i < t->n; i++)
        free(t->items[i].name);
    free(t->items);
    free(t);
}

size_t http_tokens_count(const http_tokens_t *t)
{
    return t != NULL ? t->n : 0;
}

static bool parse_hex32(const char *hex, uint8_t out[32])
{
    if (strlen(hex) != 64)
        return false;
    for (size_t i = 0; i < 32; i++) {
        int hi = http_hex_value(hex[2 * i]), lo = http_hex_value(hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return false;
        out[i] = (uint8_t) (hi * 16 + lo);
    }
    return true;
}

http_tokens_t *http_tokens_parse(const char *text, char *errstr, size_t errstr_size)
{
    http_tokens_t *t = calloc(1, sizeof *t);
    char *copy = strdup(text);
    int lineno = 0;
    bool ok = t != NULL && copy != NULL;
    if (!ok)
        err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
    /* strtok_r skips empty lines; count them anyway for the messages. */
    for (char *line = ok ? copy : NULL, *next; ok && line != NULL; line = next) {
        next = strchr(line, '\n');
        if (next != NULL)
            *next++ = '\0';
        lineno++;
        char *save = NULL, *name = strtok_r(line, " \t\r", &save);
        if (name == NULL || name[0] == '#')
            continue;
        char *scope = strtok_r(NULL, " \t\r", &save), *hex = strtok_r(NULL, " \t\r", &save);
        char *extra = strtok_r(NULL, " \t\r", &save);
        http_token_t tok = {0};
        /* The line's content is never quoted: a secret pasted by mistake
         * in place of its hash must not reach a log. */
        if (scope == NULL || hex == NULL || extra != NULL) {
            err_set(ERR_INVALID, errstr, errstr_size,
                    "http.tokens_file line %d: expected NAME SCOPE SHA256-HEX", lineno);
            ok = false;
        } else if (strcmp(scope, "read") != 0 && strcmp(scope, "operate") != 0) {
            err_set(ERR_INVALID, errstr, errstr_size,
                    "http.tokens_file line %d: the scope must be read or operate", lineno);
            ok = false;
        } else if (!parse_hex32(hex, tok.hash)) {
            err_set(ERR_INVALID, errstr, errstr_size,
                    "http.tokens_file line %d: the third field must be the SHA-256 of the "
                    "secret, 64 hex digits (sha256sum), never the secret itself",
                    lineno);
            ok = false;
        } else if (strlen(name) > ACTION_ACTOR_MAX ||
                   !utf8_valid((const unsigned char *) name, strlen(name))) {
            err_set(ERR_INVALID, errstr, errstr_size,
                    "http.tokens_file line %d: a name is 1 to %d bytes of UTF-8", lineno,
                    ACTION_ACTOR_MAX);
            ok = false;
        } else {
            http_token_t *grown = realloc(t->items, (t->n + 1) * sizeof *grown);
            tok.name = strdup(name);
            tok.operate = strcmp(scope, "operate") == 0;
            if (grown != NULL)
                t->items = grown;
            if (grown == NULL || tok.name == NULL) {
                free(tok.name);
                err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
                ok = false;
            } else {
                t->items[t->n++] = tok;
            }
        }
    }
    if (copy != NULL)
        explicit_bzero(copy, strlen(text));
    free(copy);
    if (!ok) {
        http_tokens_free(t);
        return NULL;
    }
    return t;
}

/*
 * The token whose hash the presented secret has, comparing every token in
 * full whatever matches (constant time in the secret); NULL when none.
 * Borrowed from t.
 */
static const http_token_t *token_find(const http_tokens_t *t, const char *secret)
{
    uint8_t hash[32];
    const http_token_t *found = NULL;
    sha256(secret, strlen(secret), hash);
    for (size_t i = 0; t != NULL && i < t->n; i++) {
        uint8_t diff = 0;
        for (size_t k = 0; k < 32; k++)
            diff |= (uint8_t) (hash[k] ^ t->items[i].hash[k]);
        /* Branch-free select, so timing does not say which line matched. */
        uintptr_t mask = (uintptr_t) 0 - (uintptr_t) (diff == 0);
        found = (const http_token_t *) (((uintptr_t) &t->items[i] & mask) |
                                        ((uintptr_t) found & ~mask));
    }
    explicit_bzero(hash, sizeof hash);
    return found;
}

err_class_t http_reload_tokens(http_t *h, const char *tokens, char *errstr, size_t errstr_size)
{
    if (h == NULL)
        return ERR_OK;
    http_tokens_t *next = NULL;
    if (tokens != NULL && tokens[0] != '\0') {
        if ((next = http_tokens_parse(tokens, errstr, errstr_size)) == NULL)
            return ERR_INVALID;
    } else if (!h->loopback && !h->anonymous_read) {
        return err_set(ERR_INVALID, errstr, errstr_size,
                       "http.tokens_file cannot be removed while listening beyond the loopback "
                       "without http.allow_anonymous_read");
    }
    pthread_mutex_lock(&h->tokens_lock);
    http_tokens_t *old = h->tokens;
    h->tokens = next;
    pthread_mutex_unlock(&h->tokens_lock);
    http_tokens_free(old);
    return ERR_OK;
}

/*
 * Whether the request may go on. On true, actor (actor_size >= the
 * longest name + 1) holds the token's name, or "" for an anonymous read.
 * On false r holds the 401 or 403.
 */
bool http_authorize(http_t *h, struct MHD_Connection *conn, http_access_t need, char *actor,
                    size_t actor_size, http_reply_t *r)
{
    actor[0] = '\0';
    if (need == HTTP_ACCESS_OPEN)
        return true;
    const char *auth = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
    if (auth == NULL) {
        if (need == HTTP_ACCESS_READ && (h->loopback || h->anonymous_read))
            return true;
        http_reply_error(r, MHD_HTTP_UNAUTHORIZED, "%s",
                         need == HTTP_ACCESS_OPERATE
                             ? "this endpoint changes state: it needs Authorization: Bearer TOKEN "
                               "with scope operate (http.tokens_file)"
                             : "reads off the loopback need Authorization: Bearer TOKEN "
                               "(http.tokens_file)");
        r->unauthorized = true;
        return false;
    }
    if (strncasecmp(auth, "Bearer ", 7) != 0 || auth[7] == '\0') {
        http_reply_error(r, MHD_HTTP_UNAUTHORIZED, "expected Authorization: Bearer TOKEN");
        r->unauthorized = true;
        return false;
    }
    bool operate = false;
    pthread_mutex_lock(&h->tokens_lock);
    const http_token_t *tok = token_find(h->tokens, auth + 7);
    if (tok != NULL) {
        snprintf(actor, actor_size, "%s", tok->name);
        operate = tok->operate;
    }
    pthread_mutex_unlock(&h->tokens_lock);
    if (tok == NULL) {
        /* Never echo what was presented: it may be a real secret with a typo. */
        http_reply_error(r, MHD_HTTP_UNAUTHORIZED, "unknown token");
        r->unauthorized = true;
        return false;
    }
    if (need == HTTP_ACCESS_OPERATE && !operate) {
        http_reply_error(r, MHD_HTTP_FORBIDDEN, "token %s has scope read; this needs operate",
                         actor);
        return false;
    }
    return true;
}
