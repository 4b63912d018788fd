/*
 * test_alerting - deadlines, alerts and pages, end to end: steward run on
 * the real broker and PostgreSQL, paging the test's HTTP receiver (standing
 * in for PagerDuty and webhooks) and a real Alertmanager.
 *
 *   paging      a stall pages once; the late event resolves the same page,
 *               in PagerDuty and in Alertmanager
 *   delivery    500s retried, a receiver that is down waited for, a 400
 *               recorded as failed with its body
 *   watermark   a backlog of 10,000 instances read from the beginning raises
 *               exactly the 25 real stalls, at their steps, and nothing else
 *   replicas    two processes on one database alert each deadline once
 *   blind       a broker that goes away opens one blind alert, holds every
 *               deadline while it is away, and the real stalls follow it
 *   reload      SIGHUP with a broken definition keeps the running one; with
 *               a new version, new instances start on it and old ones keep
 *               theirs
 */
#include "manager/alerting/alerts.h"
#include "manager/sinks/routes.h"
#include "receiver.h"
#include "testlib.h"
#include "world.h"

#include <check.h>
#include <curl/curl.h>
#include <jansson.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static tw_world_t w;
static const char *brokers; /* the world's brokers: the test broker or a mock cluster */

/* Topics, the definition, a migrated database. brokers NULL: the test broker. */
static void world_init(const char *name, const char *d1, const char *d2, int partitions,
                       const char *mock_brokers)
{
    tw_init(&w, name);
    brokers = mock_brokers != NULL ? mock_brokers : tl_kafka_brokers();
    free(tw_write_template(&w, "tests/data/definitions/alert_order.json.in", "alert_order.json",
                           TW_LIST("@D1@", d1, "@D2@", d2)));
    if (mock_brokers == NULL)
        tw_create_topics(&w, TW_LIST("orders", "payments", "shipping"), partitions);
    tw_migrate(&w);
}

/* Writes config.json: the world's settings plus `routes` (JSON text). */
static void world_config(const char *routes, const char *blind_after)
{
    json_error_t jerr;
    json_t *r = json_loads(routes, 0, &jerr);
    ck_assert_msg(r != NULL, "routes: %s", jerr.text);
    json_t *cfg = tw_config(&w, "alert_order.json");
    json_t *parts =
        json_pack("{s:s, s:{s:s, s:s, s:s}, s:{s:s, s:s, s:s, s:s}, s:{s:s}, s:o, s:{s:s}}",
                  "brokers", brokers, "scheduler", "interval", "200ms", "grace", "200ms",
                  "blind_after", blind_after, "notifier", "interval", "100ms", "timeout", "2s",
                  "max_backoff", "1s", "alertmanager_resend", "1s", "http", "listen", "", "routes",
                  r, "kafka", "topic.metadata.refresh.interval.ms", "1000");
    ck_assert_int_eq(json_object_update(cfg, parts), 0);
    json_decref(parts);
    tw_config_write(&w, cfg);
}

/* Changes one key of the written config.json: section.key = value (taken). */
static void world_config_set(const char *section, const char *key, json_t *value)
{
    json_t *cfg = json_load_file(w.config, 0, NULL);
    ck_assert_ptr_nonnull(cfg);
    json_t *obj = json_object_get(cfg, section);
    if (obj == NULL)
        json_object_set_new(cfg, section, obj = json_object());
    json_object_set_new(obj, key, value);
    tw_config_write(&w, cfg);
}

/* Sets a top-level key of the written config.json (value taken). */
static void world_config_set_top(const char *key, json_t *value)
{
    json_t *cfg = json_load_file(w.config, 0, NULL);
    ck_assert_ptr_nonnull(cfg);
    json_object_set_new(cfg, key, value);
    tw_config_write(&w, cfg);
}

/* Waits until every partition of the world's topics is claimed. */
static void world_wait_claimed(int partitions)
{
    char expected[16];
    snprintf(expected, sizeof expected, "%d", 3 * partitions);
    tw_wait(&w, "SELECT count(*) FROM steward.offsets WHERE consumer_group = $1", TW_LIST(w.group),
            expected, 60, "partitions claimed");
}

static void teardown(void)
{
    tw_teardown(&w);
}

static void send_event(tl_producer_t *p, const char *name, const char *type, const char *key,
                       long long ts)
{
    char value[256], *t = tw_topic(&w, name);
    snprintf(value, sizeof value, "{\"type\":\"%s\",\"id\":\"%s-%s\",\"order_id\":\"%s\"}", type,
             type, key, key);
    tl_produce(p, t, -1, value, -1, NULL, ts);
    free(t);
}

static long scalar_long(const char *sql)
{
    return tw_scalar_long(&w, sql, NULL);
}

static void wait_sql(const char *sql, const char *expected, int timeout_s, const char *what)
{
    tw_wait(&w, sql, NULL, expected, timeout_s, what);
}

static json_t *request_json(rcv_t *r, size_t i, char **path)
{
    rcv_request_t req = rcv_get(r, i);
    json_error_t jerr;
    json_t *doc = json_loads(req.body, 0, &jerr);
    ck_assert_msg(doc != NULL, "request %zu is not JSON: %s", i, req.body);
    if (path != NULL)
        *path = strdup(req.path);
    rcv_request_clear(&req);
    return doc;
}

/* ---- paging ---------------------------------------------------------------- */

START_TEST(stall_pages_once_and_the_late_event_resolves_it)
{
    const char *am = getenv("STEWARD_TEST_ALERTMANAGER_URL");
    ck_assert_msg(am != NULL && *am, "STEWARD_TEST_ALERTMANAGER_URL is not set: run through "
                                     "scripts/test");
    rcv_t *r = rcv_new();
    world_init("paging", "2s", "1h", 1, NULL);
    char routes[2048];
    snprintf(
        routes, sizeof routes,
        "{\"payments\":[{\"type\":\"pagerduty\",\"name\":\"pd\","
        "\"routing_key\":\"R0UTINGKEYSECRET\",\"url\":\"%s/v2/enqueue\"},"
        "{\"type\":\"alertmanager\",\"name\":\"am\",\"url\":\"%s\",\"severity\":\"critical\"}],"
        "\"default\":[{\"type\":\"log\"}]}",
        rcv_url(r), am);
    world_config(routes, "1m");
    w.pids[0] = tw_spawn(&w, NULL);
    world_wait_claimed(1);

    char *key = tl_unique("ORD-");
    tl_producer_t *p = tl_producer_new();
    send_event(p, "orders", "OrderPlaced", key, 0);
    tl_producer_free(p);

    /* One trigger naming the instance and the state. */
    ck_assert_msg(rcv_wait(r, 1, 30000), "no page within 30 s");
    char *path;
    json_t *trigger = request_json(r, 0, &path);
    ck_assert_str_eq(path, "/v2/enqueue");
    free(path);
    ck_assert_str_eq(json_string_value(json_object_get(trigger, "event_action")), "trigger");
    ck_assert_str_eq(json_string_value(json_object_get(trigger, "routing_key")),
                     "R0UTINGKEYSECRET");
    const char *summary =
        json_string_value(json_object_get(json_object_get(trigger, "payload"), "summary"));
    ck_assert_msg(tl_contains(summary, key) &&
                      tl_contains(summary, "stalled in awaiting_payment") &&
                      tl_contains(summary, "expected PaymentCaptured") &&
                      tl_contains(summary, "owner payments"),
                  "summary: %s", summary);
    char *dedup = strdup(json_string_value(json_object_get(trigger, "dedup_key")));
    json_t *custom = json_object_get(json_object_get(trigger, "payload"), "custom_details");
    ck_assert_str_eq(json_string_value(json_object_get(custom, "key")), key);
    ck_assert_str_eq(json_string_value(json_object_get(custom, "state")), "awaiting_payment");
    json_decref(trigger);
    tl_wait_am(am, key, "active", 20);

    /* The late event: the instance advances and the same page resolves. */
    p = tl_producer_new();
    send_event(p, "payments", "PaymentCaptured", key, 0);
    tl_producer_free(p);
    ck_assert_msg(rcv_wait(r, 2, 30000), "no resolve within 30 s");
    json_t *resolve = request_json(r, 1, NULL);
    ck_assert_str_eq(json_string_value(json_object_get(resolve, "event_action")), "resolve");
    ck_assert_str_eq(json_string_value(json_object_get(resolve, "dedup_key")), dedup);
    json_decref(resolve);
    tl_wait_am(am, key, "", 20);

    /* Exactly one trigger: once no row for the instance is left to send,
     * nothing more can arrive, and the receiver has the two it was sent. */
    const char *pending_params[1] = {key};
    ck_assert_msg(tl_db_wait(w.conn,
                             "SELECT count(*) FROM steward.outbox WHERE key = $1 "
                             "AND delivered_at IS NULL AND failed_at IS NULL",
                             1, pending_params, "0", 30, NULL),
                  "rows for the instance still unsent");
    ck_assert_int_eq(scalar_long("SELECT count(*) FROM steward.outbox WHERE destination = 'pd'"),
                     2);
    ck_assert_int_eq(rcv_count(r), 2);

    const char *params[1] = {key};
    char *history = tl_db_scalar(w.conn,
                                 "SELECT detail FROM steward.history WHERE key = $1 AND "
                                 "event_type = 'PaymentCaptured'",
                                 1, params);
    ck_assert_msg(tl_contains(history, "after the deadline of awaiting_payment"), "detail: %s",
                  history);
    char *alert = tl_db_scalar(w.conn,
                               "SELECT kind || ' ' || (resolved_at IS NOT NULL) || ' ' || "
                               "resolution FROM steward.alerts WHERE key = $1",
                               1, params);
    ck_assert_msg(tl_contains(alert, "deadline true PaymentCaptured arrived"), "alert: %s", alert);
    /* How late, as a field: on the history row and on the alert it resolved. */
    char *late = tl_db_scalar(w.conn,
                              "SELECT (h.late_by_ms > 0)::text || ' ' || (a.late_by_ms > 0)::text "
                              "FROM steward.history h JOIN steward.alerts a USING (key) "
                              "WHERE h.key = $1 AND h.event_type = 'PaymentCaptured'",
                              1, params);
    ck_assert_msg(late != NULL && strcmp(late, "true true") == 0, "late_by_ms: %s", late);
    free(late);
    /* The routing key is a secret: never in the log. */
    char *log = tl_read_file(w.log);
    ck_assert_msg(!tl_contains(log, "R0UTINGKEYSECRET"), "the routing key was logged");

    free(log);
    free(alert);
    free(history);
    free(dedup);
    free(key);
    rcv_free(r);
}
END_TEST

/* ---- delivery ---------------------------------------------------------------- */

static const char outbox_of_sql[] =
    "SELECT o.attempts || ' ' || (o.delivered_at IS NOT NULL) || ' ' || (o.failed_at IS NOT "
    "NULL) FROM steward.outbox o JOIN steward.alerts a ON a.id = o.alert_id WHERE a.key = '%s' "
    "AND o.payload->>'event' = 'trigger'";

static void wait_outbox(const char *key, const char *expected)
{
    char sql[1024];
    snprintf(sql, sizeof sql, outbox_of_sql, key);
    wait_sql(sql, expected, 30, key);
}

START_TEST(delivery_retries_waits_and_records_refusals)
{
    rcv_t *r = rcv_new();
    world_init("delivery", "1s", "1h", 1, NULL);
    char routes[1024];
    snprintf(routes, sizeof routes,
             "{\"payments\":[{\"type\":\"webhook\",\"name\":\"hook\",\"url\":\"%s/hook\"}],"
             "\"default\":[{\"type\":\"log\"}]}",
             rcv_url(r));
    world_config(routes, "1m");
    w.pids[0] = tw_spawn(&w, NULL);
    world_wait_claimed(1);
    tl_producer_t *p;

    /* 500, 500, then accepted: delivered once, three attempts. */
    rcv_push(r, 500, "{\"error\":\"busy\"}", NULL, 0);
    rcv_push(r, 503, NULL, NULL, 0);
    p = tl_producer_new();
    send_event(p, "orders", "OrderPlaced", "A", 0);
    tl_producer_free(p);
    wait_outbox("A", "3 true false");
    ck_assert_int_eq(rcv_count(r), 3);
    json_t *body = request_json(r, 2, NULL);
    ck_assert_str_eq(json_string_value(json_object_get(body, "event")), "trigger");
    ck_assert_int_eq(json_integer_value(json_object_get(body, "version")), 1);
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(body, "alert"), "key")),
                     "A");
    json_decref(body);

    /* Down for a while: pending, attempts counted, then delivered once. */
    rcv_set_down(r, true);
    p = tl_producer_new();
    send_event(p, "orders", "OrderPlaced", "B", 0);
    tl_producer_free(p);
    wait_sql("SELECT o.attempts >= 2 AND o.delivered_at IS NULL FROM steward.outbox o JOIN "
             "steward.alerts a ON a.id = o.alert_id WHERE a.key = 'B'",
             "t", 30, "B pending while the receiver is down");
    char *error = tl_db_scalar(w.conn,
                               "SELECT last_error FROM steward.outbox o JOIN steward.alerts a ON "
                               "a.id = o.alert_id WHERE a.key = 'B'",
                               0, NULL);
    ck_assert_msg(tl_contains(error, "network"), "last_error: %s", error);
    free(error);
    size_t before = rcv_count(r);
    rcv_set_down(r, false);
    wait_sql("SELECT o.delivered_at IS NOT NULL FROM steward.outbox o JOIN steward.alerts a ON "
             "a.id = o.alert_id WHERE a.key = 'B'",
             "t", 30, "B delivered once the receiver is back");
    ck_assert_int_eq(rcv_count(r), before + 1);

    /* 429 with Retry-After is retried; 400 is a refusal, kept with its body. */
    rcv_push(r, 429, NULL, "1", 0);
    p = tl_producer_new();
    send_event(p, "orders", "OrderPlaced", "C", 0);
    tl_producer_free(p);
    wait_outbox("C", "2 true false");

    rcv_push(r, 400, "{\"error\":\"payload rejected: nope\"}", NULL, 0);
    p = tl_producer_new();
    send_event(p, "orders", "OrderPlaced", "D", 0);
    tl_producer_free(p);
    wait_outbox("D", "1 false true");
    error = tl_db_scalar(w.conn,
                         "SELECT last_error FROM steward.outbox o JOIN steward.alerts a ON "
                         "a.id = o.alert_id WHERE a.key = 'D'",
                         0, NULL);
    ck_assert_msg(tl_contains(error, "HTTP 400") && tl_contains(error, "payload rejected: nope"),
                  "last_error: %s", error);
    free(error);

    /* Nothing is deleted: one row per page, delivered or not. */
    ck_assert_int_eq(scalar_long("SELECT count(*) FROM steward.outbox"), 4);
    rcv_free(r);
}
END_TEST

/* ---- watermark --------------------------------------------------------------- */

START_TEST(backlog_raises_only_the_real_stalls)
{
    world_init("watermark", "10m", "10m", 3, NULL);
    world_config("{\"default\":[{\"type\":\"log\"}]}", "1m");
    /* Small fetches and batches: every partition advances a little at a
     * time, so deadlines are judged throughout the catch-up, not only after. */
    world_config_set("intake", "batch_size", json_integer(200));
    world_config_set("kafka", "max.partition.fetch.bytes", json_string("4096"));

    /* 10,025 orders placed over the last three hours, each step five
     * minutes after the one before (inside its ten-minute deadline);
     * every 401st order stops: at awaiting_payment or awaiting_dispatch.
     * Produced in time order across the topics, as the services would have. */
    long long now = (long long) time(NULL) * 1000, t0 = now - 3 * 3600 * 1000LL;
    static const char *const topics[] = {"orders", "payments", "shipping"};
    static const char *const types[] = {"OrderPlaced", "PaymentCaptured", "ShipmentDispatched"};
    /* Small record batches: a fetch brings a little of every partition. */
    const char *small[] = {"batch.size", "2048", "linger.ms", "1", NULL};
    tl_producer_t *p = tl_producer_new_conf(small);
    long messages = 0;
    char expected[4096] = "";
    size_t len = 0;
    int stalled = 0;
    /* Order i's step s happens at t0 + i s + 300 s * s: walk time, not orders. */
    for (long long sec = 0; sec < 10025 + 600; sec++) {
        for (int step = 0; step < 3; step++) {
            long long i = sec - 300LL * step;
            if (i < 0 || i >= 10025)
                continue;
            bool stalls = i % 401 == 0;
            int stop_at = (int) (i / 401) % 2 + 1; /* the step it never takes */
            if (stalls && step >= stop_at)
                continue;
            char key[16];
            snprintf(key, sizeof key, "W%05lld", i);
            send_event(p, topics[step], types[step], key, t0 + sec * 1000LL);
            messages++;
        }
    }
    tl_producer_free(p);
    for (int i = 0; i < 10025; i += 401) {
        len +=
            (size_t) snprintf(expected + len, sizeof expected - len, "%sW%05d:%s", len ? " " : "",
                              i, (i / 401) % 2 + 1 == 1 ? "awaiting_payment" : "awaiting_dispatch");
        stalled++;
    }
    ck_assert_int_eq(stalled, 25);

    w.pids[0] = tw_spawn(&w, NULL);
    char total[32];
    snprintf(total, sizeof total, "%ld", messages);
    char sql[512];
    snprintf(sql, sizeof sql,
             "SELECT coalesce(sum(next_offset), 0) FROM steward.offsets WHERE consumer_group = "
             "'%s' AND next_offset >= 0",
             w.group);
    wait_sql(sql, total, 180, "the backlog consumed");
    wait_sql("SELECT count(*) FROM steward.alerts", "25", 60, "the stalls alerted");
    /* Nothing else can follow once every open instance has had its deadline
     * judged (the definition has no process deadline). */
    wait_sql("SELECT count(*) FROM steward.instances WHERE status = 'active' AND NOT overdue", "0",
             60, "every open instance judged");
    ck_assert_int_eq(scalar_long("SELECT count(*) FROM steward.alerts"), 25);
    char *got = tl_db_scalar(w.conn,
                             "SELECT string_agg(key || ':' || state, ' ' ORDER BY key) FROM "
                             "steward.alerts WHERE kind = 'deadline'",
                             0, NULL);
    ck_assert_str_eq(got, expected);
    free(got);
}
END_TEST

/* ---- replicas ---------------------------------------------------------------- */

START_TEST(two_replicas_alert_each_deadline_once)
{
    world_init("replicas", "2s", "1h", 2, NULL);
    world_config("{\"default\":[{\"type\":\"log\"}]}", "1m");
    w.pids[0] = tw_spawn(&w, NULL);
    w.pids[1] = tw_spawn(&w, NULL);
    world_wait_claimed(2);
    tl_producer_t *p = tl_producer_new();
    for (int i = 0; i < 60; i++) {
        char key[16];
        snprintf(key, sizeof key, "R%03d", i);
        send_event(p, "orders", "OrderPlaced", key, 0);
    }
    tl_producer_free(p);
    wait_sql("SELECT count(*) FROM steward.alerts", "60", 60, "every stall alerted");
    /* Once every instance is marked judged, neither replica can judge it
     * again: a second alert would have been written by now. */
    wait_sql("SELECT count(*) FROM steward.instances WHERE overdue", "60", 60,
             "every stall marked overdue");
    ck_assert_int_eq(scalar_long("SELECT count(*) FROM steward.alerts"), 60);
    ck_assert_int_eq(scalar_long("SELECT count(DISTINCT key) FROM steward.alerts"), 60);
    ck_assert_int_eq(scalar_long("SELECT count(*) FROM steward.outbox"), 60);
    ck_assert_int_eq(scalar_long("SELECT count(*) FROM steward.instances WHERE overdue"), 60);
}
END_TEST

/* ---- blind ---------------------------------------------------------------------- */

START_TEST(lost_broker_opens_one_blind_alert_and_holds_deadlines)
{
    /* librdkafka's mock cluster, in this process: a broker the test can stop. */
    char errstr[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "bootstrap.servers", "", errstr, sizeof errstr);
    rd_kafka_t *owner = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
    ck_assert_msg(owner != NULL, "%s", errstr);
    rd_kafka_mock_cluster_t *mc = rd_kafka_mock_cluster_new(owner, 1);
    ck_assert_ptr_nonnull(mc);
    const char *bootstraps = rd_kafka_mock_cluster_bootstraps(mc);

    world_init("blind", "6s", "1h", 1, bootstraps);
    const char *names[] = {"orders", "payments", "shipping"};
    for (int i = 0; i < 3; i++) {
        char *t = tw_topic(&w, names[i]);
        ck_assert_int_eq(rd_kafka_mock_topic_create(mc, t, 1, 1), RD_KAFKA_RESP_ERR_NO_ERROR);
        free(t);
    }
    world_config("{\"default\":[{\"type\":\"log\"}]}", "3s");
    w.pids[0] = tw_spawn(&w, NULL);
    world_wait_claimed(1);

    rd_kafka_conf_t *pconf = rd_kafka_conf_new();
    rd_kafka_conf_set(pconf, "bootstrap.servers", bootstraps, errstr, sizeof errstr);
    rd_kafka_t *producer = rd_kafka_new(RD_KAFKA_PRODUCER, pconf, errstr, sizeof errstr);
    char *orders = tw_topic(&w, "orders");
    for (int i = 0; i < 3; i++) {
        char value[128];
        snprintf(value, sizeof value,
                 "{\"type\":\"OrderPlaced\",\"id\":\"b%d\",\"order_id\":\"B%d\"}", i, i);
        ck_assert_int_eq(rd_kafka_producev(producer, RD_KAFKA_V_TOPIC(orders),
                                           RD_KAFKA_V_VALUE(value, strlen(value)),
                                           RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                           RD_KAFKA_V_END),
                         RD_KAFKA_RESP_ERR_NO_ERROR);
    }
    ck_assert_int_eq(rd_kafka_flush(producer, 10000), RD_KAFKA_RESP_ERR_NO_ERROR);
    free(orders);
    wait_sql("SELECT count(*) FROM steward.instances", "3", 30, "instances started");
    time_t placed = time(NULL);

    /* The broker goes away: one blind alert, and no deadline judged. */
    rd_kafka_mock_broker_set_down(mc, 1);
    wait_sql("SELECT count(*) FROM steward.alerts WHERE kind = 'blind' AND resolved_at IS NULL",
             "1", 30, "the blind alert");
    char *summary =
        tl_db_scalar(w.conn, "SELECT summary FROM steward.alerts WHERE kind = 'blind'", 0, NULL);
    ck_assert_msg(tl_contains(summary, "is blind") && tl_contains(summary, "unread for"),
                  "summary: %s", summary);
    free(summary);
    /* The deadlines pass on the wall clock while the broker is away; what is
     * asserted is that nothing happens meanwhile, so there is no condition
     * to wait for: time itself has to pass. */
    while (time(NULL) < placed + 10)
        sleep(1);
    ck_assert_int_eq(scalar_long("SELECT count(*) FROM steward.alerts WHERE kind = 'deadline'"), 0);

    /* Back: the blind alert resolves, the real stalls are alerted. The
     * outage was one blind episode: one alert opened while the broker was
     * away, however many passes saw it. (Rejoining the group after the
     * broker is back may itself leave a partition unread past this test's
     * short blind_after on a loaded machine: that is a second episode, and
     * it must end too.) */
    char *back_at = tl_db_scalar(w.conn, "SELECT now()::text", 0, NULL);
    rd_kafka_mock_broker_set_up(mc, 1);
    wait_sql("SELECT count(*) FROM steward.alerts WHERE kind = 'blind' AND resolved_at IS NULL",
             "0", 60, "the blind alert resolved");
    wait_sql("SELECT count(*) FROM steward.alerts WHERE kind = 'deadline'", "3", 60,
             "the stalls alerted after the broker came back");
    const char *params[1] = {back_at};
    char *during = tl_db_scalar(w.conn,
                                "SELECT count(*) FROM steward.alerts WHERE kind = 'blind' "
                                "AND opened_at < $1::timestamptz",
                                1, params);
    ck_assert_msg(strcmp(during, "1") == 0, "%s blind alerts opened during the outage", during);
    free(during);
    free(back_at);
    wait_sql("SELECT count(*) FROM steward.alerts WHERE kind = 'blind' AND resolved_at IS NULL",
             "0", 60, "every blind alert resolved once the group reads again");

    tw_teardown(&w);
    rd_kafka_destroy(producer);
    rd_kafka_mock_cluster_destroy(mc);
    rd_kafka_destroy(owner);
}
END_TEST

/* ---- reload ------------------------------------------------------------------- */

START_TEST(sighup_reloads_only_what_is_valid)
{
    world_init("reload", "1h", "1h", 1, NULL);
    /* The definitions live in their own folder, so a reload can add files. */
    char defs[1024], v1[1100];
    snprintf(defs, sizeof defs, "%s/defs", w.dir);
    mkdir(defs, 0755);
    snprintf(v1, sizeof v1, "%s/alert_order.json", w.dir);
    char *text = tl_read_file(v1);
    free(tl_write_file(defs, "alert_order.v1.json", text));
    world_config("{\"default\":[{\"type\":\"log\"}]}", "1m");
    char dir_json[1100];
    snprintf(dir_json, sizeof dir_json, "%s", defs);
    world_config_set_top("definitions", json_string(dir_json));
    w.pids[0] = tw_spawn(&w, NULL);
    world_wait_claimed(1);

    /* A broken file: refused, the running definitions keep working. */
    free(tl_write_file(defs, "broken.json", "{\"process\": \"alert_order\", "));
    kill(w.pids[0], SIGHUP);
    tl_wait_file(w.log, "reload refused: the definitions are invalid", 30);
    ck_assert_int_eq(kill(w.pids[0], 0), 0);
    tl_producer_t *p = tl_producer_new();
    send_event(p, "orders", "OrderPlaced", "X", 0);
    tl_producer_free(p);
    wait_sql("SELECT version FROM steward.instances WHERE key = 'X'", "1", 30,
             "X started on version 1");

    /* Version 2 beside version 1: new instances take it, X keeps version 1. */
    char path[1200];
    snprintf(path, sizeof path, "%s/broken.json", defs);
    unlink(path);
    json_t *doc = json_loads(text, 0, NULL);
    json_object_set_new(doc, "version", json_integer(2));
    json_object_set_new(json_object_get(json_object_get(doc, "states"), "awaiting_payment"),
                        "deadline", json_string("2h"));
    snprintf(path, sizeof path, "%s/alert_order.v2.json", defs);
    ck_assert_int_eq(json_dump_file(doc, path, 0), 0);
    json_decref(doc);
    kill(w.pids[0], SIGHUP);
    tl_wait_file(w.log, "definitions and routes reloaded", 30);
    p = tl_producer_new();
    send_event(p, "orders", "OrderPlaced", "Y", 0);
    send_event(p, "payments", "PaymentCaptured", "X", 0);
    tl_producer_free(p);
    wait_sql("SELECT version FROM steward.instances WHERE key = 'Y'", "2", 30,
             "Y started on version 2");
    wait_sql("SELECT version || ' ' || state FROM steward.instances WHERE key = 'X'",
             "1 awaiting_dispatch", 30, "X moved on, still on version 1");
    char *deadline = tl_db_scalar(w.conn,
                                  "SELECT extract(epoch FROM deadline_at - state_entered_at) "
                                  "FROM steward.instances WHERE key = 'Y'",
                                  0, NULL);
    ck_assert_int_eq(atoi(deadline), 7200);
    free(deadline);
    free(text);
}
END_TEST

/* ---- pages: every page arrives, on time --------------------------------------- */

/* Produces an OrderPlaced (or another type) for a key of any length. */
static void send_long(tl_producer_t *p, const char *name, const char *type, const char *key)
{
    char *value = NULL, *t = tw_topic(&w, name);
    ck_assert_int_ge(asprintf(&value, "{\"type\":\"%s\",\"id\":\"%s-%s\",\"order_id\":\"%s\"}",
                              type, type, key, key),
                     0);
    tl_produce(p, t, -1, value, -1, NULL, 0);
    free(value);
    free(t);
}

/* Two stalls whose keys share a 600-character prefix: two alerts, two pages. */
START_TEST(long_keys_with_a_common_prefix_are_both_paged)
{
    rcv_t *r = rcv_new();
    world_init("longkeys", "1s", "1h", 1, NULL);
    char routes[1024];
    snprintf(routes, sizeof routes,
             "{\"payments\":[{\"type\":\"pagerduty\",\"name\":\"pd\",\"routing_key\":\"RK\","
             "\"url\":\"%s/v2/enqueue\"}],\"default\":[{\"type\":\"log\"}]}",
             rcv_url(r));
    world_config(routes, "1m");
    w.pids[0] = tw_spawn(&w, NULL);
    world_wait_claimed(1);

    char a[700], b[700];
    memset(a, 'K', 600);
    a[600] = '\0';
    strcpy(b, a);
    strcat(a, "-first");
    strcat(b, "-second");
    tl_producer_t *p = tl_producer_new();
    send_long(p, "orders", "OrderPlaced", a);
    send_long(p, "orders", "OrderPlaced", b);
    tl_producer_free(p);

    wait_sql("SELECT count(*) FROM steward.alerts WHERE kind = 'deadline'", "2", 30,
             "two deadline alerts");
    ck_assert_msg(rcv_wait(r, 2, 30000), "two pages expected, got %zu", rcv_count(r));
    json_t *first = request_json(r, 0, NULL), *second = request_json(r, 1, NULL);
    const char *k1 = json_string_value(json_object_get(first, "dedup_key"));
    const char *k2 = json_string_value(json_object_get(second, "dedup_key"));
    ck_assert_str_ne(k1, k2);
    ck_assert_uint_le(strlen(k1), 255); /* PagerDuty's limit */
    ck_assert_uint_le(strlen(k2), 255);
    /* the page says since when, and for how long as of sending */
    const char *summary =
        json_string_value(json_object_get(json_object_get(first, "payload"), "summary"));
    ck_assert_msg(tl_contains(summary, "stalled in awaiting_payment since 20") &&
                      tl_contains(summary, " ago), deadline 1s"),
                  "summary: %s", summary);
    json_decref(first);
    json_decref(second);
    wait_sql("SELECT count(*) FROM steward.outbox WHERE delivered_at IS NOT NULL", "2", 30,
             "both pages recorded as delivered");

    /* A key of 300 two-byte characters: the sequence alert's summary is
     * built in a 512-byte buffer and cut inside a character. The alert is
     * still written (the cut is made whole), not refused by PostgreSQL. */
    char wide[700] = "";
    for (int i = 0; i < 300; i++)
        strcat(wide, "\xc3\xa9");
    p = tl_producer_new();
    send_long(p, "orders", "OrderPlaced", wide);
    send_long(p, "payments", "PaymentCaptured", wide);
    char *value = NULL, *t = tw_topic(&w, "payments");
    ck_assert_int_ge(asprintf(&value,
                              "{\"type\":\"PaymentCaptured\",\"id\":\"again\",\"order_id\":\"%s\"}",
                              wide),
                     0);
    tl_produce(p, t, -1, value, -1, NULL, 0);
    free(value);
    free(t);
    tl_producer_free(p);
    wait_sql("SELECT count(*) FROM steward.alerts WHERE kind = 'sequence'", "1", 30,
             "the sequence alert of the multibyte key");
    ck_assert_int_le(scalar_long("SELECT octet_length(summary) FROM steward.alerts WHERE kind = "
                                 "'sequence'"),
                     511);
    rcv_free(r);
}
END_TEST

/* With log_level=error and the default route, the page is still written. */
START_TEST(log_sink_writes_whatever_the_log_level)
{
    world_init("loglevel", "1s", "1h", 1, NULL);
    world_config("{\"default\":[{\"type\":\"log\"}]}", "1m");
    world_config_set_top("log_level", json_string("error"));
    w.pids[0] = tw_spawn(&w, NULL);
    world_wait_claimed(1);
    char *key = tl_unique("LOGLVL-");
    tl_producer_t *p = tl_producer_new();
    send_event(p, "orders", "OrderPlaced", key, 0);
    tl_producer_free(p);
    wait_sql("SELECT count(*) FROM steward.outbox WHERE delivered_at IS NOT NULL", "1", 30,
             "the page recorded as delivered");
    /* Recorded as delivered only after the line was written: it is there. */
    char *log = tl_read_file(w.log);
    char needle[256];
    snprintf(needle, sizeof needle, "\"msg\":\"alert\"");
    ck_assert_msg(tl_contains(log, needle) && tl_contains(log, key) &&
                      tl_contains(log, "stalled in awaiting_payment"),
                  "no page in the log:\n%s", log);
    free(log);
    free(key);
}
END_TEST

/* A webhook that hangs for 30 s delays no PagerDuty page. */
START_TEST(hanging_webhook_delays_no_other_sink)
{
    rcv_t *hook = rcv_new(), *pd = rcv_new();
    world_init("hanging", "1s", "1s", 1, NULL);
    char routes[1024];
    snprintf(routes, sizeof routes,
             "{\"payments\":[{\"type\":\"webhook\",\"name\":\"hook\",\"url\":\"%s/hook\"}],"
             "\"shipping\":[{\"type\":\"pagerduty\",\"name\":\"pd\",\"routing_key\":\"RK\","
             "\"url\":\"%s/v2/enqueue\"}],\"default\":[{\"type\":\"log\"}]}",
             rcv_url(hook), rcv_url(pd));
    world_config(routes, "1m");
    world_config_set("notifier", "timeout", json_string("40s"));
    for (int i = 0; i < 10; i++)
        rcv_push(hook, 200, NULL, NULL, 30000);
    w.pids[0] = tw_spawn(&w, NULL);
    world_wait_claimed(1);

    /* Stalls in awaiting_payment: the webhook takes them and hangs. */
    tl_producer_t *p = tl_producer_new();
    for (int i = 0; i < 3; i++) {
        char key[32];
        snprintf(key, sizeof key, "HOOK-%d", i);
        send_event(p, "orders", "OrderPlaced", key, 0);
    }
    tl_producer_free(p);
    rcv_wait_arrived(hook, 1, 30); /* the webhook got its page and hangs on it */

    /* Stalls in awaiting_dispatch, paged through PagerDuty while it hangs. */
    p = tl_producer_new();
    for (int i = 0; i < 3; i++) {
        char key[32];
        snprintf(key, sizeof key, "PD-%d", i);
        send_event(p, "orders", "OrderPlaced", key, 0);
        send_event(p, "payments", "PaymentCaptured", key, 0);
    }
    tl_producer_free(p);
    wait_sql("SELECT count(*) FROM steward.outbox WHERE destination = 'pd' AND "
             "payload->>'event' = 'trigger' AND delivered_at IS NOT NULL",
             "3", 20, "the PagerDuty pages delivered while the webhook hangs");
    ck_assert_int_eq(scalar_long("SELECT count(*) FROM steward.outbox WHERE destination = 'pd' "
                                 "AND payload->>'event' = 'trigger' AND delivered_at - created_at "
                                 "< interval '3 seconds'"),
                     3);
    /* and the webhook's pages are still in flight, not given up */
    ck_assert_int_eq(scalar_long("SELECT count(*) FROM steward.outbox WHERE destination = "
                                 "'hook' AND (delivered_at IS NOT NULL OR failed_at IS NOT NULL)"),
                     0);
    rcv_free(hook);
    rcv_free(pd);
}
END_TEST

/* Retry-After: 86400 waits at most notifier.max_retry_after. */
START_TEST(retry_after_is_capped)
{
    rcv_t *r = rcv_new();
    world_init("retryafter", "1s", "1h", 1, NULL);
    char routes[1024];
    snprintf(routes, sizeof routes,
             "{\"payments\":[{\"type\":\"webhook\",\"name\":\"hook\",\"url\":\"%s/hook\"}],"
             "\"default\":[{\"type\":\"log\"}]}",
             rcv_url(r));
    world_config(routes, "1m");
    world_config_set("notifier", "max_retry_after", json_string("2s"));
    rcv_push(r, 429, NULL, "86400", 0);
    rcv_push(r, 503, NULL, "99999999999999999999", 0);
    w.pids[0] = tw_spawn(&w, NULL);
    world_wait_claimed(1);
    tl_producer_t *p = tl_producer_new();
    send_event(p, "orders", "OrderPlaced", "RA", 0);
    tl_producer_free(p);
    wait_outbox("RA", "3 true false");
    ck_assert_int_eq(rcv_count(r), 3);
    rcv_free(r);
}
END_TEST

/* A sink inserted before another on SIGHUP: the pending page still goes
 * to the sink it was queued for. */
START_TEST(sighup_sink_insert_keeps_pending_pages)
{
    rcv_t *old_hook = rcv_new(), *new_hook = rcv_new();
    world_init("sinkinsert", "1s", "1h", 1, NULL);
    char routes[1024];
    snprintf(routes, sizeof routes,
             "{\"payments\":[{\"type\":\"webhook\",\"url\":\"%s/old\"}],"
             "\"default\":[{\"type\":\"log\"}]}",
             rcv_url(old_hook));
    world_config(routes, "1m");
    rcv_set_down(old_hook, true);
    w.pids[0] = tw_spawn(&w, NULL);
    world_wait_claimed(1);
    tl_producer_t *p = tl_producer_new();
    send_event(p, "orders", "OrderPlaced", "INS", 0);
    tl_producer_free(p);
    wait_sql("SELECT o.attempts >= 1 AND o.delivered_at IS NULL FROM steward.outbox o JOIN "
             "steward.alerts a ON a.id = o.alert_id WHERE a.key = 'INS'",
             "t", 30, "the page pending while its sink is down");
    char *destination = tl_db_scalar(w.conn, "SELECT destination FROM steward.outbox", 0, NULL);

    /* A new sink first in the route; the old one second. */
    snprintf(routes, sizeof routes,
             "{\"payments\":[{\"type\":\"webhook\",\"url\":\"%s/new\"},"
             "{\"type\":\"webhook\",\"url\":\"%s/old\"}],\"default\":[{\"type\":\"log\"}]}",
             rcv_url(new_hook), rcv_url(old_hook));
    world_config_set_top("routes", json_loads(routes, 0, NULL));
    kill(w.pids[0], SIGHUP);
    tl_wait_file(w.log, "definitions and routes reloaded", 30);
    rcv_set_down(old_hook, false);
    wait_sql("SELECT (delivered_at IS NOT NULL) || ' ' || (failed_at IS NOT NULL) FROM "
             "steward.outbox",
             "true false", 30, "the pending page delivered");
    char *after = tl_db_scalar(w.conn, "SELECT destination FROM steward.outbox", 0, NULL);
    ck_assert_str_eq(after, destination);
    ck_assert_uint_ge(rcv_count(old_hook), 1);
    rcv_request_t req = rcv_get(old_hook, rcv_count(old_hook) - 1);
    ck_assert_str_eq(req.path, "/old");
    ck_assert_msg(tl_contains(req.body, "\"key\":\"INS\""), "%s", req.body);
    rcv_request_clear(&req);
    ck_assert_int_eq(rcv_count(new_hook), 0);
    free(after);
    free(destination);
    rcv_free(old_hook);
    rcv_free(new_hook);
}
END_TEST

/* An alert and its outbox rows only inside a transaction. */
START_TEST(alerts_are_written_only_in_a_transaction)
{
    world_init("alerttx", "1h", "1h", 1, NULL);
    char err[512];
    json_t *doc = json_loads("{\"default\":[{\"type\":\"log\",\"name\":\"log\"}]}", 0, NULL);
    route_table_t *routes = route_table_new(doc, err, sizeof err);
    json_decref(doc);
    ck_assert_msg(routes != NULL, "%s", err);
    alert_batch_t b = {0};
    alert_counts_t counts = {0};
    alert_batch_open(&b, ALERT_BLIND, NULL, NULL, NULL, "ops", "blind", NULL, "steward:blind:g",
                     -1);
    ck_assert_int_eq(alert_batch_write(w.conn, &b, routes, &counts, err, sizeof err), ERR_FATAL);
    ck_assert_msg(tl_contains(err, "transaction"), "%s", err);
    ck_assert_int_eq(scalar_long("SELECT count(*) FROM steward.alerts"), 0);

    tl_db_exec(w.conn, "BEGIN");
    ck_assert_int_eq(alert_batch_write(w.conn, &b, routes, &counts, err, sizeof err), ERR_OK);
    tl_db_exec(w.conn, "COMMIT");
    ck_assert_int_eq(scalar_long("SELECT count(*) FROM steward.alerts"), 1);
    ck_assert_int_eq(scalar_long("SELECT count(*) FROM steward.outbox"), 1);
    alert_batch_clear(&b);

    /* resolved by the same identity */
    alert_batch_resolve_key(&b, ALERT_BLIND, "steward:blind:g", "reads again");
    tl_db_exec(w.conn, "BEGIN");
    ck_assert_int_eq(alert_batch_write(w.conn, &b, routes, &counts, err, sizeof err), ERR_OK);
    tl_db_exec(w.conn, "COMMIT");
    ck_assert_int_eq(scalar_long("SELECT count(*) FROM steward.alerts WHERE resolved_at IS NULL"),
                     0);
    alert_batch_clear(&b);
    route_table_free(routes);
}
END_TEST

/* A storm of sequence alerts of one process and state: one page listing
 * the keys, every alert kept, and one resolve when the last one resolves. */
START_TEST(page_storms_are_grouped)
{
    rcv_t *r = rcv_new();
    world_init("storm", "1h", "1h", 1, NULL);
    char routes[1024];
    snprintf(routes, sizeof routes,
             "{\"shipping\":[{\"type\":\"webhook\",\"name\":\"hook\",\"url\":\"%s/hook\"}],"
             "\"default\":[{\"type\":\"log\"}]}",
             rcv_url(r));
    world_config(routes, "1m");
    world_config_set("notifier", "group_window", json_string("5s"));
    w.pids[0] = tw_spawn(&w, NULL);
    world_wait_claimed(1);

    /* Five instances in awaiting_dispatch each get a second payment: an
     * event no later state accepts, so a sequence alert each. */
    tl_producer_t *p = tl_producer_new();
    for (int i = 0; i < 5; i++) {
        char key[32], value[256], *t = tw_topic(&w, "payments");
        snprintf(key, sizeof key, "STORM-%d", i);
        send_event(p, "orders", "OrderPlaced", key, 0);
        send_event(p, "payments", "PaymentCaptured", key, 0);
        snprintf(value, sizeof value,
                 "{\"type\":\"PaymentCaptured\",\"id\":\"again-%s\",\"order_id\":\"%s\"}", key,
                 key);
        tl_produce(p, t, -1, value, -1, NULL, 0);
        free(t);
    }
    tl_producer_free(p);
    wait_sql("SELECT count(*) FROM steward.alerts WHERE kind = 'sequence'", "5", 30,
             "five sequence alerts");
    wait_sql("SELECT count(*) FROM steward.outbox WHERE delivered_at IS NOT NULL", "5", 30,
             "every trigger row delivered");
    ck_assert_int_eq(rcv_count(r), 1);
    json_t *page = request_json(r, 0, NULL);
    ck_assert_str_eq(json_string_value(json_object_get(page, "event")), "trigger");
    json_t *group = json_object_get(page, "group");
    ck_assert_int_eq(json_integer_value(json_object_get(group, "count")), 5);
    json_t *keys = json_object_get(group, "keys");
    ck_assert_int_eq(json_array_size(keys), 5);
    const char *summary =
        json_string_value(json_object_get(json_object_get(page, "alert"), "summary"));
    for (int i = 0; i < 5; i++) {
        char key[32];
        snprintf(key, sizeof key, "STORM-%d", i);
        ck_assert_msg(tl_contains(summary, key), "%s not in: %s", key, summary);
    }
    char *group_key =
        strdup(json_string_value(json_object_get(json_object_get(page, "alert"), "dedup_key")));
    json_decref(page);
    ck_assert_int_eq(scalar_long("SELECT count(DISTINCT payload->>'group') FROM steward.outbox "
                                 "WHERE payload ? 'group'"),
                     1);

    /* They finish: the alerts resolve, and the group's page resolves once. */
    p = tl_producer_new();
    for (int i = 0; i < 5; i++) {
        char key[32];
        snprintf(key, sizeof key, "STORM-%d", i);
        send_event(p, "shipping", "ShipmentDispatched", key, 0);
    }
    tl_producer_free(p);
    wait_sql("SELECT count(*) FROM steward.outbox WHERE payload->>'event' = 'resolve' AND "
             "delivered_at IS NOT NULL",
             "5", 30, "every resolve row recorded");
    ck_assert_msg(rcv_wait(r, 2, 10000), "no resolve sent");
    json_t *resolve = request_json(r, 1, NULL);
    ck_assert_str_eq(json_string_value(json_object_get(resolve, "event")), "resolve");
    ck_assert_str_eq(
        json_string_value(json_object_get(json_object_get(resolve, "alert"), "dedup_key")),
        group_key);
    json_decref(resolve);
    ck_assert_int_eq(rcv_count(r), 2);
    free(group_key);
    rcv_free(r);
}
END_TEST

/* A suite of one test, with the world torn down after it. */
#define WORLD_SUITE(name, test)                                                                    \
    Suite *name##_suite(void)                                                                      \
    {                                                                                              \
        Suite *s = suite_create(#name);                                                            \
        TCase *tc = tcase_create(#name);                                                           \
        tcase_set_timeout(tc, 400);                                                                \
        tcase_add_checked_fixture(tc, NULL, teardown);                                             \
        tcase_add_test(tc, test);                                                                  \
        suite_add_tcase(s, tc);                                                                    \
        return s;                                                                                  \
    }

WORLD_SUITE(paging, stall_pages_once_and_the_late_event_resolves_it)
WORLD_SUITE(delivery, delivery_retries_waits_and_records_refusals)
WORLD_SUITE(watermark, backlog_raises_only_the_real_stalls)
WORLD_SUITE(replicas, two_replicas_alert_each_deadline_once)
WORLD_SUITE(reload, sighup_reloads_only_what_is_valid)
WORLD_SUITE(longkeys, long_keys_with_a_common_prefix_are_both_paged)
WORLD_SUITE(loglevel, log_sink_writes_whatever_the_log_level)
WORLD_SUITE(hanging, hanging_webhook_delays_no_other_sink)
WORLD_SUITE(retryafter, retry_after_is_capped)
WORLD_SUITE(sinkinsert, sighup_sink_insert_keeps_pending_pages)
WORLD_SUITE(alerttx, alerts_are_written_only_in_a_transaction)
WORLD_SUITE(storm, page_storms_are_grouped)

Suite *blind_suite(void)
{
    Suite *s = suite_create("blind");
    TCase *tc = tcase_create("blind");
    tcase_set_timeout(tc, 400);
    tcase_add_test(tc, lost_broker_opens_one_blind_alert_and_holds_deadlines);
    suite_add_tcase(s, tc);
    return s;
}
