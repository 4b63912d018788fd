/*
 * test_actions_http - the operator verbs through the HTTP API (the
 * actions_http suite), in the world of test_actions.h: an action needs an
 * operate token (none or an unknown one 401, a read token 403), the
 * token's name is the actor, silences are set and lifted over HTTP,
 * SIGHUP reloads the tokens, and no secret reaches the log, an answer or
 * the metrics; an upgrade of a process's instances goes the same way, its
 * options in the body; a listener off the loopback is refused without
 * tokens.
 */
#include "test_actions.h"

#include "receiver.h"
#include "testlib.h"
#include "world.h"

#include <check.h>
#include <curl/curl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static tw_world_t w;

/* What one call answered: status, body and headers (answer_free() them). */
typedef struct answer {
    long status;
    char *body;
    char *headers;
} answer_t;

static size_t collect(char *data, size_t size, size_t n, void *arg)
{
    char **buf = arg;
    size_t old = *buf != NULL ? strlen(*buf) : 0;
    char *grown = realloc(*buf, old + size * n + 1);
    ck_assert_ptr_nonnull(grown);
    memcpy(grown + old, data, size * n);
    grown[old + size * n] = '\0';
    *buf = grown;
    return size * n;
}

/* Everything the API answered, headers and bodies, for the secret grep. */
static char *all_answers;

/* method on w.base + path, with a bearer secret and a body when not NULL. */
static answer_t call(const char *method, const char *path, const char *secret, const char *body)
{
    answer_t a = {0};
    char url[1024], auth[256];
    snprintf(url, sizeof url, "%s%s", w.base, path);
    CURL *curl = curl_easy_init();
    struct curl_slist *headers = curl_slist_append(NULL, "Content-Type: application/json");
    if (secret != NULL) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", secret);
        headers = curl_slist_append(headers, auth);
    }
    curl_easy_setopt(curl, CURLOPT_URL, url);
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    if (body != NULL)
        curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &a.body);
    curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, collect);
    curl_easy_setopt(curl, CURLOPT_HEADERDATA, &a.headers);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT, 30L);
    CURLcode rc = curl_easy_perform(curl);
    ck_assert_msg(rc == CURLE_OK, "%s %s: %s", method, url, curl_easy_strerror(rc));
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &a.status);
    curl_slist_free_all(headers);
    curl_easy_cleanup(curl);
    if (a.body == NULL)
        a.body = strdup("");
    if (a.headers == NULL)
        a.headers = strdup("");
    collect(a.body, 1, strlen(a.body), &all_answers);
    collect(a.headers, 1, strlen(a.headers), &all_answers);
    return a;
}

static void answer_free(answer_t *a)
{
    free(a->body);
    free(a->headers);
}

/* Calls, and asserts the status, that in_body (if any) is in the body and
 * that an error answer is JSON {"error": ...}. */
static void expect_call(const char *method, const char *path, const char *secret, const char *body,
                        long status, const char *in_body)
{
    answer_t a = call(method, path, secret, body);
    ck_assert_msg(a.status == status && (in_body == NULL || tl_contains(a.body, in_body)),
                  "%s %s: %ld %s (expected %ld with \"%s\")", method, path, a.status, a.body,
                  status, in_body != NULL ? in_body : "");
    if (a.status >= 400) {
        json_t *doc = json_loads(a.body, 0, NULL);
        ck_assert_msg(json_is_string(json_object_get(doc, "error")), "error body: %s", a.body);
        json_decref(doc);
    }
    answer_free(&a);
}

/* A tokens file from (name, scope, secret) triples ending in NULL, each
 * secret hashed with sha256sum as an operator would. */
static char *tokens_text(const char *const *lines)
{
    char *out = calloc(1, 4096);
    size_t len = (size_t) snprintf(out, 4096, "# name scope sha256(secret)\n\n");
    for (size_t i = 0; lines[i] != NULL; i += 3) {
        char cmd[512], hex[128] = "";
        snprintf(cmd, sizeof cmd, "printf %%s '%s' | sha256sum", lines[i + 2]);
        FILE *f = popen(cmd, "r");
        ck_assert_ptr_nonnull(f);
        ck_assert_ptr_nonnull(fgets(hex, sizeof hex, f));
        pclose(f);
        hex[64] = '\0';
        len += (size_t) snprintf(out + len, 4096 - len, "%s %s %s\n", lines[i], lines[i + 1], hex);
    }
    return out;
}

#define OPS_SECRET   "opsecret-AAAA1111"
#define READ_SECRET  "readsecret-BBBB2222"
#define BOB_SECRET   "bobsecret-CCCC3333"
#define ROUTE_SECRET "R0UTINGKEYSECRET"

START_TEST(http_actions_need_an_operate_token)
{
    rcv_t *r = rcv_new();
    char *dir = strdup(tl_tmpdir());
    const char *lines[] = {"alice", "operate", OPS_SECRET, "reader", "read", READ_SECRET, NULL};
    char *text = tokens_text(lines);
    char *tokens = tl_write_file(dir, "tokens", text);
    free(text);
    char routes[1024];
    snprintf(routes, sizeof routes,
             "{\"payments\":[{\"type\":\"pagerduty\",\"name\":\"pd\",\"routing_key\":\"%s\","
             "\"url\":\"%s/v2/enqueue\"}],\"default\":[{\"type\":\"log\"}]}",
             ROUTE_SECRET, rcv_url(r));
    ta_world_start(&w, "acthttp", "1s", "1h", routes, "127.0.0.1:0", tokens);
    tl_wait_http_listening(w.log, w.base, sizeof w.base);

    char *k1 = tl_unique("ORD-"), *k2 = tl_unique("ORD-"), path[512], body[512];
    ta_send_event(&w, "orders", "OrderPlaced", k1);
    ta_send_event(&w, "orders", "OrderPlaced", k2);
    ta_wait_sql(&w, "SELECT count(*) FROM steward.alerts WHERE key = $1", k1, "1", 30);
    ta_wait_request(&w, r, "/v2/enqueue", "event_action", "trigger");
    char *id = ta_scalar(&w, "SELECT id FROM steward.alerts WHERE key = $1", k1);

    /* Reads stay open on the loopback. */
    snprintf(path, sizeof path, "/v1/instances/action_order/%s", k1);
    expect_call("GET", path, NULL, NULL, 200, "awaiting_payment");

    /* Acting needs an operate token: none or an unknown one 401, read 403. */
    snprintf(path, sizeof path, "/v1/alerts/%s/ack", id);
    const char *why = "{\"reason\":\"on it\"}";
    answer_t a = call("POST", path, NULL, why);
    ck_assert_msg(a.status == 401 && tl_contains(a.headers, "WWW-Authenticate: Bearer"),
                  "no token: %ld %s", a.status, a.headers);
    answer_free(&a);
    expect_call("POST", path, "not-a-token", why, 401, "unknown token");
    expect_call("POST", path, READ_SECRET, why, 403, "scope read");
    expect_call("GET", path, OPS_SECRET, NULL, 405, "POST only");
    expect_call("POST", path, OPS_SECRET, "{}", 400, "reason");
    expect_call("POST", path, OPS_SECRET, "not json", 400, "JSON object");
    ck_assert_ptr_null(ta_scalar(&w, "SELECT acked_by FROM steward.alerts WHERE key = $1", k1));

    expect_call("POST", path, OPS_SECRET, why, 200, "\"actor\":\"alice\"");
    ta_expect(&w, "SELECT acked_by FROM steward.alerts WHERE key = $1", k1, "alice");
    ta_wait_request(&w, r, "/v2/enqueue", "event_action", "acknowledge");
    expect_call("POST", path, OPS_SECRET, why, 409, "already acknowledged");
    snprintf(path, sizeof path, "/v1/alerts/%s/resolve", id);
    expect_call("POST", path, OPS_SECRET, "{\"reason\":\"fixed by hand\"}", 200, NULL);
    ta_wait_request(&w, r, "/v2/enqueue", "event_action", "resolve");
    expect_call("POST", path, OPS_SECRET, "{\"reason\":\"again\"}", 409, "already resolved");
    ta_expect(&w,
              "SELECT actor || ': ' || reason FROM steward.history WHERE key = $1 AND "
              "event_type = 'operator:resolve'",
              k1, "alice: fixed by hand");

    /* Instance actions: the token's name is the actor. */
    snprintf(path, sizeof path, "/v1/instances/action_order/%s/claim", k2);
    expect_call("POST", path, OPS_SECRET, "{\"reason\":\"mine\"}", 200, NULL);
    snprintf(path, sizeof path, "/v1/instances/action_order/%s/retry", k2);
    expect_call("POST", path, OPS_SECRET, "{\"reason\":\"x\"}", 409, "shadow mode");
    snprintf(path, sizeof path, "/v1/instances/action_order/%s/move", k2);
    expect_call("POST", path, OPS_SECRET, "{\"reason\":\"x\",\"to\":\"nowhere\"}", 400,
                "not a non-terminal state");
    expect_call("POST", path, OPS_SECRET,
                "{\"reason\":\"paid by phone\",\"to\":\"awaiting_dispatch\"}", 200,
                "\"state\":\"awaiting_dispatch\"");
    snprintf(path, sizeof path, "/v1/instances/action_order/%s/close", k2);
    snprintf(body, sizeof body, "{\"reason\":\"refunded\",\"as\":\"cancelled\"}");
    expect_call("POST", path, OPS_SECRET, body, 200, "\"status\":\"cancelled\"");
    expect_call("POST", path, OPS_SECRET, body, 409, "already finished");
    snprintf(path, sizeof path, "/v1/instances/action_order/%s", k2);
    expect_call("GET", path, NULL, NULL, 200, "\"actor\":\"alice\"");
    ta_expect(&w,
              "SELECT string_agg(event_type || ' ' || actor, ', ' ORDER BY id) FROM "
              "steward.history WHERE key = $1 AND outcome = 'operator'",
              k2, "operator:claim alice, operator:move alice, operator:close alice");

    /* Silences over HTTP: set with an operate token, listed by anyone on
     * the loopback, lifted once. */
    const char *sil = "{\"process\":\"action_order\",\"team\":\"payments\",\"for\":\"1h\","
                      "\"reason\":\"gateway maintenance\"}";
    expect_call("POST", "/v1/silences", READ_SECRET, sil, 403, "scope read");
    expect_call("POST", "/v1/silences", OPS_SECRET, "{\"process\":\"action_order\"}", 400, "for");
    a = call("POST", "/v1/silences", OPS_SECRET, sil);
    ck_assert_msg(a.status == 200, "silence: %ld %s", a.status, a.body);
    json_t *silence = json_loads(a.body, 0, NULL);
    long long sid = json_integer_value(json_object_get(silence, "id"));
    ck_assert_str_eq(json_string_value(json_object_get(silence, "actor")), "alice");
    json_decref(silence);
    answer_free(&a);
    expect_call("GET", "/v1/silences", NULL, NULL, 200, "gateway maintenance");
    snprintf(path, sizeof path, "/v1/silences/%lld/unsilence", sid);
    expect_call("POST", path, OPS_SECRET, "{\"reason\":\"done\"}", 200, "\"lifted_by\":\"alice\"");
    expect_call("POST", path, OPS_SECRET, "{\"reason\":\"done\"}", 409, "already ended");

    /* SIGHUP reloads the tokens: bob in, alice out. */
    const char *next[] = {"bob", "operate", BOB_SECRET, "reader", "read", READ_SECRET, NULL};
    text = tokens_text(next);
    free(tl_write_file(dir, "tokens", text));
    free(text);
    kill(w.pids[0], SIGHUP);
    tl_wait_file(w.log, "http tokens reloaded", 30);
    char *k3 = tl_unique("ORD-");
    ta_send_event(&w, "orders", "OrderPlaced", k3);
    ta_wait_sql(&w, "SELECT count(*) FROM steward.instances WHERE key = $1", k3, "1", 30);
    snprintf(path, sizeof path, "/v1/instances/action_order/%s/claim", k3);
    expect_call("POST", path, OPS_SECRET, "{\"reason\":\"x\"}", 401, "unknown token");
    expect_call("POST", path, BOB_SECRET, "{\"reason\":\"x\"}", 200, "\"claimed_by\":\"bob\"");

    /* No secret anywhere: the log, every answer, the metrics. */
    answer_t m = call("GET", "/metrics", NULL, NULL);
    ck_assert_int_eq(m.status, 200);
    answer_free(&m);
    char *log = tl_read_file(w.log);
    const char *secrets[] = {OPS_SECRET, READ_SECRET, BOB_SECRET, ROUTE_SECRET};
    for (size_t i = 0; i < sizeof secrets / sizeof secrets[0]; i++) {
        ck_assert_msg(!tl_contains(log, secrets[i]), "%s is in the log", secrets[i]);
        ck_assert_msg(!tl_contains(all_answers, secrets[i]), "%s is in an API answer", secrets[i]);
    }
    free(log);
    free(all_answers);
    all_answers = NULL;
    free(id);
    free(k1);
    free(k2);
    free(k3);
    free(tokens);
    free(dir);
    tw_teardown(&w);
    rcv_free(r);
}
END_TEST

/* steward upgrade over HTTP: POST /v1/processes/{process}/upgrade behind an
 * operate token, its options in the body by name; a dry run first, then
 * the move, audited under the token's name. */
START_TEST(http_upgrade_needs_an_operate_token)
{
    char *dir = strdup(tl_tmpdir());
    const char *lines[] = {"alice", "operate", OPS_SECRET, "reader", "read", READ_SECRET, NULL};
    char *text = tokens_text(lines);
    char *tokens = tl_write_file(dir, "tokens", text);
    free(text);
    ta_world_start(&w, "acthttpupg", "1s", "1h", "{\"default\":[{\"type\":\"log\"}]}",
                   "127.0.0.1:0", tokens);
    tl_wait_http_listening(w.log, w.base, sizeof w.base);
    char *key = tl_unique("ORD-");
    ta_send_event(&w, "orders", "OrderPlaced", key);
    ta_wait_sql(&w, "SELECT count(*) FROM steward.alerts WHERE key = $1 AND resolved_at IS NULL",
                key, "1", 30);
    /* Version 2 fixes the deadline; recorded as steward run records one. */
    tl_db_exec(w.conn, "INSERT INTO steward.definitions (process, version, mode, document, "
                       "  checksum, topic_mapping) "
                       "SELECT process, 2, mode, jsonb_set(jsonb_set(document, '{version}', '2'), "
                       "  '{states,awaiting_payment,deadline}', '\"1h\"'), 'v2', topic_mapping "
                       "FROM steward.definitions WHERE process = 'action_order' AND version = 1");

    const char *path = "/v1/processes/action_order/upgrade";
    const char *dry = "{\"reason\":\"deadline fixed\",\"to\":2,\"dry-run\":true}";
    answer_t a = call("POST", path, NULL, dry);
    ck_assert_msg(a.status == 401, "no token: %ld %s", a.status, a.body);
    answer_free(&a);
    expect_call("POST", path, READ_SECRET, dry, 403, "scope read");
    expect_call("GET", path, OPS_SECRET, NULL, 405, "POST only");
    expect_call("POST", path, OPS_SECRET, "{\"reason\":\"x\",\"to\":9}", 404,
                "version 9 of action_order is not recorded");
    expect_call("POST", path, OPS_SECRET, "{\"reason\":\"x\",\"to\":2,\"dry-run\":\"yes\"}", 400,
                "dry-run: expected true or false");
    expect_call("POST", path, OPS_SECRET, "{\"to\":2}", 400, "reason");
    expect_call("POST", path, OPS_SECRET, dry, 200, "\"dry_run\":true");
    expect_call("POST", path, OPS_SECRET, dry, 200, "\"moved\":1");
    ta_expect(&w, "SELECT version FROM steward.instances WHERE key = $1", key, "1");
    ta_expect(&w, "SELECT count(*) FROM steward.history WHERE key = $1 AND outcome = 'operator'",
              key, "0");

    expect_call("POST", path, OPS_SECRET,
                "{\"reason\":\"deadline fixed\",\"to\":\"2\",\"map\":{\"awaiting_dispatch\":"
                "\"awaiting_dispatch\"},\"state\":[\"awaiting_payment\"]}",
                200, "\"alerts_resolved\":1");
    ta_expect(&w,
              "SELECT i.version || ' ' || h.actor || ' ' || h.reason || ' ' || a.resolved_by "
              "FROM steward.instances i JOIN steward.history h USING (process, key) "
              "JOIN steward.alerts a USING (process, key) WHERE key = $1 AND "
              "h.event_type = 'operator:upgrade'",
              key, "2 alice deadline fixed alice");
    expect_call("POST", path, OPS_SECRET, "{\"reason\":\"again\",\"to\":2}", 200, "\"moved\":0");
    free(key);
    free(tokens);
    free(dir);
    free(all_answers);
    all_answers = NULL;
    tw_teardown(&w);
}
END_TEST

START_TEST(a_listener_off_the_loopback_needs_tokens)
{
    char *dir = strdup(tl_tmpdir());
    char *tpl = tl_source_path("tests/data/definitions/action_order.json.in");
    char *text = tl_read_file(tpl);
    char *def = tw_fill(text, "anon.", TW_LIST("@D1@", "1h", "@D2@", "1h"));
    char *defs = tl_write_file(dir, "action_order.json", def);
    char *cfg = NULL;
    ck_assert_int_ge(asprintf(&cfg,
                              "{\"brokers\":\"%s\",\"database\":\"%s\",\"definitions\":\"%s\","
                              "\"http\":{\"listen\":\"0.0.0.0:0\"}}",
                              tl_kafka_brokers(), tl_db_create("actanon"), defs),
                     0);
    char *path = tl_write_file(dir, "config.json", cfg);
    const char *argv[] = {NULL, "run", "--config", path, NULL};
    tl_output_t o = tl_steward(argv, NULL);
    ck_assert_msg(o.status == 2 && tl_contains(o.err, "not a loopback address") &&
                      tl_contains(o.err, "http.allow_anonymous_read"),
                  "exit %d: %s", o.status, o.err);
    tl_output_free(&o);
    free(path);
    free(cfg);
    free(defs);
    free(def);
    free(text);
    free(tpl);
    free(dir);
}
END_TEST

Suite *actions_http_suite(void)
{
    Suite *s = suite_create("actions_http");
    TCase *tc = tcase_create("actions_http");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, http_actions_need_an_operate_token);
    tcase_add_test(tc, http_upgrade_needs_an_operate_token);
    tcase_add_test(tc, a_listener_off_the_loopback_needs_tokens);
    suite_add_tcase(s, tc);
    return s;
}
