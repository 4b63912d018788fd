/*
 * test_smoke - the integration harness itself works end to end.
 *
 * real_broker_round_trip: against the broker scripts/test started (or the
 * external one it was given), creates a fresh topic with the Admin API,
 * produces ten JSON messages, consumes them back in a new consumer group,
 * writes what it read into this suite's database and checks the rows. It
 * logs the brokers, the broker identity from the cluster's metadata and
 * STEWARD_TEST_KAFKA_KIND, so the ctest log shows what it ran against.
 *
 * mock_cluster_fault_injection: librdkafka's mock cluster stays available
 * for fault injection: three Produce requests fail with a retriable error,
 * and the producer retries and still delivers exactly once.
 *
 * Every wait is bounded (WAIT_MS).
 */
#include "testlib.h"

#include <check.h>
#include <inttypes.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define N_MESSAGES   10
#define N_PARTITIONS 3
#define WAIT_MS      30000

/* The Kafka protocol's ApiKey for Produce (librdkafka keeps its RD_KAFKAP_*
 * names in a private header). */
#define API_KEY_PRODUCE 0

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A name no earlier run used: pid plus the wall clock in microseconds. */
static void unique_name(char *buf, size_t size, const char *prefix)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(buf, size, "%s-%d-%" PRId64, prefix, (int) getpid(),
             (int64_t) ts.tv_sec * 1000000 + ts.tv_nsec / 1000);
}

static void conf_set(rd_kafka_conf_t *conf, const char *name, const char *value)
{
    char err[512];
    ck_assert_msg(rd_kafka_conf_set(conf, name, value, err, sizeof err) == RD_KAFKA_CONF_OK,
                  "%s=%s: %s", name, value, err);
}

static rd_kafka_t *new_client(rd_kafka_type_t type, rd_kafka_conf_t *conf)
{
    char err[512];
    rd_kafka_t *rk = rd_kafka_new(type, conf, err, sizeof err);
    ck_assert_msg(rk != NULL, "rd_kafka_new: %s", err);
    return rk;
}

/* What the delivery reports said, for the producer's opaque. */
typedef struct deliveries {
    int ok;
    int failed;
    int64_t first_offset;
    char last_error[256];
} deliveries_t;

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *msg, void *opaque)
{
    (void) rk;
    deliveries_t *d = opaque;
    if (msg->err) {
        d->failed++;
        snprintf(d->last_error, sizeof d->last_error, "%s", rd_kafka_err2str(msg->err));
        return;
    }
    if (d->ok == 0)
        d->first_offset = msg->offset;
    d->ok++;
}

static rd_kafka_t *new_producer(const char *brokers, deliveries_t *d)
{
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    conf_set(conf, "bootstrap.servers", brokers);
    conf_set(conf, "acks", "all");
    conf_set(conf, "message.timeout.ms", "30000");
    conf_set(conf, "retry.backoff.ms", "20");
    rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
    rd_kafka_conf_set_opaque(conf, d);
    return new_client(RD_KAFKA_PRODUCER, conf);
}

/* Logs the brokers the cluster's metadata names, so the ctest output shows
 * which broker process the suite talked to. */
static void log_cluster(rd_kafka_t *rk, const char *brokers)
{
    const char *kind = getenv("STEWARD_TEST_KAFKA_KIND");
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t err = rd_kafka_metadata(rk, 0, NULL, &md, WAIT_MS);
    ck_assert_msg(err == RD_KAFKA_RESP_ERR_NO_ERROR, "metadata from %s: %s", brokers,
                  rd_kafka_err2str(err));
    char *cluster_id = rd_kafka_clusterid(rk, WAIT_MS);
    int32_t controller = rd_kafka_controllerid(rk, WAIT_MS);

    printf("smoke: kafka %s (STEWARD_TEST_KAFKA_KIND=%s), cluster id %s, controller %" PRId32
           ", metadata from broker %" PRId32 " (%s), %d broker(s):\n",
           brokers, kind && *kind ? kind : "unset", cluster_id ? cluster_id : "?", controller,
           md->orig_broker_id, md->orig_broker_name, md->broker_cnt);
    for (int i = 0; i < md->broker_cnt; i++)
        printf("smoke:   broker id %" PRId32 " at %s:%d\n", md->brokers[i].id, md->brokers[i].host,
               md->brokers[i].port);
    fflush(stdout);
    ck_assert_int_ge(md->broker_cnt, 1);

    if (cluster_id != NULL)
        rd_kafka_mem_free(rk, cluster_id);
    rd_kafka_metadata_destroy(md);
}

/* Creates `topic` with the Admin API and waits for the result. */
static void create_topic(rd_kafka_t *rk, const char *topic, int partitions)
{
    char err[512];
    rd_kafka_NewTopic_t *nt = rd_kafka_NewTopic_new(topic, partitions, 1, err, sizeof err);
    ck_assert_msg(nt != NULL, "NewTopic: %s", err);
    rd_kafka_AdminOptions_t *opts = rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_CREATETOPICS);
    ck_assert(rd_kafka_AdminOptions_set_operation_timeout(opts, WAIT_MS, err, sizeof err) ==
              RD_KAFKA_RESP_ERR_NO_ERROR);
    ck_assert(rd_kafka_AdminOptions_set_request_timeout(opts, WAIT_MS, err, sizeof err) ==
              RD_KAFKA_RESP_ERR_NO_ERROR);
    rd_kafka_queue_t *queue = rd_kafka_queue_new(rk);

    rd_kafka_CreateTopics(rk, &nt, 1, opts, queue);
    rd_kafka_event_t *ev = rd_kafka_queue_poll(queue, WAIT_MS + 5000);
    ck_assert_msg(ev != NULL, "CreateTopics %s: no result within %d ms", topic, WAIT_MS + 5000);
    ck_assert_msg(rd_kafka_event_error(ev) == RD_KAFKA_RESP_ERR_NO_ERROR, "CreateTopics %s: %s",
                  topic, rd_kafka_event_error_string(ev));
    const rd_kafka_CreateTopics_result_t *res = rd_kafka_event_CreateTopics_result(ev);
    ck_assert_ptr_nonnull(res);
    size_t n = 0;
    const rd_kafka_topic_result_t **results = rd_kafka_CreateTopics_result_topics(res, &n);
    ck_assert_uint_eq(n, 1);
    ck_assert_msg(rd_kafka_topic_result_error(results[0]) == RD_KAFKA_RESP_ERR_NO_ERROR,
                  "CreateTopics %s: %s", topic, rd_kafka_topic_result_error_string(results[0]));

    rd_kafka_event_destroy(ev);
    rd_kafka_queue_destroy(queue);
    rd_kafka_AdminOptions_destroy(opts);
    rd_kafka_NewTopic_destroy(nt);
}

static void payload_for(int seq, char *buf, size_t size)
{
    snprintf(buf, size, "{\"type\":\"SmokeTested\",\"id\":\"smoke-%d\",\"seq\":%d}", seq, seq);
}

static void produce(rd_kafka_t *rk, const char *topic, int n)
{
    for (int i = 0; i < n; i++) {
        char key[32], value[128];
        snprintf(key, sizeof key, "order-%d", i);
        payload_for(i, value, sizeof value);
        rd_kafka_resp_err_t err =
            rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_KEY(key, strlen(key)),
                              RD_KAFKA_V_VALUE(value, strlen(value)),
                              RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
        ck_assert_msg(err == RD_KAFKA_RESP_ERR_NO_ERROR, "produce: %s", rd_kafka_err2str(err));
    }
    rd_kafka_resp_err_t err = rd_kafka_flush(rk, WAIT_MS);
    ck_assert_msg(err == RD_KAFKA_RESP_ERR_NO_ERROR, "flush: %s", rd_kafka_err2str(err));
}

START_TEST(real_broker_round_trip)
{
    const char *brokers = tl_kafka_brokers();
    char topic[128], group[128];
    unique_name(topic, sizeof topic, "steward-smoke");
    unique_name(group, sizeof group, "steward-smoke-group");

    /* Produce. */
    deliveries_t d = {0};
    rd_kafka_t *producer = new_producer(brokers, &d);
    log_cluster(producer, brokers);
    create_topic(producer, topic, N_PARTITIONS);
    produce(producer, topic, N_MESSAGES);
    ck_assert_msg(d.failed == 0, "%d deliveries failed: %s", d.failed, d.last_error);
    ck_assert_int_eq(d.ok, N_MESSAGES);
    rd_kafka_destroy(producer);

    /* Consume it back, in a group of our own, from the beginning. */
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    conf_set(conf, "bootstrap.servers", brokers);
    conf_set(conf, "group.id", group);
    conf_set(conf, "auto.offset.reset", "earliest");
    conf_set(conf, "enable.auto.commit", "false");
    rd_kafka_t *consumer = new_client(RD_KAFKA_CONSUMER, conf);
    rd_kafka_poll_set_consumer(consumer);
    rd_kafka_topic_partition_list_t *subscription = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(subscription, topic, RD_KAFKA_PARTITION_UA);
    ck_assert(rd_kafka_subscribe(consumer, subscription) == RD_KAFKA_RESP_ERR_NO_ERROR);
    rd_kafka_topic_partition_list_destroy(subscription);

    const char *url = tl_db_create("smoke");
    PGconn *conn = tl_db_connect(url);
    tl_db_exec(conn, "CREATE TABLE smoke_events ("
                     "  topic text NOT NULL,"
                     "  partition int NOT NULL,"
                     "  kafka_offset bigint NOT NULL,"
                     "  key text NOT NULL,"
                     "  payload text NOT NULL,"
                     "  doc jsonb GENERATED ALWAYS AS (payload::jsonb) STORED,"
                     "  PRIMARY KEY (topic, partition, kafka_offset))");

    int got = 0;
    int64_t start = now_ms(), deadline = start + WAIT_MS;
    while (got < N_MESSAGES && now_ms() < deadline) {
        rd_kafka_message_t *msg = rd_kafka_consumer_poll(consumer, 500);
        if (msg == NULL)
            continue;
        if (msg->err) {
            /* Transient while the new topic's metadata spreads; logged
             * for the record, the deadline bounds it. */
            printf("smoke: consumer: %s\n", rd_kafka_message_errstr(msg));
            rd_kafka_message_destroy(msg);
            continue;
        }
        char partition[16], offset[32];
        snprintf(partition, sizeof partition, "%" PRId32, msg->partition);
        snprintf(offset, sizeof offset, "%" PRId64, msg->offset);
        char *key = strndup(msg->key ? (const char *) msg->key : "", msg->key_len);
        char *payload = strndup((const char *) msg->payload, msg->len);
        const char *params[] = {topic, partition, offset, key, payload};
        PGresult *res = PQexecParams(conn,
                                     "INSERT INTO smoke_events "
                                     "(topic, partition, kafka_offset, key, payload) "
                                     "VALUES ($1, $2, $3, $4, $5)",
                                     5, NULL, params, NULL, NULL, 0);
        ck_assert_msg(PQresultStatus(res) == PGRES_COMMAND_OK, "insert: %s", PQerrorMessage(conn));
        PQclear(res);
        free(key);
        free(payload);
        rd_kafka_message_destroy(msg);
        got++;
    }
    printf("smoke: consumed %d of %d messages from %s in %" PRId64 " ms (group %s)\n", got,
           N_MESSAGES, topic, now_ms() - start, group);
    fflush(stdout);
    rd_kafka_consumer_close(consumer);
    rd_kafka_destroy(consumer);
    ck_assert_msg(got == N_MESSAGES, "consumed %d of %d messages within %d ms", got, N_MESSAGES,
                  WAIT_MS);

    /* The rows: one per message, payloads byte for byte, each once. */
    char *count = tl_db_scalar(conn, "SELECT count(*) FROM smoke_events", 0, NULL);
    ck_assert_str_eq(count, "10");
    char *keys = tl_db_scalar(conn, "SELECT count(DISTINCT key) FROM smoke_events", 0, NULL);
    ck_assert_str_eq(keys, "10");
    char *payloads = tl_db_scalar(
        conn, "SELECT string_agg(payload, E'\\n' ORDER BY (doc->>'seq')::int) FROM smoke_events", 0,
        NULL);
    char expected[N_MESSAGES * 128] = "";
    for (int i = 0; i < N_MESSAGES; i++) {
        char line[128];
        payload_for(i, line, sizeof line);
        if (i > 0)
            strcat(expected, "\n");
        strcat(expected, line);
    }
    ck_assert_str_eq(payloads, expected);
    char *mismatched = tl_db_scalar(conn,
                                    "SELECT count(*) FROM smoke_events "
                                    "WHERE key <> 'order-' || (doc->>'seq') "
                                    "   OR doc->>'type' <> 'SmokeTested'",
                                    0, NULL);
    ck_assert_str_eq(mismatched, "0");
    char *partitions =
        tl_db_scalar(conn, "SELECT count(DISTINCT partition) FROM smoke_events", 0, NULL);
    printf("smoke: %s rows in the suite database, over %s of %d partitions\n", count, partitions,
           N_PARTITIONS);

    free(count);
    free(keys);
    free(payloads);
    free(mismatched);
    free(partitions);
    PQfinish(conn);
}
END_TEST

START_TEST(mock_cluster_fault_injection)
{
    /* The mock cluster needs a client instance for its own bookkeeping;
     * it connects nowhere, so its "no bootstrap.servers" notice is muted. */
    rd_kafka_conf_t *owner_conf = rd_kafka_conf_new();
    conf_set(owner_conf, "log_level", "4");
    rd_kafka_t *owner = new_client(RD_KAFKA_PRODUCER, owner_conf);
    rd_kafka_mock_cluster_t *mcluster = rd_kafka_mock_cluster_new(owner, 1);
    ck_assert_ptr_nonnull(mcluster);
    ck_assert_int_eq(rd_kafka_mock_topic_create(mcluster, "smoke-mock", 1, 1),
                     RD_KAFKA_RESP_ERR_NO_ERROR);

    /* The next three Produce requests to broker 1 fail, retriably. */
    ck_assert_int_eq(rd_kafka_mock_broker_push_request_error_rtts(
                         mcluster, 1, API_KEY_PRODUCE, 3, RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS, 0,
                         RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS, 0,
                         RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS, 0),
                     RD_KAFKA_RESP_ERR_NO_ERROR);

    deliveries_t d = {0};
    const char *bootstraps = rd_kafka_mock_cluster_bootstraps(mcluster);
    rd_kafka_t *producer = new_producer(bootstraps, &d);
    printf("smoke: mock cluster at %s, 3 Produce errors injected\n", bootstraps);
    fflush(stdout);
    produce(producer, "smoke-mock", 1);

    size_t left = 99;
    ck_assert_int_eq(rd_kafka_mock_broker_error_stack_cnt(mcluster, 1, API_KEY_PRODUCE, &left),
                     RD_KAFKA_RESP_ERR_NO_ERROR);
    ck_assert_msg(left == 0, "%zu injected errors never reached: the producer did not retry", left);
    ck_assert_msg(d.failed == 0, "delivery failed: %s", d.last_error);
    ck_assert_int_eq(d.ok, 1);
    /* Failed attempts appended nothing: the message is stored once. */
    ck_assert_int_eq(d.first_offset, 0);
    printf("smoke: delivered after the injected errors, at offset %" PRId64 "\n", d.first_offset);

    rd_kafka_destroy(producer);
    rd_kafka_mock_cluster_destroy(mcluster);
    rd_kafka_destroy(owner);
}
END_TEST

Suite *smoke_suite(void)
{
    Suite *s = suite_create("smoke");
    TCase *tc = tcase_create("smoke");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, real_broker_round_trip);
    tcase_add_test(tc, mock_cluster_fault_injection);
    suite_add_tcase(s, tc);
    return s;
}
