/*
 * sim_kafka - steward-sim's side of Kafka as a producer: the idempotent
 * producer and its delivery counts, the topics a run needs (the missing
 * ones created, then waited for in the metadata), and one message of the
 * plan made ready (for Kafka, or for --plan-only's line) and handed over.
 *
 * Everything runs on the main thread; delivery reports arrive inside
 * rd_kafka_poll(). A wait (a full queue, topics not yet visible) ends
 * early once *stop is set: the flag main() sets on SIGINT or SIGTERM.
 */
#ifndef STEWARD_SIM_KAFKA_H
#define STEWARD_SIM_KAFKA_H

#include "common/err.h"
#include "sim/sim.h"
#include "sim/sim_active.h"
#include "sim/sim_def.h"

#include <librdkafka/rdkafka.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>

/* The most distinct topics a run names: the events', then the commands'. */
#define SIM_KAFKA_MAX_TOPICS (SIM_N_KINDS + SIM_ACTIVE_MAX_STATES)

typedef struct sim_kafka_producer {
    rd_kafka_t *rk;
    rd_kafka_topic_t *topics[SIM_N_KINDS]; /* by kind; shared handles for shared topics */
    uint64_t delivered;
    uint64_t failed;
    const volatile sig_atomic_t *stop; /* borrowed: main()'s signal flag */
} sim_kafka_producer_t;

/* A new idempotent producer, or NULL with the reason in errstr. `stop` is
 * borrowed for the producer's life. Its topic handles come later
 * (sim_kafka_producer_topics()): a handle makes librdkafka ask for the
 * topic's metadata, and a broker that creates topics on demand would then
 * create it with its own partition count before ours. */
sim_kafka_producer_t *sim_kafka_producer_new(const char *brokers, const volatile sig_atomic_t *stop,
                                             char *errstr, size_t errstr_size);
void sim_kafka_producer_free(sim_kafka_producer_t *p); /* NULL is a no-op */

/* Opens a topic handle per kind (one per distinct topic); ERR_OK or
 * ERR_FATAL with the reason. */
err_class_t sim_kafka_producer_topics(sim_kafka_producer_t *p, const sim_def_flow_t *flow,
                                      char *errstr, size_t errstr_size);

/*
 * Creates the topics all[0..n_all) that do not exist (a name given twice
 * counts once, SIM_KAFKA_MAX_TOPICS at most), with `partitions` each, and
 * waits (up to 30 s) until the metadata shows every one. Existing topics
 * are kept as they are, and when all exist no admin request is sent at
 * all (a cluster may refuse them: librdkafka's mock cluster, an ACL).
 * Returns ERR_OK or ERR_TRANSIENT with the reason.
 */
err_class_t sim_kafka_create_topics(sim_kafka_producer_t *p, const char *const *all, size_t n_all,
                                    int partitions, char *errstr, size_t errstr_size);

/* A message, ready for Kafka or for --plan-only's line. */
typedef struct sim_kafka_msg {
    int kind; /* sim_kind_t: picks the topic */
    const char *key;
    size_t key_len;
    const char *value; /* NULL for a tombstone */
    size_t value_len;
    int64_t timestamp_ms;
    sim_header_t headers[SIM_MAX_HEADERS];
    size_t n_headers;

    char key_buf[96];
    char value_buf[1024];
    char header_buf[256];
} sim_kafka_msg_t;

/* Fills o with the message of one item of the schedule (an order's event
 * or a poison message); its pointers point into o. */
void sim_kafka_msg_fill(sim_kafka_msg_t *o, const sim_options_t *opts, const sim_item_t *item);

/* Hands one message to librdkafka, to its kind's topic, waiting while its
 * queue is full. Returns ERR_OK, or ERR_TRANSIENT (stopping) / ERR_FATAL
 * with the reason. */
err_class_t sim_kafka_produce(sim_kafka_producer_t *p, const sim_kafka_msg_t *o, char *errstr,
                              size_t errstr_size);

#endif
