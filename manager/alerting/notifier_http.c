/*
 * notifier_http - the notifier's HTTP (notifier.h): every attempt a
 * transfer on the one libcurl multi handle, owning copies of all it needs;
 * what is kept of a response (the start of the body, a Retry-After); the
 * verdict on a finished transfer, by the sink type's rule.
 */
#include "manager/alerting/notifier_int.h"

#include "common/clock.h"
#include "common/utf8.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void notifier_transfer_free(notifier_t *n, transfer_t *t)
{
    if (t->easy != NULL) {
        curl_multi_remove_handle(n->multi, t->easy);
        curl_easy_cleanup(t->easy);
    }
    curl_slist_free_all(t->headers);
    for (size_t i = 0; i < t->n_group; i++)
        free(t->group_rows[i]);
    free(t->group_rows);
    free(t->group_attempts);
    free(t->group_key);
    free(t->body);
    free(t->sink);
    free(t);
}

/* ---- Retry-After ---------------------------------------------------------------- */

int64_t notifier_parse_retry_after(const char *value, int64_t now_ms, int64_t cap_ms)
{
    char text[128];
    size_t len;

    if (value == NULL || cap_ms < 0)
        return -1;
    while (*value == ' ' || *value == '\t')
        value++;
    len = strcspn(value, "\r\n");
    while (len > 0 && (value[len - 1] == ' ' || value[len - 1] == '\t'))
        len--;
    if (len == 0 || len >= sizeof text)
        return -1;
    memcpy(text, value, len);
    text[len] = '\0';

    if (strspn(text, "0123456789") == len) {
        /* delta-seconds: any number of digits; past the cap is the cap. */
        int64_t secs = 0;
        for (size_t i = 0; i < len; i++) {
            secs = secs * 10 + (text[i] - '0');
            if (secs > cap_ms / 1000) /* then secs * 1000 cannot overflow below */
                return cap_ms;
        }
        return secs * 1000 < cap_ms ? secs * 1000 : cap_ms;
    }
    time_t when = curl_getdate(text, NULL); /* RFC 7231 HTTP-date, and its older forms */
    if (when == (time_t) -1)
        return -1;
    if ((int64_t) when > (INT64_MAX - 999) / 1000)
        return cap_ms;
    int64_t delay = (int64_t) when * 1000 - now_ms;
    if (delay < 0)
        return 0;
    return delay < cap_ms ? delay : cap_ms;
}

/* ---- HTTP ------------------------------------------------------------------- */

void notifier_response_init(notifier_response_t *r, int64_t max_retry_after_ms)
{
    memset(r, 0, sizeof *r);
    r->retry_after_ms = -1;
    r->max_retry_after_ms = max_retry_after_ms;
}

size_t notifier_response_body(char *data, size_t size, size_t nmemb, void *arg)
{
    notifier_response_t *r = arg;
    size_t n = size * nmemb, room = NOTIFIER_RESPONSE_KEEP - r->len;
    memcpy(r->body + r->len, data, n < room ? n : room);
    r->len += n < room ? n : room;
    r->body[r->len] = '\0';
    return size * nmemb; /* read it all; keep the start */
}

size_t notifier_response_header(char *data, size_t size, size_t nmemb, void *arg)
{
    notifier_response_t *r = arg;
    size_t n = size * nmemb;
    if (n > 12 && strncasecmp(data, "Retry-After:", 12) == 0) {
        char value[128];
        size_t len = n - 12 < sizeof value - 1 ? n - 12 : sizeof value - 1;
        memcpy(value, data + 12, len);
        value[len] = '\0';
        r->retry_after_ms =
            notifier_parse_retry_after(value, clock_wall_ms(), r->max_retry_after_ms);
    }
    return n;
}

/*
 * The body becomes last_error, a text column: PostgreSQL refuses bytes that
 * are not UTF-8 (a proxy's Latin-1 page, a character cut at the kept
 * length) and a NUL would end the string, so each such byte is written as
 * U+FFFD instead of failing the record of the attempt.
 */
char *notifier_response_error(long status, const notifier_response_t *r, char *buf, size_t buf_size)
{
    static const char replacement[] = "\xEF\xBF\xBD";
    int head = snprintf(buf, buf_size, "HTTP %ld: ", status);
    size_t o = head > 0 && (size_t) head < buf_size ? (size_t) head : 0;
    const unsigned char *b = (const unsigned char *) r->body;

    for (size_t i = 0; i < r->len;) {
        size_t n = b[i] == 0 ? 0 : b[i] < 0x80 ? 1 : b[i] < 0xE0 ? 2 : b[i] < 0xF0 ? 3 : 4;
        const char *piece = (const char *) b + i;
        if (n == 0 || i + n > r->len || !utf8_valid(b + i, n)) {
            piece = replacement;
            n = sizeof replacement - 1;
            i++;
        } else {
            i += n;
        }
        if (o + n >= buf_size)
            break; /* whole characters only */
        memcpy(buf + o, piece, n);
        o += n;
    }
    buf[o] = '\0';
    return buf;
}

transfer_t *notifier_post(notifier_t *n, const sink_t *sink, char *body)
{
    if (body == NULL)
        return NULL;
    transfer_t *t = calloc(1, sizeof *t);
    if (t == NULL) {
        free(body);
        return NULL;
    }
    char url[2048];
    snprintf(url, sizeof url, "%s%s", sink->url, sink_ops(sink->type)->path);
    t->body = body;
    t->sink = strdup(sink->name);
    t->type = sink->type;
    notifier_response_init(&t->response, n->max_retry_after_ms);
    t->headers = curl_slist_append(NULL, "Content-Type: application/json");
    t->easy = curl_easy_init();
    if (t->sink == NULL || t->headers == NULL || t->easy == NULL) {
        notifier_transfer_free(n, t);
        return NULL;
    }
    curl_easy_setopt(t->easy, CURLOPT_URL, url);
    /* Routes accept only http(s) URLs; this holds it for redirects and for
     * any URL that reaches here another way, so no sink reads a file. */
#if LIBCURL_VERSION_NUM >= 0x075500
    curl_easy_setopt(t->easy, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(t->easy, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
#else
    curl_easy_setopt(t->easy, CURLOPT_PROTOCOLS, (long) (CURLPROTO_HTTP | CURLPROTO_HTTPS));
    curl_easy_setopt(t->easy, CURLOPT_REDIR_PROTOCOLS, (long) (CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
    curl_easy_setopt(t->easy, CURLOPT_POSTFIELDS, t->body);
    curl_easy_setopt(t->easy, CURLOPT_HTTPHEADER, t->headers);
    curl_easy_setopt(t->easy, CURLOPT_TIMEOUT_MS, (long) n->timeout_ms);
    curl_easy_setopt(t->easy, CURLOPT_CONNECTTIMEOUT_MS, (long) n->timeout_ms);
    curl_easy_setopt(t->easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(t->easy, CURLOPT_WRITEFUNCTION, notifier_response_body);
    curl_easy_setopt(t->easy, CURLOPT_WRITEDATA, &t->response);
    curl_easy_setopt(t->easy, CURLOPT_HEADERFUNCTION, notifier_response_header);
    curl_easy_setopt(t->easy, CURLOPT_HEADERDATA, &t->response);
    curl_easy_setopt(t->easy, CURLOPT_ERRORBUFFER, t->curl_error);
    curl_easy_setopt(t->easy, CURLOPT_USERAGENT, "steward/" STEWARD_VERSION);
    curl_easy_setopt(t->easy, CURLOPT_PRIVATE, t);
    if (curl_multi_add_handle(n->multi, t->easy) != CURLM_OK) {
        curl_easy_cleanup(t->easy);
        t->easy = NULL;
        notifier_transfer_free(n, t);
        return NULL;
    }
    t->next = n->in_flight;
    n->in_flight = t;
    return t;
}

/* What a finished transfer came to. */
attempt_t notifier_post_result(transfer_t *t, CURLcode rc)
{
    attempt_t a = {.verdict = VERDICT_RETRY, .retry_after_ms = -1};
    if (rc != CURLE_OK) {
        /* curl_easy_strerror, not the error buffer: the latter may quote the URL. */
        snprintf(a.error, sizeof a.error, "network: %s", curl_easy_strerror(rc));
        return a;
    }
    const sink_ops_t *ops = sink_ops(t->type);
    curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &a.status);
    a.retry_after_ms = ops->retry_after ? t->response.retry_after_ms : -1;
    a.verdict = ops->judge(a.status);
    if (a.verdict != VERDICT_DELIVERED)
        notifier_response_error(a.status, &t->response, a.error, sizeof a.error);
    return a;
}

notifier_verdict_t notifier_verdict(long status)
{
    return sink_http_verdict(status);
}
