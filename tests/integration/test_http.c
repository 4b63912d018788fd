/*
 * test_http - the HTTP server of steward run, end to end, on the real
 * broker and PostgreSQL. Steward listens on 127.0.0.1:0 and the test
 * learns the port from its "http listening" log line.
 *
 *   serving   /healthz answers at once; /readyz says 503 "joining the
 *             consumer group" while the definition's topics do not exist
 *             yet (there is no group to join) and 200 once they do; /metrics counts what was
 * consumed (exact values), carries the database gauges and passes `promtool check metrics`;
 * /v1/instances and /v1/stuck answer the query views, a key with '/' asked for as %2F; unknown
 *             paths 404, POST 405 with Allow, malformed paths 400; a view
 *             held by a lock leaves /readyz answering within a second (its
 *             own connection) and the other views answering (the pool)
 *   guards    a Host that is not loopback is refused with 421 (DNS
 *             rebinding), loopback names with or without a port and
 *             http.allowed_hosts are answered; every answer carries the
 *             security headers; one address holds at most
 *             http.connections_per_client connections while /healthz still
 *             answers another at once
 *   silences  a silence of a process or state no definition has is refused
 *             over HTTP (404) and by steward silence (exit 1), on a
 *             listener beyond the loopback that answers any Host with a token
 *   startup   a malformed http.listen exits 2; a port in use exits 1
 *   verbs     the router's action routes are the verb table's rows, and
 *             GET /v1/verbs serves that table
 */
#include "manager/operator/actions.h"
#include "manager/api/http.h"
#include "testlib.h"
#include "world.h"

#include <arpa/inet.h>
#include <check.h>
#include <curl/curl.h>
#include <jansson.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static tw_world_t w;

/* The alerting definition with our topics; payment due 10 s after the
 * order: long enough that the payments, produced once the orders are in,
 * always beat the deadline, even on a loaded machine. A migrated database;
 * no topics yet. */
static void world_init(const char *name)
{
    tw_init(&w, name);
    free(tw_write_template(&w, "tests/data/definitions/alert_order.json.in", "alert_order.json",
                           TW_LIST("@D1@", "10s", "@D2@", "1h")));
    tw_migrate(&w);
}

/* Writes config.json listening on `listen`, with `http` (taken; may be
 * NULL) added to its http section. */
static void world_config_with(const char *listen, json_t *http)
{
    json_t *cfg = tw_config(&w, "alert_order.json");
    json_t *parts =
        json_pack("{s:{s:s, s:s, s:s}, s:{s:s}, s:{s:s}, s:{s:[{s:s}]}, s:{s:s}}", "scheduler",
                  "interval", "200ms", "grace", "200ms", "blind_after", "10m", "notifier",
                  "interval", "100ms", "http", "listen", listen, "routes", "default", "type", "log",
                  "kafka", "topic.metadata.refresh.interval.ms", "1000");
    ck_assert_int_eq(json_object_update(cfg, parts), 0);
    json_decref(parts);
    if (http != NULL) {
        ck_assert_int_eq(json_object_update(json_object_get(cfg, "http"), http), 0);
        json_decref(http);
    }
    tw_config_write(&w, cfg);
}

/* Writes config.json listening on `listen`. */
static void world_config(const char *listen)
{
    world_config_with(listen, NULL);
}

/* ---- HTTP ------------------------------------------------------------------ */

typedef struct response {
    long status;
    char *body;
    char *headers;      /* every header line as received */
    char *allow;        /* the Allow header; NULL when absent */
    char *content_type; /* the Content-Type header; NULL when absent */
} response_t;

static void response_free(response_t *r)
{
    free(r->body);
    free(r->headers);
    free(r->allow);
    free(r->content_type);
    memset(r, 0, sizeof *r);
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *arg)
{
    response_t *r = arg;
    size_t old = strlen(r->body), n = size * nmemb;
    r->body = realloc(r->body, old + n + 1);
    ck_assert_ptr_nonnull(r->body);
    memcpy(r->body + old, data, n);
    r->body[old + n] = '\0';
    return n;
}

/* Keeps the value of header `name` ("Allow: ") in *slot. */
static void keep_header(const char *line, size_t n, const char *name, char **slot)
{
    size_t name_len = strlen(name);
    if (n > name_len && strncasecmp(line, name, name_len) == 0) {
        size_t end = n;
        while (end > name_len && (line[end - 1] == '\r' || line[end - 1] == '\n'))
            end--;
        free(*slot);
        *slot = strndup(line + name_len, end - name_len);
    }
}

static size_t on_header(char *data, size_t size, size_t nmemb, void *arg)
{
    response_t *r = arg;
    size_t old = strlen(r->headers), n = size * nmemb;
    r->headers = realloc(r->headers, old + n + 1);
    ck_assert_ptr_nonnull(r->headers);
    memcpy(r->headers + old, data, n);
    r->headers[old + n] = '\0';
    keep_header(data, size * nmemb, "Allow: ", &r->allow);
    keep_header(data, size * nmemb, "Content-Type: ", &r->content_type);
    return size * nmemb;
}

/* What a request sends besides its method and path; NULL: the default. */
typedef struct sending {
    const char *host;   /* the Host header */
    const char *source; /* the local address to connect from */
    const char *token;  /* sent as Authorization: Bearer */
    const char *body;   /* a POST's body (JSON); else a small form */
} sending_t;

/* method "GET", "HEAD" or "POST"; path as sent, byte for byte (curl
 * normalizes nothing). */
static response_t request_with(const char *method, const char *path, const sending_t *how)
{
    response_t r = {0};
    char *url = NULL, host[512], auth[512];
    CURL *curl = curl_easy_init();
    struct curl_slist *headers = NULL;

    ck_assert_int_ge(asprintf(&url, "%s%s", w.base, path), 0);
    r.body = calloc(1, 1);
    r.headers = calloc(1, 1);
    if (how->host != NULL) {
        snprintf(host, sizeof host, "Host: %s", how->host);
        headers = curl_slist_append(headers, host);
    }
    if (how->token != NULL) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", how->token);
        headers = curl_slist_append(headers, auth);
    }
    if (how->body != NULL)
        headers = curl_slist_append(headers, "Content-Type: application/json");
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    if (how->source != NULL)
        curl_easy_setopt(curl, CURLOPT_INTERFACE, how->source);
    curl_easy_setopt(curl, CURLOPT_URL, url);
    curl_easy_setopt(curl, CURLOPT_PATH_AS_IS, 1L);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &r);
    curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(curl, CURLOPT_HEADERDATA, &r);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT, 10L);
    if (strcmp(method, "HEAD") == 0)
        curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
    else if (strcmp(method, "POST") == 0)
        curl_easy_setopt(curl, CURLOPT_POSTFIELDS, how->body != NULL ? how->body : "reset=all");
    if (curl_easy_perform(curl) == CURLE_OK)
        curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &r.status);
    curl_easy_cleanup(curl);
    curl_slist_free_all(headers);
    free(url);
    return r;
}

static response_t request(const char *method, const char *path)
{
    return request_with(method, path, &(sending_t){0});
}

/* GETs path and parses the JSON body, asserting the status. */
static json_t *get_json(const char *path, long expected_status)
{
    response_t r = request("GET", path);
    ck_assert_msg(r.status == expected_status, "GET %s: %ld %s (expected %ld)", path, r.status,
                  r.body, expected_status);
    ck_assert_msg(r.content_type != NULL && strcmp(r.content_type, "application/json") == 0,
                  "GET %s: Content-Type %s", path, r.content_type);
    json_error_t jerr;
    json_t *doc = json_loads(r.body, 0, &jerr);
    ck_assert_msg(doc != NULL, "GET %s: not JSON (%s): %s", path, jerr.text, r.body);
    response_free(&r);
    return doc;
}

static const char *str(json_t *doc, const char *key)
{
    const char *s = json_string_value(json_object_get(doc, key));
    return s != NULL ? s : "(missing)";
}

/* The value of one series ("name{labels}" exactly as rendered) in a
 * scrape; NAN when absent. */
static double series(const char *text, const char *name)
{
    size_t len = strlen(name);
    for (const char *line = text; line != NULL && *line; line = strchr(line, '\n')) {
        if (*line == '\n')
            line++;
        if (strncmp(line, name, len) == 0 && line[len] == ' ')
            return strtod(line + len + 1, NULL);
    }
    return NAN;
}

static char *scrape(void)
{
    response_t r = request("GET", "/metrics");
    ck_assert_msg(r.status == 200, "GET /metrics: %ld %s", r.status, r.body);
    ck_assert_str_eq(r.content_type, "text/plain; version=0.0.4; charset=utf-8");
    char *body = r.body;
    r.body = NULL;
    response_free(&r);
    return body;
}

typedef struct series_value {
    const char *name;
    double expected;
} series_value_t;

static bool series_is(void *arg, char *seen, size_t seen_size)
{
    const series_value_t *v = arg;
    char *text = scrape();
    double last = series(text, v->name);
    free(text);
    snprintf(seen, seen_size, "%g, expected %g", last, v->expected);
    return last == v->expected;
}

/* Scrapes until series `name` equals `expected`, for up to timeout_s. */
static void wait_series(const char *name, double expected, int timeout_s)
{
    tl_wait_until(series_is, &(series_value_t){name, expected}, timeout_s, name, w.log);
}

/* Runs `promtool check metrics` on a scrape; returns its exit status and output. */
static int promtool(const char *text, char **output)
{
    char *in = tl_write_file(w.dir, "scrape.txt", text);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "promtool check metrics < '%s' 2>&1", in);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    char buf[4096];
    size_t n = fread(buf, 1, sizeof buf - 1, p);
    buf[n] = '\0';
    int status = pclose(p);
    *output = strdup(buf);
    free(in);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void send_event(tl_producer_t *p, const char *name, const char *type, const char *key)
{
    char value[256], *t = tw_topic(&w, name);
    snprintf(value, sizeof value, "{\"type\":\"%s\",\"id\":\"%s-%s\",\"order_id\":\"%s\"}", type,
             type, key, key);
    tl_produce(p, t, -1, value, -1, NULL, 0);
    free(t);
}

/* A request made on a thread of its own: a view that waits. */
typedef struct slow_get {
    const char *path;
    pthread_t thread;
    long status;
    volatile int done; /* set once it answered */
} slow_get_t;

static double now_s(void);

static void *slow_get_run(void *arg)
{
    slow_get_t *g = arg;
    char url[512];
    snprintf(url, sizeof url, "%s%s", w.base, g->path);
    free(tl_http_get(url, &g->status));
    __atomic_store_n(&g->done, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

/* While one view waits on a table a transaction holds locked, /readyz
 * answers 200 within a second, on its own connection, and a view that
 * needs no such table answers from another connection of the pool; the
 * waiting view answers once the lock is gone. */
static void readiness_never_waits_for_a_view(void)
{
    PGconn *holder = tl_db_connect(w.db_url);
    tl_db_exec(holder, "BEGIN");
    tl_db_exec(holder, "LOCK TABLE steward.instances IN ACCESS EXCLUSIVE MODE");
    slow_get_t view = {.path = "/v1/instances?process=alert_order"};
    ck_assert_int_eq(pthread_create(&view.thread, NULL, slow_get_run, &view), 0);
    const char *app[1] = {"steward http"};
    ck_assert_msg(tl_db_wait(w.conn,
                             "SELECT count(*) > 0 FROM pg_stat_activity WHERE application_name = "
                             "$1 AND wait_event_type = 'Lock'",
                             1, app, "t", 30, NULL),
                  "the view never waited for the lock");
    for (int i = 0; i < 3; i++) {
        double t0 = now_s();
        json_t *doc = get_json("/readyz", 200);
        double took = now_s() - t0;
        ck_assert_msg(took < 1.0, "/readyz took %.2f s while a view waited", took);
        ck_assert(json_is_true(json_object_get(doc, "ready")));
        json_decref(doc);
    }
    json_decref(get_json("/v1/silences", 200));
    ck_assert_msg(!__atomic_load_n(&view.done, __ATOMIC_SEQ_CST),
                  "the held view answered while the lock was held");
    tl_db_exec(holder, "ROLLBACK");
    PQfinish(holder);
    pthread_join(view.thread, NULL);
    ck_assert_msg(view.status == 200, "the held view answered %ld", view.status);
}

/* ---- serving ----------------------------------------------------------------- */

START_TEST(serves_probes_metrics_and_views)
{
    world_init("http");
    world_config("127.0.0.1:0");
    tw_start(&w, NULL, true);
    ck_assert_msg(strncmp(w.base, "http://127.0.0.1:", 17) == 0 && atoi(w.base + 17) > 0,
                  "address: %s", w.base);

    /* Alive at once; not ready while not in the group: the topics the
     * definition reads do not exist yet. */
    response_t r = request("GET", "/healthz");
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.body, "ok\n");
    response_free(&r);
    /* Not ready must still hold once the consumer has looked for its topics
     * and found none; nothing marks that look, so time is given for it. */
    sleep(2);
    json_t *doc = get_json("/readyz", 503);
    ck_assert_int_eq(json_is_false(json_object_get(doc, "ready")), 1);
    ck_assert_str_eq(str(doc, "reason"), "joining the consumer group");
    json_decref(doc);

    /* The topics appear: the group assigns them, and steward is ready. */
    char *topics[3] = {tw_topic(&w, "orders"), tw_topic(&w, "payments"), tw_topic(&w, "shipping")};
    tl_kafka_create_topics((const char *const *) topics, 3, 1);
    char url[128];
    snprintf(url, sizeof url, "%s/readyz", w.base);
    tl_wait_http_status(url, 200, 60);
    doc = get_json("/readyz", 200);
    ck_assert_int_eq(json_is_true(json_object_get(doc, "ready")), 1);
    ck_assert_int_eq(json_is_true(json_object_get(doc, "kafka_reachable")), 1);
    json_decref(doc);

    /* Five orders, one of them keyed with a '/'; then two payments. */
    static const char *const keys[] = {"K0", "K1", "K2", "K3", "A/1"};
    tl_producer_t *p = tl_producer_new();
    for (int i = 0; i < 5; i++)
        send_event(p, "orders", "OrderPlaced", keys[i]);
    tl_producer_free(p);
    tw_wait(&w, "SELECT count(*) FROM steward.instances", NULL, "5", 60, "orders started");
    p = tl_producer_new();
    send_event(p, "payments", "PaymentCaptured", "K0");
    send_event(p, "payments", "PaymentCaptured", "K1");
    tl_producer_free(p);
    wait_series("steward_events_judged_total{outcome=\"advanced\"}", 2, 60);
    /* Three orders were never paid: their 10 s deadline pages. */
    wait_series("steward_alerts_open{process=\"alert_order\",state=\"awaiting_payment\","
                "kind=\"deadline\"}",
                3, 60);
    char *orders = tw_topic(&w, "orders");
    char lag[512];
    snprintf(lag, sizeof lag, "steward_consumer_lag_messages{topic=\"%s\",partition=\"0\"}",
             orders);
    wait_series(lag, 0, 30);
    wait_series("steward_notifications_total{sink_type=\"log\",result=\"delivered\"}", 3, 30);

    char *text = scrape();
    ck_assert_double_eq(series(text, "steward_events_read_total"), 7);
    ck_assert_double_eq(series(text, "steward_events_judged_total{outcome=\"started\"}"), 5);
    ck_assert_double_eq(series(text, "steward_events_judged_total{outcome=\"advanced\"}"), 2);
    ck_assert_double_eq(series(text, "steward_events_judged_total{outcome=\"parked\"}"), 0);
    ck_assert_double_eq(series(text, "steward_events_rejected_total{reason=\"invalid_json\"}"), 0);
    ck_assert_double_eq(series(text, "steward_alerts_opened_total"), 3);
    ck_assert_double_eq(series(text, "steward_partitions_assigned"), 3);
    ck_assert_double_eq(series(text, "steward_database_up"), 1);
    ck_assert_double_eq(series(text, "steward_kafka_reachable"), 1);
    ck_assert_double_eq(series(text, "steward_build_info{version=\"" STEWARD_VERSION "\"}"), 1);
    ck_assert_double_eq(series(text, "steward_instances_open{process=\"alert_order\","
                                     "state=\"awaiting_payment\"}"),
                        3);
    ck_assert_double_eq(series(text, "steward_instances_open{process=\"alert_order\","
                                     "state=\"awaiting_dispatch\"}"),
                        2);
    /* Batches with messages are timed: at least the two produced rounds. */
    double batches = series(text, "steward_batch_duration_seconds_count");
    ck_assert_msg(batches >= 2 && batches <= series(text, "steward_batches_committed_total"),
                  "batches timed: %g", batches);
    ck_assert_double_eq(series(text, "steward_batch_duration_seconds_bucket{le=\"+Inf\"}"),
                        batches);
    double wm = series(text, "steward_watermark_lag_seconds{process=\"alert_order\"}");
    ck_assert_msg(wm >= 0 && wm < 60, "watermark lag: %g", wm);
    ck_assert_msg(series(text, "process_start_time_seconds") > 1.6e9, "start time");
    /* The two paid orders left awaiting_payment: two stays observed. */
    ck_assert_double_eq(series(text, "steward_step_duration_seconds_count{process=\"alert_order\","
                                     "state=\"awaiting_payment\"}"),
                        2);
    ck_assert_double_eq(series(text, "steward_step_duration_seconds_bucket{process=\"alert_order\","
                                     "state=\"awaiting_payment\",le=\"+Inf\"}"),
                        2);
    ck_assert_msg(series(text, "process_cpu_seconds_total") > 0, "cpu seconds");
    /* The three pages were delivered: nothing waits in the outbox. */
    ck_assert_double_eq(series(text, "steward_outbox_pending"), 0);
    ck_assert_double_eq(series(text, "steward_outbox_oldest_pending_seconds"), 0);
    /* No command is queued: the process shows 0, not no data. */
    ck_assert_double_eq(series(text, "steward_commands_pending{process=\"alert_order\"}"), 0);
    ck_assert_msg(series(text, "process_resident_memory_bytes") > 1e6, "resident memory");
    char *output;
    int status = promtool(text, &output);
    ck_assert_msg(status == 0, "promtool check metrics: exit %d: %s\n%s", status, output, text);
    free(output);
    free(text);

    /* The verb table, as the console reads it. */
    doc = get_json("/v1/verbs", 200);
    json_t *verbs = json_object_get(doc, "verbs");
    ck_assert_int_eq(json_array_size(verbs), action_verb_count);
    for (size_t i = 0; i < action_verb_count; i++) {
        json_t *v = json_array_get(verbs, i);
        ck_assert_str_eq(str(v, "name"), action_verbs[i].name);
        ck_assert_str_eq(str(v, "method"), action_verbs[i].method);
        ck_assert_str_eq(str(v, "path"), action_verbs[i].path);
    }
    json_t *close = json_array_get(verbs, 2);
    ck_assert_str_eq(str(close, "name"), "close");
    ck_assert_str_eq(str(close, "on"), "instance");
    ck_assert_str_eq(str(json_array_get(json_object_get(close, "options"), 0), "name"), "as");
    /* The console asks which outcome: none is fixed for it. */
    ck_assert(json_object_get(close, "console_body") == NULL);
    ck_assert(json_is_true(
        json_object_get(json_array_get(json_object_get(close, "options"), 0), "required")));
    ck_assert_str_eq(json_string_value(json_array_get(json_object_get(close, "console"), 0)),
                     "overdue");
    ck_assert_str_eq(json_string_value(json_array_get(json_object_get(close, "console"), 1)),
                     "bulk");
    json_decref(doc);

    /* The instance views, a '/' in the key sent as %2F. */
    doc = get_json("/v1/instances/alert_order/A%2F1", 200);
    ck_assert_str_eq(str(doc, "key"), "A/1");
    ck_assert_str_eq(str(doc, "state"), "awaiting_payment");
    ck_assert_int_eq(json_array_size(json_object_get(doc, "history")), 1);
    json_decref(doc);
    doc = get_json("/v1/instances/alert_order/K0", 200);
    ck_assert_str_eq(str(doc, "state"), "awaiting_dispatch");
    ck_assert_int_eq(json_array_size(json_object_get(doc, "history")), 2);
    json_decref(doc);
    doc = get_json("/v1/instances/alert_order/nope", 404);
    ck_assert_str_eq(str(doc, "error"), "no instance nope of alert_order");
    ck_assert_int_eq(json_integer_value(json_object_get(doc, "judged_events")), 0);
    ck_assert(json_is_false(json_object_get(doc, "removed")));
    json_decref(doc);

    /* The stuck view, whole and by process. */
    doc = get_json("/v1/stuck", 200);
    json_t *groups = json_object_get(doc, "groups");
    ck_assert_int_eq(json_array_size(groups), 1);
    ck_assert_str_eq(str(json_array_get(groups, 0), "state"), "awaiting_payment");
    ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(groups, 0), "open")), 3);
    json_decref(doc);
    doc = get_json("/v1/stuck?process=alert%5Forder", 200);
    ck_assert_int_eq(json_array_size(json_object_get(doc, "groups")), 1);
    json_decref(doc);
    doc = get_json("/v1/stuck?process=other", 200);
    ck_assert_int_eq(json_array_size(json_object_get(doc, "groups")), 0);
    json_decref(doc);

    readiness_never_waits_for_a_view();

    /* What is refused, and how. */
    r = request("POST", "/metrics");
    ck_assert_int_eq(r.status, 405);
    ck_assert_str_eq(r.allow, "GET, HEAD");
    ck_assert_msg(tl_contains(r.body, "\"error\""), "405 body: %s", r.body);
    response_free(&r);
    r = request("HEAD", "/healthz");
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.body, "");
    response_free(&r);
    doc = get_json("/nope", 404);
    ck_assert_str_eq(str(doc, "error"), "no such endpoint: /nope");
    json_decref(doc);
    doc = get_json("/v1/instances/alert_order/A/1", 404);
    ck_assert_msg(tl_contains(str(doc, "error"), "%2F"), "error: %s", str(doc, "error"));
    json_decref(doc);
    doc = get_json("/v1/instances/alert_order/%zz", 400);
    ck_assert_msg(tl_contains(str(doc, "error"), "percent-encoding"), "error: %s",
                  str(doc, "error"));
    json_decref(doc);
    doc = get_json("/v1/instances/alert_order/%C3%28", 400);
    ck_assert_msg(tl_contains(str(doc, "error"), "UTF-8"), "error: %s", str(doc, "error"));
    json_decref(doc);
    doc = get_json("/v1/instances/alert_order/a%00b", 400);
    json_decref(doc);
    char long_path[3100] = "/v1/instances/alert_order/";
    memset(long_path + strlen(long_path), 'k', 3000);
    long_path[sizeof long_path - 1] = '\0';
    doc = get_json(long_path, 400);
    ck_assert_msg(tl_contains(str(doc, "error"), "longer than 2048"), "error: %s",
                  str(doc, "error"));
    json_decref(doc);

    /* An instance retention removed: its kept history says it started. */
    tl_db_exec(w.conn, "INSERT INTO steward.history (process, key, version, event_id, event_type, "
                       "  topic, partition, \"offset\", event_time, to_state, outcome, replica, "
                       "  epoch) VALUES ('alert_order', 'gone', 1, 'g1', 'OrderPlaced', 't', 0, "
                       "  1, now(), 'awaiting_payment', 'started', 'test', 1)");
    doc = get_json("/v1/instances/alert_order/gone", 404);
    ck_assert_int_eq(json_integer_value(json_object_get(doc, "judged_events")), 1);
    ck_assert(json_is_true(json_object_get(doc, "removed")));
    json_decref(doc);

    /* Still serving after all that, and a clean stop. */
    r = request("GET", "/healthz");
    ck_assert_int_eq(r.status, 200);
    response_free(&r);
    tw_stop(&w, 30);

    free(orders);
    for (int i = 0; i < 3; i++)
        free(topics[i]);
}
END_TEST

/* ---- guards ------------------------------------------------------------------- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

/* GET path with Host `host`: asserts the status, and for a refusal that
 * the JSON error says why. */
static void expect_host(const char *path, const char *host, long expected)
{
    response_t r = request_with("GET", path, &(sending_t){.host = host});
    ck_assert_msg(r.status == expected, "GET %s, Host %s: %ld %s (expected %ld)", path, host,
                  r.status, r.body, expected);
    if (expected == 421) {
        json_t *doc = json_loads(r.body, 0, NULL);
        const char *error = json_string_value(json_object_get(doc, "error"));
        ck_assert_msg(error != NULL && tl_contains(error, "DNS rebinding") &&
                          tl_contains(error, "http.allowed_hosts"),
                      "Host %s: %s", host, r.body);
        json_decref(doc);
        ck_assert_msg(!tl_contains(r.body, "\"instances\"") && !tl_contains(r.body, "processes"),
                      "Host %s: %s", host, r.body);
    }
    response_free(&r);
}

/* Asserts the answer to GET path carries every security header. */
static void expect_security_headers(const char *path)
{
    response_t r = request("GET", path);
    ck_assert_msg(r.status != 0, "GET %s: no answer", path);
    static const char *const wanted[] = {
        "Content-Security-Policy: default-src 'self'; frame-ancestors 'none'",
        "X-Frame-Options: DENY",
        "X-Content-Type-Options: nosniff",
        "Referrer-Policy: no-referrer",
    };
    for (size_t i = 0; i < sizeof wanted / sizeof wanted[0]; i++)
        ck_assert_msg(tl_contains(r.headers, wanted[i]), "GET %s: no \"%s\" in:\n%s", path,
                      wanted[i], r.headers);
    response_free(&r);
}

/* A TCP connection to the server from 127.0.0.1 that sends nothing. */
/* The greedy client's address: one no other request of the suite uses, so
 * no connection of an earlier request the server has not finished closing
 * counts against its limit. */
#define GREEDY_SOURCE "127.0.0.3"

static int idle_connection(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_in from = {.sin_family = AF_INET};
    ck_assert_int_eq(inet_pton(AF_INET, GREEDY_SOURCE, &from.sin_addr), 1);
    ck_assert_int_eq(bind(fd, (struct sockaddr *) &from, sizeof from), 0);
    struct sockaddr_in addr = {.sin_family = AF_INET,
                               .sin_port = htons((uint16_t) port),
                               .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    ck_assert_int_eq(connect(fd, (struct sockaddr *) &addr, sizeof addr), 0);
    return fd;
}

/* Whether the server has closed fd (EOF or reset), waiting at most wait_ms. */
static bool closed_by_server(int fd, int wait_ms)
{
    struct pollfd pfd = {fd, POLLIN, 0};
    if (poll(&pfd, 1, wait_ms) <= 0)
        return false;
    char c;
    return recv(fd, &c, 1, MSG_DONTWAIT) <= 0;
}

static bool greedy_served_again(void *arg, char *seen, size_t seen_size)
{
    (void) arg;
    response_t r = request_with("GET", "/healthz", &(sending_t){.source = GREEDY_SOURCE});
    long status = r.status;
    response_free(&r);
    snprintf(seen, seen_size, "status %ld", status);
    return status == 200;
}

#define PER_CLIENT  8
#define IDLE_OPENED 24

START_TEST(guards_against_other_sites_and_greedy_clients)
{
    world_init("httpguard");
    world_config_with("127.0.0.1:0",
                      json_pack("{s:s, s:i}", "allowed_hosts", "steward.example.internal",
                                "connections_per_client", PER_CLIENT));
    tw_start(&w, NULL, true);
    int port = atoi(w.base + strlen("http://127.0.0.1:"));
    tw_wait(&w, "SELECT count(*) FROM steward.definitions", NULL, "1", 60, "definition recorded");

    /* A page that pointed its name at 127.0.0.1 gets nothing; loopback
     * names, with or without the port, and the allowed name are answered. */
    char with_port[64];
    expect_host("/v1/processes", "attacker.example", 421);
    snprintf(with_port, sizeof with_port, "attacker.example:%d", port);
    expect_host("/v1/processes", with_port, 421);
    expect_host("/v1/instances", with_port, 421);
    expect_host("/", with_port, 421);
    expect_host("/v1/processes", "127.0.0.1.attacker.example", 421);
    expect_host("/v1/processes", "localhost.attacker.example", 421);
    expect_host("/v1/processes", "[::2]", 421);
    expect_host("/v1/processes", "::1", 421);
    expect_host("/v1/processes", "localhost:80x", 421);
    expect_host("/v1/processes", "steward.example.internal.attacker.example", 421);
    const char *loopback[] = {"localhost",
                              "LocalHost",
                              "127.0.0.1",
                              "127.3.2.1",
                              "[::1]",
                              "steward.example.internal",
                              "Steward.Example.Internal"};
    for (size_t i = 0; i < sizeof loopback / sizeof loopback[0]; i++) {
        expect_host("/v1/processes", loopback[i], 200);
        snprintf(with_port, sizeof with_port, "%s:%d", loopback[i], port);
        expect_host("/v1/processes", with_port, 200);
    }

    /* Every answer forbids framing and other origins, console and API. */
    expect_security_headers("/");
    expect_security_headers("/console/console.js");
    expect_security_headers("/console/console.css");
    expect_security_headers("/v1/processes");
    expect_security_headers("/healthz");
    expect_security_headers("/nope");

    /* One client's idle connections: PER_CLIENT are kept, the rest closed
     * at once; /healthz from another address answers within a second. */
    int fds[IDLE_OPENED];
    bool closed[IDLE_OPENED] = {false};
    for (int i = 0; i < IDLE_OPENED; i++)
        fds[i] = idle_connection(port);
    int n_closed = 0;
    for (double until = now_s() + 5; n_closed < IDLE_OPENED - PER_CLIENT && now_s() < until;) {
        for (int i = 0; i < IDLE_OPENED; i++) {
            if (!closed[i] && closed_by_server(fds[i], 10)) {
                closed[i] = true;
                n_closed++;
            }
        }
    }
    ck_assert_msg(n_closed == IDLE_OPENED - PER_CLIENT,
                  "%d of %d idle connections from one address closed; expected %d", n_closed,
                  IDLE_OPENED, IDLE_OPENED - PER_CLIENT);
    double start = now_s();
    response_t r = request_with("GET", "/healthz", &(sending_t){.source = "127.0.0.2"});
    double took = now_s() - start;
    ck_assert_msg(r.status == 200 && took < 1.0, "/healthz from 127.0.0.2: %ld after %.3f s",
                  r.status, took);
    response_free(&r);
    r = request_with("GET", "/healthz", &(sending_t){.source = GREEDY_SOURCE});
    ck_assert_msg(r.status == 0, "/healthz from the greedy address: %ld", r.status);
    response_free(&r);
    for (int i = 0; i < IDLE_OPENED; i++)
        ck_assert_msg(closed[i] || !closed_by_server(fds[i], 0), "kept connection %d closed", i);
    for (int i = 0; i < IDLE_OPENED; i++)
        close(fds[i]);

    /* Once it lets go, it is served again. */
    tl_wait_until(greedy_served_again, NULL, 5, "the greedy address served once it let go", NULL);
    tw_stop(&w, 30);
}
END_TEST

/* ---- silences ------------------------------------------------------------------ */

#define OPS_SECRET "opsecret-DDDD4444"

START_TEST(silences_only_what_exists)
{
    world_init("httpsilence");
    char cmd[256], hex[128] = "", line[256];
    snprintf(cmd, sizeof cmd, "printf %%s '%s' | sha256sum", OPS_SECRET);
    FILE *f = popen(cmd, "r");
    ck_assert_ptr_nonnull(f);
    ck_assert_ptr_nonnull(fgets(hex, sizeof hex, f));
    pclose(f);
    hex[64] = '\0';
    snprintf(line, sizeof line, "alice operate %s\n", hex);
    char *tokens = tl_write_file(w.dir, "tokens", line);
    /* Beyond the loopback, with tokens: any Host is answered. */
    world_config_with("0.0.0.0:0", json_pack("{s:s}", "tokens_file", tokens));
    free(tokens);
    tw_start(&w, NULL, true);
    tw_wait(&w, "SELECT count(*) FROM steward.definitions", NULL, "1", 60, "definition recorded");
    sending_t ops = {.token = OPS_SECRET, .host = "steward.example.com"};

    ops.body = "{\"process\":\"alert_ordr\",\"for\":\"1h\",\"reason\":\"maintenance\"}";
    response_t r = request_with("POST", "/v1/silences", &ops);
    ck_assert_msg(r.status == 404 && tl_contains(r.body, "no process alert_ordr") &&
                      tl_contains(r.body, "alert_order"),
                  "unknown process: %ld %s", r.status, r.body);
    response_free(&r);
    ops.body = "{\"process\":\"alert_order\",\"state\":\"nowhere\",\"for\":\"1h\","
               "\"reason\":\"maintenance\"}";
    r = request_with("POST", "/v1/silences", &ops);
    ck_assert_msg(r.status == 404 && tl_contains(r.body, "no state nowhere"),
                  "unknown state: %ld %s", r.status, r.body);
    response_free(&r);
    ops.body = "{\"process\":\"alert_order\",\"state\":\"awaiting_payment\",\"for\":\"1h\","
               "\"reason\":\"maintenance\"}";
    r = request_with("POST", "/v1/silences", &ops);
    ck_assert_msg(r.status == 200 && tl_contains(r.body, "\"actor\":\"alice\""), "silence: %ld %s",
                  r.status, r.body);
    response_free(&r);

    /* The command refuses the same, and still silences what exists. */
    const char *bad[] = {NULL, "silence",    "--process", "alert_ordr", "--for", "1h", "--reason",
                         "x",  "--database", w.db_url,    "--actor",    "bob",   NULL};
    tl_output_t o = tl_steward(bad, NULL);
    ck_assert_msg(o.status == 1 && tl_contains(o.err, "no process alert_ordr"),
                  "steward silence: %d %s", o.status, o.err);
    tl_output_free(&o);
    const char *good[] = {NULL,      "silence",  "--process",   "alert_order", "--for",
                          "1h",      "--reason", "maintenance", "--database",  w.db_url,
                          "--actor", "bob",      NULL};
    o = tl_steward(good, NULL);
    ck_assert_msg(o.status == 0, "steward silence: %d %s", o.status, o.err);
    tl_output_free(&o);
    tw_expect(&w,
              "SELECT string_agg(process || '/' || coalesce(state, '*'), ',' ORDER BY id) "
              "FROM steward.silences",
              NULL, "alert_order/awaiting_payment,alert_order/*");
    tw_stop(&w, 30);
}
END_TEST

/* ---- startup ------------------------------------------------------------------ */

START_TEST(bad_listen_addresses_stop_the_start)
{
    world_init("httpstart");

    /* Malformed: a config error, exit 2, naming the key. */
    world_config("localhost");
    const char *argv[] = {NULL, "run", "--config", w.config, NULL};
    tl_output_t o = tl_steward(argv, NULL);
    ck_assert_msg(o.status == 2, "exit %d: %s", o.status, o.err);
    ck_assert_msg(tl_contains(o.err, "http.listen 'localhost'"), "stderr: %s", o.err);
    tl_output_free(&o);

    /* A port someone else holds: a runtime failure, exit 1. */
    int port, fd = tl_hold_port(&port);
    char listen_at[64];
    snprintf(listen_at, sizeof listen_at, "127.0.0.1:%d", port);
    world_config(listen_at);
    const char *argv2[] = {NULL, "run", "--config", w.config, NULL};
    o = tl_steward(argv2, NULL);
    ck_assert_msg(o.status == 1, "exit %d: %s", o.status, o.err);
    ck_assert_msg(tl_contains(o.err, "cannot listen") && tl_contains(o.err, "in use"), "stderr: %s",
                  o.err);
    tl_output_free(&o);
    close(fd);
}
END_TEST

/* Reads datagrams from fd until one holds `want`, up to timeout_ms;
 * counts the datagrams holding "WATCHDOG=1" into *watchdogs. */
static bool notify_wait(int fd, const char *want, int timeout_ms, int *watchdogs)
{
    for (int waited = 0; waited < timeout_ms; waited += 100) {
        struct pollfd pfd = {fd, POLLIN, 0};
        if (poll(&pfd, 1, 100) <= 0)
            continue;
        char buf[512];
        ssize_t n = recv(fd, buf, sizeof buf - 1, 0);
        if (n <= 0)
            continue;
        buf[n] = '\0';
        if (strstr(buf, "WATCHDOG=1") != NULL)
            (*watchdogs)++;
        if (strstr(buf, want) != NULL)
            return true;
    }
    return false;
}

/* Under systemd (NOTIFY_SOCKET, WATCHDOG_USEC): READY=1 once running, the
 * watchdog fed at half its interval while the threads beat, STOPPING=1 on
 * SIGTERM. */
START_TEST(tells_systemd)
{
    world_init("sdnotify");
    world_config("127.0.0.1:0");
    char sock_path[1024], env_socket[1100];
    snprintf(sock_path, sizeof sock_path, "%s/notify.sock", w.dir);
    snprintf(env_socket, sizeof env_socket, "NOTIFY_SOCKET=%s", sock_path);
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    ck_assert_uint_lt(strlen(sock_path), sizeof sa.sun_path);
    strcpy(sa.sun_path, sock_path);
    ck_assert_int_eq(bind(fd, (struct sockaddr *) &sa, sizeof sa), 0);

    const char *argv[] = {NULL, "run", "--config", w.config, NULL};
    const char *env[] = {env_socket, "WATCHDOG_USEC=1000000", NULL};
    w.pids[0] = tl_steward_spawn(argv, env, w.log);
    int watchdogs = 0;
    ck_assert_msg(notify_wait(fd, "READY=1", 60000, &watchdogs), "no READY=1");
    /* 1 s watchdog: fed every 500 ms. */
    int before = watchdogs;
    for (int i = 0; i < 40 && watchdogs - before < 3; i++)
        notify_wait(fd, "WATCHDOG=1", 100, &watchdogs);
    ck_assert_msg(watchdogs - before >= 3, "watchdog fed %d times", watchdogs - before);
    kill(w.pids[0], SIGTERM);
    ck_assert_msg(notify_wait(fd, "STOPPING=1", 30000, &watchdogs), "no STOPPING=1");
    tw_stop(&w, 30);
    close(fd);
}
END_TEST

static void teardown(void)
{
    tw_teardown(&w);
}

/* Writes the table's path with its captures filled: {id} 7, {process}
 * order, {key} K/1 (sent as K%2F1). */
static void fill_path(const char *pattern, char *buf, size_t size)
{
    size_t o = 0;
    for (const char *p = pattern; *p != '\0' && o + 8 < size;) {
        const char *with = strncmp(p, "{id}", 4) == 0        ? "7"
                           : strncmp(p, "{process}", 9) == 0 ? "order"
                           : strncmp(p, "{key}", 5) == 0     ? "K%2F1"
                                                             : NULL;
        if (with == NULL) {
            buf[o++] = *p++;
            continue;
        }
        o += (size_t) snprintf(buf + o, size - o, "%s", with);
        p = strchr(p, '}') + 1;
    }
    buf[o] = '\0';
}

/* The router reads the verb table: each row's path and method reach its
 * endpoint, verb and captures; a method no row at that path has is a 405
 * naming what the path answers; GET /v1/verbs is the table. */
START_TEST(routes_every_verb_of_the_table)
{
    http_route_t rt;
    for (size_t i = 0; i < action_verb_count; i++) {
        const action_verb_def_t *v = &action_verbs[i];
        char path[256];
        fill_path(v->path, path, sizeof path);
        http_route(v->method, path, &rt);
        ck_assert_msg(rt.status == 0, "%s %s: %u %s", v->method, path, rt.status, rt.error);
        ck_assert_int_eq(rt.action, strcmp(v->method, "POST") == 0);
        if (v->on == ACTION_ON_ALERT || v->on == ACTION_ON_INSTANCE) {
            ck_assert_int_eq(rt.endpoint, v->on == ACTION_ON_ALERT ? HTTP_EP_ALERT_ACTION
                                                                   : HTTP_EP_INSTANCE_ACTION);
            ck_assert_str_eq(action_verb_name(rt.verb), v->name);
        }
        if (v->on == ACTION_ON_PROCESS) {
            ck_assert_int_eq(rt.endpoint, HTTP_EP_PROCESS_ACTION);
            ck_assert_str_eq(action_verb_name(rt.verb), v->name);
            ck_assert_str_eq(rt.process, "order");
            ck_assert_ptr_null(rt.key);
        }
        if (strstr(v->path, "{id}") != NULL)
            ck_assert_str_eq(rt.id, "7");
        if (strstr(v->path, "{key}") != NULL) {
            ck_assert_str_eq(rt.process, "order");
            ck_assert_str_eq(rt.key, "K/1");
        }
        bool reads = false;
        for (size_t j = 0; j < action_verb_count; j++)
            reads = reads || (strcmp(action_verbs[j].path, v->path) == 0 &&
                              strcmp(action_verbs[j].method, "GET") == 0);
        http_route("DELETE", path, &rt);
        ck_assert_int_eq(rt.status, 405);
        ck_assert_int_eq(rt.allow_post, !reads);
        ck_assert_msg(
            tl_contains(rt.error, reads ? "answers GET and HEAD only" : "answers POST only"), "%s",
            rt.error);
    }
    http_route("POST", "/v1/instances/order/K1/frobnicate", &rt);
    ck_assert_int_eq(rt.status, 404);
    http_route("POST", "/v1/alerts/7/close", &rt);
    ck_assert_int_eq(rt.status, 404);
    http_route("GET", "/v1/verbs", &rt);
    ck_assert_int_eq(rt.status, 0);
    ck_assert_int_eq(rt.endpoint, HTTP_EP_VERBS);
    ck_assert(!rt.action);
}
END_TEST

Suite *http_suite(void)
{
    Suite *s = suite_create("http");
    TCase *tc = tcase_create("http");
    tcase_set_timeout(tc, 400);
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_add_test(tc, serves_probes_metrics_and_views);
    tcase_add_test(tc, guards_against_other_sites_and_greedy_clients);
    tcase_add_test(tc, silences_only_what_exists);
    tcase_add_test(tc, bad_listen_addresses_stop_the_start);
    tcase_add_test(tc, tells_systemd);
    tcase_add_test(tc, routes_every_verb_of_the_table);
    suite_add_tcase(s, tc);
    return s;
}
