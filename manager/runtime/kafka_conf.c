/*
 * kafka_conf - the librdkafka configuration of each Kafka client
 * (kafka_conf.h). A client's properties are two tables: its defaults, set
 * before the user's, and what it relies on, set after them.
 */
#include "manager/runtime/kafka_conf.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *name;
    const char *value;
} prop_t;

#define MAX_PROPS 16

const char *kconf_client_name(kconf_client_t client)
{
    switch (client) {
    case KCONF_CONSUMER:
        return "the Kafka consumer";
    case KCONF_COMMAND_PRODUCER:
        return "the command producer";
    case KCONF_DEAD_LETTER_PRODUCER:
        return "the dead-letter producer";
    case KCONF_DISCOVER:
        return "the discover consumer";
    }
    return "a Kafka client";
}

err_class_t kconf_set(rd_kafka_conf_t *conf, const char *name, const char *value, char *errstr,
                      size_t errstr_size)
{
    char kerr[512];
    if (rd_kafka_conf_set(conf, name, value, kerr, sizeof kerr) != RD_KAFKA_CONF_OK)
        return err_set(ERR_INVALID, errstr, errstr_size, "kafka property %s: %s", name, kerr);
    return ERR_OK;
}

err_class_t kconf_set_prop(rd_kafka_conf_t *conf, const char *prop, char *errstr,
                           size_t errstr_size)
{
    const char *eq = strchr(prop, '=');
    if (eq == NULL || eq == prop)
        return err_set(ERR_INVALID, errstr, errstr_size, "kafka property '%s' must be name=value",
                       prop);
    char *name = strndup(prop, (size_t) (eq - prop));
    if (name == NULL)
        return err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
    err_class_t cls = kconf_set(conf, name, eq + 1, errstr, errstr_size);
    free(name);
    return cls;
}

static err_class_t set_all(rd_kafka_conf_t *conf, const prop_t *props, size_t n, char *errstr,
                           size_t errstr_size)
{
    err_class_t cls = ERR_OK;
    for (size_t i = 0; cls == ERR_OK && i < n; i++)
        cls = kconf_set(conf, props[i].name, props[i].value, errstr, errstr_size);
    return cls;
}

rd_kafka_conf_t *kconf_new(kconf_client_t client, const kconf_params_t *p, char *errstr,
                           size_t errstr_size)
{
    prop_t before[MAX_PROPS], after[MAX_PROPS];
    size_t n_before = 0, n_after = 0;
    char timeout[24];
    const char *brokers = p->brokers != NULL ? p->brokers : "";

    switch (client) {
    case KCONF_CONSUMER:
        before[n_before++] = (prop_t){"client.id", p->client_id != NULL ? p->client_id : "steward"};
        before[n_before++] = (prop_t){"topic.metadata.refresh.interval.ms", "10000"};
        /* A replica that dies is noticed in 6 s (librdkafka's default is
         * 45 s), and its partitions taken over within about 10 s: until
         * then the process watermark, and every deadline, waits for them.
         * `kafka` properties in the config override both. */
        before[n_before++] = (prop_t){"session.timeout.ms", "6000"};
        before[n_before++] = (prop_t){"heartbeat.interval.ms", "2000"};
        /* The read-ahead. librdkafka's defaults (100,000 messages, 64 MiB,
         * 50 MB fetches) make it most of the process's memory with a
         * backlog; but a queue over its bound stops fetching for a whole
         * second, so one much smaller than a second of consumption starves
         * intake (5,000 messages did). These hold about a second at 20,000
         * events/s in bounded memory (docs/performance.md, "The batch pipeline"). */
        before[n_before++] = (prop_t){"queued.min.messages", "20000"};
        before[n_before++] = (prop_t){"queued.max.messages.kbytes", "8192"};
        before[n_before++] = (prop_t){"fetch.max.bytes", "4194304"};
        /* Offsets are Steward's own (PostgreSQL), keyed by the group; only
         * committed messages are events; and the eager range assignor is
         * the one librdkafka 2.0 gets right alongside a rebalance callback. */
        after[n_after++] = (prop_t){"bootstrap.servers", brokers};
        after[n_after++] = (prop_t){"group.id", p->group != NULL ? p->group : ""};
        after[n_after++] = (prop_t){"enable.auto.commit", "false"};
        after[n_after++] = (prop_t){"enable.auto.offset.store", "false"};
        after[n_after++] = (prop_t){"auto.offset.reset", "earliest"};
        after[n_after++] = (prop_t){"isolation.level", "read_committed"};
        after[n_after++] = (prop_t){"partition.assignment.strategy", "range"};
        break;
    case KCONF_COMMAND_PRODUCER:
        snprintf(timeout, sizeof timeout, "%" PRId64, p->message_timeout_ms);
        before[n_before++] = (prop_t){"bootstrap.servers", brokers};
        /* A command topic that does not exist is a mistake to report, not
         * a topic to create with the broker's defaults. */
        before[n_before++] = (prop_t){"allow.auto.create.topics", "false"};
        before[n_before++] = (prop_t){"message.timeout.ms", timeout};
        before[n_before++] = (prop_t){"linger.ms", "5"};
        /* What the delivery guarantee rests on is not a preference. */
        after[n_after++] = (prop_t){"enable.idempotence", "true"};
        after[n_after++] = (prop_t){"acks", "all"};
        break;
    case KCONF_DEAD_LETTER_PRODUCER:
        /* The consumer's brokers and properties (its security settings
         * apply here too). */
        before[n_before++] = (prop_t){"bootstrap.servers", brokers};
        before[n_before++] = (prop_t){"acks", "all"};
        break;
    case KCONF_DISCOVER:
        /* librdkafka wants a group.id for a consumer handle; with assign()
         * and nothing committed, no group is ever joined under it. */
        before[n_before++] = (prop_t){"bootstrap.servers", brokers};
        before[n_before++] = (prop_t){"group.id", p->group != NULL ? p->group : "steward-discover"};
        before[n_before++] = (prop_t){"enable.auto.commit", "false"};
        before[n_before++] = (prop_t){"enable.auto.offset.store", "false"};
        before[n_before++] = (prop_t){"enable.partition.eof", "true"};
        break;
    }

    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    char why[768];
    err_class_t cls = conf != NULL ? set_all(conf, before, n_before, why, sizeof why) : ERR_FATAL;
    for (size_t i = 0; cls == ERR_OK && i < p->n_props; i++)
        cls = kconf_set_prop(conf, p->props[i], why, sizeof why);
    if (cls == ERR_OK)
        cls = set_all(conf, after, n_after, why, sizeof why);
    if (cls != ERR_OK) {
        if (conf != NULL)
            rd_kafka_conf_destroy(conf);
        err_set(cls, errstr, errstr_size, "%s: %s", kconf_client_name(client),
                cls == ERR_FATAL ? "out of memory" : why);
        return NULL;
    }
    return conf;
}
