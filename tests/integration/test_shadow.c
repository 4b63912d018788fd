/*
 * test_shadow - `steward run` in shadow mode end to end, on the real broker
 * and a real PostgreSQL: a scripted scenario over four topics whose every
 * outcome is asserted, in order.
 *
 * The scenario is produced in phases, and each phase waits until steward
 * has committed its offsets, so the order in which steward reads the
 * topics (and so each instance's exact history) is fixed.
 */
#include "testlib.h"

#include <check.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static char *prefix, *group, *defs_dir, *log_path;
static const char *db_url;
static PGconn *conn;
static int steward_pid;
static tl_producer_t *producer;
static long produced; /* messages produced so far; offsets must add up to it */

static char *topic(const char *name)
{
    char *t = NULL;
    ck_assert_int_ge(asprintf(&t, "%s%s", prefix, name), 0);
    return t;
}

/* Writes the test definition with this run's topic names. */
static void write_definition(void)
{
    char *path = tl_source_path("tests/data/definitions/shadow_order.json.in");
    char *text = tl_read_file(path);
    size_t cap = strlen(text) * 2 + 1024, len = 0;
    char *out = calloc(1, cap);
    for (const char *p = text; *p;) {
        if (strncmp(p, "@P@", 3) == 0) {
            len += (size_t) snprintf(out + len, cap - len, "%s", prefix);
            p += 3;
        } else {
            out[len++] = *p++;
        }
    }
    defs_dir = strdup(tl_tmpdir());
    free(tl_write_file(defs_dir, "shadow_order.json", out));
    free(out);
    free(text);
    free(path);
}

static void send(const char *name, const char *value, const char *const *headers,
                 long long timestamp_ms)
{
    char *t = topic(name);
    tl_produce(producer, t, 0, value, -1, headers, timestamp_ms);
    free(t);
    produced++;
}

static void send_event(const char *name, const char *type, const char *id, const char *key)
{
    char value[512];
    snprintf(value, sizeof value, "{\"type\":\"%s\",\"id\":\"%s\",\"order_id\":\"%s\"}", type, id,
             key);
    send(name, value, NULL, 0);
}

/* Waits until steward has committed every message produced so far. */
static void settle(void)
{
    char expected[32], *last = NULL;
    tl_producer_free(producer);
    producer = tl_producer_new();
    snprintf(expected, sizeof expected, "%ld", produced);
    const char *params[1] = {group};
    if (!tl_db_wait(conn,
                    "SELECT coalesce(sum(next_offset), 0) FROM steward.offsets "
                    "WHERE consumer_group = $1 AND next_offset >= 0",
                    1, params, expected, 60, &last)) {
        tl_print_tail(log_path, 6000);
        ck_abort_msg("steward committed %s of %s messages (its log above)", last, expected);
    }
}

/* The history of one instance as "Type:outcome" items, '*' marking replays. */
static char *history(const char *key)
{
    const char *params[1] = {key};
    return tl_db_scalar(conn,
                        "SELECT string_agg(event_type || ':' || outcome || "
                        "  CASE WHEN replayed THEN '*' ELSE '' END, ' ' ORDER BY id) "
                        "FROM steward.history WHERE process = 'shadow_order' AND key = $1",
                        1, params);
}

static char *instance(const char *key)
{
    const char *params[1] = {key};
    return tl_db_scalar(conn,
                        "SELECT state || '/' || status FROM steward.instances "
                        "WHERE process = 'shadow_order' AND key = $1",
                        1, params);
}

#define ASSERT_HISTORY(key, expected)                                                              \
    do {                                                                                           \
        char *got_ = history(key);                                                                 \
        ck_assert_msg(got_ != NULL && strcmp(got_, expected) == 0,                                 \
                      "history of %s:\n  got      %s\n  expected %s", key, got_, expected);        \
        free(got_);                                                                                \
    } while (0)

#define ASSERT_INSTANCE(key, expected)                                                             \
    do {                                                                                           \
        char *got_ = instance(key);                                                                \
        ck_assert_msg(got_ != NULL && strcmp(got_, expected) == 0, "%s is %s, expected %s", key,   \
                      got_, expected);                                                             \
        free(got_);                                                                                \
    } while (0)

static void setup(void)
{
    prefix = tl_unique("sh");
    size_t plen = strlen(prefix);
    prefix = realloc(prefix, plen + 2);
    strcpy(prefix + plen, ".");
    group = tl_unique("group");
    db_url = tl_db_create("shadow");
    conn = tl_db_connect(db_url);
    write_definition();
    char *topics[4] = {topic("orders"), topic("payments"), topic("inventory"), topic("shipping")};
    tl_kafka_create_topics((const char *const *) topics, 4, 1);
    for (int i = 0; i < 4; i++)
        free(topics[i]);
    log_path = tl_write_file(tl_tmpdir(), "steward.log", "");
    /* Migrated first, so the waits below never query a missing schema. */
    tl_migrate(db_url);
    const char *argv[] = {NULL,
                          "run",
                          "--brokers",
                          tl_kafka_brokers(),
                          "--database",
                          db_url,
                          "--definitions",
                          defs_dir,
                          "--group",
                          group,
                          "--batch-ms",
                          "50",
                          "--max-message-bytes",
                          "4096",
                          "--set",
                          "http.listen=",
                          NULL};
    steward_pid = tl_steward_spawn(argv, NULL, log_path);
    producer = tl_producer_new();
    produced = 0;
}

static void teardown(void)
{
    if (steward_pid > 0)
        tl_stop(steward_pid, SIGKILL, 10);
    PQfinish(conn);
}

START_TEST(scripted_scenario)
{
    long long old = (long long) time(NULL) * 1000 - 3600 * 1000; /* an hour ago */

    /* 1. A placed; B paid before it exists; C placed; E paid but never
     *    placed (an hour ago, so its reorder window has long passed); F
     *    placed. */
    send_event("orders", "OrderPlaced", "a1", "A");
    send_event("orders", "OrderPlaced", "c1", "C");
    send_event("orders", "OrderPlaced", "f1", "F");
    send_event("payments", "PaymentCaptured", "b2", "B");
    send("payments", "{\"type\":\"PaymentCaptured\",\"id\":\"e2\",\"order_id\":\"E\"}", NULL, old);
    settle();

    /* 1b. A's stock is reserved before its payment (after A exists, so the
     *     order of the two topics cannot change the history). */
    send_event("inventory", "StockReserved", "a3", "A");
    settle();

    /* 2. A's payment (and a duplicate of it) releases A's parked stock; B
     *    placed releases B's parked payment; C paid; F's dispatch arrives an
     *    hour late for its place in the sequence. */
    send_event("payments", "PaymentCaptured", "a2", "A");
    send_event("payments", "PaymentCaptured", "a2", "A");
    send_event("payments", "PaymentCaptured", "c2", "C");
    send_event("orders", "OrderPlaced", "b1", "B");
    send("shipping", "{\"type\":\"ShipmentDispatched\",\"id\":\"f4\",\"order_id\":\"F\"}", NULL,
         old);
    settle();

    /* 3. A dispatched (done); C's stock reserved. */
    send_event("shipping", "ShipmentDispatched", "a4", "A");
    send_event("inventory", "StockReserved", "c3", "C");
    settle();

    /* 4. A declined after it finished (late); C declined while awaiting
     *    dispatch (no state from there takes it); D placed as a binary
     *    CloudEvent; an event type no process declares. */
    send_event("payments", "PaymentDeclined", "a5", "A");
    send_event("payments", "PaymentDeclined", "c5", "C");
    const char *binary[] = {
        "ce_specversion", "1.0",   "ce_type", "OrderPlaced",          "ce_id", "d1",
        "ce_source",      "/shop", "ce_time", "2026-11-29T10:00:00Z", NULL};
    send("orders", "{\"order_id\":\"D\",\"total\":12}", binary, 0);
    send_event("orders", "OrderUpdated", "x1", "A");
    settle();

    /* 5. D paid as a structured CloudEvent; then one message of every bad kind. */
    const char *structured[] = {"content-type", "application/cloudevents+json", NULL};
    send("payments",
         "{\"specversion\":\"1.0\",\"type\":\"PaymentCaptured\",\"id\":\"d2\",\"source\":\"/pay\","
         "\"time\":\"2026-11-29T10:05:00Z\",\"data\":{\"order_id\":\"D\",\"payment_id\":\"PD\"}}",
         structured, 0);
    send("orders", "{\"type\": \"OrderPlaced\", \"order_id\": ", NULL, 0);       /* invalid_json */
    send("orders", "{\"type\":\"OrderPlaced\",\"order_id\":\"\xff\"}", NULL, 0); /* invalid_utf8 */
    send("orders", "[\"OrderPlaced\"]", NULL, 0);                                /* not_an_object */
    send("orders", NULL, NULL, 0);                                               /* tombstone */
    send("orders", "{\"type\":\"OrderPlaced\",\"id\":\"m1\"}", NULL, 0);         /* missing_key */
    send("orders", "{\"type\":\"OrderPlaced\",\"id\":\"m2\",\"order_id\":7.5}", NULL,
         0); /* invalid_key */
    char big[5000];
    snprintf(big, sizeof big, "{\"type\":\"OrderPlaced\",\"order_id\":\"BIG\",\"pad\":\"%4900d\"}",
             0);
    send("orders", big, NULL, 0); /* too_large */
    const char *old_spec[] = {"ce_specversion", "0.3",  "ce_type", "OrderPlaced", "ce_id", "z",
                              "ce_source",      "/old", NULL};
    send("orders", "{\"order_id\":\"Z\"}", old_spec, 0); /* unsupported_specversion */
    char deep[300] = "{\"type\":\"OrderPlaced\",\"order_id\":\"DEEP\",\"x\":";
    for (int i = 0; i < 70; i++)
        strcat(deep, "[");
    for (int i = 0; i < 70; i++)
        strcat(deep, "]");
    strcat(deep, "}");
    send("orders", deep, NULL, 0);                        /* too_deep */
    send("orders", "{\"order_id\":\"NOTYPE\"}", NULL, 0); /* missing_type */
    settle();

    /* E's and F's parked events expire with the next sweep. */
    ck_assert_msg(tl_db_wait(conn, "SELECT count(*) FROM steward.parked", 0, NULL, "0", 30, NULL),
                  "parked events did not expire");

    ASSERT_INSTANCE("A", "completed/success");
    ASSERT_HISTORY("A", "OrderPlaced:started StockReserved:parked PaymentCaptured:advanced "
                        "StockReserved:advanced* PaymentCaptured:duplicate "
                        "ShipmentDispatched:advanced PaymentDeclined:late");
    ASSERT_INSTANCE("B", "awaiting_stock/active");
    ASSERT_HISTORY("B", "PaymentCaptured:parked OrderPlaced:started PaymentCaptured:advanced*");
    ASSERT_INSTANCE("C", "awaiting_dispatch/active");
    ASSERT_HISTORY("C", "OrderPlaced:started PaymentCaptured:advanced StockReserved:advanced "
                        "PaymentDeclined:unexpected");
    ASSERT_INSTANCE("D", "awaiting_stock/active");
    ASSERT_HISTORY("D", "OrderPlaced:started PaymentCaptured:advanced");
    ASSERT_INSTANCE("E", ""); /* its start event never came: no instance */
    ASSERT_HISTORY("E", "PaymentCaptured:parked PaymentCaptured:violation*");
    ASSERT_INSTANCE("F", "awaiting_payment/active");
    ASSERT_HISTORY("F", "OrderPlaced:started ShipmentDispatched:parked "
                        "ShipmentDispatched:violation*");

    /* CloudEvents identities and times. */
    char *ids = tl_db_scalar(conn,
                             "SELECT string_agg(event_id || '@' || to_char(event_time AT TIME "
                             "ZONE 'UTC', 'HH24:MI'), ' ' ORDER BY id) FROM steward.history "
                             "WHERE key = 'D'",
                             0, NULL);
    ck_assert_str_eq(ids, "/shop#d1@10:00 /pay#d2@10:05");
    free(ids);
    char *vars = tl_db_scalar(conn,
                              "SELECT vars->>'payment_id' FROM steward.instances "
                              "WHERE key = 'D'",
                              0, NULL);
    ck_assert_str_eq(vars, "PD");
    free(vars);

    /* Every bad message is kept whole with its reason, in offset order. */
    char *rejected = tl_db_scalar(conn,
                                  "SELECT string_agg(reason, ' ' ORDER BY topic, \"offset\") "
                                  "FROM steward.rejected",
                                  0, NULL);
    ck_assert_str_eq(rejected, "invalid_json invalid_utf8 not_an_object tombstone missing_key "
                               "invalid_key too_large unsupported_specversion too_deep "
                               "missing_type");
    free(rejected);
    char *raw = tl_db_scalar(conn,
                             "SELECT encode(value, 'escape') || '|' || (value IS NULL)::text "
                             "FROM steward.rejected WHERE reason = 'invalid_json'",
                             0, NULL);
    ck_assert_str_eq(raw, "{\"type\": \"OrderPlaced\", \"order_id\": |false");
    free(raw);
    char *headers = tl_db_scalar(conn,
                                 "SELECT headers::text FROM steward.rejected "
                                 "WHERE reason = 'unsupported_specversion'",
                                 0, NULL);
    ck_assert_msg(tl_contains(headers, "\"ce_specversion\"") && tl_contains(headers, "\"0.3\""),
                  "headers: %s", headers);
    free(headers);
    char *tombstone = tl_db_scalar(conn,
                                   "SELECT (value IS NULL)::text || ' ' || detail FROM "
                                   "steward.rejected WHERE reason = 'tombstone'",
                                   0, NULL);
    ck_assert_msg(tl_contains(tombstone, "true"), "tombstone row: %s", tombstone);
    free(tombstone);

    /* Nothing read was lost: every offset is in history, rejected, or was
     * an event no process declares (the one OrderUpdated). */
    char *accounted = tl_db_scalar(conn,
                                   "SELECT count(*) FROM (SELECT topic, \"offset\" FROM "
                                   "steward.history WHERE NOT replayed UNION SELECT topic, "
                                   "\"offset\" FROM steward.rejected) s",
                                   0, NULL);
    ck_assert_int_eq(atol(accounted), produced - 1);
    free(accounted);

    /* inspect answers "where is A?" */
    const char *argv[] = {NULL, "inspect", "shadow_order", "A", "--database", db_url, NULL};
    tl_output_t o = tl_steward(argv, NULL);
    ck_assert_msg(o.status == 0, "inspect: %s", o.err);
    ck_assert_msg(tl_contains(o.out, "completed (success)") &&
                      tl_contains(o.out, "PaymentDeclined") && tl_contains(o.out, "late"),
                  "inspect output:\n%s", o.out);
    tl_output_free(&o);
    const char *json_argv[] = {NULL,     "inspect",    "shadow_order", "B",
                               "--json", "--database", db_url,         NULL};
    o = tl_steward(json_argv, NULL);
    ck_assert_int_eq(o.status, 0);
    json_error_t jerr;
    json_t *doc = json_loads(o.out, 0, &jerr);
    ck_assert_msg(doc != NULL, "inspect --json is not JSON: %s", o.out);
    ck_assert_str_eq(json_string_value(json_object_get(doc, "state")), "awaiting_stock");
    ck_assert_int_eq(json_array_size(json_object_get(doc, "history")), 3);
    json_decref(doc);
    tl_output_free(&o);
    const char *missing_argv[] = {NULL, "inspect", "shadow_order", "E", "--database", db_url, NULL};
    o = tl_steward(missing_argv, NULL);
    ck_assert_int_eq(o.status, 1);
    ck_assert_msg(tl_contains(o.err, "no instance E of shadow_order"), "got: %s", o.err);
    tl_output_free(&o);

    /* A clean stop: SIGTERM, exit 0, the release logged. */
    int status = tl_stop(steward_pid, SIGTERM, 30);
    steward_pid = 0;
    ck_assert_int_eq(status, 0);
    const char *params[1] = {group};
    char *releases = tl_db_scalar(conn,
                                  "SELECT count(*) FROM steward.ownership_log "
                                  "WHERE consumer_group = $1 AND action = 'release'",
                                  1, params);
    ck_assert_int_eq(atol(releases), 4);
    free(releases);
    tl_producer_free(producer);
    producer = NULL;
}
END_TEST

Suite *shadow_suite(void)
{
    Suite *s = suite_create("shadow");
    TCase *tc = tcase_create("shadow");
    tcase_set_timeout(tc, 300);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, scripted_scenario);
    suite_add_tcase(s, tc);
    return s;
}
