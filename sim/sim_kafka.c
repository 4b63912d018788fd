/*
 * sim_kafka - steward-sim's producer, its topics and its messages; see
 * sim_kafka.h.
 */
#include "sim/sim_kafka.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Delivery reports; runs on the main thread, inside rd_kafka_poll(). */
static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void) rk;
    sim_kafka_producer_t *p = opaque;
    if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
        p->delivered++;
        return;
    }
    if (p->failed++ < 5)
        fprintf(stderr, "steward-sim: delivery to %s failed: %s\n", rd_kafka_topic_name(m->rkt),
                rd_kafka_err2str(m->err));
}

void sim_kafka_producer_free(sim_kafka_producer_t *p)
{
    if (p == NULL)
        return;
    for (int k = 0; k < SIM_N_KINDS; k++) {
        bool shared = false;
        for (int j = 0; j < k; j++)
            shared = shared || p->topics[j] == p->topics[k];
        if (p->topics[k] != NULL && !shared)
            rd_kafka_topic_destroy(p->topics[k]);
    }
    if (p->rk != NULL)
        rd_kafka_destroy(p->rk);
    free(p);
}

sim_kafka_producer_t *sim_kafka_producer_new(const char *brokers, const volatile sig_atomic_t *stop,
                                             char *errstr, size_t errstr_size)
{
    sim_kafka_producer_t *p = calloc(1, sizeof *p);
    if (p == NULL) {
        snprintf(errstr, errstr_size, "out of memory");
        return NULL;
    }
    p->stop = stop;
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    static const char *const settings[][2] = {
        {"client.id", "steward-sim"},
        {"enable.idempotence", "true"},
        {"linger.ms", "5"},
        /* Room for a virtual-time burst: the producer, not the broker, is
         * what a benchmark should wait on. */
        {"queue.buffering.max.messages", "1000000"},
        {"queue.buffering.max.kbytes", "1048576"},
        {"batch.num.messages", "10000"},
        /* sim_kafka_create_topics() made them, with --partitions. */
        {"allow.auto.create.topics", "false"},
    };
    if (rd_kafka_conf_set(conf, "bootstrap.servers", brokers, errstr, errstr_size) !=
        RD_KAFKA_CONF_OK)
        goto fail;
    for (size_t i = 0; i < sizeof settings / sizeof settings[0]; i++)
        if (rd_kafka_conf_set(conf, settings[i][0], settings[i][1], errstr, errstr_size) !=
            RD_KAFKA_CONF_OK)
            goto fail;
    rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
    rd_kafka_conf_set_opaque(conf, p);

    p->rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, errstr_size);
    if (p->rk == NULL)
        goto fail;
    conf = NULL; /* now owned by rk */

    return p;

fail:
    if (conf != NULL)
        rd_kafka_conf_destroy(conf);
    sim_kafka_producer_free(p);
    return NULL;
}

err_class_t sim_kafka_producer_topics(sim_kafka_producer_t *p, const sim_def_flow_t *flow,
                                      char *errstr, size_t errstr_size)
{
    for (int k = 0; k < SIM_N_KINDS; k++) {
        for (int j = 0; j < k && p->topics[k] == NULL; j++)
            if (strcmp(flow->topic[j], flow->topic[k]) == 0)
                p->topics[k] = p->topics[j];
        if (p->topics[k] == NULL)
            p->topics[k] = rd_kafka_topic_new(p->rk, flow->topic[k], NULL);
        if (p->topics[k] == NULL)
            return err_set(ERR_FATAL, errstr, errstr_size, "topic %s: %s", flow->topic[k],
                           rd_kafka_err2str(rd_kafka_last_error()));
    }
    return ERR_OK;
}

/*
 * Which of names[0..n) the cluster's metadata shows with partitions: sets
 * present[i]; returns how many, or -1 when the metadata request failed.
 */
static int topics_present(sim_kafka_producer_t *p, const char *const *names, size_t n,
                          bool *present)
{
    const struct rd_kafka_metadata *md = NULL;
    if (rd_kafka_metadata(p->rk, 1, NULL, &md, 5000) != RD_KAFKA_RESP_ERR_NO_ERROR)
        return -1;
    int count = 0;
    for (size_t i = 0; i < n; i++) {
        present[i] = false;
        for (int t = 0; t < md->topic_cnt && !present[i]; t++)
            present[i] = strcmp(md->topics[t].topic, names[i]) == 0 &&
                         md->topics[t].err == RD_KAFKA_RESP_ERR_NO_ERROR &&
                         md->topics[t].partition_cnt > 0;
        count += present[i];
    }
    rd_kafka_metadata_destroy(md);
    return count;
}

/* Sends one CreateTopics request for `names`; an existing topic is fine.
 * Returns ERR_OK or ERR_TRANSIENT with the reason. */
static err_class_t create_missing(sim_kafka_producer_t *p, const char *const *names, size_t n,
                                  int partitions, char *errstr, size_t errstr_size)
{
    err_class_t rc = ERR_OK;
    rd_kafka_NewTopic_t *new_topics[SIM_KAFKA_MAX_TOPICS] = {0};
    rd_kafka_queue_t *queue = rd_kafka_queue_new(p->rk);
    rd_kafka_AdminOptions_t *options =
        rd_kafka_AdminOptions_new(p->rk, RD_KAFKA_ADMIN_OP_CREATETOPICS);
    rd_kafka_event_t *ev = NULL;
    rd_kafka_AdminOptions_set_operation_timeout(options, 30000, NULL, 0);
    rd_kafka_AdminOptions_set_request_timeout(options, 30000, NULL, 0);
    for (size_t i = 0; i < n; i++) {
        /* Replication -1: the broker's default.replication.factor. */
        new_topics[i] = rd_kafka_NewTopic_new(names[i], partitions, -1, errstr, errstr_size);
        if (new_topics[i] == NULL) {
            rc = ERR_INVALID;
            goto done;
        }
    }
    rd_kafka_CreateTopics(p->rk, new_topics, n, options, queue);
    ev = rd_kafka_queue_poll(queue, 35000);
    if (ev == NULL) {
        rc = err_set(ERR_TRANSIENT, errstr, errstr_size, "creating topics: no answer in 35 s");
        goto done;
    }
    if (rd_kafka_event_error(ev) != RD_KAFKA_RESP_ERR_NO_ERROR) {
        rc = err_set(ERR_TRANSIENT, errstr, errstr_size, "creating topics: %s",
                     rd_kafka_event_error_string(ev));
        goto done;
    }
    size_t count = 0;
    const rd_kafka_topic_result_t **results =
        rd_kafka_CreateTopics_result_topics(rd_kafka_event_CreateTopics_result(ev), &count);
    for (size_t i = 0; i < count; i++) {
        rd_kafka_resp_err_t err = rd_kafka_topic_result_error(results[i]);
        if (err != RD_KAFKA_RESP_ERR_NO_ERROR && err != RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS) {
            rc = err_set(ERR_TRANSIENT, errstr, errstr_size, "creating topic %s: %s",
                         rd_kafka_topic_result_name(results[i]),
                         rd_kafka_topic_result_error_string(results[i]));
            goto done;
        }
    }

done:
    if (ev != NULL)
        rd_kafka_event_destroy(ev);
    for (size_t i = 0; i < n; i++)
        if (new_topics[i] != NULL)
            rd_kafka_NewTopic_destroy(new_topics[i]);
    rd_kafka_AdminOptions_destroy(options);
    rd_kafka_queue_destroy(queue);
    return rc;
}

err_class_t sim_kafka_create_topics(sim_kafka_producer_t *p, const char *const *all, size_t n_all,
                                    int partitions, char *errstr, size_t errstr_size)
{
    const char *names[SIM_KAFKA_MAX_TOPICS] = {0}, *missing[SIM_KAFKA_MAX_TOPICS] = {0};
    bool present[SIM_KAFKA_MAX_TOPICS];
    size_t n = 0, n_missing = 0;
    for (size_t k = 0; k < n_all && n < SIM_KAFKA_MAX_TOPICS; k++) {
        bool seen = false;
        for (size_t j = 0; j < n; j++)
            seen = seen || strcmp(names[j], all[k]) == 0;
        if (!seen)
            names[n++] = all[k];
    }

    int found = topics_present(p, names, n, present);
    if (found < 0) {
        /* Unknown: ask for all of them; existing ones come back as such. */
        memcpy(missing, names, n * sizeof names[0]);
        n_missing = n;
    } else {
        for (size_t i = 0; i < n; i++)
            if (!present[i])
                missing[n_missing++] = names[i];
    }
    if (n_missing > 0) {
        err_class_t rc = create_missing(p, missing, n_missing, partitions, errstr, errstr_size);
        if (rc != ERR_OK)
            return rc;
    }

    /* The metadata may lag the creation by a moment. */
    for (int attempt = 0;; attempt++) {
        found = topics_present(p, names, n, present);
        if (found == (int) n)
            return ERR_OK;
        if (attempt >= 60 || *p->stop)
            return err_set(ERR_TRANSIENT, errstr, errstr_size,
                           "only %d of %zu topics visible in the metadata after 30 s",
                           found < 0 ? 0 : found, n);
        usleep(500000);
    }
}

void sim_kafka_msg_fill(sim_kafka_msg_t *o, const sim_options_t *opts, const sim_item_t *item)
{
    o->n_headers = 0;
    if (item->order == NULL) {
        long len;
        o->kind = (int) sim_poison_kind(item->poison);
        o->key_len = (size_t) sim_poison_id(opts, item->poison, o->key_buf, sizeof o->key_buf);
        sim_format_poison(opts, item->poison, o->value_buf, sizeof o->value_buf, &len);
        o->value = len < 0 ? NULL : o->value_buf;
        o->value_len = len < 0 ? 0 : (size_t) len;
        o->timestamp_ms = item->emit_ms;
    } else {
        o->kind = item->msg->kind;
        o->key_len = (size_t) sim_order_id(opts, item->order->index, o->key_buf, sizeof o->key_buf);
        int n = sim_format_value(opts, item->order, item->msg, o->value_buf, sizeof o->value_buf);
        o->value = o->value_buf;
        o->value_len = n < 0                              ? 0
                       : (size_t) n < sizeof o->value_buf ? (size_t) n
                                                          : sizeof o->value_buf - 1;
        o->timestamp_ms = item->msg->time_ms;
        o->n_headers = sim_format_headers(opts, item->order, item->msg, o->headers, o->header_buf,
                                          sizeof o->header_buf);
    }
    o->key = o->key_buf;
}

err_class_t sim_kafka_produce(sim_kafka_producer_t *p, const sim_kafka_msg_t *o, char *errstr,
                              size_t errstr_size)
{
    for (;;) {
        rd_kafka_headers_t *hdrs = NULL;
        if (o->n_headers > 0) {
            hdrs = rd_kafka_headers_new(o->n_headers);
            for (size_t i = 0; i < o->n_headers; i++)
                rd_kafka_header_add(hdrs, o->headers[i].name, -1, o->headers[i].value, -1);
        }
        rd_kafka_resp_err_t err;
        if (hdrs != NULL)
            err = rd_kafka_producev(
                p->rk, RD_KAFKA_V_RKT(p->topics[o->kind]), RD_KAFKA_V_KEY(o->key, o->key_len),
                RD_KAFKA_V_VALUE((void *) o->value, o->value_len),
                RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_TIMESTAMP(o->timestamp_ms),
                RD_KAFKA_V_HEADERS(hdrs), RD_KAFKA_V_END);
        else
            err = rd_kafka_producev(p->rk, RD_KAFKA_V_RKT(p->topics[o->kind]),
                                    RD_KAFKA_V_KEY(o->key, o->key_len),
                                    RD_KAFKA_V_VALUE((void *) o->value, o->value_len),
                                    RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                    RD_KAFKA_V_TIMESTAMP(o->timestamp_ms), RD_KAFKA_V_END);
        if (err == RD_KAFKA_RESP_ERR_NO_ERROR)
            return ERR_OK; /* hdrs now owned by the message */
        if (hdrs != NULL)
            rd_kafka_headers_destroy(hdrs);
        if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL)
            return err_set(ERR_FATAL, errstr, errstr_size, "producing to %s: %s",
                           rd_kafka_topic_name(p->topics[o->kind]), rd_kafka_err2str(err));
        if (*p->stop)
            return err_set(ERR_TRANSIENT, errstr, errstr_size, "interrupted");
        rd_kafka_poll(p->rk, 10); /* serve delivery reports to make room */
    }
}
