/*
 * http - the HTTP server of `steward run`: metrics for Prometheus, health
 * and readiness probes, the read-only views of query.h as JSON, and the
 * operator actions of actions.h for holders of a token.
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
 *   GET /v1/instances?process=&state=&key=&overdue=&active=&limit=&after=
 *                                     query_instances(); `after` is
 *                                     PROCESS/KEY, the previous page's
 *                                     `next`; a bad argument 400
 *   GET /v1/processes                 query_processes()
 *   GET /v1/processes/{process}/graph query_graph(); 404 when unrecorded
 *   GET /v1/report[?process=P][&since=DURATION]
 *                                     report_build() (shadow/report.h) over
 *                                     the recorded definitions: the document
 *                                     of `steward report --json`; 404 when P
 *                                     was never recorded
 *   GET / and /console/{file}         the web console (manager/api/console.h),
 *                                     open to all: it holds no data
 *   GET /v1/verbs                     the verb table (action_verbs_json()):
 *                                     each operator verb, its options,
 *                                     method and path; the console's
 *                                     buttons are drawn from it
 *   POST /v1/alerts/{id}/{ack|resolve}
 *   POST /v1/instances/{process}/{key}/{close|move|retry|claim|release}
 *                                     the actions of manager/operator/actions.h,
 *                                     routed by its verb table;
 *                                     body {"reason": "...", "as": OUTCOME
 *                                     (close), "to": STATE (move)}; the
 *                                     token's name is the actor. 200 with
 *                                     what changed; 400 bad body, 404 no
 *                                     such thing, 409 it changed meanwhile
 *                                     or cannot be done (retry), 413 a body
 *                                     over 16 KiB
 *   GET /v1/silences[?all=true]       action_silences()
 *   POST /v1/silences                 action_silence(): body {"process",
 *                                     "state"?, "team"?, "for": "2h", "reason"}
 *   POST /v1/silences/{id}/unsilence  action_unsilence(): body {"reason"}
 *
 * Who may ask. Tokens come from http.tokens_file (read whole, as every
 * *_file secret is: at most 4 KiB), one per line:
 *
 *     NAME SCOPE SHA256-HEX        e.g. "alice operate 9f86d0...", '#' comments
 *
 * SCOPE is read or operate; the third field is the SHA-256 of the secret
 * (the file never holds a secret). A request presents the secret as
 * "Authorization: Bearer SECRET"; its hash is compared with every line's in
 * constant time. /healthz and /readyz are open to all. Reads (/metrics and
 * the /v1 views) are open without a token on a loopback listener, or
 * anywhere with http.allow_anonymous_read; otherwise they need a token of
 * either scope. Actions always need an operate token: no token or an
 * unknown one 401 (with WWW-Authenticate), a read token 403. Neither a
 * secret nor the Authorization header is ever logged or echoed.
 *
 * Path segments and the process argument are percent-decoded here, once,
 * segment by segment, so a key holding '/' is asked for as %2F. Other
 * paths answer 404, other methods 405 (with Allow), a malformed path
 * (bad percent-encoding, a NUL, not UTF-8, longer than 2 KiB) 400; every
 * error body is JSON {"error": "..."}.
 *
 * Which Host. A web page can point its own name at 127.0.0.1 (DNS
 * rebinding) and have its visitor's browser read a loopback listener as if
 * it were the page's own site; the browser still sends the page's name as
 * Host. So a loopback listener answers only requests whose Host is
 * localhost, an address in 127.0.0.0/8 or [::1] (any port), or a name in
 * http.allowed_hosts (for a proxy in front); any other Host is 421 with
 * the reason. Another listener checks Host only when http.allowed_hosts
 * is set. "*" in the list turns the check off; a request without Host
 * (HTTP/1.0, never a browser) passes.
 *
 * Every answer carries Content-Security-Policy (default-src 'self',
 * frame-ancestors 'none': the console loads only its own files and cannot
 * be framed), X-Frame-Options DENY, X-Content-Type-Options nosniff and
 * Referrer-Policy no-referrer.
 *
 * The module owns a libmicrohttpd daemon (a pool of eight threads that
 * poll every connection and run the requests; at most 1024 connections,
 * and at most http.connections_per_client from one address, more being
 * closed at once; idle ones closed after 10 s, so idle clients cost
 * descriptors, never the threads /healthz needs, and one client cannot
 * hold every connection) and one PostgreSQL
 * connection, opened at the first request that needs it, reopened after it
 * is lost, and used by one request at a time under a mutex (a PGconn is
 * not thread-safe). Every wait for it is bounded: /readyz gives up after a
 * second, a scrape's gauges after three, the JSON views after five plus
 * the statement_timeout (5 s) of their query. Apart from
 * http_set_waiting() and http_set_stall_after(), which any thread may
 * call, no other thread calls into the module between http_new() and
 * http_free().
 *
 * The module is the family manager/api/http_*.c, a file per concern
 * (server, database connection, tokens, router, metrics, probes, views,
 * actions); what they share is manager/api/http_int.h.
 */
#ifndef STEWARD_HTTP_H
#define STEWARD_HTTP_H

#include "common/err.h"
#include "manager/operator/actions.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct http http_t; /* opaque; owns the daemon and the connection */

typedef struct http_tokens http_tokens_t; /* opaque; a parsed tokens file */

/*
 * Parses the text of a tokens file (format above). Returns the tokens
 * (free with http_tokens_free()), or NULL with the line number and what is
 * wrong with it in errstr; never quoting the line, which might hold a
 * pasted secret. An empty text (only comments) gives no tokens.
 */
http_tokens_t *http_tokens_parse(const char *text, char *errstr, size_t errstr_size);
size_t http_tokens_count(const http_tokens_t *t); /* NULL: 0 */
void http_tokens_free(http_tokens_t *t);          /* NULL is a no-op */

/* The most connections served at once, and by default from one address
 * (http.connections_per_client). */
#define HTTP_MAX_CONNECTIONS    1024
#define HTTP_DEFAULT_PER_CLIENT 64

/* The longest request path served; longer ones answer 400. */
#define HTTP_MAX_PATH 2048

/*
 * Routing, the pure part of answering a request: no connection, database,
 * token or daemon. Public so that the fuzz target (tests/fuzz/) and unit
 * tests can feed it any path; the server calls nothing else to read one.
 */
typedef enum http_endpoint {
    HTTP_EP_NONE,
    HTTP_EP_METRICS,
    HTTP_EP_HEALTHZ,
    HTTP_EP_READYZ,
    HTTP_EP_STUCK,
    HTTP_EP_INSTANCE,
    /* The verb table's routes (manager/operator/actions.h): */
    HTTP_EP_ALERT_ACTION,    /* an alert verb's, POST /v1/alerts/{id}/VERB */
    HTTP_EP_INSTANCE_ACTION, /* an instance verb's, POST /v1/instances/{process}/{key}/VERB */
    HTTP_EP_PROCESS_ACTION,  /* a process verb's, POST /v1/processes/{process}/VERB */
    HTTP_EP_SILENCES,        /* GET, POST /v1/silences */
    HTTP_EP_UNSILENCE,       /* POST /v1/silences/{id}/unsilence */
    HTTP_EP_INSTANCES,       /* GET /v1/instances?process=&state=&key=&... */
    HTTP_EP_PROCESSES,       /* GET /v1/processes */
    HTTP_EP_GRAPH,           /* GET /v1/processes/{process}/graph */
    HTTP_EP_REPORT,          /* GET /v1/report?process=&since= */
    HTTP_EP_ASSET,           /* GET / and /console/{file}: the console's files */
    HTTP_EP_VERBS,           /* GET /v1/verbs: the verb table (action_verbs_json()) */
} http_endpoint_t;

typedef struct http_route {
    http_endpoint_t endpoint;        /* HTTP_EP_NONE exactly when 400 or 404 */
    unsigned int status;             /* 0 when served; else 400, 404 or 405, with error */
    bool allow_post;                 /* a 405: the endpoint answers POST (else GET, HEAD) */
    bool action;                     /* served: it changes state (needs an operate token) */
    action_verb_t verb;              /* HTTP_EP_ALERT_, _INSTANCE_, _PROCESS_ACTION */
    char error[HTTP_MAX_PATH + 256]; /* UTF-8: quotes only checked text or %XX */
    /* Decoded, pointing into path: process and key of the instance
     * endpoints (process alone for a graph or a process verb), id (not checked) of the alert
     * and unsilence ones, the file the console asks for. */
    const char *process, *key, *id, *asset;
    char path[HTTP_MAX_PATH + 1]; /* the decoded segments, NUL-separated */
} http_route_t;

/*
 * Routes a request (`method`, and the target in origin form "/v1/stuck"
 * or a proxy's absolute form "http://host/v1/stuck", the query string
 * already split off) into *out: the endpoint, or the status and message
 * it is refused with (405 for a method the endpoint does not answer: POST
 * only for actions, GET and HEAD for the rest). A path is quoted in a
 * message with bytes past ASCII as %XX.
 */
void http_route(const char *method, const char *url, http_route_t *out);

/*
 * Starts serving on `listen` ("HOST:PORT", "[IPV6]:PORT", or ":PORT" for
 * every IPv4 address; port 0 lets the kernel pick one, see http_port()),
 * reading PostgreSQL through `conninfo` and the watermarks of consumer
 * group `group` (both copied), with the tokens in `tokens`, the text of
 * http.tokens_file (NULL or "": none, so no actions). `allowed_hosts` is
 * http.allowed_hosts, names separated by commas (NULL or "": none; see
 * "Which Host" above); `connections_per_client` caps one address's open
 * connections (0: HTTP_DEFAULT_PER_CLIENT). Logs "http listening" with the
 * bound address.
 *
 * Returns the server (free with http_free()). Returns NULL with *cls
 * ERR_OK when `listen` is "" (the server is disabled); NULL with
 * ERR_INVALID and the reason in errstr for a malformed address, a bad
 * tokens file, or a non-loopback address with no tokens file and
 * allow_anonymous_read false; ERR_TRANSIENT when it cannot be bound (in
 * use, not local), ERR_FATAL when out of memory.
 */
http_t *http_new(const char *listen, const char *conninfo, const char *group,
                 const char *tokens_file, bool allow_anonymous_read, const char *allowed_hosts,
                 unsigned int connections_per_client, err_class_t *cls, char *errstr,
                 size_t errstr_size);

/*
 * Swaps in the tokens of `tokens` (the tokens file as read again on
 * SIGHUP); a request being authorized finishes with the ones it started
 * with. On failure (ERR_INVALID, the reason in errstr) the running tokens
 * stay. Any thread. NULL h: ERR_OK.
 */
err_class_t http_reload_tokens(http_t *h, const char *tokens, char *errstr, size_t errstr_size);

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

/* The tracing.link template the instance view fills its trace links from
 * (query_trace_links()); NULL or "": none. Copied; call before serving
 * (not thread-safe against requests). NULL h is a no-op. */
void http_set_tracing_link(http_t *h, const char *tracing_link);

/* Stops the daemon (waiting for requests in flight), closes the
 * connection and frees everything. NULL is a no-op. */
void http_free(http_t *h);

/*
 * Pure helpers of the server, public so that unit tests can check them
 * without a socket (tests/unit/test_http_format.c).
 */

/*
 * Percent-decodes s in place (it can only shrink). Returns NULL, or what
 * is wrong with it: a '%' without two hex digits, a NUL, or bytes that are
 * not UTF-8.
 */
const char *http_percent_decode(char *s);

/*
 * Splits http.listen, "HOST:PORT", "[ADDR]:PORT" or ":PORT", into host (""
 * for every address) and port, checking the port is a number up to 65535;
 * ERR_INVALID with the reason in errstr otherwise.
 */
err_class_t http_parse_listen(const char *listen, char *host, size_t host_size, char *port,
                              size_t port_size, char *errstr, size_t errstr_size);

#endif
