/*
 * test_active - active mode end to end on the real broker and PostgreSQL,
 * asserting on the command outbox (steward.commands): no dispatcher runs
 * here, so queued commands stay queued and every row can be read.
 *
 *   retries      reserving (deadline 2s, retry max 2, backoff 1s doubling)
 *                is re-sent twice with new attempts, tokens and ids, each
 *                a backoff after the missed deadline; then on_timeout enters
 *                refunding, which queues its own command; only refunding's
 *                timeout pages
 *   lease        heartbeats push the lease on; once they stop it expires
 *                and the command is re-sent with a new token; the old
 *                holder's late reply is recorded as stale and changes
 *                nothing; the new holder's reply finishes the instance;
 *                inspect shows the holder, the lease's end, the token and
 *                the commands
 *   operator retry  steward retry queues the step's command again with
 *                attempt + 1 and token + 1 and an audited history row; the
 *                old token's reply is stale; a finished instance (and, in
 *                promotion, a shadow one) is refused
 *                (inspect --json shows the token and both commands)
 *   cancelled    with dispatch paused, a reply moving the instance on (and
 *                an operator's close or move) cancels the unsent command of
 *                the step left; a move into a state with a command queues
 *                it as an event's entry does; on resume only the new
 *                steps' commands go
 *   lagging      a consumer catching up on old events (the watermark
 *                behind the wall clock) re-sends nothing though the
 *                deadlines passed long ago in wall-clock time
 *   promotion    an instance started on a shadow version is not commanded
 *                after the active version is loaded, and pages as shadow
 *                instances do; a new instance on the active version is
 */
#include "testlib.h"
#include "world.h"

#include <check.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

static tw_world_t w;
static const char *paused; /* dispatch.paused; NULL: "*" */

static void world_init(const char *name)
{
    tw_init(&w, name);
    paused = NULL;
    tw_create_topics(&w, TW_LIST("orders", "stock", "picking", "payments"), 1);
    tw_migrate(&w);
}

/* Writes definition version `version` in `mode` into the definitions
 * directory, and config.json pointing at that directory. */
static void world_definition(const char *version, const char *mode, const char *d1)
{
    char defs[1024], file[64];
    snprintf(defs, sizeof defs, "%s/defs", w.dir);
    mkdir(defs, 0755);
    snprintf(file, sizeof file, "defs/v%s.json", version);
    free(tw_write_template(&w, "tests/data/definitions/active_order.json.in", file,
                           TW_LIST("@V@", version, "@MODE@", mode, "@D1@", d1)));
    json_t *cfg = tw_config(&w, "defs");
    json_t *parts = json_pack("{s:{s:s, s:s, s:s}, s:{s:s}, s:{s:[{s:s}]}, s:{s:s}, s:{s:s}}",
                              "scheduler", "interval", "200ms", "grace", "0s", "blind_after", "10m",
                              "http", "listen", "127.0.0.1:0", "routes", "default", "type", "log",
                              "kafka", "topic.metadata.refresh.interval.ms", "1000",
                              /* What is queued, and when, is this suite's subject: the
                               * dispatcher (integration.dispatch) holds off. */
                              "dispatch", "paused", paused != NULL ? paused : "*");
    ck_assert_int_eq(json_object_update(cfg, parts), 0);
    json_decref(parts);
    tw_config_write(&w, cfg);
}

static void world_start(void)
{
    tw_start(&w, TW_LIST("--replica", "r1"), true);
}

static void world_stop(void)
{
    tw_stop(&w, 20);
}

static void teardown(void)
{
    tw_teardown(&w);
}

static void wait_for(const char *sql, const char *expected, int timeout_s)
{
    tw_wait(&w, sql, NULL, expected, timeout_s, sql);
}

static char *scalar(const char *sql)
{
    char *v = tl_db_scalar(w.conn, sql, 0, NULL);
    ck_assert_ptr_nonnull(v);
    return v;
}

static void expect(const char *sql, const char *want)
{
    tw_expect(&w, sql, NULL, want);
}

static long long now_ms(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (long long) tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

/* Produces event `type` for order `key` on topic `name`, at Kafka time ts
 * (0: now), with `extra` JSON members ("" for none). */
static void send(tl_producer_t *p, const char *name, const char *type, const char *key,
                 const char *extra, long long ts)
{
    char value[512], *t = tw_topic(&w, name);
    snprintf(value, sizeof value, "{\"type\":\"%s\",\"order_id\":\"%s\",\"total\":42.5%s%s}", type,
             key, extra[0] ? "," : "", extra);
    tl_produce(p, t, 0, value, -1, NULL, ts);
    free(t);
}

/* Nothing moves the watermarks of the four topics unless steward reads
 * them; one message each on the topics no order uses yet starts them. */
static void touch_topics(tl_producer_t *p)
{
    send(p, "stock", "Noise", "none", "", 0);
    send(p, "picking", "Noise", "none", "", 0);
    send(p, "payments", "Noise", "none", "", 0);
}

/* steward PROCESS KEY ... --database --actor alice */
static tl_output_t steward_cli(const char *a0, const char *a1, const char *a2, const char *a3,
                               const char *a4, const char *a5)
{
    const char *argv[16] = {NULL};
    int n = 1;
    const char *args[] = {a0, a1, a2, a3, a4, a5};
    for (size_t i = 0; i < sizeof args / sizeof args[0] && args[i] != NULL; i++)
        argv[n++] = args[i];
    argv[n++] = "--database";
    argv[n++] = w.db_url;
    if (strcmp(a0, "inspect") != 0) {
        argv[n++] = "--actor";
        argv[n++] = "alice";
    }
    return tl_steward(argv, NULL);
}

/* steward inspect PROCESS KEY --json, parsed. */
static json_t *inspect_json(const char *key)
{
    tl_output_t o = steward_cli("inspect", "active_order", key, "--json", NULL, NULL);
    ck_assert_msg(o.status == 0, "inspect: %d %s", o.status, o.err);
    json_error_t jerr;
    json_t *doc = json_loads(o.out, 0, &jerr);
    ck_assert_msg(doc != NULL, "inspect --json: %s: %s", jerr.text, o.out);
    tl_output_free(&o);
    return doc;
}

START_TEST(retries_backoff_then_on_timeout_into_compensation)
{
    world_init("act_retry");
    world_definition("1", "active", "2s");
    world_start();
    tl_producer_t *p = tl_producer_new();
    touch_topics(p);
    send(p, "orders", "OrderPlaced", "A1", "", 0);
    tl_producer_free(p);

    /* Two re-sends, on_timeout, refunding's own command, then its page. */
    wait_for("SELECT count(*) FROM steward.alerts WHERE kind = 'deadline' AND key = 'A1'", "1", 40);
    expect("SELECT string_agg(state || ':' || step || ':' || attempt || ':' || token, ' ' "
           "ORDER BY id) FROM steward.commands WHERE key = 'A1'",
           "reserving:1:0:1 reserving:1:1:2 reserving:1:2:3 refunding:2:0:4");
    expect("SELECT count(DISTINCT ce_id) FROM steward.commands WHERE key = 'A1'", "4");
    expect("SELECT count(*) FROM steward.commands WHERE key = 'A1' AND ce_id <> "
           "encode(sha256(convert_to(process || chr(31) || key || chr(31) || step || chr(31) || "
           "attempt, 'UTF8')), 'hex')",
           "0");
    /* Types are kept: the captured number stays a number. */
    expect("SELECT payload::text FROM steward.commands WHERE key = 'A1' AND attempt = 1",
           "{\"note\": \"attempt 1\", \"token\": 2, \"total\": 42.5, \"order_id\": \"A1\"}");
    expect("SELECT payload->>'amount' FROM steward.commands WHERE state = 'refunding'", "42.5");
    /* A re-send is queued once its backoff passed after the missed
     * deadline, ready to go: at the order's time + 2s + 1s, then + 2s + 2s
     * more (doubled). Deadlines are judged against the watermark, which
     * follows the wall clock only as intake and the scheduler poll: the
     * rows are checked from below against the order's own time (never
     * re-sent early; a loaded machine may be late, and so may the first
     * command, which waits for the consumer to join), the backoffs exactly
     * in history. */
    expect("SELECT bool_and(next_attempt_at = created_at) FROM steward.commands WHERE key = 'A1'",
           "t");
    expect("SELECT string_agg((extract(epoch FROM c.created_at - h.event_time) >= "
           "  CASE c.attempt WHEN 1 THEN 2.95 ELSE 6.95 END)::text, ' ' ORDER BY c.attempt) "
           "FROM steward.commands c JOIN steward.history h ON h.key = c.key AND "
           "  h.event_type = 'OrderPlaced' "
           "WHERE c.key = 'A1' AND c.state = 'reserving' AND c.attempt > 0",
           "true true");
    expect("SELECT string_agg(substring(detail FROM '; re-sent .*$'), ' ' ORDER BY id) FROM "
           "steward.history WHERE key = 'A1' AND outcome = 'retried'",
           "; re-sent (attempt 1) after a backoff of 1s ; re-sent (attempt 2) after a backoff of "
           "2s");
    expect("SELECT string_agg(outcome, ' ' ORDER BY id) FROM steward.history WHERE key = 'A1' "
           "AND outcome IN ('retried', 'timeout')",
           "retried retried timeout");
    /* The dispatcher is paused here: the words count the rows queued, say
     * none was delivered and that the pause holds them, never that a
     * command was sent. */
    expect("SELECT count(*) FROM steward.history WHERE key = 'A1' AND outcome = 'timeout' AND "
           "detail LIKE 'ReserveStock queued 3, delivered 0: dispatch is paused "
           "(dispatch.paused) (over %, no StockReserved or StockUnavailable); "
           "took on_timeout%refunding'",
           "1");
    /* Paged only when the compensation step itself timed out. */
    expect("SELECT state || ' ' || owner FROM steward.alerts WHERE kind = 'deadline' AND "
           "key = 'A1'",
           "refunding payments");
    expect("SELECT summary LIKE '%Refund queued 1, delivered 0: dispatch is paused "
           "(dispatch.paused) (over 2s, no Refunded); owner "
           "payments' FROM steward.alerts WHERE kind = 'deadline' AND key = 'A1'",
           "t");
    expect("SELECT state || ' ' || step || ' ' || token || ' ' || overdue FROM steward.instances "
           "WHERE key = 'A1'",
           "refunding 2 4 true");
    /* on_timeout left reserving as an event would: one stay, observed by
     * the scheduler as history has it, of at least 9 s (2 s, 1 s backoff,
     * 2 s, 2 s backoff, 2 s: each wait counts from the pass that decided
     * it, so a busy machine makes it longer, never shorter). */
    char *stay = scalar("SELECT extract(epoch FROM t.event_time - s.entered_at) FROM "
                        "steward.history t, steward.history s WHERE t.key = 'A1' AND "
                        "t.outcome = 'timeout' AND s.key = 'A1' AND s.outcome = 'started'");
    char url[128];
    snprintf(url, sizeof url, "%s/metrics", w.base);
    long status = 0;
    char *text = tl_http_get(url, &status);
    ck_assert_msg(status == 200 && text != NULL, "GET /metrics: %ld", status);
    ck_assert_msg(tl_contains(text, "steward_step_duration_seconds_count{process=\"active_order\","
                                    "state=\"reserving\"} 1\n"),
                  "no stay in reserving in /metrics");
    static const char sum[] = "steward_step_duration_seconds_sum{process=\"active_order\","
                              "state=\"reserving\"} ";
    const char *at = strstr(text, sum);
    ck_assert_msg(at != NULL, "no sum of the stays in reserving in /metrics");
    double seconds = strtod(at + sizeof sum - 1, NULL);
    ck_assert_msg(seconds >= 9.0 && seconds - strtod(stay, NULL) < 0.002 &&
                      strtod(stay, NULL) - seconds < 0.002,
                  "the stay in reserving: %.3f s in /metrics, %s s in history", seconds, stay);
    free(stay);
    free(text);
    world_stop();
}
END_TEST

START_TEST(lease_heartbeats_expiry_handoff_and_stale_reply)
{
    world_init("act_lease");
    world_definition("1", "active", "30s");
    world_start();
    tl_producer_t *p = tl_producer_new();
    touch_topics(p);
    send(p, "orders", "OrderPlaced", "L1", "", 0);
    tl_producer_free(p);
    wait_for("SELECT count(*) FROM steward.commands WHERE key = 'L1'", "1", 30);

    p = tl_producer_new();
    send(p, "stock", "StockReserved", "L1", "\"steward_token\":1", 0);
    tl_producer_free(p);
    wait_for("SELECT state || ' ' || token FROM steward.instances WHERE key = 'L1'", "picking 2",
             20);

    long long claimed = now_ms();
    p = tl_producer_new();
    send(p, "picking", "PickStarted", "L1", "\"worker_id\":\"picker-7\",\"steward_token\":2", 0);
    tl_producer_free(p);
    wait_for("SELECT lease_holder FROM steward.instances WHERE key = 'L1'", "picker-7", 20);
    /* inspect (and so the HTTP answer) shows the holder, until when, the
     * token and the commands sent for the instance. */
    json_t *doc = inspect_json("L1");
    ck_assert_str_eq(json_string_value(json_object_get(doc, "lease_holder")), "picker-7");
    char *until = scalar("SELECT steward.rfc3339(lease_expires_at) FROM steward.instances WHERE "
                         "key = 'L1'");
    ck_assert_str_eq(json_string_value(json_object_get(doc, "lease_expires_at")), until);
    ck_assert_int_eq(json_integer_value(json_object_get(doc, "token")), 2);
    ck_assert_int_eq(json_integer_value(json_object_get(doc, "step")), 2);
    json_t *cmds = json_object_get(doc, "commands");
    ck_assert_int_eq(json_array_size(cmds), 2);
    json_t *last = json_array_get(cmds, 1);
    ck_assert_str_eq(json_string_value(json_object_get(last, "state")), "picking");
    ck_assert_int_eq(json_integer_value(json_object_get(last, "token")), 2);
    ck_assert_str_eq(json_string_value(json_object_get(last, "status")), "pending");
    ck_assert(json_is_null(json_object_get(last, "sent_at")));
    char *ce_id = scalar("SELECT ce_id FROM steward.commands WHERE key = 'L1' AND token = 2");
    ck_assert_str_eq(json_string_value(json_object_get(last, "ce_id")), ce_id);
    free(ce_id);
    json_decref(doc);
    tl_output_t o = steward_cli("inspect", "active_order", "L1", NULL, NULL, NULL);
    char want[128];
    snprintf(want, sizeof want, "lease             held by picker-7 until %s", until);
    ck_assert_msg(o.status == 0 && strstr(o.out, want) != NULL &&
                      strstr(o.out, "fencing token     2") != NULL &&
                      strstr(o.out, "PickOrder") != NULL,
                  "inspect: %s", o.out);
    tl_output_free(&o);
    free(until);

    /* Heartbeats every second for 6 s: the lease (4 s) runs on past the
     * claim's (the margin absorbs a slow producer on a busy machine). The
     * pace is the scenario, so these sleeps wait for nothing. */
    for (int i = 0; i < 6; i++) {
        usleep(1000 * 1000);
        p = tl_producer_new();
        send(p, "picking", "PickHeartbeat", "L1", "\"steward_token\":2", 0);
        tl_producer_free(p);
    }
    char sql[512];
    snprintf(sql, sizeof sql,
             "SELECT steward.to_ms(lease_expires_at) > %lld + 6000 FROM steward.instances "
             "WHERE key = 'L1'",
             claimed);
    wait_for(sql, "t", 10);
    expect("SELECT count(*) FROM steward.history WHERE key = 'L1' AND outcome = 'handed_off'", "0");
    expect("SELECT count(*) > 1 FROM steward.history WHERE key = 'L1' AND outcome = 'renewed'",
           "t");

    /* The heartbeats stop: the lease expires and the step is handed off. */
    wait_for("SELECT count(*) FROM steward.history WHERE key = 'L1' AND outcome = 'handed_off'",
             "1", 20);
    expect("SELECT state || ':' || step || ':' || attempt || ':' || token FROM steward.commands "
           "WHERE key = 'L1' ORDER BY id DESC LIMIT 1",
           "picking:2:1:3");
    expect("SELECT detail LIKE 'held by picker-7, last heartbeat %s ago, lease 4s: PickOrder "
           "re-sent with token 3' FROM steward.history WHERE key = 'L1' AND "
           "outcome = 'handed_off'",
           "t");
    expect("SELECT lease_holder IS NULL AND token = 3 FROM steward.instances WHERE key = 'L1'",
           "t");

    /* picker-7 answers late with its old token: stale, nothing moves. */
    p = tl_producer_new();
    send(p, "picking", "Picked", "L1", "\"steward_token\":2,\"id\":\"zombie\"", 0);
    tl_producer_free(p);
    wait_for("SELECT count(*) FROM steward.history WHERE key = 'L1' AND outcome = 'stale'", "1",
             20);
    expect("SELECT state FROM steward.instances WHERE key = 'L1'", "picking");

    /* The new holder claims the step and its reply finishes it: the lease
     * is released. */
    p = tl_producer_new();
    send(p, "picking", "PickStarted", "L1",
         "\"worker_id\":\"picker-9\",\"steward_token\":3,\"id\":\"claim2\"", 0);
    send(p, "picking", "Picked", "L1", "\"steward_token\":3,\"id\":\"fresh\"", 0);
    tl_producer_free(p);
    wait_for("SELECT state FROM steward.instances WHERE key = 'L1'", "done", 20);
    expect("SELECT string_agg(outcome || ':' || coalesce(detail, ''), ' | ' ORDER BY id) FROM "
           "steward.history WHERE key = 'L1' AND outcome = 'released'",
           "released:picking released by picker-9");
    world_stop();
}
END_TEST

START_TEST(operator_retry_resends_with_a_new_attempt_and_token)
{
    world_init("act_opretry");
    world_definition("1", "active", "60s");
    world_start();
    tl_producer_t *p = tl_producer_new();
    touch_topics(p);
    send(p, "orders", "OrderPlaced", "R1", "", 0);
    wait_for("SELECT count(*) FROM steward.commands WHERE key = 'R1'", "1", 30);

    /* A captured 90.34 prints as 90.34, not as the double's 17 digits
     * (90.340000000000003), in inspect, its --json and the re-sent
     * command. */
    tl_db_exec(w.conn, "UPDATE steward.instances SET vars = '{\"total\": 90.34}' WHERE key = 'R1'");
    tl_output_t o = steward_cli("inspect", "active_order", "R1", NULL, NULL, NULL);
    ck_assert_msg(o.status == 0 && strstr(o.out, "{\"total\":90.34}") != NULL, "inspect: %s",
                  o.out);
    tl_output_free(&o);
    o = steward_cli("inspect", "active_order", "R1", "--json", NULL, NULL);
    ck_assert_msg(o.status == 0 && strstr(o.out, "\"total\": 90.34\n") != NULL &&
                      strstr(o.out, "90.3400") == NULL,
                  "inspect --json: %s", o.out);
    tl_output_free(&o);

    o = steward_cli("retry", "active_order", "R1", "--reason", "stock service restarted", NULL);
    ck_assert_msg(o.status == 0, "retry: %d %s %s", o.status, o.out, o.err);
    tl_output_free(&o);
    /* A second row for the same step: attempt + 1, token + 1, its own id. */
    expect("SELECT string_agg(state || ':' || step || ':' || attempt || ':' || token, ' ' "
           "ORDER BY id) FROM steward.commands WHERE key = 'R1'",
           "reserving:1:0:1 reserving:1:1:2");
    expect("SELECT count(DISTINCT ce_id) FROM steward.commands WHERE key = 'R1'", "2");
    json_t *doc = inspect_json("R1");
    ck_assert_int_eq(json_integer_value(json_object_get(doc, "token")), 2);
    json_t *cmds = json_object_get(doc, "commands");
    ck_assert_int_eq(json_array_size(cmds), 2);
    ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(cmds, 1), "attempt")), 1);
    json_decref(doc);
    expect("SELECT payload->>'note' || ' ' || (payload->>'token') || ' ' || (payload->>'total') "
           "FROM steward.commands WHERE key = 'R1' AND attempt = 1",
           "attempt 1 2 90.34");
    expect("SELECT attempt || ' ' || token || ' ' || (abs(extract(epoch FROM deadline_at - now()) "
           "- 60) < 5) FROM steward.instances WHERE key = 'R1'",
           "1 2 true");
    expect("SELECT from_state || ' ' || to_state || ' ' || actor || ': ' || reason || ' (' || "
           "detail || ')' FROM steward.history WHERE key = 'R1' AND event_type = "
           "'operator:retry'",
           "reserving reserving alice: stock service restarted (ReserveStock re-sent by an "
           "operator (attempt 1, token 2))");

    /* A reply carrying the first command's token is stale now. */
    send(p, "stock", "StockReserved", "R1", "\"steward_token\":1", 0);
    wait_for("SELECT count(*) FROM steward.history WHERE key = 'R1' AND outcome = 'stale'", "1",
             30);
    send(p, "stock", "StockReserved", "R1", "\"steward_token\":2", 0);
    send(p, "picking", "Picked", "R1", "", 0);
    tl_producer_free(p);
    wait_for("SELECT status FROM steward.instances WHERE key = 'R1'", "success", 30);

    /* A finished instance: refused, nothing queued or recorded. */
    o = steward_cli("retry", "active_order", "R1", "--reason", "again", NULL);
    ck_assert_msg(o.status == 1 && strstr(o.err, "already finished") != NULL, "retry: %d %s",
                  o.status, o.err);
    tl_output_free(&o);
    expect("SELECT count(*) FROM steward.history WHERE key = 'R1' AND event_type = "
           "'operator:retry'",
           "1");
    world_stop();
}
END_TEST

START_TEST(commands_of_a_step_left_are_cancelled_not_sent)
{
    world_init("act_cancel");
    char *cmd_topics[2] = {tw_topic(&w, "stock-commands"), tw_topic(&w, "pick-commands")};
    tl_kafka_create_topics((const char *const *) cmd_topics, 2, 1);
    free(cmd_topics[0]);
    free(cmd_topics[1]);
    world_definition("1", "active", "60s");
    world_start();
    tl_producer_t *p = tl_producer_new();
    touch_topics(p);
    send(p, "orders", "OrderPlaced", "C1", "", 0);
    send(p, "orders", "OrderPlaced", "C2", "", 0);
    send(p, "orders", "OrderPlaced", "C3", "", 0);
    wait_for("SELECT count(*) FROM steward.commands", "3", 30);

    /* Dispatch is paused: ReserveStock waits. The reply (no token) moves
     * C1 on; its ReserveStock is for a step that is over. */
    send(p, "stock", "StockReserved", "C1", "", 0);
    tl_producer_free(p);
    wait_for("SELECT count(*) FROM steward.commands WHERE key = 'C1'", "2", 30);
    expect("SELECT cancel_reason FROM steward.commands WHERE key = 'C1' AND state = 'reserving' "
           "AND sent_at IS NULL",
           "the instance left reserving (step 1) for picking (step 2) before it was sent");
    expect("SELECT count(*) FROM steward.commands WHERE key = 'C1' AND state = 'picking' AND "
           "cancelled_at IS NULL",
           "1");
    /* An operator's close and move leave the step too. */
    tl_output_t o;
    const char *cargv[] = {
        NULL,       "close",   "active_order", "C2",         "--as",   "cancelled", "--reason",
        "refunded", "--actor", "alice",        "--database", w.db_url, NULL};
    o = tl_steward(cargv, NULL);
    ck_assert_msg(o.status == 0, "close: %d %s", o.status, o.err);
    tl_output_free(&o);
    const char *margv[] = {NULL,      "move",    "active_order", "C3",
                           "--to",    "picking", "--reason",     "reserved by hand",
                           "--actor", "alice",   "--database",   w.db_url,
                           NULL};
    o = tl_steward(margv, NULL);
    ck_assert_msg(o.status == 0, "move: %d %s", o.status, o.err);
    /* The move enters picking as StockReserved would: its PickOrder is
     * queued with the next token, for the new step. */
    ck_assert_msg(strstr(o.out, "queued PickOrder to ") != NULL &&
                      strstr(o.out, "(step 2, attempt 0, token 2)") != NULL,
                  "move printed: %s", o.out);
    tl_output_free(&o);
    expect("SELECT step || ':' || attempt || ':' || token || ':' || (cancelled_at IS NULL) FROM "
           "steward.commands WHERE key = 'C3' AND state = 'picking'",
           "2:0:2:true");
    expect("SELECT step || ':' || token || ':' || state FROM steward.instances WHERE key = 'C3'",
           "2:2:picking");
    expect("SELECT detail FROM steward.history WHERE key = 'C3' AND outcome = 'operator'",
           "PickOrder sent on entry (step 2, token 2)");
    expect("SELECT string_agg(key || ': ' || cancel_reason, ' | ' ORDER BY key) FROM "
           "steward.commands WHERE key IN ('C2', 'C3') AND cancelled_at IS NOT NULL",
           "C2: the instance finished (cancelled in cancelled) before it was sent | C3: the "
           "instance left reserving (step 1) for picking (step 2) before it was sent");
    json_t *doc = inspect_json("C1");
    json_t *first = json_array_get(json_object_get(doc, "commands"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(first, "status")), "cancelled");
    json_decref(doc);

    /* Resume: picking's PickOrders go (C1's after its reply, C3's after the
     * move); the cancelled ReserveStocks never do (sent in order, they
     * would have gone first). */
    paused = "";
    world_definition("1", "active", "60s");
    ck_assert_int_eq(kill(w.pids[0], SIGHUP), 0);
    wait_for("SELECT count(*) FROM steward.commands WHERE state = 'picking' AND "
             "sent_at IS NOT NULL",
             "2", 40);
    expect("SELECT string_agg(key, ',' ORDER BY key) FROM steward.commands WHERE sent_at IS NOT "
           "NULL",
           "C1,C3");
    expect("SELECT count(*) FROM steward.commands WHERE cancelled_at IS NOT NULL AND sent_at IS "
           "NULL",
           "3");
    world_stop();
}
END_TEST

START_TEST(lagging_consumer_resends_nothing)
{
    world_init("act_lag");
    world_definition("1", "active", "2s");
    /* Written before steward runs, an hour old: the deadline (2 s) passed
     * long ago by the wall clock, never by the events' own time. */
    long long t = now_ms() - 3600 * 1000;
    tl_producer_t *p = tl_producer_new();
    for (int i = 0; i < 50; i++) {
        char key[16];
        snprintf(key, sizeof key, "G%d", i);
        send(p, "orders", "OrderPlaced", key, "", t + i * 100);
        send(p, "stock", "StockReserved", key, "", t + i * 100 + 1000);
    }
    send(p, "picking", "Noise", "none", "", t);
    send(p, "payments", "Noise", "none", "", t);
    tl_producer_free(p);
    world_start();

    wait_for("SELECT count(*) FROM steward.instances WHERE state = 'picking'", "50", 40);
    wait_for("SELECT count(*) FROM steward.commands WHERE state = 'picking' AND attempt = 0", "50",
             20);
    /* Reserving was answered a second after each order, by the events'
     * own time: judged during the catch-up, it is never re-sent. Picking,
     * entered an hour ago and never answered, is due once the caught-up
     * watermark reaches now, so its re-send then is right and not counted
     * here. */
    expect("SELECT count(*) FROM steward.commands WHERE state = 'reserving' AND attempt = 0", "50");
    expect("SELECT count(*) FROM steward.commands WHERE state = 'reserving' AND attempt > 0", "0");
    expect("SELECT count(*) FROM steward.history WHERE outcome IN ('retried', 'timeout') "
           "AND from_state = 'reserving'",
           "0");
    world_stop();
}
END_TEST

START_TEST(promotion_does_not_recommand_in_flight_instances)
{
    world_init("act_promote");
    world_definition("1", "shadow", "3s");
    world_start();
    tl_producer_t *p = tl_producer_new();
    touch_topics(p);
    send(p, "orders", "OrderPlaced", "S1", "", 0);
    tl_producer_free(p);
    wait_for("SELECT version || ' ' || state FROM steward.instances WHERE key = 'S1'",
             "1 reserving", 30);
    world_stop();

    /* Promote: version 2, active. S1 keeps version 1. */
    world_definition("2", "active", "3s");
    world_start();
    p = tl_producer_new();
    send(p, "orders", "OrderPlaced", "S2", "", 0);
    tl_producer_free(p);
    wait_for("SELECT count(*) FROM steward.commands WHERE key = 'S2'", "1", 30);
    /* S1's deadline passes: a shadow page, no re-send, no on_timeout. */
    wait_for("SELECT count(*) FROM steward.alerts WHERE kind = 'deadline' AND key = 'S1'", "1", 30);
    expect("SELECT count(*) FROM steward.commands WHERE key = 'S1'", "0");
    expect("SELECT version || ' ' || state || ' ' || token || ' ' || overdue FROM "
           "steward.instances WHERE key = 'S1'",
           "1 reserving 0 true");
    expect("SELECT count(*) FROM steward.history WHERE key = 'S1' AND outcome IN ('retried', "
           "'timeout')",
           "0");
    /* Nor can an operator command it: its version is shadow. */
    tl_output_t o = steward_cli("retry", "active_order", "S1", "--reason", "try it", NULL);
    ck_assert_msg(o.status == 1 && strstr(o.err, "shadow mode") != NULL, "retry: %d %s", o.status,
                  o.err);
    tl_output_free(&o);
    expect("SELECT count(*) FROM steward.commands WHERE key = 'S1'", "0");
    world_stop();
}
END_TEST

Suite *active_suite(void);
Suite *active_suite(void)
{
    Suite *s = suite_create("active");
    TCase *tc = tcase_create("active");
    tcase_set_timeout(tc, 120);
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_add_test(tc, retries_backoff_then_on_timeout_into_compensation);
    tcase_add_test(tc, lease_heartbeats_expiry_handoff_and_stale_reply);
    tcase_add_test(tc, operator_retry_resends_with_a_new_attempt_and_token);
    tcase_add_test(tc, commands_of_a_step_left_are_cancelled_not_sent);
    tcase_add_test(tc, lagging_consumer_resends_nothing);
    tcase_add_test(tc, promotion_does_not_recommand_in_flight_instances);
    suite_add_tcase(s, tc);
    return s;
}
