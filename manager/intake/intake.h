/*
 * intake - the Kafka consumer: reads the topics the definitions name as
 * one consumer group and hands what it read to batch_apply() in
 * batches of up to batch_max messages or batch_ms milliseconds.
 *
 * Offsets live in PostgreSQL, not in Kafka: auto-commit is off, and when
 * the group assigns a partition intake claims it in steward.offsets (a new
 * epoch) and seeks to the offset stored there, whatever Kafka suggests.
 * Offsets are still committed to Kafka after each batch, for the lag tools
 * operators already use; Steward never reads them back.
 *
 * Runs on the thread that calls intake_run(); the rebalance callback runs
 * on that thread too, inside rd_kafka_consumer_poll().
 */
#ifndef STEWARD_INTAKE_H
#define STEWARD_INTAKE_H

#include "common/err.h"
#include "definitions/def.h"
#include "formats/decode.h"
#include "manager/intake/schemas.h"
#include "manager/sinks/routes.h"

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct intake intake_t;

typedef struct intake_config {
    const char *brokers;  /* bootstrap servers */
    const char *group;    /* consumer group */
    const char *conninfo; /* PostgreSQL */
    const char *replica;  /* this process's name in history and ownership_log */
    size_t batch_max;     /* messages per transaction, at most */
    int batch_ms;         /* how long a batch may gather, at most */
    /* Transactions in flight at once, each on its own connection over its
     * share of the assigned partitions (1 to INTAKE_MAX_TRANSACTIONS; 0:
     * the default). */
    size_t transactions;
    decode_limits_t limits;
    bool record_unknown; /* a rejected row (unknown_type) for undeclared events too */
    /* How long a batch awaits an instance lock held elsewhere before it
     * sets the instance aside (0: BATCH_LOCK_TIMEOUT_MS). */
    int lock_timeout_ms;
    /* Every rejected message is also produced to this topic once its batch
     * committed (at least once: a crash between the commit and the produce
     * loses nothing in steward.rejected but may skip or repeat the copy).
     * NULL or "": off. */
    const char *dead_letter_topic;
    /* How often the summary of rejected messages is logged (rejsum.h); 0:
     * never. */
    int64_t rejection_summary_ms;
    /* Extra librdkafka properties, as "name=value" strings; may be NULL. */
    const char *const *kafka_props;
    size_t n_kafka_props;
    route_table_t *routes; /* who hears of sequence alerts and resolves; borrowed */
    /* The writer schemas of confluent_avro topics (borrowed, outlives the
     * intake); NULL: none, and definitions with such a topic are refused. */
    schemas_t *schemas;
    /* Called on the intake thread about once a second, between batches: the
     * place to reload definitions (intake_set_definitions()). May be NULL. */
    void (*on_tick)(intake_t *intake, void *arg);
    void *tick_arg;
    /* A replay's window (steward backtest); 0 for none. A partition the
     * group never read starts at the first message at or after from_ms;
     * a message stamped after until_ms ends its partition's replay. */
    int64_t from_ms;
    int64_t until_ms;
} intake_config_t;

#define INTAKE_DEFAULT_BATCH_MAX    2000
#define INTAKE_DEFAULT_BATCH_MS     200
#define INTAKE_DEFAULT_TRANSACTIONS 2
#define INTAKE_MAX_TRANSACTIONS     4

/*
 * Connects to PostgreSQL, records the definitions (ERR_INVALID when a
 * recorded version's document differs) and creates the consumer
 * (ERR_INVALID for a Kafka property librdkafka refuses). `defs` is
 * borrowed and must outlive the intake. Returns NULL with the class in
 * *cls and the reason in errstr.
 */
intake_t *intake_new(const intake_config_t *cfg, const def_set_t *defs, err_class_t *cls,
                     char *errstr, size_t errstr_size);

/*
 * Consumes until *stop becomes non-zero (a signal handler sets it), then
 * finishes the batch in hand, leaves the group and returns ERR_OK. Lost
 * database connections and conflicts are retried here. A batch PostgreSQL
 * refuses for what one message carries is applied in halves until that
 * message is found; it goes to steward.rejected (database_refused) and the
 * rest commits: no message stops consumption. A batch too big for the
 * server (more instances than the lock budget, or out of memory or shared
 * memory) is committed in parts the same way, and a single message out of
 * resources is retried, never rejected. An instance whose lock another
 * session holds past lock_timeout_ms is set aside (see manager/intake/batch.h).
 * Anything else that stops consumption is returned with the reason in
 * errstr.
 */
err_class_t intake_run(intake_t *intake, volatile sig_atomic_t *stop, char *errstr,
                       size_t errstr_size);

/*
 * Switches to new definitions and routes (borrowed, as in intake_new()):
 * records them in steward.definitions first (ERR_INVALID, and nothing
 * changes, when a recorded version's document differs), then subscribes to
 * their topics. Call on the intake thread: from the on_tick callback.
 */
err_class_t intake_set_definitions(intake_t *intake, const def_set_t *defs, route_table_t *routes,
                                   char *errstr, size_t errstr_size);

/*
 * True once intake holds partitions and has read each to its end (or, with
 * until_ms, past the window) with nothing left uncommitted: a replay is
 * done. Call on the intake thread.
 */
bool intake_drained(intake_t *intake);

void intake_free(intake_t *intake); /* NULL is a no-op */

#endif
