/*
 * http_views - the read-only answers of the API: the views of
 * manager/operator/query.h as JSON (an instance, instances by filter and
 * page, the stuck ones, the processes, a graph), the report of
 * shadow/report.h, the verb table (GET /v1/verbs) and the console's files
 * (manager/api/console.h). A view's query arguments arrive undecoded and
 * are percent-decoded here; each view takes a connection of the pool
 * within QUERY_BUDGET_MS.
 */
#include "manager/api/http_int.h"

#include "common/clock.h"
#include "definitions/duration.h"
#include "manager/api/console.h"
#include "manager/operator/actions.h"
#include "manager/operator/query.h"
#include "shadow/report.h"

#include <jansson.h>
#include <libpq-fe.h>
#include <microhttpd.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Runs one of the query.h views that take only the connection's turn. */
typedef err_class_t (*view_fn)(PGconn *conn, const void *arg, json_t **out, char *errstr,
                               size_t errstr_size);

/*
 * Runs fn on a connection of the pool within QUERY_BUDGET_MS. True with what it read
 * in *doc (NULL: nothing there); false with the database error in r.
 */
static bool view_read(http_t *h, view_fn fn, const void *arg, json_t **doc, http_reply_t *r)
{
    char errstr[1024];
    http_db_t *db;
    err_class_t cls = http_db_acquire(h, false, clock_monotonic_ms() + QUERY_BUDGET_MS, &db, errstr,
                                      sizeof errstr);

    *doc = NULL;
    if (cls == ERR_OK) {
        cls = fn(db->conn, arg, doc, errstr, sizeof errstr);
        http_db_release(h, db);
    }
    if (cls != ERR_OK) {
        http_reply_db_error(r, cls, errstr);
        return false;
    }
    return true;
}

/* A view's document, or a 404 saying `absent` when there is none. */
static void get_view(http_t *h, view_fn fn, const void *arg, const char *absent, http_reply_t *r)
{
    json_t *doc;

    if (!view_read(h, fn, arg, &doc, r))
        return;
    if (doc == NULL)
        http_reply_error(r, MHD_HTTP_NOT_FOUND, "%s", absent);
    else
        http_reply_json(r, MHD_HTTP_OK, doc);
}

static err_class_t view_instances(PGconn *conn, const void *arg, json_t **out, char *errstr,
                                  size_t errstr_size)
{
    return query_instances(conn, arg, out, errstr, errstr_size);
}

static err_class_t view_processes(PGconn *conn, const void *arg, json_t **out, char *errstr,
                                  size_t errstr_size)
{
    (void) arg;
    return query_processes(conn, out, errstr, errstr_size);
}

static err_class_t view_graph(PGconn *conn, const void *arg, json_t **out, char *errstr,
                              size_t errstr_size)
{
    return query_graph(conn, arg, out, errstr, errstr_size);
}

static err_class_t view_stuck(PGconn *conn, const void *arg, json_t **out, char *errstr,
                              size_t errstr_size)
{
    return query_stuck(conn, arg, out, errstr, errstr_size);
}

typedef struct instance_arg {
    const char *process, *key;
    query_absent_t *absent; /* filled when there is no such instance */
} instance_arg_t;

static err_class_t view_instance(PGconn *conn, const void *arg, json_t **out, char *errstr,
                                 size_t errstr_size)
{
    const instance_arg_t *a = arg;
    return query_instance(conn, a->process, a->key, out, a->absent, errstr, errstr_size);
}

void http_get_instance(http_t *h, const char *process, const char *key, http_reply_t *r)
{
    char message[HTTP_MAX_PATH + 64];
    json_t *doc;
    query_absent_t absent = {0};
    instance_arg_t ia = {.process = process, .key = key, .absent = &absent};

    if (!view_read(h, view_instance, &ia, &doc, r))
        return;
    query_trace_links(doc, h->tracing_link);
    if (doc == NULL) {
        /* Events judged for a key with no instance are parked, waiting for
         * the start event, or belonged to an instance retention removed:
         * worth saying which. */
        snprintf(message, sizeof message, "no instance %s of %s", key, process);
        http_reply_json(r, MHD_HTTP_NOT_FOUND,
                        json_pack("{s:s, s:I, s:b}", "error", message, "judged_events",
                                  (json_int_t) absent.judged, "removed", absent.started));
    } else {
        http_reply_json(r, MHD_HTTP_OK, doc);
    }
}

typedef struct report_arg {
    const char *process;
    report_options_t opts;
} report_arg_t;

/* The document `steward report --json` prints for the recorded
 * definitions: the report's rules have one home, shadow/report. */
static err_class_t view_report(PGconn *conn, const void *arg, json_t **out, char *errstr,
                               size_t errstr_size)
{
    const report_arg_t *a = arg;
    def_set_t *set = NULL;
    err_class_t cls = report_load_recorded(conn, a->process, &set, errstr, errstr_size);

    *out = NULL;
    /* An unknown process is a 404; no process at all, an empty report. */
    if (cls == ERR_OK && set != NULL && (a->process == NULL || set->n > 0))
        cls = report_build(conn, (const def_t *const *) set->defs, set->n, &a->opts, out, errstr,
                           errstr_size);
    def_set_free(set);
    return cls;
}

/* The query arguments of one request, percent-decoded (they arrive
 * undecoded, see keep_escaped()); "" counts as absent. */
#define MAX_ARGS 8
typedef struct args {
    const char *name[MAX_ARGS];
    char *value[MAX_ARGS];
    size_t n;
} args_t;

/* Decodes the arguments named in `names` (NULL-terminated); false with a
 * 400 in r when one is malformed. */
static bool args_read(struct MHD_Connection *conn, const char *const *names, args_t *a,
                      http_reply_t *r)
{
    memset(a, 0, sizeof *a);
    for (; *names != NULL && a->n < MAX_ARGS; names++) {
        const char *raw = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, *names);
        a->name[a->n] = *names;
        a->value[a->n] = raw != NULL && raw[0] != '\0' ? strdup(raw) : NULL;
        if (raw != NULL && raw[0] != '\0' && a->value[a->n] == NULL) {
            http_reply_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
            a->n++;
            return false;
        }
        const char *problem = a->value[a->n] != NULL ? http_percent_decode(a->value[a->n]) : NULL;
        a->n++;
        if (problem != NULL) {
            http_reply_error(r, MHD_HTTP_BAD_REQUEST, "malformed argument %s: %s", *names, problem);
            return false;
        }
    }
    return true;
}

static const char *arg(const args_t *a, const char *name)
{
    for (size_t i = 0; i < a->n; i++)
        if (strcmp(a->name[i], name) == 0)
            return a->value[i];
    return NULL;
}

static void args_free(args_t *a)
{
    for (size_t i = 0; i < a->n; i++)
        free(a->value[i]);
}

/* true or false, absent being false; anything else is a 400. */
static bool arg_bool(const args_t *a, const char *name, bool *out, http_reply_t *r)
{
    const char *v = arg(a, name);
    *out = v != NULL && strcmp(v, "true") == 0;
    if (v == NULL || strcmp(v, "true") == 0 || strcmp(v, "false") == 0)
        return true;
    http_reply_error(r, MHD_HTTP_BAD_REQUEST, "argument %s must be true or false", name);
    return false;
}

/* GET /v1/stuck[?process=P] */
void http_get_stuck(http_t *h, struct MHD_Connection *conn, http_reply_t *r)
{
    static const char *const names[] = {"process", NULL};
    args_t a;

    if (args_read(conn, names, &a, r))
        get_view(h, view_stuck, arg(&a, "process"), "", r);
    args_free(&a);
}

/* GET /v1/instances: the filters of query_filter_t; `after` is the page
 * cursor, "PROCESS/KEY" as the previous page's `next` gives it. */
void http_get_instances(http_t *h, struct MHD_Connection *conn, http_reply_t *r)
{
    static const char *const names[] = {"process", "state",   "key",    "after",
                                        "limit",   "overdue", "active", NULL};
    args_t a;
    query_filter_t f = {.limit = 50};
    char *after = NULL;

    if (!args_read(conn, names, &a, r) || !arg_bool(&a, "overdue", &f.overdue_only, r) ||
        !arg_bool(&a, "active", &f.active_only, r))
        goto out;
    f.process = arg(&a, "process");
    f.state = arg(&a, "state");
    f.key_prefix = arg(&a, "key");
    if (arg(&a, "limit") != NULL) {
        char *end;
        long n = strtol(arg(&a, "limit"), &end, 10);
        if (*end != '\0' || n < 1 || n > QUERY_MAX_LIMIT) {
            http_reply_error(r, MHD_HTTP_BAD_REQUEST, "limit must be a number from 1 to %d",
                             QUERY_MAX_LIMIT);
            goto out;
        }
        f.limit = (int) n;
    }
    if (arg(&a, "after") != NULL) {
        after = strdup(arg(&a, "after"));
        char *slash = after != NULL ? strchr(after, '/') : NULL;
        if (slash == NULL || slash == after) {
            http_reply_error(
                r, MHD_HTTP_BAD_REQUEST,
                "after must be PROCESS/KEY, the process and key of the last instance of "
                "the previous page");
            goto out;
        }
        *slash = '\0';
        f.after_process = after;
        f.after_key = slash + 1;
    }
    get_view(h, view_instances, &f, "", r);
out:
    free(after);
    args_free(&a);
}

/* GET /v1/processes */
void http_get_processes(http_t *h, http_reply_t *r)
{
    get_view(h, view_processes, NULL, "", r);
}

/* GET /v1/processes/{process}/graph */
void http_get_graph(http_t *h, const char *process, http_reply_t *r)
{
    char absent[HTTP_MAX_PATH + 64];
    snprintf(absent, sizeof absent, "no recorded definition of %s", process);
    get_view(h, view_graph, process, absent, r);
}

/* GET /v1/report?process=P&since=7d */
void http_get_report(http_t *h, struct MHD_Connection *conn, http_reply_t *r)
{
    static const char *const names[] = {"process", "since", NULL};
    args_t a;
    report_arg_t ra = {.opts = {.definitions = "steward.definitions"}};
    char problem[256];

    if (!args_read(conn, names, &a, r))
        goto out;
    ra.process = arg(&a, "process");
    ra.opts.since_text = arg(&a, "since");
    if (ra.opts.since_text != NULL &&
        (!duration_parse(ra.opts.since_text, &ra.opts.since_ms, problem, sizeof problem) ||
         ra.opts.since_ms <= 0)) {
        http_reply_error(r, MHD_HTTP_BAD_REQUEST, "since must be a positive duration such as 7d");
        goto out;
    }
    get_view(h, view_report, &ra, "no such process", r);
out:
    args_free(&a);
}

/* GET /v1/verbs: the verb table, from which the console draws its buttons. */
void http_get_verbs(http_reply_t *r)
{
    json_t *doc = action_verbs_json();
    if (doc != NULL)
        http_reply_json(r, MHD_HTTP_OK, doc);
    else
        http_reply_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
}

/* GET / and /console/{file}: the console's files, compiled in. */
void http_get_asset(const char *name, http_reply_t *r)
{
    for (size_t i = 0; i < console_n_assets; i++) {
        if (strcmp(console_assets[i].name, name) != 0)
            continue;
        char *copy = malloc(console_assets[i].size + 1);
        if (copy != NULL)
            memcpy(copy, console_assets[i].data, console_assets[i].size);
        http_reply_body(r, MHD_HTTP_OK, console_assets[i].content_type, copy,
                        console_assets[i].size);
        return;
    }
    http_reply_error(r, MHD_HTTP_NOT_FOUND, "no such console file");
}
