/*
 * test_poison - no message can stop intake. Messages that once made every
 * replica exit (a 2.8 KB correlation key, a 3,000-character ce_id, a
 * ce_source header with byte 0xff, event times of 1e16 ms and near
 * INT64_MAX) and one PostgreSQL refuses although it passes decode are
 * produced on the real broker between ordinary events, read by two
 * `steward run` replicas in one group: both stay up, each bad message is
 * in steward.rejected with its reason, and every other event is judged
 * exactly once.
 *
 * The refused message: decode now stops everything PostgreSQL is known to
 * refuse, so the test makes the database refuse one key itself, with a
 * trigger that raises a data exception (SQLSTATE 22023), as a value out of
 * range or an index row too large would.
 */
#include "testlib.h"

#include <check.h>
#include <librdkafka/rdkafka.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define PARTITIONS 2
#define GOOD       20 /* ordinary events, before and after the bad ones */

static const char definition_template[] =
    "{\"process\":\"poison\",\"version\":1,\"mode\":\"shadow\",\"owner\":\"fulfilment\","
    "\"key\":\"/order_id\",\"envelope\":{\"time\":\"/at\"},\"deadline\":\"10d\","
    "\"events\":{\"OrderPlaced\":{\"topic\":\"%1$s\"},\"OrderShipped\":{\"topic\":\"%1$s\"}},"
    "\"start\":{\"on\":\"OrderPlaced\",\"to\":\"open\"},"
    "\"states\":{\"open\":{\"deadline\":\"1d\",\"on\":{\"OrderShipped\":\"done\"}},"
    "\"done\":{\"terminal\":\"success\"}}}";

/* The database refuses history rows for this one key. */
static const char refuse_sql[] =
    "CREATE FUNCTION public.refuse_one() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    "IF NEW.key = 'refuse-me' THEN RAISE EXCEPTION 'this database refuses key %', NEW.key "
    "USING ERRCODE = '22023'; END IF; RETURN NEW; END $$; "
    "CREATE TRIGGER refuse_one BEFORE INSERT ON steward.history FOR EACH ROW "
    "EXECUTE FUNCTION public.refuse_one()";

typedef struct header {
    const char *name;
    const char *value;
    size_t len;
} header_t;

/* Produces with a Kafka key and binary header values (tl_produce() has
 * neither). */
static void produce(rd_kafka_t *rk, const char *topic, int partition, const char *key,
                    const char *value, const header_t *headers, size_t n_headers)
{
    rd_kafka_headers_t *hdrs = rd_kafka_headers_new(n_headers + 1);
    size_t key_len = key != NULL ? strlen(key) : 0;
    for (size_t i = 0; i < n_headers; i++)
        rd_kafka_header_add(hdrs, headers[i].name, -1, headers[i].value, (ssize_t) headers[i].len);
    rd_kafka_resp_err_t err = rd_kafka_producev(
        rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_PARTITION(partition),
        RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_KEY(key, key_len),
        RD_KAFKA_V_VALUE((void *) value, strlen(value)), RD_KAFKA_V_HEADERS(hdrs), RD_KAFKA_V_END);
    ck_assert_msg(err == RD_KAFKA_RESP_ERR_NO_ERROR, "produce: %s", rd_kafka_err2str(err));
}

static rd_kafka_t *producer_new(void)
{
    char kerr[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    ck_assert(rd_kafka_conf_set(conf, "bootstrap.servers", tl_kafka_brokers(), kerr, sizeof kerr) ==
              RD_KAFKA_CONF_OK);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, kerr, sizeof kerr);
    ck_assert_msg(rk != NULL, "producer: %s", kerr);
    return rk;
}

static void good_events(rd_kafka_t *rk, const char *topic, int from, int to)
{
    for (int i = from; i < to; i++) {
        char value[256];
        snprintf(value, sizeof value,
                 "{\"type\":\"OrderPlaced\",\"id\":\"g%d\",\"order_id\":\"G%03d\","
                 "\"at\":\"2026-11-30T10:00:00Z\"}",
                 i, i);
        produce(rk, topic, i % PARTITIONS, NULL, value, NULL, 0);
    }
}

static long scalar_long(PGconn *conn, const char *sql, const char *param)
{
    const char *params[1] = {param};
    char *v = tl_db_scalar(conn, sql, param != NULL ? 1 : 0, params);
    long n = v != NULL ? atol(v) : -1;
    free(v);
    return n;
}

static bool running(int pid)
{
    int status;
    return waitpid(pid, &status, WNOHANG) == 0;
}

START_TEST(test_poison_two_replicas)
{
    char *topic = tl_unique("poison.");
    const char *topics[1] = {topic};
    tl_kafka_create_topics(topics, 1, PARTITIONS);

    char definition[2048];
    snprintf(definition, sizeof definition, definition_template, topic);
    char *dir = strdup(tl_tmpdir());
    free(tl_write_file(dir, "poison.json", definition));
    char *log_a = tl_write_file(tl_tmpdir(), "a.log", "");
    char *log_b = tl_write_file(tl_tmpdir(), "b.log", "");

    const char *url = tl_db_create("poison");
    tl_migrate(url);
    PGconn *conn = tl_db_connect(url);
    tl_db_exec(conn, refuse_sql);

    /* Ordinary events, then the bad ones, then ordinary events again. */
    rd_kafka_t *rk = producer_new();
    long total = 0;
    good_events(rk, topic, 0, GOOD / 2);
    total += GOOD / 2;

    char long_key[2801], long_id[3001], value[4096];
    srand(8);
    for (size_t i = 0; i < sizeof long_key - 1; i++)
        long_key[i] = (char) ('!' + rand() % 90); /* printable, no quote or backslash */
    long_key[sizeof long_key - 1] = '\0';
    for (size_t i = 0; i < sizeof long_key - 1; i++)
        if (long_key[i] == '"' || long_key[i] == '\\')
            long_key[i] = 'x';
    snprintf(value, sizeof value,
             "{\"type\":\"OrderPlaced\",\"id\":\"p1\",\"order_id\":\"%s\","
             "\"at\":\"2026-11-30T10:00:00Z\"}",
             long_key);
    produce(rk, topic, 0, "kafka-key-1", value, NULL, 0);

    memset(long_id, 'i', sizeof long_id - 1);
    long_id[sizeof long_id - 1] = '\0';
    header_t ce_long_id[] = {{"ce_specversion", "1.0", 3},
                             {"ce_type", "OrderPlaced", 11},
                             {"ce_source", "test", 4},
                             {"ce_id", long_id, strlen(long_id)}};
    produce(rk, topic, 1, NULL, "{\"order_id\":\"P2\"}", ce_long_id, 4);

    header_t ce_bad_source[] = {{"ce_specversion", "1.0", 3},
                                {"ce_type", "OrderPlaced", 11},
                                {"ce_source", "shop\xff", 5},
                                {"ce_id", "p3", 2}};
    produce(rk, topic, 0, NULL, "{\"order_id\":\"P3\"}", ce_bad_source, 4);

    produce(rk, topic, 1, NULL,
            "{\"type\":\"OrderPlaced\",\"id\":\"p4\",\"order_id\":\"P4\",\"at\":10000000000000000}",
            NULL, 0);
    produce(rk, topic, 0, NULL,
            "{\"type\":\"OrderPlaced\",\"id\":\"p5\",\"order_id\":\"P5\","
            "\"at\":9223372036854775000}",
            NULL, 0);
    produce(rk, topic, 1, NULL,
            "{\"type\":\"OrderPlaced\",\"id\":\"p6\",\"order_id\":\"refuse-me\","
            "\"at\":\"2026-11-30T10:00:00Z\"}",
            NULL, 0);
    /* Not bad at all: a number beyond 64 bits in a field nobody reads. */
    produce(rk, topic, 0, NULL,
            "{\"type\":\"OrderPlaced\",\"id\":\"p7\",\"order_id\":\"B1\","
            "\"at\":\"2026-11-30T10:00:00Z\",\"n\":123456789012345678901234567890}",
            NULL, 0);
    total += 7;
    good_events(rk, topic, GOOD / 2, GOOD);
    total += GOOD / 2;
    ck_assert_int_eq(rd_kafka_flush(rk, 30000), RD_KAFKA_RESP_ERR_NO_ERROR);
    rd_kafka_destroy(rk);

    char *group = tl_unique("poison");
    const char *argv_a[] = {NULL,         "run", "--brokers",     tl_kafka_brokers(),
                            "--database", url,   "--definitions", dir,
                            "--group",    group, "--replica",     "a",
                            "--batch-ms", "20",  "--set",         "http.listen=",
                            NULL};
    const char *argv_b[] = {NULL,         "run", "--brokers",     tl_kafka_brokers(),
                            "--database", url,   "--definitions", dir,
                            "--group",    group, "--replica",     "b",
                            "--batch-ms", "20",  "--set",         "http.listen=",
                            NULL};
    int pid_a = tl_steward_spawn(argv_a, NULL, log_a);
    int pid_b = tl_steward_spawn(argv_b, NULL, log_b);

    char expected[32], *last = NULL;
    snprintf(expected, sizeof expected, "%ld", total);
    const char *params[1] = {group};
    if (!tl_db_wait(conn,
                    "SELECT coalesce(sum(next_offset), 0) FROM steward.offsets "
                    "WHERE consumer_group = $1 AND next_offset >= 0",
                    1, params, expected, 60, &last)) {
        tl_print_tail(log_a, 4000);
        tl_print_tail(log_b, 4000);
        ck_abort_msg("committed %s of %ld messages (the replicas' logs above)", last, total);
    }
    ck_assert_msg(running(pid_a), "replica a exited");
    ck_assert_msg(running(pid_b), "replica b exited");

    /* Each bad message in rejected, with its reason. */
    static const char *const expect[][2] = {
        {"p1", "invalid_key"},  {"P2", "invalid_id"},   {"P3", "invalid_header"},
        {"P4", "invalid_time"}, {"P5", "invalid_time"}, {"refuse-me", "database_refused"},
    };
    for (size_t i = 0; i < sizeof expect / sizeof expect[0]; i++) {
        const char *p[2] = {expect[i][0], expect[i][1]};
        char *n = tl_db_scalar(conn,
                               "SELECT count(*) FROM steward.rejected "
                               "WHERE convert_from(value, 'UTF8') LIKE '%' || $1 || '%' "
                               "AND reason = $2",
                               2, p);
        ck_assert_msg(strcmp(n, "1") == 0, "%s: %s rows with reason %s", expect[i][0], n,
                      expect[i][1]);
        free(n);
    }
    ck_assert_int_eq(scalar_long(conn, "SELECT count(*) FROM steward.rejected", NULL), 6);
    /* The database's own words, and the Kafka key kept. */
    ck_assert_int_eq(scalar_long(conn,
                                 "SELECT count(*) FROM steward.rejected WHERE reason = "
                                 "'database_refused' AND detail LIKE "
                                 "'%this database refuses key refuse-me%'",
                                 NULL),
                     1);
    ck_assert_int_eq(scalar_long(conn,
                                 "SELECT count(*) FROM steward.rejected WHERE message_key = "
                                 "convert_to('kafka-key-1', 'UTF8') AND reason = 'invalid_key'",
                                 NULL),
                     1);

    /* Every other event judged exactly once: the good ones and the big number. */
    ck_assert_int_eq(scalar_long(conn, "SELECT count(*) FROM steward.history", NULL), GOOD + 1);
    ck_assert_int_eq(scalar_long(conn,
                                 "SELECT count(*) FROM (SELECT topic, partition, \"offset\" "
                                 "FROM steward.history GROUP BY 1, 2, 3 HAVING count(*) > 1) s",
                                 NULL),
                     0);
    ck_assert_int_eq(
        scalar_long(conn, "SELECT count(*) FROM steward.instances WHERE key = 'B1'", NULL), 1);

    /* A key with a terminal escape sequence, printed by stuck and inspect:
     * a second start event opens a sequence alert for it. */
    rk = producer_new();
    static const char esc_placed[] =
        "{\"type\":\"OrderPlaced\",\"id\":\"e%d\",\"order_id\":\"E\\u001b]0;owned\\u0007"
        "\\u001b[31m\",\"at\":\"2026-11-30T10:00:00Z\"}";
    for (int i = 1; i <= 2; i++) {
        snprintf(value, sizeof value, esc_placed, i);
        produce(rk, topic, 1, NULL, value, NULL, 0);
    }
    ck_assert_int_eq(rd_kafka_flush(rk, 30000), RD_KAFKA_RESP_ERR_NO_ERROR);
    rd_kafka_destroy(rk);
    /* The sequence alert, of the second start event: the instance's step
     * deadline (1d, and its start is older) may alert beside it. */
    if (!tl_db_wait(conn,
                    "SELECT count(*) FROM steward.alerts WHERE key LIKE 'E%' AND kind = 'sequence'",
                    0, NULL, "1", 30, &last)) {
        tl_print_tail(log_a, 4000);
        ck_abort_msg("no sequence alert for the escaped key (%s)", last);
    }
    const char *stuck_argv[] = {NULL, "stuck", "--database", url, NULL};
    tl_output_t o = tl_steward(stuck_argv, NULL);
    ck_assert_msg(o.status == 0, "stuck: %s", o.err);
    ck_assert_msg(strchr(o.out, '\x1b') == NULL && strchr(o.out, '\x07') == NULL,
                  "stuck printed raw control characters");
    ck_assert_msg(tl_contains(o.out, "E\\x1b]0;owned\\x07\\x1b[31m"), "stuck:\n%s", o.out);
    tl_output_free(&o);
    const char *inspect_argv[] = {NULL,         "inspect", "poison", "E\x1b]0;owned\x07\x1b[31m",
                                  "--database", url,       NULL};
    o = tl_steward(inspect_argv, NULL);
    ck_assert_msg(o.status == 0, "inspect: %s", o.err);
    ck_assert_msg(strchr(o.out, '\x1b') == NULL && strchr(o.out, '\x07') == NULL,
                  "inspect printed raw control characters");
    ck_assert_msg(tl_contains(o.out, "poison E\\x1b]0;owned\\x07\\x1b[31m"), "inspect:\n%s", o.out);
    tl_output_free(&o);

    ck_assert_int_eq(tl_stop(pid_a, SIGTERM, 30), 0);
    ck_assert_int_eq(tl_stop(pid_b, SIGTERM, 30), 0);
    PQfinish(conn);
    free(group);
    free(dir);
    free(log_a);
    free(log_b);
    free(topic);
    free(last);
}
END_TEST

/* The value of header `name` of m as a new string; NULL when absent. */
static char *header_of(const rd_kafka_message_t *m, const char *name)
{
    rd_kafka_headers_t *hdrs = NULL;
    const void *value;
    size_t size;
    if (rd_kafka_message_headers(m, &hdrs) != RD_KAFKA_RESP_ERR_NO_ERROR ||
        rd_kafka_header_get_last(hdrs, name, &value, &size) != RD_KAFKA_RESP_ERR_NO_ERROR)
        return NULL;
    return strndup(value, size);
}

/*
 * intake.dead_letter_topic copies each rejected message with Kafka
 * Connect's error headers; intake.record_unknown adds a rejected row for an
 * event no definition declares.
 */
START_TEST(test_dead_letters_and_unknown_types)
{
    char *topic = tl_unique("poison.dl.");
    char *dlq = tl_unique("poison.dlq.");
    const char *topics[2] = {topic, dlq};
    tl_kafka_create_topics(topics, 2, 1);

    char definition[2048];
    snprintf(definition, sizeof definition, definition_template, topic);
    char *dir = strdup(tl_tmpdir());
    free(tl_write_file(dir, "poison.json", definition));
    char *log = tl_write_file(tl_tmpdir(), "dl.log", "");
    const char *url = tl_db_create("poison_dl");
    tl_migrate(url);
    PGconn *conn = tl_db_connect(url);
    tl_db_exec(conn, refuse_sql);

    rd_kafka_t *rk = producer_new();
    good_events(rk, topic, 0, 1); /* offset 0 */
    produce(rk, topic, 0, NULL, "{\"type\":\"OrderCancelled\",\"order_id\":\"U1\"}", NULL,
            0); /* 1 */
    produce(rk, topic, 0, NULL,
            "{\"type\":\"OrderPlaced\",\"id\":\"r1\",\"order_id\":\"refuse-me\","
            "\"at\":\"2026-11-30T10:00:00Z\"}",
            NULL, 0); /* 2 */
    char value[2048], long_key[1201];
    memset(long_key, 'k', sizeof long_key - 1);
    long_key[sizeof long_key - 1] = '\0';
    snprintf(value, sizeof value, "{\"type\":\"OrderPlaced\",\"order_id\":\"%s\"}", long_key);
    header_t trace[] = {{"traceparent", "00-abc-def-01", 13}};
    produce(rk, topic, 0, "kafka-key-1", value, trace, 1); /* 3 */
    ck_assert_int_eq(rd_kafka_flush(rk, 30000), RD_KAFKA_RESP_ERR_NO_ERROR);
    rd_kafka_destroy(rk);

    char *group = tl_unique("poison_dl");
    char dlq_set[300];
    snprintf(dlq_set, sizeof dlq_set, "intake.dead_letter_topic=%s", dlq);
    const char *argv[] = {NULL,
                          "run",
                          "--brokers",
                          tl_kafka_brokers(),
                          "--database",
                          url,
                          "--definitions",
                          dir,
                          "--group",
                          group,
                          "--batch-ms",
                          "20",
                          "--set",
                          "http.listen=",
                          "--set",
                          "intake.record_unknown=true",
                          "--set",
                          dlq_set,
                          NULL};
    int pid = tl_steward_spawn(argv, NULL, log);
    const char *params[1] = {group};
    char *last = NULL;
    if (!tl_db_wait(conn,
                    "SELECT coalesce(sum(next_offset), 0) FROM steward.offsets "
                    "WHERE consumer_group = $1 AND next_offset >= 0",
                    1, params, "4", 60, &last)) {
        tl_print_tail(log, 4000);
        ck_abort_msg("committed %s of 4 messages (the log above)", last);
    }
    char *rows =
        tl_db_scalar(conn,
                     "SELECT string_agg(\"offset\" || ':' || reason, ',' ORDER BY \"offset\") "
                     "FROM steward.rejected",
                     0, NULL);
    ck_assert_str_eq(rows, "1:unknown_type,2:database_refused,3:invalid_key");
    free(rows);
    ck_assert_int_eq(scalar_long(conn,
                                 "SELECT count(*) FROM steward.rejected WHERE reason = "
                                 "'unknown_type' AND detail LIKE '%OrderCancelled%'",
                                 NULL),
                     1);

    /* The dead-letter topic holds the same three, with where they came from. */
    char kerr[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    ck_assert(rd_kafka_conf_set(conf, "bootstrap.servers", tl_kafka_brokers(), kerr, sizeof kerr) ==
              RD_KAFKA_CONF_OK);
    ck_assert(rd_kafka_conf_set(conf, "group.id", group, kerr, sizeof kerr) == RD_KAFKA_CONF_OK);
    rd_kafka_t *consumer = rd_kafka_new(RD_KAFKA_CONSUMER, conf, kerr, sizeof kerr);
    ck_assert_msg(consumer != NULL, "consumer: %s", kerr);
    rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(list, dlq, 0)->offset = RD_KAFKA_OFFSET_BEGINNING;
    ck_assert_int_eq(rd_kafka_assign(consumer, list), RD_KAFKA_RESP_ERR_NO_ERROR);
    rd_kafka_topic_partition_list_destroy(list);
    char seen[256] = "";
    int n = 0;
    for (int polls = 0; polls < 300 && n < 3; polls++) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(consumer, 100);
        if (m == NULL)
            continue;
        if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
            char *reason = header_of(m, "__connect.errors.exception.class.name");
            char *offset = header_of(m, "__connect.errors.offset");
            char *src = header_of(m, "__connect.errors.topic");
            ck_assert_ptr_nonnull(reason);
            ck_assert_ptr_nonnull(offset);
            ck_assert_str_eq(src, topic);
            size_t len = strlen(seen);
            snprintf(seen + len, sizeof seen - len, "%s%s:%s", n ? "," : "", offset, reason);
            if (strcmp(reason, "invalid_key") == 0) {
                ck_assert_int_eq((int) m->key_len, 11);
                ck_assert(memcmp(m->key, "kafka-key-1", 11) == 0);
                ck_assert_int_eq((int) m->len, (int) strlen(value));
                char *tp = header_of(m, "traceparent");
                ck_assert_str_eq(tp, "00-abc-def-01");
                free(tp);
                char *msg = header_of(m, "__connect.errors.exception.message");
                ck_assert_msg(tl_contains(msg, "over the limit of 1024"), "message: %s", msg);
                free(msg);
            }
            free(reason);
            free(offset);
            free(src);
            n++;
        }
        rd_kafka_message_destroy(m);
    }
    rd_kafka_consumer_close(consumer);
    rd_kafka_destroy(consumer);
    ck_assert_str_eq(seen, "1:unknown_type,2:database_refused,3:invalid_key");

    /* The run's last summary of what it rejected names the three, the
     * database's refusal among them (a backtest's scratch database has no
     * such trigger: this reason is the run's alone). */
    ck_assert_int_eq(tl_stop(pid, SIGTERM, 30), 0);
    char *run_log = tl_read_file(log);
    ck_assert_msg(tl_contains(run_log, "messages rejected since the last summary") &&
                      tl_contains(run_log, "unknown_type 1") &&
                      tl_contains(run_log, "database_refused 1") &&
                      tl_contains(run_log, "invalid_key 1"),
                  "run's rejection summary:\n%s", run_log);
    free(run_log);
    PQfinish(conn);
    free(last);
    free(group);
    free(log);
    free(dir);
    free(dlq);
    free(topic);
}
END_TEST

Suite *poison_suite(void)
{
    Suite *s = suite_create("poison");
    TCase *tc = tcase_create("poison");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_poison_two_replicas);
    tcase_add_test(tc, test_dead_letters_and_unknown_types);
    suite_add_tcase(s, tc);
    return s;
}
