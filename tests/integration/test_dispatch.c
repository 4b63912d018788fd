/*
 * test_dispatch - the dispatcher delivers steward.commands to a real broker.
 *
 * The rows are inserted here as the core's batch would queue them (same
 * columns, ce_id derived the same way), so these tests see the dispatcher
 * alone:
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
 *   producer_config_refused a `kafka` property the idempotent producer
 *                          refuses: exit 2 naming it
 *   retention_keeps_unsent `steward prune` removes old sent or cancelled commands only
 *   crash_frees_claims_fast SIGKILL while the broker is down and rows are
 *                          claimed (their messages in librdkafka's queue):
 *                          after a restart every command, and each
 *                          instance's next one queued behind it, is on the
 *                          topic within a few leases, not a delivery
 *                          timeout later (librdkafka's mock cluster)
 *   crash_then_answered    active end to end: orders whose commands were
 *                          claimed when steward was SIGKILLed (broker
 *                          down) are commanded soon after the restart; the
 *                          service answers each, and none takes on_timeout
 *                          (mock cluster)
 *   renewed_not_shared     two replicas, the broker down for several leases:
 *                          the dispatcher holding the rows renews their
 *                          leases, so the other never claims them; when
 *                          the broker returns each command is produced
 *                          once (mock cluster)
 *   cloudevents_sdk_reads_a_command  a command read off the topic goes
 *                          through the JavaScript CloudEvents SDK's Kafka
 *                          binding (tests/sdk/, installed by npm from its
 *                          lockfile): a valid event with the type, source,
 *                          id, idempotency key and the payload as an object
 *   cancelled_never_sent   rows claimed while the broker is down, then
 *                          cancelled (their instances finished): they are
 *                          taken back from the producer, and when the
 *                          broker returns none of them is produced; no row
 *                          is both sent and cancelled (mock cluster)
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
#include "testlib.h"
#include "world.h"

#include <check.h>
#include <jansson.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PROCESS "dp_order"

static tw_world_t w;
static char *events_topic;
static char *defs_dir; /* dir/defs: only definitions, as steward reads every file */
static char *config;   /* a config file a test wrote; NULL: none */

static const char definition_template[] =
    "{\"process\":\"" PROCESS "\",\"version\":1,\"mode\":\"shadow\",\"owner\":\"fulfilment\","
    "\"key\":\"/order_id\",\"events\":{\"OrderPlaced\":{\"topic\":\"%s\"},"
    "\"OrderShipped\":{\"topic\":\"%s\"}},"
    "\"start\":{\"on\":\"OrderPlaced\",\"to\":\"placed\"},"
    "\"states\":{\"placed\":{\"deadline\":\"1h\",\"on\":{\"OrderShipped\":\"done\"}},"
    "\"done\":{\"terminal\":\"success\"}}}";

/* A database, a definition whose event topic exists, a group. */
static void setup_named(const char *name)
{
    tw_init(&w, name);
    tw_migrate(&w);
    events_topic = tl_unique("dispatch.events.");
    const char *topics[1] = {events_topic};
    tl_kafka_create_topics(topics, 1, 1);
    char definition[2048];
    snprintf(definition, sizeof definition, definition_template, events_topic, events_topic);
    ck_assert_int_ge(asprintf(&defs_dir, "%s/defs", w.dir), 0);
    ck_assert_int_eq(mkdir(defs_dir, 0755), 0);
    free(tl_write_file(defs_dir, "dp_order.json", definition));
}

static const char *brokers;                             /* NULL: the test broker */
static const char *timeout_set = "dispatch.timeout=2s"; /* a test may want librdkafka's wait long */
static rd_kafka_t *mock_owner;
static rd_kafka_mock_cluster_t *mock;

static void teardown(void)
{
    tw_teardown(&w);
    if (mock != NULL)
        rd_kafka_mock_cluster_destroy(mock);
    if (mock_owner != NULL)
        rd_kafka_destroy(mock_owner);
    mock = NULL;
    mock_owner = NULL;
    brokers = NULL;
    timeout_set = "dispatch.timeout=2s";
    free(events_topic);
    free(defs_dir);
    free(config);
    events_topic = defs_dir = config = NULL;
}

/* Starts steward with short delivery timeouts and backoffs, its HTTP
 * server on `listen` ("" for none). */

static int start_on(const char *listen)
{
    char listen_set[64];
    snprintf(listen_set, sizeof listen_set, "http.listen=%s", listen);
    const char *argv[] = {NULL, "run", "--brokers", brokers != NULL ? brokers : tl_kafka_brokers(),
                          "--database", w.db_url, "--definitions", defs_dir, "--group", w.group,
                          "--config", config != NULL ? config : "", "--set", listen_set, "--set",
                          timeout_set, "--set", "dispatch.lease=2s", "--set",
                          "dispatch.max_backoff=1s", "--set", "dispatch.batch_size=50", "--set",
                          "retention.interval=off",
                          /* A missing topic is known for missing after this long. */
                          "--kafka", "topic.metadata.propagation.max.ms=1000", "--kafka",
                          "session.timeout.ms=6000", "--kafka", "heartbeat.interval.ms=1000", NULL};
    return tl_steward_spawn(argv, NULL, w.log);
}

static int start(void)
{
    return start_on("");
}

/* The base URL of steward's HTTP server, from its "http listening" line. */
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

static long long scalar_ll(const char *sql)
{
    return tw_scalar_long(&w, sql, NULL);
}

static void wait_for(const char *sql, const char *expected, int timeout_s)
{
    tw_wait(&w, sql, NULL, expected, timeout_s, sql);
}

/*
 * Queues `n` commands per key for keys K0001..K<keys>, step by step across
 * the keys (the order a busy system would queue them), as the core does:
 * step s, attempt 0, token s, ce_id the SHA-256 of process, key, step and
 * attempt joined by \x1f.
 */
static void add_commands(const char *process, const char *topic, int keys, int n)
{
    char k[16], s[16];
    snprintf(k, sizeof k, "%d", keys);
    snprintf(s, sizeof s, "%d", n);
    const char *params[4] = {process, topic, k, s};
    PGresult *res = PQexecParams(
        w.conn,
        "INSERT INTO steward.commands (process, key, version, state, step, attempt, token, topic, "
        "  type, payload, ce_id) "
        "SELECT $1, key, 1, 'state_' || s, s, 0, s, $2, 'DoStep', "
        "  jsonb_build_object('order_id', key, 'step', s, 'total', 12.5), "
        "  encode(sha256(convert_to($1 || chr(31) || key || chr(31) || s || chr(31) || 0, "
        "    'UTF8')), 'hex') "
        "FROM generate_series(1, $4::int) s, "
        "  LATERAL (SELECT 'K' || lpad(i::text, 4, '0') AS key "
        "           FROM generate_series(1, $3::int) i) k "
        "ORDER BY s, key",
        4, NULL, params, NULL, NULL, 0);
    ck_assert_msg(PQresultStatus(res) == PGRES_COMMAND_OK, "insert: %s", PQerrorMessage(w.conn));
    PQclear(res);
}

/* ---- reading the command topic ------------------------------------------------- */

typedef struct seen {
    char *key, *value, *ce_id;
    char *headers; /* "name=value\n..." in order */
    int partition;
} seen_t;

typedef struct seen_list {
    seen_t *items;
    size_t n;
} seen_list_t;

static void seen_free(seen_list_t *l)
{
    for (size_t i = 0; i < l->n; i++) {
        free(l->items[i].key);
        free(l->items[i].value);
        free(l->items[i].ce_id);
        free(l->items[i].headers);
    }
    free(l->items);
}

/* Every message on topic's partitions, up to their high watermarks now. */
static seen_list_t read_topic(const char *topic, int partitions)
{
    char kerr[512];
    seen_list_t out = {0};
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    char *group = tl_unique("dispatch.reader");
    ck_assert(rd_kafka_conf_set(conf, "bootstrap.servers",
                                brokers != NULL ? brokers : tl_kafka_brokers(), kerr,
                                sizeof kerr) == RD_KAFKA_CONF_OK);
    ck_assert(rd_kafka_conf_set(conf, "group.id", group, kerr, sizeof kerr) == RD_KAFKA_CONF_OK);
    ck_assert(rd_kafka_conf_set(conf, "isolation.level", "read_uncommitted", kerr, sizeof kerr) ==
              RD_KAFKA_CONF_OK);
    free(group);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, kerr, sizeof kerr);
    ck_assert_msg(rk != NULL, "consumer: %s", kerr);
    int64_t high[64];
    ck_assert(partitions <= 64);
    int left = 0;
    rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(partitions);
    for (int p = 0; p < partitions; p++) {
        int64_t low;
        rd_kafka_resp_err_t err =
            rd_kafka_query_watermark_offsets(rk, topic, p, &low, &high[p], 10000);
        ck_assert_msg(err == RD_KAFKA_RESP_ERR_NO_ERROR, "watermarks of %s: %s", topic,
                      rd_kafka_err2str(err));
        rd_kafka_topic_partition_list_add(list, topic, p)->offset = RD_KAFKA_OFFSET_BEGINNING;
        left += high[p] > 0;
    }
    ck_assert_int_eq(rd_kafka_assign(rk, list), RD_KAFKA_RESP_ERR_NO_ERROR);
    rd_kafka_topic_partition_list_destroy(list);
    size_t cap = 0;
    time_t until = time(NULL) + 60;
    while (left > 0 && time(NULL) < until) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 200);
        if (m == NULL)
            continue;
        if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
            rd_kafka_message_destroy(m);
            continue;
        }
        if (out.n == cap) {
            cap = cap > 0 ? cap * 2 : 256;
            out.items = realloc(out.items, cap * sizeof *out.items);
            ck_assert_ptr_nonnull(out.items);
        }
        seen_t *s = &out.items[out.n++];
        memset(s, 0, sizeof *s);
        s->partition = m->partition;
        s->key = strndup(m->key != NULL ? m->key : "", m->key_len);
        s->value = strndup(m->payload != NULL ? m->payload : "", m->len);
        rd_kafka_headers_t *hdrs = NULL;
        size_t len = 0;
        s->headers = calloc(1, 1);
        if (rd_kafka_message_headers(m, &hdrs) == RD_KAFKA_RESP_ERR_NO_ERROR) {
            const char *name;
            const void *value;
            size_t size;
            for (size_t i = 0; rd_kafka_header_get_all(hdrs, i, &name, &value, &size) ==
                               RD_KAFKA_RESP_ERR_NO_ERROR;
                 i++) {
                s->headers = realloc(s->headers, len + strlen(name) + size + 3);
                len += (size_t) sprintf(s->headers + len, "%s=%.*s\n", name, (int) size,
                                        (const char *) value);
                if (strcmp(name, "ce_id") == 0)
                    s->ce_id = strndup(value, size);
            }
        }
        if (m->offset + 1 >= high[m->partition])
            left--;
        rd_kafka_message_destroy(m);
    }
    ck_assert_msg(left == 0, "could not read %s to its end", topic);
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    return out;
}

/* The ce_ids in the order a reader first sees them for `key`, joined by ','. */
static char *first_seen_order(const seen_list_t *l, const char *key)
{
    size_t cap = 1, len = 0;
    char *out = calloc(1, 1);
    for (size_t i = 0; i < l->n; i++) {
        if (strcmp(l->items[i].key, key) != 0 || l->items[i].ce_id == NULL)
            continue;
        bool earlier = false;
        for (size_t j = 0; j < i && !earlier; j++)
            earlier = strcmp(l->items[j].key, key) == 0 && l->items[j].ce_id != NULL &&
                      strcmp(l->items[j].ce_id, l->items[i].ce_id) == 0;
        if (earlier)
            continue;
        cap += strlen(l->items[i].ce_id) + 1;
        out = realloc(out, cap);
        len += (size_t) sprintf(out + len, "%s%s", len > 0 ? "," : "", l->items[i].ce_id);
    }
    return out;
}

static char *row_order(const char *process, const char *key)
{
    const char *params[2] = {process, key};
    return tl_db_scalar(w.conn,
                        "SELECT coalesce(string_agg(ce_id, ',' ORDER BY id), '') "
                        "FROM steward.commands WHERE process = $1 AND key = $2",
                        2, params);
}

/* ---- the tests ----------------------------------------------------------------- */

START_TEST(headers_and_key)
{
    setup_named("dispatch_headers");
    char *topic = tl_unique("dispatch.cmd.");
    const char *topics[1] = {topic};
    tl_kafka_create_topics(topics, 1, 1);
    add_commands(PROCESS, topic, 2, 2); /* K0001 and K0002, steps 1 and 2 */
    /* A re-send: step 2's attempt 1, a new token. */
    const char *params[2] = {PROCESS, topic};
    PGresult *res = PQexecParams(
        w.conn,
        "INSERT INTO steward.commands (process, key, version, state, step, attempt, token, topic, "
        "  type, payload, ce_id, created_at) "
        "VALUES ($1, 'K0001', 1, 'state_2', 2, 1, 3, $2, 'DoStep', '{\"n\":[1,2]}', "
        "  encode(sha256(convert_to($1 || chr(31) || 'K0001' || chr(31) || 2 || chr(31) || 1, "
        "    'UTF8')), 'hex'), '2026-11-29T21:06:03.25Z')",
        2, NULL, params, NULL, NULL, 0);
    ck_assert_msg(PQresultStatus(res) == PGRES_COMMAND_OK, "%s", PQerrorMessage(w.conn));
    PQclear(res);

    int pid = start();
    wait_for("SELECT count(*) FROM steward.commands WHERE sent_at IS NOT NULL AND attempts = 1 "
             "AND last_error IS NULL",
             "5", 60);
    ck_assert_int_eq(tl_stop(pid, SIGTERM, 30), 0);

    seen_list_t got = read_topic(topic, 1);
    ck_assert_int_eq((int) got.n, 5);
    /* The re-send, whole: every header, in order, and nothing else. */
    const seen_t *last = &got.items[4];
    char *ce_id =
        tl_db_scalar(w.conn, "SELECT ce_id FROM steward.commands WHERE attempt = 1", 0, NULL);
    /* The step entry's key: the SHA-256 of process, key and step, the same
     * on step 2's first send and on its re-send. */
    char *idem = tl_db_scalar(w.conn,
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
        PGresult *r = PQexecParams(w.conn,
                                   "SELECT count(*) FROM steward.commands WHERE ce_id = $1 AND "
                                   "key = $2 AND payload = $3::jsonb",
                                   3, NULL, p3, NULL, NULL, 0);
        ck_assert_int_eq(PQresultStatus(r), PGRES_TUPLES_OK);
        ck_assert_str_eq(PQgetvalue(r, 0, 0), "1");
        PQclear(r);
        ck_assert(tl_contains(got.items[i].headers, "ce_stewardkey="));
    }
    /* One instance's commands in the order they were queued. */
    char *k1 = first_seen_order(&got, "K0001"), *r1 = row_order(PROCESS, "K0001");
    ck_assert_str_eq(k1, r1);
    free(k1);
    free(r1);
    free(ce_id);
    seen_free(&got);
    free(topic);
}
END_TEST

START_TEST(crash_once_per_id)
{
    setup_named("dispatch_crash");
    char *topic = tl_unique("dispatch.crash.");
    const char *topics[1] = {topic};
    tl_kafka_create_topics(topics, 1, 4);
    enum { KEYS = 200, STEPS = 10, ROWS = KEYS * STEPS };
    add_commands(PROCESS, topic, KEYS, STEPS);
    ck_assert_int_eq(scalar_ll("SELECT count(*) FROM steward.commands"), ROWS);

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
        int pid = start();
        long long at;
        while ((at = scalar_ll("SELECT count(*) FROM steward.commands WHERE sent_at IS NOT "
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
            at = scalar_ll("SELECT count(*) FROM steward.commands WHERE sent_at IS NOT NULL");
            if (on_topic > at)
                break;
        }
        ck_assert_int_eq(tl_stop(pid, SIGKILL, 10), 128 + SIGKILL);
        printf("dispatch crash: killed at %lld sent, %lld on the topic\n", at, on_topic);
        ck_assert_msg(at < ROWS, "the kill came after the end (%lld): no crash tested", at);
    }
    rd_kafka_destroy(probe);
    int pid = start();
    char rows[16];
    snprintf(rows, sizeof rows, "%d", ROWS);
    wait_for("SELECT count(*) FROM steward.commands WHERE sent_at IS NOT NULL", rows, 120);
    ck_assert_int_eq(tl_stop(pid, SIGTERM, 30), 0);

    seen_list_t got = read_topic(topic, 4);
    /* Copies are what a kill between acknowledgement and mark leaves; they
     * may or may not happen, and must carry their row's id when they do. */
    printf("dispatch crash: %zu messages for %d commands\n", got.n, ROWS);
    ck_assert_int_ge((int) got.n, ROWS);
    /* Every message is a row's, whole; every row was seen; copies share the id. */
    PGconn *c = w.conn;
    tl_db_exec(c, "CREATE TEMP TABLE seen (ce_id text, key text, value jsonb)");
    for (size_t i = 0; i < got.n; i++) {
        ck_assert_ptr_nonnull(got.items[i].ce_id);
        const char *p[3] = {got.items[i].ce_id, got.items[i].key, got.items[i].value};
        PGresult *r = PQexecParams(c, "INSERT INTO seen VALUES ($1, $2, $3::jsonb)", 3, NULL, p,
                                   NULL, NULL, 0);
        ck_assert_int_eq(PQresultStatus(r), PGRES_COMMAND_OK);
        PQclear(r);
    }
    ck_assert_int_eq(scalar_ll("SELECT count(*) FROM seen s WHERE NOT EXISTS (SELECT 1 FROM "
                               "steward.commands c WHERE c.ce_id = s.ce_id AND c.key = s.key "
                               "AND c.payload = s.value)"),
                     0);
    ck_assert_int_eq(scalar_ll("SELECT count(*) FROM steward.commands c WHERE NOT EXISTS "
                               "(SELECT 1 FROM seen s WHERE s.ce_id = c.ce_id)"),
                     0);
    ck_assert_int_eq(scalar_ll("SELECT count(DISTINCT ce_id) FROM seen"), ROWS);
    /* Each instance in order, re-sends included. */
    for (int i = 1; i <= KEYS; i += 7) {
        char key[16];
        snprintf(key, sizeof key, "K%04d", i);
        char *got_order = first_seen_order(&got, key), *want = row_order(PROCESS, key);
        ck_assert_str_eq(got_order, want);
        free(got_order);
        free(want);
    }
    seen_free(&got);
    free(topic);
}
END_TEST

START_TEST(missing_topic)
{
    setup_named("dispatch_missing");
    char *topic = tl_unique("dispatch.missing.");
    char *later = tl_unique("dispatch.later.");
    const char *later_topics[1] = {later};
    tl_kafka_create_topics(later_topics, 1, 1);
    add_commands(PROCESS, topic, 1, 3);
    /* The same instance's next command, to a topic that does exist: it
     * must not overtake the three before it. */
    const char *later_params[2] = {PROCESS, later};
    PGresult *res = PQexecParams(
        w.conn,
        "INSERT INTO steward.commands (process, key, version, state, step, attempt, token, topic, "
        "  type, payload, ce_id) "
        "VALUES ($1, 'K0001', 1, 'state_4', 4, 0, 4, $2, 'DoStep', '{}', "
        "  encode(sha256(convert_to($1 || chr(31) || 'K0001' || chr(31) || 4 || chr(31) || 0, "
        "    'UTF8')), 'hex'))",
        2, NULL, later_params, NULL, NULL, 0);
    ck_assert_msg(PQresultStatus(res) == PGRES_COMMAND_OK, "%s", PQerrorMessage(w.conn));
    PQclear(res);
    int pid = start();

    /* The failure is told: an alert naming process, topic and error. */
    wait_for("SELECT count(*) FROM steward.alerts WHERE kind = 'dispatch_failed' AND "
             "resolved_at IS NULL",
             "1", 60);
    const char *params[1] = {topic};
    char *summary = tl_db_scalar(w.conn,
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
    wait_for("SELECT count(*) FROM steward.commands WHERE attempts >= 2 AND last_error IS NOT NULL",
             "1", 60);
    ck_assert_int_eq(scalar_ll("SELECT count(*) FROM steward.commands WHERE sent_at IS NULL"), 4);
    ck_assert_int_eq(scalar_ll("SELECT count(*) FROM steward.alerts WHERE kind = "
                               "'dispatch_failed'"),
                     1);

    /* The topic appears: every command goes, in order; the alert resolves. */
    const char *topics[1] = {topic};
    tl_kafka_create_topics(topics, 1, 1);
    wait_for("SELECT count(*) FROM steward.commands WHERE sent_at IS NOT NULL", "4", 60);
    ck_assert_int_eq(scalar_ll("SELECT count(*) FROM steward.commands a JOIN steward.commands b "
                               "ON b.key = a.key AND b.id > a.id WHERE b.sent_at < a.sent_at"),
                     0);
    wait_for("SELECT count(*) FROM steward.alerts WHERE kind = 'dispatch_failed' AND "
             "resolved_at IS NOT NULL AND resolution = 'delivered'",
             "1", 30);
    ck_assert_int_eq(tl_stop(pid, SIGTERM, 30), 0);
    char *errors = tl_db_scalar(w.conn,
                                "SELECT count(*) FROM steward.commands WHERE topic = $1 AND "
                                "last_error IS NULL",
                                1, params);
    ck_assert_str_eq(errors, "3");
    free(errors);

    seen_list_t got = read_topic(topic, 1);
    ck_assert_int_eq((int) got.n, 3);
    char *order = first_seen_order(&got, "K0001");
    char *want = tl_db_scalar(w.conn,
                              "SELECT string_agg(ce_id, ',' ORDER BY id) FROM steward.commands "
                              "WHERE topic = $1",
                              1, params);
    ck_assert_str_eq(order, want);
    free(order);
    free(want);
    seen_free(&got);
    free(topic);
    free(later);
}
END_TEST

START_TEST(paused_then_resumed)
{
    setup_named("dispatch_paused");
    char *topic = tl_unique("dispatch.paused.");
    const char *topics[1] = {topic};
    tl_kafka_create_topics(topics, 1, 1);
    const char *dir = tl_tmpdir();
    config = tl_write_file(dir, "steward.json",
                           "{\"dispatch\": {\"paused\": [\"" PROCESS "\", \"dp_ordr\"]}}");
    add_commands(PROCESS, topic, 1, 5);
    add_commands("other_process", topic, 1, 1);
    int pid = start_on("127.0.0.1:0");
    char base[128];
    tl_wait_http_listening(w.log, base, sizeof base);

    /* The other process's command goes: the dispatcher is at work... */
    wait_for("SELECT count(*) FROM steward.commands WHERE process = 'other_process' AND sent_at "
             "IS NOT NULL",
             "1", 60);
    /* ...and has passed over the paused ones (claimed once, at most: the
     * same statement claimed the other's row and would have claimed these). */
    ck_assert_int_eq(scalar_ll("SELECT count(*) FROM steward.commands WHERE process = '" PROCESS
                               "' AND (sent_at IS NOT NULL OR attempts > 0)"),
                     0);
    /* The backlog is on /metrics. */
    wait_metric(base, "steward_commands_pending{process=\"" PROCESS "\"} 5\n");
    wait_metric(base, "steward_commands_sent_total 1\n");

    /* Lifted, by SIGHUP: they go, in order. The definitions reload is
     * refused (a broken file appeared), and the switch works all the same. */
    free(tl_write_file(dir, "steward.json", "{\"dispatch\": {\"paused\": []}}"));
    free(tl_write_file(defs_dir, "broken.json", "{\"process\": "));
    ck_assert_int_eq(kill(pid, SIGHUP), 0);
    wait_for("SELECT count(*) FROM steward.commands WHERE sent_at IS NOT NULL", "6", 60);
    wait_metric(base, "steward_commands_sent_total 6\n");
    ck_assert_int_eq(tl_stop(pid, SIGTERM, 30), 0);
    char *log = tl_read_file(w.log);
    ck_assert_msg(tl_contains(log, "command dispatch paused"), "no pause logged");
    ck_assert_msg(tl_contains(log, "command dispatch resumed"), "no resume logged");
    ck_assert_msg(tl_contains(log, "dispatch.paused names a process no loaded definition has") &&
                      tl_contains(log, "\"process\":\"dp_ordr\""),
                  "the typo was not reported");
    ck_assert_msg(tl_contains(log, "reload refused"), "the definitions were not refused");
    free(log);
    seen_list_t got = read_topic(topic, 1);
    ck_assert_int_eq((int) got.n, 6);
    ck_assert_str_eq(got.items[0].key, "K0001");
    ck_assert_msg(tl_contains(got.items[0].headers, "ce_stewardprocess=other_process"),
                  "the unpaused process's command goes first: %s", got.items[0].headers);
    char *order = first_seen_order(&got, "K0001"), *want = row_order(PROCESS, "K0001");
    /* first_seen_order mixes both processes' K0001: drop the other's id */
    char *other = row_order("other_process", "K0001");
    ck_assert(strncmp(order, other, strlen(other)) == 0);
    ck_assert_str_eq(order + strlen(other) + 1, want);
    free(other);
    free(order);
    free(want);
    seen_free(&got);
    free(topic);
}
END_TEST

/* A command over the producer's message size limit is refused before it
 * leaves: told, kept, retried, and its instance's next command waits. */
START_TEST(too_large)
{
    setup_named("dispatch_large");
    char *topic = tl_unique("dispatch.large.");
    const char *topics[1] = {topic};
    tl_kafka_create_topics(topics, 1, 1);
    add_commands(PROCESS, topic, 2, 2);
    /* K0001's first command grows past 1 MB (librdkafka's message.max.bytes). */
    tl_db_exec(w.conn, "UPDATE steward.commands SET payload = jsonb_build_object('blob', "
                       "repeat('x', 1100000)) WHERE key = 'K0001' AND step = 1");
    int pid = start();
    wait_for("SELECT count(*) FROM steward.alerts WHERE kind = 'dispatch_failed' AND "
             "resolved_at IS NULL AND summary LIKE '%too large%'",
             "1", 60);
    /* K0002's commands are not held up by it; K0001's second one is. */
    wait_for("SELECT string_agg(key || ':' || step || ':' || (sent_at IS NOT NULL), ',' ORDER BY "
             "key, step) FROM steward.commands",
             "K0001:1:false,K0001:2:false,K0002:1:true,K0002:2:true", 30);
    wait_for("SELECT count(*) FROM steward.commands WHERE key = 'K0001' AND step = 1 AND "
             "attempts >= 2 AND last_error LIKE '%MSG_SIZE_TOO_LARGE%'",
             "1", 30);
    ck_assert_int_eq(tl_stop(pid, SIGTERM, 30), 0);
    free(topic);
}
END_TEST

/* A producer configuration librdkafka refuses is a configuration error:
 * exit 2 naming it, not a wait for PostgreSQL that never ends. */
START_TEST(producer_config_refused)
{
    setup_named("dispatch_conf");
    const char *argv[] = {NULL,
                          "run",
                          "--brokers",
                          tl_kafka_brokers(),
                          "--database",
                          w.db_url,
                          "--definitions",
                          defs_dir,
                          "--group",
                          w.group,
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
    setup_named("dispatch_retention");
    add_commands(PROCESS, "never.sent", 5, 1);
    /* K0001 sent 10 days ago, K0002 sent just now, K0003 old and unsent,
     * K0004 cancelled 10 days ago, K0005 cancelled just now */
    tl_db_exec(w.conn, "UPDATE steward.commands SET sent_at = now() - interval '10 days', "
                       "created_at = now() - interval '10 days' WHERE key = 'K0001'");
    tl_db_exec(w.conn, "UPDATE steward.commands SET sent_at = now() WHERE key = 'K0002'");
    tl_db_exec(w.conn, "UPDATE steward.commands SET created_at = now() - interval '30 days' "
                       "WHERE key = 'K0003'");
    tl_db_exec(w.conn, "UPDATE steward.commands SET cancelled_at = now() - interval '10 days', "
                       "cancel_reason = 'left' WHERE key = 'K0004'");
    tl_db_exec(w.conn, "UPDATE steward.commands SET cancelled_at = now(), cancel_reason = 'left' "
                       "WHERE key = 'K0005'");
    const char *argv[] = {NULL, "prune", "--json", "--database", w.db_url, NULL};
    tl_output_t o = tl_steward(argv, NULL);
    ck_assert_msg(o.status == 0, "prune: %s", o.err);
    ck_assert_msg(tl_contains(o.out, "\"table\": \"commands\"") ||
                      tl_contains(o.out, "\"table\":\"commands\""),
                  "prune: %s", o.out);
    tl_output_free(&o);
    char *left = tl_db_scalar(
        w.conn, "SELECT string_agg(key, ',' ORDER BY key) FROM steward.commands", 0, NULL);
    ck_assert_str_eq(left, "K0002,K0003,K0005");
    free(left);
}
END_TEST

/* ---- the broker down: librdkafka's mock cluster ------------------------------------- */

/* A one-broker mock cluster the stewards of this test use, with the events
 * topic and `topic` (one partition each). */
static void mock_start(const char *topic)
{
    char kerr[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    ck_assert(rd_kafka_conf_set(conf, "log_level", "4", kerr, sizeof kerr) == RD_KAFKA_CONF_OK);
    mock_owner = rd_kafka_new(RD_KAFKA_PRODUCER, conf, kerr, sizeof kerr);
    ck_assert_msg(mock_owner != NULL, "%s", kerr);
    mock = rd_kafka_mock_cluster_new(mock_owner, 1);
    ck_assert_ptr_nonnull(mock);
    ck_assert_int_eq(rd_kafka_mock_topic_create(mock, events_topic, 1, 1),
                     RD_KAFKA_RESP_ERR_NO_ERROR);
    ck_assert_int_eq(rd_kafka_mock_topic_create(mock, topic, 1, 1), RD_KAFKA_RESP_ERR_NO_ERROR);
    brokers = rd_kafka_mock_cluster_bootstraps(mock);
}

/* Inserts one command of step 1 for `key` to `topic`. */
static void add_one(const char *topic, const char *key)
{
    const char *params[3] = {PROCESS, topic, key};
    PGresult *res = PQexecParams(
        w.conn,
        "INSERT INTO steward.commands (process, key, version, state, step, attempt, token, topic, "
        "  type, payload, ce_id) "
        "VALUES ($1, $3, 1, 'state_1', 1, 0, 1, $2, 'DoStep', '{}', "
        "  encode(sha256(convert_to($1 || chr(31) || $3 || chr(31) || 1 || chr(31) || 0, "
        "    'UTF8')), 'hex'))",
        3, NULL, params, NULL, NULL, 0);
    ck_assert_msg(PQresultStatus(res) == PGRES_COMMAND_OK, "%s", PQerrorMessage(w.conn));
    PQclear(res);
}

/* Waits up to timeout_s for steward's log to hold `needle`; whether it did. */
static bool wait_log(const char *needle, int timeout_s)
{
    time_t until = time(NULL) + timeout_s;
    for (;;) {
        char *log = tl_read_file(w.log);
        bool found = log != NULL && tl_contains(log, needle);
        free(log);
        if (found || time(NULL) >= until)
            return found;
        usleep(100 * 1000);
    }
}

/* A steward running against the mock cluster whose dispatcher has
 * delivered (so its producer knows the broker), then the broker down. */
static int start_then_cut(const char *topic)
{
    add_one(topic, "warm-up");
    int pid = start();
    wait_for("SELECT count(*) FROM steward.commands WHERE key = 'warm-up' AND sent_at IS NOT NULL",
             "1", 60);
    ck_assert_int_eq(rd_kafka_mock_broker_set_down(mock, 1), RD_KAFKA_RESP_ERR_NO_ERROR);
    return pid;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

START_TEST(crash_frees_claims_fast)
{
    setup_named("dispatch_crash_lease");
    char *topic = tl_unique("dispatch.lease.");
    mock_start(topic);
    /* librdkafka would hold these for 30 s: the lease must not follow it. */
    timeout_set = "dispatch.timeout=30s";
    int pid = start_then_cut(topic);
    enum { KEYS = 100, STEPS = 2, ROWS = KEYS * STEPS };
    add_commands(PROCESS, topic, KEYS, STEPS);
    /* Every instance's first command claimed and in librdkafka's queue; the
     * second (a re-send, a hand-off) waits behind it. */
    char keys[16];
    snprintf(keys, sizeof keys, "%d", KEYS);
    wait_for("SELECT count(*) FROM steward.commands WHERE key <> 'warm-up' AND step = 1 AND "
             "next_attempt_at > now() AND sent_at IS NULL",
             keys, 60);
    ck_assert_int_eq(tl_stop(pid, SIGKILL, 10), 128 + SIGKILL);
    ck_assert_int_eq(rd_kafka_mock_broker_set_up(mock, 1), RD_KAFKA_RESP_ERR_NO_ERROR);

    double t0 = now_s();
    pid = start();
    char rows[16];
    snprintf(rows, sizeof rows, "%d", ROWS);
    /* A lease is 2 s; a delivery timeout would be 30 s. */
    wait_for("SELECT count(*) FROM steward.commands WHERE key <> 'warm-up' AND sent_at IS NOT NULL",
             rows, 20);
    double took = now_s() - t0;
    printf("dispatch lease: %d commands on the topic %.1f s after the restart\n", ROWS, took);
    ck_assert_int_eq(tl_stop(pid, SIGTERM, 30), 0);

    seen_list_t got = read_topic(topic, 1);
    ck_assert_int_ge((int) got.n, ROWS + 1);
    /* Each instance in order. */
    for (int i = 1; i <= KEYS; i += 9) {
        char key[16];
        snprintf(key, sizeof key, "K%04d", i);
        char *got_order = first_seen_order(&got, key), *want = row_order(PROCESS, key);
        ck_assert_str_eq(got_order, want);
        free(got_order);
        free(want);
    }
    seen_free(&got);
    free(topic);
}
END_TEST

START_TEST(cancelled_never_sent)
{
    setup_named("dispatch_cancelled");
    char *topic = tl_unique("dispatch.cancel.");
    mock_start(topic);
    timeout_set = "dispatch.timeout=60s"; /* the messages wait in librdkafka's queue */
    int pid = start_then_cut(topic);
    add_commands(PROCESS, topic, 20, 1);
    wait_for("SELECT count(*) FROM steward.commands WHERE key <> 'warm-up' AND "
             "next_attempt_at > now() AND sent_at IS NULL",
             "20", 60);
    /* The instances finish, as cmdq_write() cancels their commands. */
    tl_db_exec(w.conn, "UPDATE steward.commands SET cancelled_at = now(), "
                       "cancel_reason = 'the instance finished (failure in state_1) before it "
                       "was sent' WHERE key LIKE 'K%'");
    /* Judged after the topic is read, so that a failure shows what went out. */
    bool taken_back = wait_log("claimed commands taken back unsent", 30);
    /* The broker comes back; a command queued after the cancelled ones
     * goes, so what was going to be produced has been. */
    add_one(topic, "after");
    ck_assert_int_eq(rd_kafka_mock_broker_set_up(mock, 1), RD_KAFKA_RESP_ERR_NO_ERROR);
    wait_for("SELECT count(*) FROM steward.commands WHERE key = 'after' AND sent_at IS NOT NULL",
             "1", 60);
    ck_assert_int_eq(tl_stop(pid, SIGTERM, 30), 0);

    seen_list_t got = read_topic(topic, 1);
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
    ck_assert_int_eq(scalar_ll("SELECT count(*) FROM steward.commands WHERE key LIKE 'K%' AND "
                               "sent_at IS NULL AND cancelled_at IS NOT NULL"),
                     20);
    ck_assert_int_eq(scalar_ll("SELECT count(*) FROM steward.commands WHERE sent_at IS NOT NULL "
                               "AND cancelled_at IS NOT NULL"),
                     0);
    /* And the schema says so: a row is sent or cancelled, never both. */
    PGresult *res =
        PQexec(w.conn, "UPDATE steward.commands SET sent_at = now() WHERE key = 'K0001'");
    ck_assert_str_eq(PQresultErrorField(res, PG_DIAG_SQLSTATE) != NULL
                         ? PQresultErrorField(res, PG_DIAG_SQLSTATE)
                         : "none",
                     "23514");
    PQclear(res);
    seen_free(&got);
    free(topic);
}
END_TEST

/* A producer or consumer on the mock cluster. */
static rd_kafka_t *mock_client(rd_kafka_type_t type)
{
    char kerr[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    ck_assert(rd_kafka_conf_set(conf, "bootstrap.servers", brokers, kerr, sizeof kerr) ==
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
    setup_named("dispatch_answered");
    char *topic = tl_unique("dispatch.charge.");
    mock_start(topic);
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
             events_topic, events_topic, topic);
    free(tl_write_file(defs_dir, "dp_pay.json", definition));
    const char *dir = tl_tmpdir();
    config = tl_write_file(dir, "steward.json", "{\"dispatch\": {\"paused\": [\"dp_pay\"]}}");
    /* A delivery timeout of 30 s: a lease that followed it would hold the
     * claimed commands past the 25 s deadline. */
    timeout_set = "dispatch.timeout=30s";
    int pid = start_then_cut(topic);
    ck_assert_int_eq(rd_kafka_mock_broker_set_up(mock, 1), RD_KAFKA_RESP_ERR_NO_ERROR);

    enum { ORDERS = 20 };
    rd_kafka_t *producer = mock_client(RD_KAFKA_PRODUCER);
    for (int i = 1; i <= ORDERS; i++) {
        char value[128];
        snprintf(value, sizeof value, "{\"type\":\"PaymentRequested\",\"order_id\":\"P%02d\"}", i);
        mock_produce(producer, events_topic, value);
    }
    char orders[16];
    snprintf(orders, sizeof orders, "%d", ORDERS);
    wait_for("SELECT count(*) FROM steward.commands WHERE process = 'dp_pay'", orders, 60);
    /* The broker goes; the pause is lifted; the commands are claimed and
     * wait in librdkafka's queue; steward dies. */
    ck_assert_int_eq(rd_kafka_mock_broker_set_down(mock, 1), RD_KAFKA_RESP_ERR_NO_ERROR);
    free(tl_write_file(dir, "steward.json", "{\"dispatch\": {\"paused\": []}}"));
    ck_assert_int_eq(kill(pid, SIGHUP), 0);
    wait_for("SELECT count(*) FROM steward.commands WHERE process = 'dp_pay' AND "
             "next_attempt_at > now() AND sent_at IS NULL",
             orders, 60);
    ck_assert_int_eq(tl_stop(pid, SIGKILL, 10), 128 + SIGKILL);
    ck_assert_int_eq(rd_kafka_mock_broker_set_up(mock, 1), RD_KAFKA_RESP_ERR_NO_ERROR);
    pid = start();

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
            mock_produce(producer, events_topic, value);
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
    if (!tl_db_wait(w.conn,
                    "SELECT count(*) FROM steward.instances WHERE process = 'dp_pay' AND "
                    "state = 'paid'",
                    0, NULL, orders, 60, NULL)) {
        char *why = tl_db_scalar(w.conn,
                                 "SELECT string_agg(h.key || ' ' || h.outcome || ' ' || "
                                 "coalesce(h.detail, ''), E'\\n' ORDER BY h.id) "
                                 "FROM steward.history h JOIN steward.instances i "
                                 "ON i.process = h.process AND i.key = h.key "
                                 "WHERE i.process = 'dp_pay' AND i.state <> 'paid'",
                                 0, NULL);
        ck_abort_msg("not every order was paid; the others' history:\n%s", why);
    }
    ck_assert_int_eq(tl_stop(pid, SIGTERM, 30), 0);
    ck_assert_int_eq(scalar_ll("SELECT count(*) FROM steward.history WHERE process = 'dp_pay' "
                               "AND outcome = 'timeout'"),
                     0);
    free(topic);
}
END_TEST

START_TEST(renewed_not_shared)
{
    setup_named("dispatch_renewed");
    char *topic = tl_unique("dispatch.renew.");
    mock_start(topic);
    timeout_set = "dispatch.timeout=60s";
    int a = start_then_cut(topic);
    int b = start();
    add_commands(PROCESS, topic, 20, 1);
    /* Claimed, then held over more than three leases of 2 s by renewals
     * (a lease left to run out would be claimed by the other replica). */
    wait_for("SELECT count(*) FROM steward.commands WHERE key LIKE 'K%' AND sent_at IS NULL AND "
             "next_attempt_at > created_at + interval '7 seconds'",
             "20", 60);
    ck_assert_int_eq(rd_kafka_mock_broker_set_up(mock, 1), RD_KAFKA_RESP_ERR_NO_ERROR);
    wait_for("SELECT count(*) FROM steward.commands WHERE sent_at IS NOT NULL", "21", 60);
    ck_assert_int_eq(tl_stop(a, SIGTERM, 30), 0);
    ck_assert_int_eq(tl_stop(b, SIGTERM, 30), 0);
    seen_list_t got = read_topic(topic, 1);
    ck_assert_msg(got.n == 21, "%zu messages for 21 commands: a row was produced twice", got.n);
    seen_free(&got);
    free(topic);
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
    setup_named("dispatch_sdk");
    /* The SDK first: npm installs exactly the lockfile's versions. */
    char *sdk = NULL;
    ck_assert_int_ge(asprintf(&sdk, "%s/sdk", w.dir), 0);
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
    add_commands(PROCESS, topic, 1, 1);
    int pid = start();
    wait_for("SELECT count(*) FROM steward.commands WHERE sent_at IS NOT NULL", "1", 60);
    ck_assert_int_eq(tl_stop(pid, SIGTERM, 30), 0);
    seen_list_t got = read_topic(topic, 1);
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
    char *ce_id = tl_db_scalar(w.conn, "SELECT ce_id FROM steward.commands", 0, NULL);
    char *idem = tl_db_scalar(w.conn,
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
    seen_free(&got);
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
    setup_named(name);
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
             events_topic, events_topic, topic);
    free(tl_write_file(defs_dir, PAGED ".json", definition));
    config = tl_write_file(w.dir, "steward.json",
                           "{\"scheduler\": {\"interval\": \"200ms\", \"grace\": \"0s\"}}");
}

/* Starts steward and places order R1, once. */
static int start_and_order(void)
{
    int pid = start();
    tl_producer_t *p = tl_producer_new();
    tl_produce(p, events_topic, 0, "{\"type\":\"OrderPlaced\",\"order_id\":\"R1\"}", -1, NULL, 0);
    tl_producer_free(p);
    return pid;
}

/* The summary of R1's deadline alert once it is open (malloc'd). */
static char *deadline_summary(void)
{
    wait_for("SELECT count(*) FROM steward.alerts WHERE kind = 'deadline' AND process = '" PAGED
             "' AND key = 'R1' AND resolved_at IS NULL",
             "1", 60);
    char *summary = tl_db_scalar(w.conn,
                                 "SELECT summary FROM steward.alerts WHERE kind = 'deadline' AND "
                                 "process = '" PAGED "' AND key = 'R1' AND owner = 'stock'",
                                 0, NULL);
    ck_assert_ptr_nonnull(summary);
    return summary;
}

/* How many commands reserving queued for R1: the rows of its step. */
static long long step_rows(void)
{
    return scalar_ll("SELECT count(*) FROM steward.commands c JOIN steward.instances i "
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
        char *log = tl_read_file(w.log), *save = NULL, *found = NULL;
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
            tl_print_tail(w.log, 4000);
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
    ck_assert_int_eq(scalar_ll("SELECT count(*) FROM steward.commands WHERE process = '" PAGED
                               "' AND sent_at IS NOT NULL"),
                     0);
    char want[128];
    snprintf(want, sizeof want, "ReserveStock queued %lld, delivered 0: see dispatch_failed", rows);
    ck_assert_msg(tl_contains(summary, want), "the page says: %s", summary);
    ck_assert_msg(!tl_contains(summary, " sent "), "the page claims a send: %s", summary);
    tw_wait(&w,
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
    ck_assert_int_eq(scalar_ll("SELECT count(*) FROM steward.commands WHERE process = '" PAGED
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
    ck_assert_int_eq(scalar_ll("SELECT count(*) FROM steward.alerts WHERE kind = "
                               "'dispatch_failed'"),
                     0);
    ck_assert_int_eq(tl_stop(pid, SIGTERM, 30), 0);
    seen_list_t got = read_topic(topic, 1);
    ck_assert_int_eq((int) got.n, 2);
    seen_free(&got);
    free(topic);
}
END_TEST

Suite *dispatch_suite(void)
{
    Suite *s = suite_create("dispatch");
    TCase *tc = tcase_create("dispatch");
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, producer_config_refused);
    tcase_add_test(tc, headers_and_key);
    tcase_add_test(tc, crash_once_per_id);
    tcase_add_test(tc, missing_topic);
    tcase_add_test(tc, paused_then_resumed);
    tcase_add_test(tc, too_large);
    tcase_add_test(tc, retention_keeps_unsent);
    tcase_add_test(tc, crash_frees_claims_fast);
    tcase_add_test(tc, cancelled_never_sent);
    tcase_add_test(tc, crash_then_answered);
    tcase_add_test(tc, renewed_not_shared);
    tcase_add_test(tc, cloudevents_sdk_reads_a_command);
    suite_add_tcase(s, tc);
    /* Active end to end: the words of a missed step's page. */
    TCase *pages = tcase_create("pages");
    tcase_add_checked_fixture(pages, NULL, teardown);
    tcase_set_timeout(pages, 120);
    tcase_add_test(pages, page_counts_undelivered_commands);
    tcase_add_test(pages, page_counts_delivered_commands);
    suite_add_tcase(s, pages);
    return s;
}
