/*
 * steward-bench-active - bench/active's Kafka ends: the events that make
 * steward's instances enter a commanded state, and the bare producer its
 * dispatcher is measured against.
 *
 *   steward-bench-active events BROKERS EVENT_TOPIC COMMAND_TOPIC PARTITIONS N [RATE [PREFIX]]
 *       creates both topics (PARTITIONS each; existing ones are kept; the
 *       command topic with the broker's append time as each message's
 *       timestamp) and produces N "Start" events, keys k-0 .. k-(N-1)
 *       (PREFIX-0 ... with PREFIX), each of which starts an instance in
 *       bench/active's definition; each carries sent_ms, the wall clock when
 *       it was produced. With RATE (0: none), at RATE events a second (the
 *       offered load), else as fast as it can
 *
 *   steward-bench-active topic BROKERS TOPIC PARTITIONS CONNINFO PROCESS
 *       reads TOPIC to its end and compares it with steward.commands: how
 *       many messages, how many ids, how many copies (a message whose ce_id
 *       came before), how many not a row's; and per message, from the
 *       broker's append time, the latency from its row's created_at (the
 *       transaction that entered the state) and from its event's sent_ms,
 *       as p50, p99 and max in milliseconds; messages keyed warm-... are
 *       checked but not timed
 *
 *   steward-bench-active bare BROKERS TOPIC PARTITIONS CONNINFO PROCESS [RATE]
 *       reads the commands steward sent for PROCESS (steward.commands) and
 *       sends the very same messages (key, value, the CloudEvents headers of
 *       the contract) to TOPIC (created with PARTITIONS when missing) with a
 *       bare librdkafka idempotent producer (enable.idempotence=true,
 *       acks=all, everything else librdkafka's defaults), all of them built
 *       before the clock starts; timed from the first produce to the last
 *       delivery report. With RATE, at RATE messages a second instead, and
 *       each one's latency from its produce to its delivery report (p50,
 *       p99, max): what Kafka alone takes at that offered load
 *
 *   steward-bench-active synthetic BROKERS TOPIC PARTITIONS N
 *       the bare producer on N messages shaped like the demo's commands
 *       (the same headers, a ~200-byte payload), for when there is no
 *       steward run to copy
 *
 * Prints key=value lines on stdout (for the script); exits 0 on success.
 */
#include <inttypes.h>
#include <jansson.h>
#include <libpq-fe.h>
#include <librdkafka/rdkafka.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define N_HEADERS 11

typedef struct message {
    char *key;
    char *value;
    char *headers[N_HEADERS]; /* values; names in header_names */
} message_t;

static const char *const header_names[N_HEADERS] = {
    "ce_specversion",    "ce_id",         "ce_source",       "ce_type",        "ce_time",
    "ce_stewardprocess", "ce_stewardkey", "ce_stewardstate", "ce_stewardstep", "ce_stewardattempt",
    "ce_stewardtoken",
};

static uint64_t delivered, failed;
static double *sent_at, *acked_after; /* per message of a paced bare run, by its opaque - 1 */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void) rk;
    (void) opaque;
    size_t i = (size_t) (uintptr_t) m->_private;
    if (i > 0 && sent_at != NULL)
        acked_after[i - 1] = (now_s() - sent_at[i - 1]) * 1e3;
    if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR)
        delivered++;
    else if (failed++ < 5)
        fprintf(stderr, "steward-bench-active: delivery failed: %s\n", rd_kafka_err2str(m->err));
}

/* An idempotent producer with librdkafka's defaults otherwise; NULL on
 * failure (printed). */
static rd_kafka_t *producer(const char *brokers)
{
    char err[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (rd_kafka_conf_set(conf, "bootstrap.servers", brokers, err, sizeof err) ||
        rd_kafka_conf_set(conf, "enable.idempotence", "true", err, sizeof err) ||
        rd_kafka_conf_set(conf, "acks", "all", err, sizeof err) ||
        rd_kafka_conf_set(conf, "allow.auto.create.topics", "false", err, sizeof err)) {
        fprintf(stderr, "steward-bench-active: %s\n", err);
        rd_kafka_conf_destroy(conf);
        return NULL;
    }
    rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    if (rk == NULL) {
        fprintf(stderr, "steward-bench-active: %s\n", err);
        rd_kafka_conf_destroy(conf);
    }
    return rk;
}

/* Creates the topics (an existing one is fine), the ones from `append_time`
 * on with the broker's append time as message timestamps; false on
 * failure. */
static bool create_topics(rd_kafka_t *rk, const char *const *names, int n, int partitions,
                          int append_time)
{
    char err[512];
    rd_kafka_NewTopic_t *topics[4];
    for (int i = 0; i < n; i++) {
        topics[i] = rd_kafka_NewTopic_new(names[i], partitions, -1, err, sizeof err);
        if (i >= append_time)
            rd_kafka_NewTopic_set_config(topics[i], "message.timestamp.type", "LogAppendTime");
    }
    rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
    rd_kafka_CreateTopics(rk, topics, (size_t) n, NULL, q);
    rd_kafka_event_t *ev = rd_kafka_queue_poll(q, 30000);
    bool ok = ev != NULL && rd_kafka_event_error(ev) == RD_KAFKA_RESP_ERR_NO_ERROR;
    if (ok) {
        size_t count;
        const rd_kafka_topic_result_t **res =
            rd_kafka_CreateTopics_result_topics(rd_kafka_event_CreateTopics_result(ev), &count);
        for (size_t i = 0; i < count; i++) {
            rd_kafka_resp_err_t e = rd_kafka_topic_result_error(res[i]);
            if (e != RD_KAFKA_RESP_ERR_NO_ERROR && e != RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS) {
                fprintf(stderr, "steward-bench-active: creating %s: %s\n",
                        rd_kafka_topic_result_name(res[i]),
                        rd_kafka_topic_result_error_string(res[i]));
                ok = false;
            }
        }
    } else {
        fprintf(stderr, "steward-bench-active: creating topics: %s\n",
                ev ? rd_kafka_event_error_string(ev) : "no answer in 30 s");
    }
    if (ev != NULL)
        rd_kafka_event_destroy(ev);
    rd_kafka_queue_destroy(q);
    for (int i = 0; i < n; i++)
        rd_kafka_NewTopic_destroy(topics[i]);
    return ok;
}

/* Produces one message, waiting while the queue is full; its report gets
 * `opaque`. */
static bool send_one(rd_kafka_t *rk, const char *topic, const message_t *m, void *opaque)
{
    for (;;) {
        rd_kafka_headers_t *hdrs = NULL;
        if (m->headers[0] != NULL) {
            hdrs = rd_kafka_headers_new(N_HEADERS);
            for (int h = 0; h < N_HEADERS; h++)
                rd_kafka_header_add(hdrs, header_names[h], -1, m->headers[h], -1);
        }
        rd_kafka_resp_err_t err =
            hdrs != NULL ? rd_kafka_producev(
                               rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_KEY(m->key, strlen(m->key)),
                               RD_KAFKA_V_VALUE(m->value, strlen(m->value)),
                               RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_HEADERS(hdrs),
                               RD_KAFKA_V_OPAQUE(opaque), RD_KAFKA_V_END)
                         : rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(topic),
                                             RD_KAFKA_V_KEY(m->key, strlen(m->key)),
                                             RD_KAFKA_V_VALUE(m->value, strlen(m->value)),
                                             RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                             RD_KAFKA_V_OPAQUE(opaque), RD_KAFKA_V_END);
        /* Copied: the events are written into one reused buffer, and
         * librdkafka otherwise keeps the pointer until delivery. The
         * dispatcher copies too, so the bare half pays what it pays. */
        if (err == RD_KAFKA_RESP_ERR_NO_ERROR)
            return true; /* hdrs now owned by the message */
        if (hdrs != NULL)
            rd_kafka_headers_destroy(hdrs);
        if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
            fprintf(stderr, "steward-bench-active: producing to %s: %s\n", topic,
                    rd_kafka_err2str(err));
            return false;
        }
        rd_kafka_poll(rk, 10);
    }
}

static int double_cmp(const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;
    return x < y ? -1 : x > y;
}

/* p50, p99 (nearest rank) and max of v[0..n), sorted here. */
static void print_latency(const char *name, double *v, size_t n)
{
    if (n == 0) {
        printf("%s_count=0\n", name);
        return;
    }
    qsort(v, n, sizeof *v, double_cmp);
    size_t p50 = (n * 50 + 99) / 100, p99 = (n * 99 + 99) / 100;
    printf("%s_count=%zu\n%s_p50_ms=%.1f\n%s_p99_ms=%.1f\n%s_max_ms=%.1f\n", name, n, name,
           v[p50 > 0 ? p50 - 1 : 0], name, v[p99 > 0 ? p99 - 1 : 0], name, v[n - 1]);
}

/* Sends every message and waits for every report; prints the figures.
 * With rate > 0 the messages go at that rate, and the figures are the
 * latency of each, from its produce to its delivery report. */
static int run_bare(const char *brokers, const char *topic, int partitions, message_t *msgs,
                    size_t n, double rate)
{
    rd_kafka_t *rk = producer(brokers);
    if (rk == NULL)
        return 1;
    if (!create_topics(rk, &topic, 1, partitions, 1)) {
        rd_kafka_destroy(rk);
        return 1;
    }
    /* Warm up: metadata and the producer id, before the clock starts. */
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
    const struct rd_kafka_metadata *md;
    if (rd_kafka_metadata(rk, 0, rkt, &md, 10000) == RD_KAFKA_RESP_ERR_NO_ERROR)
        rd_kafka_metadata_destroy(md);
    rd_kafka_topic_destroy(rkt);

    size_t bytes = 0;
    for (size_t i = 0; i < n; i++) {
        bytes += strlen(msgs[i].key) + strlen(msgs[i].value);
        for (int h = 0; msgs[i].headers[0] != NULL && h < N_HEADERS; h++)
            bytes += strlen(header_names[h]) + strlen(msgs[i].headers[h]);
    }
    if (rate > 0) {
        sent_at = calloc(n, sizeof *sent_at);
        acked_after = calloc(n, sizeof *acked_after);
    }
    double t0 = now_s();
    for (size_t i = 0; i < n; i++) {
        if (rate > 0) {
            double wait = t0 + (double) i / rate - now_s();
            if (wait > 0) {
                rd_kafka_poll(rk, 0);
                struct timespec ts = {(time_t) wait,
                                      (long) ((wait - (double) (time_t) wait) * 1e9)};
                nanosleep(&ts, NULL);
            }
            sent_at[i] = now_s();
        }
        if (!send_one(rk, topic, &msgs[i], rate > 0 ? (void *) (uintptr_t) (i + 1) : NULL)) {
            rd_kafka_destroy(rk);
            return 1;
        }
        if (rate > 0)
            rd_kafka_poll(rk, 0);
        else if ((i & 1023) == 0)
            rd_kafka_poll(rk, 0);
    }
    while (delivered + failed < n)
        rd_kafka_poll(rk, 10);
    double secs = now_s() - t0;
    rd_kafka_destroy(rk);
    printf("bare_messages=%zu\nbare_failed=%" PRIu64 "\nbare_bytes=%zu\nbare_seconds=%.3f\n"
           "bare_per_s=%.0f\n",
           n, failed, bytes, secs, secs > 0 ? (double) n / secs : 0.0);
    if (rate > 0)
        print_latency("bare", acked_after, n);
    free(sent_at);
    free(acked_after);
    sent_at = acked_after = NULL;
    return failed == 0 ? 0 : 1;
}

static void free_messages(message_t *msgs, size_t n)
{
    for (size_t i = 0; msgs != NULL && i < n; i++) {
        free(msgs[i].key);
        free(msgs[i].value);
        for (int h = 0; h < N_HEADERS; h++)
            free(msgs[i].headers[h]);
    }
    free(msgs);
}

/* The messages steward sent for `process`, rebuilt from steward.commands
 * as the contract says the dispatcher produces them. */
static message_t *load_commands(const char *conninfo, const char *process, size_t *n)
{
    PGconn *conn = PQconnectdb(conninfo);
    if (PQstatus(conn) != CONNECTION_OK) {
        fprintf(stderr, "steward-bench-active: %s", PQerrorMessage(conn));
        PQfinish(conn);
        return NULL;
    }
    const char *params[1] = {process};
    PGresult *res = PQexecParams(
        conn,
        "SELECT key, payload::text, '1.0', ce_id, 'steward/' || process, type,"
        "       to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'),"
        "       process, key, state, step::text, attempt::text, token::text "
        "FROM steward.commands WHERE process = $1 AND sent_at IS NOT NULL ORDER BY id",
        1, NULL, params, NULL, NULL, 0);
    message_t *msgs = NULL;
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        fprintf(stderr, "steward-bench-active: reading steward.commands: %s",
                PQresultErrorMessage(res));
    } else if ((*n = (size_t) PQntuples(res)) > 0 && (msgs = calloc(*n, sizeof *msgs)) != NULL) {
        for (size_t i = 0; i < *n; i++) {
            msgs[i].key = strdup(PQgetvalue(res, (int) i, 0));
            msgs[i].value = strdup(PQgetvalue(res, (int) i, 1));
            for (int h = 0; h < N_HEADERS; h++)
                msgs[i].headers[h] = strdup(PQgetvalue(res, (int) i, 2 + h));
        }
    }
    PQclear(res);
    PQfinish(conn);
    return msgs;
}

/* n messages shaped like the demo's CapturePayment commands. */
static message_t *synthetic(size_t n)
{
    message_t *msgs = calloc(n, sizeof *msgs);
    char buf[512];
    for (size_t i = 0; msgs != NULL && i < n; i++) {
        snprintf(buf, sizeof buf, "ord-bench-%zu", i);
        msgs[i].key = strdup(buf);
        snprintf(buf, sizeof buf,
                 "{\"order_id\":\"ord-bench-%zu\",\"amount\":%zu.%02zu,\"customer_id\":"
                 "\"cus-%05zu\",\"attempt\":0,\"steward_token\":1,\"currency\":\"EUR\","
                 "\"note\":\"synthetic command for the bare producer\"}",
                 i, 10 + i % 90, i % 100, i % 100000);
        msgs[i].value = strdup(buf);
        const char *fixed[N_HEADERS] = {"1.0",
                                        NULL,
                                        "steward/order_fulfilment",
                                        "CapturePayment",
                                        "2026-01-01T00:00:00.000Z",
                                        "order_fulfilment",
                                        NULL,
                                        "awaiting_payment",
                                        "1",
                                        "0",
                                        "1"};
        for (int h = 0; h < N_HEADERS; h++)
            msgs[i].headers[h] = fixed[h] ? strdup(fixed[h]) : NULL;
        snprintf(buf, sizeof buf, "%064zx", i * 2654435761u);
        msgs[i].headers[1] = strdup(buf);
        msgs[i].headers[6] = strdup(msgs[i].key);
    }
    return msgs;
}

static double wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double) ts.tv_sec * 1e3 + (double) ts.tv_nsec / 1e6;
}

static int run_events(const char *brokers, const char *events, const char *commands, int partitions,
                      size_t n, double rate, const char *prefix)
{
    rd_kafka_t *rk = producer(brokers);
    if (rk == NULL)
        return 1;
    const char *names[2] = {events, commands};
    if (!create_topics(rk, names, 2, partitions, 1)) {
        rd_kafka_destroy(rk);
        return 1;
    }
    if (rate > 0) {
        /* Connected, the topic's metadata known and the producer id
         * granted before the first event's time is taken, so that the
         * load starts at its rate, not with a burst of what waited. */
        rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, events, NULL);
        const struct rd_kafka_metadata *md;
        if (rd_kafka_metadata(rk, 0, rkt, &md, 10000) == RD_KAFKA_RESP_ERR_NO_ERROR)
            rd_kafka_metadata_destroy(md);
        rd_kafka_topic_destroy(rkt);
        rd_kafka_poll(rk, 1000);
    }
    char key[64], value[256];
    double t0 = now_s();
    for (size_t i = 0; i < n; i++) {
        if (rate > 0) { /* the offered load: event i at t0 + i / rate */
            double wait = t0 + (double) i / rate - now_s();
            if (wait > 0) {
                rd_kafka_poll(rk, 0);
                struct timespec ts = {(time_t) wait,
                                      (long) ((wait - (double) (time_t) wait) * 1e9)};
                nanosleep(&ts, NULL);
            }
        }
        snprintf(key, sizeof key, "%s-%zu", prefix, i);
        snprintf(value, sizeof value,
                 "{\"type\":\"Start\",\"id\":\"start-%s\",\"key\":\"%s\",\"total\":%zu.%02zu,"
                 "\"customer_id\":\"cus-%05zu\",\"sent_ms\":%.0f}",
                 key, key, 10 + i % 90, i % 100, i % 100000, wall_ms());
        message_t m = {key, value, {NULL}};
        if (!send_one(rk, events, &m, NULL)) {
            rd_kafka_destroy(rk);
            return 1;
        }
        if (rate > 0)
            rd_kafka_flush(rk, 0); /* each event on its way at its time, not lingering */
    }
    while (delivered + failed < n)
        rd_kafka_poll(rk, 10);
    rd_kafka_destroy(rk);
    printf("events=%zu\nevents_failed=%" PRIu64 "\nevents_seconds=%.3f\n", n, failed, now_s() - t0);
    return failed == 0 ? 0 : 1;
}

/* ---- the command topic against the outbox ----------------------------------------- */

typedef struct row {
    char *ce_id;
    double created_ms;
    bool seen;
} row_t;

static int row_cmp(const void *a, const void *b)
{
    return strcmp(((const row_t *) a)->ce_id, ((const row_t *) b)->ce_id);
}

static int run_topic(const char *brokers, const char *topic, int partitions, const char *conninfo,
                     const char *process)
{
    PGconn *conn = PQconnectdb(conninfo);
    if (PQstatus(conn) != CONNECTION_OK) {
        fprintf(stderr, "steward-bench-active: %s", PQerrorMessage(conn));
        PQfinish(conn);
        return 1;
    }
    const char *params[1] = {process};
    PGresult *res = PQexecParams(conn,
                                 "SELECT ce_id, extract(epoch FROM created_at) * 1000 "
                                 "FROM steward.commands WHERE process = $1",
                                 1, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        fprintf(stderr, "steward-bench-active: reading steward.commands: %s",
                PQresultErrorMessage(res));
        PQclear(res);
        PQfinish(conn);
        return 1;
    }
    size_t n_rows = (size_t) PQntuples(res);
    row_t *rows = calloc(n_rows + 1, sizeof *rows);
    for (size_t i = 0; rows != NULL && i < n_rows; i++) {
        rows[i].ce_id = strdup(PQgetvalue(res, (int) i, 0));
        rows[i].created_ms = strtod(PQgetvalue(res, (int) i, 1), NULL);
    }
    PQclear(res);
    PQfinish(conn);
    if (rows == NULL)
        return 1;
    qsort(rows, n_rows, sizeof *rows, row_cmp);

    char err[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (rd_kafka_conf_set(conf, "bootstrap.servers", brokers, err, sizeof err) ||
        rd_kafka_conf_set(conf, "group.id", "steward-bench-active-reader", err, sizeof err) ||
        rd_kafka_conf_set(conf, "enable.auto.commit", "false", err, sizeof err)) {
        fprintf(stderr, "steward-bench-active: %s\n", err);
        rd_kafka_conf_destroy(conf);
        return 1;
    }
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
    if (rk == NULL) {
        fprintf(stderr, "steward-bench-active: %s\n", err);
        return 1;
    }
    int64_t *high = calloc((size_t) partitions, sizeof *high);
    rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(partitions);
    int left = 0;
    for (int p = 0; p < partitions; p++) {
        int64_t low = 0;
        if (rd_kafka_query_watermark_offsets(rk, topic, p, &low, &high[p], 10000) !=
            RD_KAFKA_RESP_ERR_NO_ERROR) {
            fprintf(stderr, "steward-bench-active: no watermarks for %s [%d]\n", topic, p);
            return 1;
        }
        rd_kafka_topic_partition_list_add(list, topic, p)->offset = RD_KAFKA_OFFSET_BEGINNING;
        left += high[p] > low;
    }
    rd_kafka_assign(rk, list);
    rd_kafka_topic_partition_list_destroy(list);
    size_t messages = 0, copies = 0, foreign = 0, ids = 0, cap = 1024, n_lat = 0;
    double *entry = malloc(cap * sizeof *entry), *event = malloc(cap * sizeof *event);
    double until = now_s() + 120;
    while (left > 0 && now_s() < until) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 500);
        if (m == NULL)
            continue;
        if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
            rd_kafka_message_destroy(m);
            continue;
        }
        messages++;
        rd_kafka_timestamp_type_t tstype;
        double appended = (double) rd_kafka_message_timestamp(m, &tstype);
        rd_kafka_headers_t *hdrs = NULL;
        const void *id = NULL;
        size_t id_len = 0;
        row_t key = {0}, *row = NULL;
        char ce_id[128] = "";
        if (rd_kafka_message_headers(m, &hdrs) == RD_KAFKA_RESP_ERR_NO_ERROR &&
            rd_kafka_header_get_last(hdrs, "ce_id", &id, &id_len) == RD_KAFKA_RESP_ERR_NO_ERROR &&
            id_len < sizeof ce_id) {
            memcpy(ce_id, id, id_len);
            ce_id[id_len] = '\0';
            key.ce_id = ce_id;
            row = bsearch(&key, rows, n_rows, sizeof *rows, row_cmp);
        }
        if (row == NULL) {
            foreign++;
        } else if (row->seen) {
            copies++;
        } else if ((row->seen = true, ids++, m->key_len >= 5 && memcmp(m->key, "warm-", 5) == 0)) {
            /* a warm-up: its path was cold (metadata, connections, the
             * first fetch); not timed */
        } else {
            if (n_lat == cap) {
                cap *= 2;
                entry = realloc(entry, cap * sizeof *entry);
                event = realloc(event, cap * sizeof *event);
            }
            json_t *v = json_loadb(m->payload, m->len, 0, NULL);
            json_t *sent = json_object_get(v, "sent_ms");
            entry[n_lat] = appended - row->created_ms;
            event[n_lat] = json_is_number(sent) ? appended - json_number_value(sent) : -1;
            n_lat++;
            json_decref(v);
            if (tstype != RD_KAFKA_TIMESTAMP_LOG_APPEND_TIME && n_lat == 1)
                fprintf(stderr,
                        "steward-bench-active: %s does not time by append: latencies "
                        "are from the producer's clock\n",
                        topic);
        }
        if (m->offset + 1 >= high[m->partition])
            left--;
        rd_kafka_message_destroy(m);
    }
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    size_t unseen = 0;
    for (size_t i = 0; i < n_rows; i++) {
        unseen += !rows[i].seen;
        free(rows[i].ce_id);
    }
    printf("topic_messages=%zu\ntopic_ids=%zu\ntopic_copies=%zu\ntopic_foreign=%zu\n"
           "rows=%zu\nrows_unseen=%zu\n",
           messages, ids, copies, foreign, n_rows, unseen);
    print_latency("entry", entry, n_lat);
    size_t n_event = 0;
    for (size_t i = 0; i < n_lat; i++)
        if (event[i] >= 0)
            event[n_event++] = event[i];
    print_latency("event", event, n_event);
    free(rows);
    free(entry);
    free(event);
    free(high);
    return left == 0 && foreign == 0 && unseen == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc >= 7 && argc <= 9 && strcmp(argv[1], "events") == 0)
        return run_events(argv[2], argv[3], argv[4], atoi(argv[5]), strtoul(argv[6], NULL, 10),
                          argc >= 8 ? strtod(argv[7], NULL) : 0, argc == 9 ? argv[8] : "k");
    if (argc == 7 && strcmp(argv[1], "topic") == 0)
        return run_topic(argv[2], argv[3], atoi(argv[4]), argv[5], argv[6]);
    if ((argc == 7 || argc == 8) && strcmp(argv[1], "bare") == 0) {
        size_t n = 0;
        message_t *msgs = load_commands(argv[5], argv[6], &n);
        if (msgs == NULL) {
            fprintf(stderr, "steward-bench-active: no sent commands of %s to copy\n", argv[6]);
            return 1;
        }
        int rc = run_bare(argv[2], argv[3], atoi(argv[4]), msgs, n,
                          argc == 8 ? strtod(argv[7], NULL) : 0);
        free_messages(msgs, n);
        return rc;
    }
    if (argc == 6 && strcmp(argv[1], "synthetic") == 0) {
        size_t n = strtoul(argv[5], NULL, 10);
        message_t *msgs = n > 0 ? synthetic(n) : NULL;
        if (msgs == NULL)
            return 1;
        int rc = run_bare(argv[2], argv[3], atoi(argv[4]), msgs, n, 0);
        free_messages(msgs, n);
        return rc;
    }
    fprintf(stderr, "usage: steward-bench-active events BROKERS EVENT_TOPIC COMMAND_TOPIC "
                    "PARTITIONS N [RATE [PREFIX]]\n"
                    "       steward-bench-active topic BROKERS TOPIC PARTITIONS CONNINFO PROCESS\n"
                    "       steward-bench-active bare BROKERS TOPIC PARTITIONS CONNINFO PROCESS "
                    "[RATE]\n"
                    "       steward-bench-active synthetic BROKERS TOPIC PARTITIONS N\n");
    return 2;
}
