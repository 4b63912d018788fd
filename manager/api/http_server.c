/*
 * http_server - the libmicrohttpd side of the HTTP server (http.h): the
 * daemon, its pool of threads and its limits (connections in all and per
 * client, the idle timeout, the body size), a request's life from MHD's
 * first call to the reply queued, the security headers on every answer,
 * the Host check against DNS rebinding, and the server's life
 * (http_new(), http_free()). It decides nothing about an endpoint: it
 * routes (http_route.c), checks who asks (http_auth.c) and hands the
 * request to the file that owns the endpoint.
 *
 * A request is answered on its connection's thread once MHD has read it
 * whole (the handler's first call, with the headers alone, only marks it;
 * a body is read and dropped unseen): route, check the method, build the
 * reply, queue it.
 */
#include "manager/api/http_int.h"

#include "common/db.h"
#include "common/log.h"
#include "common/namelist.h"
#include "manager/operator/actions.h"
#include "manager/operator/query.h"

#include <arpa/inet.h>
#include <jansson.h>
#include <libpq-fe.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

/* Connections (HTTP_MAX_CONNECTIONS) cost a file descriptor each, not a
 * thread: the pool's threads poll them all. Idle ones are dropped after
 * IDLE_TIMEOUT_S. */
#define IDLE_TIMEOUT_S 10
/* Requests run on these threads; one waiting for the database holds its
 * thread for at most its budget, and new connections go to the others. */
#define POOL_THREADS 8

/* /healthz's default bound on a worker thread's silence. */
#define DEFAULT_STALL_MS (5 * 60 * 1000)

/* What one connection's request brought, kept between MHD's calls. */
typedef struct request {
    char *body; /* the POST body so far, NUL-terminated; NULL when none */
    size_t len;
    bool too_large;
} request_t;

/* The longest POST body read; actions need a reason, not a document. */
#define MAX_BODY 16384

/* ---- replies -------------------------------------------------------------- */

void http_reply_body(http_reply_t *r, unsigned int status, const char *content_type, char *body,
                     size_t len)
{
    free(r->body);
    r->status = status;
    r->content_type = content_type;
    r->body = body;
    r->len = len;
    if (r->body == NULL) { /* out of memory: an empty 500 is all that is left */
        r->status = MHD_HTTP_INTERNAL_SERVER_ERROR;
        r->body = NULL;
        r->len = 0;
    }
}

/* Answers with `doc` as JSON; takes the reference. */
void http_reply_json(http_reply_t *r, unsigned int status, json_t *doc)
{
    char *text = doc != NULL ? json_dumps(doc, JSON_COMPACT | QUERY_REAL_PRECISION) : NULL;
    json_decref(doc);
    http_reply_body(r, status, "application/json", text, text != NULL ? strlen(text) : 0);
}

/* Answers {"error": message}. Messages only quote text that was checked to
 * be UTF-8, which jansson requires. */
void http_reply_error(http_reply_t *r, unsigned int status, const char *fmt, ...)
{
    char message[HTTP_MAX_PATH + 512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    json_t *doc = json_pack("{s:s}", "error", message);
    if (doc == NULL) /* a message cut inside a UTF-8 sequence */
        doc = json_pack("{s:s}", "error", "request refused");
    http_reply_json(r, status, doc);
}

/* A failed database read: 503 when the database may come back, else 500.
 * errstr never holds the connection string (see connect_by()). */
void http_reply_db_error(http_reply_t *r, err_class_t cls, const char *errstr)
{
    LOG_LIMITED(LOG_LEVEL_WARN, "http-db", 10000, "http: database read failed", "error", errstr,
                "class", err_class_name(cls));
    if (cls == ERR_TRANSIENT || cls == ERR_CONFLICT)
        http_reply_error(r, MHD_HTTP_SERVICE_UNAVAILABLE, "database unavailable: %s", errstr);
    else
        http_reply_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "%s", errstr);
}

/* The console loads its own script and style sheet and nothing else: no
 * inline script, no style attribute, no other origin. */
static const char *const security_headers[][2] = {
    {"Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; "
                                "form-action 'self'; object-src 'none'"},
    {"X-Frame-Options", "DENY"},
    {"X-Content-Type-Options", "nosniff"},
    {"Referrer-Policy", "no-referrer"},
};

static enum MHD_Result send_reply(struct MHD_Connection *conn, http_reply_t *r)
{
    struct MHD_Response *resp = MHD_create_response_from_buffer(
        r->len, r->body != NULL ? r->body : (void *) "",
        r->body != NULL ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    if (resp == NULL) {
        free(r->body);
        return MHD_NO; /* MHD closes the connection */
    }
    r->body = NULL; /* now owned by resp */
    if (r->content_type != NULL)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, r->content_type);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    /* On every answer, so no page of another site can frame the console
     * (clickjacking its action buttons), run script in its origin, or
     * learn its URLs from a Referer. */
    for (size_t i = 0; i < sizeof security_headers / sizeof security_headers[0]; i++)
        MHD_add_response_header(resp, security_headers[i][0], security_headers[i][1]);
    if (r->allow)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, r->allow_post ? "POST" : "GET, HEAD");
    if (r->unauthorized)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer realm=\"steward\"");
    enum MHD_Result ret = MHD_queue_response(conn, r->status, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* ---- the Host check ------------------------------------------------------- */

/*
 * Splits a Host header's value into its name (brackets kept around an IPv6
 * address) and checks the port, if any, is a number. False for anything
 * else, an unbracketed IPv6 address included.
 */
static bool host_name(const char *host, char *name, size_t name_size)
{
    const char *end;
    if (host[0] == '[') {
        const char *close = strchr(host, ']');
        if (close == NULL)
            return false;
        end = close + 1;
    } else {
        end = host + strcspn(host, ":");
    }
    if (*end == ':') {
        size_t digits = strspn(end + 1, "0123456789");
        if (digits == 0 || digits > 5 || end[1 + digits] != '\0')
            return false;
    } else if (*end != '\0') {
        return false;
    }
    if (end == host || (size_t) (end - host) >= name_size)
        return false;
    snprintf(name, name_size, "%.*s", (int) (end - host), host);
    return true;
}

/* Whether name (from host_name()) is localhost or a loopback address:
 * 127.0.0.0/8 in dotted form, [::1] or [::ffff:127.x.y.z]. */
static bool host_is_loopback(const char *name)
{
    if (strcasecmp(name, "localhost") == 0 || strcasecmp(name, "localhost.") == 0)
        return true;
    size_t len = strlen(name);
    if (name[0] == '[') {
        char inner[INET6_ADDRSTRLEN];
        struct in6_addr a6;
        if (len < 3 || name[len - 1] != ']' || len - 2 >= sizeof inner)
            return false;
        snprintf(inner, sizeof inner, "%.*s", (int) (len - 2), name + 1);
        return inet_pton(AF_INET6, inner, &a6) == 1 &&
               (IN6_IS_ADDR_LOOPBACK(&a6) || (IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127));
    }
    struct in_addr a4;
    return inet_pton(AF_INET, name, &a4) == 1 && (ntohl(a4.s_addr) >> 24) == 127;
}

/*
 * Whether the request's Host names this server. A web page can make a
 * browser send its requests to 127.0.0.1 by pointing its own name there
 * (DNS rebinding); the browser then treats the answers as the page's own,
 * but still sends the page's name as Host. So a loopback listener answers
 * only loopback names and http.allowed_hosts (what a proxy in front sends);
 * another listener, which needs tokens for its reads, checks only against
 * http.allowed_hosts when it is set. No Host (HTTP/1.0) is no browser.
 * On false r holds the 421.
 */
static bool host_allowed(const http_t *h, struct MHD_Connection *conn, http_reply_t *r)
{
    const char *host = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
    char name[300], quoted[600];

    if (host == NULL || h->any_host || (!h->loopback && h->allowed_hosts[0] == NULL))
        return true;
    bool parsed = host_name(host, name, sizeof name);
    if (parsed && h->loopback && host_is_loopback(name))
        return true;
    for (char **allowed = h->allowed_hosts; *allowed != NULL; allowed++) {
        if (strcasecmp(*allowed, host) == 0 || (parsed && strcasecmp(*allowed, name) == 0))
            return true;
    }
    http_quote_path(quoted, sizeof quoted, "", host);
    http_reply_error(
        r, MHD_HTTP_MISDIRECTED_REQUEST,
        "Host %s is not a name of this server: %s; requests naming another host may come "
        "from a web page that pointed its name at this address (DNS rebinding). Behind a "
        "proxy, add the name it sends to http.allowed_hosts",
        quoted,
        h->loopback ? "a loopback listener answers localhost, 127.0.0.0/8, [::1] (any "
                      "port) and the names in http.allowed_hosts"
                    : "this listener answers the names in http.allowed_hosts");
    return false;
}

/* What split_names() fills: the names so far, and whether one failed to
 * copy. */
typedef struct name_array {
    char **names;
    size_t n;
    bool failed;
} name_array_t;

static void add_name(const char *name, void *arg)
{
    name_array_t *a = arg;
    if (!a->failed && (a->names[a->n] = strdup(name)) != NULL)
        a->n++;
    else
        a->failed = true;
}

/* The comma-separated list as a NULL-terminated array of trimmed, non-empty
 * names (free with free_names()); NULL when out of memory. */
static char **split_names(const char *list, bool *any)
{
    size_t cap = 1;
    for (const char *p = list; p != NULL && *p != '\0'; p++)
        cap += *p == ',';
    name_array_t a = {calloc(cap + 1, sizeof(char *)), 0, false};
    if (a.names == NULL || !namelist_walk(list, add_name, &a, any) || a.failed) {
        for (size_t i = 0; a.names != NULL && i < a.n; i++)
            free(a.names[i]);
        free(a.names);
        return NULL;
    }
    return a.names;
}

static void free_names(char **names)
{
    for (size_t i = 0; names != NULL && names[i] != NULL; i++)
        free(names[i]);
    free(names);
}

/* ---- a request ------------------------------------------------------------ */

static void route(http_t *h, struct MHD_Connection *conn, const char *url, const char *method,
                  const request_t *q, http_reply_t *r)
{
    char actor[ACTION_ACTOR_MAX + 1];
    http_route_t rt;

    if (!host_allowed(h, conn, r))
        return;
    http_route(method, url, &rt);
    if (rt.status != 0) {
        http_reply_error(r, rt.status, "%s", rt.error);
        r->allow = rt.status == MHD_HTTP_METHOD_NOT_ALLOWED;
        r->allow_post = rt.allow_post;
        return;
    }
    /* The console's files hold no data: every view they show asks the API. */
    http_access_t need = rt.action ? HTTP_ACCESS_OPERATE
                         : rt.endpoint == HTTP_EP_HEALTHZ || rt.endpoint == HTTP_EP_READYZ ||
                                 rt.endpoint == HTTP_EP_ASSET
                             ? HTTP_ACCESS_OPEN
                             : HTTP_ACCESS_READ;
    if (!http_authorize(h, conn, need, actor, sizeof actor, r))
        return;
    if (rt.action && q->too_large) {
        http_reply_error(r, MHD_HTTP_CONTENT_TOO_LARGE, "the body is longer than %d bytes",
                         MAX_BODY);
        return;
    }

    switch (rt.endpoint) {
    case HTTP_EP_METRICS:
        http_get_metrics(h, r);
        break;
    case HTTP_EP_HEALTHZ:
        http_get_healthz(h, r);
        break;
    case HTTP_EP_READYZ:
        http_get_readyz(h, r);
        break;
    case HTTP_EP_STUCK:
        http_get_stuck(h, conn, r);
        break;
    case HTTP_EP_INSTANCE:
        http_get_instance(h, rt.process, rt.key, r);
        break;
    case HTTP_EP_ALERT_ACTION: {
        char *end;
        action_request_t req = {.actor = actor, .alert_id = strtoll(rt.id, &end, 10)};
        if (*end != '\0' || req.alert_id <= 0)
            http_reply_error(r, MHD_HTTP_NOT_FOUND, "no alert %s (alert ids are positive numbers)",
                             rt.id);
        else
            http_post_action(h, rt.verb, &req, q->body, r);
        break;
    }
    case HTTP_EP_INSTANCE_ACTION: {
        action_request_t req = {.actor = actor, .process = rt.process, .key = rt.key};
        http_post_action(h, rt.verb, &req, q->body, r);
        break;
    }
    case HTTP_EP_PROCESS_ACTION: {
        action_request_t req = {.actor = actor, .process = rt.process};
        http_post_action(h, rt.verb, &req, q->body, r);
        break;
    }
    case HTTP_EP_SILENCES:
        http_silences(h, method, NULL, actor,
                      MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "all"), q->body, r);
        break;
    case HTTP_EP_UNSILENCE:
        http_silences(h, method, rt.id, actor, NULL, q->body, r);
        break;
    case HTTP_EP_INSTANCES:
        http_get_instances(h, conn, r);
        break;
    case HTTP_EP_PROCESSES:
        http_get_processes(h, r);
        break;
    case HTTP_EP_GRAPH:
        http_get_graph(h, rt.process, r);
        break;
    case HTTP_EP_REPORT:
        http_get_report(h, conn, r);
        break;
    case HTTP_EP_ASSET:
        http_get_asset(rt.asset, r);
        break;
    case HTTP_EP_VERBS:
        http_get_verbs(r);
        break;
    case HTTP_EP_NONE:
        break;
    }
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url,
                              const char *method, const char *version, const char *upload_data,
                              size_t *upload_data_size, void **con_cls)
{
    http_reply_t r = {.status = MHD_HTTP_INTERNAL_SERVER_ERROR};
    (void) version;

    /* MHD keeps a connection open only for an answer queued once the
     * request is complete: the first call comes with the headers alone. */
    if (*con_cls == NULL) {
        request_t *q = calloc(1, sizeof *q);
        if (q == NULL)
            return MHD_NO;
        *con_cls = q;
        return MHD_YES;
    }
    request_t *q = *con_cls;
    if (*upload_data_size > 0) {
        /* Only POSTs use it; past MAX_BODY it is read and dropped, and
         * the answer says so. */
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (strcmp(method, MHD_HTTP_METHOD_POST) != 0 || q->too_large)
            return MHD_YES;
        if (q->len + n > MAX_BODY) {
            q->too_large = true;
            return MHD_YES;
        }
        char *grown = realloc(q->body, q->len + n + 1);
        if (grown == NULL)
            return MHD_NO;
        memcpy(grown + q->len, upload_data, n);
        q->body = grown;
        q->len += n;
        q->body[q->len] = '\0';
        return MHD_YES;
    }
    route(cls, conn, url, method, q, &r);
    return send_reply(conn, &r);
}

/* The request is over (answered or cut off): its body goes. */
static void request_done(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void) cls;
    (void) conn;
    (void) toe;
    request_t *q = *con_cls;
    if (q != NULL) {
        if (q->body != NULL)
            explicit_bzero(q->body, q->len);
        free(q->body);
        free(q);
        *con_cls = NULL;
    }
}

/* MHD would percent-decode the path before the handler sees it, turning a
 * key's %2F into a separator; leaving it alone lets route() split first. */
static size_t keep_escaped(void *cls, struct MHD_Connection *conn, char *s)
{
    (void) cls;
    (void) conn;
    return strlen(s);
}

/* MHD's error log, on any of its threads (and on ours while starting,
 * when the message is the reason http_new() fails). */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    http_t *h = cls;
    char msg[512];

    vsnprintf(msg, sizeof msg, fmt, ap);
    msg[strcspn(msg, "\n")] = '\0';
    pthread_mutex_lock(&h->log_lock);
    bool starting = h->starting;
    if (starting)
        snprintf(h->start_error, sizeof h->start_error, "%s", msg);
    pthread_mutex_unlock(&h->log_lock);
    if (!starting)
        LOG_LIMITED(LOG_LEVEL_WARN, "http-mhd", 5000, "http: libmicrohttpd", "error", msg);
}

/* ---- life ----------------------------------------------------------------- */

/*
 * Splits "HOST:PORT", "[ADDR]:PORT" or ":PORT" into host (""
 * for every address) and port, checking the port is a number up to 65535.
 */
err_class_t http_parse_listen(const char *listen, char *host, size_t host_size, char *port,
                              size_t port_size, char *errstr, size_t errstr_size)
{
    const char *host_start = listen, *host_end, *colon;

    if (listen[0] == '[') {
        host_start = listen + 1;
        host_end = strchr(host_start, ']');
        if (host_end == NULL || host_end[1] != ':')
            return err_set(ERR_INVALID, errstr, errstr_size,
                           "http.listen '%s': expected [IPV6-ADDRESS]:PORT", listen);
        colon = host_end + 1;
    } else {
        colon = strrchr(listen, ':');
        if (colon == NULL)
            return err_set(ERR_INVALID, errstr, errstr_size,
                           "http.listen '%s': expected HOST:PORT, e.g. 127.0.0.1:9464", listen);
        if (memchr(listen, ':', (size_t) (colon - listen)) != NULL)
            return err_set(ERR_INVALID, errstr, errstr_size,
                           "http.listen '%s': write an IPv6 address in brackets, [ADDRESS]:PORT",
                           listen);
        host_end = colon;
    }
    const char *digits = colon + 1;
    size_t n_digits = strspn(digits, "0123456789");
    if (n_digits == 0 || n_digits > 5 || digits[n_digits] != '\0' || atol(digits) > 65535)
        return err_set(ERR_INVALID, errstr, errstr_size,
                       "http.listen '%s': the port must be a number from 0 to 65535", listen);
    if ((size_t) (host_end - host_start) >= host_size)
        return err_set(ERR_INVALID, errstr, errstr_size, "http.listen '%s': the host is too long",
                       listen);
    snprintf(host, host_size, "%.*s", (int) (host_end - host_start), host_start);
    snprintf(port, port_size, "%s", digits);
    return ERR_OK;
}

/* Whether addr is a loopback address (127.0.0.0/8, ::1, ::ffff:127.x). */
static bool is_loopback(const struct sockaddr *addr)
{
    if (addr->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *) addr)->sin_addr.s_addr) >> 24) == 127;
    if (addr->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *) addr)->sin6_addr;
        return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
    }
    return false;
}

http_t *http_new(const char *listen, const char *conninfo, const char *group, const char *tokens,
                 bool allow_anonymous_read, const char *allowed_hosts,
                 unsigned int connections_per_client, err_class_t *cls, char *errstr,
                 size_t errstr_size)
{
    char host[256], port[8], shown[300];
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *addrs = NULL;
    http_t *h = NULL;

    *cls = ERR_OK;
    if (listen == NULL || listen[0] == '\0')
        return NULL; /* disabled */
    if ((*cls = http_parse_listen(listen, host, sizeof host, port, sizeof port, errstr,
                                  errstr_size)) != ERR_OK)
        return NULL;
    /* ":PORT": every IPv4 address, whatever order the resolver prefers. */
    hints.ai_family = host[0] == '\0' ? AF_INET : AF_UNSPEC;
    int gai = getaddrinfo(host[0] != '\0' ? host : NULL, port, &hints, &addrs);
    if (gai != 0) {
        *cls = err_set(gai == EAI_AGAIN ? ERR_TRANSIENT : ERR_INVALID, errstr, errstr_size,
                       "http.listen '%s': %s", listen, gai_strerror(gai));
        return NULL;
    }

    h = calloc(1, sizeof *h);
    if (h == NULL) {
        *cls = err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
        freeaddrinfo(addrs);
        return NULL;
    }
    if (!http_db_init(h)) {
        *cls = err_set(ERR_FATAL, errstr, errstr_size, "out of resources for the connections");
        free(h);
        freeaddrinfo(addrs);
        return NULL;
    }
    pthread_mutex_init(&h->log_lock, NULL);
    pthread_mutex_init(&h->state_lock, NULL);
    pthread_mutex_init(&h->tokens_lock, NULL);
    h->stall_ms = DEFAULT_STALL_MS;
    h->loopback = is_loopback(addrs->ai_addr);
    h->anonymous_read = allow_anonymous_read;
    if ((h->allowed_hosts = split_names(allowed_hosts, &h->any_host)) == NULL) {
        *cls = err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
        goto fail;
    }
    if (connections_per_client == 0)
        connections_per_client = HTTP_DEFAULT_PER_CLIENT;
    else if (connections_per_client > HTTP_MAX_CONNECTIONS)
        connections_per_client = HTTP_MAX_CONNECTIONS;
    bool has_tokens = tokens != NULL && tokens[0] != '\0';
    if (!h->loopback && !has_tokens && !allow_anonymous_read) {
        /* Instances carry captured payload values: not for anyone who can
         * reach the port. */
        *cls = err_set(ERR_INVALID, errstr, errstr_size,
                       "http.listen '%s' is not a loopback address and there is no "
                       "http.tokens_file: set one, or http.allow_anonymous_read=true to serve "
                       "reads to anyone who can reach it, or listen on 127.0.0.1",
                       listen);
        goto fail;
    }
    if (has_tokens && (*cls = http_reload_tokens(h, tokens, errstr, errstr_size)) != ERR_OK)
        goto fail;
    h->waiting = strdup("starting");
    h->conninfo = strdup(conninfo != NULL ? conninfo : "");
    h->group = strdup(group != NULL ? group : "");
    if (h->conninfo == NULL || h->group == NULL || h->waiting == NULL) {
        *cls = err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
        goto fail;
    }
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    h->started = (double) now.tv_sec + (double) now.tv_nsec / 1e9;

    h->starting = true;
    /* A pool of polling threads, not a thread per connection: idle
     * connections then cost a descriptor, not a thread, and cannot use up
     * what /healthz needs. A request waiting for a slow database holds one
     * pool thread for its budget; the others keep accepting. */
    unsigned int flags = MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ERROR_LOG |
                         (addrs->ai_family == AF_INET6 ? MHD_USE_IPv6 : 0);
    /* The port is also given beside the address, which is what MHD binds:
     * its own messages then name it instead of "port 0". */
    h->daemon = MHD_start_daemon(
        flags, (uint16_t) atoi(port), NULL, NULL, handle, h, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, h,
        MHD_OPTION_SOCK_ADDR, addrs->ai_addr, MHD_OPTION_THREAD_POOL_SIZE,
        (unsigned int) POOL_THREADS, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned int) HTTP_MAX_CONNECTIONS, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
        connections_per_client, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int) IDLE_TIMEOUT_S,
        MHD_OPTION_UNESCAPE_CALLBACK, keep_escaped, NULL, MHD_OPTION_NOTIFY_COMPLETED, request_done,
        NULL, MHD_OPTION_END);
    pthread_mutex_lock(&h->log_lock);
    h->starting = false;
    pthread_mutex_unlock(&h->log_lock);
    if (h->daemon == NULL) {
        *cls = err_set(ERR_TRANSIENT, errstr, errstr_size, "http.listen '%s': cannot listen: %s",
                       listen, h->start_error[0] != '\0' ? h->start_error : "unknown error");
        goto fail;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->daemon, MHD_DAEMON_INFO_BIND_PORT);
    h->port = info != NULL ? (int) info->port : atoi(port);

    char numeric[NI_MAXHOST], address[NI_MAXHOST + 16];
    if (getnameinfo(addrs->ai_addr, addrs->ai_addrlen, numeric, sizeof numeric, NULL, 0,
                    NI_NUMERICHOST) != 0)
        snprintf(numeric, sizeof numeric, "%s", host);
    snprintf(address, sizeof address, addrs->ai_family == AF_INET6 ? "[%s]:%d" : "%s:%d", numeric,
             h->port);
    LOG_INFO("http listening", "address", address, "database",
             db_redact(h->conninfo, shown, sizeof shown));
    freeaddrinfo(addrs);
    return h;

fail:
    freeaddrinfo(addrs);
    http_free(h);
    return NULL;
}

int http_port(const http_t *h)
{
    return h->port;
}

void http_free(http_t *h)
{
    if (h == NULL)
        return;
    if (h->daemon != NULL)
        MHD_stop_daemon(h->daemon); /* joins every thread: no request is left running */
    http_db_fini(h);
    pthread_mutex_destroy(&h->log_lock);
    pthread_mutex_destroy(&h->state_lock);
    pthread_mutex_destroy(&h->tokens_lock);
    http_tokens_free(h->tokens);
    free_names(h->allowed_hosts);
    free(h->waiting);
    free(h->tracing_link);
    free(h->conninfo);
    free(h->group);
    free(h);
}
