/*
 * test_rejections - every class of rejected message is said where a user
 * looks: one message of each reason decode and intake can give on a JSON
 * topic (a tombstone, an over-large value, bad UTF-8, bad JSON, nesting
 * too deep, an array, a CloudEvent of another specversion or missing its
 * id, a CloudEvent whose data is text/plain, no type, no key, a key that
 * is a fraction, a time that is no time, an id over the limit, a
 * CloudEvents header that is not UTF-8, a value framed for a schema
 * registry, a type no definition declares) produced beside ordinary
 * events on the real broker. `steward run` records each in
 * steward.rejected with its reason and logs the summary
 * (intake.rejection_summary) naming every reason, the topic and a sample
 * detail; `steward backtest` over the same topic prints every reason too.
 *
 * With the setting's combinations: two versions of the definition loaded,
 * a step deadline that fires while the summaries are logged, and a
 * restart, after which the next summary counts only what came after it.
 * (The Avro reasons are in test_avro.c; database_refused in test_poison.c.)
 */
#include "testlib.h"

#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char definition_template[] =
    "{\"process\":\"rejections\",\"version\":%d,\"mode\":\"shadow\",\"owner\":\"fulfilment\","
    "\"key\":\"/order_id\",\"envelope\":{\"time\":\"/at\"},\"deadline\":\"10d\","
    "\"events\":{\"OrderPlaced\":{\"topic\":\"%s\"},\"OrderShipped\":{\"topic\":\"%s\"}},"
    "\"start\":{\"on\":\"OrderPlaced\",\"to\":\"open\"},"
    "\"states\":{\"open\":{\"deadline\":\"%s\",\"on\":{\"OrderShipped\":\"done\"}},"
    "\"done\":{\"terminal\":\"success\"}}}";

/* The reasons the messages below are rejected for, in the order produced. */
static const char *const reasons[] = {
    "tombstone",
    "too_large",
    "invalid_utf8",
    "invalid_json",
    "too_deep",
    "not_an_object",
    "unsupported_specversion",
    "invalid_cloudevent",
    "unsupported_data",
    "missing_type",
    "missing_key",
    "invalid_key",
    "invalid_time",
    "invalid_id",
    "invalid_header",
    "schema_registry_format",
    "unknown_type",
};
#define N_REASONS (sizeof reasons / sizeof reasons[0])

static void produce_bad(tl_producer_t *p, const char *topic)
{
    char big[5000], deep[800] = "", id[1200];
    int n = snprintf(big, sizeof big, "{\"type\":\"OrderPlaced\",\"order_id\":\"big\",\"pad\":\"");
    memset(big + n, 'x', sizeof big - (size_t) n - 3);
    memcpy(big + sizeof big - 3, "\"}", 3);
    for (int i = 0; i < 70; i++)
        strcat(deep, "{\"a\":");
    strcat(deep, "1");
    for (int i = 0; i < 70; i++)
        strcat(deep, "}");
    memset(id, 'i', sizeof id - 1);
    id[sizeof id - 1] = '\0';
    char long_id[1400];
    snprintf(long_id, sizeof long_id,
             "{\"type\":\"OrderPlaced\",\"order_id\":\"k3\",\"id\":\"%s\"}", id);
    const char framed[] = "\0\0\0\0\7{\"type\":\"OrderPlaced\",\"order_id\":\"k6\"}";
    const char *ce2[] = {"ce_specversion", "2.0", "ce_type", "OrderPlaced", "ce_id", "c1",
                         "ce_source",      "/t",  NULL};
    const char *ce_no_id[] = {"ce_specversion", "1.0", "ce_type", "OrderPlaced", NULL};
    const char *ce_text[] = {"ce_specversion", "1.0", "ce_type",      "OrderPlaced", "ce_id", "c3",
                             "ce_source",      "/t",  "content-type", "text/plain",  NULL};
    const char *ce_bad_header[] = {"ce_specversion", "1.0",      "ce_type",
                                   "OrderPlaced",    "ce_id",    "c2",
                                   "ce_source",      "/bad\xff", NULL};

    tl_produce(p, topic, 0, NULL, 0, NULL, 0);
    tl_produce(p, topic, 0, big, sizeof big - 1, NULL, 0);
    tl_produce(p, topic, 0, "{\"type\":\"OrderPlaced\",\"order_id\":\"\xff\"}", -1, NULL, 0);
    tl_produce(p, topic, 0, "{not json", -1, NULL, 0);
    tl_produce(p, topic, 0, deep, -1, NULL, 0);
    tl_produce(p, topic, 0, "[1,2]", -1, NULL, 0);
    tl_produce(p, topic, 0, "{\"order_id\":\"k0\"}", -1, ce2, 0);
    tl_produce(p, topic, 0, "{\"order_id\":\"k0\"}", -1, ce_no_id, 0);
    tl_produce(p, topic, 0, "k9 was placed", -1, ce_text, 0);
    tl_produce(p, topic, 0, "{\"order_id\":\"k1\"}", -1, NULL, 0);
    tl_produce(p, topic, 0, "{\"type\":\"OrderPlaced\"}", -1, NULL, 0);
    tl_produce(p, topic, 0, "{\"type\":\"OrderPlaced\",\"order_id\":1.5}", -1, NULL, 0);
    tl_produce(p, topic, 0, "{\"type\":\"OrderPlaced\",\"order_id\":\"k2\",\"at\":\"yesterday\"}",
               -1, NULL, 0);
    tl_produce(p, topic, 0, long_id, -1, NULL, 0);
    tl_produce(p, topic, 0, "{\"order_id\":\"k4\"}", -1, ce_bad_header, 0);
    tl_produce(p, topic, 0, framed, sizeof framed - 1, NULL, 0);
    tl_produce(p, topic, 0, "{\"type\":\"OrderCancelled\",\"order_id\":\"k5\"}", -1, NULL, 0);
}

/* The log's lines holding the summary, joined. */
static char *summaries(const char *log_path)
{
    char *log = tl_read_file(log_path), *out = calloc(1, strlen(log) + 1);
    for (char *line = strtok(log, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        if (strstr(line, "messages rejected since the last summary") != NULL) {
            strcat(out, line);
            strcat(out, "\n");
        }
    }
    free(log);
    return out;
}

static int spawn_run(const char *url, const char *dir, const char *group, const char *log)
{
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
                          "intake.max_message_bytes=4096",
                          "--set",
                          "intake.rejection_summary=1s",
                          "--set",
                          "scheduler.interval=200ms",
                          "--set",
                          "scheduler.grace=0s",
                          NULL};
    return tl_steward_spawn(argv, NULL, log);
}

START_TEST(every_rejection_is_summarised_by_run_and_backtest)
{
    char *topic = tl_unique("rejections.");
    const char *topics[1] = {topic};
    tl_kafka_create_topics(topics, 1, 1);
    char *dir = strdup(tl_tmpdir()), definition[2048];
    snprintf(definition, sizeof definition, definition_template, 1, topic, topic, "1h");
    free(tl_write_file(dir, "rejections_v1.json", definition));
    snprintf(definition, sizeof definition, definition_template, 2, topic, topic, "2s");
    char *v2_path = tl_write_file(dir, "rejections_v2.json", definition);
    const char *url = tl_db_create("rejections");
    tl_migrate(url);
    PGconn *conn = tl_db_connect(url);

    /* An order that stalls in open past version 2's 2 s deadline, the bad
     * messages, and an order that completes. */
    char at[64];
    long long now_ms = (long long) time(NULL) * 1000;
    tl_producer_t *p = tl_producer_new();
    snprintf(at, sizeof at, "{\"type\":\"OrderPlaced\",\"order_id\":\"S1\",\"at\":%lld}", now_ms);
    tl_produce(p, topic, 0, at, -1, NULL, 0);
    produce_bad(p, topic);
    snprintf(at, sizeof at, "{\"type\":\"OrderPlaced\",\"order_id\":\"G1\",\"at\":%lld}", now_ms);
    tl_produce(p, topic, 0, at, -1, NULL, 0);
    snprintf(at, sizeof at, "{\"type\":\"OrderShipped\",\"order_id\":\"G1\",\"at\":%lld}", now_ms);
    tl_produce(p, topic, 0, at, -1, NULL, 0);
    tl_producer_free(p);

    char *group = tl_unique("rejections");
    char *log = tl_write_file(tl_tmpdir(), "rejections.log", "");
    int pid = spawn_run(url, dir, group, log);
    char want[16];
    snprintf(want, sizeof want, "%zu", N_REASONS + 3);
    const char *params[1] = {group};
    char *last = NULL;
    if (!tl_db_wait(conn,
                    "SELECT coalesce(sum(next_offset), 0) FROM steward.offsets "
                    "WHERE consumer_group = $1 AND next_offset >= 0",
                    1, params, want, 60, &last)) {
        tl_print_tail(log, 4000);
        ck_abort_msg("committed %s of %s messages (the log above)", last, want);
    }
    char *rows = tl_db_scalar(
        conn, "SELECT string_agg(reason, ',' ORDER BY \"offset\") FROM steward.rejected", 0, NULL);
    char expected[1024] = "";
    for (size_t i = 0; i < N_REASONS; i++) {
        strcat(expected, i ? "," : "");
        strcat(expected, reasons[i]);
    }
    ck_assert_str_eq(rows, expected);
    free(rows);
    /* Steward's limit, said as such: the content type, not a JSON error. */
    char *text = tl_db_scalar(
        conn, "SELECT detail FROM steward.rejected WHERE reason = 'unsupported_data'", 0, NULL);
    ck_assert_str_eq(text, "binary-mode CloudEvent's content-type \"text/plain\" (its "
                           "datacontenttype) is not JSON: Steward reads JSON data only "
                           "(application/json or a +json type)");
    free(text);

    /* The summary: every reason, the topic, a sample detail. */
    tl_wait_file(log, "messages rejected since the last summary", 30);
    char *sum = summaries(log);
    char count[64];
    snprintf(count, sizeof count, "\"rejected\":\"%zu\"", N_REASONS);
    ck_assert_msg(tl_contains(sum, count), "not one summary of %zu: %s", N_REASONS, sum);
    for (size_t i = 0; i < N_REASONS; i++) {
        char term[80];
        snprintf(term, sizeof term, "%s %s 1", topic, reasons[i]);
        ck_assert_msg(tl_contains(sum, term), "the summary lacks %s: %s", term, sum);
    }
    ck_assert_msg(tl_contains(sum, "e.g. invalid JSON") || tl_contains(sum, "e.g. "), "%s", sum);
    free(sum);

    /* The deadline fired meanwhile: version 2's 2 s on S1. */
    ck_assert_msg(tl_db_wait(conn,
                             "SELECT count(*) FROM steward.alerts WHERE key = 'S1' AND kind = "
                             "'deadline' AND resolved_at IS NULL",
                             0, NULL, "1", 30, NULL),
                  "S1's deadline alert");
    ck_assert_int_eq(tl_stop(pid, SIGTERM, 30), 0);

    /* After a restart, the next summary counts what came after it alone. */
    p = tl_producer_new();
    tl_produce(p, topic, 0, "{\"order_id\":\"k7\"}", -1, NULL, 0);
    tl_produce(p, topic, 0, "{\"order_id\":\"k8\"}", -1, NULL, 0);
    tl_producer_free(p);
    char *log2 = tl_write_file(tl_tmpdir(), "rejections2.log", "");
    pid = spawn_run(url, dir, group, log2);
    tl_wait_file(log2, "messages rejected since the last summary", 30);
    sum = summaries(log2);
    ck_assert_msg(tl_contains(sum, "\"rejected\":\"2\"") &&
                      tl_contains(sum, "\"by_reason\":\"missing_type 2\""),
                  "after the restart: %s", sum);
    free(sum);
    ck_assert_int_eq(tl_stop(pid, SIGTERM, 30), 0);

    /* steward backtest over the same topic, with the same intake settings. */
    const char *bt_argv[] = {NULL,
                             "backtest",
                             "--definition",
                             v2_path,
                             "--from",
                             "1h",
                             "--brokers",
                             tl_kafka_brokers(),
                             "--database",
                             url,
                             "--set",
                             "intake.record_unknown=true",
                             "--set",
                             "intake.max_message_bytes=4096",
                             NULL};
    tl_output_t o = tl_steward(bt_argv, NULL);
    ck_assert_msg(o.status == 0, "backtest exited %d: %s", o.status, o.err);
    char total[64];
    snprintf(total, sizeof total, "messages rejected: %zu (", N_REASONS + 2);
    ck_assert_msg(tl_contains(o.out, total), "%s", o.out);
    for (size_t i = 0; i < N_REASONS; i++) {
        char term[80];
        snprintf(term, sizeof term, "%s %d", reasons[i],
                 strcmp(reasons[i], "missing_type") ? 1 : 3);
        ck_assert_msg(tl_contains(o.out, term), "backtest lacks %s:\n%s", term, o.out);
    }
    tl_output_free(&o);

    PQfinish(conn);
    free(log);
    free(log2);
    free(group);
    free(v2_path);
    free(dir);
    free(topic);
}
END_TEST

Suite *rejections_suite(void)
{
    Suite *s = suite_create("rejections");
    TCase *tc = tcase_create("rejections");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, every_rejection_is_summarised_by_run_and_backtest);
    suite_add_tcase(s, tc);
    return s;
}
