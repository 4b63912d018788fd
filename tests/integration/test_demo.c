/*
 * test_demo - the demo's own check, as a test: steward demo runs the
 * simulator's six-service traffic with stalls through steward and compares
 * every alert with the ground truth, on the embedded mock cluster and on
 * the real broker; and in active mode, where the simulator's services
 * answer steward's commands with faults and the check compares steward's
 * record (instances, pages, the command outbox, stale replies) with the
 * simulator's ground truth.
 */
#include "testlib.h"

#include <check.h>
#include <jansson.h>
#include <librdkafka/rdkafka.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/*
 * Fails the test over a demo that did not do what `what` says, with what
 * it printed and the tail of steward's log (a failed demo keeps it) on
 * stderr: check's own message cannot hold that much.
 */
static void demo_failed(const tl_output_t *o, const char *what)
{
    static const char kept[] = "steward's log and the ground truth are in ";
    size_t out_len = strlen(o->out), err_len = strlen(o->err);
    fprintf(stderr, "== steward demo: %s (exit %d)\n== its stdout, the last 16000 bytes:\n%s\n",
            what, o->status, o->out + (out_len > 16000 ? out_len - 16000 : 0));
    fprintf(stderr, "== its stderr, the last 8000 bytes:\n%s\n",
            o->err + (err_len > 8000 ? err_len - 8000 : 0));
    const char *dir = strstr(o->out, kept);
    if (dir != NULL) {
        char log[512];
        dir += strlen(kept);
        snprintf(log, sizeof log, "%.*s/steward.log", (int) strcspn(dir, "\n"), dir);
        fprintf(stderr, "== %s, the last 20000 bytes:\n", log);
        tl_print_tail(log, 20000);
    }
    ck_abort_msg("steward demo: %s (its output is above)", what);
}

static void run_demo(const char *brokers)
{
    const char *url = tl_db_create(brokers != NULL ? "demo_broker" : "demo_mock");
    /* Seed 7 stalls a handful of the 120 orders, at several steps. */
    const char *argv[] = {NULL,
                          "demo",
                          "--database",
                          url,
                          "--orders",
                          "120",
                          "--rate",
                          "40",
                          "--seed",
                          "7",
                          "--stall-rate",
                          "0.05",
                          brokers != NULL ? "--brokers" : NULL,
                          brokers,
                          NULL};
    tl_output_t o = tl_steward(argv, NULL);
    if (o.status != 0)
        demo_failed(&o, "it did not exit 0");
    if (!tl_contains(o.out, "0 missed; 0 alerts for orders that did not stall") ||
        !tl_contains(o.out, "every stalled order was alerted at the right step"))
        demo_failed(&o, "the alerts did not match the ground truth");
    if (tl_contains(o.out, "ground truth: 0 orders stalled"))
        demo_failed(&o, "no order stalled: the check proved nothing");
    if (!tl_contains(o.out, "ALERT  order_fulfilment"))
        demo_failed(&o, "no alert printed");
    tl_output_free(&o);
}

/*
 * 48 orders: every 4th has a fault, and the 12 faulty ones cover the whole
 * rotation of the active demo definition once (a dropped first command on
 * each retried step, a silent service on each commanded step, the zombie
 * picker), so the run shows a retry winning, on_timeout into compensation,
 * pages where nothing is left to try, and one stale reply.
 */
static void run_active_demo(const char *brokers)
{
    const char *url = tl_db_create(brokers != NULL ? "demo_active_broker" : "demo_active_mock");
    const char *argv[] = {NULL,    "demo",     "--active", "--database",
                          url,     "--orders", "48",       "--rate",
                          "24",    "--seed",   "11",       brokers != NULL ? "--brokers" : NULL,
                          brokers, NULL};
    tl_output_t o = tl_steward(argv, NULL);
    if (o.status != 0)
        demo_failed(&o, "--active did not exit 0");
    if (!tl_contains(o.out, "every order ended where its faults lead or paged the step "
                            "that never answered"))
        demo_failed(&o, "--active: steward's record did not match the ground truth");
    if (!tl_contains(o.out, "ground truth (active): 48 orders") ||
        !tl_contains(o.out, "0 ended elsewhere, 0 pages missed, 0 paged needlessly") ||
        !tl_contains(o.out, " 0 under two ids, 0 not under the derived id") ||
        !tl_contains(o.out, "0 not recorded as stale"))
        demo_failed(&o, "--active: the verdict's figures are not all zero");
    /* The faults were reached: the check proved something. */
    if (tl_contains(o.out, " 0 paged at the step") || tl_contains(o.out, "stale replies: 0 sent") ||
        !tl_contains(o.out, "1 zombie pickers"))
        demo_failed(&o, "--active: a fault never fired");
    tl_output_free(&o);
}

/* ---- the responder alone, against the broker ------------------------------- */

/* How many lines of `path` contain `needle`. */
static int count_lines(const char *path, const char *needle)
{
    FILE *f = fopen(path, "r");
    char line[4096];
    int n = 0;
    while (f != NULL && fgets(line, sizeof line, f) != NULL)
        n += strstr(line, needle) != NULL;
    if (f != NULL)
        fclose(f);
    return n;
}

typedef struct lines {
    const char *path, *needle;
    int want;
} lines_t;

static bool enough_lines(void *arg, char *seen, size_t seen_size)
{
    const lines_t *l = arg;
    int n = count_lines(l->path, l->needle);
    snprintf(seen, seen_size, "%d lines with it", n);
    return n >= l->want;
}

static void wait_lines(const char *path, const char *needle, int want, int timeout_s)
{
    char what[512];
    snprintf(what, sizeof what, "%d lines with %s in %s", want, needle, path);
    tl_wait_until(enough_lines, &(lines_t){path, needle, want}, timeout_s, what, NULL);
}

/* A command as the contract says the dispatcher produces it. */
static void produce_command(const char *topic, const char *type, const char *state, const char *key,
                            const char *step, const char *attempt, const char *token)
{
    char id[80];
    snprintf(id, sizeof id, "test-%s-%s-%s", key, step, attempt);
    const char *headers[] = {"ce_specversion",
                             "1.0",
                             "ce_id",
                             id,
                             "ce_source",
                             "steward/order_fulfilment",
                             "ce_type",
                             type,
                             "ce_stewardprocess",
                             "order_fulfilment",
                             "ce_stewardkey",
                             key,
                             "ce_stewardstate",
                             state,
                             "ce_stewardstep",
                             step,
                             "ce_stewardattempt",
                             attempt,
                             "ce_stewardtoken",
                             token,
                             NULL};
    char value[128];
    snprintf(value, sizeof value, "{\"order_id\":\"%s\"}", key);
    /* Keyed, as the dispatcher keys by instance: tl_produce() sends no key. */
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    char err[256];
    rd_kafka_conf_set(conf, "bootstrap.servers", tl_kafka_brokers(), err, sizeof err);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    ck_assert_msg(rk != NULL, "%s", err);
    rd_kafka_headers_t *hdrs = rd_kafka_headers_new(10);
    for (int i = 0; headers[i] != NULL; i += 2)
        rd_kafka_header_add(hdrs, headers[i], -1, headers[i + 1], -1);
    ck_assert_int_eq(rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(topic),
                                       RD_KAFKA_V_KEY(key, strlen(key)),
                                       RD_KAFKA_V_VALUE(value, strlen(value)),
                                       RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                       RD_KAFKA_V_HEADERS(hdrs), RD_KAFKA_V_END),
                     RD_KAFKA_RESP_ERR_NO_ERROR);
    ck_assert_int_eq(rd_kafka_flush(rk, 10000), RD_KAFKA_RESP_ERR_NO_ERROR);
    rd_kafka_destroy(rk);
}

/* Reads `topic` from the start until `want` messages for `key` have come,
 * the last of them of type `until` when that is not NULL (30 s at most);
 * returns their values as a JSON array (new reference). */
static json_t *read_replies(const char *topic, const char *key, size_t want, const char *until)
{
    char err[256];
    char *group = tl_unique("test-demo-replies"); /* a group of its own: from the start */
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "bootstrap.servers", tl_kafka_brokers(), err, sizeof err);
    rd_kafka_conf_set(conf, "group.id", group, err, sizeof err);
    free(group);
    rd_kafka_conf_set(conf, "auto.offset.reset", "earliest", err, sizeof err);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
    ck_assert_msg(rk != NULL, "%s", err);
    rd_kafka_poll_set_consumer(rk);
    rd_kafka_topic_partition_list_t *topics = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(topics, topic, RD_KAFKA_PARTITION_UA);
    rd_kafka_subscribe(rk, topics);
    rd_kafka_topic_partition_list_destroy(topics);
    json_t *out = json_array();
    const char *last_type = NULL;
    for (int i = 0; i < 300; i++) {
        if (json_array_size(out) >= want &&
            (until == NULL || (last_type != NULL && strcmp(last_type, until) == 0)))
            break;
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 100);
        if (m == NULL)
            continue;
        if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR && m->key_len == strlen(key) &&
            memcmp(m->key, key, m->key_len) == 0) {
            json_array_append_new(out, json_loadb(m->payload, m->len, 0, NULL));
            last_type = json_string_value(
                json_object_get(json_array_get(out, json_array_size(out) - 1), "type"));
        }
        rd_kafka_message_destroy(m);
    }
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    ck_assert_msg(json_array_size(out) >= want &&
                      (until == NULL || (last_type != NULL && strcmp(last_type, until) == 0)),
                  "%zu of %zu replies for %s on %s (the last a %s?)", json_array_size(out), want,
                  key, topic, until ? until : "any");
    return out;
}

static const char *member(json_t *arr, size_t i, const char *name)
{
    return json_string_value(json_object_get(json_array_get(arr, i), name));
}

static long long token_of(json_t *arr, size_t i)
{
    return json_integer_value(json_object_get(json_array_get(arr, i), "steward_token"));
}

/*
 * steward-sim --active on the broker, with this test standing in for
 * steward's dispatcher: the orders are placed, a dropped first command is
 * answered on its re-send only, and the zombie picker's late answer after
 * the hand-off carries its old token and is recorded in the ground truth as
 * a stale reply. Runs without steward's active mode.
 */
START_TEST(responder_answers_commands_on_the_broker)
{
    char *prefix = tl_unique("resp");
    char topic_prefix[128];
    snprintf(topic_prefix, sizeof topic_prefix, "%s.", prefix);
    char *definition = tl_source_path("definitions/demo/order_fulfilment_active.json");
    char truth[512];
    snprintf(truth, sizeof truth, "%s/responder-truth.jsonl", tl_tmpdir());
    /* Seed 42: keys ord-2a-N. Order 3 drops its first CapturePayment; order
     * 27 has the zombie picker (the 7th fault of the rotation). */
    const char *argv[] = {STEWARD_SIM_BINARY, "--active", "--brokers",      tl_kafka_brokers(),
                          "--definition",     definition, "--topic-prefix", topic_prefix,
                          "--orders",         "28",       "--rate",         "200",
                          "--seed",           "42",       "--time-scale",   "0.00002",
                          "--deadline-scale", "1",        "--linger",       "120",
                          "--ground-truth",   truth,      "--quiet",        NULL};
    pid_t pid;
    ck_assert_int_eq(posix_spawn(&pid, argv[0], NULL, NULL, (char *const *) argv, environ), 0);

    wait_lines(truth, "\"fault\"", 28, 60);
    ck_assert_int_eq(count_lines(truth, "\"order_id\":\"ord-2a-3\",\"fault\":\"drop_first\""), 1);
    ck_assert_int_eq(count_lines(truth, "\"order_id\":\"ord-2a-27\",\"fault\":\"zombie\""), 1);

    char payments[160], shipping[160], pay_cmds[160], ship_cmds[160];
    snprintf(payments, sizeof payments, "%spayments", topic_prefix);
    snprintf(shipping, sizeof shipping, "%sshipping", topic_prefix);
    snprintf(pay_cmds, sizeof pay_cmds, "%spayment-commands", topic_prefix);
    snprintf(ship_cmds, sizeof ship_cmds, "%sshipping-commands", topic_prefix);

    /* The dropped first command: only attempt 1 is answered, echoing its token. */
    produce_command(pay_cmds, "CapturePayment", "awaiting_payment", "ord-2a-3", "1", "0", "1");
    produce_command(pay_cmds, "CapturePayment", "awaiting_payment", "ord-2a-3", "1", "1", "2");
    json_t *r = read_replies(payments, "ord-2a-3", 1, NULL);
    ck_assert_str_eq(member(r, 0, "type"), "PaymentCaptured");
    ck_assert_int_eq(token_of(r, 0), 2);
    ck_assert_str_eq(member(r, 0, "id"), "evt-2a-3-s1a1-0");
    json_decref(r);

    /* The zombie: a claim and one heartbeat for token 3; after the hand-off
     * (token 4) its late dispatch with token 3, then the new picker's claim
     * and dispatch with token 4. */
    produce_command(ship_cmds, "DispatchShipment", "awaiting_dispatch", "ord-2a-27", "3", "0", "3");
    r = read_replies(shipping, "ord-2a-27", 2, NULL);
    ck_assert_str_eq(member(r, 0, "type"), "PickStarted");
    ck_assert_str_eq(member(r, 0, "worker_id"), "picker-27-0");
    ck_assert_str_eq(member(r, 1, "type"), "PickHeartbeat");
    json_decref(r);
    produce_command(ship_cmds, "DispatchShipment", "awaiting_dispatch", "ord-2a-27", "3", "1", "4");
    wait_lines(truth, "\"stale_reply\"", 1, 30);
    r = read_replies(shipping, "ord-2a-27", 5, "ShipmentDispatched");
    ck_assert_str_eq(member(r, 2, "type"), "ShipmentDispatched");
    ck_assert_int_eq(token_of(r, 2), 3);
    ck_assert_str_eq(member(r, 3, "type"), "PickStarted");
    ck_assert_str_eq(member(r, 3, "worker_id"), "picker-27-1");
    ck_assert_int_eq(token_of(r, 3), 4);
    size_t last = json_array_size(r) - 1;
    ck_assert_int_eq(token_of(r, last), 4); /* the new picker's dispatch moves the order */
    for (size_t i = 4; i < last; i++)
        ck_assert_str_eq(member(r, i, "type"), "PickHeartbeat");
    json_decref(r);
    ck_assert_int_eq(count_lines(truth, "\"stale_reply\":{\"order_id\":\"ord-2a-27\","
                                        "\"event_id\":\"evt-2a-27-s3a1-0\""),
                     1);

    /* SIGTERM ends it cleanly, with every command and the summary recorded. */
    kill(pid, SIGTERM);
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "steward-sim exited %d", status);
    ck_assert_int_eq(count_lines(truth, "\"command\":"), 4);
    ck_assert_int_eq(count_lines(truth, "\"summary\":{\"mode\":\"active\",\"orders\":28,"
                                        "\"commands\":4"),
                     1);
    free(definition);
    free(prefix);
}
END_TEST

START_TEST(demo_on_the_mock_cluster_matches_its_ground_truth)
{
    run_demo(NULL);
}
END_TEST

START_TEST(demo_on_the_real_broker_matches_its_ground_truth)
{
    run_demo(tl_kafka_brokers());
}
END_TEST

START_TEST(active_demo_on_the_mock_cluster_matches_its_ground_truth)
{
    run_active_demo(NULL);
}
END_TEST

START_TEST(active_demo_on_the_real_broker_matches_its_ground_truth)
{
    run_active_demo(tl_kafka_brokers());
}
END_TEST

Suite *demo_suite(void)
{
    Suite *s = suite_create("demo");
    TCase *tc = tcase_create("demo");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, demo_on_the_mock_cluster_matches_its_ground_truth);
    tcase_add_test(tc, demo_on_the_real_broker_matches_its_ground_truth);
    suite_add_tcase(s, tc);
    /* Active mode in cases of their own: CK_RUN_CASE=demo, =responder or
     * =active picks one. The responder's runs without steward's active mode. */
    TCase *responder = tcase_create("responder");
    tcase_set_timeout(responder, 120);
    tcase_add_test(responder, responder_answers_commands_on_the_broker);
    suite_add_tcase(s, responder);
    TCase *active = tcase_create("active");
    tcase_set_timeout(active, 300);
    tcase_add_test(active, active_demo_on_the_mock_cluster_matches_its_ground_truth);
    tcase_add_test(active, active_demo_on_the_real_broker_matches_its_ground_truth);
    suite_add_tcase(s, active);
    return s;
}
