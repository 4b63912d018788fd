/*
 * test_actions - operator actions end to end, through the CLI (the actions
 * suite): steward run on the real broker and PostgreSQL pages the test's
 * receiver (PagerDuty and webhook) and a real Alertmanager; the verbs act
 * through the CLI. The same verbs through the HTTP API, behind its tokens,
 * are test_actions_http.c (actions_http); the world both run in is here,
 * declared in test_actions.h.
 *
 *   ack, close    an acknowledge reaches PagerDuty and the webhook; close
 *                 finishes the instance, resolves its alert everywhere,
 *                 and both are audited; acting again is refused
 *   move, claim   a claim keeps others out; move restarts the deadline;
 *                 retry is refused in shadow mode; bad targets are usage errors
 *   race          an action waits for the instance's lock like a batch,
 *                 and the result is consistent with the event that raced it
 *   silences      a silence holds the pages until it is lifted or ends
 *   verb table    every verb's command line is read from its row
 *   engine        a close is decided by the engine, and what a person
 *                 reads of an instance stands at the watermark (no broker:
 *                 the operator's functions on a database alone)
 */
#include "test_actions.h"

#include "manager/operator/actions.h"
#include "manager/operator/query.h"
#include "receiver.h"
#include "testlib.h"
#include "world.h"

#include <check.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pwd.h>
#include <unistd.h>

/* ---- the world both suites run in (test_actions.h) ---------------------------- */

void ta_world_start(tw_world_t *w, const char *name, const char *d1, const char *d2,
                    const char *routes, const char *listen, const char *tokens_file)
{
    tw_init(w, name);
    free(tw_write_template(w, "tests/data/definitions/action_order.json.in", "action_order.json",
                           TW_LIST("@D1@", d1, "@D2@", d2)));
    tw_create_topics(w, TW_LIST("orders", "payments", "shipping"), 1);
    tw_migrate(w);

    json_error_t jerr;
    json_t *r = json_loads(routes, 0, &jerr);
    ck_assert_msg(r != NULL, "routes: %s", jerr.text);
    json_t *cfg = tw_config(w, "action_order.json");
    json_t *parts = json_pack("{s:{s:s, s:s}, s:{s:s, s:s, s:s, s:s}, s:{s:s}, s:o}", "scheduler",
                              "interval", "200ms", "grace", "200ms", "notifier", "interval",
                              "100ms", "timeout", "2s", "max_backoff", "1s", "alertmanager_resend",
                              "1s", "http", "listen", listen != NULL ? listen : "", "routes", r);
    ck_assert_int_eq(json_object_update(cfg, parts), 0);
    json_decref(parts);
    if (tokens_file != NULL)
        json_object_set_new(json_object_get(cfg, "http"), "tokens_file", json_string(tokens_file));
    tw_config_write(w, cfg);

    tw_start(w, NULL, false);
    tw_wait(w, "SELECT count(*) FROM steward.offsets WHERE consumer_group = $1", TW_LIST(w->group),
            "3", 60, "partitions claimed");
}

void ta_send_event(const tw_world_t *w, const char *name, const char *type, const char *key)
{
    char value[256], *t = tw_topic(w, name);
    tl_producer_t *p = tl_producer_new();
    snprintf(value, sizeof value, "{\"type\":\"%s\",\"id\":\"%s-%s\",\"order_id\":\"%s\"}", type,
             type, key, key);
    tl_produce(p, t, -1, value, -1, NULL, 0);
    tl_producer_free(p);
    free(t);
}

void ta_wait_sql(const tw_world_t *w, const char *sql, const char *key, const char *expected,
                 int timeout_s)
{
    tw_wait(w, sql, TW_LIST(key), expected, timeout_s, sql);
}

char *ta_scalar(const tw_world_t *w, const char *sql, const char *key)
{
    return tw_scalar(w, sql, TW_LIST(key));
}

void ta_expect(const tw_world_t *w, const char *sql, const char *key, const char *expected)
{
    tw_expect(w, sql, TW_LIST(key), expected);
}

json_t *ta_request_json(rcv_t *r, size_t i, char **path)
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
        json_t *doc = ta_request_json(r, i, &p);
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

typedef struct request_match {
    rcv_t *r;
    const char *path, *field, *value;
    long at;
} request_match_t;

static bool request_arrived(void *arg, char *seen, size_t seen_size)
{
    request_match_t *m = arg;
    m->at = find_request(m->r, 0, m->path, m->field, m->value);
    snprintf(seen, seen_size, "%zu requests, none of them it", rcv_count(m->r));
    return m->at >= 0;
}

long ta_wait_request(const tw_world_t *w, rcv_t *r, const char *path, const char *field,
                     const char *value)
{
    request_match_t m = {r, path, field, value, -1};
    char what[256];
    snprintf(what, sizeof what, "a %s with %s=%s at the receiver", path, field, value);
    tl_wait_until(request_arrived, &m, 30, what, w->log);
    return m.at;
}

/* ---- the actions suite -------------------------------------------------------- */

static tw_world_t w;

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
    ta_world_start(&w, "actclose", "1s", "1h", routes, NULL, NULL);

    char *key = tl_unique("ORD-");
    ta_send_event(&w, "orders", "OrderPlaced", key);
    ta_wait_sql(&w, "SELECT count(*) FROM steward.alerts WHERE key = $1 AND resolved_at IS NULL",
                key, "1", 30);
    ta_wait_request(&w, r, "/v2/enqueue", "event_action", "trigger");
    ta_wait_request(&w, r, "/hook", "event", "trigger");
    tl_wait_am(am, key, "active", 30);
    char *id = ta_scalar(&w, "SELECT id FROM steward.alerts WHERE key = $1", key);

    /* ack without a reason is a usage error and changes nothing. */
    tl_output_t o = verb("alice", "ack", id, NULL, NULL, NULL, NULL, NULL);
    ck_assert_msg(o.status == 2 && tl_contains(o.err, "--reason"), "ack: %d %s", o.status, o.err);
    tl_output_free(&o);

    o = verb("alice", "ack", id, "--reason", "looking at the payment gateway", NULL, NULL, NULL);
    ck_assert_msg(o.status == 0, "ack: %d %s", o.status, o.err);
    tl_output_free(&o);
    ta_expect(&w,
              "SELECT acked_by || ' ' || (resolved_at IS NULL) FROM "
              "steward.alerts WHERE key = $1",
              key, "alice true");
    long pd_ack = ta_wait_request(&w, r, "/v2/enqueue", "event_action", "acknowledge");
    json_t *ack = ta_request_json(r, (size_t) pd_ack, NULL);
    char *dedup = ta_scalar(&w, "SELECT dedup_key FROM steward.alerts WHERE key = $1", key);
    ck_assert_str_eq(json_string_value(json_object_get(ack, "dedup_key")), dedup);
    json_decref(ack);
    ta_wait_request(&w, r, "/hook", "event", "acknowledge");
    /* Acknowledged is still open: Alertmanager keeps it active. */
    tl_wait_am(am, key, "active", 30);

    const char *stuck[] = {NULL, "stuck", "--database", w.db_url, NULL};
    o = tl_steward(stuck, NULL);
    ck_assert_msg(tl_contains(o.out, "acknowledged by alice"), "stuck: %s", o.out);
    tl_output_free(&o);

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
    ta_expect(&w, "SELECT state || ' ' || status FROM steward.instances WHERE key = $1", key,
              "cancelled cancelled");
    ta_expect(&w,
              "SELECT resolved_by || ' ' || resolution FROM steward.alerts "
              "WHERE key = $1",
              key, "alice closed by alice");
    ta_expect(&w,
              "SELECT string_agg(event_type || ' ' || coalesce(from_state, '-') || "
              "' ' || coalesce(to_state, '-') || ' ' || actor || ' ' || reason, "
              "'; ' ORDER BY id) FROM steward.history WHERE key = $1 AND "
              "outcome = 'operator'",
              key,
              "operator:ack awaiting_payment awaiting_payment alice looking at the "
              "payment gateway; operator:close awaiting_payment cancelled alice refunded "
              "by support, ticket 4411");
    ta_wait_request(&w, r, "/v2/enqueue", "event_action", "resolve");
    ta_wait_request(&w, r, "/hook", "event", "resolve");
    tl_wait_am(am, key, "", 30);

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
    ta_expect(&w,
              "SELECT count(*) FROM steward.history WHERE key = $1 AND "
              "outcome = 'operator'",
              key, "2");

    char *log = tl_read_file(w.log);
    ck_assert_msg(!tl_contains(log, "R0UTINGKEYSECRET"), "the routing key was logged");
    free(log);
    free(dedup);
    free(id);
    free(key);
    tw_teardown(&w);
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
    ta_world_start(&w, "actresolve", "1s", "1h", routes, NULL, NULL);
    char *key = tl_unique("ORD-");
    ta_send_event(&w, "orders", "OrderPlaced", key);
    ta_wait_request(&w, r, "/hook", "event", "trigger");
    char *id = ta_scalar(&w, "SELECT id FROM steward.alerts WHERE key = $1", key);

    /* Who owns the investigation travels with the pages, and shows in stuck. */
    tl_output_t o = verb("carol", "claim", "action_order", key, "--reason", "mine", NULL, NULL);
    ck_assert_msg(o.status == 0, "claim: %s", o.err);
    tl_output_free(&o);
    const char *stuck[] = {NULL, "stuck", "--database", w.db_url, NULL};
    o = tl_steward(stuck, NULL);
    ck_assert_msg(tl_contains(o.out, key) && tl_contains(o.out, "claimed by carol") &&
                      tl_contains(o.out, "[alert "),
                  "stuck: %s", o.out);
    tl_output_free(&o);
    o = verb(NULL, "resolve", id, "--reason", "gateway fixed", "--json", NULL, NULL);
    ck_assert_msg(o.status == 0, "resolve: %d %s", o.status, o.err);
    json_t *doc = json_loads(o.out, 0, NULL);
    ck_assert_msg(doc != NULL, "resolve --json: %s", o.out);
    /* No --actor and no $STEWARD_ACTOR: the OS user name. */
    struct passwd *pw = getpwuid(geteuid());
    ck_assert_str_eq(json_string_value(json_object_get(doc, "actor")), pw->pw_name);
    ck_assert(json_is_true(json_object_get(json_object_get(doc, "after"), "resolved")));
    json_decref(doc);
    tl_output_free(&o);
    long at = ta_wait_request(&w, r, "/hook", "event", "resolve");
    json_t *body = ta_request_json(r, (size_t) at, NULL);
    ck_assert_str_eq(json_string_value(json_object_get(
                         json_object_get(json_object_get(body, "alert"), "details"), "claimed_by")),
                     "carol");
    ta_expect(&w, "SELECT resolution FROM steward.alerts WHERE key = $1", key,
              json_string_value(json_object_get(json_object_get(body, "alert"), "resolution")));
    json_decref(body);
    /* The instance is untouched: still waiting for its payment. */
    ta_expect(&w, "SELECT state || ' ' || status FROM steward.instances WHERE key = $1", key,
              "awaiting_payment active");
    ta_expect(&w,
              "SELECT string_agg(event_type || ' ' || (actor <> ''), ', ' ORDER BY id) FROM "
              "steward.history WHERE key = $1 AND outcome = 'operator'",
              key, "operator:claim true, operator:resolve true");
    free(id);
    free(key);
    tw_teardown(&w);
    rcv_free(r);
}
END_TEST

/* ---- move, claim, retry ----------------------------------------------------- */

START_TEST(claim_keeps_others_out_and_move_restarts_the_deadline)
{
    ta_world_start(&w, "actmove", "1h", "2h", "{\"default\":[{\"type\":\"log\"}]}", NULL, NULL);
    char *key = tl_unique("ORD-");
    ta_send_event(&w, "orders", "OrderPlaced", key);
    ta_wait_sql(&w, "SELECT state FROM steward.instances WHERE key = $1", key, "awaiting_payment",
                30);

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
    ta_expect(&w,
              "SELECT state || ' ' || (abs(extract(epoch FROM deadline_at - "
              "state_entered_at) - 7200) < 1) || ' ' || (state_entered_at > "
              "started_at) FROM steward.instances WHERE key = $1",
              key, "awaiting_dispatch true true");
    ta_expect(&w,
              "SELECT from_state || ' ' || to_state || ' ' || actor FROM "
              "steward.history WHERE key = $1 AND event_type = 'operator:move'",
              key, "awaiting_payment awaiting_dispatch alice");

    /* retry sends commands, which a shadow process has none of: refused,
     * nothing recorded (integration.active retries an active one). */
    o = verb("alice", "retry", "action_order", key, "--reason", "again", NULL, NULL);
    ck_assert_msg(o.status == 1 && tl_contains(o.err, "shadow mode") &&
                      tl_contains(o.err, "nothing was sent"),
                  "retry: %d %s", o.status, o.err);
    tl_output_free(&o);

    o = verb("bob", "release", "action_order", key, "--reason", "x", NULL, NULL);
    ck_assert_msg(o.status == 1 && tl_contains(o.err, "claimed by alice"), "bob release: %d %s",
                  o.status, o.err);
    tl_output_free(&o);
    o = verb("alice", "release", "action_order", key, "--reason", "handing over", NULL, NULL);
    ck_assert_msg(o.status == 0, "release: %d %s", o.status, o.err);
    tl_output_free(&o);
    ck_assert_ptr_null(
        ta_scalar(&w, "SELECT claimed_by FROM steward.instances WHERE key = $1", key));
    ta_expect(&w,
              "SELECT string_agg(event_type, ' ' ORDER BY id) FROM "
              "steward.history WHERE key = $1 AND outcome = 'operator'",
              key, "operator:claim operator:move operator:release");

    /* The next event applies to the moved instance as to any other. */
    ta_send_event(&w, "shipping", "ShipmentDispatched", key);
    ta_wait_sql(&w, "SELECT status FROM steward.instances WHERE key = $1", key, "success", 30);
    free(key);
    tw_teardown(&w);
}
END_TEST

/* ---- race ------------------------------------------------------------------- */

START_TEST(action_waits_for_the_instance_lock_and_agrees_with_the_event)
{
    ta_world_start(&w, "actrace", "1h", "1h", "{\"default\":[{\"type\":\"log\"}]}", NULL, NULL);
    char *key = tl_unique("ORD-");
    ta_send_event(&w, "orders", "OrderPlaced", key);
    ta_wait_sql(&w, "SELECT state FROM steward.instances WHERE key = $1", key, "awaiting_payment",
                30);

    /* Hold the instance's lock as a batch would. */
    PGconn *holder = tl_hold_instance_lock(w.db_url, "action_order", key);

    char *alog = tl_write_file(w.dir, "close.log", "");
    const char *argv[] = {NULL,      "close",     "action_order", key,
                          "--as",    "cancelled", "--reason",     "customer called",
                          "--actor", "carol",     "--database",   w.db_url,
                          NULL};
    int pid = tl_steward_spawn(argv, NULL, alog);
    /* The action is waiting for the lock, not acting. */
    tl_wait_lock_waiters(w.conn, "steward close", 1, 30,
                         "steward close is not waiting for the instance's lock");
    /* The event that completes the payment races it: its batch waits too. */
    ta_send_event(&w, "payments", "PaymentCaptured", key);
    tl_wait_lock_waiters(w.conn, NULL, 2, 30,
                         "the batch with the payment is not waiting for the instance's lock");

    tl_release_instance_lock(holder, "action_order", key);
    int rc = tl_stop(pid, 0, 30);
    char *out = tl_read_file(alog);
    ck_assert_msg(rc == 0, "close exit %d: %s", rc, out);
    ta_wait_sql(&w,
                "SELECT (SELECT state || ' ' || status FROM steward.instances WHERE key = $1) || "
                "' ' || (SELECT count(*) FROM steward.history WHERE key = $1 AND event_type = "
                "'PaymentCaptured')",
                key, "cancelled cancelled 1", 30);
    /* Whichever went first, the close judged the state the other left: after
     * the payment it closed awaiting_dispatch; before it, awaiting_payment,
     * and the payment then found a finished instance. */
    char *order = ta_scalar(&w,
                            "SELECT CASE WHEN p.id < c.id "
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
    free(key);
    tw_teardown(&w);
}
END_TEST

/* ---- silences --------------------------------------------------------------- */

/* Whether any request the receiver got mentions `text`. */
static bool received_mention(rcv_t *r, const char *text)
{
    for (size_t i = 0; i < rcv_count(r); i++) {
        rcv_request_t q = rcv_get(r, i);
        bool found = q.body != NULL && tl_contains(q.body, text);
        rcv_request_clear(&q);
        if (found)
            return true;
    }
    return false;
}

START_TEST(silence_holds_pages_until_it_ends)
{
    rcv_t *r = rcv_new();
    char routes[1024];
    snprintf(routes, sizeof routes,
             "{\"payments\":[{\"type\":\"webhook\",\"name\":\"hook\",\"url\":\"%s/hook\"}],"
             "\"default\":[{\"type\":\"log\"}]}",
             rcv_url(r));
    ta_world_start(&w, "actsilence", "1s", "1h", routes, NULL, NULL);

    /* A maintenance window, set before anything stalls. */
    const char *sargv[] = {NULL,      "silence", "--process",  "action_order",
                           "--for",   "1h",      "--reason",   "gateway maintenance",
                           "--actor", "alice",   "--database", w.db_url,
                           NULL};
    tl_output_t o = tl_steward(sargv, NULL);
    ck_assert_msg(o.status == 0 && tl_contains(o.out, "silence "), "silence: %d %s", o.status,
                  o.err);
    long long sid = atoll(o.out + strlen("silence "));
    tl_output_free(&o);

    char *k1 = tl_unique("ORD-"), *k2 = tl_unique("ORD-");
    ta_send_event(&w, "orders", "OrderPlaced", k1);
    ta_send_event(&w, "orders", "OrderPlaced", k2);
    ta_wait_sql(&w, "SELECT count(*) FROM steward.alerts WHERE key = $1 AND resolved_at IS NULL",
                k1, "1", 30);
    ta_wait_sql(&w, "SELECT count(*) FROM steward.alerts WHERE key = $1 AND resolved_at IS NULL",
                k2, "1", 30);

    /* Open and shown as silenced; listed with who and why. */
    const char *stuck[] = {NULL, "stuck", "--database", w.db_url, NULL};
    o = tl_steward(stuck, NULL);
    ck_assert_msg(tl_contains(o.out, k1) && tl_contains(o.out, "silenced until"), "stuck: %s",
                  o.out);
    tl_output_free(&o);
    const char *list[] = {NULL, "silences", "--database", w.db_url, NULL};
    o = tl_steward(list, NULL);
    ck_assert_msg(tl_contains(o.out, "action_order") &&
                      tl_contains(o.out, "by alice: gateway maintenance"),
                  "silences: %s", o.out);
    tl_output_free(&o);

    /* k2 is fixed by hand during the window: nobody needs to hear of it. */
    o = verb("alice", "close", "action_order", k2, "--as", "cancelled", "--reason", "refunded");
    ck_assert_msg(o.status == 0, "close: %s", o.err);
    tl_output_free(&o);

    char id[32];
    snprintf(id, sizeof id, "%lld", sid);
    o = verb("alice", "unsilence", id, "--reason", "maintenance over", NULL, NULL, NULL);
    ck_assert_msg(o.status == 0, "unsilence: %d %s", o.status, o.err);
    tl_output_free(&o);
    o = verb("alice", "unsilence", id, "--reason", "again", NULL, NULL, NULL);
    ck_assert_msg(o.status == 1 && tl_contains(o.err, "already ended"), "unsilence: %d %s",
                  o.status, o.err);
    tl_output_free(&o);

    /* What is still open is paged once the silence is lifted, not before. */
    ta_wait_request(&w, r, "/hook", "event", "trigger");
    /* The receiver answers before the notifier records the delivery: wait
     * for the record, then compare it with the lift. */
    ta_wait_sql(&w,
                "SELECT bool_and(o.delivered_at > s.lifted_at)::text FROM steward.outbox o "
                "JOIN steward.alerts a ON a.id = o.alert_id, steward.silences s "
                "WHERE a.key = $1 AND o.payload->>'event' = 'trigger'",
                k1, "true", 30);
    /* What resolved meanwhile is closed unsent: no trigger, no resolve. */
    ta_wait_sql(&w,
                "SELECT count(*) FILTER (WHERE o.last_error = 'not sent: the alert resolved while "
                "silenced') || '/' || count(*) FROM steward.outbox o JOIN steward.alerts a ON a.id "
                "= o.alert_id WHERE a.key = $1",
                k2, "2/2", 30);
    ck_assert_msg(!received_mention(r, k2), "a page about %s went out", k2);

    /* A window that simply expires: the stall inside it is paged after. */
    const char *s2[] = {
        NULL,    "silence", "--process", "action_order", "--state",    "awaiting_payment",
        "--for", "8s",      "--reason",  "short",        "--database", w.db_url,
        NULL};
    o = tl_steward(s2, NULL);
    ck_assert_msg(o.status == 0, "silence: %s", o.err);
    tl_output_free(&o);
    char *k3 = tl_unique("ORD-");
    ta_send_event(&w, "orders", "OrderPlaced", k3);
    ta_wait_sql(&w,
                "SELECT count(*) FROM steward.outbox o JOIN steward.alerts a ON a.id = o.alert_id "
                "WHERE a.key = $1 AND o.delivered_at IS NOT NULL",
                k3, "1", 30);
    ta_expect(
        &w,
        "SELECT (a.opened_at < s.ends_at AND o.delivered_at >= s.ends_at)::text "
        "FROM steward.outbox o JOIN steward.alerts a ON a.id = o.alert_id, steward.silences s "
        "WHERE a.key = $1 AND s.state = 'awaiting_payment'",
        k3, "true");
    free(k1);
    free(k2);
    free(k3);
    tw_teardown(&w);
    rcv_free(r);
}
END_TEST

/* Every verb's command line is read from its row of the verb table: its
 * usage, its operands, its own options (another verb's named as such) and
 * what it requires; steward --help lists the table. No database: each is
 * refused before connecting. */
START_TEST(verbs_read_their_rows)
{
    const char *help[] = {NULL, "--help", NULL};
    tl_output_t o = tl_steward(help, NULL);
    ck_assert_int_eq(o.status, 0);
    const char *verbs = strstr(o.out, "\noperator verbs:\n");
    ck_assert_msg(verbs != NULL, "steward --help: %s", o.out);
    for (size_t i = 0; i < action_verb_count; i++) {
        char line[256];
        snprintf(line, sizeof line, "\n  %-10s %s\n", action_verbs[i].name,
                 action_verbs[i].summary);
        ck_assert_msg(strstr(verbs, line) != NULL, "steward --help lacks %s: %s",
                      action_verbs[i].name, o.out);
    }
    tl_output_free(&o);

    for (size_t i = 0; i < action_verb_count; i++) {
        const action_verb_def_t *v = &action_verbs[i];
        const char *argv[] = {NULL, v->name, "--help", NULL};
        o = tl_steward(argv, NULL);
        char synopsis[256];
        snprintf(synopsis, sizeof synopsis, "usage: steward %s%s%s", v->name,
                 v->operands != NULL ? " " : "", v->operands != NULL ? v->operands : "");
        ck_assert_msg(o.status == 0 && strncmp(o.out, synopsis, strlen(synopsis)) == 0,
                      "steward %s --help: %d %s", v->name, o.status, o.out);
        ck_assert_msg(strstr(o.out, v->about) != NULL, "steward %s --help: %s", v->name, o.out);
        for (const action_option_t *op = v->options; op->name != NULL; op++) {
            char flag[64];
            snprintf(flag, sizeof flag, "--%s", op->name);
            ck_assert_msg(strstr(o.out, flag) != NULL && strstr(o.out, op->help) != NULL,
                          "steward %s --help lacks %s: %s", v->name, flag, o.out);
        }
        ck_assert(tl_contains(o.out, "--reason TEXT") == v->audited);
        tl_output_free(&o);
    }

    const char *close_usage[] = {NULL, "close", "--help", NULL};
    o = tl_steward(close_usage, NULL);
    ck_assert_msg(tl_contains(o.out, "usage: steward close PROCESS KEY --as OUTCOME --reason TEXT "
                                     "[OPTIONS]\n"),
                  "%s", o.out);
    ck_assert_msg(tl_contains(o.out, "  --as OUTCOME          the outcome, e.g. cancelled\n"), "%s",
                  o.out);
    tl_output_free(&o);

    /* Another verb's option, a missing operand or required option. */
    const char *retry_to[] = {NULL, "retry", "order", "K1", "--to", "x", "--reason", "r", NULL};
    o = tl_steward(retry_to, NULL);
    ck_assert_int_eq(o.status, 2);
    ck_assert_msg(tl_contains(o.err, "steward retry: --to is not an option of retry"), "%s", o.err);
    tl_output_free(&o);
    const char *silences_reason[] = {NULL, "silences", "--reason", "r", NULL};
    o = tl_steward(silences_reason, NULL);
    ck_assert_int_eq(o.status, 2);
    ck_assert_msg(tl_contains(o.err, "--reason is not an option of silences"), "%s", o.err);
    tl_output_free(&o);
    const char *close_no_key[] = {NULL, "close", "order", "--as", "cancelled", NULL};
    o = tl_steward(close_no_key, NULL);
    ck_assert_int_eq(o.status, 2);
    ck_assert_msg(tl_contains(o.err, "steward close: expected PROCESS KEY"), "%s", o.err);
    tl_output_free(&o);
    const char *close_no_as[] = {NULL, "close", "order", "K1", "--reason", "r", NULL};
    o = tl_steward(close_no_as, NULL);
    ck_assert_int_eq(o.status, 2);
    ck_assert_msg(tl_contains(o.err, "steward close: --as OUTCOME is required"), "%s", o.err);
    tl_output_free(&o);
    const char *silence_no_for[] = {NULL, "silence", "--process", "p", "--reason", "r", NULL};
    o = tl_steward(silence_no_for, NULL);
    ck_assert_int_eq(o.status, 2);
    ck_assert_msg(tl_contains(o.err, "steward silence: --for DURATION is required"), "%s", o.err);
    tl_output_free(&o);
    const char *ack_no_reason[] = {NULL, "ack", "12", NULL};
    o = tl_steward(ack_no_reason, NULL);
    ck_assert_int_eq(o.status, 2);
    ck_assert_msg(tl_contains(o.err, "steward ack: --reason is required"), "%s", o.err);
    tl_output_free(&o);
}
END_TEST

/* Active, with a command in the step the instance waits in. */
static const char refund_active[] =
    "{\"process\": \"refund\", \"version\": 1, \"mode\": \"active\","
    " \"owner\": \"payments-ops\", \"key\": \"/order_id\","
    " \"events\": {\"RefundRequested\": {\"topic\": \"refunds\"},"
    "   \"RefundIssued\": {\"topic\": \"refunds\"}},"
    " \"start\": {\"on\": \"RefundRequested\", \"to\": \"awaiting_refund\"},"
    " \"states\": {"
    "   \"awaiting_refund\": {\"deadline\": \"10m\", \"on\": {\"RefundIssued\": \"refunded\"},"
    "     \"command\": {\"topic\": \"refund-commands\", \"type\": \"IssueRefund\","
    "                 \"payload\": {\"order_id\": \"${key}\"}}},"
    "   \"refunded\": {\"terminal\": \"success\"}}}";

/* A migrated database of its own (`name`) holding refund_active and its
 * instance r-1, in awaiting_refund since 2100-01-01T01:00Z (its deadline
 * ten minutes on), at step 1 with token 3: no broker, no steward run. */
static PGconn *refund_database(const char *name)
{
    const char *url = tl_db_create(name);
    tl_migrate(url);
    PGconn *conn = tl_db_connect(url);
    const char *params[1] = {refund_active};
    free(
        tl_db_scalar(conn,
                     "INSERT INTO steward.definitions (process, version, mode, document, checksum) "
                     "VALUES ('refund', 1, 'active', $1::jsonb, md5($1::text)) RETURNING 'ok'",
                     1, params));
    tl_db_exec(conn, "INSERT INTO steward.instances (process, key, version, state, status, "
                     "  started_at, state_entered_at, deadline_at, next_deadline_at, step, token) "
                     "VALUES ('refund', 'r-1', 1, 'awaiting_refund', 'active', "
                     "  '2100-01-01T00:00:00Z', '2100-01-01T01:00:00Z', '2100-01-01T01:10:00Z', "
                     "  '2100-01-01T01:10:00Z', 1, 3)");
    return conn;
}

START_TEST(close_is_decided_by_the_engine)
{
    /* Entry into the closing state is an event's entry: it never runs back
     * (the step was entered at an event time ahead of the clock), and in an
     * active version it takes the next token, so the closed step's reply
     * is stale. */
    PGconn *conn = refund_database("actions_close");
    action_request_t req = {.actor = "alice",
                            .reason = "refunded by hand",
                            .process = "refund",
                            .key = "r-1",
                            .target = "success"};
    json_t *result = NULL;
    char errstr[512];
    action_rc_t rc = action_run(conn, ACTION_CLOSE, &req, &result, errstr, sizeof errstr);
    ck_assert_msg(rc == ACTION_OK, "close: %s", errstr);
    json_decref(result);
    char *row = tl_db_scalar(conn,
                             "SELECT format('%s %s %s %s %s', state, status, step, token, "
                             "  state_entered_at = '2100-01-01T01:00:00Z') "
                             "FROM steward.instances WHERE key = 'r-1'",
                             0, NULL);
    ck_assert_str_eq(row, "refunded success 2 4 t");
    free(row);
    PQfinish(conn);
}
END_TEST

/* What steward inspect and GET /v1/instances read of r-1, as "ms_in_state
 * ms_to_deadline overdue_ms" ("null" for a null), from query_instance()
 * and query_instances(), which must agree on the first. */
static void read_standing(PGconn *conn, char *out, size_t out_size)
{
    json_t *inst = NULL, *page = NULL;
    query_absent_t absent;
    char errstr[512];
    ck_assert_msg(query_instance(conn, "refund", "r-1", &inst, &absent, errstr, sizeof errstr) ==
                          ERR_OK &&
                      inst != NULL,
                  "query_instance: %s", errstr);
    query_filter_t f = {.process = "refund", .limit = 10};
    ck_assert_msg(query_instances(conn, &f, &page, errstr, sizeof errstr) == ERR_OK,
                  "query_instances: %s", errstr);
    json_t *row = json_array_get(json_object_get(page, "instances"), 0);
    ck_assert(
        json_equal(json_object_get(inst, "ms_in_state"), json_object_get(row, "ms_in_state")));
    char *a = json_dumps(json_object_get(inst, "ms_in_state"), JSON_ENCODE_ANY);
    char *b = json_dumps(json_object_get(inst, "ms_to_deadline"), JSON_ENCODE_ANY);
    char *c = json_dumps(json_object_get(row, "overdue_ms"), JSON_ENCODE_ANY);
    snprintf(out, out_size, "%s %s %s", a, b, c);
    free(a);
    free(b);
    free(c);
    json_decref(inst);
    json_decref(page);
}

START_TEST(time_in_state_stands_at_the_watermark)
{
    /* The instance entered its state in 2100, so at the clock it would
     * have been in it for less than nothing: every figure a person reads
     * is the engine's, at the process's watermark, as the scheduler judges
     * the deadline. */
    PGconn *conn = refund_database("actions_standing");
    char got[256];
    read_standing(conn, got, sizeof got);
    ck_assert_str_eq(got, "null null null"); /* no watermark yet */

    tl_db_exec(conn, "INSERT INTO steward.watched_topics (consumer_group, process, topic) "
                     "VALUES ('g', 'refund', 'refunds')");
    tl_db_exec(conn, "INSERT INTO steward.offsets (consumer_group, topic, partition, next_offset, "
                     "  watermark) VALUES ('g', 'refunds', 0, 1, '2100-01-01T01:04:00Z')");
    read_standing(conn, got, sizeof got);
    ck_assert_str_eq(got, "240000 360000 0");

    /* A watermark behind the entry: time in a state never runs back. */
    tl_db_exec(conn, "UPDATE steward.offsets SET watermark = '2100-01-01T00:59:00Z'");
    read_standing(conn, got, sizeof got);
    ck_assert_str_eq(got, "0 660000 0");

    /* Judged overdue, two minutes past the deadline at the watermark. */
    tl_db_exec(conn, "UPDATE steward.offsets SET watermark = '2100-01-01T01:12:00Z'");
    tl_db_exec(conn, "UPDATE steward.instances SET overdue = true");
    read_standing(conn, got, sizeof got);
    ck_assert_str_eq(got, "720000 -120000 120000");
    PQfinish(conn);
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
    tcase_add_test(tc, silence_holds_pages_until_it_ends);
    tcase_add_test(tc, verbs_read_their_rows);
    suite_add_tcase(s, tc);
    TCase *engine = tcase_create("engine");
    tcase_add_test(engine, close_is_decided_by_the_engine);
    tcase_add_test(engine, time_in_state_stands_at_the_watermark);
    suite_add_tcase(s, engine);
    return s;
}
