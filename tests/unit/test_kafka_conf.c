/*
 * test_kafka_conf - each Kafka client's configuration (manager/runtime/kafka_conf.h)
 * under the one strictness rule: a property librdkafka refuses is an error
 * naming the client and the property for every client, a consumer property
 * given to a producer is accepted, and what Steward relies on wins over
 * the user's properties. No broker: rd_kafka_new() does not wait for one.
 */
#include "manager/commands/dispatcher.h"
#include "manager/runtime/kafka_conf.h"
#include "testlib.h"

#include <check.h>
#include <librdkafka/rdkafka.h>
#include <stdatomic.h>
#include <string.h>

static const kconf_client_t clients[] = {KCONF_CONSUMER, KCONF_COMMAND_PRODUCER,
                                         KCONF_DEAD_LETTER_PRODUCER, KCONF_DISCOVER};
#define N_CLIENTS (sizeof clients / sizeof clients[0])

static kconf_params_t params(const char *const *props, size_t n)
{
    return (kconf_params_t){.brokers = "127.0.0.1:1",
                            .props = props,
                            .n_props = n,
                            .client_id = "steward-test",
                            .group = "steward-test",
                            .message_timeout_ms = 30000};
}

static void assert_refused(const char *prop, const char *needle)
{
    const char *props[] = {"linger.ms=7", prop};
    for (size_t c = 0; c < N_CLIENTS; c++) {
        char errstr[1024] = "";
        kconf_params_t p = params(props, 2);
        rd_kafka_conf_t *conf = kconf_new(clients[c], &p, errstr, sizeof errstr);
        ck_assert_msg(conf == NULL, "%s took %s", kconf_client_name(clients[c]), prop);
        ck_assert_msg(tl_contains(errstr, needle) &&
                          tl_contains(errstr, kconf_client_name(clients[c])),
                      "%s: %s", kconf_client_name(clients[c]), errstr);
    }
}

START_TEST(an_unknown_property_is_refused_by_every_client)
{
    assert_refused("no.such.property=1", "kafka property no.such.property");
    /* librdkafka's reason is kept */
    assert_refused("no.such.property=1", "No such configuration property");
}
END_TEST

START_TEST(a_bad_value_is_refused_by_every_client)
{
    assert_refused("queue.buffering.max.ms=soon", "kafka property queue.buffering.max.ms");
    assert_refused("session.timeout.ms=-5", "kafka property session.timeout.ms");
}
END_TEST

START_TEST(an_entry_without_a_value_is_refused)
{
    assert_refused("linger.ms", "'linger.ms' must be name=value");
    assert_refused("=5", "'=5' must be name=value");
}
END_TEST

static atomic_int confwarns;

static void count_confwarn(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    (void) rk;
    (void) level;
    (void) buf;
    if (strcmp(fac, "CONFWARN") == 0)
        atomic_fetch_add(&confwarns, 1);
}

/* The `kafka` properties are shared: librdkafka takes a consumer property
 * on any configuration and only warns when a producer is made with it. */
START_TEST(a_consumer_property_is_accepted_by_the_producers)
{
    const char *props[] = {"fetch.min.bytes=2", "session.timeout.ms=7000",
                           "security.protocol=plaintext"};
    kconf_client_t producers[] = {KCONF_COMMAND_PRODUCER, KCONF_DEAD_LETTER_PRODUCER};
    for (size_t c = 0; c < 2; c++) {
        char errstr[1024] = "", kerr[512] = "";
        kconf_params_t p = params(props, 3);
        rd_kafka_conf_t *conf = kconf_new(producers[c], &p, errstr, sizeof errstr);
        ck_assert_msg(conf != NULL, "%s", errstr);
        atomic_store(&confwarns, 0);
        rd_kafka_conf_set_log_cb(conf, count_confwarn);
        rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, kerr, sizeof kerr);
        ck_assert_msg(rk != NULL, "%s", kerr);
        rd_kafka_destroy(rk);
        ck_assert_int_ge(atomic_load(&confwarns), 1);
    }
}
END_TEST

static void assert_value(rd_kafka_conf_t *conf, const char *name, const char *want)
{
    char value[256];
    size_t size = sizeof value;
    ck_assert_int_eq(rd_kafka_conf_get(conf, name, value, &size), RD_KAFKA_CONF_OK);
    ck_assert_msg(strcmp(value, want) == 0, "%s is %s, not %s", name, value, want);
}

/* A default gives way to the user's property; what Steward relies on is
 * set last (config.c refuses those names, but a caller's list may hold one). */
START_TEST(defaults_give_way_and_guarantees_do_not)
{
    char errstr[1024];
    const char *cprops[] = {"session.timeout.ms=7000", "enable.auto.commit=true",
                            "isolation.level=read_uncommitted"};
    kconf_params_t p = params(cprops, 3);
    rd_kafka_conf_t *conf = kconf_new(KCONF_CONSUMER, &p, errstr, sizeof errstr);
    ck_assert_msg(conf != NULL, "%s", errstr);
    assert_value(conf, "session.timeout.ms", "7000");
    assert_value(conf, "heartbeat.interval.ms", "2000");
    assert_value(conf, "client.id", "steward-test");
    assert_value(conf, "group.id", "steward-test");
    assert_value(conf, "enable.auto.commit", "false");
    assert_value(conf, "isolation.level", "read_committed");
    assert_value(conf, "partition.assignment.strategy", "range");
    rd_kafka_conf_destroy(conf);

    const char *pprops[] = {"linger.ms=20", "enable.idempotence=false", "acks=1"};
    p = params(pprops, 3);
    conf = kconf_new(KCONF_COMMAND_PRODUCER, &p, errstr, sizeof errstr);
    ck_assert_msg(conf != NULL, "%s", errstr);
    assert_value(conf, "linger.ms", "20");
    assert_value(conf, "message.timeout.ms", "30000");
    assert_value(conf, "allow.auto.create.topics", "false");
    assert_value(conf, "enable.idempotence", "true");
    assert_value(conf, "acks", "-1"); /* librdkafka's spelling of all */
    rd_kafka_conf_destroy(conf);

    p = params(NULL, 0);
    conf = kconf_new(KCONF_DISCOVER, &p, errstr, sizeof errstr);
    ck_assert_msg(conf != NULL, "%s", errstr);
    assert_value(conf, "enable.partition.eof", "true");
    assert_value(conf, "bootstrap.servers", "127.0.0.1:1");
    rd_kafka_conf_destroy(conf);
}
END_TEST

/* The command producer is made before the database is reached: a property
 * it refuses stops dispatcher_new() as a configuration error (exit 2),
 * naming the property, rather than being dropped. */
START_TEST(the_dispatcher_refuses_a_bad_property)
{
    const char *props[] = {"no.such.property=1"};
    dispatcher_config_t cfg = {.conninfo = "host=127.0.0.1 port=1 connect_timeout=1",
                               .brokers = "127.0.0.1:1",
                               .kafka_props = props,
                               .n_kafka_props = 1,
                               .timeout_ms = 30000,
                               .max_backoff_ms = 300000};
    err_class_t cls = ERR_OK;
    char errstr[1024] = "";
    dispatcher_t *d = dispatcher_new(&cfg, &cls, errstr, sizeof errstr);
    ck_assert_ptr_null(d);
    ck_assert_msg(cls == ERR_INVALID, "class %s: %s", err_class_name(cls), errstr);
    ck_assert_msg(tl_contains(errstr, "command producer") &&
                      tl_contains(errstr, "no.such.property"),
                  "%s", errstr);
}
END_TEST

Suite *kafka_conf_suite(void)
{
    Suite *s = suite_create("kafka_conf");
    TCase *tc = tcase_create("strictness");
    tcase_add_test(tc, an_unknown_property_is_refused_by_every_client);
    tcase_add_test(tc, a_bad_value_is_refused_by_every_client);
    tcase_add_test(tc, an_entry_without_a_value_is_refused);
    tcase_add_test(tc, a_consumer_property_is_accepted_by_the_producers);
    tcase_add_test(tc, defaults_give_way_and_guarantees_do_not);
    tcase_add_test(tc, the_dispatcher_refuses_a_bad_property);
    suite_add_tcase(s, tc);
    return s;
}
