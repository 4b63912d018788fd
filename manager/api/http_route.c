/*
 * http_route - the pure router (http.h's http_route()): a method and a
 * target to an endpoint, or to the status and message it is refused with.
 * Paths are split first and decoded second, segment by segment
 * (http_percent_decode()), so an encoded '/' stays in its segment; the
 * verbs' routes come from the verb table (manager/operator/actions.h). No
 * connection, database, token or daemon: the fuzz target and the unit
 * tests feed it any path.
 */
#include "manager/api/http_int.h"

#include "common/utf8.h"
#include "manager/operator/actions.h"

#include <microhttpd.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

int http_hex_value(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/*
 * Percent-decodes s in place (it can only shrink). Returns NULL, or what
 * is wrong with it: a '%' without two hex digits, a NUL, or bytes that
 * are not UTF-8.
 */
const char *http_percent_decode(char *s)
{
    char *out = s;
    for (const char *in = s; *in != '\0'; in++) {
        if (*in != '%') {
            *out++ = *in;
            continue;
        }
        int hi = http_hex_value(in[1]);
        int lo = hi >= 0 ? http_hex_value(in[2]) : -1;
        if (lo < 0)
            return "malformed percent-encoding (a '%' must start %XX, two hex digits)";
        if (hi == 0 && lo == 0)
            return "a NUL byte (%00)";
        *out++ = (char) (hi * 16 + lo);
        in += 2;
    }
    *out = '\0';
    if (!utf8_valid((const unsigned char *) s, (size_t) (out - s)))
        return "not valid UTF-8";
    return NULL;
}

/*
 * Writes prefix and the path as it was sent into buf, bytes past ASCII as
 * %XX: a path whose segments decode to UTF-8 may still hold raw bytes that
 * are not ("%CA" then a raw 0x93 make U+0293), and the message becomes a
 * JSON body, which must be UTF-8.
 */
void http_quote_path(char *buf, size_t buf_size, const char *prefix, const char *path)
{
    size_t o = (size_t) snprintf(buf, buf_size, "%s", prefix);
    for (const unsigned char *p = (const unsigned char *) path; *p != '\0' && o + 4 < buf_size;
         p++) {
        if (*p < 0x80)
            buf[o++] = (char) *p;
        else
            o += (size_t) snprintf(buf + o, buf_size - o, "%%%02X", *p);
    }
    buf[o] = '\0';
}

/* A 405 for the path as sent: "<path> answers <what>". */
static void refuse_method(http_route_t *out, const char *url, const char *what)
{
    out->status = MHD_HTTP_METHOD_NOT_ALLOWED;
    http_quote_path(out->error, sizeof out->error, "", url);
    size_t quoted = strlen(out->error);
    snprintf(out->error + quoted, sizeof out->error - quoted, " answers %s", what);
}

/* One more than the longest route, to tell them apart. */
#define MAX_SEGMENTS 6

/* Whether the n segments are the verb table's `pattern` ("/v1/alerts/{id}/ack"):
 * its literal segments equal, each {capture} not empty. */
static bool path_matches(const char *pattern, char *const *seg, size_t n)
{
    size_t i = 0;
    for (const char *p = pattern + 1;; i++) {
        size_t len = strcspn(p, "/");
        if (i >= n || i >= MAX_SEGMENTS)
            return false;
        if (p[0] == '{' ? seg[i][0] == '\0' : strlen(seg[i]) != len || memcmp(seg[i], p, len) != 0)
            return false;
        if (p[len] == '\0')
            break;
        p += len + 1;
    }
    return i + 1 == n;
}

/* The segment `pattern` captures as {name}; NULL when it has no such capture. */
static const char *path_capture(const char *pattern, char *const *seg, const char *name)
{
    size_t i = 0, len = strlen(name);
    for (const char *p = pattern + 1;; i++) {
        size_t seg_len = strcspn(p, "/");
        if (p[0] == '{' && seg_len == len + 2 && memcmp(p + 1, name, len) == 0)
            return seg[i];
        if (p[seg_len] == '\0')
            return NULL;
        p += seg_len + 1;
    }
}

/* The endpoint that serves a row of the verb table. */
static http_endpoint_t verb_endpoint(const action_verb_def_t *v)
{
    switch (v->on) {
    case ACTION_ON_ALERT:
        return HTTP_EP_ALERT_ACTION;
    case ACTION_ON_INSTANCE:
        return HTTP_EP_INSTANCE_ACTION;
    case ACTION_ON_PROCESS:
        return HTTP_EP_PROCESS_ACTION;
    case ACTION_ON_SILENCE:
        break;
    }
    return strstr(v->path, "{id}") != NULL ? HTTP_EP_UNSILENCE : HTTP_EP_SILENCES;
}

void http_route(const char *method, const char *url, http_route_t *out)
{
    char *seg[MAX_SEGMENTS];
    size_t n = 0, len = strlen(url);
    http_endpoint_t ep = HTTP_EP_NONE;

    out->endpoint = HTTP_EP_NONE;
    out->status = 0;
    out->allow_post = out->action = false;
    out->verb = ACTION_ACK;
    out->error[0] = '\0';
    out->process = out->key = out->id = out->asset = NULL;
    /* The absolute form a proxy sends ("http://host:port/path"): its path. */
    if (strncasecmp(url, "http://", 7) == 0 || strncasecmp(url, "https://", 8) == 0) {
        const char *slash = strchr(strstr(url, "//") + 2, '/');
        url = slash != NULL ? slash : "/";
        len = strlen(url);
    }
    if (len > HTTP_MAX_PATH) {
        out->status = MHD_HTTP_BAD_REQUEST;
        snprintf(out->error, sizeof out->error, "the path is longer than %d bytes", HTTP_MAX_PATH);
        return;
    }
    if (url[0] != '/') {
        out->status = MHD_HTTP_BAD_REQUEST;
        snprintf(out->error, sizeof out->error, "the path must start with '/'");
        return;
    }
    /* Split first, decode second: an encoded '/' (%2F) is part of a
     * segment, never a separator. */
    memcpy(out->path, url + 1, len);
    for (char *p = out->path;;) {
        char *slash = strchr(p, '/');
        if (slash != NULL)
            *slash = '\0';
        const char *problem = http_percent_decode(p);
        if (problem != NULL) {
            out->status = MHD_HTTP_BAD_REQUEST;
            snprintf(out->error, sizeof out->error, "malformed path: segment %zu: %s", n + 1,
                     problem);
            return;
        }
        if (n < MAX_SEGMENTS)
            seg[n] = p;
        n++;
        if (slash == NULL)
            break;
        p = slash + 1;
    }

    /* The verbs' routes, from the table: the row whose path and method
     * match, else (a 405) what the path answers. */
    const action_verb_def_t *row = NULL, *at_path = NULL;
    bool path_reads = false;
    bool reading =
        strcmp(method, MHD_HTTP_METHOD_GET) == 0 || strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
    for (size_t i = 0; i < action_verb_count; i++) {
        const action_verb_def_t *v = &action_verbs[i];
        if (!path_matches(v->path, seg, n))
            continue;
        bool reads = strcmp(v->method, MHD_HTTP_METHOD_GET) == 0;
        at_path = at_path != NULL ? at_path : v;
        path_reads = path_reads || reads;
        if (row == NULL && (reads ? reading : strcmp(method, v->method) == 0))
            row = v;
    }

    if (at_path != NULL)
        ep = verb_endpoint(at_path);
    else if (n == 1 && strcmp(seg[0], "metrics") == 0)
        ep = HTTP_EP_METRICS;
    else if (n == 1 && strcmp(seg[0], "healthz") == 0)
        ep = HTTP_EP_HEALTHZ;
    else if (n == 1 && strcmp(seg[0], "readyz") == 0)
        ep = HTTP_EP_READYZ;
    else if (n == 2 && strcmp(seg[0], "v1") == 0 && strcmp(seg[1], "stuck") == 0)
        ep = HTTP_EP_STUCK;
    else if (n == 4 && strcmp(seg[0], "v1") == 0 && strcmp(seg[1], "instances") == 0 &&
             seg[2][0] != '\0' && seg[3][0] != '\0')
        ep = HTTP_EP_INSTANCE;
    else if (n == 2 && strcmp(seg[0], "v1") == 0 && strcmp(seg[1], "instances") == 0)
        ep = HTTP_EP_INSTANCES;
    else if (n == 2 && strcmp(seg[0], "v1") == 0 && strcmp(seg[1], "processes") == 0)
        ep = HTTP_EP_PROCESSES;
    else if (n == 4 && strcmp(seg[0], "v1") == 0 && strcmp(seg[1], "processes") == 0 &&
             seg[2][0] != '\0' && strcmp(seg[3], "graph") == 0)
        ep = HTTP_EP_GRAPH;
    else if (n == 2 && strcmp(seg[0], "v1") == 0 && strcmp(seg[1], "report") == 0)
        ep = HTTP_EP_REPORT;
    else if ((n == 1 && seg[0][0] == '\0') || (n == 2 && strcmp(seg[0], "console") == 0))
        ep = HTTP_EP_ASSET;
    else if (n == 2 && strcmp(seg[0], "v1") == 0 && strcmp(seg[1], "verbs") == 0)
        ep = HTTP_EP_VERBS;

    if (ep == HTTP_EP_NONE) {
        out->status = MHD_HTTP_NOT_FOUND;
        if (n >= 2 && strcmp(seg[0], "v1") == 0 && strcmp(seg[1], "instances") == 0)
            snprintf(out->error, sizeof out->error,
                     "expected /v1/instances/{process}/{key}; write a '/' in a key as %%2F");
        else
            http_quote_path(out->error, sizeof out->error, "no such endpoint: ", url);
        return;
    }
    out->endpoint = ep; /* a 405 names it too */
    if (at_path != NULL && row == NULL) {
        refuse_method(out, url, path_reads ? "GET and HEAD only" : "POST only");
        out->allow_post = !path_reads;
        return;
    }
    if (at_path == NULL && !reading) {
        refuse_method(out, url, "GET and HEAD only");
        return;
    }
    out->action = row != NULL && strcmp(row->method, MHD_HTTP_METHOD_GET) != 0;
    out->verb = row != NULL && row->on != ACTION_ON_SILENCE ? row->verb : ACTION_ACK;
    if (row != NULL) {
        out->process = path_capture(row->path, seg, "process");
        out->key = path_capture(row->path, seg, "key");
        out->id = path_capture(row->path, seg, "id");
    } else if (ep == HTTP_EP_INSTANCE) {
        out->process = seg[2];
        out->key = seg[3];
    } else if (ep == HTTP_EP_GRAPH) {
        out->process = seg[2];
    } else if (ep == HTTP_EP_ASSET) {
        out->asset = n == 1 || seg[1][0] == '\0' ? "index.html" : seg[1];
    }
}
