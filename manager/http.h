/*
 * http - the HTTP server of `steward run`: metrics for Prometheus, health
 * and readiness probes, and the read-only views of query.h as JSON.
 *
 *   GET /metrics                      Prometheus text format 0.0.4: the
 *                                     counters of metrics.h, and gauges
 *                                     read from PostgreSQL at scrape time
 *   GET /healthz                      200 "ok" while every worker thread
 *                                     that started (metrics_beat()) made
 *                                     progress within the stall bound; else
 *                                     503 naming the stuck thread
 *   GET /readyz                       200 once started (http_set_waiting()),
 *                                     in the consumer group (a standby with
 *                                     no partitions included) and the
 *                                     database answers within a second; else
 *                                     503 {"ready":false,"reason":...}. An
 *                                     unreachable broker is shown as
 *                                     "kafka_reachable": false, not as 503
 *   GET /v1/instances/{process}/{key} query_instance(); 404 when absent
 *   GET /v1/stuck[?process=P]         query_stuck()
 *
 * Path segments and the process argument are percent-decoded here, once,
 * segment by segment, so a key holding '/' is asked for as %2F. Other
 * paths answer 404, other methods 405 (with Allow), a malformed path
 * (bad percent-encoding, a NUL, not UTF-8, longer than 2 KiB) 400; every
 * error body is JSON {"error": "..."}.
 *
 * The module owns a libmicrohttpd daemon (a pool of eight threads that
 * poll every connection and run the requests; at most 1024 connections,
 * idle ones closed after 10 s, so idle clients cost descriptors, never
 * the threads /healthz needs) and one PostgreSQL
 * connection, opened at the first request that needs it, reopened after it
 * is lost, and used by one request at a time under a mutex (a PGconn is
 * not thread-safe). Every wait for it is bounded: /readyz gives up after a
 * second, a scrape's gauges after three, the JSON views after five plus
 * the statement_timeout (5 s) of their query. Apart from
 * http_set_waiting() and http_set_stall_after(), which any thread may
 * call, no other thread calls into the module between http_new() and
 * http_free().
 */
#ifndef STEWARD_HTTP_H
#define STEWARD_HTTP_H

#include "manager/err.h"

#include <stddef.h>
#include <stdint.h>

typedef struct http http_t; /* opaque; owns the daemon and the connection */

/* The longest request path served; longer ones answer 400. */
#define HTTP_MAX_PATH 2048

/*
 * Routing, the pure part of answering a request: no connection, database
 * or daemon. Public so that the fuzz target (tests/fuzz/) and unit tests
 * can feed it any path; the server calls nothing else to read one.
 */
typedef enum http_endpoint {
    HTTP_EP_NONE,
    HTTP_EP_METRICS,
    HTTP_EP_HEALTHZ,
    HTTP_EP_READYZ,
    HTTP_EP_STUCK,
    HTTP_EP_INSTANCE,
} http_endpoint_t;

typedef struct http_route {
    http_endpoint_t endpoint;
    unsigned int status;             /* 0 when served; else 400, 404 or 405, with error */
    char error[HTTP_MAX_PATH + 256]; /* UTF-8: quotes only checked text or %XX */
    const char *process, *key;       /* HTTP_EP_INSTANCE: decoded, pointing into path */
    char path[HTTP_MAX_PATH + 1];    /* the decoded segments, NUL-separated */
} http_route_t;

/*
 * Routes a request (`method`, and the target in origin form "/v1/stuck"
 * or a proxy's absolute form "http://host/v1/stuck", the query string
 * already split off) into *out: the endpoint, or the status and message
 * it is refused with (405 for a method other than GET and HEAD on an
 * endpoint). A path is quoted in a message with bytes past ASCII as %XX.
 */
void http_route(const char *method, const char *url, http_route_t *out);

/*
 * Percent-decodes s in place (it can only shrink). Returns NULL, or what
 * is wrong with it (a static string): a '%' without two hex digits, a NUL,
 * or bytes that are not UTF-8.
 */
const char *http_percent_decode(char *s);

/*
 * Starts serving on `listen` ("HOST:PORT", "[IPV6]:PORT", or ":PORT" for
 * every IPv4 address; port 0 lets the kernel pick one, see http_port()),
 * reading PostgreSQL through `conninfo` and the watermarks of consumer
 * group `group` (both copied). Logs "http listening" with the bound
 * address.
 *
 * Returns the server (free with http_free()). Returns NULL with *cls
 * ERR_OK when `listen` is "" (the server is disabled); NULL with
 * ERR_INVALID and the reason in errstr for a malformed address, ERR_TRANSIENT
 * when it cannot be bound (in use, not local), ERR_FATAL when out of memory.
 */
http_t *http_new(const char *listen, const char *conninfo, const char *group, err_class_t *cls,
                 char *errstr, size_t errstr_size);

/* The port the server listens on (the kernel's pick when asked for 0). */
int http_port(const http_t *h);

/*
 * Says why the daemon is not serving yet: /readyz answers 503 "starting:
 * <reason>" until it is called with NULL. A new server starts as
 * "starting". Any thread; `reason` is copied. NULL h is a no-op.
 */
void http_set_waiting(http_t *h, const char *reason);

/* /healthz calls a worker thread stuck after this long without progress
 * (default 5 minutes). Any thread. NULL h is a no-op. */
void http_set_stall_after(http_t *h, int64_t ms);

/* Stops the daemon (waiting for requests in flight), closes the
 * connection and frees everything. NULL is a no-op. */
void http_free(http_t *h);

#endif
