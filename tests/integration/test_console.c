/*
 * test_console - the web console and the JSON API behind it, end to end,
 * on the real broker and PostgreSQL. Steward runs the alerting definition
 * with three orders: o-1 completed, o-2 paid (awaiting dispatch, its
 * deadline an hour away) and o-3 never paid, so overdue with an alert open.
 *
 *   api       /v1/processes, /v1/processes/{p}/graph, /v1/instances with
 *             filters and paging, /v1/report (steward report --json's
 *             document, compared with the command's own output); bad
 *             arguments 400 with a JSON error; / and /console/{file} serve
 *             the compiled-in console
 *             with the security headers (Content-Security-Policy and the
 *             rest) on each
 *   browser   (test_console_browser.c) the pages in headless Chromium,
 *             and the actions taken through them
 *   query     (no broker) the API's overdue_ms and ms_to_deadline are
 *             judged against the process's watermark, as `overdue` is
 */
#include "common/rfc3339.h"
#include "common/sha256.h"
#include "manager/operator/query.h"
#include "test_console.h"
#include "testlib.h"
#include "world.h"

#include <check.h>
#include <curl/curl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <unistd.h>

tw_world_t tc_world;

void tc_wait_sql(const char *sql, const char *expected, int timeout_s, const char *what)
{
    tw_wait(&tc_world, sql, NULL, expected, timeout_s, what);
}

void tc_send_event(tl_producer_t *p, const char *name, const char *type, const char *key)
{
    char value[256], *t = tw_topic(&tc_world, name);
    snprintf(value, sizeof value, "{\"type\":\"%s\",\"id\":\"%s-%s\",\"order_id\":\"%s\"}", type,
             type, key, key);
    tl_produce(p, t, -1, value, -1, NULL, 0);
    free(t);
}

/* Starts steward on a fresh database and brings the three orders where
 * the header says: payment due 3 s after the order (o-1 and o-2 pay at
 * once, o-3 never); dispatch due in an hour. */
void tc_world_start(void)
{
    tw_init(&tc_world, "console");
    free(tw_write_template(&tc_world, "tests/data/definitions/alert_order.json.in",
                           "alert_order.json", TW_LIST("@D1@", "3s", "@D2@", "1h")));
    tw_migrate(&tc_world);
    tw_create_topics(&tc_world, TW_LIST("orders", "payments", "shipping"), 1);

    json_t *cfg = tw_config(&tc_world, "alert_order.json");
    char hex[SHA256_HEX_SIZE], line[256];
    sha256_hex(OPS_SECRET, strlen(OPS_SECRET), hex);
    snprintf(line, sizeof line, "alice operate %s\n", hex);
    char *tokens = tl_write_file(tc_world.dir, "tokens", line);
    json_t *parts = json_pack("{s:{s:s, s:s, s:s}, s:{s:s}, s:{s:s, s:s}, s:{s:[{s:s}]}, s:{s:s}}",
                              "scheduler", "interval", "200ms", "grace", "200ms", "blind_after",
                              "10m", "notifier", "interval", "100ms", "http", "listen",
                              "127.0.0.1:0", "tokens_file", tokens, "routes", "default", "type",
                              "log", "kafka", "topic.metadata.refresh.interval.ms", "1000");
    free(tokens);
    ck_assert_int_eq(json_object_update(cfg, parts), 0);
    json_decref(parts);
    tw_config_write(&tc_world, cfg);
    tw_start(&tc_world, NULL, true);

    tl_producer_t *p = tl_producer_new();
    tc_send_event(p, "orders", "OrderPlaced", "o-1");
    tc_send_event(p, "orders", "OrderPlaced", "o-2");
    tc_send_event(p, "orders", "OrderPlaced", "o-3");
    tc_wait_sql("SELECT count(*) FROM steward.instances", "3", 60, "orders started");
    tc_send_event(p, "payments", "PaymentCaptured", "o-1");
    tc_send_event(p, "payments", "PaymentCaptured", "o-2");
    tc_wait_sql("SELECT count(*) FROM steward.instances WHERE state = 'awaiting_dispatch'", "2", 60,
                "orders paid");
    tc_send_event(p, "shipping", "ShipmentDispatched", "o-1");
    tl_producer_free(p);
    tc_wait_sql("SELECT status FROM steward.instances WHERE key = 'o-1'", "success", 60,
                "o-1 completed");
    tc_wait_sql("SELECT overdue::text FROM steward.instances WHERE key = 'o-3'", "true", 60,
                "o-3 overdue");
    tc_wait_sql("SELECT count(*) FROM steward.alerts WHERE key = 'o-3' AND resolved_at IS NULL",
                "1", 60, "o-3's alert");
}

static void teardown(void)
{
    tw_teardown(&tc_world);
}

/* GETs path, asserting the status; the body parsed as JSON. */
json_t *tc_get_json(const char *path, long expected)
{
    char url[4096];
    long status = 0;
    snprintf(url, sizeof url, "%s%s", tc_world.base, path);
    char *body = tl_http_get(url, &status);
    ck_assert_msg(status == expected, "GET %s: %ld %s (expected %ld)", path, status,
                  body != NULL ? body : "", expected);
    json_error_t jerr;
    json_t *doc = json_loads(body != NULL ? body : "", 0, &jerr);
    ck_assert_msg(doc != NULL, "GET %s: not JSON (%s): %s", path, jerr.text, body);
    free(body);
    return doc;
}

/* A 400 with a JSON error naming `word`. */
static void bad_request(const char *path, const char *word)
{
    json_t *doc = tc_get_json(path, 400);
    const char *error = json_string_value(json_object_get(doc, "error"));
    ck_assert_msg(error != NULL && strstr(error, word) != NULL, "GET %s: error %s", path, error);
    json_decref(doc);
}

long long tc_num(json_t *doc, const char *field)
{
    json_t *v = json_object_get(doc, field);
    ck_assert_msg(json_is_integer(v), "%s is not an integer", field);
    return json_integer_value(v);
}

/* The keys of an /v1/instances page, joined by ','. */
static char *keys_of(json_t *page)
{
    static char buf[1024];
    size_t i, len = 0;
    json_t *item;
    buf[0] = '\0';
    json_array_foreach(json_object_get(page, "instances"), i, item) len +=
        (size_t) snprintf(buf + len, sizeof buf - len, "%s%s", i ? "," : "",
                          json_string_value(json_object_get(item, "key")));
    return buf;
}

static size_t keep_headers(char *data, size_t size, size_t nmemb, void *arg)
{
    char **text = arg;
    size_t old = strlen(*text), n = size * nmemb;
    *text = realloc(*text, old + n + 1);
    ck_assert_ptr_nonnull(*text);
    memcpy(*text + old, data, n);
    (*text)[old + n] = '\0';
    return n;
}

static size_t drop_body(char *data, size_t size, size_t nmemb, void *arg)
{
    (void) data;
    (void) arg;
    return size * nmemb;
}

/* Asserts that GET path answers with every security header. */
static void assert_security_headers(const char *path)
{
    static const char *const wanted[] = {
        "Content-Security-Policy: default-src 'self'; frame-ancestors 'none'",
        "X-Frame-Options: DENY",
        "X-Content-Type-Options: nosniff",
        "Referrer-Policy: no-referrer",
    };
    char url[4096], *headers = calloc(1, 1);
    snprintf(url, sizeof url, "%s%s", tc_world.base, path);
    CURL *curl = curl_easy_init();
    curl_easy_setopt(curl, CURLOPT_URL, url);
    curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, keep_headers);
    curl_easy_setopt(curl, CURLOPT_HEADERDATA, &headers);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, drop_body);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT, 10L);
    CURLcode rc = curl_easy_perform(curl);
    curl_easy_cleanup(curl);
    ck_assert_msg(rc == CURLE_OK, "GET %s: %s", path, curl_easy_strerror(rc));
    for (size_t i = 0; i < sizeof wanted / sizeof wanted[0]; i++)
        ck_assert_msg(tl_contains(headers, wanted[i]), "GET %s: no \"%s\" in:\n%s", path, wanted[i],
                      headers);
    free(headers);
}

/* Every time in `doc` (a string that starts like a date) is in the one
 * form: RFC 3339, UTC, milliseconds, "Z". */
static void assert_times(const json_t *doc, const char *where)
{
    if (json_is_string(doc)) {
        const char *t = json_string_value(doc);
        bool dated = strlen(t) >= 11 && t[4] == '-' && t[7] == '-' && t[10] == 'T';
        if (!dated)
            return;
        int64_t ms;
        char again[RFC3339_BUF];
        ck_assert_msg(strlen(t) == 24 && t[23] == 'Z' && t[19] == '.' && rfc3339_parse(t, &ms) &&
                          strcmp(rfc3339_format(ms, again, sizeof again), t) == 0,
                      "%s: a time not in the one form: %s", where, t);
        return;
    }
    const char *k;
    json_t *v;
    size_t i;
    if (json_is_object(doc))
        json_object_foreach((json_t *) doc, k, v) assert_times(v, where);
    else if (json_is_array(doc))
        json_array_foreach((json_t *) doc, i, v) assert_times(v, where);
}

START_TEST(api_lists_graphs_and_reports)
{
    tc_world_start();

    json_t *doc = tc_get_json("/v1/processes", 200);
    json_t *p = tl_json_find(json_object_get(doc, "processes"), "process", "alert_order");
    ck_assert_int_eq(tc_num(p, "open"), 2);
    ck_assert_int_eq(tc_num(p, "overdue"), 1);
    json_decref(doc);

    doc = tc_get_json("/v1/processes/alert_order/graph", 200);
    ck_assert_str_eq(json_string_value(json_object_get(doc, "start")), "awaiting_payment");
    json_t *states = json_object_get(doc, "states");
    ck_assert_int_eq(json_array_size(states), 3);
    json_t *s = tl_json_find(states, "name", "awaiting_payment");
    ck_assert_int_eq(tc_num(s, "open"), 1);
    ck_assert_int_eq(tc_num(s, "overdue"), 1);
    ck_assert_str_eq(json_string_value(json_object_get(s, "owner")), "payments");
    ck_assert(json_is_null(json_object_get(s, "terminal")));
    s = tl_json_find(states, "name", "awaiting_dispatch");
    ck_assert_int_eq(tc_num(s, "open"), 1);
    ck_assert_int_eq(tc_num(s, "overdue"), 0);
    s = tl_json_find(states, "name", "completed");
    ck_assert_str_eq(json_string_value(json_object_get(s, "terminal")), "success");
    ck_assert_int_eq(tc_num(s, "open"), 0);
    json_t *t = tl_json_find(json_object_get(doc, "transitions"), "event", "PaymentCaptured");
    ck_assert_str_eq(json_string_value(json_object_get(t, "from")), "awaiting_payment");
    ck_assert_str_eq(json_string_value(json_object_get(t, "to")), "awaiting_dispatch");
    ck_assert_int_eq(json_array_size(json_object_get(doc, "transitions")), 2);
    json_decref(doc);
    json_decref(tc_get_json("/v1/processes/no_such/graph", 404));

    /* Paging: two, then the rest; the cursor is the last one shown. */
    doc = tc_get_json("/v1/instances?process=alert_order&limit=2", 200);
    ck_assert_str_eq(keys_of(doc), "o-1,o-2");
    json_t *next = json_object_get(doc, "next");
    ck_assert_str_eq(json_string_value(json_object_get(next, "key")), "o-2");
    json_decref(doc);
    doc = tc_get_json("/v1/instances?process=alert_order&limit=2&after=alert_order%2Fo-2", 200);
    ck_assert_str_eq(keys_of(doc), "o-3");
    ck_assert(json_is_null(json_object_get(doc, "next")));
    json_decref(doc);

    doc = tc_get_json("/v1/instances?overdue=true", 200);
    ck_assert_str_eq(keys_of(doc), "o-3");
    json_t *i = json_array_get(json_object_get(doc, "instances"), 0);
    ck_assert_int_gt(tc_num(i, "overdue_ms"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(i, "owner")), "payments");
    json_decref(doc);
    doc = tc_get_json("/v1/instances?state=awaiting_dispatch", 200);
    ck_assert_str_eq(keys_of(doc), "o-2");
    json_decref(doc);
    doc = tc_get_json("/v1/instances?key=o-", 200);
    ck_assert_str_eq(keys_of(doc), "o-1,o-2,o-3");
    json_decref(doc);
    doc = tc_get_json("/v1/instances?key=o-1&active=true", 200);
    ck_assert_str_eq(keys_of(doc), "");
    json_decref(doc);

    bad_request("/v1/instances?limit=0", "limit");
    bad_request("/v1/instances?limit=ten", "limit");
    bad_request("/v1/instances?overdue=maybe", "overdue");
    bad_request("/v1/instances?after=o-2", "after");
    bad_request("/v1/report?since=soon", "since");
    bad_request("/v1/instances?state=%ZZ", "state");

    /* o-1 and o-2 left awaiting_payment at once; o-1 left dispatch. The
     * document is steward report's (docs/report.md). */
    doc = tc_get_json("/v1/report?process=alert_order&since=1d", 200);
    json_t *window = json_object_get(doc, "window");
    ck_assert_int_eq(tc_num(window, "since_ms"), 86400000);
    ck_assert_str_eq(json_string_value(json_object_get(window, "since")), "1d");
    ck_assert_str_eq(json_string_value(json_object_get(doc, "definitions")), "steward.definitions");
    ck_assert_int_eq(json_array_size(json_object_get(doc, "processes")), 1);
    p = tl_json_find(json_object_get(doc, "processes"), "process", "alert_order");
    s = tl_json_find(json_object_get(p, "states"), "state", "awaiting_payment");
    ck_assert_int_eq(tc_num(s, "left"), 2);
    ck_assert_int_eq(tc_num(s, "open"), 1);
    ck_assert_int_eq(tc_num(s, "overdue"), 1);
    json_t *deadline = json_object_get(s, "deadline");
    ck_assert_int_eq(tc_num(deadline, "ms"), 3000);
    ck_assert_int_eq(tc_num(deadline, "missed"), 1); /* o-3, open past it */
    json_t *suggestion = json_object_get(s, "suggestion");
    ck_assert(json_is_false(json_object_get(suggestion, "enough_samples"))); /* two: too few */
    ck_assert_int_eq(tc_num(suggestion, "needed"), 20);
    ck_assert(json_is_null(json_object_get(suggestion, "deadline_ms")));
    json_t *hist = json_object_get(s, "histogram");
    long long sum = 0;
    size_t k;
    json_t *b;
    json_array_foreach(hist, k, b) sum += tc_num(b, "count");
    ck_assert_int_eq(sum, 2);
    ck_assert(
        json_is_null(json_object_get(json_array_get(hist, json_array_size(hist) - 1), "le_ms")));
    s = tl_json_find(json_object_get(p, "states"), "state", "awaiting_dispatch");
    ck_assert_int_eq(tc_num(s, "left"), 1);
    s = tl_json_find(json_object_get(p, "states"), "state", "completed");
    ck_assert(json_is_null(json_object_get(s, "histogram")));

    /* ... the very document steward report --json prints for the same
     * process and window, but for the times it was made at. */
    const char *rargv[] = {NULL,          "report",  "--database", tc_world.db_url, "--process",
                           "alert_order", "--since", "1d",         "--json",        NULL};
    const char *renv[] = {"STEWARD_DEFINITIONS=", NULL};
    tl_output_t ro = tl_steward(rargv, renv);
    ck_assert_msg(ro.status == 0, "steward report: %s", ro.err);
    json_t *cli = json_loads(ro.out, 0, NULL);
    ck_assert_msg(cli != NULL, "steward report --json: not JSON: %s", ro.out);
    tl_output_free(&ro);
    json_t *both[2] = {doc, cli};
    for (int n = 0; n < 2; n++) {
        json_object_del(both[n], "generated_at");
        json_object_del(json_object_get(both[n], "window"), "from");
        json_object_del(json_object_get(both[n], "window"), "to");
    }
    char *api_text = json_dumps(doc, JSON_SORT_KEYS), *cli_text = json_dumps(cli, JSON_SORT_KEYS);
    ck_assert_msg(json_equal(doc, cli), "/v1/report:\n%s\nsteward report --json:\n%s", api_text,
                  cli_text);
    free(api_text);
    free(cli_text);
    json_decref(cli);
    json_decref(doc);
    json_decref(tc_get_json("/v1/report?process=no_such", 404));

    /* The instance view carries the alerts raised on it. */
    doc = tc_get_json("/v1/instances/alert_order/o-3", 200);
    ck_assert_int_eq(json_array_size(json_object_get(doc, "alerts")), 1);
    json_decref(doc);

    /* One form for every time the API writes. */
    const char *timed[] = {
        "/v1/instances/alert_order/o-1",           "/v1/instances/alert_order/o-3",
        "/v1/instances?process=alert_order",       "/v1/stuck",
        "/v1/report?process=alert_order&since=1d", "/readyz"};
    for (size_t n = 0; n < sizeof timed / sizeof timed[0]; n++) {
        doc = tc_get_json(timed[n], 200);
        assert_times(doc, timed[n]);
        json_decref(doc);
    }
    /* The stuck view says how long the instance has been in its state. */
    doc = tc_get_json("/v1/stuck", 200);
    json_t *alert = json_array_get(
        json_object_get(json_array_get(json_object_get(doc, "groups"), 0), "alerts"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(alert, "instance_state")),
                     "awaiting_payment");
    ck_assert_int_ge(tc_num(alert, "ms_in_state"), 3000);
    json_decref(doc);

    /* The console's files. */
    long status = 0;
    char url[256];
    snprintf(url, sizeof url, "%s/", tc_world.base);
    char *body = tl_http_get(url, &status);
    ck_assert_int_eq(status, 200);
    ck_assert_msg(tl_contains(body, "/console/console.js"), "index: %s", body);
    free(body);
    snprintf(url, sizeof url, "%s/console/console.js", tc_world.base);
    body = tl_http_get(url, &status);
    ck_assert_int_eq(status, 200);
    ck_assert(tl_contains(body, "function duration"));
    free(body);
    snprintf(url, sizeof url, "%s/console/graph.js", tc_world.base);
    body = tl_http_get(url, &status);
    ck_assert_int_eq(status, 200);
    ck_assert(tl_contains(body, "function drawGraph"));
    free(body);
    json_decref(tc_get_json("/console/nothing.js", 404));

    /* Console and API alike: no framing, no other origin, no sniffing. */
    const char *paths[] = {"/",
                           "/console/console.js",
                           "/console/console.css",
                           "/v1/processes",
                           "/v1/report?process=alert_order",
                           "/console/nothing.js"};
    for (size_t n = 0; n < sizeof paths / sizeof paths[0]; n++)
        assert_security_headers(paths[n]);
}
END_TEST

START_TEST(overdue_figures_follow_the_watermark)
{
    /* The deadline passed 2m ago on the clock, but the process's watermark
     * lags 5m behind: the scheduler has not judged it missed, and the
     * figures say so too. A second instance is judged overdue. */
    const char *url = tl_db_create("console_query");
    tl_migrate(url);
    PGconn *conn = tl_db_connect(url);
    tl_db_exec(conn, "CREATE TEMP TABLE t0 AS SELECT date_trunc('milliseconds', now()) AS t");
    tl_db_exec(conn, "INSERT INTO steward.definitions (process, version, mode, document, checksum) "
                     "VALUES ('lagging', 1, 'shadow', '{\"owner\": \"ops\"}', 'x')");
    tl_db_exec(conn,
               "INSERT INTO steward.instances (process, key, version, state, status, started_at, "
               "  state_entered_at, deadline_at, overdue) "
               "SELECT 'lagging', v.key, 1, 'waiting', 'active', t - interval '1 h', "
               "  t - interval '1 h', t + v.due, v.overdue "
               "FROM t0, (VALUES ('k-1', interval '-2 min', false), "
               "  ('k-2', interval '-8 min', true)) AS v(key, due, overdue)");
    tl_db_exec(conn, "INSERT INTO steward.watched_topics VALUES ('g', 'lagging', 'orders')");
    tl_db_exec(conn, "INSERT INTO steward.offsets (consumer_group, topic, partition, next_offset, "
                     "  watermark) SELECT 'g', 'orders', 0, 10, t - interval '5 min' FROM t0");

    query_filter_t f = {.process = "lagging", .limit = 10};
    json_t *doc = NULL;
    char errstr[512];
    ck_assert_msg(query_instances(conn, &f, &doc, errstr, sizeof errstr) == ERR_OK, "%s", errstr);
    json_t *list = json_object_get(doc, "instances");
    ck_assert_uint_eq(json_array_size(list), 2);
    json_t *k1 = json_array_get(list, 0), *k2 = json_array_get(list, 1);
    ck_assert(json_is_false(json_object_get(k1, "overdue")));
    ck_assert_int_eq(tc_num(k1, "overdue_ms"), 0);
    ck_assert(json_is_true(json_object_get(k2, "overdue")));
    ck_assert_int_eq(tc_num(k2, "overdue_ms"), 3 * 60000);
    ck_assert(json_is_string(json_object_get(k1, "watermark_at")));
    ck_assert(json_object_get(k1, ".deadline_ms") == NULL);
    json_decref(doc);

    query_absent_t absent;
    ck_assert_msg(query_instance(conn, "lagging", "k-1", &doc, &absent, errstr, sizeof errstr) ==
                      ERR_OK,
                  "%s", errstr);
    ck_assert_int_eq(tc_num(doc, "ms_to_deadline"), 3 * 60000);
    json_decref(doc);

    /* A topic never read: the watermark is unknown, and so are the figures. */
    tl_db_exec(conn, "UPDATE steward.offsets SET watermark = NULL");
    ck_assert(query_instances(conn, &f, &doc, errstr, sizeof errstr) == ERR_OK);
    k2 = json_array_get(json_object_get(doc, "instances"), 1);
    ck_assert(json_is_null(json_object_get(k2, "overdue_ms")));
    json_decref(doc);
    PQfinish(conn);
}
END_TEST

/* A definition with an `any` transition, recorded in two versions whose
 * deadlines differ, as the loader reads it. */
static const char any_v1[] =
    "{\"process\": \"tiny\", \"version\": 1, \"mode\": \"shadow\", \"owner\": \"ops\", "
    "\"key\": \"/id\", \"events\": {\"Start\": {\"topic\": \"t\"}, \"Go\": {\"topic\": \"t\"}, "
    "\"Cancel\": {\"topic\": \"t\"}}, \"start\": {\"on\": \"Start\", \"to\": \"wait\"}, "
    "\"any\": {\"Cancel\": \"cancelled\"}, \"states\": {"
    "\"wait\": {\"deadline\": \"5m\", \"on\": {\"Go\": \"done\"}}, "
    "\"old_step\": {\"deadline\": \"1m\", \"on\": {\"Go\": \"done\"}}, "
    "\"done\": {\"terminal\": \"success\"}, \"cancelled\": {\"terminal\": \"cancelled\"}}}";

START_TEST(graph_is_the_recorded_definition_laid_out)
{
    const char *url = tl_db_create("console_graph");
    tl_migrate(url);
    PGconn *conn = tl_db_connect(url);
    json_t *v2 = json_loads(any_v1, 0, NULL);
    ck_assert_ptr_nonnull(v2);
    json_object_set_new(v2, "version", json_integer(2));
    json_t *states = json_object_get(v2, "states");
    json_object_del(states, "old_step");
    json_object_set_new(json_object_get(states, "wait"), "deadline", json_string("10m"));
    char *v2_text = json_dumps(v2, 0);
    json_decref(v2);
    const char *params[2] = {any_v1, v2_text};
    PGresult *res = PQexecParams(
        conn,
        "INSERT INTO steward.definitions (process, version, mode, document, checksum) "
        "VALUES ('tiny', 1, 'shadow', $1::jsonb, 'a'), ('tiny', 2, 'shadow', $2::jsonb, 'b')",
        2, NULL, params, NULL, NULL, 0);
    ck_assert_msg(PQresultStatus(res) == PGRES_COMMAND_OK, "%s", PQerrorMessage(conn));
    PQclear(res);
    free(v2_text);
    tl_db_exec(conn, "INSERT INTO steward.instances (process, key, version, state, status, "
                     "  started_at, state_entered_at, overdue) "
                     "SELECT 'tiny', v.key, v.version, v.state, 'active', now(), now(), v.late "
                     "FROM (VALUES ('a', 2, 'wait', false), ('b', 1, 'wait', true), "
                     "  ('c', 1, 'old_step', true)) AS v(key, version, state, late)");

    json_t *doc = NULL;
    char errstr[512];
    ck_assert_msg(query_graph(conn, "tiny", &doc, errstr, sizeof errstr) == ERR_OK, "%s", errstr);
    char *text = json_dumps(doc, JSON_SORT_KEYS);
    ck_assert_int_eq(tc_num(doc, "version"), 2);
    ck_assert_str_eq(json_string_value(json_object_get(doc, "start_event")), "Start");
    /* definitions/graph's layout: wait in column 0, the terminals in 1,
     * the "any state" node under wait. */
    json_t *wait = tl_json_find(json_object_get(doc, "states"), "name", "wait");
    ck_assert_int_eq(tc_num(wait, "column"), 0);
    ck_assert_int_eq(tc_num(wait, "row"), 0);
    ck_assert_int_eq(
        tc_num(tl_json_find(json_object_get(doc, "states"), "name", "cancelled"), "column"), 1);
    json_t *any = json_object_get(doc, "any");
    ck_assert_msg(json_is_object(any) && tc_num(any, "column") == 0 && tc_num(any, "row") == 1,
                  "%s", text);
    json_t *t = tl_json_find(json_object_get(doc, "transitions"), "kind", "any");
    ck_assert_msg(t != NULL && json_is_null(json_object_get(t, "from")) &&
                      strcmp(json_string_value(json_object_get(t, "event")), "Cancel") == 0 &&
                      strcmp(json_string_value(json_object_get(t, "to")), "cancelled") == 0,
                  "%s", text);
    /* Counts by version, each beside its own version's deadline. */
    ck_assert_int_eq(tc_num(wait, "open"), 2);
    ck_assert_int_eq(tc_num(wait, "overdue"), 1);
    ck_assert_str_eq(json_string_value(json_object_get(wait, "deadline")), "10m");
    json_t *versions = json_object_get(wait, "versions");
    ck_assert_msg(json_array_size(versions) == 2, "%s", text);
    json_t *first = json_array_get(versions, 0), *second = json_array_get(versions, 1);
    ck_assert_int_eq(tc_num(first, "version"), 2);
    ck_assert_str_eq(json_string_value(json_object_get(first, "deadline")), "10m");
    ck_assert_int_eq(tc_num(second, "version"), 1);
    ck_assert_int_eq(tc_num(second, "overdue"), 1);
    ck_assert_str_eq(json_string_value(json_object_get(second, "deadline")), "5m");
    /* old_step is gone from version 2: its instance is counted apart. */
    json_t *elsewhere = json_object_get(doc, "elsewhere");
    ck_assert_msg(
        json_array_size(elsewhere) == 1 &&
            strcmp(json_string_value(json_object_get(json_array_get(elsewhere, 0), "state")),
                   "old_step") == 0,
        "%s", text);
    free(text);
    json_decref(doc);
    PQfinish(conn);
}
END_TEST

Suite *console_suite(void)
{
    Suite *s = suite_create("console");
    TCase *tc = tcase_create("console");
    tcase_set_timeout(tc, 300);
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_add_test(tc, api_lists_graphs_and_reports);
    tc_add_browser_tests(tc);
    suite_add_tcase(s, tc);
    TCase *query = tcase_create("query");
    tcase_add_test(query, overdue_figures_follow_the_watermark);
    tcase_add_test(query, graph_is_the_recorded_definition_laid_out);
    suite_add_tcase(s, query);
    return s;
}
