/*
 * sim_args - steward-sim's options, their checks and --help; see
 * sim_args.h.
 */
#include "sim/sim_args.h"

#include "common/err.h"
#include "common/rfc3339.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifndef STEWARD_SOURCE_DIR
#define STEWARD_SOURCE_DIR "."
#endif
#define DEFAULT_DEFINITION "definitions/examples/order_fulfilment.json"

enum {
    OPT_BROKERS = 256,
    OPT_ORDERS,
    OPT_RATE,
    OPT_TOPIC_PREFIX,
    OPT_PARTITIONS,
    OPT_SEED,
    OPT_STALL_RATE,
    OPT_DECLINE_RATE,
    OPT_STOCK_FAIL_RATE,
    OPT_DUPLICATE_RATE,
    OPT_REORDER_RATE,
    OPT_POISON,
    OPT_CLOUDEVENTS_RATE,
    OPT_TIME_SCALE,
    OPT_TIME_MODE,
    OPT_START_TIME,
    OPT_GROUND_TRUTH,
    OPT_WRITE_DEFINITION,
    OPT_DEFINITION,
    OPT_DEADLINE_SCALE,
    OPT_PLAN_ONLY,
    OPT_SINGLE_TOPIC,
    OPT_QUIET,
    OPT_ACTIVE,
    OPT_FAULT_EVERY,
    OPT_LINGER,
    OPT_AVRO_TOPIC,
    OPT_SCHEMA_REGISTRY,
    OPT_AVRO_SCHEMA_DIR,
    OPT_TYPE_HEADER,
    OPT_HELP,
};

static const struct option long_options[] = {
    {"brokers", required_argument, NULL, OPT_BROKERS},
    {"orders", required_argument, NULL, OPT_ORDERS},
    {"rate", required_argument, NULL, OPT_RATE},
    {"topic-prefix", required_argument, NULL, OPT_TOPIC_PREFIX},
    {"partitions", required_argument, NULL, OPT_PARTITIONS},
    {"seed", required_argument, NULL, OPT_SEED},
    {"stall-rate", required_argument, NULL, OPT_STALL_RATE},
    {"decline-rate", required_argument, NULL, OPT_DECLINE_RATE},
    {"stock-fail-rate", required_argument, NULL, OPT_STOCK_FAIL_RATE},
    {"duplicate-rate", required_argument, NULL, OPT_DUPLICATE_RATE},
    {"reorder-rate", required_argument, NULL, OPT_REORDER_RATE},
    {"poison", required_argument, NULL, OPT_POISON},
    {"cloudevents-rate", required_argument, NULL, OPT_CLOUDEVENTS_RATE},
    {"time-scale", required_argument, NULL, OPT_TIME_SCALE},
    {"time-mode", required_argument, NULL, OPT_TIME_MODE},
    {"start-time", required_argument, NULL, OPT_START_TIME},
    {"ground-truth", required_argument, NULL, OPT_GROUND_TRUTH},
    {"write-definition", required_argument, NULL, OPT_WRITE_DEFINITION},
    {"definition", required_argument, NULL, OPT_DEFINITION},
    {"deadline-scale", required_argument, NULL, OPT_DEADLINE_SCALE},
    {"plan-only", no_argument, NULL, OPT_PLAN_ONLY},
    {"single-topic", required_argument, NULL, OPT_SINGLE_TOPIC},
    {"quiet", no_argument, NULL, OPT_QUIET},
    {"active", no_argument, NULL, OPT_ACTIVE},
    {"fault-every", required_argument, NULL, OPT_FAULT_EVERY},
    {"linger", required_argument, NULL, OPT_LINGER},
    {"avro-topic", required_argument, NULL, OPT_AVRO_TOPIC},
    {"schema-registry", required_argument, NULL, OPT_SCHEMA_REGISTRY},
    {"avro-schema-dir", required_argument, NULL, OPT_AVRO_SCHEMA_DIR},
    {"type-header", required_argument, NULL, OPT_TYPE_HEADER},
    {"help", no_argument, NULL, OPT_HELP},
    {NULL, 0, NULL, 0},
};

static void usage(FILE *out)
{
    fputs("usage: steward-sim --brokers LIST [options]\n"
          "       steward-sim --plan-only [options]\n"
          "       steward-sim --write-definition FILE [--topic-prefix P] [--deadline-scale F]\n"
          "\n"
          "Produces the events of simulated orders (OrderPlaced, PaymentCaptured or\n"
          "PaymentDeclined, StockReserved or StockUnavailable and RefundIssued,\n"
          "ShipmentDispatched, OrderDelivered, CustomerNotified) to Kafka, keyed by\n"
          "order_id, and writes the ground truth: the orders it stalled.\n"
          "\n"
          "Kafka:\n"
          "  --brokers LIST          bootstrap servers (required unless --plan-only)\n"
          "  --topic-prefix P        topics are P + the definition's (\"orders\", ...)\n"
          "  --single-topic NAME     every event on topic NAME, keyed by order_id\n"
          "  --partitions N          partitions of topics it creates (default 3);\n"
          "                          existing topics are kept as they are\n"
          "  --avro-topic NAME       the events on topic NAME (prefix included) in Avro,\n"
          "                          Confluent wire format: magic 0, the schema id (4 bytes,\n"
          "                          big-endian), the binary record; each event type's\n"
          "                          record schema is registered under subject NAME-value\n"
          "                          (--schema-registry) and/or written as <id>.avsc\n"
          "                          (--avro-schema-dir); malformed (--poison) messages\n"
          "                          stay as they are\n"
          "  --schema-registry URL   a Confluent-compatible schema registry's API root\n"
          "                          (e.g. http://127.0.0.1:8081), for --avro-topic\n"
          "  --avro-schema-dir DIR   writes DIR/<id>.avsc per schema, for --avro-topic;\n"
          "                          without --schema-registry the ids count from 1\n"
          "  --type-header TOPIC=HEADER\n"
          "                          the events on TOPIC (prefix included) carry their\n"
          "                          type in Kafka header HEADER, not in the value's\n"
          "                          \"type\", and are never CloudEvents; repeatable, one\n"
          "                          per topic\n"
          "Orders:\n"
          "  --orders N              how many (default 1000)\n"
          "  --rate R                orders per second; 0 = as fast as possible (default 0)\n"
          "  --seed S                random seed (default: from the clock; printed)\n"
          "  --stall-rate F          share that stops before a step (default 0.004)\n"
          "  --decline-rate F        share whose payment is declined (default 0.03)\n"
          "  --stock-fail-rate F     share of paid orders without stock, refunded (default 0.02)\n"
          "  --duplicate-rate F      share of events sent twice, same id (default 0.01)\n"
          "  --reorder-rate F        share of events sent before the previous one (default 0.01)\n"
          "  --cloudevents-rate F    share of events in CloudEvents binary mode (default 0)\n"
          "  --poison N              malformed messages spread over the run (default 0)\n"
          "Time:\n"
          "  --time-scale F          multiplies every latency (default 1; e.g. 0.0005)\n"
          "  --time-mode real|virtual\n"
          "                          real: send each event when its time comes (default);\n"
          "                          virtual: send everything at once, the Kafka timestamp\n"
          "                          set to the event time\n"
          "  --start-time RFC3339    virtual time's first order (default: now minus the span)\n"
          "Files:\n"
          "  --ground-truth FILE     JSON lines: one per stalled order, then a summary\n"
          "  --definition SRC        the definition to simulate (default: the example\n"
          "                          " DEFAULT_DEFINITION ")\n"
          "  --write-definition FILE write SRC with the topic prefix (or single topic) and\n"
          "                          every duration times --deadline-scale, then exit\n"
          "                          unless --brokers or --plan-only is given\n"
          "  --deadline-scale F      for --write-definition (default 1); latencies are cut\n"
          "                          at 80% of each deadline times F (default: times the\n"
          "                          time scale), so only stalled orders miss deadlines\n"
          "Active mode (--active):\n"
          "  --active                the services answer the commands of an active\n"
          "                          definition (--definition) instead of choreographing:\n"
          "                          the orders service places the orders, and each\n"
          "                          command is answered with its events (the fencing\n"
          "                          token echoed where the definition says), with faults;\n"
          "                          the ground truth gets one line per order (its fault\n"
          "                          and expected end), per command received and per\n"
          "                          stale reply sent\n"
          "  --fault-every N         every Nth order gets a fault, in rotation: its first\n"
          "                          command dropped, a service that never answers, a\n"
          "                          picker whose lease runs out, a reply sent twice under\n"
          "                          two ids, a picker who answers after the step was\n"
          "                          left (default 4; 0: none)\n"
          "  --linger S              keep answering S seconds after the last command\n"
          "                          (default 30; SIGTERM ends it sooner, cleanly)\n"
          "Other:\n"
          "  --plan-only             print the messages as JSON lines instead of producing\n"
          "  --quiet                 no progress on stderr\n"
          "  --help                  this text\n",
          out);
}

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...)
{
    va_list ap;
    fputs("steward-sim: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs(" (see --help)\n", stderr);
    return EXIT_USAGE;
}

/* A whole-string number in [min, max]; false when it is not. */
static bool parse_double(const char *text, double min, double max, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno != 0 || end == text || *end != '\0' || !(v >= min && v <= max))
        return false;
    *out = v;
    return true;
}

static bool parse_u64(const char *text, uint64_t max, uint64_t *out)
{
    char *end;
    errno = 0;
    if (*text == '-' || *text == '\0')
        return false;
    unsigned long long v = strtoull(text, &end, 0);
    if (errno != 0 || *end != '\0' || v > max)
        return false;
    *out = v;
    return true;
}

/* A seed from the clock and the pid: two runs started in the same second
 * still differ. */
static uint64_t clock_seed(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t) ts.tv_sec * 1000000000ULL + (uint64_t) ts.tv_nsec;
    x ^= (uint64_t) getpid() << 32;
    x ^= x >> 33;
    x *= 0xFF51AFD7ED558CCDULL;
    x ^= x >> 33;
    return x & 0xFFFFFFFFFFFFULL; /* 12 hex digits keep the ids short */
}

int sim_args_parse(int argc, char **argv, sim_args_t *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    sim_options_init(&cfg->sim);
    cfg->topic_prefix = "";
    cfg->partitions = 3;
    cfg->deadline_scale = 1.0;
    cfg->fault_every = 4;
    cfg->linger_s = 30.0;

    int c;
    uint64_t u;
    double d;
    while ((c = getopt_long(argc, argv, "", long_options, NULL)) != -1) {
        const char *name = NULL;
        for (const struct option *o = long_options; o->name; o++)
            if (o->val == c)
                name = o->name;
        switch (c) {
        case OPT_BROKERS:
            cfg->brokers = optarg;
            break;
        case OPT_ORDERS:
            if (!parse_u64(optarg, UINT32_MAX - 1, &u) || u == 0)
                return usage_error("--%s: expected a whole number from 1, not '%s'", name, optarg);
            cfg->sim.orders = (uint32_t) u;
            break;
        case OPT_RATE:
            if (!parse_double(optarg, 0.0, 1e9, &cfg->sim.rate))
                return usage_error("--%s: expected orders per second (0 or more), not '%s'", name,
                                   optarg);
            break;
        case OPT_TOPIC_PREFIX:
            cfg->topic_prefix = optarg;
            break;
        case OPT_PARTITIONS:
            if (!parse_u64(optarg, 100000, &u) || u == 0)
                return usage_error("--%s: expected a whole number from 1, not '%s'", name, optarg);
            cfg->partitions = (int) u;
            break;
        case OPT_SEED:
            if (!parse_u64(optarg, UINT64_MAX, &cfg->sim.seed))
                return usage_error("--%s: expected a non-negative integer, not '%s'", name, optarg);
            cfg->seed_given = true;
            break;
        case OPT_STALL_RATE:
        case OPT_DECLINE_RATE:
        case OPT_STOCK_FAIL_RATE:
        case OPT_DUPLICATE_RATE:
        case OPT_REORDER_RATE:
        case OPT_CLOUDEVENTS_RATE:
            if (!parse_double(optarg, 0.0, 1.0, &d))
                return usage_error("--%s: expected a share between 0 and 1, not '%s'", name,
                                   optarg);
            *(c == OPT_STALL_RATE        ? &cfg->sim.stall_rate
              : c == OPT_DECLINE_RATE    ? &cfg->sim.decline_rate
              : c == OPT_STOCK_FAIL_RATE ? &cfg->sim.stock_fail_rate
              : c == OPT_DUPLICATE_RATE  ? &cfg->sim.duplicate_rate
              : c == OPT_REORDER_RATE    ? &cfg->sim.reorder_rate
                                         : &cfg->sim.cloudevents_rate) = d;
            break;
        case OPT_POISON:
            if (!parse_u64(optarg, 100000000, &u))
                return usage_error("--%s: expected a whole number, not '%s'", name, optarg);
            cfg->sim.poison = (uint32_t) u;
            break;
        case OPT_TIME_SCALE:
            if (!parse_double(optarg, 1e-9, 1e6, &cfg->sim.time_scale))
                return usage_error("--%s: expected a factor above 0 (e.g. 0.0005), not '%s'", name,
                                   optarg);
            break;
        case OPT_TIME_MODE:
            if (strcmp(optarg, "real") == 0)
                cfg->sim.virtual_time = false;
            else if (strcmp(optarg, "virtual") == 0)
                cfg->sim.virtual_time = true;
            else
                return usage_error("--%s: expected 'real' or 'virtual', not '%s'", name, optarg);
            break;
        case OPT_START_TIME:
            if (!rfc3339_parse(optarg, &cfg->sim.start_ms))
                return usage_error("--%s: expected an RFC 3339 time such as "
                                   "2026-01-31T12:00:00Z, not '%s'",
                                   name, optarg);
            cfg->start_time = optarg;
            break;
        case OPT_GROUND_TRUTH:
            cfg->ground_truth = optarg;
            break;
        case OPT_WRITE_DEFINITION:
            cfg->write_definition = optarg;
            break;
        case OPT_DEFINITION:
            cfg->definition = optarg;
            break;
        case OPT_DEADLINE_SCALE:
            if (!parse_double(optarg, 1e-9, 1e6, &cfg->deadline_scale))
                return usage_error("--%s: expected a factor above 0 (e.g. 0.001), not '%s'", name,
                                   optarg);
            cfg->deadline_scale_given = true;
            break;
        case OPT_PLAN_ONLY:
            cfg->plan_only = true;
            break;
        case OPT_SINGLE_TOPIC:
            if (*optarg == '\0')
                return usage_error("--%s: expected a topic name", name);
            cfg->single_topic = optarg;
            break;
        case OPT_QUIET:
            cfg->quiet = true;
            break;
        case OPT_ACTIVE:
            cfg->active = true;
            break;
        case OPT_FAULT_EVERY:
            if (!parse_u64(optarg, UINT32_MAX, &u))
                return usage_error("--%s: expected a whole number, not '%s'", name, optarg);
            cfg->fault_every = (uint32_t) u;
            break;
        case OPT_LINGER:
            if (!parse_double(optarg, 0.0, 86400.0, &cfg->linger_s))
                return usage_error("--%s: expected seconds, not '%s'", name, optarg);
            break;
        case OPT_AVRO_TOPIC:
        case OPT_SCHEMA_REGISTRY:
        case OPT_AVRO_SCHEMA_DIR:
            if (*optarg == '\0')
                return usage_error("--%s: expected %s", name,
                                   c == OPT_AVRO_TOPIC        ? "a topic name"
                                   : c == OPT_SCHEMA_REGISTRY ? "a URL"
                                                              : "a directory");
            if (c == OPT_AVRO_TOPIC)
                cfg->avro_topic = optarg;
            else if (c == OPT_SCHEMA_REGISTRY)
                cfg->schema_registry = optarg;
            else
                cfg->avro_schema_dir = optarg;
            break;
        case OPT_TYPE_HEADER: {
            char *eq = strchr(optarg, '=');
            if (eq == NULL || eq == optarg || eq[1] == '\0')
                return usage_error("--%s: expected TOPIC=HEADER (e.g. shipping=x-event-type), "
                                   "not '%s'",
                                   name, optarg);
            *eq = '\0';
            for (size_t i = 0; i < cfg->n_type_headers; i++)
                if (strcmp(cfg->type_headers[i].topic, optarg) == 0)
                    return usage_error("--%s: topic %s given twice", name, optarg);
            if (cfg->n_type_headers == SIM_N_KINDS)
                return usage_error("--%s: at most %d topics", name, SIM_N_KINDS);
            cfg->type_headers[cfg->n_type_headers].topic = optarg;
            cfg->type_headers[cfg->n_type_headers++].header = eq + 1;
            break;
        }
        case OPT_HELP:
            usage(stdout);
            return EXIT_OK;
        default: /* getopt printed what was wrong */
            fputs("steward-sim: see --help\n", stderr);
            return EXIT_USAGE;
        }
    }
    if (optind < argc)
        return usage_error("unexpected argument '%s'", argv[optind]);
    if (cfg->start_time != NULL && !cfg->sim.virtual_time)
        return usage_error("--start-time: only with --time-mode virtual");
    if (cfg->active && (cfg->plan_only || cfg->single_topic != NULL || cfg->sim.virtual_time))
        return usage_error("--active: answers commands as they come, in real time: not with "
                           "--plan-only, --single-topic or --time-mode virtual");
    if (cfg->avro_topic != NULL && cfg->schema_registry == NULL && cfg->avro_schema_dir == NULL)
        return usage_error("--avro-topic: needs --schema-registry URL or --avro-schema-dir DIR "
                           "(where the schemas go)");
    if (cfg->avro_topic == NULL && (cfg->schema_registry != NULL || cfg->avro_schema_dir != NULL))
        return usage_error("--%s: only with --avro-topic",
                           cfg->schema_registry != NULL ? "schema-registry" : "avro-schema-dir");
    if (cfg->avro_topic != NULL && (cfg->active || cfg->plan_only))
        return usage_error("--avro-topic: produces to Kafka in choreographed mode: not with "
                           "--active or --plan-only");
    if (cfg->n_type_headers > 0 && cfg->active)
        return usage_error("--type-header: for choreographed runs: not with --active");
    if (cfg->brokers == NULL && !cfg->plan_only && cfg->write_definition == NULL)
        return usage_error("--brokers: required (or --plan-only, or --write-definition)");
    if (!cfg->seed_given)
        cfg->sim.seed = clock_seed();
    return -1;
}

const char *sim_args_definition(const sim_args_t *cfg, char *buf, size_t size)
{
    if (cfg->definition != NULL)
        return cfg->definition;
    snprintf(buf, size, "%s/%s", STEWARD_SOURCE_DIR, DEFAULT_DEFINITION);
    if (access(buf, R_OK) == 0)
        return buf;
    return DEFAULT_DEFINITION;
}
