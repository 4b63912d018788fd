/*
 * kafka_conf - the librdkafka configuration of each of Steward's Kafka
 * clients, built one way: Steward's defaults, then the user's `kafka`
 * properties ("name=value", which may override a default), then the
 * properties Steward relies on, set last over anything given (config.c
 * refuses those names already, so a user never loses one silently).
 *
 * The clients: the consumer (intake), the command producer (dispatcher),
 * the dead-letter producer (intake) and the reader of `steward discover`.
 *
 * One strictness rule for every client: a property librdkafka refuses (an
 * unknown name, a value it cannot take) is ERR_INVALID naming the client,
 * the property and librdkafka's reason; nothing is skipped. The `kafka`
 * properties are one list for all clients, so a property of the other
 * kind (a consumer property given to a producer) is not refused:
 * librdkafka's rd_kafka_conf_set() knows no client type and takes it
 * (RD_KAFKA_CONF_OK); rd_kafka_new() then only logs, with facility
 * CONFWARN, that the client ignores it.
 *
 * Any thread; no state.
 */
#ifndef STEWARD_KAFKA_CONF_H
#define STEWARD_KAFKA_CONF_H

#include "common/err.h"

#include <librdkafka/rdkafka.h>
#include <stddef.h>
#include <stdint.h>

typedef enum kconf_client {
    KCONF_CONSUMER,             /* intake's consumer in the group */
    KCONF_COMMAND_PRODUCER,     /* the dispatcher's idempotent producer */
    KCONF_DEAD_LETTER_PRODUCER, /* intake's copy of rejected messages */
    KCONF_DISCOVER              /* steward discover: assign() without commits */
} kconf_client_t;

typedef struct kconf_params {
    const char *brokers;      /* bootstrap servers */
    const char *const *props; /* the user's "name=value", in order; borrowed */
    size_t n_props;
    const char *client_id;      /* KCONF_CONSUMER: client.id */
    const char *group;          /* KCONF_CONSUMER, KCONF_DISCOVER: group.id */
    int64_t message_timeout_ms; /* KCONF_COMMAND_PRODUCER: message.timeout.ms */
} kconf_params_t;

/* The client as messages name it ("the command producer", ...); never NULL. */
const char *kconf_client_name(kconf_client_t client);

/*
 * Returns a new configuration for `client` (the caller adds its callbacks
 * and hands it to rd_kafka_new(), or frees it with rd_kafka_conf_destroy()),
 * or NULL with the reason in errstr: a property refused (ERR_INVALID's
 * "<client>: kafka property NAME: <librdkafka's reason>", or the entry
 * that is not name=value), else out of memory.
 */
rd_kafka_conf_t *kconf_new(kconf_client_t client, const kconf_params_t *params, char *errstr,
                           size_t errstr_size);

/*
 * Sets one property. Returns ERR_OK, or ERR_INVALID with "kafka property
 * NAME: <librdkafka's reason>" in errstr (conf keeps its earlier value).
 */
err_class_t kconf_set(rd_kafka_conf_t *conf, const char *name, const char *value, char *errstr,
                      size_t errstr_size);

/* Sets one "name=value" property as kconf_set() does; ERR_INVALID too when
 * there is no '=' or no name. */
err_class_t kconf_set_prop(rd_kafka_conf_t *conf, const char *prop, char *errstr,
                           size_t errstr_size);

#endif
