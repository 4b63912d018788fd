/*
 * test_dispatch_common - what the dispatch suites share (test_dispatch.h):
 * the world of one test, steward started the same way, command rows queued
 * as the core queues them, and a reader of the command topic.
 */
#include "test_dispatch.h"

#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

dispatch_test_t dt = {.timeout_set = DT_TIMEOUT_SET};

static const char definition_template[] =
    "{\"process\":\"" PROCESS "\",\"version\":1,\"mode\":\"shadow\",\"owner\":\"fulfilment\","
    "\"key\":\"/order_id\",\"events\":{\"OrderPlaced\":{\"topic\":\"%s\"},"
    "\"OrderShipped\":{\"topic\":\"%s\"}},"
    "\"start\":{\"on\":\"OrderPlaced\",\"to\":\"placed\"},"
    "\"states\":{\"placed\":{\"deadline\":\"1h\",\"on\":{\"OrderShipped\":\"done\"}},"
    "\"done\":{\"terminal\":\"success\"}}}";

/* A database, a definition whose event topic exists, a group. */
void dt_setup(const char *name)
{
    tw_init(&dt.w, name);
    tw_migrate(&dt.w);
    dt.events_topic = tl_unique("dispatch.events.");
    const char *topics[1] = {dt.events_topic};
    tl_kafka_create_topics(topics, 1, 1);
    char definition[2048];
    snprintf(definition, sizeof definition, definition_template, dt.events_topic, dt.events_topic);
    ck_assert_int_ge(asprintf(&dt.defs_dir, "%s/defs", dt.w.dir), 0);
    ck_assert_int_eq(mkdir(dt.defs_dir, 0755), 0);
    free(tl_write_file(dt.defs_dir, "dp_order.json", definition));
}

void dt_teardown(void)
{
    tw_teardown(&dt.w);
    if (dt.mock != NULL)
        rd_kafka_mock_cluster_destroy(dt.mock);
    if (dt.mock_owner != NULL)
        rd_kafka_destroy(dt.mock_owner);
    dt.mock = NULL;
    dt.mock_owner = NULL;
    dt.brokers = NULL;
    dt.timeout_set = DT_TIMEOUT_SET;
    free(dt.events_topic);
    free(dt.defs_dir);
    free(dt.config);
    dt.events_topic = dt.defs_dir = dt.config = NULL;
}

/* Starts steward with short delivery timeouts, leases and backoffs. */
int dt_spawn(const char *listen, const char *const *env)
{
    char listen_set[64];
    snprintf(listen_set, sizeof listen_set, "http.listen=%s", listen);
    const char *argv[] = {
        NULL, "run", "--brokers", dt.brokers != NULL ? dt.brokers : tl_kafka_brokers(),
        "--database", dt.w.db_url, "--definitions", dt.defs_dir, "--group", dt.w.group, "--config",
        dt.config != NULL ? dt.config : "", "--set", listen_set, "--set", dt.timeout_set, "--set",
        "dispatch.lease=" DT_LEASE, "--set", "dispatch.max_backoff=1s", "--set",
        "dispatch.batch_size=50", "--set", "retention.interval=off",
        /* A missing topic is known for missing after this long. */
        "--kafka", "topic.metadata.propagation.max.ms=1000", "--kafka", "session.timeout.ms=6000",
        "--kafka", "heartbeat.interval.ms=1000", NULL};
    return tl_steward_spawn(argv, env, dt.w.log);
}

int dt_start_on(const char *listen)
{
    return dt_spawn(listen, NULL);
}

int dt_start(void)
{
    return dt_start_on("");
}

long long dt_scalar(const char *sql)
{
    return tw_scalar_long(&dt.w, sql, NULL);
}

void dt_wait_for(const char *sql, const char *expected, int timeout_s)
{
    tw_wait(&dt.w, sql, NULL, expected, timeout_s, sql);
}

/*
 * Queues `n` commands per key for keys K0001..K<keys>, step by step across
 * the keys (the order a busy system would queue them), as the core does:
 * step s, attempt 0, token s, ce_id the SHA-256 of process, key, step and
 * attempt joined by \x1f.
 */
void dt_add_commands(const char *process, const char *topic, int keys, int n)
{
    char k[16], s[16];
    snprintf(k, sizeof k, "%d", keys);
    snprintf(s, sizeof s, "%d", n);
    const char *params[4] = {process, topic, k, s};
    PGresult *res = PQexecParams(
        dt.w.conn,
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
    ck_assert_msg(PQresultStatus(res) == PGRES_COMMAND_OK, "insert: %s", PQerrorMessage(dt.w.conn));
    PQclear(res);
}

/* ---- reading the command topic ------------------------------------------------- */

void dt_seen_free(dt_seen_list_t *l)
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
dt_seen_list_t dt_read_topic(const char *topic, int partitions)
{
    char kerr[512];
    dt_seen_list_t out = {0};
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    char *group = tl_unique("dispatch.reader");
    ck_assert(rd_kafka_conf_set(conf, "bootstrap.servers",
                                dt.brokers != NULL ? dt.brokers : tl_kafka_brokers(), kerr,
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
        dt_seen_t *s = &out.items[out.n++];
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
char *dt_first_seen_order(const dt_seen_list_t *l, const char *key)
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

char *dt_row_order(const char *process, const char *key)
{
    const char *params[2] = {process, key};
    return tl_db_scalar(dt.w.conn,
                        "SELECT coalesce(string_agg(ce_id, ',' ORDER BY id), '') "
                        "FROM steward.commands WHERE process = $1 AND key = $2",
                        2, params);
}

/* A one-broker mock cluster the stewards of this test use, with the events
 * topic and `topic` (one partition each). */
void dt_mock_start(const char *topic)
{
    char kerr[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    ck_assert(rd_kafka_conf_set(conf, "log_level", "4", kerr, sizeof kerr) == RD_KAFKA_CONF_OK);
    dt.mock_owner = rd_kafka_new(RD_KAFKA_PRODUCER, conf, kerr, sizeof kerr);
    ck_assert_msg(dt.mock_owner != NULL, "%s", kerr);
    dt.mock = rd_kafka_mock_cluster_new(dt.mock_owner, 1);
    ck_assert_ptr_nonnull(dt.mock);
    ck_assert_int_eq(rd_kafka_mock_topic_create(dt.mock, dt.events_topic, 1, 1),
                     RD_KAFKA_RESP_ERR_NO_ERROR);
    ck_assert_int_eq(rd_kafka_mock_topic_create(dt.mock, topic, 1, 1), RD_KAFKA_RESP_ERR_NO_ERROR);
    dt.brokers = rd_kafka_mock_cluster_bootstraps(dt.mock);
}

/* Inserts one command of step 1 for `key` to `topic`. */
void dt_add_one(const char *topic, const char *key)
{
    const char *params[3] = {PROCESS, topic, key};
    PGresult *res = PQexecParams(
        dt.w.conn,
        "INSERT INTO steward.commands (process, key, version, state, step, attempt, token, topic, "
        "  type, payload, ce_id) "
        "VALUES ($1, $3, 1, 'state_1', 1, 0, 1, $2, 'DoStep', '{}', "
        "  encode(sha256(convert_to($1 || chr(31) || $3 || chr(31) || 1 || chr(31) || 0, "
        "    'UTF8')), 'hex'))",
        3, NULL, params, NULL, NULL, 0);
    ck_assert_msg(PQresultStatus(res) == PGRES_COMMAND_OK, "%s", PQerrorMessage(dt.w.conn));
    PQclear(res);
}

/* Waits up to timeout_s for steward's log to hold `needle`; whether it did. */
bool dt_wait_log(const char *needle, int timeout_s)
{
    time_t until = time(NULL) + timeout_s;
    for (;;) {
        char *log = tl_read_file(dt.w.log);
        bool found = log != NULL && tl_contains(log, needle);
        free(log);
        if (found || time(NULL) >= until)
            return found;
        usleep(100 * 1000);
    }
}

/* A steward running against the mock cluster whose dispatcher has
 * delivered (so its producer knows the broker), then the broker down. */
int dt_start_then_cut(const char *topic)
{
    dt_add_one(topic, "warm-up");
    int pid = dt_start();
    dt_wait_for(
        "SELECT count(*) FROM steward.commands WHERE key = 'warm-up' AND sent_at IS NOT NULL", "1",
        60);
    ck_assert_int_eq(rd_kafka_mock_broker_set_down(dt.mock, 1), RD_KAFKA_RESP_ERR_NO_ERROR);
    return pid;
}

double dt_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}
