/*
 * http_int - private to manager/api/: what the files of the HTTP
 * server share, and nothing else includes. The api's interface, what cli/
 * and the tests use, is http.h.
 *
 * The server is one family of files, one concern each:
 *
 *   http_server.c   libmicrohttpd: the daemon and its limits, a request's
 *                   life from its first call to its reply, the security
 *                   headers, the Host check; the replies every file builds
 *   http_db.c       the PostgreSQL connections: /readyz's own and the views'
 *                   pool, their locks and their budgets
 *   http_auth.c     the tokens file and who may read or operate
 *   http_route.c    the pure router, http_route(), and percent-decoding
 *   http_metrics.c  GET /metrics
 *   http_probes.c   GET /healthz and /readyz, and what they are told
 *   http_views.c    the read-only views (instances, stuck, processes,
 *                   graph, report), the verb table, the console's files
 *   http_actions.c  the operator actions and the silences
 *
 * Threads: every function here runs on a request's thread (one of MHD's
 * pool); what they share of http_t is guarded as struct http says.
 */
#ifndef STEWARD_HTTP_INT_H
#define STEWARD_HTTP_INT_H

#include "common/err.h"
#include "manager/api/http.h"
#include "manager/operator/actions.h"

#include <jansson.h>
#include <libpq-fe.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* /readyz: its connection's turn, connecting and SELECT 1, all within
 * this. */
#define READY_BUDGET_MS 1000
/* ... and what SELECT 1 may take on the server. */
#define READY_STATEMENT_TIMEOUT "1s"
/* Any other request: waiting for the connection and connecting, then its
 * statements, each within this. */
#define QUERY_BUDGET_MS 5000
/* What one statement of the pool may take on the server, so a slow query
 * frees its connection for the next request. */
#define STATEMENT_TIMEOUT "5s"

/* The scrape's gauges: waiting for the connection, connecting and the
 * three queries together, well inside Prometheus's 10 s scrape timeout. */
#define METRICS_DB_BUDGET_MS 3000

/* The views' pool: as many requests at once may wait on the database; one
 * more waits for a connection to come back, within its budget. Fewer than
 * the server's polling threads, so a slow database never holds them all. */
#define HTTP_DB_POOL 4

/* One PostgreSQL connection of the server's, used by one request at a
 * time (a PGconn is not thread-safe). */
typedef struct http_db {
    PGconn *conn; /* NULL until a request needs it, and after it is lost */
    bool busy;    /* in the pool: a request holds it (under pool_lock) */
    bool probe;   /* /readyz's own: its statement_timeout is the probe's */
} http_db_t;

struct http {
    struct MHD_Daemon *daemon;
    int port;
    char *conninfo; /* may hold a password: printed only through db_redact() */
    char *group;
    double started; /* when the server started, seconds since the epoch */

    /* /readyz asks on a connection of its own, so a slow view, an action
     * or a scrape never makes a healthy replica look unready. */
    pthread_mutex_t probe_lock; /* guards probe: one /readyz at a time uses it */
    http_db_t probe;
    pthread_mutex_t pool_lock;    /* guards pool[].busy */
    pthread_cond_t pool_free;     /* a pool connection was given back (CLOCK_MONOTONIC) */
    http_db_t pool[HTTP_DB_POOL]; /* the views, the actions and /metrics */

    pthread_mutex_t log_lock; /* guards the two fields below */
    bool starting;            /* MHD's complaints are kept for http_new()'s errstr */
    char start_error[512];

    bool loopback;               /* listening on a loopback address only */
    char **allowed_hosts;        /* http.allowed_hosts, split; NULL-terminated, never NULL */
    bool any_host;               /* http.allowed_hosts holds "*": no Host check */
    bool anonymous_read;         /* http.allow_anonymous_read */
    pthread_mutex_t tokens_lock; /* guards tokens; a reload swaps them */
    http_tokens_t *tokens;       /* NULL: no tokens, so no actions */

    pthread_mutex_t state_lock; /* guards the two fields below */
    char *waiting;              /* why the daemon is not serving yet; NULL once it is */
    int64_t stall_ms;           /* /healthz: longest silence of a worker thread */
    char *tracing_link;         /* tracing.link; NULL: no trace links */
};

/* What a request is answered with. */
typedef struct http_reply {
    unsigned int status;
    char *body; /* malloc'd; handed to MHD */
    size_t len;
    const char *content_type;
    bool allow;        /* a 405: say which methods are */
    bool allow_post;   /* ... and they are POST */
    bool unauthorized; /* a 401: say how to authenticate */
} http_reply_t;

/* ---- replies (http_server.c) ---------------------------------------------- */

/* Answers with body (taken; NULL, out of memory, makes an empty 500). */
void http_reply_body(http_reply_t *r, unsigned int status, const char *content_type, char *body,
                     size_t len);
/* Answers with `doc` as JSON; takes the reference. */
void http_reply_json(http_reply_t *r, unsigned int status, json_t *doc);
/* Answers {"error": message}; the message quotes only checked UTF-8. */
void http_reply_error(http_reply_t *r, unsigned int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A failed database read: 503 when the database may come back, else 500. */
void http_reply_db_error(http_reply_t *r, err_class_t cls, const char *errstr);

/* ---- the database connections (http_db.c) --------------------------------- */

/* Sets up the probe's connection and the pool (none open yet); false when
 * out of resources. */
bool http_db_init(http_t *h);
/* Closes every connection; after the server stopped (no request runs). */
void http_db_fini(http_t *h);

/* Takes a connection, open, by `deadline` (monotonic ms): /readyz's own
 * (`probe`) or one of the pool's. On ERR_OK *out is the caller's until
 * http_db_release(); on failure nothing is held. */
err_class_t http_db_acquire(http_t *h, bool probe, int64_t deadline, http_db_t **out, char *errstr,
                            size_t errstr_size);
/* Gives the connection back, dropping it when it was lost. */
void http_db_release(http_t *h, http_db_t *db);
/* One statement on db (held), its result in *out (PQclear() it) on
 * ERR_OK, waited for until `deadline`. */
err_class_t http_db_exec(http_db_t *db, const char *what, const char *sql, int nparams,
                         const char *const *params, int64_t deadline, PGresult **out, char *errstr,
                         size_t errstr_size);

/* ---- who may ask (http_auth.c) -------------------------------------------- */

typedef enum http_access {
    HTTP_ACCESS_OPEN,    /* probes: anyone */
    HTTP_ACCESS_READ,    /* views and metrics */
    HTTP_ACCESS_OPERATE, /* actions */
} http_access_t;

/* Whether the request may go on; actor gets the token's name ("" for an
 * anonymous read); on false r holds the 401 or 403. */
bool http_authorize(http_t *h, struct MHD_Connection *conn, http_access_t need, char *actor,
                    size_t actor_size, http_reply_t *r);

/* ---- routing (http_route.c) ----------------------------------------------- */

/* The value of a hex digit, or -1. */
int http_hex_value(char c);
/* prefix, then path with bytes past ASCII as %XX, into buf. */
void http_quote_path(char *buf, size_t buf_size, const char *prefix, const char *path);

/* ---- the endpoints ---------------------------------------------------------- */

/* http_metrics.c */
void http_get_metrics(http_t *h, http_reply_t *r);

/* http_probes.c */
void http_get_readyz(http_t *h, http_reply_t *r);
void http_get_healthz(http_t *h, http_reply_t *r);

/* http_views.c; the ones given conn read its query arguments. */
void http_get_instance(http_t *h, const char *process, const char *key, http_reply_t *r);
void http_get_stuck(http_t *h, struct MHD_Connection *conn, http_reply_t *r);
void http_get_instances(http_t *h, struct MHD_Connection *conn, http_reply_t *r);
void http_get_processes(http_t *h, http_reply_t *r);
void http_get_graph(http_t *h, const char *process, http_reply_t *r);
void http_get_report(http_t *h, struct MHD_Connection *conn, http_reply_t *r);
void http_get_verbs(http_reply_t *r);
void http_get_asset(const char *name, http_reply_t *r);

/* http_actions.c; actor is the operate token's name, body the POST body
 * (NULL: none). */
void http_post_action(http_t *h, action_verb_t verb, action_request_t *req, const char *body,
                      http_reply_t *r);
void http_silences(http_t *h, const char *method, const char *id, const char *actor,
                   const char *all, const char *body, http_reply_t *r);

#endif
