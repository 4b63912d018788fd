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
 *   browser   headless Chromium loads each page (processes, stuck,
 *             instance, report); the test asserts on the DOM the pages'
 *             scripts built and that the Content-Security-Policy blocked
 *             nothing, and saves a screenshot of each as an artefact
 *             with the DOM (STEWARD_TEST_ARTIFACTS, else ./artifacts)
 *   query     (no broker) the API's overdue_ms and ms_to_deadline are
 *             judged against the process's watermark, as `overdue` is
 */
#include "manager/operator/query.h"
#include "testlib.h"
#include "world.h"

#include <check.h>
#include <curl/curl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static tw_world_t w;

static void wait_sql(const char *sql, const char *expected, int timeout_s, const char *what)
{
    tw_wait(&w, sql, NULL, expected, timeout_s, what);
}

static void send_event(tl_producer_t *p, const char *name, const char *type, const char *key)
{
    char value[256], *t = tw_topic(&w, name);
    snprintf(value, sizeof value, "{\"type\":\"%s\",\"id\":\"%s-%s\",\"order_id\":\"%s\"}", type,
             type, key, key);
    tl_produce(p, t, -1, value, -1, NULL, 0);
    free(t);
}

/* Starts steward on a fresh database and brings the three orders where
 * the header says: payment due 3 s after the order (o-1 and o-2 pay at
 * once, o-3 never); dispatch due in an hour. */
static void world_start(void)
{
    tw_init(&w, "console");
    free(tw_write_template(&w, "tests/data/definitions/alert_order.json.in", "alert_order.json",
                           TW_LIST("@D1@", "3s", "@D2@", "1h")));
    tw_migrate(&w);
    tw_create_topics(&w, TW_LIST("orders", "payments", "shipping"), 1);

    json_t *cfg = tw_config(&w, "alert_order.json");
    json_t *parts =
        json_pack("{s:{s:s, s:s, s:s}, s:{s:s}, s:{s:s}, s:{s:[{s:s}]}, s:{s:s}}", "scheduler",
                  "interval", "200ms", "grace", "200ms", "blind_after", "10m", "notifier",
                  "interval", "100ms", "http", "listen", "127.0.0.1:0", "routes", "default", "type",
                  "log", "kafka", "topic.metadata.refresh.interval.ms", "1000");
    ck_assert_int_eq(json_object_update(cfg, parts), 0);
    json_decref(parts);
    tw_config_write(&w, cfg);
    tw_start(&w, NULL, true);

    tl_producer_t *p = tl_producer_new();
    send_event(p, "orders", "OrderPlaced", "o-1");
    send_event(p, "orders", "OrderPlaced", "o-2");
    send_event(p, "orders", "OrderPlaced", "o-3");
    wait_sql("SELECT count(*) FROM steward.instances", "3", 60, "orders started");
    send_event(p, "payments", "PaymentCaptured", "o-1");
    send_event(p, "payments", "PaymentCaptured", "o-2");
    wait_sql("SELECT count(*) FROM steward.instances WHERE state = 'awaiting_dispatch'", "2", 60,
             "orders paid");
    send_event(p, "shipping", "ShipmentDispatched", "o-1");
    tl_producer_free(p);
    wait_sql("SELECT status FROM steward.instances WHERE key = 'o-1'", "success", 60,
             "o-1 completed");
    wait_sql("SELECT overdue::text FROM steward.instances WHERE key = 'o-3'", "true", 60,
             "o-3 overdue");
    wait_sql("SELECT count(*) FROM steward.alerts WHERE key = 'o-3' AND resolved_at IS NULL", "1",
             60, "o-3's alert");
}

static void teardown(void)
{
    tw_teardown(&w);
}

/* GETs path, asserting the status; the body parsed as JSON. */
static json_t *get_json(const char *path, long expected)
{
    char url[4096];
    long status = 0;
    snprintf(url, sizeof url, "%s%s", w.base, path);
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
    json_t *doc = get_json(path, 400);
    const char *error = json_string_value(json_object_get(doc, "error"));
    ck_assert_msg(error != NULL && strstr(error, word) != NULL, "GET %s: error %s", path, error);
    json_decref(doc);
}

static long long num(json_t *doc, const char *field)
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
    snprintf(url, sizeof url, "%s%s", w.base, path);
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

START_TEST(api_lists_graphs_and_reports)
{
    world_start();

    json_t *doc = get_json("/v1/processes", 200);
    json_t *p = tl_json_find(json_object_get(doc, "processes"), "process", "alert_order");
    ck_assert_int_eq(num(p, "open"), 2);
    ck_assert_int_eq(num(p, "overdue"), 1);
    json_decref(doc);

    doc = get_json("/v1/processes/alert_order/graph", 200);
    ck_assert_str_eq(json_string_value(json_object_get(doc, "start")), "awaiting_payment");
    json_t *states = json_object_get(doc, "states");
    ck_assert_int_eq(json_array_size(states), 3);
    json_t *s = tl_json_find(states, "name", "awaiting_payment");
    ck_assert_int_eq(num(s, "open"), 1);
    ck_assert_int_eq(num(s, "overdue"), 1);
    ck_assert_str_eq(json_string_value(json_object_get(s, "owner")), "payments");
    ck_assert(json_is_null(json_object_get(s, "terminal")));
    s = tl_json_find(states, "name", "awaiting_dispatch");
    ck_assert_int_eq(num(s, "open"), 1);
    ck_assert_int_eq(num(s, "overdue"), 0);
    s = tl_json_find(states, "name", "completed");
    ck_assert_str_eq(json_string_value(json_object_get(s, "terminal")), "success");
    ck_assert_int_eq(num(s, "open"), 0);
    json_t *t = tl_json_find(json_object_get(doc, "transitions"), "event", "PaymentCaptured");
    ck_assert_str_eq(json_string_value(json_object_get(t, "from")), "awaiting_payment");
    ck_assert_str_eq(json_string_value(json_object_get(t, "to")), "awaiting_dispatch");
    ck_assert_int_eq(json_array_size(json_object_get(doc, "transitions")), 2);
    json_decref(doc);
    json_decref(get_json("/v1/processes/no_such/graph", 404));

    /* Paging: two, then the rest; the cursor is the last one shown. */
    doc = get_json("/v1/instances?process=alert_order&limit=2", 200);
    ck_assert_str_eq(keys_of(doc), "o-1,o-2");
    json_t *next = json_object_get(doc, "next");
    ck_assert_str_eq(json_string_value(json_object_get(next, "key")), "o-2");
    json_decref(doc);
    doc = get_json("/v1/instances?process=alert_order&limit=2&after=alert_order%2Fo-2", 200);
    ck_assert_str_eq(keys_of(doc), "o-3");
    ck_assert(json_is_null(json_object_get(doc, "next")));
    json_decref(doc);

    doc = get_json("/v1/instances?overdue=true", 200);
    ck_assert_str_eq(keys_of(doc), "o-3");
    json_t *i = json_array_get(json_object_get(doc, "instances"), 0);
    ck_assert_int_gt(num(i, "overdue_ms"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(i, "owner")), "payments");
    json_decref(doc);
    doc = get_json("/v1/instances?state=awaiting_dispatch", 200);
    ck_assert_str_eq(keys_of(doc), "o-2");
    json_decref(doc);
    doc = get_json("/v1/instances?key=o-", 200);
    ck_assert_str_eq(keys_of(doc), "o-1,o-2,o-3");
    json_decref(doc);
    doc = get_json("/v1/instances?key=o-1&active=true", 200);
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
    doc = get_json("/v1/report?process=alert_order&since=1d", 200);
    json_t *window = json_object_get(doc, "window");
    ck_assert_int_eq(num(window, "since_ms"), 86400000);
    ck_assert_str_eq(json_string_value(json_object_get(window, "since")), "1d");
    ck_assert_str_eq(json_string_value(json_object_get(doc, "definitions")), "steward.definitions");
    ck_assert_int_eq(json_array_size(json_object_get(doc, "processes")), 1);
    p = tl_json_find(json_object_get(doc, "processes"), "process", "alert_order");
    s = tl_json_find(json_object_get(p, "states"), "state", "awaiting_payment");
    ck_assert_int_eq(num(s, "left"), 2);
    ck_assert_int_eq(num(s, "open"), 1);
    ck_assert_int_eq(num(s, "overdue"), 1);
    json_t *deadline = json_object_get(s, "deadline");
    ck_assert_int_eq(num(deadline, "ms"), 3000);
    ck_assert_int_eq(num(deadline, "missed"), 1); /* o-3, open past it */
    json_t *suggestion = json_object_get(s, "suggestion");
    ck_assert(json_is_false(json_object_get(suggestion, "enough_samples"))); /* two: too few */
    ck_assert_int_eq(num(suggestion, "needed"), 20);
    ck_assert(json_is_null(json_object_get(suggestion, "deadline_ms")));
    json_t *hist = json_object_get(s, "histogram");
    long long sum = 0;
    size_t k;
    json_t *b;
    json_array_foreach(hist, k, b) sum += num(b, "count");
    ck_assert_int_eq(sum, 2);
    ck_assert(
        json_is_null(json_object_get(json_array_get(hist, json_array_size(hist) - 1), "le_ms")));
    s = tl_json_find(json_object_get(p, "states"), "state", "awaiting_dispatch");
    ck_assert_int_eq(num(s, "left"), 1);
    s = tl_json_find(json_object_get(p, "states"), "state", "completed");
    ck_assert(json_is_null(json_object_get(s, "histogram")));

    /* ... the very document steward report --json prints for the same
     * process and window, but for the times it was made at. */
    const char *rargv[] = {NULL,          "report",  "--database", w.db_url, "--process",
                           "alert_order", "--since", "1d",         "--json", NULL};
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
    json_decref(get_json("/v1/report?process=no_such", 404));

    /* The instance view carries the alerts raised on it. */
    doc = get_json("/v1/instances/alert_order/o-3", 200);
    ck_assert_int_eq(json_array_size(json_object_get(doc, "alerts")), 1);
    json_decref(doc);

    /* The console's files. */
    long status = 0;
    char url[256];
    snprintf(url, sizeof url, "%s/", w.base);
    char *body = tl_http_get(url, &status);
    ck_assert_int_eq(status, 200);
    ck_assert_msg(tl_contains(body, "/console/console.js"), "index: %s", body);
    free(body);
    snprintf(url, sizeof url, "%s/console/console.js", w.base);
    body = tl_http_get(url, &status);
    ck_assert_int_eq(status, 200);
    ck_assert(tl_contains(body, "function drawGraph"));
    free(body);
    json_decref(get_json("/console/nothing.js", 404));

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

/* ---- the browser ------------------------------------------------------------ */

/* The DOM of the console's page `fragment` once its scripts ran, as
 * headless Chromium serialized it, with a screenshot saved beside the
 * other artefacts as console-NAME.png. */
static char *browse(const char *fragment, const char *name)
{
    ck_assert_msg(system("command -v chromium >/dev/null 2>&1") == 0,
                  "chromium is not installed: the console suite needs Debian's chromium package "
                  "(scripts/test installs it)");
    const char *dir = getenv("STEWARD_TEST_ARTIFACTS");
    char artifacts[1024], cmd[8192], profile[1024];
    snprintf(artifacts, sizeof artifacts, "%s", dir != NULL && dir[0] ? dir : "artifacts");
    mkdir(artifacts, 0755);
    snprintf(profile, sizeof profile, "%s/chromium-%s", w.dir, name);
    const char *common = "chromium --headless --disable-gpu --no-sandbox --no-first-run "
                         "--disable-dev-shm-usage --hide-scrollbars --virtual-time-budget=5000";

    snprintf(cmd, sizeof cmd,
             "%s --user-data-dir='%s-shot' --window-size=1280,900 --screenshot='%s/console-%s.png' "
             "'%s/#/%s' >/dev/null 2>&1",
             common, profile, artifacts, name, w.base, fragment);
    ck_assert_msg(system(cmd) == 0, "chromium failed: %s", cmd);

    /* Chromium logs to stderr what the page's console shows, a refusal by
     * the Content-Security-Policy among it. */
    char browser_log[1200];
    snprintf(browser_log, sizeof browser_log, "%s/chromium-%s.log", w.dir, name);
    snprintf(cmd, sizeof cmd,
             "%s --user-data-dir='%s' --enable-logging=stderr --v=0 --dump-dom '%s/#/%s' "
             "2>'%s'",
             common, profile, w.base, fragment, browser_log);
    FILE *f = popen(cmd, "r");
    ck_assert_ptr_nonnull(f);
    size_t cap = 1 << 16, len = 0;
    char *dom = malloc(cap);
    for (size_t n; (n = fread(dom + len, 1, cap - len - 1, f)) > 0;) {
        len += n;
        if (len + 1 == cap)
            dom = realloc(dom, cap *= 2);
    }
    dom[len] = '\0';
    ck_assert_msg(pclose(f) == 0, "chromium --dump-dom failed");
    char path[1200];
    snprintf(path, sizeof path, "%s/console-%s.html", artifacts, name);
    FILE *keep = fopen(path, "w");
    if (keep != NULL) {
        fputs(dom, keep);
        fclose(keep);
    }
    ck_assert_msg(tl_contains(dom, "data-state=\"ready\""), "page %s never got ready: %s", fragment,
                  dom);
    char *logged = tl_read_file(browser_log);
    const char *refused = strstr(logged, "Content Security Policy");
    while (refused != NULL && refused > logged && refused[-1] != '\n')
        refused--;
    ck_assert_msg(refused == NULL, "page %s broke the Content-Security-Policy: %.600s", fragment,
                  refused);
    free(logged);
    return dom;
}

/* The start tag holding `attr` (e.g. data-state="x"), up to its '>';
 * "" when there is none. */
static char *tag_with(const char *dom, const char *tag, const char *attr)
{
    static char buf[2048];
    buf[0] = '\0';
    for (const char *p = strstr(dom, attr); p != NULL; p = strstr(p + 1, attr)) {
        const char *start = p;
        while (start > dom && *start != '<')
            start--;
        const char *end = strchr(p, '>');
        if (end == NULL || strncmp(start + 1, tag, strlen(tag)) != 0)
            continue;
        snprintf(buf, sizeof buf, "%.*s", (int) (end - start + 1), start);
        return buf;
    }
    return buf;
}

static void assert_tag(const char *dom, const char *tag, const char *attr, const char *has)
{
    const char *t = tag_with(dom, tag, attr);
    ck_assert_msg(tl_contains(t, has), "<%s %s>: expected %s in \"%s\"", tag, attr, has, t);
}

START_TEST(browser_shows_each_page)
{
    world_start();

    /* processes: the graph, counts on each state, the terminal marked. */
    char *dom = browse("processes", "processes");
    assert_tag(dom, "svg", "data-process=\"alert_order\"", "class=\"graph\"");
    assert_tag(dom, "g", "data-state=\"awaiting_payment\"", "data-open=\"1\"");
    assert_tag(dom, "g", "data-state=\"awaiting_payment\"", "data-overdue=\"1\"");
    assert_tag(dom, "g", "data-state=\"awaiting_payment\"", "node late");
    assert_tag(dom, "g", "data-state=\"awaiting_dispatch\"", "data-overdue=\"0\"");
    assert_tag(dom, "g", "data-state=\"awaiting_dispatch\"", "node busy");
    assert_tag(dom, "g", "data-state=\"completed\"", "data-terminal=\"true\"");
    ck_assert(tl_contains(dom, "1 open · 1 overdue"));
    ck_assert(tl_contains(dom, "terminal: success"));
    ck_assert(tl_contains(dom, "data-from=\"awaiting_payment\" data-to=\"awaiting_dispatch\""));
    free(dom);

    /* stuck: o-3 overdue with its alert; nobody else; no actions without
     * a token. */
    dom = browse("stuck", "stuck");
    assert_tag(dom, "tr", "class=\"overdue-row\"", "data-key=\"o-3\"");
    ck_assert(!tl_contains(dom, "data-key=\"o-2\""));
    assert_tag(dom, "tr", "class=\"alert-row\"", "data-key=\"o-3\"");
    ck_assert(tl_contains(dom, "Overdue instances (1)"));
    ck_assert(!tl_contains(dom, "data-action="));
    free(dom);
    /* ... filtered by a team that owns none of it. */
    dom = browse("stuck?team=shipping", "stuck-filtered");
    ck_assert(tl_contains(dom, "Overdue instances (0)"));
    ck_assert(!tl_contains(dom, "class=\"overdue-row\""));
    free(dom);

    /* instance: found by key, its timeline in order. */
    dom = browse("instance?key=o-1", "instance");
    assert_tag(dom, "section", "id=\"instance\"", "data-state=\"completed\"");
    assert_tag(dom, "section", "id=\"instance\"", "data-key=\"o-1\"");
    const char *placed = strstr(dom, "data-event=\"OrderPlaced\"");
    const char *paid = strstr(dom, "data-event=\"PaymentCaptured\"");
    const char *shipped = strstr(dom, "data-event=\"ShipmentDispatched\"");
    ck_assert_msg(placed != NULL && paid != NULL && shipped != NULL && placed < paid &&
                      paid < shipped,
                  "timeline: %s", dom);
    free(dom);
    dom = browse("instance?key=o-3", "instance-alert");
    ck_assert(tl_contains(dom, "data-alert-kind=\"alert-open\""));
    ck_assert(tl_contains(dom, "alert opened"));
    free(dom);

    /* report: a histogram per state from the report's buckets, the
     * state's own deadline drawn, no suggestion from two exits. */
    dom = browse("report?process=alert_order", "report");
    assert_tag(dom, "svg", "data-state=\"awaiting_payment\"", "data-exits=\"2\"");
    assert_tag(dom, "svg", "data-state=\"awaiting_dispatch\"", "data-exits=\"1\"");
    assert_tag(dom, "line", "class=\"deadline-line\"", "data-ms=\"3000\"");
    assert_tag(dom, "rect", "data-le-ms=\"null\"", "data-count=\"0\"");
    ck_assert(tl_contains(dom, "too few exits to suggest (2 of 20)"));
    ck_assert(tl_contains(dom, "deadline 3.0s ("));
    ck_assert(!tl_contains(dom, "class=\"suggested-line\""));
    ck_assert(!tl_contains(dom, "data-state=\"completed\""));
    free(dom);
}
END_TEST

/* steward demo --serve: after its check, the console of the run, until
 * interrupted; then the demo exits with its check's verdict. */
/* The demo's output has the line `marker` starts, whole. */
static bool printed_url(void *marker, char *seen, size_t seen_size)
{
    char *out = tl_read_file(w.log);
    const char *at = strstr(out, (const char *) marker);
    bool whole = at != NULL && strchr(at, '\n') != NULL;
    snprintf(seen, seen_size, "%zu bytes of output", strlen(out));
    free(out);
    return whole;
}

START_TEST(demo_serves_the_console_until_interrupted)
{
    memset(&w, 0, sizeof w);
    const char *url = tl_db_create("console_demo");
    w.dir = strdup(tl_tmpdir());
    w.log = tl_write_file(w.dir, "demo.out", "");
    const char *argv[] = {NULL, "demo",   "--serve", "--database", url, "--orders",
                          "40", "--rate", "40",      "--seed",     "7", NULL};
    w.pids[0] = tl_steward_spawn(argv, NULL, w.log);

    const char *marker = "== the console: http://";
    tl_wait_until(printed_url, (void *) marker, 120, "the demo to print the console's URL", w.log);
    char *out = tl_read_file(w.log);
    const char *at = strstr(out, marker);
    ck_assert_msg(at != NULL, "the demo never printed the console's URL: %s", out);
    const char *start = at + strlen("== the console: "); /* http://HOST:PORT/ */
    snprintf(w.base, sizeof w.base, "%.*s", (int) (7 + strcspn(start + 7, "/ \n")), start);
    ck_assert_msg(strncmp(w.base, "http://127.0.0.1:", 17) == 0, "base %s", w.base);
    ck_assert_msg(tl_contains(out, "demo: every stalled order was alerted"), "%s", out);

    json_t *doc = get_json("/v1/processes", 200);
    json_t *p = tl_json_find(json_object_get(doc, "processes"), "process", "order_fulfilment");
    ck_assert_int_gt(num(p, "open"), 0); /* the stalled orders stay open */
    json_decref(doc);
    long status = 0;
    char page[128];
    snprintf(page, sizeof page, "%s/", w.base);
    char *body = tl_http_get(page, &status);
    ck_assert_int_eq(status, 200);
    free(body);

    /* The demo's graph in a browser (the README's screenshot). */
    char *dom = browse("processes", "demo-processes");
    assert_tag(dom, "svg", "data-process=\"order_fulfilment\"", "class=\"graph\"");
    free(dom);

    /* Still serving a while later (the while is the point: no condition
     * marks it); Ctrl-C ends it, with the verdict. */
    sleep(1);
    json_decref(get_json("/v1/stuck", 200));
    int rc = tl_stop(w.pids[0], SIGINT, 30);
    w.pids[0] = 0;
    ck_assert_msg(rc == 0, "demo exited %d", rc);
    free(out);
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
    ck_assert_int_eq(num(k1, "overdue_ms"), 0);
    ck_assert(json_is_true(json_object_get(k2, "overdue")));
    ck_assert_int_eq(num(k2, "overdue_ms"), 3 * 60000);
    ck_assert(json_is_string(json_object_get(k1, "watermark_at")));
    ck_assert(json_object_get(k1, ".deadline_ms") == NULL);
    json_decref(doc);

    query_absent_t absent;
    ck_assert_msg(query_instance(conn, "lagging", "k-1", &doc, &absent, errstr, sizeof errstr) ==
                      ERR_OK,
                  "%s", errstr);
    ck_assert_int_eq(num(doc, "ms_to_deadline"), 3 * 60000);
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

Suite *console_suite(void)
{
    Suite *s = suite_create("console");
    TCase *tc = tcase_create("console");
    tcase_set_timeout(tc, 300);
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_add_test(tc, api_lists_graphs_and_reports);
    tcase_add_test(tc, browser_shows_each_page);
    tcase_add_test(tc, demo_serves_the_console_until_interrupted);
    suite_add_tcase(s, tc);
    TCase *query = tcase_create("query");
    tcase_add_test(query, overdue_figures_follow_the_watermark);
    suite_add_tcase(s, query);
    return s;
}
