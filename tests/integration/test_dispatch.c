/*
 * test_dispatch - the dispatcher delivers steward.commands to a real broker:
 * the contract of a message, order, failures told and retried, the pause,
 * retention, and what a page says of a step's commands. What happens
 * under faults and with replicas is test_dispatch_faults.c; what both
 * share, test_dispatch.h.
 *
 *   headers_and_key        each command on its topic, keyed by the instance
 *                          key, with exactly the CloudEvents headers the
 *                          contract lists, the payload as the value
 *   crash_once_per_id      SIGKILL three times, each when the broker holds
 *                          commands not yet marked sent: a consumer of the
 *                          command topic sees every row's ce_id, copies
 *                          only under the same id, each instance in order
 *   missing_topic          a topic that does not exist (the dispatcher never
 *                          asks the broker to create one): dispatch_failed
 *                          names the process, topic and error; the rows
 *                          wait; once the topic exists they go, in order,
 *                          and the alert resolves
 *   paused_then_resumed    dispatch.paused holds a process's commands (not
 *                          another's) and /metrics shows them pending;
 *                          SIGHUP with the pause lifted sends them in
 *                          order, though the definitions' reload is refused
 *   too_large              a command over the message size limit: the
 *                          alert says so, the row is retried, its
 *                          instance's next command waits, others go
 *   retry_never_overtakes  re-sends queued while the attempts they replace
 *                          are streaming or failing: no re-send is sent
 *                          before its earlier attempt, on the topic each
 *                          instance's attempts are in order
 *   producer_config_refused a `kafka` property the idempotent producer
 *                          refuses: exit 2 naming it
 *   retention_keeps_unsent `steward prune` removes old sent or cancelled commands only
 *   cloudevents_sdk_reads_a_command  a command read off the topic goes
 *                          through the JavaScript CloudEvents SDK's Kafka
 *                          binding (tests/sdk/, installed by npm from its
 *                          lockfile): a valid event with the type, source,
 *                          id, idempotency key and the payload as an object
 *   page_counts_undelivered_commands  active end to end: a step whose
 *                          command topic is missing misses its last
 *                          deadline; its page (the alert and the log sink)
 *                          says "ReserveStock queued 2, delivered 0: see
 *                          dispatch_failed", 2 being the step's rows, and
 *                          that dispatch_failed alert is open
 *   page_counts_delivered_commands  the same with the topic there and no
 *                          answer: "ReserveStock sent 2 times", both rows
 *                          on the topic, no dispatch_failed
 */
#include "test_dispatch.h"

#include <check.h>
#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Polls /metrics until it holds `line`. */
static void wait_metric(const char *base, const char *line)
{
    char url[300], *body = NULL;
    snprintf(url, sizeof url, "%s/metrics", base);
    for (int i = 0; i < 100; i++) {
        long status = 0;
        free(body);
        body = tl_http_get(url, &status);
        if (status == 200 && body != NULL && tl_contains(body, line)) {
            free(body);
            return;
        }
        usleep(100 * 1000);
    }
    ck_abort_msg("/metrics never showed '%s':\n%s", line, body != NULL ? body : "(nothing)");
}

/* ---- the tests ----------------------------------------------------------------- */

START_TEST(headers_and_key)
{
    dt_setup("dispatch_headers");
    char *topic = tl_unique("dispatch.cmd.");
    const char *topics[1] = {topic};
    tl_kafka_create_topics(topics, 1, 1);
    dt_add_commands(PROCESS, topic, 2, 2); /* K0001 and K0002, steps 1 and 2 */
    /* A re-send: step 2's attempt 1, a new token. */
    const char *params[2] = {PROCESS, topic};
    PGresult *res = PQexecParams(
        dt.w.conn,
        "INSERT INTO steward.commands (process, key, version, state, step, attempt, token, topic, "
        "  type, payload, ce_id, created_at) "
        "VALUES ($1, 'K0001', 1, 'state_2', 2, 1, 3, $2, 'DoStep', '{\"n\":[1,2]}', "
        "  encode(sha256(convert_to($1 || chr(31) || 'K0001' || chr(31) || 2 || chr(31) || 1, "
        "    'UTF8')), 'hex'), '2026-11-29T21:06:03.25Z')",
        2, NULL, params, NULL, NULL, 0);
    ck_assert_msg(PQresultStatus(res) == PGRES_COMMAND_OK, "%s", PQerrorMessage(dt.w.conn));
    PQclear(res);

    int pid = dt_start();
    dt_wait_for("SELECT count(*) FROM steward.commands WHERE sent_at IS NOT NULL AND attempts = 1 "
                "AND last_error IS NULL",
                "5", 60);
    ck_assert_int_eq(tl_stop(pid, SIGTERM, 30), 0);

    dt_seen_list_t got = dt_read_topic(topic, 1);
    ck_assert_int_eq((int) got.n, 5);
    /* The re-send, whole: every header, in order, and nothing else. */
    const dt_seen_t *last = &got.items[4];
    char *ce_id =
        tl_db_scalar(dt.w.conn, "SELECT ce_id FROM steward.commands WHERE attempt = 1", 0, NULL);
    /* The step entry's key: the SHA-256 of process, key and step, the same
     * on step 2's first send and on its re-send. */
    char *idem = tl_db_scalar(dt.w.conn,
                              "SELECT encode(sha256(convert_to('" PROCESS
                              "' || chr(31) || 'K0001' || chr(31) || '2', 'UTF8')), 'hex')",
                              0, NULL);
    char expected[2048];
    snprintf(expected, sizeof expected,
             "ce_specversion=1.0\nce_id=%s\nce_source=urn:steward:" PROCESS
             "\nce_type=DoStep\nce_time=2026-11-29T21:06:03.250Z\n"
             "content-type=application/json\nce_idempotencykey=%s\n"
             "steward_idempotency_key=%s\nce_stewardprocess=" PROCESS
             "\nce_stewardkey=K0001\nce_stewardstate=state_2\nce_stewardstep=2\n"
             "ce_stewardattempt=1\nce_stewardtoken=3\n",
             ce_id, idem, idem);
    /* Step 2's first send carries the same key, under its own ce_id. */
    char want_key[128];
    snprintf(want_key, sizeof want_key, "ce_idempotencykey=%s\n", idem);
    int same_entry = 0;
    for (size_t i = 0; i < got.n; i++)
        same_entry += strcmp(got.items[i].key, "K0001") == 0 &&
                      tl_contains(got.items[i].headers, "ce_stewardstep=2\n") &&
                      tl_contains(got.items[i].headers, want_key);
    ck_assert_int_eq(same_entry, 2);
    free(idem);
    ck_assert_str_eq(last->headers, expected);
    ck_assert_str_eq(last->key, "K0001");
    json_error_t jerr;
    json_t *value = json_loads(last->value, 0, &jerr);
    ck_assert_msg(value != NULL, "value is not JSON: %s", last->value);
    ck_assert_int_eq(json_integer_value(json_array_get(json_object_get(value, "n"), 1)), 2);
    json_decref(value);
    /* Every message: its key is the instance key, its ce_id a row's. */
    for (size_t i = 0; i < got.n; i++) {
        const char *p3[3] = {got.items[i].ce_id, got.items[i].key, got.items[i].value};
        PGresult *r = PQexecParams(dt.w.conn,
                                   "SELECT count(*) FROM steward.commands WHERE ce_id = $1 AND "
                                   "key = $2 AND payload = $3::jsonb",
                                   3, NULL, p3, NULL, NULL, 0);
        ck_assert_int_eq(PQresultStatus(r), PGRES_TUPLES_OK);
        ck_assert_str_eq(PQgetvalue(r, 0, 0), "1");
        PQclear(r);
        ck_assert(tl_contains(got.items[i].headers, "ce_stewardkey="));
    }
    /* One instance's commands in the order they were queued. */
    char *k1 = dt_first_seen_order(&got, "K0001"), *r1 = dt_row_order(PROCESS, "K0001");
    ck_assert_str_eq(k1, r1);
    free(k1);
    free(r1);
    free(ce_id);
    dt_seen_free(&got);
    free(topic);
}
END_TEST

START_TEST(crash_once_per_id)
{
    dt_setup("dispatch_crash");
    char *topic = tl_unique("dispatch.crash.");
    const char *topics[1] = {topic};
    tl_kafka_create_topics(topics, 1, 4);
    enum { KEYS = 200, STEPS = 10, ROWS = KEYS * STEPS };
    dt_add_commands(PROCESS, topic, KEYS, STEPS);
    ck_assert_int_eq(dt_scalar("SELECT count(*) FROM steward.commands"), ROWS);

    unsigned seed = (unsigned) time(NULL);
    srand(seed);
    long points[3] = {200 + rand() % 300, 800 + rand() % 300, 1400 + rand() % 300};
    printf("dispatch crash: seed %u, kill points %ld %ld %ld\n", seed, points[0], points[1],
           points[2]);
    /* The topic's length beside the rows marked sent: when it runs ahead,
     * the broker has commands whose marks are not committed yet. */
    char kerr[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    ck_assert(rd_kafka_conf_set(conf, "bootstrap.servers", tl_kafka_brokers(), kerr, sizeof kerr) ==
              RD_KAFKA_CONF_OK);
    rd_kafka_t *probe = rd_kafka_new(RD_KAFKA_PRODUCER, conf, kerr, sizeof kerr);
    ck_assert_msg(probe != NULL, "probe: %s", kerr);
    for (int k = 0; k < 3; k++) {
        int pid = dt_start();
        long long at;
        while ((at = dt_scalar("SELECT count(*) FROM steward.commands WHERE sent_at IS NOT "
                               "NULL")) < points[k])
            usleep(5 * 1000);
        /* Kill where a copy can come of it: produced and acknowledged, not
         * yet marked. Marks come a batch at a time, so look for a while. */
        long long on_topic = 0;
        for (int look = 0; look < 400; look++) {
            on_topic = 0;
            for (int p = 0; p < 4; p++) {
                int64_t low, high;
                if (rd_kafka_query_watermark_offsets(probe, topic, p, &low, &high, 5000) ==
                    RD_KAFKA_RESP_ERR_NO_ERROR)
                    on_topic += high;
            }
            at = dt_scalar("SELECT count(*) FROM steward.commands WHERE sent_at IS NOT NULL");
            if (on_topic > at)
                break;
        }
        ck_assert_int_eq(tl_stop(pid, SIGKILL, 10), 128 + SIGKILL);
        printf("dispatch crash: killed at %lld sent, %lld on the topic\n", at, on_topic);
        ck_assert_msg(at < ROWS, "the kill came after the end (%lld): no crash tested", at);
    }
    rd_kafka_destroy(probe);
    int pid = dt_start();
    char rows[16];
    snprintf(rows, sizeof rows, "%d", ROWS);
    dt_wait_for("SELECT count(*) FROM steward.commands WHERE sent_at IS NOT NULL", rows, 120);
    ck_assert_int_eq(tl_stop(pid, SIGTERM, 30), 0);

    dt_seen_list_t got = dt_read_topic(topic, 4);
    /* Copies are what a kill between acknowledgement and mark leaves; they
     * may or may not happen, and must carry their row's id when they do. */
    printf("dispatch crash: %zu messages for %d commands\n", got.n, ROWS);
    ck_assert_int_ge((int) got.n, ROWS);
    /* Every message is a row's, whole; every row was seen; copies share the id. */
    PGconn *c = dt.w.conn;
    tl_db_exec(c, "CREATE TEMP TABLE seen (ce_id text, key text, value jsonb)");
    for (size_t i = 0; i < got.n; i++) {
        ck_assert_ptr_nonnull(got.items[i].ce_id);
        const char *p[3] = {got.items[i].ce_id, got.items[i].key, got.items[i].value};
        PGresult *r = PQexecParams(c, "INSERT INTO seen VALUES ($1, $2, $3::jsonb)", 3, NULL, p,
                                   NULL, NULL, 0);
        ck_assert_int_eq(PQresultStatus(r), PGRES_COMMAND_OK);
        PQclear(r);
    }
    ck_assert_int_eq(dt_scalar("SELECT count(*) FROM seen s WHERE NOT EXISTS (SELECT 1 FROM "
                               "steward.commands c WHERE c.ce_id = s.ce_id AND c.key = s.key "
                               "AND c.payload = s.value)"),
                     0);
    ck_assert_int_eq(dt_scalar("SELECT count(*) FROM steward.commands c WHERE NOT EXISTS "
                               "(SELECT 1 FROM seen s WHERE s.ce_id = c.ce_id)"),
                     0);
    ck_assert_int_eq(dt_scalar("SELECT count(DISTINCT ce_id) FROM seen"), ROWS);
    /* Each instance in order, re-sends included. */
    for (int i = 1; i <= KEYS; i += 7) {
        char key[16];
        snprintf(key, sizeof key, "K%04d", i);
        char *got_order = dt_first_seen_order(&got, key), *want = dt_row_order(PROCESS, key);
        ck_assert_str_eq(got_order, want);
        free(got_order);
        free(want);
    }
    dt_seen_free(&got);
    free(topic);
}
END_TEST

START_TEST(missing_topic)
{
    dt_setup("dispatch_missing");
    char *topic = tl_unique("dispatch.missing.");
    char *later = tl_unique("dispatch.later.");
    const char *later_topics[1] = {later};
    tl_kafka_create_topics(later_topics, 1, 1);
    dt_add_commands(PROCESS, topic, 1, 3);
    /* The same instance's next command, to a topic that does exist: it
     * must not overtake the three before it. */
    const char *later_params[2] = {PROCESS, later};
    PGresult *res = PQexecParams(
        dt.w.conn,
        "INSERT INTO steward.commands (process, key, version, state, step, attempt, token, topic, "
        "  type, payload, ce_id) "
        "VALUES ($1, 'K0001', 1, 'state_4', 4, 0, 4, $2, 'DoStep', '{}', "
        "  encode(sha256(convert_to($1 || chr(31) || 'K0001' || chr(31) || 4 || chr(31) || 0, "
        "    'UTF8')), 'hex'))",
        2, NULL, later_params, NULL, NULL, 0);
    ck_assert_msg(PQresultStatus(res) == PGRES_COMMAND_OK, "%s", PQerrorMessage(dt.w.conn));
    PQclear(res);
    int pid = dt_start();

    /* The failure is told: an alert naming process, topic and error. */
    dt_wait_for("SELECT count(*) FROM steward.alerts WHERE kind = 'dispatch_failed' AND "
                "resolved_at IS NULL",
                "1", 60);
    const char *params[1] = {topic};
    char *summary = tl_db_scalar(dt.w.conn,
                                 "SELECT summary || ' | ' || details::text || ' | ' || "
                                 "coalesce(process, '') || ' | ' || owner "
                                 "FROM steward.alerts WHERE kind = 'dispatch_failed'",
                                 0, NULL);
    ck_assert_msg(tl_contains(summary, PROCESS) && tl_contains(summary, topic) &&
                      tl_contains(summary, "nknown topic") && tl_contains(summary, "fulfilment"),
                  "alert: %s", summary);
    free(summary);
    /* Nothing was sent, nothing lost: the first row carries the error and
     * is retried; the later ones wait behind it. */
    dt_wait_for(
        "SELECT count(*) FROM steward.commands WHERE attempts >= 2 AND last_error IS NOT NULL", "1",
        60);
    ck_assert_int_eq(dt_scalar("SELECT count(*) FROM steward.commands WHERE sent_at IS NULL"), 4);
    ck_assert_int_eq(dt_scalar("SELECT count(*) FROM steward.alerts WHERE kind = "
                               "'dispatch_failed'"),
                     1);

    /* The topic appears: every command goes, in order; the alert resolves. */
    const char *topics[1] = {topic};
    tl_kafka_create_topics(topics, 1, 1);
    dt_wait_for("SELECT count(*) FROM steward.commands WHERE sent_at IS NOT NULL", "4", 60);
    ck_assert_int_eq(dt_scalar("SELECT count(*) FROM steward.commands a JOIN steward.commands b "
                               "ON b.key = a.key AND b.id > a.id WHERE b.sent_at < a.sent_at"),
                     0);
    dt_wait_for("SELECT count(*) FROM steward.alerts WHERE kind = 'dispatch_failed' AND "
                "resolved_at IS NOT NULL AND resolution = 'delivered'",
                "1", 30);
    ck_assert_int_eq(tl_stop(pid, SIGTERM, 30), 0);
    char *errors = tl_db_scalar(dt.w.conn,
                                "SELECT count(*) FROM steward.commands WHERE topic = $1 AND "
                                "last_error IS NULL",
                                1, params);
    ck_assert_str_eq(errors, "3");
    free(errors);

    dt_seen_list_t got = dt_read_topic(topic, 1);
    ck_assert_int_eq((int) got.n, 3);
    char *order = dt_first_seen_order(&got, "K0001");
    char *want = tl_db_scalar(dt.w.conn,
                              "SELECT string_agg(ce_id, ',' ORDER BY id) FROM steward.commands "
                              "WHERE topic = $1",
                              1, params);
    ck_assert_str_eq(order, want);
    free(order);
    free(want);
    dt_seen_free(&got);
    free(topic);
    free(later);
}
END_TEST

START_TEST(paused_then_resumed)
{
    dt_setup("dispatch_paused");
    char *topic = tl_unique("dispatch.paused.");
    const char *topics[1] = {topic};
    tl_kafka_create_topics(topics, 1, 1);
    const char *dir = tl_tmpdir();
    dt.config = tl_write_file(dir, "steward.json",
                              "{\"dispatch\": {\"paused\": [\"" PROCESS "\", \"dp_ordr\"]}}");
    dt_add_commands(PROCESS, topic, 1, 5);
    dt_add_commands("other_process", topic, 1, 1);
    int pid = dt_start_on("127.0.0.1:0");
    char base[128];
    tl_wait_http_listening(dt.w.log, base, sizeof base);

    /* The other process's command goes: the dispatcher is at work... */
    dt_wait_for("SELECT count(*) FROM steward.commands WHERE process = 'other_process' AND sent_at "
                "IS NOT NULL",
                "1", 60);
    /* ...and has passed over the paused ones (claimed once, at most: the
     * same statement claimed the other's row and would have claimed these). */
    ck_assert_int_eq(dt_scalar("SELECT count(*) FROM steward.commands WHERE process = '" PROCESS
                               "' AND (sent_at IS NOT NULL OR attempts > 0)"),
                     0);
    /* The backlog is on /metrics. */
    wait_metric(base, "steward_commands_pending{process=\"" PROCESS "\"} 5\n");
    wait_metric(base, "steward_commands_sent_total 1\n");

    /* Lifted, by SIGHUP: they go, in order. The definitions reload is
     * refused (a broken file appeared), and the switch works all the same. */
    free(tl_write_file(dir, "steward.json", "{\"dispatch\": {\"paused\": []}}"));
    free(tl_write_file(dt.defs_dir, "broken.json", "{\"process\": "));
    ck_assert_int_eq(kill(pid, SIGHUP), 0);
    dt_wait_for("SELECT count(*) FROM steward.commands WHERE sent_at IS NOT NULL", "6", 60);
    wait_metric(base, "steward_commands_sent_total 6\n");
    ck_assert_int_eq(tl_stop(pid, SIGTERM, 30), 0);
    char *log = tl_read_file(dt.w.log);
    ck_assert_msg(tl_contains(log, "command dispatch paused"), "no pause logged");
    ck_assert_msg(tl_contains(log, "command dispatch resumed"), "no resume logged");
    ck_assert_msg(tl_contains(log, "dispatch.paused names a process no loaded definition has") &&
                      tl_contains(log, "\"process\":\"dp_ordr\""),
                  "the typo was not reported");
    ck_assert_msg(tl_contains(log, "reload refused"), "the definitions were not refused");
    free(log);
    dt_seen_list_t got = dt_read_topic(topic, 1);
    ck_assert_int_eq((int) got.n, 6);
    ck_assert_str_eq(got.items[0].key, "K0001");
    ck_assert_msg(tl_contains(got.items[0].headers, "ce_stewardprocess=other_process"),
                  "the unpaused process's command goes first: %s", got.items[0].headers);
    char *order = dt_first_seen_order(&got, "K0001"), *want = dt_row_order(PROCESS, "K0001");
    /* first_seen_order mixes both processes' K0001: drop the other's id */
    char *other = dt_row_order("other_process", "K0001");
    ck_assert(strncmp(order, other, strlen(other)) == 0);
    ck_assert_str_eq(order + strlen(other) + 1, want);
    free(other);
    free(order);
    free(want);
    dt_seen_free(&got);
    free(topic);
}
END_TEST

/* A command over the producer's message size limit is refused before it
 * leaves: told, kept, retried, and its instance's next command waits. */
START_TEST(too_large)
{
    dt_setup("dispatch_large");
    char *topic = tl_unique("dispatch.large.");
    const char *topics[1] = {topic};
    tl_kafka_create_topics(topics, 1, 1);
    dt_add_commands(PROCESS, topic, 2, 2);
    /* K0001's first command grows past 1 MB (librdkafka's message.max.bytes). */
    tl_db_exec(dt.w.conn, "UPDATE steward.commands SET payload = jsonb_build_object('blob', "
                          "repeat('x', 1100000)) WHERE key = 'K0001' AND step = 1");
    int pid = dt_start();
    dt_wait_for("SELECT count(*) FROM steward.alerts WHERE kind = 'dispatch_failed' AND "
                "resolved_at IS NULL AND summary LIKE '%too large%'",
                "1", 60);
    /* K0002's commands are not held up by it; K0001's second one is. */
    dt_wait_for(
        "SELECT string_agg(key || ':' || step || ':' || (sent_at IS NOT NULL), ',' ORDER BY "
        "key, step) FROM steward.commands",
        "K0001:1:false,K0001:2:false,K0002:1:true,K0002:2:true", 30);
    dt_wait_for("SELECT count(*) FROM steward.commands WHERE key = 'K0001' AND step = 1 AND "
                "attempts >= 2 AND last_error LIKE '%MSG_SIZE_TOO_LARGE%'",
                "1", 30);
    ck_assert_int_eq(tl_stop(pid, SIGTERM, 30), 0);
    free(topic);
}
END_TEST

/*
 * Queues attempt `attempt` of step 1 for keys K0001..K<keys> to `topic`, as
 * the scheduler queues a re-send: a new row, its own token and ce_id, the
 * same step.
 */
static void add_attempts(const char *topic, int keys, int attempt)
{
    char k[16], a[16];
    snprintf(k, sizeof k, "%d", keys);
    snprintf(a, sizeof a, "%d", attempt);
    const char *params[4] = {PROCESS, topic, k, a};
    PGresult *res = PQexecParams(
        dt.w.conn,
        "INSERT INTO steward.commands (process, key, version, state, step, attempt, token, topic, "
        "  type, payload, ce_id) "
        "SELECT $1, key, 1, 'state_1', 1, $4::int, 1 + $4::int, $2, 'DoStep', "
        "  jsonb_build_object('order_id', key, 'attempt', $4::int), "
        "  encode(sha256(convert_to($1 || chr(31) || key || chr(31) || 1 || chr(31) || $4, "
        "    'UTF8')), 'hex') "
        "FROM (SELECT 'K' || lpad(i::text, 4, '0') AS key FROM generate_series(1, $3::int) i) k "
        "ORDER BY key",
        4, NULL, params, NULL, NULL, 0);
    ck_assert_msg(PQresultStatus(res) == PGRES_COMMAND_OK, "insert: %s", PQerrorMessage(dt.w.conn));
    PQclear(res);
}

/*
 * A re-send never overtakes the attempt it replaces. 60 instances get
 * attempt 0 of a step, every third one too large to produce (refused at
 * once, as a broker that cannot take it would keep refusing it). While the
 * dispatcher streams them, attempts 1 and 2 of every instance are queued,
 * as the scheduler's re-sends would be. The healthy instances' three
 * attempts go, in order; the failing ones' re-sends wait, none of them
 * sent, while their first attempt is tried again and again; once it goes
 * (shrunk: the broker takes it) they follow it, in order, on the topic.
 */
START_TEST(retry_never_overtakes)
{
    dt_setup("dispatch_retry_order");
    char *topic = tl_unique("dispatch.retry.");
    const char *topics[1] = {topic};
    tl_kafka_create_topics(topics, 1, 3);
    enum { KEYS = 60, FAILING = KEYS / 3 };
    static const char failing[] = "substr(key, 2)::int % 3 = 0";
    char sql[512];
    add_attempts(topic, KEYS, 0);
    snprintf(sql, sizeof sql,
             "UPDATE steward.commands SET payload = jsonb_build_object('blob', "
             "repeat('x', 1100000)) WHERE %s",
             failing);
    tl_db_exec(dt.w.conn, sql);
    int pid = dt_start();
    add_attempts(topic, KEYS, 1);
    add_attempts(topic, KEYS, 2);
    char healthy[16];
    snprintf(healthy, sizeof healthy, "%d", (KEYS - FAILING) * 3);
    dt_wait_for("SELECT count(*) FROM steward.commands WHERE sent_at IS NOT NULL", healthy, 60);
    /* The failing ones' first attempts were tried again while their
     * re-sends were due, and not one re-send went. */
    char failing_n[16];
    snprintf(failing_n, sizeof failing_n, "%d", FAILING);
    dt_wait_for("SELECT count(*) FROM steward.commands WHERE attempt = 0 AND attempts >= 2 AND "
                "sent_at IS NULL AND last_error LIKE '%MSG_SIZE_TOO_LARGE%'",
                failing_n, 60);
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM steward.commands WHERE %s AND sent_at IS NOT NULL", failing);
    ck_assert_int_eq(dt_scalar(sql), 0);
    /* They can go now: each instance's attempts follow one another. */
    snprintf(sql, sizeof sql,
             "UPDATE steward.commands SET payload = jsonb_build_object('order_id', key) "
             "WHERE %s AND attempt = 0",
             failing);
    tl_db_exec(dt.w.conn, sql);
    char all[16];
    snprintf(all, sizeof all, "%d", KEYS * 3);
    dt_wait_for("SELECT count(*) FROM steward.commands WHERE sent_at IS NOT NULL", all, 60);
    ck_assert_int_eq(tl_stop(pid, SIGTERM, 30), 0);
    ck_assert_int_eq(dt_scalar("SELECT count(*) FROM steward.commands a JOIN steward.commands b "
                               "ON b.key = a.key AND b.attempt > a.attempt "
                               "WHERE b.sent_at <= a.sent_at"),
                     0);

    dt_seen_list_t got = dt_read_topic(topic, 3);
    ck_assert_int_eq((int) got.n, KEYS * 3);
    for (int i = 1; i <= KEYS; i++) {
        char key[16];
        snprintf(key, sizeof key, "K%04d", i);
        char *got_order = dt_first_seen_order(&got, key), *want = dt_row_order(PROCESS, key);
        ck_assert_msg(strcmp(got_order, want) == 0, "%s: %s on the topic, queued %s", key,
                      got_order, want);
        free(got_order);
        free(want);
    }
    dt_seen_free(&got);
    free(topic);
}
END_TEST

/* A producer configuration librdkafka refuses is a configuration error:
 * exit 2 naming it, not a wait for PostgreSQL that never ends. */
START_TEST(producer_config_refused)
{
    dt_setup("dispatch_conf");
    const char *argv[] = {NULL,
                          "run",
                          "--brokers",
                          tl_kafka_brokers(),
                          "--database",
                          dt.w.db_url,
                          "--definitions",
                          dt.defs_dir,
                          "--group",
                          dt.w.group,
                          "--set",
                          "http.listen=",
                          "--kafka",
                          "max.in.flight.requests.per.connection=10",
                          NULL};
    tl_output_t o = tl_steward(argv, NULL);
    ck_assert_msg(o.status == 2, "exit %d\nstderr: %s", o.status, o.err);
    ck_assert_msg(tl_contains(o.err, "command producer") && tl_contains(o.err, "max.in.flight"),
                  "stderr: %s", strlen(o.err) > 1500 ? o.err + strlen(o.err) - 1500 : o.err);
    tl_output_free(&o);
}
END_TEST

START_TEST(retention_keeps_unsent)
{
    dt_setup("dispatch_retention");
    dt_add_commands(PROCESS, "never.sent", 5, 1);
    /* K0001 sent 10 days ago, K0002 sent just now, K0003 old and unsent,
     * K0004 cancelled 10 days ago, K0005 cancelled just now */
    tl_db_exec(dt.w.conn, "UPDATE steward.commands SET sent_at = now() - interval '10 days', "
                          "created_at = now() - interval '10 days' WHERE key = 'K0001'");
    tl_db_exec(dt.w.conn, "UPDATE steward.commands SET sent_at = now() WHERE key = 'K0002'");
    tl_db_exec(dt.w.conn, "UPDATE steward.commands SET created_at = now() - interval '30 days' "
                          "WHERE key = 'K0003'");
    tl_db_exec(dt.w.conn, "UPDATE steward.commands SET cancelled_at = now() - interval '10 days', "
                          "cancel_reason = 'left' WHERE key = 'K0004'");
    tl_db_exec(dt.w.conn,
               "UPDATE steward.commands SET cancelled_at = now(), cancel_reason = 'left' "
               "WHERE key = 'K0005'");
    const char *argv[] = {NULL, "prune", "--json", "--database", dt.w.db_url, NULL};
    tl_output_t o = tl_steward(argv, NULL);
    ck_assert_msg(o.status == 0, "prune: %s", o.err);
    ck_assert_msg(tl_contains(o.out, "\"table\": \"commands\"") ||
                      tl_contains(o.out, "\"table\":\"commands\""),
                  "prune: %s", o.out);
    tl_output_free(&o);
    char *left = tl_db_scalar(
        dt.w.conn, "SELECT string_agg(key, ',' ORDER BY key) FROM steward.commands", 0, NULL);
    ck_assert_str_eq(left, "K0002,K0003,K0005");
    free(left);
}
END_TEST
/* ---- what a CloudEvents consumer reads ------------------------------------------------ */

/* Runs `cmd` through the shell; its exit status (-1: it could not run). */
static int run_shell(const char *cmd)
{
    int rc = system(cmd);
    return rc == -1 || !WIFEXITED(rc) ? -1 : WEXITSTATUS(rc);
}

/* Copies tests/sdk/NAME into dir. */
static void copy_sdk_file(const char *dir, const char *name)
{
    char rel[128];
    snprintf(rel, sizeof rel, "tests/sdk/%s", name);
    char *src = tl_source_path(rel);
    char *text = tl_read_file(src);
    ck_assert_msg(text != NULL, "cannot read %s", src);
    free(tl_write_file(dir, name, text));
    free(text);
    free(src);
}

START_TEST(cloudevents_sdk_reads_a_command)
{
    dt_setup("dispatch_sdk");
    /* The SDK first: npm installs exactly the lockfile's versions. */
    char *sdk = NULL;
    ck_assert_int_ge(asprintf(&sdk, "%s/sdk", dt.w.dir), 0);
    ck_assert_int_eq(mkdir(sdk, 0755), 0);
    copy_sdk_file(sdk, "package.json");
    copy_sdk_file(sdk, "package-lock.json");
    copy_sdk_file(sdk, "read_command.js");
    ck_assert_msg(run_shell("command -v node >/dev/null && command -v npm >/dev/null") == 0,
                  "node and npm are needed (scripts/test installs them)");
    char *cmd = NULL;
    ck_assert_int_ge(asprintf(&cmd,
                              "cd '%s' && npm ci --no-audit --no-fund --loglevel=error "
                              ">npm.log 2>&1",
                              sdk),
                     0);
    int rc = run_shell(cmd);
    free(cmd);
    if (rc != 0) {
        char *log_path = NULL;
        ck_assert_int_ge(asprintf(&log_path, "%s/npm.log", sdk), 0);
        char *log = tl_read_file(log_path);
        /* No skip: a run that cannot install the SDK has not shown that
         * an SDK reads the commands, so it fails and says why. */
        ck_abort_msg("npm ci failed (exit %d): the CloudEvents SDK could not be installed from "
                     "tests/sdk/package-lock.json:\n%s",
                     rc, log != NULL ? log : "(no log)");
    }

    char *topic = tl_unique("dispatch.sdk.");
    const char *topics[1] = {topic};
    tl_kafka_create_topics(topics, 1, 1);
    dt_add_commands(PROCESS, topic, 1, 1);
    int pid = dt_start();
    dt_wait_for("SELECT count(*) FROM steward.commands WHERE sent_at IS NOT NULL", "1", 60);
    ck_assert_int_eq(tl_stop(pid, SIGTERM, 30), 0);
    dt_seen_list_t got = dt_read_topic(topic, 1);
    ck_assert_int_eq((int) got.n, 1);

    /* The message as a Kafka client hands it over: key, value, headers. */
    json_t *headers = json_object();
    char *lines = strdup(got.items[0].headers), *save = NULL;
    for (char *line = strtok_r(lines, "\n", &save); line != NULL;
         line = strtok_r(NULL, "\n", &save)) {
        char *eq = strchr(line, '=');
        ck_assert_ptr_nonnull(eq);
        *eq = '\0';
        json_object_set_new(headers, line, json_string(eq + 1));
    }
    free(lines);
    json_t *message = json_pack("{s:s, s:s, s:o}", "key", got.items[0].key, "value",
                                got.items[0].value, "headers", headers);
    char *message_path = NULL, *out_path = NULL;
    ck_assert_int_ge(asprintf(&message_path, "%s/message.json", sdk), 0);
    ck_assert_int_ge(asprintf(&out_path, "%s/event.json", sdk), 0);
    ck_assert_int_eq(json_dump_file(message, message_path, 0), 0);
    json_decref(message);
    ck_assert_int_ge(asprintf(&cmd, "cd '%s' && node read_command.js '%s' >'%s' 2>&1", sdk,
                              message_path, out_path),
                     0);
    rc = run_shell(cmd);
    free(cmd);
    char *out = tl_read_file(out_path);
    ck_assert_msg(rc == 0, "the SDK refused the command: %s", out != NULL ? out : "");
    printf("dispatch sdk: the CloudEvents SDK read %s", out);

    json_error_t jerr;
    json_t *event = json_loads(out, 0, &jerr);
    ck_assert_msg(event != NULL, "not JSON: %s", out);
    char *ce_id = tl_db_scalar(dt.w.conn, "SELECT ce_id FROM steward.commands", 0, NULL);
    char *idem = tl_db_scalar(dt.w.conn,
                              "SELECT encode(sha256(convert_to(process || chr(31) || key || "
                              "chr(31) || step, 'UTF8')), 'hex') FROM steward.commands",
                              0, NULL);
    ck_assert_str_eq(json_string_value(json_object_get(event, "specversion")), "1.0");
    ck_assert_str_eq(json_string_value(json_object_get(event, "type")), "DoStep");
    ck_assert_str_eq(json_string_value(json_object_get(event, "source")), "urn:steward:" PROCESS);
    ck_assert_str_eq(json_string_value(json_object_get(event, "id")), ce_id);
    ck_assert_str_eq(json_string_value(json_object_get(event, "datacontenttype")),
                     "application/json");
    ck_assert_str_eq(json_string_value(json_object_get(event, "idempotencykey")), idem);
    ck_assert(json_is_true(json_object_get(event, "data_is_object")));
    json_t *data = json_object_get(event, "data");
    ck_assert_str_eq(json_string_value(json_object_get(data, "order_id")), "K0001");
    ck_assert(json_real_value(json_object_get(data, "total")) == 12.5);
    json_decref(event);
    free(ce_id);
    free(idem);
    free(out);
    free(message_path);
    free(out_path);
    dt_seen_free(&got);
    free(topic);
    free(sdk);
}
END_TEST

/* ---- what a page says of a step's commands -------------------------------------------- */

#define PAGED "dp_reserve"

/*
 * An active definition PAGED whose reserving step commands `topic` with a
 * deadline of 3 s and one re-send, and no on_timeout: the second missed
 * deadline pages the step's owner (stock). The scheduler judges every
 * 200 ms with no grace, so the page comes within seconds.
 */
static void setup_paged(const char *name, const char *topic)
{
    dt_setup(name);
    char definition[2048];
    snprintf(definition, sizeof definition,
             "{\"process\":\"" PAGED
             "\",\"version\":1,\"mode\":\"active\",\"owner\":\"fulfilment\","
             "\"key\":\"/order_id\",\"events\":{\"OrderPlaced\":{\"topic\":\"%s\"},"
             "\"StockReserved\":{\"topic\":\"%s\"}},"
             "\"start\":{\"on\":\"OrderPlaced\",\"to\":\"reserving\"},"
             "\"states\":{\"reserving\":{\"owner\":\"stock\",\"deadline\":\"3s\","
             "\"on\":{\"StockReserved\":\"reserved\"},\"retry\":{\"max\":1},"
             "\"command\":{\"topic\":\"%s\",\"type\":\"ReserveStock\","
             "\"payload\":{\"order_id\":\"${key}\"}}},"
             "\"reserved\":{\"terminal\":\"success\"}}}",
             dt.events_topic, dt.events_topic, topic);
    free(tl_write_file(dt.defs_dir, PAGED ".json", definition));
    dt.config = tl_write_file(dt.w.dir, "steward.json",
                              "{\"scheduler\": {\"interval\": \"200ms\", \"grace\": \"0s\"}}");
}

/* Starts steward and places order R1, once. */
static int start_and_order(void)
{
    int pid = dt_start();
    tl_producer_t *p = tl_producer_new();
    tl_produce(p, dt.events_topic, 0, "{\"type\":\"OrderPlaced\",\"order_id\":\"R1\"}", -1, NULL,
               0);
    tl_producer_free(p);
    return pid;
}

/* The summary of R1's deadline alert once it is open (malloc'd). */
static char *deadline_summary(void)
{
    dt_wait_for("SELECT count(*) FROM steward.alerts WHERE kind = 'deadline' AND process = '" PAGED
                "' AND key = 'R1' AND resolved_at IS NULL",
                "1", 60);
    char *summary = tl_db_scalar(dt.w.conn,
                                 "SELECT summary FROM steward.alerts WHERE kind = 'deadline' AND "
                                 "process = '" PAGED "' AND key = 'R1' AND owner = 'stock'",
                                 0, NULL);
    ck_assert_ptr_nonnull(summary);
    return summary;
}

/* How many commands reserving queued for R1: the rows of its step. */
static long long step_rows(void)
{
    return dt_scalar("SELECT count(*) FROM steward.commands c JOIN steward.instances i "
                     "ON i.process = c.process AND i.key = c.key AND i.step = c.step "
                     "WHERE c.process = '" PAGED "' AND c.key = 'R1'");
}

/*
 * The summary of the deadline page the log sink wrote (the default route)
 * for R1, once it is there (malloc'd); aborts after timeout_s.
 */
static char *logged_page(int timeout_s)
{
    time_t until = time(NULL) + timeout_s;
    for (;;) {
        char *log = tl_read_file(dt.w.log), *save = NULL, *found = NULL;
        for (char *line = log != NULL ? strtok_r(log, "\n", &save) : NULL;
             line != NULL && found == NULL; line = strtok_r(NULL, "\n", &save)) {
            json_t *j = json_loads(line, 0, NULL);
            const char *level = json_string_value(json_object_get(j, "level"));
            const char *msg = json_string_value(json_object_get(j, "msg"));
            const char *kind = json_string_value(json_object_get(j, "kind"));
            const char *key = json_string_value(json_object_get(j, "key"));
            const char *summary = json_string_value(json_object_get(j, "summary"));
            if (level != NULL && strcmp(level, "alert") == 0 && msg != NULL &&
                strcmp(msg, "alert") == 0 && kind != NULL && strcmp(kind, "deadline") == 0 &&
                key != NULL && strcmp(key, "R1") == 0 && summary != NULL)
                found = strdup(summary);
            json_decref(j);
        }
        free(log);
        if (found != NULL)
            return found;
        if (time(NULL) >= until) {
            tl_print_tail(dt.w.log, 4000);
            ck_abort_msg("the log sink never paged R1's deadline");
        }
        usleep(100 * 1000);
    }
}

/*
 * The command topic is missing: nothing left Steward, so the page says
 * what was queued and that none of it was delivered, pointing at the
 * dispatcher's alert (which is open), not at the service that never got
 * the command.
 */
START_TEST(page_counts_undelivered_commands)
{
    char *topic = tl_unique("dispatch.unreserved.");
    setup_paged("dispatch_page_missing", topic);
    int pid = start_and_order();

    char *summary = deadline_summary();
    long long rows = step_rows();
    ck_assert_int_eq(rows, 2); /* the first send and its one re-send */
    ck_assert_int_eq(dt_scalar("SELECT count(*) FROM steward.commands WHERE process = '" PAGED
                               "' AND sent_at IS NOT NULL"),
                     0);
    char want[128];
    snprintf(want, sizeof want, "ReserveStock queued %lld, delivered 0: see dispatch_failed", rows);
    ck_assert_msg(tl_contains(summary, want), "the page says: %s", summary);
    ck_assert_msg(!tl_contains(summary, " sent "), "the page claims a send: %s", summary);
    tw_wait(&dt.w,
            "SELECT count(*) FROM steward.alerts WHERE kind = 'dispatch_failed' AND "
            "process = '" PAGED "' AND strpos(summary || details::text, $1) > 0 AND "
            "resolved_at IS NULL",
            TW_LIST(topic), "1", 30, "an open dispatch_failed alert naming the topic");
    char *page = logged_page(30);
    ck_assert_msg(tl_contains(page, want), "the logged page says: %s", page);
    printf("dispatch page: %s\n", page);
    free(page);
    free(summary);
    ck_assert_int_eq(tl_stop(pid, SIGTERM, 30), 0);
    free(topic);
}
END_TEST

/*
 * The topic exists and the service never answers: every command was
 * delivered, so the page says how many times it was sent, and no
 * dispatch_failed alert is raised.
 */
START_TEST(page_counts_delivered_commands)
{
    char *topic = tl_unique("dispatch.reserve.");
    const char *topics[1] = {topic};
    tl_kafka_create_topics(topics, 1, 1);
    setup_paged("dispatch_page_sent", topic);
    int pid = start_and_order();

    char *summary = deadline_summary();
    long long rows = step_rows();
    ck_assert_int_eq(rows, 2);
    ck_assert_int_eq(dt_scalar("SELECT count(*) FROM steward.commands WHERE process = '" PAGED
                               "' AND sent_at IS NOT NULL"),
                     rows);
    char want[128];
    snprintf(want, sizeof want, "ReserveStock sent %lld times over ", rows);
    ck_assert_msg(tl_contains(summary, want) &&
                      tl_contains(summary, "no StockReserved; owner stock"),
                  "the page says: %s", summary);
    char *page = logged_page(30);
    ck_assert_msg(tl_contains(page, want), "the logged page says: %s", page);
    printf("dispatch page: %s\n", page);
    free(page);
    free(summary);
    ck_assert_int_eq(dt_scalar("SELECT count(*) FROM steward.alerts WHERE kind = "
                               "'dispatch_failed'"),
                     0);
    ck_assert_int_eq(tl_stop(pid, SIGTERM, 30), 0);
    dt_seen_list_t got = dt_read_topic(topic, 1);
    ck_assert_int_eq((int) got.n, 2);
    dt_seen_free(&got);
    free(topic);
}
END_TEST

Suite *dispatch_suite(void)
{
    Suite *s = suite_create("dispatch");
    TCase *tc = tcase_create("dispatch");
    tcase_add_checked_fixture(tc, NULL, dt_teardown);
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, producer_config_refused);
    tcase_add_test(tc, headers_and_key);
    tcase_add_test(tc, crash_once_per_id);
    tcase_add_test(tc, missing_topic);
    tcase_add_test(tc, paused_then_resumed);
    tcase_add_test(tc, too_large);
    tcase_add_test(tc, retry_never_overtakes);
    tcase_add_test(tc, retention_keeps_unsent);
    tcase_add_test(tc, cloudevents_sdk_reads_a_command);
    suite_add_tcase(s, tc);
    /* Active end to end: the words of a missed step's page. */
    TCase *pages = tcase_create("pages");
    tcase_add_checked_fixture(pages, NULL, dt_teardown);
    tcase_set_timeout(pages, 120);
    tcase_add_test(pages, page_counts_undelivered_commands);
    tcase_add_test(pages, page_counts_delivered_commands);
    suite_add_tcase(s, pages);
    return s;
}
