/*
 * intake_int - private to manager/intake/: what the files of the intake
 * module share, included by them alone (intake.h is the module's whole
 * interface; nothing outside manager/intake/intake*.c includes this
 * header). The intake, the partitions it owns and its lanes, and what
 * each file holds:
 *
 *   intake.c            the consumer: setup, the poll loop, subscriptions,
 *                       caught-up detection, a replay's end
 *   intake_rebalance.c  partitions assigned (claimed) and revoked (released)
 *   intake_lanes.c      the lanes: a batch handed to its own thread while
 *                       the next one is read, and finished on the consumer's
 *   intake_retry.c      a batch committed until it lands: retries, and a
 *                       refused batch applied in parts to find the message
 *   intake_dlq.c        the dead-letter producer and the reject hook
 */
#ifndef STEWARD_INTAKE_INT_H
#define STEWARD_INTAKE_INT_H

#include "manager/intake/batch.h"
#include "manager/intake/intake.h"
#include "manager/intake/rejsum.h"
#include "manager/intake/store.h"

#include <librdkafka/rdkafka.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A partition this replica was assigned. */
typedef struct owned {
    char *topic;
    int32_t partition;
    int64_t epoch;
    bool fenced;      /* another replica claimed it; wait for the group to revoke it */
    int64_t next;     /* the offset after the last message read; < 0 before the first */
    int64_t max_ts;   /* the newest Kafka timestamp read */
    bool past_window; /* a replay read a message after until_ms: done with it */
    size_t lane;      /* the lane whose transactions carry it */
} owned_t;

/*
 * A lane commits one batch at a time on its own connection: the messages
 * it gathers, the batch committing on a thread of its own, its batch
 * context and store. The assigned partitions are dealt to the lanes in
 * turn, so each partition's messages, offsets and fence belong to one
 * lane: two lanes' transactions never write the same offsets row, and one
 * that fails or retries leaves the other's partitions in order. An
 * instance whose events come from partitions of two lanes is kept in order
 * by its advisory lock, which both transactions take.
 */
typedef struct lane {
    store_t *store;
    batch_ctx_t *batch;           /* the stages of a batch, over store */
    rd_kafka_message_t **pending; /* gathered, oldest first: room for INTAKE_LANE_BATCHES */
    size_t n_pending;
    int64_t pending_since_ms;
    struct job *job;  /* the batch being committed on its own thread; NULL when none */
    int64_t ended_ms; /* when its last batch's transaction ended, monotonic; 0 before one */
} lane_t;

/* The batches a lane gathers at most while its transaction runs: the
 * consumer keeps reading (for the other lanes) past a full batch of a busy
 * lane, and waits for that lane only once it holds this many. */
#define INTAKE_LANE_BATCHES 2

struct intake {
    rd_kafka_t *rk;
    /* Lane 0's store also claims and releases partitions and records the
     * definitions: always between batches, when no lane's job runs. */
    lane_t lanes[INTAKE_MAX_TRANSACTIONS];
    size_t n_lanes;
    /* Signalled as a lane's batch ends, so the consumer waiting for one
     * lane can hand another its next batch the moment that one is free. */
    pthread_mutex_t jobs_lock;
    pthread_cond_t job_ended;
    const def_set_t *defs; /* borrowed */
    route_table_t *routes;
    schemas_t *schemas; /* borrowed; NULL: none (no confluent_avro topic then) */ /* borrowed */
    size_t batch_max;
    int batch_ms;
    volatile sig_atomic_t *stop;

    owned_t *owned;
    size_t n_owned;

    void (*on_tick)(intake_t *, void *);
    void *tick_arg;
    int64_t from_ms, until_ms;

    err_class_t failure; /* set by the rebalance callback when it cannot go on */
    char failure_text[512];

    bool reachable;       /* the last metadata request was answered */
    bool reachable_known; /* a metadata request was made at all */

    rd_kafka_t *dlq;             /* the dead-letter producer; NULL when off */
    rd_kafka_topic_t *dlq_topic; /* its handle for the topic, destroyed before it */
    rejsum_t *rejsum;            /* the periodic summary of rejected messages */
};

/* ---- intake.c -------------------------------------------------------------- */

/* The partition this replica owns, or NULL. */
owned_t *intake_find_owned(intake_t *in, const char *topic, int32_t partition);
void intake_clear_owned(intake_t *in);
/* Sleeps up to ms, waking early when asked to stop. */
void intake_nap(intake_t *in, int ms);
/* librdkafka's log callback, for every client intake creates. */
void intake_on_log(const rd_kafka_t *rk, int level, const char *fac, const char *buf);
/* Whether intake has read all the partition holds (see intake.c). */
bool intake_caught_up(intake_t *in, const owned_t *o);

/* ---- intake_rebalance.c ---------------------------------------------------- */

void intake_on_rebalance(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                         rd_kafka_topic_partition_list_t *list, void *opaque);

/* ---- intake_lanes.c -------------------------------------------------------- */

/* Drops every lane's gathered messages; whether any lane has some. */
void intake_drop_pending(intake_t *in);
bool intake_any_pending(const intake_t *in);
/* Hands the lane's oldest pending messages, a batch at most, to a thread
 * of its own (see intake_lanes.c); the previous batch's outcome. */
err_class_t intake_flush_start(intake_t *in, lane_t *lane, char *errstr, size_t errstr_size);
/* Whether the lane's connection is free: no batch committing, or one that
 * has ended and only waits to be joined. */
bool intake_lane_free(const lane_t *lane);
/* Waits for every lane's batch; the first failure's outcome. */
err_class_t intake_finish_all(intake_t *in, char *errstr, size_t errstr_size);
/* Commits every lane's pending batch and waits for them. */
err_class_t intake_flush_all(intake_t *in, char *errstr, size_t errstr_size);

/* ---- intake_retry.c -------------------------------------------------------- */

/* batch_commit() of `prepared`, or batch_apply() of msgs when it is NULL,
 * retried until it commits, fails otherwise or intake is told to stop. */
err_class_t intake_apply_retrying(intake_t *in, lane_t *lane, const decode_input_t *msgs, size_t n,
                                  store_partition_t *parts, size_t n_parts, batch_t *prepared,
                                  batch_stats_t *stats, char *errstr, size_t errstr_size);
/* A batch refused for what some message carried, applied in parts to find
 * that message; then the watermarks moved. */
err_class_t intake_isolate(intake_t *in, lane_t *lane, const decode_input_t *msgs, size_t n,
                           store_partition_t *parts, size_t n_parts, batch_stats_t *stats,
                           char *errstr, size_t errstr_size);

/* ---- intake_dlq.c ---------------------------------------------------------- */

/* Creates the dead-letter producer and sets every lane's reject hook;
 * false with the reason in errstr. */
bool intake_dlq_new(intake_t *in, const intake_config_t *cfg, char *errstr, size_t errstr_size);
/* The reject hook of every lane (arg: the intake): counts the message for
 * the summary, and copies it to the dead-letter topic when there is one. */
void intake_on_rejected(void *arg, const decode_input_t *msg, const char *process,
                        const char *reason, const char *detail);

#endif
