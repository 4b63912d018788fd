/*
 * test_dispatch_faults - the dispatcher when things go wrong: a crash while
 * rows are claimed, a broker that goes away (librdkafka's mock cluster), a
 * cancellation that comes after the claim, and replicas sharing the
 * outbox. See test_dispatch.h for what both dispatch suites share.
 *
 *   crash_frees_claims_fast SIGKILL while the broker is down and rows are
 *                          claimed (their messages in librdkafka's queue):
 *                          after a restart every command, and each
 *                          instance's next one queued behind it, is on the
 *                          topic within a few leases, not a delivery
 *                          timeout later
 *   cancelled_never_sent   rows claimed while the broker is down, then
 *                          cancelled (their instances finished): they are
 *                          taken back from the producer, and when the
 *                          broker returns none of them is produced; no row
 *                          is both sent and cancelled
 *   crash_then_answered    active end to end: orders whose commands were
 *                          claimed when steward was SIGKILLed (broker
 *                          down) are commanded soon after the restart; the
 *                          service answers each, and none takes on_timeout
 *   renewed_not_shared     two replicas, the broker down for several leases:
 *                          the dispatcher holding the rows renews their
 *                          leases, so the other never claims them; when
 *                          the broker returns each command is produced
 *                          once
 *   killed_replica_taken_over  two replicas; the one holding the claims of
 *                          40 commands (the broker down) is SIGKILLed: the
 *                          survivor, running beside it all along, has them
 *                          all on the topic within dispatch.lease of the
 *                          kill (plus a look and the delivery), each once
 */
#include "test_dispatch.h"

#include <check.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

START_TEST(crash_frees_claims_fast)
{
    dt_setup("dispatch_crash_lease");
    char *topic = tl_unique("dispatch.lease.");
    dt_mock_start(topic);
    /* librdkafka would hold these for 30 s: the lease must not follow it. */
    dt.timeout_set = "dispatch.timeout=30s";
    int pid = dt_start_then_cut(topic);
    enum { KEYS = 100, STEPS = 2, ROWS = KEYS * STEPS };
    dt_add_commands(PROCESS, topic, KEYS, STEPS);
    /* Every instance's first command claimed and in librdkafka's queue; the
     * second (a re-send, a hand-off) waits behind it. */
    char keys[16];
    snprintf(keys, sizeof keys, "%d", KEYS);
    dt_wait_for("SELECT count(*) FROM steward.commands WHERE key <> 'warm-up' AND step = 1 AND "
                "next_attempt_at > now() AND sent_at IS NULL",
                keys, 60);
    ck_assert_int_eq(tl_stop(pid, SIGKILL, 10), 128 + SIGKILL);
    ck_assert_int_eq(rd_kafka_mock_broker_set_up(dt.mock, 1), RD_KAFKA_RESP_ERR_NO_ERROR);

    double t0 = dt_now_s();
    pid = dt_start();
    char rows[16];
    snprintf(rows, sizeof rows, "%d", ROWS);
    /* A lease is 2 s; a delivery timeout would be 30 s. */
    dt_wait_for(
        "SELECT count(*) FROM steward.commands WHERE key <> 'warm-up' AND sent_at IS NOT NULL",
        rows, 20);
    double took = dt_now_s() - t0;
    printf("dispatch lease: %d commands on the topic %.1f s after the restart\n", ROWS, took);
    ck_assert_int_eq(tl_stop(pid, SIGTERM, 30), 0);

    dt_seen_list_t got = dt_read_topic(topic, 1);
    ck_assert_int_ge((int) got.n, ROWS + 1);
    /* Each instance in order. */
    for (int i = 1; i <= KEYS; i += 9) {
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

START_TEST(cancelled_never_sent)
{
    dt_setup("dispatch_cancelled");
    char *topic = tl_unique("dispatch.cancel.");
    dt_mock_start(topic);
    dt.timeout_set = "dispatch.timeout=60s"; /* the messages wait in librdkafka's queue */
    int pid = dt_start_then_cut(topic);
    dt_add_commands(PROCESS, topic, 20, 1);
    dt_wait_for("SELECT count(*) FROM steward.commands WHERE key <> 'warm-up' AND "
                "next_attempt_at > now() AND sent_at IS NULL",
                "20", 60);
    /* The instances finish, as cmdq_write() cancels their commands. */
    tl_db_exec(dt.w.conn, "UPDATE steward.commands SET cancelled_at = now(), "
                          "cancel_reason = 'the instance finished (failure in state_1) before it "
                          "was sent' WHERE key LIKE 'K%'");
    /* Judged after the topic is read, so that a failure shows what went out. */
    bool taken_back = dt_wait_log("claimed commands taken back unsent", 30);
    /* The broker comes back; a command queued after the cancelled ones
     * goes, so what was going to be produced has been. */
    dt_add_one(topic, "after");
    ck_assert_int_eq(rd_kafka_mock_broker_set_up(dt.mock, 1), RD_KAFKA_RESP_ERR_NO_ERROR);
    dt_wait_for("SELECT count(*) FROM steward.commands WHERE key = 'after' AND sent_at IS NOT NULL",
                "1", 60);
    ck_assert_int_eq(tl_stop(pid, SIGTERM, 30), 0);

    dt_seen_list_t got = dt_read_topic(topic, 1);
    char *keys = calloc(1, 1);
    size_t len = 0;
    for (size_t i = 0; i < got.n; i++) {
        keys = realloc(keys, len + strlen(got.items[i].key) + 2);
        len += (size_t) sprintf(keys + len, "%s%s", len > 0 ? "," : "", got.items[i].key);
    }
    ck_assert_msg(strcmp(keys, "warm-up,after") == 0,
                  "cancelled commands were produced: the topic holds %s", keys);
    free(keys);
    ck_assert_msg(taken_back, "steward's log never said 'claimed commands taken back unsent'");
    ck_assert_int_eq(dt_scalar("SELECT count(*) FROM steward.commands WHERE key LIKE 'K%' AND "
                               "sent_at IS NULL AND cancelled_at IS NOT NULL"),
                     20);
    ck_assert_int_eq(dt_scalar("SELECT count(*) FROM steward.commands WHERE sent_at IS NOT NULL "
                               "AND cancelled_at IS NOT NULL"),
                     0);
    /* And the schema says so: a row is sent or cancelled, never both. */
    PGresult *res =
        PQexec(dt.w.conn, "UPDATE steward.commands SET sent_at = now() WHERE key = 'K0001'");
    ck_assert_str_eq(PQresultErrorField(res, PG_DIAG_SQLSTATE) != NULL
                         ? PQresultErrorField(res, PG_DIAG_SQLSTATE)
                         : "none",
                     "23514");
    PQclear(res);
    dt_seen_free(&got);
    free(topic);
}
END_TEST

/* A producer or consumer on the mock cluster. */
static rd_kafka_t *mock_client(rd_kafka_type_t type)
{
    char kerr[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    ck_assert(rd_kafka_conf_set(conf, "bootstrap.servers", dt.brokers, kerr, sizeof kerr) ==
              RD_KAFKA_CONF_OK);
    if (type == RD_KAFKA_CONSUMER)
        ck_assert(rd_kafka_conf_set(conf, "group.id", "dispatch.service", kerr, sizeof kerr) ==
                  RD_KAFKA_CONF_OK);
    rd_kafka_t *rk = rd_kafka_new(type, conf, kerr, sizeof kerr);
    ck_assert_msg(rk != NULL, "%s", kerr);
    return rk;
}

static void mock_produce(rd_kafka_t *rk, const char *topic, const char *value)
{
    rd_kafka_resp_err_t err = rd_kafka_producev(
        rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_VALUE((void *) value, strlen(value)),
        RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
    ck_assert_msg(err == RD_KAFKA_RESP_ERR_NO_ERROR, "produce: %s", rd_kafka_err2str(err));
    ck_assert_int_eq(rd_kafka_flush(rk, 10000), RD_KAFKA_RESP_ERR_NO_ERROR);
}

START_TEST(crash_then_answered)
{
    dt_setup("dispatch_answered");
    char *topic = tl_unique("dispatch.charge.");
    dt_mock_start(topic);
    char definition[2048];
    snprintf(definition, sizeof definition,
             "{\"process\":\"dp_pay\",\"version\":1,\"mode\":\"active\",\"owner\":\"payments\","
             "\"key\":\"/order_id\",\"events\":{\"PaymentRequested\":{\"topic\":\"%s\"},"
             "\"Charged\":{\"topic\":\"%s\"}},"
             "\"start\":{\"on\":\"PaymentRequested\",\"to\":\"charging\"},"
             "\"states\":{\"charging\":{\"deadline\":\"25s\",\"on\":{\"Charged\":\"paid\"},"
             "\"token\":{\"pointer\":\"/steward_token\"},\"on_timeout\":\"refunded\","
             "\"command\":{\"topic\":\"%s\",\"type\":\"Charge\",\"payload\":{\"order_id\":"
             "\"${key}\",\"idempotency_key\":\"${idempotency_key}\"}}},"
             "\"paid\":{\"terminal\":\"success\"},\"refunded\":{\"terminal\":\"failure\"}}}",
             dt.events_topic, dt.events_topic, topic);
    free(tl_write_file(dt.defs_dir, "dp_pay.json", definition));
    const char *dir = tl_tmpdir();
    dt.config = tl_write_file(dir, "steward.json", "{\"dispatch\": {\"paused\": [\"dp_pay\"]}}");
    /* A delivery timeout of 30 s: a lease that followed it would hold the
     * claimed commands past the 25 s deadline. */
    dt.timeout_set = "dispatch.timeout=30s";
    int pid = dt_start_then_cut(topic);
    ck_assert_int_eq(rd_kafka_mock_broker_set_up(dt.mock, 1), RD_KAFKA_RESP_ERR_NO_ERROR);

    enum { ORDERS = 20 };
    rd_kafka_t *producer = mock_client(RD_KAFKA_PRODUCER);
    for (int i = 1; i <= ORDERS; i++) {
        char value[128];
        snprintf(value, sizeof value, "{\"type\":\"PaymentRequested\",\"order_id\":\"P%02d\"}", i);
        mock_produce(producer, dt.events_topic, value);
    }
    char orders[16];
    snprintf(orders, sizeof orders, "%d", ORDERS);
    dt_wait_for("SELECT count(*) FROM steward.commands WHERE process = 'dp_pay'", orders, 60);
    /* The broker goes; the pause is lifted; the commands are claimed and
     * wait in librdkafka's queue; steward dies. */
    ck_assert_int_eq(rd_kafka_mock_broker_set_down(dt.mock, 1), RD_KAFKA_RESP_ERR_NO_ERROR);
    free(tl_write_file(dir, "steward.json", "{\"dispatch\": {\"paused\": []}}"));
    ck_assert_int_eq(kill(pid, SIGHUP), 0);
    dt_wait_for("SELECT count(*) FROM steward.commands WHERE process = 'dp_pay' AND "
                "next_attempt_at > now() AND sent_at IS NULL",
                orders, 60);
    ck_assert_int_eq(tl_stop(pid, SIGKILL, 10), 128 + SIGKILL);
    ck_assert_int_eq(rd_kafka_mock_broker_set_up(dt.mock, 1), RD_KAFKA_RESP_ERR_NO_ERROR);
    pid = dt_start();

    /* The service: one Charged per command, the token echoed. */
    rd_kafka_t *service = mock_client(RD_KAFKA_CONSUMER);
    rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(list, topic, 0)->offset = RD_KAFKA_OFFSET_BEGINNING;
    ck_assert_int_eq(rd_kafka_assign(service, list), RD_KAFKA_RESP_ERR_NO_ERROR);
    rd_kafka_topic_partition_list_destroy(list);
    int answered = 0;
    bool seen[ORDERS + 1] = {false};
    time_t until = time(NULL) + 60;
    while (answered < ORDERS && time(NULL) < until) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(service, 200);
        if (m == NULL)
            continue;
        rd_kafka_headers_t *hdrs = NULL;
        const void *token = NULL;
        size_t token_len = 0;
        if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR && m->key != NULL &&
            rd_kafka_message_headers(m, &hdrs) == RD_KAFKA_RESP_ERR_NO_ERROR &&
            rd_kafka_header_get_last(hdrs, "ce_stewardtoken", &token, &token_len) ==
                RD_KAFKA_RESP_ERR_NO_ERROR) {
            char value[256];
            snprintf(value, sizeof value,
                     "{\"type\":\"Charged\",\"order_id\":\"%.*s\",\"steward_token\":\"%.*s\"}",
                     (int) m->key_len, (const char *) m->key, (int) token_len,
                     (const char *) token);
            mock_produce(producer, dt.events_topic, value);
            int n = m->key_len == 3 ? atoi((const char *) m->key + 1) : 0;
            if (n >= 1 && n <= ORDERS && !seen[n]) {
                seen[n] = true;
                answered++;
            }
        }
        rd_kafka_message_destroy(m);
    }
    rd_kafka_consumer_close(service);
    rd_kafka_destroy(service);
    rd_kafka_destroy(producer);
    ck_assert_msg(answered >= ORDERS, "only %d of %d commands reached the service", answered,
                  ORDERS);
    if (!tl_db_wait(dt.w.conn,
                    "SELECT count(*) FROM steward.instances WHERE process = 'dp_pay' AND "
                    "state = 'paid'",
                    0, NULL, orders, 60, NULL)) {
        char *why = tl_db_scalar(dt.w.conn,
                                 "SELECT string_agg(h.key || ' ' || h.outcome || ' ' || "
                                 "coalesce(h.detail, ''), E'\\n' ORDER BY h.id) "
                                 "FROM steward.history h JOIN steward.instances i "
                                 "ON i.process = h.process AND i.key = h.key "
                                 "WHERE i.process = 'dp_pay' AND i.state <> 'paid'",
                                 0, NULL);
        ck_abort_msg("not every order was paid; the others' history:\n%s", why);
    }
    ck_assert_int_eq(tl_stop(pid, SIGTERM, 30), 0);
    ck_assert_int_eq(dt_scalar("SELECT count(*) FROM steward.history WHERE process = 'dp_pay' "
                               "AND outcome = 'timeout'"),
                     0);
    free(topic);
}
END_TEST

START_TEST(renewed_not_shared)
{
    dt_setup("dispatch_renewed");
    char *topic = tl_unique("dispatch.renew.");
    dt_mock_start(topic);
    dt.timeout_set = "dispatch.timeout=60s";
    int a = dt_start_then_cut(topic);
    int b = dt_start();
    dt_add_commands(PROCESS, topic, 20, 1);
    /* Claimed, then held over more than three leases of 2 s by renewals
     * (a lease left to run out would be claimed by the other replica). */
    dt_wait_for("SELECT count(*) FROM steward.commands WHERE key LIKE 'K%' AND sent_at IS NULL AND "
                "next_attempt_at > created_at + interval '7 seconds'",
                "20", 60);
    ck_assert_int_eq(rd_kafka_mock_broker_set_up(dt.mock, 1), RD_KAFKA_RESP_ERR_NO_ERROR);
    dt_wait_for("SELECT count(*) FROM steward.commands WHERE sent_at IS NOT NULL", "21", 60);
    ck_assert_int_eq(tl_stop(a, SIGTERM, 30), 0);
    ck_assert_int_eq(tl_stop(b, SIGTERM, 30), 0);
    dt_seen_list_t got = dt_read_topic(topic, 1);
    ck_assert_msg(got.n == 21, "%zu messages for 21 commands: a row was produced twice", got.n);
    dt_seen_free(&got);
    free(topic);
}
END_TEST

/*
 * Replica A claims 40 commands while the broker is down (they wait in its
 * producer's queue, their leases renewed); replica B runs beside it. A is
 * SIGKILLed and the broker returns at once: B claims A's rows when their
 * lease runs out, at most one dispatch.lease after A's last renewal, and
 * sends each once (A never transmitted them).
 */
START_TEST(killed_replica_taken_over)
{
    dt_setup("dispatch_takeover");
    char *topic = tl_unique("dispatch.takeover.");
    dt_mock_start(topic);
    dt.timeout_set = "dispatch.timeout=60s"; /* A holds them, renewing, until it dies */
    /* Producers that come back to a returned broker within half a second,
     * not after librdkafka's backoff of up to 10 s. */
    dt.config = tl_write_file(dt.w.dir, "steward.json",
                              "{\"kafka\": {\"reconnect.backoff.max.ms\": \"500\"}}");
    int a = dt_start_then_cut(topic);
    enum { ROWS = 40 };
    dt_add_commands(PROCESS, topic, ROWS, 1);
    dt_wait_for("SELECT count(*) FROM steward.commands WHERE key LIKE 'K%' AND "
                "next_attempt_at > now() AND sent_at IS NULL",
                "40", 60);
    /* B: running, its dispatcher looking at the outbox, before A dies. */
    int b = dt_start();
    dt_wait_for("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND "
                "application_name = 'steward dispatcher'",
                "2", 60);
    usleep(500 * 1000); /* B has looked, and found every row leased */
    ck_assert_int_eq(dt_scalar("SELECT count(*) FROM steward.commands WHERE key LIKE 'K%' AND "
                               "next_attempt_at > now() AND sent_at IS NULL"),
                     ROWS);

    ck_assert_int_eq(tl_stop(a, SIGKILL, 10), 128 + SIGKILL);
    double t0 = dt_now_s();
    ck_assert_int_eq(rd_kafka_mock_broker_set_up(dt.mock, 1), RD_KAFKA_RESP_ERR_NO_ERROR);
    dt_wait_for("SELECT count(*) FROM steward.commands WHERE key LIKE 'K%' AND sent_at IS NOT NULL",
                "40", 30);
    double took = dt_now_s() - t0;
    printf("dispatch takeover: %d commands of the killed replica on the topic %.2f s after the "
           "kill (lease %.0f s)\n",
           ROWS, took, DT_LEASE_S);
    /* The lease and a look (100 ms), the documented bound; then the
     * producer's reconnection (at most 500 ms here), the delivery and its
     * mark, on a sanitizer build of a shared machine: 2.5 s for those. A
     * lease that followed the delivery timeout would be 60 s. */
    ck_assert_msg(took <= DT_LEASE_S + 2.5,
                  "the survivor took %.2f s to send what the killed replica held", took);
    ck_assert_int_eq(tl_stop(b, SIGTERM, 30), 0);
    dt_seen_list_t got = dt_read_topic(topic, 1);
    ck_assert_msg(got.n == ROWS + 1, "%zu messages for %d commands", got.n, ROWS + 1);
    for (size_t i = 0; i < got.n; i++)
        for (size_t j = 0; j < i; j++)
            ck_assert_str_ne(got.items[i].ce_id, got.items[j].ce_id);
    dt_seen_free(&got);
    free(topic);
}
END_TEST

Suite *dispatch_faults_suite(void)
{
    Suite *s = suite_create("dispatch_faults");
    TCase *tc = tcase_create("dispatch_faults");
    tcase_add_checked_fixture(tc, NULL, dt_teardown);
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, crash_frees_claims_fast);
    tcase_add_test(tc, cancelled_never_sent);
    tcase_add_test(tc, crash_then_answered);
    tcase_add_test(tc, renewed_not_shared);
    tcase_add_test(tc, killed_replica_taken_over);
    suite_add_tcase(s, tc);
    return s;
}
