/*
 * test_actions - operator actions end to end: steward run on the real
 * broker and PostgreSQL pages the test's receiver (PagerDuty and webhook)
 * and a real Alertmanager; the verbs act through the CLI.
 *
 *   ack, close    an acknowledge reaches PagerDuty and the webhook; close
 *                 finishes the instance, resolves its alert everywhere,
 *                 and both are audited; acting again is refused
 *   move, claim   a claim keeps others out; move restarts the deadline;
 *                 retry is refused; bad targets are usage errors
 *   race          an action waits for the instance's lock like a batch,
 *                 and the result is consistent with the event that raced it
 */
#include "receiver.h"
#include "testlib.h"

#include <check.h>
#include <curl/curl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pwd.h>
#include <unistd.h>

typedef struct world {
    char *prefix;
    char *group;
    const char *db_url;
    PGconn *conn;
    char *dir;
    char *log;
    int pid;
} world_t;

static world_t w;

static char *topic(const char *name)
{
    char *t = NULL;
    ck_assert_int_ge(asprintf(&t, "%s%s", w.prefix, name), 0);
    return t;
}

static char *fill(const char *text, const char *d1, const char *d2)
{
    size_t cap = strlen(text) + 4096, len = 0;
    char *out = calloc(1, cap);
    for (const char *p = text; *p;) {
        const char *with = strncmp(p, "@P@", 3) == 0    ? w.prefix
                           : strncmp(p, "@D1@", 4) == 0 ? d1
                           : strncmp(p, "@D2@", 4) == 0 ? d2
                                                        : NULL;
        if (with != NULL) {
            len += (size_t) snprintf(out + len, cap - len, "%s", with);
            p += p[2] == '@' ? 3 : 4;
        } else {
            out[len++] = *p++;
        }
    }
    return out;
}

/* Topics, definition, migrated database, config with `routes`, steward run. */
static void world_start(const char *name, const char *d1, const char *d2, const char *routes)
{
    memset(&w, 0, sizeof w);
    char *base = tl_unique(name);
    ck_assert_int_ge(asprintf(&w.prefix, "%s.", base), 0);
    w.group = base;
    w.db_url = tl_db_create(name);
    w.conn = tl_db_connect(w.db_url);
    w.dir = strdup(tl_tmpdir());
    w.log = tl_write_file(w.dir, "steward.log", "");

    char *tpl = tl_source_path("tests/data/definitions/action_order.json.in");
    char *text = tl_read_file(tpl);
    char *def = fill(text, d1, d2);
    free(tl_write_file(w.dir, "action_order.json", def));
    free(def);
    free(text);
    free(tpl);

    char *topics[3] = {topic("orders"), topic("payments"), topic("shipping")};
    tl_kafka_create_topics((const char *const *) topics, 3, 1);
    for (int i = 0; i < 3; i++)
        free(topics[i]);
    const char *margv[] = {NULL, "migrate", "--database", w.db_url, NULL};
    tl_output_t o = tl_steward(margv, NULL);
    ck_assert_msg(o.status == 0, "migrate: %s", o.err);
    tl_output_free(&o);

    json_error_t jerr;
    json_t *r = json_loads(routes, 0, &jerr);
    ck_assert_msg(r != NULL, "routes: %s", jerr.text);
    char defs[1024], path[1024];
    snprintf(defs, sizeof defs, "%s/action_order.json", w.dir);
    json_t *cfg =
        json_pack("{s:s, s:s, s:s, s:s, s:{s:s, s:s}, s:{s:s, s:s, s:s, s:s}, s:{s:s}, s:o, s:s}",
                  "brokers", tl_kafka_brokers(), "database", w.db_url, "definitions", defs, "group",
                  w.group, "scheduler", "interval", "200ms", "grace", "200ms", "notifier",
                  "interval", "100ms", "timeout", "2s", "max_backoff", "1s", "alertmanager_resend",
                  "1s", "http", "listen", "", "routes", r, "log_level", "info");
    snprintf(path, sizeof path, "%s/config.json", w.dir);
    ck_assert_int_eq(json_dump_file(cfg, path, JSON_INDENT(2)), 0);
    json_decref(cfg);

    const char *argv[] = {NULL, "run", "--config", path, NULL};
    w.pid = tl_steward_spawn(argv, NULL, w.log);
    const char *params[1] = {w.group};
    if (!tl_db_wait(w.conn, "SELECT count(*) FROM steward.offsets WHERE consumer_group = $1", 1,
                    params, "3", 60, NULL)) {
        tl_print_tail(w.log, 6000);
        ck_abort_msg("partitions not claimed (steward's log above)");
    }
}

static void world_stop(void)
{
    if (w.pid > 0)
        tl_stop(w.pid, SIGKILL, 10);
    PQfinish(w.conn);
}

static void send_event(const char *name, const char *type, const char *key)
{
    char value[256], *t = topic(name);
    tl_producer_t *p = tl_producer_new();
    snprintf(value, sizeof value, "{\"type\":\"%s\",\"id\":\"%s-%s\",\"order_id\":\"%s\"}", type,
             type, key, key);
    tl_produce(p, t, -1, value, -1, NULL, 0);
    tl_producer_free(p);
    free(t);
}

static void wait_sql(const char *sql, const char *key, const char *expected, int timeout_s)
{
    char *last = NULL;
    const char *params[1] = {key};
    if (!tl_db_wait(w.conn, sql, 1, params, expected, timeout_s, &last)) {
        tl_print_tail(w.log, 6000);
        ck_abort_msg("%s: got %s, expected %s (steward's log above)", sql, last, expected);
    }
}

static char *scalar(const char *sql, const char *key)
{
    const char *params[1] = {key};
    return tl_db_scalar(w.conn, sql, 1, params);
}

/* Asserts that sql with $1 = key gives expected. */
static void expect(const char *sql, const char *key, const char *expected)
{
    char *got = scalar(sql, key);
    ck_assert_msg(got != NULL && strcmp(got, expected) == 0, "%s: got %s, expected %s", sql, got,
                  expected);
    free(got);
}

/* Runs `steward ARGS... --database DB` as actor (NULL: --actor not given). */
static tl_output_t verb(const char *actor, const char *a0, const char *a1, const char *a2,
                        const char *a3, const char *a4, const char *a5, const char *a6)
{
    const char *argv[16] = {NULL};
    int n = 1;
    const char *args[] = {a0, a1, a2, a3, a4, a5, a6};
    for (size_t i = 0; i < sizeof args / sizeof args[0] && args[i] != NULL; i++)
        argv[n++] = args[i];
    argv[n++] = "--database";
    argv[n++] = w.db_url;
    if (actor != NULL) {
        argv[n++] = "--actor";
        argv[n++] = actor;
    }
    return tl_steward(argv, NULL);
}

/* The JSON body of the receiver's i-th request. */
static json_t *request_json(rcv_t *r, size_t i, char **path)
{
    rcv_request_t req = rcv_get(r, i);
    json_t *doc = json_loads(req.body, 0, NULL);
    ck_assert_msg(doc != NULL, "request %zu is not JSON: %s", i, req.body);
    if (path != NULL)
        *path = strdup(req.path);
    rcv_request_clear(&req);
    return doc;
}

/* The index of the first request from `from` on with path and field == value; -1. */
static long find_request(rcv_t *r, size_t from, const char *path, const char *field,
                         const char *value)
{
    for (size_t i = from; i < rcv_count(r); i++) {
        char *p;
        json_t *doc = request_json(r, i, &p);
        bool match =
            strcmp(p, path) == 0 && strcmp(json_string_value(json_object_get(doc, field)) != NULL
                                               ? json_string_value(json_object_get(doc, field))
                                               : "",
                                           value) == 0;
        free(p);
        json_decref(doc);
        if (match)
            return (long) i;
    }
    return -1;
}

static long wait_request(rcv_t *r, const char *path, const char *field, const char *value)
{
    for (int i = 0; i < 300; i++) {
        long at = find_request(r, 0, path, field, value);
        if (at >= 0)
            return at;
        usleep(100 * 1000);
    }
    tl_print_tail(w.log, 4000);
    ck_abort_msg("no %s with %s=%s at the receiver", path, field, value);
    return -1;
}

/* The Alertmanager state of the alert for `key`: "active", or "" when not listed. */
static char *am_state(const char *am, const char *key)
{
    char url[1024], filter[256];
    long status;
    CURL *curl = curl_easy_init();
    snprintf(filter, sizeof filter, "key=\"%s\"", key);
    char *escaped = curl_easy_escape(curl, filter, 0);
    snprintf(url, sizeof url, "%s/api/v2/alerts?filter=%s", am, escaped);
    curl_free(escaped);
    curl_easy_cleanup(curl);
    char *body = tl_http_get(url, &status);
    ck_assert_msg(status == 200, "GET %s: %ld %s", url, status, body);
    json_t *list = json_loads(body, 0, NULL);
    free(body);
    ck_assert_ptr_nonnull(list);
    const char *state = "";
    if (json_array_size(list) > 0)
        state = json_string_value(
            json_object_get(json_object_get(json_array_get(list, 0), "status"), "state"));
    char *copy = strdup(state != NULL ? state : "");
    json_decref(list);
    return copy;
}

static void wait_am(const char *am, const char *key, const char *expected)
{
    for (int i = 0; i < 300; i++) {
        char *state = am_state(am, key);
        bool match = strcmp(state, expected) == 0;
        free(state);
        if (match)
            return;
        usleep(100 * 1000);
    }
    ck_abort_msg("Alertmanager never showed %s as '%s'", key, expected);
}

/* ---- ack, close ------------------------------------------------------------ */

START_TEST(ack_then_close_reaches_every_sink_and_is_audited)
{
    const char *am = getenv("STEWARD_TEST_ALERTMANAGER_URL");
    ck_assert_msg(am != NULL && *am, "STEWARD_TEST_ALERTMANAGER_URL is not set");
    rcv_t *r = rcv_new();
    char routes[2048];
    snprintf(routes, sizeof routes,
             "{\"payments\":[{\"type\":\"pagerduty\",\"name\":\"pd\","
             "\"routing_key\":\"R0UTINGKEYSECRET\",\"url\":\"%s/v2/enqueue\"},"
             "{\"type\":\"webhook\",\"name\":\"hook\",\"url\":\"%s/hook\"},"
             "{\"type\":\"alertmanager\",\"name\":\"am\",\"url\":\"%s\"}],"
             "\"default\":[{\"type\":\"log\"}]}",
             rcv_url(r), rcv_url(r), am);
    world_start("actclose", "1s", "1h", routes);

    char *key = tl_unique("ORD-");
    send_event("orders", "OrderPlaced", key);
    wait_sql("SELECT count(*) FROM steward.alerts WHERE key = $1 AND resolved_at IS NULL", key, "1",
             30);
    wait_request(r, "/v2/enqueue", "event_action", "trigger");
    wait_request(r, "/hook", "event", "trigger");
    wait_am(am, key, "active");
    char *id = scalar("SELECT id FROM steward.alerts WHERE key = $1", key);

    /* ack without a reason is a usage error and changes nothing. */
    tl_output_t o = verb("alice", "ack", id, NULL, NULL, NULL, NULL, NULL);
    ck_assert_msg(o.status == 2 && tl_contains(o.err, "--reason"), "ack: %d %s", o.status, o.err);
    tl_output_free(&o);

    o = verb("alice", "ack", id, "--reason", "looking at the payment gateway", NULL, NULL, NULL);
    ck_assert_msg(o.status == 0, "ack: %d %s", o.status, o.err);
    tl_output_free(&o);
    expect("SELECT acked_by || ' ' || (resolved_at IS NULL) FROM "
           "steward.alerts WHERE key = $1",
           key, "alice true");
    long pd_ack = wait_request(r, "/v2/enqueue", "event_action", "acknowledge");
    json_t *ack = request_json(r, (size_t) pd_ack, NULL);
    char *dedup = scalar("SELECT dedup_key FROM steward.alerts WHERE key = $1", key);
    ck_assert_str_eq(json_string_value(json_object_get(ack, "dedup_key")), dedup);
    json_decref(ack);
    wait_request(r, "/hook", "event", "acknowledge");
    /* Acknowledged is still open: Alertmanager keeps it active. */
    wait_am(am, key, "active");

    /* A second ack is refused: it already is. */
    o = verb("bob", "ack", id, "--reason", "me too", NULL, NULL, NULL);
    ck_assert_msg(o.status == 1 && tl_contains(o.err, "already acknowledged by alice"),
                  "second ack: %d %s", o.status, o.err);
    tl_output_free(&o);

    /* An outcome the definition does not have: usage error, listing them. */
    o = verb("alice", "close", "action_order", key, "--as", "refunded", "--reason", "x");
    ck_assert_msg(o.status == 2 && tl_contains(o.err, "outcomes: "), "close --as refunded: %d %s",
                  o.status, o.err);
    tl_output_free(&o);

    o = verb("alice", "close", "action_order", key, "--as", "cancelled", "--reason",
             "refunded by support, ticket 4411");
    ck_assert_msg(o.status == 0, "close: %d %s", o.status, o.err);
    tl_output_free(&o);
    expect("SELECT state || ' ' || status FROM steward.instances WHERE key = $1", key,
           "cancelled cancelled");
    expect("SELECT resolved_by || ' ' || resolution FROM steward.alerts "
           "WHERE key = $1",
           key, "alice closed by alice");
    expect("SELECT string_agg(event_type || ' ' || coalesce(from_state, '-') || "
           "' ' || coalesce(to_state, '-') || ' ' || actor || ' ' || reason, "
           "'; ' ORDER BY id) FROM steward.history WHERE key = $1 AND "
           "outcome = 'operator'",
           key,
           "operator:ack awaiting_payment awaiting_payment alice looking at the "
           "payment gateway; operator:close awaiting_payment cancelled alice refunded "
           "by support, ticket 4411");
    wait_request(r, "/v2/enqueue", "event_action", "resolve");
    wait_request(r, "/hook", "event", "resolve");
    wait_am(am, key, "");

    /* inspect shows the actions with who and why. */
    const char *iargv[] = {NULL, "inspect", "action_order", key, "--database", w.db_url, NULL};
    o = tl_steward(iargv, NULL);
    ck_assert_msg(o.status == 0 && tl_contains(o.out, "operator:close") &&
                      tl_contains(o.out, "by alice: refunded by support, ticket 4411"),
                  "inspect: %s", o.out);
    tl_output_free(&o);

    /* Stale: it already finished, the alert is already resolved. */
    o = verb("bob", "close", "action_order", key, "--as", "success", "--reason", "late");
    ck_assert_msg(o.status == 1 && tl_contains(o.err, "already finished"), "close again: %d %s",
                  o.status, o.err);
    tl_output_free(&o);
    o = verb("bob", "resolve", id, "--reason", "late", NULL, NULL, NULL);
    ck_assert_msg(o.status == 1 && tl_contains(o.err, "already resolved"), "resolve: %d %s",
                  o.status, o.err);
    tl_output_free(&o);
    expect("SELECT count(*) FROM steward.history WHERE key = $1 AND "
           "outcome = 'operator'",
           key, "2");

    char *log = tl_read_file(w.log);
    ck_assert_msg(!tl_contains(log, "R0UTINGKEYSECRET"), "the routing key was logged");
    free(log);
    free(dedup);
    free(id);
    free(key);
    world_stop();
    rcv_free(r);
}
END_TEST

START_TEST(resolve_by_hand_pages_the_resolve)
{
    rcv_t *r = rcv_new();
    char routes[1024];
    snprintf(routes, sizeof routes,
             "{\"payments\":[{\"type\":\"webhook\",\"name\":\"hook\",\"url\":\"%s/hook\"}],"
             "\"default\":[{\"type\":\"log\"}]}",
             rcv_url(r));
    world_start("actresolve", "1s", "1h", routes);
    char *key = tl_unique("ORD-");
    send_event("orders", "OrderPlaced", key);
    wait_request(r, "/hook", "event", "trigger");
    char *id = scalar("SELECT id FROM steward.alerts WHERE key = $1", key);

    tl_output_t o = verb(NULL, "resolve", id, "--reason", "gateway fixed", "--json", NULL, NULL);
    ck_assert_msg(o.status == 0, "resolve: %d %s", o.status, o.err);
    json_t *doc = json_loads(o.out, 0, NULL);
    ck_assert_msg(doc != NULL, "resolve --json: %s", o.out);
    /* No --actor and no $STEWARD_ACTOR: the OS user name. */
    struct passwd *pw = getpwuid(geteuid());
    ck_assert_str_eq(json_string_value(json_object_get(doc, "actor")), pw->pw_name);
    ck_assert(json_is_true(json_object_get(json_object_get(doc, "after"), "resolved")));
    json_decref(doc);
    tl_output_free(&o);
    long at = wait_request(r, "/hook", "event", "resolve");
    json_t *body = request_json(r, (size_t) at, NULL);
    expect("SELECT resolution FROM steward.alerts WHERE key = $1", key,
           json_string_value(json_object_get(json_object_get(body, "alert"), "resolution")));
    json_decref(body);
    /* The instance is untouched: still waiting for its payment. */
    expect("SELECT state || ' ' || status FROM steward.instances WHERE key = $1", key,
           "awaiting_payment active");
    expect("SELECT event_type || ' ' || (actor <> '') FROM steward.history "
           "WHERE key = $1 AND outcome = 'operator'",
           key, "operator:resolve true");
    free(id);
    free(key);
    world_stop();
    rcv_free(r);
}
END_TEST

/* ---- move, claim, retry ----------------------------------------------------- */

START_TEST(claim_keeps_others_out_and_move_restarts_the_deadline)
{
    world_start("actmove", "1h", "2h", "{\"default\":[{\"type\":\"log\"}]}");
    char *key = tl_unique("ORD-");
    send_event("orders", "OrderPlaced", key);
    wait_sql("SELECT state FROM steward.instances WHERE key = $1", key, "awaiting_payment", 30);

    tl_output_t o =
        verb("alice", "claim", "action_order", key, "--reason", "investigating", NULL, NULL);
    ck_assert_msg(o.status == 0, "claim: %d %s", o.status, o.err);
    tl_output_free(&o);
    o = verb("bob", "claim", "action_order", key, "--reason", "mine", NULL, NULL);
    ck_assert_msg(o.status == 1 && tl_contains(o.err, "already claimed by alice"), "claim: %d %s",
                  o.status, o.err);
    tl_output_free(&o);
    o = verb("bob", "move", "action_order", key, "--to", "awaiting_dispatch", "--reason", "x");
    ck_assert_msg(o.status == 1 && tl_contains(o.err, "claimed by alice"), "bob move: %d %s",
                  o.status, o.err);
    tl_output_free(&o);

    const char *iargv[] = {NULL, "inspect", "action_order", key, "--database", w.db_url, NULL};
    o = tl_steward(iargv, NULL);
    ck_assert_msg(tl_contains(o.out, "claimed by        alice"), "inspect: %s", o.out);
    tl_output_free(&o);

    /* A terminal state is for close; an unknown one lists the states. */
    o = verb("alice", "move", "action_order", key, "--to", "completed", "--reason", "x");
    ck_assert_msg(o.status == 2 && tl_contains(o.err, "use steward close"), "move: %d %s", o.status,
                  o.err);
    tl_output_free(&o);
    o = verb("alice", "move", "action_order", key, "--to", "nowhere", "--reason", "x");
    ck_assert_msg(o.status == 2 && tl_contains(o.err, "awaiting_payment, awaiting_dispatch"),
                  "move: %d %s", o.status, o.err);
    tl_output_free(&o);

    o = verb("alice", "move", "action_order", key, "--to", "awaiting_dispatch", "--reason",
             "payment confirmed by phone");
    ck_assert_msg(o.status == 0, "move: %d %s", o.status, o.err);
    tl_output_free(&o);
    /* The new state's 2h deadline counts from the move. */
    expect("SELECT state || ' ' || (abs(extract(epoch FROM deadline_at - "
           "state_entered_at) - 7200) < 1) || ' ' || (state_entered_at > "
           "started_at) FROM steward.instances WHERE key = $1",
           key, "awaiting_dispatch true true");
    expect("SELECT from_state || ' ' || to_state || ' ' || actor FROM "
           "steward.history WHERE key = $1 AND event_type = 'operator:move'",
           key, "awaiting_payment awaiting_dispatch alice");

    /* retry needs active mode, which is not built: refused, nothing recorded. */
    o = verb("alice", "retry", "action_order", key, "--reason", "again", NULL, NULL);
    ck_assert_msg(o.status == 1 && tl_contains(o.err, "active mode is not built yet"),
                  "retry: %d %s", o.status, o.err);
    tl_output_free(&o);

    o = verb("bob", "release", "action_order", key, "--reason", "x", NULL, NULL);
    ck_assert_msg(o.status == 1 && tl_contains(o.err, "claimed by alice"), "bob release: %d %s",
                  o.status, o.err);
    tl_output_free(&o);
    o = verb("alice", "release", "action_order", key, "--reason", "handing over", NULL, NULL);
    ck_assert_msg(o.status == 0, "release: %d %s", o.status, o.err);
    tl_output_free(&o);
    ck_assert_ptr_null(scalar("SELECT claimed_by FROM steward.instances WHERE key = $1", key));
    expect("SELECT string_agg(event_type, ' ' ORDER BY id) FROM "
           "steward.history WHERE key = $1 AND outcome = 'operator'",
           key, "operator:claim operator:move operator:release");

    /* The next event applies to the moved instance as to any other. */
    send_event("shipping", "ShipmentDispatched", key);
    wait_sql("SELECT status FROM steward.instances WHERE key = $1", key, "success", 30);
    free(key);
    world_stop();
}
END_TEST

/* ---- race ------------------------------------------------------------------- */

START_TEST(action_waits_for_the_instance_lock_and_agrees_with_the_event)
{
    world_start("actrace", "1h", "1h", "{\"default\":[{\"type\":\"log\"}]}");
    char *key = tl_unique("ORD-");
    send_event("orders", "OrderPlaced", key);
    wait_sql("SELECT state FROM steward.instances WHERE key = $1", key, "awaiting_payment", 30);

    /* Hold the instance's lock as a batch would. */
    PGconn *holder = tl_db_connect(w.db_url);
    const char *lp[2] = {"action_order", key};
    PGresult *res =
        PQexecParams(holder, "SELECT pg_advisory_lock(steward.instance_lock_key($1, $2))", 2, NULL,
                     lp, NULL, NULL, 0);
    ck_assert_int_eq(PQresultStatus(res), PGRES_TUPLES_OK);
    PQclear(res);

    char *alog = tl_write_file(w.dir, "close.log", "");
    const char *argv[] = {NULL,      "close",     "action_order", key,
                          "--as",    "cancelled", "--reason",     "customer called",
                          "--actor", "carol",     "--database",   w.db_url,
                          NULL};
    int pid = tl_steward_spawn(argv, NULL, alog);
    /* The action is waiting for the lock, not acting. */
    const char *ap[1] = {"steward close"};
    ck_assert_msg(tl_db_wait(w.conn,
                             "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 "
                             "AND wait_event_type = 'Lock' AND wait_event = 'advisory'",
                             1, ap, "1", 30, NULL),
                  "steward close is not waiting for the instance's lock");
    /* The event that completes the payment races it: its batch waits too. */
    send_event("payments", "PaymentCaptured", key);
    ck_assert_msg(tl_db_wait(w.conn,
                             "SELECT count(*) FROM pg_stat_activity WHERE datname = "
                             "current_database() AND wait_event_type = 'Lock' AND wait_event = "
                             "'advisory'",
                             0, NULL, "2", 30, NULL),
                  "the batch with the payment is not waiting for the instance's lock");

    res = PQexecParams(holder, "SELECT pg_advisory_unlock(steward.instance_lock_key($1, $2))", 2,
                       NULL, lp, NULL, NULL, 0);
    PQclear(res);
    int rc = tl_stop(pid, 0, 30);
    char *out = tl_read_file(alog);
    ck_assert_msg(rc == 0, "close exit %d: %s", rc, out);
    wait_sql("SELECT (SELECT state || ' ' || status FROM steward.instances WHERE key = $1) || "
             "' ' || (SELECT count(*) FROM steward.history WHERE key = $1 AND event_type = "
             "'PaymentCaptured')",
             key, "cancelled cancelled 1", 30);
    /* Whichever went first, the close judged the state the other left: after
     * the payment it closed awaiting_dispatch; before it, awaiting_payment,
     * and the payment then found a finished instance. */
    char *order = scalar("SELECT CASE WHEN p.id < c.id "
                         "  THEN 'event first ' || (p.outcome = 'advanced' AND "
                         "    c.from_state = 'awaiting_dispatch') "
                         "  ELSE 'close first ' || (p.outcome <> 'advanced' AND "
                         "    c.from_state = 'awaiting_payment') END "
                         "FROM steward.history p, steward.history c WHERE p.key = $1 AND "
                         "c.key = $1 AND p.event_type = 'PaymentCaptured' AND "
                         "c.event_type = 'operator:close' AND c.actor = 'carol'",
                         key);
    ck_assert_msg(order != NULL && tl_contains(order, " true"), "order: %s", order);
    free(order);
    free(out);
    free(alog);
    PQfinish(holder);
    free(key);
    world_stop();
}
END_TEST

Suite *actions_suite(void)
{
    Suite *s = suite_create("actions");
    TCase *tc = tcase_create("actions");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, ack_then_close_reaches_every_sink_and_is_audited);
    tcase_add_test(tc, resolve_by_hand_pages_the_resolve);
    tcase_add_test(tc, claim_keeps_others_out_and_move_restarts_the_deadline);
    tcase_add_test(tc, action_waits_for_the_instance_lock_and_agrees_with_the_event);
    suite_add_tcase(s, tc);
    return s;
}
