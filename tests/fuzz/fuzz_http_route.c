/*
 * fuzz_http_route - the request target of an HTTP request to `steward
 * run`'s server, through http_route() (split, percent-decode, route) and
 * http_percent_decode() on its own (as the ?process= argument takes it).
 *
 * The input's first byte picks the method (GET, HEAD, POST, DELETE), the
 * rest is the target. A routed request names an endpoint and status 0, or
 * 405 for a method the endpoint does not answer (POST only for actions,
 * GET and HEAD for the rest); one that names none 400 or 404. The error
 * message is UTF-8 (it becomes a JSON body), and an instance's process and
 * key, an alert's or a silence's id, are non-empty UTF-8 that PostgreSQL
 * can take as query parameters.
 */
#include "common/utf8.h"
#include "manager/api/http.h"
#include "fuzz.h"

#include <jansson.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const methods[] = {"GET", "HEAD", "POST", "DELETE"};
    if (size == 0)
        return 0;
    const char *method = methods[data[0] & 3];
    char *url = fuzz_cstr(data + 1, size - 1);
    http_route_t *rt = malloc(sizeof *rt);
    if (rt == NULL)
        abort();

    http_route(method, url, rt);
    /* Refused as malformed or unknown exactly when no endpoint was found. */
    FUZZ_CHECK((rt->status == 400 || rt->status == 404) == (rt->endpoint == HTTP_EP_NONE),
               "status %u, endpoint %d", rt->status, (int) rt->endpoint);
    FUZZ_CHECK(rt->status == 0 || rt->status == 400 || rt->status == 404 || rt->status == 405,
               "status %u", rt->status);
    bool post = strcmp(method, "POST") == 0, read = (data[0] & 2) == 0; /* GET, HEAD */
    if (rt->status == 405)
        FUZZ_CHECK(rt->allow_post ? !post : !read, "%s refused with 405 (allow POST: %d)", method,
                   (int) rt->allow_post);
    if (rt->status == 0)
        FUZZ_CHECK(rt->action ? post : read, "%s served (action: %d)", method, (int) rt->action);
    FUZZ_CHECK(!rt->action || rt->status == 0, "a refused request is an action");
    FUZZ_CHECK(utf8_valid((const unsigned char *) rt->error, strlen(rt->error)),
               "the error message is not UTF-8");
    json_t *body = json_pack("{s:s}", "error", rt->error);
    FUZZ_CHECK(body != NULL, "the error message does not make a JSON body");
    json_decref(body);
    if (rt->status == 0 &&
        (rt->endpoint == HTTP_EP_ALERT_ACTION || rt->endpoint == HTTP_EP_UNSILENCE))
        FUZZ_CHECK(rt->id != NULL && utf8_valid((const unsigned char *) rt->id, strlen(rt->id)),
                   "an id that is not UTF-8 was routed");
    if (rt->status == 0 && rt->endpoint == HTTP_EP_PROCESS_ACTION)
        FUZZ_CHECK(rt->process != NULL && rt->process[0] != '\0' &&
                       utf8_valid((const unsigned char *) rt->process, strlen(rt->process)),
                   "an empty process, or one that is not UTF-8, was routed");
    if (rt->status == 0 &&
        (rt->endpoint == HTTP_EP_INSTANCE || rt->endpoint == HTTP_EP_INSTANCE_ACTION)) {
        size_t plen = strlen(rt->process), klen = strlen(rt->key);
        FUZZ_CHECK(plen > 0 && klen > 0, "an empty process or key was routed");
        FUZZ_CHECK(utf8_valid((const unsigned char *) rt->process, plen) &&
                       utf8_valid((const unsigned char *) rt->key, klen),
                   "a process or key that is not UTF-8 was routed");
    }

    /* The whole input as one argument value. */
    size_t len = strlen(url);
    const char *problem = http_percent_decode(url);
    if (problem == NULL)
        FUZZ_CHECK(strlen(url) <= len && utf8_valid((const unsigned char *) url, strlen(url)),
                   "a decoded argument grew or is not UTF-8");
    free(rt);
    free(url);
    return 0;
}
