/*
 * test_mapping - events as they are on the real broker: each rule by which
 * a definition reads a message it did not design.
 *
 * One run of Steward with topics.prefix and topics.map reads two
 * definitions that name their topics as the business does (b.paid is
 * mapped to a name of its own, the others get the prefix):
 *
 *   mapping_a: the correlation key is the Kafka message key, the type is
 *   the "event-type" header, the time is epoch seconds at /ts, and
 *   Withdrawn applies in every non-terminal state ("any").
 *
 *   mapping_b: the key is an integer at /refund_id, each topic fixes its
 *   event type (no type in the payload at all), the time is epoch
 *   milliseconds at /at_ms.
 *
 * The instances' keys, states and start times show each rule applied; the
 * rejected rows show that a message breaking one says which rule.
 */
#include "testlib.h"

#include <check.h>
#include <inttypes.h>
#include <signal.h>
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char def_a[] =
    "{\"$schema\": \"../../definitions/schema/steward-definition.schema.json\","
    " \"process\": \"mapping_a\", \"version\": 1, \"mode\": \"shadow\", \"owner\": \"team\","
    " \"key\": {\"from\": \"message_key\"},"
    " \"envelope\": {\"type\": {\"header\": \"event-type\"},"
    "              \"time\": {\"pointer\": \"/ts\", \"format\": \"epoch_seconds\"}},"
    " \"deadline\": \"30d\","
    " \"events\": {\"Opened\": {\"topic\": \"a.events\"}, \"Progressed\": {\"topic\": "
    "\"a.events\"},"
    "            \"Closed\": {\"topic\": \"a.events\"}, \"Withdrawn\": {\"topic\": \"a.events\"}},"
    " \"start\": {\"on\": \"Opened\", \"to\": \"open\"},"
    " \"states\": {\"open\": {\"on\": {\"Progressed\": \"working\"}},"
    "            \"working\": {\"on\": {\"Closed\": \"closed\"}},"
    "            \"closed\": {\"terminal\": \"success\"},"
    "            \"withdrawn\": {\"terminal\": \"withdrawn\"}},"
    " \"any\": {\"Withdrawn\": \"withdrawn\"}}";

static const char def_b[] =
    "{\"process\": \"mapping_b\", \"version\": 1, \"mode\": \"shadow\", \"owner\": \"team\","
    " \"key\": \"/refund_id\","
    " \"envelope\": {\"time\": {\"pointer\": \"/at_ms\", \"format\": \"epoch_millis\"}},"
    " \"deadline\": \"30d\","
    " \"events\": {\"RefundRequested\": {\"topic\": \"b.requests\", \"type_from_topic\": true},"
    "            \"RefundPaid\": {\"topic\": \"b.paid\", \"type_from_topic\": true}},"
    " \"start\": {\"on\": \"RefundRequested\", \"to\": \"requested\"},"
    " \"states\": {\"requested\": {\"on\": {\"RefundPaid\": \"paid\"}},"
    "            \"paid\": {\"terminal\": \"success\"}}}";

static rd_kafka_t *producer(void)
{
    char err[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    ck_assert(rd_kafka_conf_set(conf, "bootstrap.servers", tl_kafka_brokers(), err, sizeof err) ==
              RD_KAFKA_CONF_OK);
    ck_assert(rd_kafka_conf_set(conf, "acks", "all", err, sizeof err) == RD_KAFKA_CONF_OK);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    ck_assert_msg(rk != NULL, "producer: %s", err);
    return rk;
}

/* Produces value to topic with a message key (NULL: none) and, when
 * type is not NULL, the header event-type. */
static void produce_one(rd_kafka_t *rk, const char *topic, const char *key, const char *type,
                        const char *value)
{
    rd_kafka_headers_t *hdrs = rd_kafka_headers_new(1);
    if (type != NULL)
        rd_kafka_header_add(hdrs, "event-type", -1, type, -1);
    size_t key_len = key != NULL ? strlen(key) : 0;
    rd_kafka_resp_err_t err = rd_kafka_producev(
        rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_PARTITION(0), RD_KAFKA_V_KEY(key, key_len),
        RD_KAFKA_V_VALUE((void *) value, strlen(value)), RD_KAFKA_V_HEADERS(hdrs),
        RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
        rd_kafka_headers_destroy(hdrs);
    ck_assert_msg(err == RD_KAFKA_RESP_ERR_NO_ERROR, "produce: %s", rd_kafka_err2str(err));
}

START_TEST(events_as_they_are)
{
    char *base = tl_unique("map");
    char prefix[128], topics[3][256];
    snprintf(prefix, sizeof prefix, "%s.", base);
    const char *names[] = {"a.events", "b.requests", "b.paid"};
    const char *list[3];
    for (int i = 0; i < 3; i++) {
        snprintf(topics[i], sizeof topics[i], "%s%s", prefix, names[i]);
        list[i] = topics[i];
    }
    /* b.paid does not follow the prefix: topics.map names it. */
    snprintf(topics[2], sizeof topics[2], "%s-refunds-paid-v2", base);
    tl_kafka_create_topics(list, 3, 1);

    char *dir = strdup(tl_tmpdir());
    free(tl_write_file(dir, "a.json", def_a));
    free(tl_write_file(dir, "b.json", def_b));

    /* Event times a minute ago: the deadlines (30 days) stay far away. */
    long long now_s = (long long) time(NULL) - 60;
    char v[512];
    rd_kafka_t *rk = producer();
    const char *a = topics[0];
#define SEND_A(key, type, ts)                                                                      \
    do {                                                                                           \
        snprintf(v, sizeof v, "{\"ts\": %lld, \"note\": \"no type here\"}", (long long) (ts));     \
        produce_one(rk, a, key, type, v);                                                          \
    } while (0)
    SEND_A("K1", "Opened", now_s);
    SEND_A("K1", "Progressed", now_s + 1);
    SEND_A("K1", "Withdrawn", now_s + 2); /* `any`, from 'working' */
    SEND_A("K2", "Opened", now_s + 3);
    SEND_A("K2", "Withdrawn", now_s + 4); /* `any`, from the start state */
    SEND_A("K3", "Opened", now_s + 5);
    SEND_A("K3", "Progressed", now_s + 6);
    SEND_A("K3", "Closed", now_s + 7);
    SEND_A(NULL, "Opened", now_s + 8); /* no message key: missing_key */
    SEND_A("K4", NULL, now_s + 9);     /* no type header: missing_type */
#undef SEND_A

    long long now_ms = now_s * 1000 + 250;
    snprintf(v, sizeof v, "{\"refund_id\": 5, \"at_ms\": %lld}", now_ms);
    produce_one(rk, topics[1], NULL, NULL, v);
    snprintf(v, sizeof v, "{\"refund_id\": \"7\", \"at_ms\": %lld}", now_ms);
    produce_one(rk, topics[1], NULL, NULL, v);
    snprintf(v, sizeof v, "{\"refund_id\": 5.5, \"at_ms\": %lld}", now_ms); /* invalid_key */
    produce_one(rk, topics[1], NULL, NULL, v);
    snprintf(v, sizeof v, "{\"refund_id\": 5, \"at_ms\": %lld}", now_ms + 1000);
    produce_one(rk, topics[2], NULL, NULL, v);
    ck_assert(rd_kafka_flush(rk, 30000) == RD_KAFKA_RESP_ERR_NO_ERROR);
    rd_kafka_destroy(rk);

    const char *db = tl_db_create("mapping");
    PGconn *conn = tl_db_connect(db);
    tl_migrate(db);

    char *group = tl_unique("mapping");
    char set_prefix[160], set_map[320];
    snprintf(set_prefix, sizeof set_prefix, "topics.prefix=%s", prefix);
    snprintf(set_map, sizeof set_map, "topics.map=b.paid=%s", topics[2]);
    char *log = tl_write_file(dir, "steward.log", "");
    const char *run[] = {NULL,         "run",      "--brokers",     tl_kafka_brokers(),
                         "--database", db,         "--definitions", dir,
                         "--group",    group,      "--set",         "http.listen=",
                         "--set",      set_prefix, "--set",         set_map,
                         NULL};
    int pid = tl_steward_spawn(run, NULL, log);

    char *last = NULL;
    const char *expect = "mapping_a:K1:withdrawn mapping_a:K2:withdrawn mapping_a:K3:closed "
                         "mapping_b:5:paid mapping_b:7:requested";
    if (!tl_db_wait(conn,
                    "SELECT string_agg(process || ':' || key || ':' || state, ' ' "
                    "ORDER BY process, key) FROM steward.instances",
                    0, NULL, expect, 45, &last)) {
        tl_print_tail(log, 4000);
        ck_abort_msg("instances: %s (the log above)", last);
    }
    if (!tl_db_wait(conn, "SELECT count(*) FROM steward.rejected", 0, NULL, "3", 30, &last)) {
        tl_print_tail(log, 4000);
        ck_abort_msg("rejected: %s rows, 3 expected (the log above)", last);
    }
    ck_assert_int_eq(tl_stop(pid, SIGTERM, 30), 0);

    /* Epoch seconds and epoch milliseconds, read as declared. */
    char want[64];
    snprintf(want, sizeof want, "%lld", now_s * 1000);
    char *got = tl_db_scalar(conn,
                             "SELECT (extract(epoch FROM started_at) * 1000)::bigint "
                             "FROM steward.instances WHERE process = 'mapping_a' AND key = 'K1'",
                             0, NULL);
    ck_assert_str_eq(got, want);
    free(got);
    snprintf(want, sizeof want, "%lld", now_ms);
    got = tl_db_scalar(conn,
                       "SELECT (extract(epoch FROM started_at) * 1000)::bigint "
                       "FROM steward.instances WHERE process = 'mapping_b' AND key = '5'",
                       0, NULL);
    ck_assert_str_eq(got, want);
    free(got);

    /* The types came from the header and from the topic; the topics read
     * were the prefixed and the mapped ones. */
    const char *p1[1] = {a};
    got = tl_db_scalar(conn,
                       "SELECT string_agg(event_type, ',' ORDER BY id) FROM steward.history "
                       "WHERE process = 'mapping_a' AND key = 'K1' AND topic = $1",
                       1, p1);
    ck_assert_str_eq(got, "Opened,Progressed,Withdrawn");
    free(got);
    /* DISTINCT: a RefundPaid read before its RefundRequested is parked
     * (one row) and applied later (another). */
    const char *p2[2] = {topics[1], topics[2]};
    got = tl_db_scalar(conn,
                       "SELECT string_agg(DISTINCT event_type || '@' || "
                       "  CASE topic WHEN $1 THEN 'prefixed' WHEN $2 THEN 'mapped' ELSE topic END,"
                       "  ',' ORDER BY event_type || '@' || "
                       "  CASE topic WHEN $1 THEN 'prefixed' WHEN $2 THEN 'mapped' ELSE topic END) "
                       "FROM steward.history WHERE process = 'mapping_b' AND key = '5'",
                       2, p2);
    ck_assert_str_eq(got, "RefundPaid@mapped,RefundRequested@prefixed");
    free(got);

    /* Each rejection names the rule it broke. */
    got = tl_db_scalar(conn,
                       "SELECT string_agg(reason || ': ' || detail, ' | ' ORDER BY reason) "
                       "FROM steward.rejected",
                       0, NULL);
    ck_assert_msg(tl_contains(got, "invalid_key: RefundRequested's correlation key at "
                                   "/refund_id is a number with a fraction: expected a string "
                                   "or an integer"),
                  "%s", got);
    ck_assert_msg(tl_contains(got, "missing_key: Opened has no Kafka message key"), "%s", got);
    ck_assert_msg(tl_contains(got, "missing_type: no text in header 'event-type'"), "%s", got);
    free(got);

    free(last);
    free(log);
    free(group);
    free(dir);
    free(base);
    PQfinish(conn);
}
END_TEST

Suite *mapping_suite(void);
Suite *mapping_suite(void)
{
    Suite *s = suite_create("mapping");
    TCase *tc = tcase_create("mapping");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, events_as_they_are);
    suite_add_tcase(s, tc);
    return s;
}
