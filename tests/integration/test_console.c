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
#include "common/rfc3339.h"
#include "common/sha256.h"
#include "definitions/duration.h"
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
#include <stdbool.h>
#include <sys/stat.h>
#include <unistd.h>

static tw_world_t w;

/* The operate token the browser tests act with; its name is "alice". */
#define OPS_SECRET "console-opsecret-1111"

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
    char hex[SHA256_HEX_SIZE], line[256];
    sha256_hex(OPS_SECRET, strlen(OPS_SECRET), hex);
    snprintf(line, sizeof line, "alice operate %s\n", hex);
    char *tokens = tl_write_file(w.dir, "tokens", line);
    json_t *parts = json_pack("{s:{s:s, s:s, s:s}, s:{s:s}, s:{s:s, s:s}, s:{s:[{s:s}]}, s:{s:s}}",
                              "scheduler", "interval", "200ms", "grace", "200ms", "blind_after",
                              "10m", "notifier", "interval", "100ms", "http", "listen",
                              "127.0.0.1:0", "tokens_file", tokens, "routes", "default", "type",
                              "log", "kafka", "topic.metadata.refresh.interval.ms", "1000");
    free(tokens);
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

    /* One form for every time the API writes. */
    const char *timed[] = {
        "/v1/instances/alert_order/o-1",           "/v1/instances/alert_order/o-3",
        "/v1/instances?process=alert_order",       "/v1/stuck",
        "/v1/report?process=alert_order&since=1d", "/readyz"};
    for (size_t n = 0; n < sizeof timed / sizeof timed[0]; n++) {
        doc = get_json(timed[n], 200);
        assert_times(doc, timed[n]);
        json_decref(doc);
    }
    /* The stuck view says how long the instance has been in its state. */
    doc = get_json("/v1/stuck", 200);
    json_t *alert = json_array_get(
        json_object_get(json_array_get(json_object_get(doc, "groups"), 0), "alerts"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(alert, "instance_state")),
                     "awaiting_payment");
    ck_assert_int_ge(num(alert, "ms_in_state"), 3000);
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
    ck_assert(tl_contains(body, "function duration"));
    free(body);
    snprintf(url, sizeof url, "%s/console/graph.js", w.base);
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

/* Where an artefact named `name` goes (STEWARD_TEST_ARTIFACTS, else
 * ./artifacts); static, so use it before the next call. */
static const char *artifact(const char *name)
{
    static char path[1200];
    const char *dir = getenv("STEWARD_TEST_ARTIFACTS");
    char artifacts[1024];
    snprintf(artifacts, sizeof artifacts, "%s", dir != NULL && dir[0] ? dir : "artifacts");
    mkdir(artifacts, 0755);
    snprintf(path, sizeof path, "%s/%s", artifacts, name);
    return path;
}

/*
 * Loads the console's page `fragment` in headless Chromium, driven by
 * tests/support/browser.js, runs `steps` (a JSON array of its steps, taken;
 * NULL: none) with an operate token in the tab when `operate`, then saves
 * the DOM and screenshots at 1400 and 800 px as artefacts named
 * console-NAME. Fails on a step that fails, a refusal by the
 * Content-Security-Policy, an error in the page or a dialog (actions ask
 * inline, never by alert() or prompt()). Returns the last DOM.
 */
static char *browse_steps(const char *fragment, const char *name, bool operate, bool refresh,
                          json_t *steps)
{
    ck_assert_msg(system("command -v chromium >/dev/null 2>&1") == 0,
                  "chromium is not installed: the console suite needs Debian's chromium package "
                  "(scripts/test installs it)");
    char url[1200], profile[1024], log[1100], dom_path[1200], file[256], init[512];
    snprintf(url, sizeof url, "%s/#/%s", w.base, fragment);
    snprintf(profile, sizeof profile, "%s/chromium-%s", w.dir, name);
    snprintf(log, sizeof log, "%s/chromium-%s.log", w.dir, name);
    snprintf(file, sizeof file, "console-%s.html", name);
    snprintf(dom_path, sizeof dom_path, "%s", artifact(file));
    snprintf(init, sizeof init, "%s%s%s",
             refresh ? "" : "localStorage.setItem('steward.refresh', 'off');",
             operate ? "sessionStorage.setItem('steward.token', '" OPS_SECRET "');" : "",
             "window.addEventListener('error', e => console.error('page error: ' + e.message));");
    if (steps == NULL)
        steps = json_array();
    snprintf(file, sizeof file, "console-%s.png", name);
    json_array_append_new(steps, json_pack("{s:i, s:s, s:s}", "width", 1400, "dump", dom_path,
                                           "shot", artifact(file)));
    snprintf(file, sizeof file, "console-%s-800.png", name);
    json_array_append_new(steps, json_pack("{s:i, s:s}", "width", 800, "shot", artifact(file)));
    json_t *script = json_pack("{s:s, s:s, s:s, s:s, s:o}", "url", url, "profile", profile, "log",
                               log, "init", init, "steps", steps);
    char *text = json_dumps(script, JSON_INDENT(1));
    char *script_path = tl_write_file(w.dir, "browser-script.json", text);
    free(text);
    json_decref(script);

    char cmd[4096];
    char *driver = tl_source_path("tests/support/browser.js");
    snprintf(cmd, sizeof cmd, "node '%s' '%s' 2>&1", driver, script_path);
    FILE *f = popen(cmd, "r");
    ck_assert_ptr_nonnull(f);
    char said[2048];
    size_t n = fread(said, 1, sizeof said - 1, f);
    said[n] = '\0';
    int rc = pclose(f);
    char *logged = tl_read_file(log);
    ck_assert_msg(rc == 0, "page %s: %s\nthe page's log:\n%.3000s", fragment, said, logged);
    static const char *const refused[] = {"Content Security Policy", "exception:", "page error",
                                          "dialog ", "console.error"};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
        ck_assert_msg(!tl_contains(logged, refused[i]), "page %s: \"%s\" in its log:\n%.3000s",
                      fragment, refused[i], logged);
    free(logged);
    free(driver);
    free(script_path);
    char *dom = tl_read_file(dom_path);
    ck_assert_msg(tl_contains(dom, "data-state=\"ready\""), "page %s never got ready: %s", fragment,
                  dom);
    return dom;
}

static char *browse(const char *fragment, const char *name)
{
    return browse_steps(fragment, name, false, false, NULL);
}

/* A step of browser.js: `do` (may be NULL) and `until` (may be NULL). */
static json_t *step(const char *js, const char *until)
{
    json_t *s = json_object();
    if (js != NULL)
        json_object_set_new(s, "do", json_string(js));
    if (until != NULL)
        json_object_set_new(s, "until", json_string(until));
    return s;
}

/* The same, writing the value of `js` to the artefact `name`. */
static json_t *step_value(const char *js, const char *name)
{
    json_t *s = step(js, NULL);
    json_object_set_new(s, "value", json_string(artifact(name)));
    return s;
}

static json_t *read_value(const char *name)
{
    char *text = tl_read_file(artifact(name));
    json_t *v = json_loads(text, JSON_DECODE_ANY, NULL);
    ck_assert_msg(v != NULL, "%s: not JSON: %s", name, text);
    free(text);
    return v;
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

/* In the page: every edge of every graph sampled along its length, the
 * points inside a box that is neither its source nor its target counted
 * (crossings), and every text of a box that is wider than the box
 * (overflow). */
static const char geometry_js[] =
    "(() => { let crossings = [], overflow = [], edges = 0;"
    "  for (const svg of document.querySelectorAll('svg.graph')) {"
    "    const boxes = [...svg.querySelectorAll('g.node')].map(g => {"
    "      const r = g.querySelector('rect').getBBox(), m = "
    "g.transform.baseVal.consolidate().matrix;"
    "      return {name: g.dataset.state, x: m.e, y: m.f, w: r.width, h: r.height, g}; });"
    "    for (const b of boxes) for (const t of b.g.querySelectorAll('text'))"
    "      if (t.getComputedTextLength() > b.w - 8) overflow.push(b.name + ': ' + t.textContent);"
    "    for (const p of svg.querySelectorAll('path.edge')) {"
    "      edges++; const len = p.getTotalLength();"
    "      for (let d = 0; d <= len; d += 2) { const q = p.getPointAtLength(d);"
    "        for (const b of boxes) {"
    "          if (b.name === p.dataset.from || b.name === p.dataset.to) continue;"
    "          if (q.x > b.x + 1 && q.x < b.x + b.w - 1 && q.y > b.y + 1 && q.y < b.y + b.h - 1)"
    "            { crossings.push(p.dataset.from + '->' + p.dataset.to + ' in ' + b.name); break; "
    "} } } } }"
    "  return {edges, crossings: [...new Set(crossings)], overflow}; })()";

START_TEST(browser_shows_each_page)
{
    world_start();

    /* processes: the graph, counts on each state, the terminal marked,
     * each edge named by its event, none across another box, every text
     * inside its box. */
    json_t *steps = json_array();
    json_array_append_new(steps, step_value(geometry_js, "console-processes-geometry.json"));
    /* ... and the console writes a duration as the rest of Steward does. */
    static const long long spans[] = {
        0,       1,       999,      1000,     1004,
        1005,    1500,    9010,     9994,     9996,
        -2500,   45400,   59600,    60212,    450600,
        3723000, 7199999, 19690000, 86400000, 3 * 86400000LL + 4 * 3600000 + 31 * 60000};
    char js[1024] = "[";
    for (size_t i = 0; i < sizeof spans / sizeof spans[0]; i++)
        snprintf(js + strlen(js), sizeof js - strlen(js), "%s%lld", i ? "," : "", spans[i]);
    strncat(js, "].map(duration)", sizeof js - strlen(js) - 1);
    json_array_append_new(steps, step_value(js, "console-durations.json"));
    char *dom = browse_steps("processes", "processes", false, false, steps);
    json_t *written = read_value("console-durations.json");
    for (size_t i = 0; i < sizeof spans / sizeof spans[0]; i++) {
        char want[48];
        duration_format_rounded(spans[i], want, sizeof want);
        ck_assert_msg(json_is_string(json_array_get(written, i)) &&
                          strcmp(json_string_value(json_array_get(written, i)), want) == 0,
                      "%lld ms: the console writes %s, Steward %s", spans[i],
                      json_string_value(json_array_get(written, i)), want);
    }
    json_decref(written);
    assert_tag(dom, "svg", "data-process=\"alert_order\"", "class=\"graph\"");
    assert_tag(dom, "g", "data-state=\"awaiting_payment\"", "data-open=\"1\"");
    assert_tag(dom, "g", "data-state=\"awaiting_payment\"", "data-overdue=\"1\"");
    assert_tag(dom, "g", "data-state=\"awaiting_payment\"", "node late");
    assert_tag(dom, "g", "data-state=\"awaiting_dispatch\"", "data-overdue=\"0\"");
    assert_tag(dom, "g", "data-state=\"awaiting_dispatch\"", "node busy");
    assert_tag(dom, "g", "data-state=\"completed\"", "data-terminal=\"true\"");
    ck_assert(tl_contains(dom, "1 open · 1 overdue"));
    ck_assert(tl_contains(dom, "terminal: success"));
    ck_assert(tl_contains(dom, "deadline 3s")); /* the box's notes, as steward graph writes them */
    ck_assert(tl_contains(dom, "data-from=\"awaiting_payment\" data-to=\"awaiting_dispatch\""));
    assert_tag(dom, "text", "data-event=\"PaymentCaptured\"", "edge-label");
    ck_assert(tl_contains(dom, ">PaymentCaptured</text>"));
    ck_assert(tl_contains(dom, ">ShipmentDispatched</text>"));
    ck_assert(tl_contains(dom, ">OrderPlaced</text>")); /* the start event */
    free(dom);
    json_t *geometry = read_value("console-processes-geometry.json");
    ck_assert_int_eq(json_integer_value(json_object_get(geometry, "edges")), 3);
    char *g = json_dumps(geometry, 0);
    ck_assert_msg(json_array_size(json_object_get(geometry, "crossings")) == 0 &&
                      json_array_size(json_object_get(geometry, "overflow")) == 0,
                  "geometry: %s", g);
    free(g);
    json_decref(geometry);

    /* stuck: o-3 overdue with its alert; nobody else; no actions without
     * a token; how long it has been in its state, and the alert's time
     * relative and local with the UTC value on hover. */
    dom = browse("stuck", "stuck");
    assert_tag(dom, "tr", "class=\"overdue-row\"", "data-key=\"o-3\"");
    ck_assert(!tl_contains(dom, "data-key=\"o-2\""));
    assert_tag(dom, "tr", "class=\"alert-row\"", "data-key=\"o-3\"");
    ck_assert(tl_contains(dom, "Overdue instances (1)"));
    ck_assert(!tl_contains(dom, "data-action="));
    ck_assert(!tl_contains(dom, "class=\"select\""));
    ck_assert(!tl_contains(dom, "data-ms-in-state=\"\""));
    assert_tag(dom, "time", "datetime=\"", "Z (UTC)\"");
    ck_assert(tl_contains(dom, " ago <span class=\"muted\">("));
    free(dom);
    /* ... filtered by a team that owns none of it. */
    dom = browse("stuck?team=shipping", "stuck-filtered");
    ck_assert(tl_contains(dom, "Overdue instances (0)"));
    ck_assert(!tl_contains(dom, "class=\"overdue-row\""));
    free(dom);

    /* instance: found by key, its timeline in event-time order, its claim
     * apart from the step's lease, its variables. */
    dom = browse("instance?key=o-1", "instance");
    assert_tag(dom, "section", "id=\"instance\"", "data-state=\"completed\"");
    assert_tag(dom, "section", "id=\"instance\"", "data-key=\"o-1\"");
    assert_tag(dom, "section", "id=\"instance\"", "data-mode=\"shadow\"");
    const char *placed = strstr(dom, "data-event=\"OrderPlaced\"");
    const char *paid = strstr(dom, "data-event=\"PaymentCaptured\"");
    const char *shipped = strstr(dom, "data-event=\"ShipmentDispatched\"");
    ck_assert_msg(placed != NULL && paid != NULL && shipped != NULL && placed < paid &&
                      paid < shipped,
                  "timeline: %s", dom);
    ck_assert(tl_contains(dom, "nobody (operator's claim)"));
    ck_assert(tl_contains(dom, "– (shadow mode)"));
    ck_assert(tl_contains(dom, "id=\"vars\""));
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
    ck_assert(tl_contains(dom, "deadline 3s ("));
    ck_assert(!tl_contains(dom, "class=\"suggested-line\""));
    ck_assert(!tl_contains(dom, "data-state=\"completed\""));
    free(dom);
}
END_TEST

/* Clicks the button of `action` in `scope` (a CSS selector), then fills
 * the form it opens: `field` (NULL: none) set to `value`, the reason, and
 * submits it. */
static json_t *act_step(const char *scope, const char *action, const char *field, const char *value,
                        const char *reason, const char *until)
{
    char js[2048];
    snprintf(js, sizeof js,
             "(() => { const b = document.querySelector('%s [data-action=\"%s\"]');"
             "  if (!b) throw new Error('no %s button in %s'); b.click();"
             "  const f = document.querySelector('form.act[data-verb=\"%s\"]');"
             "  if ('%s') f.elements['%s'].value = '%s';"
             "  f.elements.reason.value = '%s'; f.requestSubmit(); })()",
             scope, action, action, scope, action, field != NULL ? field : "",
             field != NULL ? field : "", value != NULL ? value : "", reason);
    return step(js, until);
}

/* The buttons of `scope`'s actions, joined by ','. */
static json_t *buttons_step(const char *scope, const char *name)
{
    char js[512];
    snprintf(js, sizeof js,
             "[...document.querySelectorAll('%s [data-action]')].map(b => b.dataset.action)"
             ".join(',')",
             scope);
    return step_value(js, name);
}

static char *read_string(const char *name)
{
    json_t *v = read_value(name);
    char *s = strdup(json_is_string(v) ? json_string_value(v) : "(not a string)");
    json_decref(v);
    return s;
}

static void expect_buttons(const char *name, const char *want)
{
    char *got = read_string(name);
    ck_assert_msg(strcmp(got, want) == 0, "%s: buttons %s, expected %s", name, got, want);
    free(got);
}

START_TEST(browser_acts_where_it_applies)
{
    world_start();
    /* Three more orders never paid: overdue at awaiting_payment with o-3. */
    tl_producer_t *p = tl_producer_new();
    send_event(p, "orders", "OrderPlaced", "o-4");
    send_event(p, "orders", "OrderPlaced", "o-5");
    send_event(p, "orders", "OrderPlaced", "o-6");
    tl_producer_free(p);
    wait_sql("SELECT count(*) FROM steward.instances WHERE overdue", "4", 60, "four overdue");

    /* The instance page of a shadow instance nobody claimed: claim, not
     * release; no retry (shadow mode); close with the process's own
     * outcome; move to another state. Claiming turns claim into release,
     * and shows the claim apart from the lease. */
    json_t *steps = json_array();
    json_array_append_new(steps, buttons_step("#actions", "console-o4-buttons.json"));
    json_array_append_new(steps, act_step("#actions", "claim", NULL, NULL, "looking",
                                          "document.querySelector('#inst-claim .pill') !== null"));
    json_array_append_new(steps, buttons_step("#actions", "console-o4-claimed.json"));
    json_array_append_new(steps,
                          step("document.querySelector('#actions [data-action=\"close\"]').click();"
                               "[...document.querySelector('form.act select[name=as]').options]"
                               ".map(o => o.value).join(',')",
                               NULL));
    json_array_append_new(steps, step_value("[...document.querySelector('form.act select[name=as]')"
                                            ".options].map(o => o.value).join(',')",
                                            "console-o4-outcomes.json"));
    json_array_append_new(steps,
                          act_step("#actions", "move", "to", "awaiting_dispatch", "paid by phone",
                                   "document.getElementById('inst-state') && "
                                   "document.getElementById('inst-state').textContent === "
                                   "'awaiting_dispatch'"));
    char *dom =
        browse_steps("instance?process=alert_order&key=o-4", "act-instance", true, false, steps);
    expect_buttons("console-o4-buttons.json", "close,move,claim");
    expect_buttons("console-o4-claimed.json", "close,move,release");
    char *outcomes = read_string("console-o4-outcomes.json");
    ck_assert_str_eq(outcomes, "success");
    free(outcomes);
    ck_assert(tl_contains(dom, "class=\"pill claim\">alice<"));
    free(dom);
    wait_sql("SELECT state || ' ' || coalesce(claimed_by, '-') FROM steward.instances "
             "WHERE key = 'o-4'",
             "awaiting_dispatch alice", 30, "o-4 moved, claimed by alice");
    wait_sql("SELECT string_agg(event_type || ' ' || actor || ' ' || reason, '; ' ORDER BY id) "
             "FROM steward.history WHERE key = 'o-4' AND outcome = 'operator'",
             "operator:claim alice looking; operator:move alice paid by phone", 30, "o-4's audit");

    /* A refusal shows inline, and no dialog opens: o-5 closed meanwhile by
     * someone else, the form's close is refused (409). */
    char js[2048];
    steps = json_array();
    snprintf(js, sizeof js,
             "(async () => { document.querySelector('#actions [data-action=\"close\"]').click();"
             "  await fetch('/v1/instances/alert_order/o-5/close', {method: 'POST', headers: "
             "    {Authorization: 'Bearer %s', 'Content-Type': 'application/json'}, "
             "    body: JSON.stringify({as: 'success', reason: 'elsewhere'})});"
             "  const f = document.querySelector('form.act[data-verb=close]');"
             "  f.elements.reason.value = 'too late'; f.requestSubmit(); })()",
             OPS_SECRET);
    json_array_append_new(steps, step(js, "document.querySelector('[data-error=close]')"
                                          ".textContent.includes('409')"));
    dom = browse_steps("instance?process=alert_order&key=o-5", "act-refused", true, false, steps);
    assert_tag(dom, "p", "data-error=\"close\"", "class=\"error\"");
    ck_assert(tl_contains(dom, "close refused: 409"));
    free(dom);

    /* Bulk on the Stuck page: o-3 and o-6 are overdue at one step; closing
     * both asks for the outcome, says how many, then does each. The
     * actions apply only with a token: none is offered without. */
    steps = json_array();
    json_array_append_new(steps, step("document.querySelector('input.select-all').click()",
                                      "document.querySelector('[data-selected=\"2\"]')"));
    json_array_append_new(steps, step_value("[...document.querySelectorAll('[data-bulk-action]')]"
                                            ".map(b => b.dataset.bulkAction).join(',')",
                                            "console-bulk-offered.json"));
    json_array_append_new(
        steps, step("document.querySelector('[data-bulk-action=close]').click();"
                    "const f = document.querySelector('form.act[data-bulk]');"
                    "f.elements.as.value = 'success'; f.elements.reason.value = 'refunded';"
                    "f.requestSubmit();",
                    "document.querySelector('form.act[data-bulk] .confirm').textContent !== ''"));
    json_array_append_new(
        steps, step_value("document.querySelector('form.act[data-bulk] .confirm').textContent",
                          "console-bulk-confirm.json"));
    json_array_append_new(steps, step("document.querySelector('form.act[data-bulk]')"
                                      ".requestSubmit()",
                                      "document.querySelector('.bulk-results')"));
    dom = browse_steps("stuck", "act-bulk", true, false, steps);
    char *offered = read_string("console-bulk-offered.json");
    ck_assert_str_eq(offered, "close"); /* no retry: a shadow version */
    free(offered);
    char *confirm = read_string("console-bulk-confirm.json");
    ck_assert_str_eq(confirm, "close as success 2 instances of alert_order in awaiting_payment?");
    free(confirm);
    assert_tag(dom, "span", "class=\"bulk-results\"", "data-done=\"2\"");
    ck_assert(tl_contains(dom, "close: 2 done, 0 refused."));
    free(dom);
    wait_sql("SELECT string_agg(key || ' ' || status, ',' ORDER BY key) FROM steward.instances "
             "WHERE key IN ('o-3', 'o-6')",
             "o-3 success,o-6 success", 30, "both closed");
    wait_sql("SELECT count(*) FROM steward.history WHERE outcome = 'operator' AND "
             "event_type = 'operator:close' AND actor = 'alice' AND reason = 'refunded'",
             "2", 30, "an audit row per instance");

    /* What applies, as the console judges it: retry only on an active
     * instance in a state with a command; claim only when unclaimed,
     * release only when claimed; nothing on a finished one. */
    steps = json_array();
    json_array_append_new(
        steps,
        step_value(
            "verbs().then(t => { const v = n => t.find(x => x.name === n);"
            "  const a = {status: 'active', mode: 'active', has_command: true};"
            "  return [applies(v('retry'), a), applies(v('retry'), {...a, mode: 'shadow'}),"
            "    applies(v('retry'), {...a, has_command: false}),"
            "    applies(v('claim'), a), applies(v('claim'), {...a, claimed_by: 'bob'}),"
            "    applies(v('release'), a), applies(v('release'), {...a, claimed_by: 'bob'}),"
            "    applies(v('close'), {...a, status: 'success', outcomes: [{outcome: 'x'}]}),"
            "    applies(v('ack'), {acked_by: 'bob'}), applies(v('resolve'), {acked_by: 'bob'})]"
            "  .map(b => b ? 'y' : 'n').join(''); })",
            "console-applies.json"));
    dom = browse_steps("stuck", "act-rules", true, false, steps);
    free(dom);
    char *rules = read_string("console-applies.json");
    ck_assert_str_eq(rules, "ynnynnynny");
    free(rules);

    /* Auto-refresh: on, the page is read again by itself. */
    steps = json_array();
    json_array_append_new(steps,
                          step(NULL, "document.getElementById('main').dataset.refreshed "
                                     ">= '1' && document.getElementById('refresh').checked"));
    dom = browse_steps("stuck", "refresh", true, true, steps);
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
    ck_assert_int_eq(num(doc, "version"), 2);
    ck_assert_str_eq(json_string_value(json_object_get(doc, "start_event")), "Start");
    /* definitions/graph's layout: wait in column 0, the terminals in 1,
     * the "any state" node under wait. */
    json_t *wait = tl_json_find(json_object_get(doc, "states"), "name", "wait");
    ck_assert_int_eq(num(wait, "column"), 0);
    ck_assert_int_eq(num(wait, "row"), 0);
    ck_assert_int_eq(
        num(tl_json_find(json_object_get(doc, "states"), "name", "cancelled"), "column"), 1);
    json_t *any = json_object_get(doc, "any");
    ck_assert_msg(json_is_object(any) && num(any, "column") == 0 && num(any, "row") == 1, "%s",
                  text);
    json_t *t = tl_json_find(json_object_get(doc, "transitions"), "kind", "any");
    ck_assert_msg(t != NULL && json_is_null(json_object_get(t, "from")) &&
                      strcmp(json_string_value(json_object_get(t, "event")), "Cancel") == 0 &&
                      strcmp(json_string_value(json_object_get(t, "to")), "cancelled") == 0,
                  "%s", text);
    /* Counts by version, each beside its own version's deadline. */
    ck_assert_int_eq(num(wait, "open"), 2);
    ck_assert_int_eq(num(wait, "overdue"), 1);
    ck_assert_str_eq(json_string_value(json_object_get(wait, "deadline")), "10m");
    json_t *versions = json_object_get(wait, "versions");
    ck_assert_msg(json_array_size(versions) == 2, "%s", text);
    json_t *first = json_array_get(versions, 0), *second = json_array_get(versions, 1);
    ck_assert_int_eq(num(first, "version"), 2);
    ck_assert_str_eq(json_string_value(json_object_get(first, "deadline")), "10m");
    ck_assert_int_eq(num(second, "version"), 1);
    ck_assert_int_eq(num(second, "overdue"), 1);
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
    tcase_add_test(tc, browser_shows_each_page);
    tcase_add_test(tc, browser_acts_where_it_applies);
    tcase_add_test(tc, demo_serves_the_console_until_interrupted);
    suite_add_tcase(s, tc);
    TCase *query = tcase_create("query");
    tcase_add_test(query, overdue_figures_follow_the_watermark);
    tcase_add_test(query, graph_is_the_recorded_definition_laid_out);
    suite_add_tcase(s, query);
    return s;
}
