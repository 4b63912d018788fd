/*
 * intake_dlq - the dead-letter topic: a producer beside the consumer, and
 * the reject hook that copies each rejected message to the topic once its
 * batch committed (at least once; steward.rejected keeps every one), and
 * the count of each for the summary of rejected messages (rejsum.h).
 */
#include "manager/intake/intake_int.h"

#include "common/log.h"
#include "manager/runtime/kafka_conf.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void on_dlq_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void) rk;
    (void) opaque;
    if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR)
        LOG_LIMITED(LOG_LEVEL_WARN, "dlq-delivery", 5000,
                    "a rejected message could not be copied to the dead-letter topic (it stays "
                    "in steward.rejected)",
                    "error", rd_kafka_err2str(m->err));
}

/*
 * The reject hook: copies a rejected message to the dead-letter topic
 * with its key, value and headers, plus Kafka Connect's error headers
 * (__connect.errors.topic, .partition, .offset, .exception.class.name =
 * the reason, .exception.message = the detail) and steward.process when
 * only one process rejected it. Runs on the intake thread after COMMIT.
 */
static void to_dead_letter(intake_t *in, const decode_input_t *msg, const char *process,
                           const char *reason, const char *detail)
{
    rd_kafka_headers_t *hdrs = rd_kafka_headers_new(msg->n_headers + 6);
    char partition[16], offset[24];

    for (size_t i = 0; i < msg->n_headers; i++)
        rd_kafka_header_add(hdrs, msg->headers[i].name, -1, msg->headers[i].value,
                            (ssize_t) msg->headers[i].len);
    snprintf(partition, sizeof partition, "%" PRId32, msg->partition);
    snprintf(offset, sizeof offset, "%" PRId64, msg->offset);
    rd_kafka_header_add(hdrs, "__connect.errors.topic", -1, msg->topic, -1);
    rd_kafka_header_add(hdrs, "__connect.errors.partition", -1, partition, -1);
    rd_kafka_header_add(hdrs, "__connect.errors.offset", -1, offset, -1);
    rd_kafka_header_add(hdrs, "__connect.errors.exception.class.name", -1, reason, -1);
    rd_kafka_header_add(hdrs, "__connect.errors.exception.message", -1, detail ? detail : "", -1);
    if (process != NULL)
        rd_kafka_header_add(hdrs, "steward.process", -1, process, -1);

    rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR;
    for (int attempt = 0; attempt < 2; attempt++) {
        err = rd_kafka_producev(in->dlq, RD_KAFKA_V_RKT(in->dlq_topic),
                                RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                RD_KAFKA_V_KEY(msg->key, msg->key_len),
                                RD_KAFKA_V_VALUE((void *) msg->value, msg->value_len),
                                RD_KAFKA_V_HEADERS(hdrs), RD_KAFKA_V_END);
        if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL)
            break;
        rd_kafka_poll(in->dlq, 1000); /* make room, once */
    }
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        rd_kafka_headers_destroy(hdrs); /* not taken on failure */
        LOG_LIMITED(LOG_LEVEL_WARN, "dlq-produce", 5000,
                    "a rejected message could not be copied to the dead-letter topic (it stays "
                    "in steward.rejected)",
                    "error", rd_kafka_err2str(err));
    }
    rd_kafka_poll(in->dlq, 0);
}

/*
 * Creates the dead-letter producer with the consumer's brokers and
 * properties, and its handle for the topic. Produced by name, a message to
 * a topic the producer has no metadata for waits for librdkafka's scan of
 * unknown topics, once a second; the handle makes the producer ask for the
 * topic's leader as soon as it connects, so the first dead letter does not
 * wait. Returns false with the reason in errstr.
 */
bool intake_dlq_new(intake_t *in, const intake_config_t *cfg, char *errstr, size_t errstr_size)
{
    kconf_params_t kp = {
        .brokers = cfg->brokers, .props = cfg->kafka_props, .n_props = cfg->n_kafka_props};
    rd_kafka_conf_t *conf = kconf_new(KCONF_DEAD_LETTER_PRODUCER, &kp, errstr, errstr_size);
    char kerr[512];

    if (conf == NULL)
        return false;
    rd_kafka_conf_set_log_cb(conf, intake_on_log);
    rd_kafka_conf_set_dr_msg_cb(conf, on_dlq_delivery);
    in->dlq = rd_kafka_new(RD_KAFKA_PRODUCER, conf, kerr, sizeof kerr);
    if (in->dlq == NULL) {
        rd_kafka_conf_destroy(conf);
        err_set(ERR_INVALID, errstr, errstr_size, "cannot create the dead-letter producer: %s",
                kerr);
        return false;
    }
    in->dlq_topic = rd_kafka_topic_new(in->dlq, cfg->dead_letter_topic, NULL);
    if (in->dlq_topic == NULL) {
        err_set(ERR_INVALID, errstr, errstr_size, "intake.dead_letter_topic %s: %s",
                cfg->dead_letter_topic, rd_kafka_err2str(rd_kafka_last_error()));
        return false;
    }
    return true;
}

void intake_on_rejected(void *arg, const decode_input_t *msg, const char *process,
                        const char *reason, const char *detail)
{
    intake_t *in = arg;
    rejsum_add(in->rejsum, msg->topic, reason, detail);
    if (in->dlq != NULL)
        to_dead_letter(in, msg, process, reason, detail);
}
