/*
 * test_report - `steward report` on a history built by hand, where every
 * figure is known in advance.
 *
 * order_fulfilment (shadow; version 2 is the latest recorded, with a 90s
 * deadline on awaiting_payment where version 1 had 15m): 101 orders start
 * 864 s apart, the first two days ago (plus 432 s, so that a 36h window
 * falls half-way between two starts), which makes one start per 864 s:
 * 100 a day. Order k pays after k seconds (1..100; order 101 never pays),
 * and orders 1..90 get their stock 600 s after paying; 91..100 are still
 * waiting for it, 91..95 marked overdue, 96 with an open deadline alert.
 *
 * refund (active): 5 refunds an hour apart, three days ago; too few for a
 * suggestion. Refund 1's RefundIssued carries a time 10 s before its
 * start: its awaiting_refund latency is 0 and `confirming` runs from the
 * start, as the engine never lets time in a state run back.
 *
 * Noise the report must ignore: duplicate, late, unexpected and parked
 * rows, a resolved alert, a sequence alert.
 *
 * upg (its own database): what an upgrade to a suggested deadline would
 * move and resolve, instances of an older version judged on theirs.
 */
#include "testlib.h"

#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char order_v1[] =
    "{\"process\": \"order_fulfilment\", \"version\": 1, \"mode\": \"shadow\","
    " \"owner\": \"fulfilment\", \"key\": \"/order_id\","
    " \"events\": {\"OrderPlaced\": {\"topic\": \"orders\"},"
    "   \"PaymentCaptured\": {\"topic\": \"payments\"},"
    "   \"PaymentDeclined\": {\"topic\": \"payments\"},"
    "   \"StockReserved\": {\"topic\": \"inventory\"}},"
    " \"start\": {\"on\": \"OrderPlaced\", \"to\": \"awaiting_payment\"},"
    " \"states\": {"
    "   \"awaiting_payment\": {\"deadline\": \"15m\", \"owner\": \"payments\","
    "     \"on\": {\"PaymentCaptured\": \"awaiting_stock\", \"PaymentDeclined\": \"cancelled\"}},"
    "   \"awaiting_stock\": {\"deadline\": \"1h\", \"on\": {\"StockReserved\": \"completed\"}},"
    "   \"completed\": {\"terminal\": \"success\"},"
    "   \"cancelled\": {\"terminal\": \"cancelled\"}}}";

/* %s: the awaiting_payment deadline. */
static const char order_v2_fmt[] =
    "{\"process\": \"order_fulfilment\", \"version\": 2, \"mode\": \"shadow\","
    " \"owner\": \"fulfilment\", \"key\": \"/order_id\","
    " \"events\": {\"OrderPlaced\": {\"topic\": \"orders\"},"
    "   \"PaymentCaptured\": {\"topic\": \"payments\"},"
    "   \"PaymentDeclined\": {\"topic\": \"payments\"},"
    "   \"StockReserved\": {\"topic\": \"inventory\"}},"
    " \"start\": {\"on\": \"OrderPlaced\", \"to\": \"awaiting_payment\"},"
    " \"states\": {"
    "   \"awaiting_payment\": {\"deadline\": \"%s\", \"owner\": \"payments\","
    "     \"on\": {\"PaymentCaptured\": \"awaiting_stock\", \"PaymentDeclined\": \"cancelled\"},"
    "     \"command\": {\"topic\": \"payment-commands\", \"type\": \"CapturePayment\","
    "                 \"payload\": {\"order_id\": \"${key}\"}},"
    "     \"retry\": {\"max\": 2}, \"on_timeout\": \"cancelled\"},"
    "   \"awaiting_stock\": {\"deadline\": \"1h\", \"on\": {\"StockReserved\": \"completed\"}},"
    "   \"completed\": {\"terminal\": \"success\"},"
    "   \"cancelled\": {\"terminal\": \"cancelled\"}}}";

static const char refund_v1[] =
    "{\"process\": \"refund\", \"version\": 1, \"mode\": \"active\","
    " \"owner\": \"payments-ops\", \"key\": \"/order_id\","
    " \"events\": {\"RefundRequested\": {\"topic\": \"refunds\"},"
    "   \"RefundIssued\": {\"topic\": \"refunds\"},"
    "   \"RefundConfirmed\": {\"topic\": \"refunds\"}},"
    " \"start\": {\"on\": \"RefundRequested\", \"to\": \"awaiting_refund\"},"
    " \"states\": {"
    "   \"awaiting_refund\": {\"deadline\": \"10m\", \"on\": {\"RefundIssued\": \"confirming\"},"
    "     \"command\": {\"topic\": \"refund-commands\", \"type\": \"IssueRefund\","
    "                 \"payload\": {\"order_id\": \"${key}\"}},"
    "     \"retry\": {\"max\": 1}},"
    "   \"confirming\": {\"deadline\": \"1h\", \"on\": {\"RefundConfirmed\": \"refunded\"}},"
    "   \"refunded\": {\"terminal\": \"success\"}}}";

/* Times are relative to the insert's now(); t0 holds the first start. */
static const char *const fill_sql[] = {
    "CREATE TEMP TABLE t0 AS SELECT now() - interval '2 days' + interval '432 s' AS t, "
    "  now() - interval '3 days' AS r",

    /* order_fulfilment: instances */
    "INSERT INTO steward.instances (process, key, version, state, status, started_at, "
    "  state_entered_at, overdue) "
    "SELECT 'order_fulfilment', format('k%s', lpad(k::text, 3, '0')), 2, "
    "  CASE WHEN k <= 90 THEN 'completed' WHEN k <= 100 THEN 'awaiting_stock' "
    "       ELSE 'awaiting_payment' END, "
    "  CASE WHEN k <= 90 THEN 'success' ELSE 'active' END, "
    "  t + (k - 1) * interval '864 s', "
    "  t + (k - 1) * interval '864 s' + CASE WHEN k <= 90 THEN (k + 600) * interval '1 s' "
    "    WHEN k <= 100 THEN k * interval '1 s' ELSE interval '0' END, "
    "  k BETWEEN 91 AND 95 "
    "FROM generate_series(1, 101) k, t0",

    /* order_fulfilment: history, one statement per step so that ids
     * follow each instance's order */
    "INSERT INTO steward.history (process, key, version, event_id, event_type, topic, "
    "  partition, \"offset\", event_time, from_state, to_state, outcome, replica, epoch) "
    "SELECT 'order_fulfilment', format('k%s', lpad(k::text, 3, '0')), 2, 'o' || k, "
    "  'OrderPlaced', 'orders', 0, k, t + (k - 1) * interval '864 s', NULL, "
    "  'awaiting_payment', 'started', 'test', 1 "
    "FROM generate_series(1, 101) k, t0",

    "INSERT INTO steward.history (process, key, version, event_id, event_type, topic, "
    "  partition, \"offset\", event_time, from_state, to_state, outcome, replica, epoch) "
    "SELECT 'order_fulfilment', format('k%s', lpad(k::text, 3, '0')), 2, 'p' || k, "
    "  'PaymentCaptured', 'payments', 0, k, t + (k - 1) * interval '864 s' + k * interval '1 s', "
    "  'awaiting_payment', 'awaiting_stock', 'advanced', 'test', 1 "
    "FROM generate_series(1, 100) k, t0",

    "INSERT INTO steward.history (process, key, version, event_id, event_type, topic, "
    "  partition, \"offset\", event_time, from_state, to_state, outcome, replica, epoch) "
    "SELECT 'order_fulfilment', format('k%s', lpad(k::text, 3, '0')), 2, 's' || k, "
    "  'StockReserved', 'inventory', 0, k, "
    "  t + (k - 1) * interval '864 s' + (k + 600) * interval '1 s', "
    "  'awaiting_stock', 'completed', 'advanced', 'test', 1 "
    "FROM generate_series(1, 90) k, t0",

    /* noise */
    "INSERT INTO steward.history (process, key, version, event_id, event_type, topic, "
    "  partition, \"offset\", event_time, from_state, to_state, outcome, replica, epoch) "
    "SELECT 'order_fulfilment', v.key, 2, v.id, v.type, 'payments', 1, v.o, "
    "  t + interval '1 day', v.st, v.st, v.outcome, 'test', 1 "
    "FROM t0, (VALUES ('k005', 'p5', 'PaymentCaptured', 1, 'completed', 'duplicate'), "
    "  ('k002', 'x2', 'PaymentCaptured', 2, 'completed', 'late'), "
    "  ('k101', 'x101', 'StockReserved', 3, 'awaiting_payment', 'unexpected'), "
    "  ('ghost', 'x0', 'StockReserved', 4, NULL, 'parked')) "
    "  AS v(key, id, type, o, st, outcome)",

    "INSERT INTO steward.alerts (kind, process, key, state, owner, summary, dedup_key, "
    "  opened_at, resolved_at) VALUES "
    "('deadline', 'order_fulfilment', 'k096', 'awaiting_stock', 'fulfilment', 'late', 'd96', "
    "  now(), NULL), "
    "('deadline', 'order_fulfilment', 'k091', 'awaiting_stock', 'fulfilment', 'late', 'd91', "
    "  now(), NULL), "
    "('deadline', 'order_fulfilment', 'k097', 'awaiting_stock', 'fulfilment', 'late', 'd97', "
    "  now() - interval '1 h', now()), "
    "('sequence', 'order_fulfilment', 'k098', 'awaiting_stock', 'fulfilment', 'odd', 's98', "
    "  now(), NULL)",

    /* refund */
    "INSERT INTO steward.instances (process, key, version, state, status, started_at, "
    "  state_entered_at) "
    "SELECT 'refund', 'r' || j, 1, 'refunded', 'success', r + (j - 1) * interval '1 h', "
    "  r + (j - 1) * interval '1 h' + interval '10 min' "
    "FROM generate_series(1, 5) j, t0",

    "INSERT INTO steward.history (process, key, version, event_id, event_type, topic, "
    "  partition, \"offset\", event_time, from_state, to_state, outcome, replica, epoch) "
    "SELECT 'refund', 'r' || j, 1, 'q' || j, 'RefundRequested', 'refunds', 0, j, "
    "  r + (j - 1) * interval '1 h', NULL, 'awaiting_refund', 'started', 'test', 1 "
    "FROM generate_series(1, 5) j, t0",

    "INSERT INTO steward.history (process, key, version, event_id, event_type, topic, "
    "  partition, \"offset\", event_time, from_state, to_state, outcome, replica, epoch) "
    "SELECT 'refund', 'r' || j, 1, 'i' || j, 'RefundIssued', 'refunds', 0, 10 + j, "
    "  r + (j - 1) * interval '1 h' + CASE WHEN j = 1 THEN interval '-10 s' "
    "    ELSE j * interval '1 min' END, "
    "  'awaiting_refund', 'confirming', 'advanced', 'test', 1 "
    "FROM generate_series(1, 5) j, t0",

    "INSERT INTO steward.history (process, key, version, event_id, event_type, topic, "
    "  partition, \"offset\", event_time, from_state, to_state, outcome, replica, epoch) "
    "SELECT 'refund', 'r' || j, 1, 'c' || j, 'RefundConfirmed', 'refunds', 0, 20 + j, "
    "  r + (j - 1) * interval '1 h' + interval '10 min', "
    "  'confirming', 'refunded', 'advanced', 'test', 1 "
    "FROM generate_series(1, 5) j, t0",

    /* Messages no definition could read: two recorded an hour ago, one
     * three days ago (outside a 36h window). */
    "INSERT INTO steward.rejected (consumer_group, topic, partition, \"offset\", reason, detail, "
    "  recorded_at, replica, epoch) VALUES "
    "  ('g', 'payments', 0, 1, 'missing_type', 'no ce_type header and no string at /type', "
    "   now() - interval '1 h', 'test', 1), "
    "  ('g', 'payments', 0, 2, 'missing_type', 'a later one', now() - interval '1 h', 'test', 1), "
    "  ('g', 'orders', 0, 3, 'invalid_json', 'invalid JSON at line 1', "
    "   now() - interval '3 days', 'test', 1)",
};

static const char *db_url;

static void add_definition(PGconn *conn, const char *process, const char *version, const char *mode,
                           const char *document)
{
    const char *params[4] = {process, version, mode, document};
    char *ok = tl_db_scalar(conn,
                            "INSERT INTO steward.definitions (process, version, mode, document, "
                            "  checksum) VALUES ($1, $2::int, $3, $4::jsonb, md5($4::text)) "
                            "RETURNING 'ok'",
                            4, params);
    ck_assert_str_eq(ok, "ok");
    free(ok);
}

/* Unchecked fixture: one database for the whole suite, built once; the
 * tests only read it. */
static void world_setup(void)
{
    db_url = tl_db_create("report");
    tl_migrate(db_url);

    char order_v2[4096];
    snprintf(order_v2, sizeof order_v2, order_v2_fmt, "90s");
    PGconn *conn = tl_db_connect(db_url);
    add_definition(conn, "order_fulfilment", "1", "shadow", order_v1);
    add_definition(conn, "order_fulfilment", "2", "shadow", order_v2);
    add_definition(conn, "refund", "1", "active", refund_v1);
    for (size_t i = 0; i < sizeof fill_sql / sizeof fill_sql[0]; i++)
        tl_db_exec(conn, fill_sql[i]);
    PQfinish(conn);
}

/* Runs `steward report ARGS... --database URL` with no definition files in
 * the environment. */
static tl_output_t report(const char *a1, const char *a2, const char *a3, const char *a4)
{
    const char *argv[] = {NULL, "report", "--database", db_url, a1, a2, a3, a4, NULL};
    const char *env[] = {"STEWARD_DEFINITIONS=", NULL};
    return tl_steward(argv, env);
}

static json_t *report_json(const char *a1, const char *a2)
{
    tl_output_t o = report("--json", a1, a2, NULL);
    ck_assert_msg(o.status == 0, "report --json: %d: %s", o.status, o.err);
    json_error_t jerr;
    json_t *doc = json_loads(o.out, 0, &jerr);
    ck_assert_msg(doc != NULL, "not JSON (%s): %s", jerr.text, o.out);
    tl_output_free(&o);
    return doc;
}

static json_t *state_of(json_t *doc, const char *process, const char *state)
{
    json_t *proc = tl_json_find(json_object_get(doc, "processes"), "process", process);
    return tl_json_find(json_object_get(proc, "states"), "state", state);
}

/* The integer at a path of object keys ("latency", "p50_ms"); -1 for null. */
static long long num(const json_t *obj, const char *k1, const char *k2)
{
    const json_t *v = json_object_get(obj, k1);
    if (k2 != NULL)
        v = json_object_get(v, k2);
    ck_assert_msg(json_is_integer(v) || json_is_null(v), "%s.%s is not an integer", k1,
                  k2 ? k2 : "");
    return json_is_null(v) ? -1 : (long long) json_integer_value(v);
}

static double real(const json_t *obj, const char *k1, const char *k2)
{
    const json_t *v = json_object_get(json_object_get(obj, k1), k2);
    ck_assert_msg(json_is_number(v), "%s.%s is not a number", k1, k2);
    return json_number_value(v);
}

#define assert_close(got, want)                                                                    \
    ck_assert_msg(fabs((got) - (want)) < 1e-9 * (fabs(want) + 1), "%s: got %.12g, want %.12g",     \
                  #got, (double) (got), (double) (want))

/* The row of the table for `state` must hold exactly `words` (cells
 * separated by any run of spaces). */
static void assert_row(const char *text, const char *state, const char *words)
{
    char prefix[128];
    snprintf(prefix, sizeof prefix, "\n  %s ", state);
    const char *line = strstr(text, prefix);
    ck_assert_msg(line != NULL, "no row %s in:\n%s", state, text);
    line += 3;
    const char *end = strchr(line, '\n');
    char got[1024], *save = NULL;
    size_t len = 0;
    snprintf(got, sizeof got, "%.*s", (int) (end ? end - line : (long) strlen(line)), line);
    char normal[1024] = "";
    for (char *w = strtok_r(got, " ", &save); w != NULL; w = strtok_r(NULL, " ", &save))
        len += (size_t) snprintf(normal + len, sizeof normal - len, "%s%s", len ? " " : "", w);
    ck_assert_msg(strcmp(normal, words) == 0, "row %s reads\n  %s\nnot\n  %s\nin:\n%s", state,
                  normal, words, text);
}

START_TEST(percentiles_counts_and_alert_arithmetic)
{
    json_t *doc = report_json(NULL, NULL);
    json_t *pay = state_of(doc, "order_fulfilment", "awaiting_payment");

    /* percentile_disc: the latency some instance actually had */
    ck_assert_int_eq(num(pay, "entered", NULL), 101);
    ck_assert_int_eq(num(pay, "left", NULL), 100);
    ck_assert_int_eq(num(pay, "open", NULL), 1);
    ck_assert_int_eq(num(pay, "overdue", NULL), 0);
    ck_assert_int_eq(num(pay, "latency", "samples"), 100);
    ck_assert_int_eq(num(pay, "latency", "p50_ms"), 50000);
    ck_assert_int_eq(num(pay, "latency", "p90_ms"), 90000);
    ck_assert_int_eq(num(pay, "latency", "p99_ms"), 99000);
    ck_assert_int_eq(num(pay, "latency", "max_ms"), 100000);

    /* The latest version's deadline, 90s: orders 91..100 paid later, and
     * order 101 is open a day past it. 11 of the 101 that entered: at 100
     * entries a day, 10.89 alerts a day. */
    ck_assert_int_eq(num(pay, "deadline", "ms"), 90000);
    ck_assert_int_eq(num(pay, "deadline", "missed"), 11);
    assert_close(real(pay, "deadline", "share"), 11.0 / 101);
    assert_close(json_number_value(json_object_get(pay, "entered_per_day")), 100.0);
    assert_close(real(pay, "deadline", "alerts_per_day"), 11.0 / 101 * 100);

    /* p99 = 99s, times 1.5 = 148.5s, rounded up the ladder to 5m: only
     * order 101 is past it. */
    json_t *sug = json_object_get(pay, "suggestion");
    ck_assert(json_is_true(json_object_get(sug, "enough_samples")));
    ck_assert_str_eq(json_string_value(json_object_get(sug, "basis")), "p99");
    ck_assert_int_eq(num(sug, "basis_ms", NULL), 99000);
    ck_assert_int_eq(num(sug, "deadline_ms", NULL), 300000);
    ck_assert_int_eq(num(sug, "missed", NULL), 1);
    assert_close(real(pay, "suggestion", "alerts_per_day"), 1.0 / 101 * 100);

    /* awaiting_stock: 90 left after 10m each; 10 still there, all older
     * than the hour, 5 of them judged overdue. */
    json_t *stock = state_of(doc, "order_fulfilment", "awaiting_stock");
    ck_assert_int_eq(num(stock, "entered", NULL), 100);
    ck_assert_int_eq(num(stock, "left", NULL), 90);
    ck_assert_int_eq(num(stock, "open", NULL), 10);
    ck_assert_int_eq(num(stock, "overdue", NULL), 5);
    ck_assert_int_eq(num(stock, "latency", "p50_ms"), 600000);
    ck_assert_int_eq(num(stock, "latency", "max_ms"), 600000);
    ck_assert_int_eq(num(stock, "deadline", "missed"), 10);
    assert_close(real(stock, "deadline", "alerts_per_day"), 0.1 * 100 * 100 / 101.0);
    ck_assert_int_eq(num(stock, "suggestion", "deadline_ms"), 900000); /* 10m * 1.5 = 15m */
    ck_assert_int_eq(num(stock, "suggestion", "missed"), 10);

    json_t *completed = state_of(doc, "order_fulfilment", "completed");
    ck_assert_int_eq(num(completed, "entered", NULL), 90);
    ck_assert_str_eq(json_string_value(json_object_get(completed, "terminal")), "success");
    ck_assert(json_is_null(json_object_get(completed, "latency")));
    ck_assert_int_eq(num(state_of(doc, "order_fulfilment", "cancelled"), "entered", NULL), 0);

    /* 101 starts over 100 gaps of 864 s: 100 a day. Stalled: 91..95
     * (overdue) and 96 (an open deadline alert); 97's alert is resolved and
     * 98's is a sequence alert. */
    json_t *proc = tl_json_find(json_object_get(doc, "processes"), "process", "order_fulfilment");
    json_t *volume = json_object_get(proc, "volume");
    ck_assert_int_eq(num(volume, "started", NULL), 101);
    ck_assert_int_eq(num(volume, "period_ms", NULL), 101 * 864000LL);
    assert_close(real(proc, "volume", "started_per_day"), 100.0);
    ck_assert_int_eq(num(volume, "stalled", NULL), 6);
    assert_close(real(proc, "volume", "stalled_share"), 6.0 / 101);
    assert_close(real(proc, "volume", "stalled_per_day"), 6.0 * 100 / 101);
    ck_assert_int_eq(num(proc, "version", NULL), 2);
    json_decref(doc);
}
END_TEST

START_TEST(text_table)
{
    tl_output_t o = report(NULL, NULL, NULL, NULL);
    ck_assert_msg(o.status == 0, "report: %d: %s", o.status, o.err);
    const char *out = o.out;

    ck_assert_msg(tl_contains(out, "order_fulfilment (version 2): owner fulfilment, shadow mode, "
                                   "window: all history"),
                  "got:\n%s", out);
    ck_assert_msg(tl_contains(out, "101 instances started over 1d") &&
                      tl_contains(out, ", 100 per day; 6 stalled: 5.94% of instances stall; "
                                       "5.94 per day at 100 instances/day"),
                  "got:\n%s", out);
    /* states in definition order */
    const char *pay = strstr(out, "  awaiting_payment "), *stock = strstr(out, "  awaiting_stock ");
    const char *done = strstr(out, "  completed (success)"), *cancel = strstr(out, "  cancelled ");
    ck_assert_msg(pay && stock && done && cancel && pay < stock && stock < done && stock < cancel,
                  "got:\n%s", out);
    assert_row(out, "awaiting_payment",
               "awaiting_payment 101 100 1 0 50s 1m30s 1m39s 1m40s 1m30s 10.9 5m (p99) 0.99");
    assert_row(out, "awaiting_stock",
               "awaiting_stock 100 90 10 5 10m 10m 10m 10m 1h 9.90 15m (p99) 9.90");
    assert_row(out, "completed", "completed (success) 90");
    assert_row(out, "cancelled", "cancelled (cancelled) 0");

    /* Shadow mode: what active mode would have sent. 11 entries missed the
     * deadline, each re-sent at most twice. */
    ck_assert_msg(tl_contains(out, "awaiting_payment: 101 CapturePayment to payment-commands, "
                                   "and at most 22 retries (retry.max 2); 10 arrived anyway after "
                                   "the deadline (a re-send would have been redundant)"),
                  "got:\n%s", out);

    /* refund is active: nothing it would have sent; too few samples. */
    ck_assert_msg(tl_contains(out, "refund (version 1): owner payments-ops, active mode"),
                  "got:\n%s", out);
    ck_assert_msg(tl_contains(out, "awaiting_refund: too few samples to suggest a deadline: "
                                   "5 exits in the window, 20 needed"),
                  "got:\n%s", out);
    ck_assert_msg(!tl_contains(out, "IssueRefund"), "got:\n%s", out);
    tl_output_free(&o);
}
END_TEST

/* Order k pays after k seconds: 1..100 s over the ladder's buckets
 * (1s, 2s, 5s, 10s, 15s, 30s, 1m, 2m), per bucket, none past 2m. */
START_TEST(histograms)
{
    json_t *doc = report_json(NULL, NULL);
    json_t *pay = state_of(doc, "order_fulfilment", "awaiting_payment");
    char *hist = json_dumps(json_object_get(pay, "histogram"), JSON_COMPACT);
    ck_assert_str_eq(hist, "[{\"le_ms\":1000,\"count\":1},{\"le_ms\":2000,\"count\":1},"
                           "{\"le_ms\":5000,\"count\":3},{\"le_ms\":10000,\"count\":5},"
                           "{\"le_ms\":15000,\"count\":5},{\"le_ms\":30000,\"count\":15},"
                           "{\"le_ms\":60000,\"count\":30},{\"le_ms\":120000,\"count\":40},"
                           "{\"le_ms\":null,\"count\":0}]");
    free(hist);
    /* awaiting_stock: all 90 exits took 10m exactly */
    hist = json_dumps(
        json_object_get(state_of(doc, "order_fulfilment", "awaiting_stock"), "histogram"),
        JSON_COMPACT);
    ck_assert_str_eq(hist, "[{\"le_ms\":600000,\"count\":90},{\"le_ms\":null,\"count\":0}]");
    free(hist);
    ck_assert(
        json_is_null(json_object_get(state_of(doc, "order_fulfilment", "completed"), "histogram")));
    json_decref(doc);

    /* The text: a bar per bucket, scaled to the fullest (40 exits: 40
     * characters), the deadline (90s) marked in its bucket. */
    tl_output_t o = report(NULL, NULL, NULL, NULL);
    ck_assert_msg(o.status == 0, "report: %d: %s", o.status, o.err);
    ck_assert_msg(tl_contains(o.out,
                              "  awaiting_payment: time to leave, 100 exits\n"
                              "         <= 1s |#                                        1\n"),
                  "got:\n%s", o.out);
    ck_assert_msg(tl_contains(o.out, "         <= 1m |##############################           30\n"
                                     "         <= 2m |######################################## "
                                     "40  <- deadline\n"
                                     "                suggested 5m: no exit took that long\n"),
                  "got:\n%s", o.out);
    tl_output_free(&o);
}
END_TEST

/* `steward graph PROCESS` draws the newest recorded version: version 2,
 * with its command, retries, on_timeout and 90s deadline. */
START_TEST(graph_of_a_recorded_process)
{
    const char *argv[] = {NULL,   "graph",    "order_fulfilment", "--database",
                          db_url, "--format", "mermaid",          NULL};
    tl_output_t o = tl_steward(argv, NULL);
    ck_assert_msg(o.status == 0, "graph: %d: %s", o.status, o.err);
    ck_assert_msg(tl_contains(o.out, "flowchart LR\n") &&
                      tl_contains(o.out, "awaiting_payment<br/>deadline 1m30s<br/>owner "
                                         "payments<br/>command CapturePayment, 2 retries") &&
                      tl_contains(o.out, "-.->|timeout|") &&
                      tl_contains(o.out, "([\"completed<br/>terminal: success\"])"),
                  "got:\n%s", o.out);
    tl_output_free(&o);

    const char *unknown[] = {NULL, "graph", "no_such_process", "--database", db_url, NULL};
    o = tl_steward(unknown, NULL);
    ck_assert_int_eq(o.status, 1);
    ck_assert_msg(tl_contains(o.err, "no process no_such_process in steward.definitions"),
                  "got: %s", o.err);
    tl_output_free(&o);
}
END_TEST

START_TEST(too_few_samples_and_clamped_times)
{
    json_t *doc = report_json("--process", "refund");
    json_t *processes = json_object_get(doc, "processes");
    ck_assert_int_eq(json_array_size(processes), 1);

    json_t *refund = state_of(doc, "refund", "awaiting_refund");
    json_t *sug = json_object_get(refund, "suggestion");
    ck_assert(json_is_false(json_object_get(sug, "enough_samples")));
    ck_assert_int_eq(num(sug, "samples", NULL), 5);
    ck_assert_int_eq(num(sug, "needed", NULL), 20);
    ck_assert(json_is_null(json_object_get(sug, "deadline_ms")));
    ck_assert(json_is_null(json_object_get(sug, "alerts_per_day")));
    /* {0 (issued "before" it started), 2m, 3m, 4m, 5m} */
    ck_assert_int_eq(num(refund, "latency", "p50_ms"), 180000);
    ck_assert_int_eq(num(refund, "latency", "max_ms"), 300000);
    ck_assert_int_eq(num(refund, "deadline", "missed"), 0);

    /* {10m (from the clamped entry, not 10m10s), 8m, 7m, 6m, 5m} */
    json_t *confirming = state_of(doc, "refund", "confirming");
    ck_assert_int_eq(num(confirming, "latency", "p50_ms"), 420000);
    ck_assert_int_eq(num(confirming, "latency", "max_ms"), 600000);

    /* 5 starts an hour apart: 24 a day. Active: nothing "would" be sent. */
    json_t *proc = json_array_get(processes, 0);
    assert_close(real(proc, "volume", "started_per_day"), 24.0);
    ck_assert_str_eq(json_string_value(json_object_get(proc, "mode")), "active");
    ck_assert(json_is_null(json_object_get(proc, "would_send")));
    json_decref(doc);
}
END_TEST

START_TEST(process_filter)
{
    tl_output_t o = report("--process", "order_fulfilment", NULL, NULL);
    ck_assert_msg(o.status == 0, "report: %s", o.err);
    ck_assert(tl_contains(o.out, "order_fulfilment (version 2)"));
    ck_assert_msg(!tl_contains(o.out, "refund"), "got:\n%s", o.out);
    tl_output_free(&o);

    tl_output_t none = report("--process", "nope", NULL, NULL);
    ck_assert_int_eq(none.status, 1);
    ck_assert_msg(tl_contains(none.err, "no process nope in steward.definitions"), "got: %s",
                  none.err);
    tl_output_free(&none);
}
END_TEST

START_TEST(since_window)
{
    /* The last 36h hold orders 51..101: 51 entries, exits 51..100 with
     * latencies 51..100 s, over 50 gaps of 864 s (still 100 a day). */
    json_t *doc = report_json("--since", "36h");
    json_t *window = json_object_get(doc, "window");
    ck_assert_str_eq(json_string_value(json_object_get(window, "since")), "36h");
    ck_assert_int_eq(num(window, "since_ms", NULL), 36 * 3600000LL);

    json_t *pay = state_of(doc, "order_fulfilment", "awaiting_payment");
    ck_assert_int_eq(num(pay, "entered", NULL), 51);
    ck_assert_int_eq(num(pay, "left", NULL), 50);
    ck_assert_int_eq(num(pay, "latency", "p50_ms"), 75000);
    ck_assert_int_eq(num(pay, "latency", "p90_ms"), 95000);
    ck_assert_int_eq(num(pay, "latency", "p99_ms"), 100000);
    ck_assert_int_eq(num(pay, "latency", "max_ms"), 100000);
    json_t *proc = tl_json_find(json_object_get(doc, "processes"), "process", "order_fulfilment");
    ck_assert_int_eq(num(json_object_get(proc, "volume"), "started", NULL), 51);
    assert_close(real(proc, "volume", "started_per_day"), 100.0);

    /* refund happened three days ago: nothing in the window, no rates. */
    json_t *refund = tl_json_find(json_object_get(doc, "processes"), "process", "refund");
    json_t *volume = json_object_get(refund, "volume");
    ck_assert_int_eq(num(volume, "started", NULL), 0);
    ck_assert(json_is_null(json_object_get(volume, "started_per_day")));
    json_t *issued = state_of(doc, "refund", "awaiting_refund");
    ck_assert_int_eq(num(issued, "left", NULL), 0);
    ck_assert(json_is_null(json_object_get(json_object_get(issued, "latency"), "p50_ms")));
    json_decref(doc);

    tl_output_t o = report("--since", "36h", NULL, NULL);
    ck_assert_int_eq(o.status, 0);
    ck_assert_msg(tl_contains(o.out, "window: the last 36h ("), "got:\n%s", o.out);
    /* The rejected messages recorded in the window only. */
    ck_assert_msg(tl_contains(o.out, "messages rejected: 2 (missing_type 2)") &&
                      !tl_contains(o.out, "invalid_json"),
                  "got:\n%s", o.out);
    tl_output_free(&o);
}
END_TEST

START_TEST(json_shape)
{
    json_t *doc = report_json(NULL, NULL);
    ck_assert(json_is_string(json_object_get(doc, "generated_at")));
    ck_assert_str_eq(json_string_value(json_object_get(doc, "definitions")), "steward.definitions");
    json_t *window = json_object_get(doc, "window");
    ck_assert(json_is_null(json_object_get(window, "since")));
    ck_assert(json_is_string(json_object_get(window, "to")));

    json_t *processes = json_object_get(doc, "processes");
    ck_assert_int_eq(json_array_size(processes), 2);
    json_t *order = json_array_get(processes, 0);
    ck_assert_str_eq(json_string_value(json_object_get(order, "process")), "order_fulfilment");
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(processes, 1), "process")),
                     "refund");
    ck_assert_str_eq(json_string_value(json_object_get(order, "owner")), "fulfilment");
    ck_assert_str_eq(json_string_value(json_object_get(order, "mode")), "shadow");

    json_t *states = json_object_get(order, "states");
    ck_assert_int_eq(json_array_size(states), 4);
    /* The flow first, then the terminal states in the order the recorded
     * (jsonb) document has them. */
    const char *const names[] = {"awaiting_payment", "awaiting_stock", "cancelled", "completed"};
    for (size_t i = 0; i < 4; i++)
        ck_assert_str_eq(json_string_value(json_object_get(json_array_get(states, i), "state")),
                         names[i]);
    json_t *pay = json_array_get(states, 0);
    ck_assert_str_eq(json_string_value(json_object_get(pay, "owner")), "payments");
    const char *const keys[] = {"state",     "in_definition",   "owner",   "terminal",
                                "entered",   "entered_per_day", "left",    "open",
                                "overdue",   "open_in_window",  "latency", "deadline",
                                "suggestion"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        ck_assert_msg(json_object_get(pay, keys[i]) != NULL, "no %s", keys[i]);
    ck_assert(json_is_integer(json_object_get(json_object_get(pay, "latency"), "p999_ms")));

    /* would_send: one command per entry, retries bounded by the misses */
    json_t *commands = json_object_get(json_object_get(order, "would_send"), "commands");
    ck_assert_int_eq(json_array_size(commands), 1);
    json_t *c = json_array_get(commands, 0);
    ck_assert_str_eq(json_string_value(json_object_get(c, "state")), "awaiting_payment");
    ck_assert_str_eq(json_string_value(json_object_get(c, "type")), "CapturePayment");
    ck_assert_str_eq(json_string_value(json_object_get(c, "topic")), "payment-commands");
    ck_assert_int_eq(num(c, "commands", NULL), 101);
    ck_assert_int_eq(num(c, "retry_max", NULL), 2);
    ck_assert_int_eq(num(c, "retries_at_most", NULL), 22);
    /* 10 of the 11 misses left late: their event came anyway. */
    ck_assert_int_eq(num(c, "arrived_after_deadline", NULL), 10);
    ck_assert(json_is_string(json_object_get(json_object_get(order, "would_send"), "assumptions")));

    /* The rejected messages: by reason, and by topic and reason, most
     * first, each with its first detail. */
    json_t *rejected = json_object_get(doc, "rejected");
    ck_assert_int_eq(num(rejected, "total", NULL), 3);
    ck_assert_int_eq(num(rejected, "by_reason", "missing_type"), 2);
    ck_assert_int_eq(num(rejected, "by_reason", "invalid_json"), 1);
    json_t *first = json_array_get(json_object_get(rejected, "by_topic"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(first, "topic")), "payments");
    ck_assert_str_eq(json_string_value(json_object_get(first, "sample")),
                     "no ce_type header and no string at /type");
    json_decref(doc);
}
END_TEST

START_TEST(definitions_from_files)
{
    /* The file, not the database, sets the deadline judged: at 2m only
     * order 101 (open for a day) misses awaiting_payment. */
    char order_v2[4096];
    snprintf(order_v2, sizeof order_v2, order_v2_fmt, "2m");
    const char *dir = tl_tmpdir();
    char *path = tl_write_file(dir, "order.json", order_v2);

    tl_output_t o = report("--json", "--definitions", path, NULL);
    ck_assert_msg(o.status == 0, "report: %s", o.err);
    json_t *doc = json_loads(o.out, 0, NULL);
    ck_assert_ptr_nonnull(doc);
    ck_assert_int_eq(json_array_size(json_object_get(doc, "processes")), 1);
    ck_assert_str_eq(json_string_value(json_object_get(doc, "definitions")), path);
    json_t *pay = state_of(doc, "order_fulfilment", "awaiting_payment");
    ck_assert_int_eq(num(pay, "deadline", "ms"), 120000);
    ck_assert_int_eq(num(pay, "deadline", "missed"), 1);
    /* From a file, the terminal states keep the file's order. */
    json_t *states =
        json_object_get(json_array_get(json_object_get(doc, "processes"), 0), "states");
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(states, 2), "state")),
                     "completed");
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(states, 3), "state")),
                     "cancelled");
    json_decref(doc);
    tl_output_free(&o);

    /* $STEWARD_DEFINITIONS does the same; a process it lacks is named. */
    char *env_def = NULL;
    ck_assert_int_ge(asprintf(&env_def, "STEWARD_DEFINITIONS=%s", path), 0);
    const char *argv[] = {NULL, "report", "--database", db_url, "--process", "refund", NULL};
    const char *env[] = {env_def, NULL};
    tl_output_t missing = tl_steward(argv, env);
    ck_assert_int_eq(missing.status, 1);
    ck_assert_msg(tl_contains(missing.err, "no process refund in ") &&
                      tl_contains(missing.err, path),
                  "got: %s", missing.err);
    tl_output_free(&missing);

    /* An invalid file is a definition error. */
    char *bad = tl_write_file(dir, "bad.json", "{\"process\": \"x\"}");
    tl_output_t invalid = report("--definitions", bad, NULL, NULL);
    ck_assert_int_eq(invalid.status, 2);
    ck_assert_msg(tl_contains(invalid.err, "invalid definitions"), "got: %s", invalid.err);
    tl_output_free(&invalid);
    free(bad);
    free(env_def);
    free(path);
}
END_TEST

START_TEST(usage_and_database_errors)
{
    tl_output_t bad = report("--since", "5x", NULL, NULL);
    ck_assert_int_eq(bad.status, 2);
    ck_assert_msg(tl_contains(bad.err, "--since '5x' is not a duration"), "got: %s", bad.err);
    tl_output_free(&bad);

    tl_output_t zero = report("--since", "0s", NULL, NULL);
    ck_assert_int_eq(zero.status, 2);
    ck_assert_msg(tl_contains(zero.err, "--since '0s' is an empty window"), "got: %s", zero.err);
    tl_output_free(&zero);

    tl_output_t extra = report("stray", NULL, NULL, NULL);
    ck_assert_int_eq(extra.status, 2);
    tl_output_free(&extra);

    const char *argv[] = {NULL, "report", "--database",
                          "postgresql://steward:s3cretpw@127.0.0.1:1/nowhere", NULL};
    const char *env[] = {"STEWARD_DEFINITIONS=", NULL};
    tl_output_t down = tl_steward(argv, env);
    ck_assert_int_eq(down.status, 1);
    ck_assert_msg(tl_contains(down.err, "cannot connect to PostgreSQL"), "got: %s", down.err);
    ck_assert(!tl_contains(down.err, "s3cretpw"));
    tl_output_free(&down);

    const char *help[] = {NULL, "report", "--help", NULL};
    tl_output_t h = tl_steward(help, NULL);
    ck_assert_int_eq(h.status, 0);
    ck_assert(tl_contains(h.out, "usage: steward report"));
    tl_output_free(&h);
}
END_TEST

/*
 * --since reads history by the time it was recorded. r_long started ten
 * days ago and left awaiting_refund an hour ago: its exit counts, with the
 * ten days, although its entry lies far outside the window. r_skewed was
 * recorded ten days ago with event times of the last hours (a producer's
 * clock far ahead): outside the recorded window, so it is not read at all,
 * where reading every row would have counted it.
 */
START_TEST(since_reads_only_its_window)
{
    const char *url = tl_db_create("report_window");
    tl_migrate(url);
    PGconn *conn = tl_db_connect(url);
    add_definition(conn, "refund", "1", "active", refund_v1);
    tl_db_exec(conn,
               "INSERT INTO steward.history (process, key, version, event_id, event_type, topic, "
               "  partition, \"offset\", event_time, from_state, to_state, outcome, "
               "  recorded_at, replica, epoch) "
               "SELECT 'refund', v.k, 1, v.e, v.t, 'refunds', 0, v.o, now() - v.ev, v.f, v.s, "
               "  v.oc, now() - v.rec, 'test', 1 "
               "FROM (VALUES "
               "  ('r_long', 'q1', 'RefundRequested', 1, interval '10 days', NULL, "
               "   'awaiting_refund', 'started', interval '10 days'), "
               "  ('r_long', 'i1', 'RefundIssued', 2, interval '1 hour', 'awaiting_refund', "
               "   'confirming', 'advanced', interval '1 hour'), "
               "  ('r_skewed', 'q2', 'RefundRequested', 3, interval '3 hours', NULL, "
               "   'awaiting_refund', 'started', interval '10 days'), "
               "  ('r_skewed', 'i2', 'RefundIssued', 4, interval '2 hours', 'awaiting_refund', "
               "   'confirming', 'advanced', interval '10 days')) "
               "  AS v(k, e, t, o, ev, f, s, oc, rec) ORDER BY v.o");
    PQfinish(conn);

    const char *argv[] = {NULL, "report", "--database", url, "--since", "1d", "--json", NULL};
    const char *env[] = {"STEWARD_DEFINITIONS=", NULL};
    tl_output_t o = tl_steward(argv, env);
    ck_assert_msg(o.status == 0, "report: %s", o.err);
    json_t *doc = json_loads(o.out, 0, NULL);
    ck_assert_ptr_nonnull(doc);
    json_t *refund = state_of(doc, "refund", "awaiting_refund");
    ck_assert_int_eq(num(refund, "entered", NULL), 0);
    ck_assert_int_eq(num(refund, "left", NULL), 1);
    ck_assert_int_eq(num(refund, "latency", "max_ms"), 10 * 86400000LL - 3600000LL);
    json_t *confirming = state_of(doc, "refund", "confirming");
    ck_assert_int_eq(num(confirming, "entered", NULL), 1);
    json_t *proc = tl_json_find(json_object_get(doc, "processes"), "process", "refund");
    ck_assert_int_eq(num(json_object_get(proc, "volume"), "started", NULL), 0);
    json_decref(doc);
    tl_output_free(&o);

    /* without --since every row counts, r_skewed's too */
    const char *all[] = {NULL, "report", "--database", url, "--json", NULL};
    o = tl_steward(all, env);
    ck_assert_msg(o.status == 0, "report: %s", o.err);
    doc = json_loads(o.out, 0, NULL);
    ck_assert_int_eq(num(state_of(doc, "refund", "awaiting_refund"), "left", NULL), 2);
    json_decref(doc);
    tl_output_free(&o);
}
END_TEST

START_TEST(engine_time_in_state)
{
    /* An operator moved r1 from awaiting_refund into confirming 1m after
     * its start; RefundConfirmed left confirming 9m after the move. The
     * engine stored that stay on the row; no stay of awaiting_refund ended
     * in a row the report reads. */
    const char *url = tl_db_create("report_engine");
    tl_migrate(url);
    PGconn *conn = tl_db_connect(url);
    add_definition(conn, "refund", "1", "active", refund_v1);
    tl_db_exec(conn,
               "INSERT INTO steward.history (process, key, version, event_id, event_type, topic, "
               "  partition, \"offset\", event_time, from_state, to_state, outcome, replica, "
               "  epoch, entered_at, time_in_state_ms, actor, reason) "
               "SELECT 'refund', 'r1', 1, v.id, v.type, 'refunds', 0, v.o, t, v.fs, v.ts, "
               "  v.outcome, 'test', 1, CASE WHEN v.outcome <> 'operator' THEN t END, v.ms, "
               "  CASE WHEN v.outcome = 'operator' THEN 'alice' END, "
               "  CASE WHEN v.outcome = 'operator' THEN 'the payment came by phone' END "
               "FROM (VALUES ('q1', 'RefundRequested', 1, NULL, 'awaiting_refund', 'started', "
               "          interval '0', NULL::bigint), "
               "        ('m1', '(operator)', 2, 'awaiting_refund', 'confirming', 'operator', "
               "          interval '1 min', NULL), "
               "        ('c1', 'RefundConfirmed', 3, 'confirming', 'refunded', 'advanced', "
               "          interval '10 min', 540000)) AS v(id, type, o, fs, ts, outcome, at, ms), "
               "  LATERAL (SELECT now() - interval '1 day' + v.at AS t) x "
               "ORDER BY v.o");
    PQfinish(conn);
    const char *argv[] = {NULL, "report", "--json", "--database", url, NULL};
    const char *env[] = {"STEWARD_DEFINITIONS=", NULL};
    tl_output_t o = tl_steward(argv, env);
    ck_assert_msg(o.status == 0, "report: %s", o.err);
    json_t *doc = json_loads(o.out, 0, NULL);
    ck_assert_msg(doc != NULL, "not JSON: %s", o.out);
    tl_output_free(&o);
    json_t *confirming = state_of(doc, "refund", "confirming");
    ck_assert_int_eq(num(confirming, "left", NULL), 1);
    ck_assert_int_eq(num(confirming, "latency", "p50_ms"), 540000);
    json_t *issuing = state_of(doc, "refund", "awaiting_refund");
    ck_assert_int_eq(num(issuing, "entered", NULL), 1);
    ck_assert_int_eq(num(issuing, "left", NULL), 0);
    json_decref(doc);
}
END_TEST

START_TEST(empty_database)
{
    /* A database with no definitions: nothing to say, and no failure. */
    const char *url = tl_db_create("report_empty");
    tl_migrate(url);
    const char *argv[] = {NULL, "report", "--database", url, NULL};
    const char *env[] = {"STEWARD_DEFINITIONS=", NULL};
    tl_output_t o = tl_steward(argv, env);
    ck_assert_msg(o.status == 0, "report: %s", o.err);
    ck_assert_msg(tl_contains(o.out, "no process definitions"), "got: %s", o.out);
    tl_output_free(&o);
}
END_TEST

/* %s the version, %s the awaiting_payment deadline. */
static const char upg_fmt[] =
    "{\"process\": \"upg\", \"version\": %s, \"mode\": \"shadow\", \"owner\": \"shop\","
    " \"key\": \"/order_id\","
    " \"events\": {\"OrderPlaced\": {\"topic\": \"orders\"},"
    "   \"PaymentCaptured\": {\"topic\": \"payments\"}},"
    " \"start\": {\"on\": \"OrderPlaced\", \"to\": \"awaiting_payment\"},"
    " \"states\": {"
    "   \"awaiting_payment\": {\"deadline\": \"%s\", \"on\": {\"PaymentCaptured\": \"paid\"}},"
    "   \"paid\": {\"terminal\": \"success\"}}}";

/* 25 orders paid after 60 s each (a suggestion of 2m: 60s * 1.5 up the
 * ladder), and open now, judged missed on version 2's 2s (or version 1's
 * 1s) with an open deadline alert: a (30 s in the state) and d (version 1,
 * 20 s) are within 2m, b (10 min) is not; c (just in) is not overdue. */
static const char *const upg_sql[] = {
    "INSERT INTO steward.history (process, key, version, event_id, event_type, topic, "
    "  partition, \"offset\", event_time, from_state, to_state, outcome, replica, epoch) "
    "SELECT 'upg', 'p' || k, 2, v.id || k, v.type, 'orders', 0, 2 * k + v.n, "
    "  now() - interval '1 h' + k * interval '1 min' + v.after, v.f, v.t, v.o, 'test', 1 "
    "FROM generate_series(1, 25) k, (VALUES (1, 'o', 'OrderPlaced', interval '0', NULL, "
    "  'awaiting_payment', 'started'), (2, 'c', 'PaymentCaptured', interval '60 s', "
    "  'awaiting_payment', 'paid', 'advanced')) AS v(n, id, type, after, f, t, o) "
    "ORDER BY k, v.n",
    "INSERT INTO steward.instances (process, key, version, state, status, started_at, "
    "  state_entered_at, deadline_at, overdue) "
    "SELECT 'upg', v.key, v.version, 'awaiting_payment', 'active', now() - v.age, now() - v.age, "
    "  now() - v.age + v.deadline, v.overdue "
    "FROM (VALUES ('a', 2, interval '30 s', interval '2 s', true), "
    "  ('b', 2, interval '10 min', interval '2 s', true), "
    "  ('c', 2, interval '0', interval '2 s', false), "
    "  ('d', 1, interval '20 s', interval '1 s', true)) AS v(key, version, age, deadline, overdue)",
    "INSERT INTO steward.alerts (kind, process, key, state, owner, summary, dedup_key, "
    "  opened_at) "
    "SELECT k.kind, 'upg', k.key, 'awaiting_payment', 'shop', 'late', 'u' || k.key || k.kind, "
    "  now() FROM (VALUES ('deadline', 'a'), ('deadline', 'b'), ('deadline', 'd'), "
    "  ('sequence', 'a')) AS k(kind, key)",
};

START_TEST(what_an_upgrade_to_the_suggestion_would_move)
{
    const char *url = tl_db_create("report_upgrade");
    tl_migrate(url);
    char v1[2048], v2[2048];
    snprintf(v1, sizeof v1, upg_fmt, "1", "1s");
    snprintf(v2, sizeof v2, upg_fmt, "2", "2s");
    PGconn *conn = tl_db_connect(url);
    add_definition(conn, "upg", "1", "shadow", v1);
    add_definition(conn, "upg", "2", "shadow", v2);
    for (size_t i = 0; i < sizeof upg_sql / sizeof upg_sql[0]; i++)
        tl_db_exec(conn, upg_sql[i]);
    char *ids = tl_db_scalar(conn,
                             "SELECT string_agg(id::text, ', ' ORDER BY id) FROM steward.alerts "
                             "WHERE kind = 'deadline' AND key IN ('a', 'd')",
                             0, NULL);

    const char *argv[] = {NULL, "report", "--database", url, "--json", NULL};
    const char *env[] = {"STEWARD_DEFINITIONS=", NULL};
    tl_output_t o = tl_steward(argv, env);
    ck_assert_msg(o.status == 0, "report --json: %d: %s", o.status, o.err);
    json_t *doc = json_loads(o.out, 0, NULL);
    ck_assert_msg(doc != NULL, "not JSON: %s", o.out);
    tl_output_free(&o);
    json_t *sug = json_object_get(state_of(doc, "upg", "awaiting_payment"), "suggestion");
    ck_assert_int_eq(num(sug, "deadline_ms", NULL), 120000);
    json_t *up = json_object_get(sug, "upgrade");
    ck_assert_int_eq(num(up, "instances", NULL), 4);
    ck_assert_int_eq(num(up, "alerts_resolved", NULL), 2);
    char *got = json_dumps(json_object_get(up, "alert_ids"), JSON_COMPACT);
    char want[128];
    snprintf(want, sizeof want, "[%s]", ids);
    for (char *c = want; *c != '\0'; c++) /* "1, 3" as JSON_COMPACT writes it: "1,3" */
        if (*c == ' ')
            memmove(c, c + 1, strlen(c));
    ck_assert_str_eq(got, want);
    free(got);
    json_decref(doc);

    /* Nothing moved: the report reads. */
    char *left = tl_db_scalar(conn,
                              "SELECT string_agg(key || version || overdue, ' ' ORDER BY key) || "
                              "' ' || (SELECT count(*) FROM steward.alerts WHERE resolved_at IS "
                              "NULL) FROM steward.instances",
                              0, NULL);
    ck_assert_str_eq(left, "a2true b2true c2false d1true 4");
    free(left);

    const char *text_argv[] = {NULL, "report", "--database", url, NULL};
    o = tl_steward(text_argv, env);
    ck_assert_msg(o.status == 0, "report: %d: %s", o.status, o.err);
    char line[256];
    snprintf(line, sizeof line,
             "  awaiting_payment: an upgrade to the suggested 2m would move 4 open instances and "
             "resolve 2 deadline alerts (%s)\n",
             ids);
    ck_assert_msg(tl_contains(o.out, line), "no line\n%sin:\n%s", line, o.out);
    tl_output_free(&o);
    free(ids);
    PQfinish(conn);
}
END_TEST

Suite *report_suite(void)
{
    Suite *s = suite_create("report");
    TCase *tc = tcase_create("report");
    tcase_set_timeout(tc, 120);
    tcase_add_unchecked_fixture(tc, world_setup, NULL);
    tcase_add_test(tc, percentiles_counts_and_alert_arithmetic);
    tcase_add_test(tc, text_table);
    tcase_add_test(tc, histograms);
    tcase_add_test(tc, graph_of_a_recorded_process);
    tcase_add_test(tc, too_few_samples_and_clamped_times);
    tcase_add_test(tc, process_filter);
    tcase_add_test(tc, since_window);
    tcase_add_test(tc, since_reads_only_its_window);
    tcase_add_test(tc, json_shape);
    tcase_add_test(tc, definitions_from_files);
    tcase_add_test(tc, usage_and_database_errors);
    tcase_add_test(tc, empty_database);
    tcase_add_test(tc, engine_time_in_state);
    tcase_add_test(tc, what_an_upgrade_to_the_suggestion_would_move);
    suite_add_tcase(s, tc);
    return s;
}
