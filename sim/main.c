/*
 * steward-sim - produces the events of simulated orders of the six-service
 * order-fulfilment flow to Kafka, and writes the ground truth a test
 * compares Steward's alerts with.
 *
 * sim.c plans (which events, when, in which order); this file parses the
 * options, reads the definition, creates the topics, paces the messages
 * (by the wall clock in real time; as fast as possible in virtual time,
 * the Kafka timestamp then carrying the event time) and writes the ground
 * truth: one line per stalled order, written when its last message has
 * been handed to the producer, and a summary line at the end.
 *
 * With --active it is the other side of an active process instead
 * (sim_active.h): it places the orders on schedule, consumes the command
 * topics, and answers each command with the replies the responder plans,
 * when they are due; its ground truth holds one line per order (its fault
 * and expected end), per command received and per stale reply sent. It
 * runs until --linger seconds pass without work, or until SIGTERM, which
 * is how `steward demo --active` ends it (exit 0).
 *
 * Exit codes: 0 done, 1 a message failed to deliver (or Kafka, a file,
 * an interrupt), 2 usage.
 */
#include "common/err.h"
#include "common/rfc3339.h"
#include "definitions/def.h"
#include "sim/sim.h"
#include "sim/sim_active.h"
#include "sim/sim_def.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <librdkafka/rdkafka.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifndef STEWARD_SOURCE_DIR
#define STEWARD_SOURCE_DIR "."
#endif
#define DEFAULT_DEFINITION "definitions/examples/order_fulfilment.json"

/* The one piece of global state: set by SIGINT/SIGTERM, read by the loop. */
static volatile sig_atomic_t stop_requested;

static void on_signal(int sig)
{
    (void) sig;
    stop_requested = 1;
}

/* ---- options --------------------------------------------------------- */

typedef struct config {
    sim_options_t sim;
    const char *brokers;
    const char *topic_prefix;
    int partitions;
    bool seed_given;
    const char *start_time; /* virtual time only */
    const char *ground_truth;
    const char *write_definition;
    const char *definition;
    double deadline_scale;
    bool deadline_scale_given;
    bool plan_only;
    const char *single_topic;
    bool quiet;
    /* --active: answer the commands of an active definition. */
    bool active;
    uint32_t fault_every;
    double linger_s;
} config_t;

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
          "                          picker whose lease runs out (default 4; 0: none)\n"
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

/* Parses argv into cfg. Returns -1 to go on, else the exit code. */
static int parse_args(int argc, char **argv, config_t *cfg)
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
    if (cfg->brokers == NULL && !cfg->plan_only && cfg->write_definition == NULL)
        return usage_error("--brokers: required (or --plan-only, or --write-definition)");
    if (!cfg->seed_given)
        cfg->sim.seed = clock_seed();
    return -1;
}

/* ---- small helpers ----------------------------------------------------- */

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

/* Writes s as a JSON string; bytes that are not printable ASCII (poison's
 * invalid UTF-8 among them) become \u00XX, so every line stays JSON. */
static void json_put_string(FILE *out, const char *s, size_t len)
{
    putc('"', out);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char) s[i];
        if (c == '"' || c == '\\')
            fprintf(out, "\\%c", c);
        else if (c < 0x20 || c >= 0x7F)
            fprintf(out, "\\u%04x", c);
        else
            putc(c, out);
    }
    putc('"', out);
}

/* The definition's path: --definition, else the example in the source
 * tree, else the example relative to the working directory. */
static const char *definition_path(const config_t *cfg, char *buf, size_t size)
{
    if (cfg->definition != NULL)
        return cfg->definition;
    snprintf(buf, size, "%s/%s", STEWARD_SOURCE_DIR, DEFAULT_DEFINITION);
    if (access(buf, R_OK) == 0)
        return buf;
    return DEFAULT_DEFINITION;
}

/* Writes the rewritten definition; returns an exit code. */
static int write_definition(const config_t *cfg, const char *src)
{
    json_error_t jerr;
    char err[512];
    json_t *doc = json_load_file(src, 0, &jerr);
    if (doc == NULL) {
        fprintf(stderr, "steward-sim: --definition %s: %s (line %d)\n", src, jerr.text, jerr.line);
        return EXIT_USAGE;
    }
    int rc = EXIT_OK;
    char *text = NULL;
    if (sim_def_rewrite(doc, cfg->topic_prefix, cfg->single_topic, cfg->deadline_scale, err,
                        sizeof err) != ERR_OK) {
        fprintf(stderr, "steward-sim: --definition %s: %s\n", src, err);
        rc = EXIT_USAGE;
        goto done;
    }
    text = json_dumps(doc, JSON_INDENT(2));
    if (text == NULL) {
        fprintf(stderr, "steward-sim: out of memory\n");
        rc = EXIT_RUNTIME;
        goto done;
    }

    /* What we write must load: a prefix with a character Kafka refuses
     * would otherwise surface only when Steward starts. */
    def_problems_t problems = {0};
    def_t *check = def_load_json(text, strlen(text), cfg->write_definition, &problems);
    if (check == NULL) {
        for (size_t i = 0; i < problems.n; i++)
            fprintf(stderr, "steward-sim: --write-definition: %s: %s\n", problems.items[i].pointer,
                    problems.items[i].message);
        def_problems_clear(&problems);
        rc = EXIT_USAGE;
        goto done;
    }
    def_free(check);

    FILE *f = fopen(cfg->write_definition, "w");
    if (f == NULL || fputs(text, f) == EOF || fputc('\n', f) == EOF) {
        fprintf(stderr, "steward-sim: --write-definition %s: %s\n", cfg->write_definition,
                strerror(errno));
        rc = EXIT_RUNTIME;
    }
    if (f != NULL && fclose(f) != 0 && rc == EXIT_OK) {
        fprintf(stderr, "steward-sim: --write-definition %s: %s\n", cfg->write_definition,
                strerror(errno));
        rc = EXIT_RUNTIME;
    }

done:
    free(text);
    json_decref(doc);
    return rc;
}

/* ---- Kafka --------------------------------------------------------------- */

#define SIM_MAX_TOPICS (SIM_N_KINDS + SIM_ACTIVE_MAX_STATES)

typedef struct producer {
    rd_kafka_t *rk;
    rd_kafka_topic_t *topics[SIM_N_KINDS]; /* by kind; shared handles for shared topics */
    uint64_t delivered;
    uint64_t failed;
} producer_t;

/* Delivery reports; runs on the main thread, inside rd_kafka_poll(). */
static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void) rk;
    producer_t *p = opaque;
    if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
        p->delivered++;
        return;
    }
    if (p->failed++ < 5)
        fprintf(stderr, "steward-sim: delivery to %s failed: %s\n", rd_kafka_topic_name(m->rkt),
                rd_kafka_err2str(m->err));
}

static void producer_free(producer_t *p)
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

/* A new idempotent producer, or NULL with the reason in errstr. Its topic
 * handles come later (producer_topics()): a handle makes librdkafka ask
 * for the topic's metadata, and a broker that creates topics on demand
 * would then create it with its own partition count before ours. */
static producer_t *producer_new(const char *brokers, char *errstr, size_t errstr_size)
{
    producer_t *p = calloc(1, sizeof *p);
    if (p == NULL) {
        snprintf(errstr, errstr_size, "out of memory");
        return NULL;
    }
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
        /* create_topics() made them, with --partitions. */
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
    producer_free(p);
    return NULL;
}

/* Opens a topic handle per kind (one per distinct topic); ERR_OK or
 * ERR_FATAL with the reason. */
static err_class_t producer_topics(producer_t *p, const sim_def_flow_t *flow, char *errstr,
                                   size_t errstr_size)
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
static int topics_present(producer_t *p, const char *const *names, size_t n, bool *present)
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
static err_class_t create_missing(producer_t *p, const char *const *names, size_t n, int partitions,
                                  char *errstr, size_t errstr_size)
{
    err_class_t rc = ERR_OK;
    rd_kafka_NewTopic_t *new_topics[SIM_MAX_TOPICS] = {0};
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

/*
 * Creates the topics names[0..n) that do not exist, with `partitions` each,
 * and waits (up to 30 s) until the metadata shows every one. Existing
 * topics are kept as they are, and when all exist no admin request is
 * sent at all (a cluster may refuse them: librdkafka's mock cluster, an
 * ACL). Returns ERR_OK or ERR_TRANSIENT with the reason.
 */
static err_class_t create_topics(producer_t *p, const char *const *all, size_t n_all,
                                 int partitions, char *errstr, size_t errstr_size)
{
    const char *names[SIM_MAX_TOPICS] = {0}, *missing[SIM_MAX_TOPICS] = {0};
    bool present[SIM_MAX_TOPICS];
    size_t n = 0, n_missing = 0;
    for (size_t k = 0; k < n_all && n < SIM_MAX_TOPICS; k++) {
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
        if (attempt >= 60 || stop_requested)
            return err_set(ERR_TRANSIENT, errstr, errstr_size,
                           "only %d of %zu topics visible in the metadata after 30 s",
                           found < 0 ? 0 : found, n);
        usleep(500000);
    }
}

/* ---- one message ------------------------------------------------------- */

/* A message, ready for Kafka or for --plan-only's line. */
typedef struct outgoing {
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
} outgoing_t;

static void outgoing_fill(outgoing_t *o, const sim_options_t *opts, const sim_item_t *item)
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

/* Hands one message to librdkafka, waiting while its queue is full.
 * Returns ERR_OK, or ERR_TRANSIENT (stopping) / ERR_FATAL with the reason. */
static err_class_t produce(producer_t *p, const outgoing_t *o, char *errstr, size_t errstr_size)
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
        if (stop_requested)
            return err_set(ERR_TRANSIENT, errstr, errstr_size, "interrupted");
        rd_kafka_poll(p->rk, 10); /* serve delivery reports to make room */
    }
}

/* --plan-only's line for one message. */
static void print_plan_line(FILE *out, const sim_options_t *opts, const sim_def_flow_t *flow,
                            const sim_item_t *item, const outgoing_t *o)
{
    char emit[40], time[40], id[80];
    fprintf(out, "{\"emit\":\"%s\",\"time\":\"%s\",\"timestamp\":%" PRId64 ",\"topic\":",
            sim_format_time(item->emit_ms, emit, sizeof emit),
            sim_format_time(o->timestamp_ms, time, sizeof time), o->timestamp_ms);
    json_put_string(out, flow->topic[o->kind], strlen(flow->topic[o->kind]));
    fputs(",\"key\":", out);
    json_put_string(out, o->key, o->key_len);
    if (item->order == NULL) {
        fprintf(out, ",\"poison\":\"%s\"",
                sim_poison_name((sim_poison_t) (item->poison % SIM_N_POISON)));
    } else {
        const sim_msg_t *m = item->msg;
        sim_event_id(opts, item->order->index, m->step, id, sizeof id);
        fprintf(out,
                ",\"type\":\"%s\",\"id\":\"%s\",\"order_id\":\"%s\",\"step\":%u,"
                "\"cloudevent\":%s,\"duplicate\":%s,\"reordered\":%s",
                sim_kind_name((sim_kind_t) m->kind), id, o->key, m->step,
                m->flags & SIM_MSG_CLOUDEVENT ? "true" : "false",
                m->flags & SIM_MSG_DUPLICATE ? "true" : "false",
                m->flags & SIM_MSG_REORDERED ? "true" : "false");
        if (o->n_headers > 0) {
            fputs(",\"headers\":{", out);
            for (size_t i = 0; i < o->n_headers; i++) {
                fputs(i ? "," : "", out);
                json_put_string(out, o->headers[i].name, strlen(o->headers[i].name));
                putc(':', out);
                json_put_string(out, o->headers[i].value, strlen(o->headers[i].value));
            }
            putc('}', out);
        }
    }
    fputs(",\"value\":", out);
    if (o->value == NULL)
        fputs("null", out);
    else
        json_put_string(out, o->value, o->value_len);
    fputs("}\n", out);
}

/* The ground-truth line of a stalled order. */
static void print_stall(FILE *out, const sim_options_t *opts, const sim_def_flow_t *flow,
                        const sim_order_t *order)
{
    char id[64], time[40];
    sim_kind_t last = sim_order_last_kind(order);
    sim_order_id(opts, order->index, id, sizeof id);
    fprintf(out,
            "{\"order_id\":\"%s\",\"state\":\"%s\",\"expected\":%s,\"last_event\":\"%s\","
            "\"last_event_time\":\"%s\"}\n",
            id, flow->state_after[last], flow->expected_after[last], sim_kind_name(last),
            sim_format_time(sim_order_last_time(order), time, sizeof time));
}

static void print_summary(FILE *out, const sim_options_t *opts, const sim_stats_t *st,
                          bool interrupted)
{
    char start[40];
    fprintf(out,
            "{\"summary\":{\"orders\":%" PRIu64 ",\"events\":%" PRIu64 ",\"stalled\":%" PRIu64
            ",\"declined\":%" PRIu64 ",\"refunded\":%" PRIu64 ",\"completed\":%" PRIu64
            ",\"duplicates\":%" PRIu64 ",\"reordered\":%" PRIu64 ",\"poison\":%" PRIu64
            ",\"cloudevents\":%" PRIu64 ",\"messages\":%" PRIu64 ",\"seed\":%" PRIu64
            ",\"start_time\":\"%s\",\"interrupted\":%s}}\n",
            st->orders, st->events, st->stalled, st->declined, st->refunded, st->completed,
            st->duplicates, st->reordered, st->poison, st->cloudevents, st->messages, opts->seed,
            sim_format_time(opts->start_ms, start, sizeof start), interrupted ? "true" : "false");
}

/* ---- the run ------------------------------------------------------------- */

typedef struct run {
    const config_t *cfg;
    const sim_def_flow_t *flow;
    sim_t *sim;
    producer_t *producer; /* NULL with --plan-only */
    FILE *truth;          /* NULL without --ground-truth */
    double started;
    double last_progress;
    uint64_t last_messages;
} run_t;

static void progress(run_t *r, bool force)
{
    double now = mono_s();
    if (r->cfg->quiet || (!force && now - r->last_progress < 1.0))
        return;
    const sim_stats_t *st = sim_stats(r->sim);
    double dt = now - r->last_progress;
    fprintf(stderr,
            "steward-sim: %" PRIu64 " messages (%.0f/s), %" PRIu64 "/%" PRIu32
            " orders started, %" PRIu64 " in flight, %" PRIu64 " stalled",
            st->messages, dt > 0 ? (double) (st->messages - r->last_messages) / dt : 0.0,
            st->orders, r->cfg->sim.orders, st->in_flight, st->stalled);
    if (r->producer != NULL)
        fprintf(stderr, ", %d queued, %" PRIu64 " failed", rd_kafka_outq_len(r->producer->rk),
                r->producer->failed);
    fputc('\n', stderr);
    r->last_progress = now;
    r->last_messages = st->messages;
}

/* Sends or prints every message. Returns an exit code. */
static int run_loop(run_t *r)
{
    const bool paced = !r->cfg->sim.virtual_time && r->producer != NULL;
    char err[512];
    outgoing_t *o = malloc(sizeof *o);
    int rc = EXIT_OK;
    unsigned tick = 0;

    if (o == NULL) {
        fprintf(stderr, "steward-sim: out of memory\n");
        return EXIT_RUNTIME;
    }
    while (!stop_requested) {
        int64_t now = wall_ms();
        int64_t next = sim_peek(r->sim, now);
        if (next == SIM_DONE)
            break;
        if (paced && next > now) {
            int64_t wait = next - now;
            rd_kafka_poll(r->producer->rk, wait > 100 ? 100 : (int) wait);
            progress(r, false);
            continue;
        }

        sim_item_t item;
        err[0] = '\0';
        if (!sim_pop(r->sim, now, &item, err, sizeof err)) {
            if (err[0] != '\0') {
                fprintf(stderr, "steward-sim: %s\n", err);
                rc = EXIT_RUNTIME;
            }
            break;
        }
        outgoing_fill(o, &r->cfg->sim, &item);
        if (r->producer != NULL) {
            if (produce(r->producer, o, err, sizeof err) != ERR_OK) {
                if (!stop_requested) {
                    fprintf(stderr, "steward-sim: %s\n", err);
                    rc = EXIT_RUNTIME;
                }
                break;
            }
        } else {
            print_plan_line(stdout, &r->cfg->sim, r->flow, &item, o);
        }
        if (item.order_done && item.order->outcome == SIM_STALLED && r->truth != NULL)
            print_stall(r->truth, &r->cfg->sim, r->flow, item.order);

        if ((++tick & 1023) == 0) {
            if (r->producer != NULL)
                rd_kafka_poll(r->producer->rk, 0);
            progress(r, false);
        }
    }
    free(o);
    return rc;
}

/* Waits until every message is acknowledged; on an interrupt, gives up
 * after 5 s. Returns how many are left. */
static int flush_all(run_t *r)
{
    double give_up = 0;
    while (rd_kafka_outq_len(r->producer->rk) > 0) {
        rd_kafka_flush(r->producer->rk, 100);
        progress(r, false);
        if (stop_requested) {
            if (give_up == 0)
                give_up = mono_s() + 5.0;
            else if (mono_s() > give_up)
                break;
        }
    }
    return rd_kafka_outq_len(r->producer->rk);
}

/* ---- active mode: the responder ------------------------------------------ */

/* A reply waiting for its emit time, on a min-heap. */
typedef struct pending {
    sim_reply_t reply;
    char key[96];
    uint64_t seq;
} pending_t;

typedef struct responder {
    const config_t *cfg;
    sim_active_model_t model;
    sim_t *sim;
    producer_t *producer;
    rd_kafka_t *consumer;
    FILE *truth;
    pending_t **heap;
    size_t n_heap, cap_heap;
    uint64_t seq;
    uint64_t commands, unreadable, replies, stale, placed;
    uint64_t faults[4];
} responder_t;

static bool pending_before(const pending_t *a, const pending_t *b)
{
    return a->reply.emit_ms < b->reply.emit_ms ||
           (a->reply.emit_ms == b->reply.emit_ms && a->seq < b->seq);
}

static bool pending_push(responder_t *r, const sim_reply_t *reply, const char *key)
{
    if (r->n_heap == r->cap_heap) {
        size_t cap = r->cap_heap ? 2 * r->cap_heap : 256;
        pending_t **h = realloc(r->heap, cap * sizeof *h);
        if (h == NULL)
            return false;
        r->heap = h;
        r->cap_heap = cap;
    }
    pending_t *p = malloc(sizeof *p);
    if (p == NULL)
        return false;
    p->reply = *reply;
    snprintf(p->key, sizeof p->key, "%s", key);
    p->seq = r->seq++;
    size_t i = r->n_heap++;
    while (i > 0 && pending_before(p, r->heap[(i - 1) / 2])) {
        r->heap[i] = r->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    r->heap[i] = p;
    return true;
}

/* Takes the earliest reply off the heap; the caller frees it. */
static pending_t *pending_pop(responder_t *r)
{
    pending_t *top = r->heap[0], *last = r->heap[--r->n_heap];
    size_t i = 0, n = r->n_heap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && pending_before(r->heap[c + 1], r->heap[c]))
            c++;
        if (!pending_before(r->heap[c], last))
            break;
        r->heap[i] = r->heap[c];
        i = c;
    }
    if (n > 0)
        r->heap[i] = last;
    return top;
}

/* The ground-truth line of an order, written when it is placed. */
static void print_expectation(responder_t *r, uint32_t index)
{
    const sim_options_t *opts = sim_options(r->sim);
    sim_order_t order;
    sim_active_plan(opts, &r->model, index, r->cfg->fault_every, &order);
    sim_fault_t fault = sim_active_fault(&r->model, index, r->cfg->fault_every);
    sim_expect_t e = sim_active_expect(&r->model, &order, fault);
    r->faults[fault.kind]++;
    if (r->truth == NULL)
        return;
    char id[64];
    sim_order_id(opts, index, id, sizeof id);
    json_t *line = json_pack(
        "{s:s, s:s, s:o, s:o, s:o, s:i}", "order_id", id, "fault", sim_fault_name(fault.kind), "at",
        fault.state >= 0 ? json_string(r->model.states[fault.state].name) : json_null(), "terminal",
        e.terminal >= 0 ? json_string(r->model.states[e.terminal].name) : json_null(), "paged_at",
        e.paged_at >= 0 ? json_string(r->model.states[e.paged_at].name) : json_null(),
        "stale_replies", (int) e.stale_replies);
    json_dumpf(line, r->truth, JSON_COMPACT);
    fputc('\n', r->truth);
    json_decref(line);
}

/* A header's value as a NUL-terminated string in buf; NULL when absent. */
static const char *header_text(rd_kafka_headers_t *hdrs, const char *name, char *buf, size_t size)
{
    const void *v;
    size_t len;
    if (hdrs == NULL ||
        rd_kafka_header_get_last(hdrs, name, &v, &len) != RD_KAFKA_RESP_ERR_NO_ERROR || v == NULL ||
        len >= size)
        return NULL;
    memcpy(buf, v, len);
    buf[len] = '\0';
    return buf;
}

/* Answers one command message: records it in the ground truth and puts
 * its replies on the heap. */
static void on_command(responder_t *r, const rd_kafka_message_t *m)
{
    rd_kafka_headers_t *hdrs = NULL;
    rd_kafka_message_headers(m, &hdrs);
    char key[96], type[64], state[64], ce_id[80], step[24], attempt[24], token[24];
    sim_command_t cmd = {0};
    size_t klen = m->key_len < sizeof key - 1 ? m->key_len : sizeof key - 1;
    memcpy(key, m->key ? m->key : "", m->key ? klen : 0);
    key[m->key ? klen : 0] = '\0';
    cmd.key = key;
    cmd.type = header_text(hdrs, "ce_type", type, sizeof type);
    cmd.state = header_text(hdrs, "ce_stewardstate", state, sizeof state);
    cmd.ce_id = header_text(hdrs, "ce_id", ce_id, sizeof ce_id);
    const char *st = header_text(hdrs, "ce_stewardstep", step, sizeof step);
    const char *at = header_text(hdrs, "ce_stewardattempt", attempt, sizeof attempt);
    const char *tk = header_text(hdrs, "ce_stewardtoken", token, sizeof token);
    cmd.step = st ? atol(st) : -1;
    cmd.attempt = at ? atol(at) : -1;
    cmd.token = tk ? atoll(tk) : 0;

    const sim_options_t *opts = sim_options(r->sim);
    uint32_t index;
    if (cmd.type == NULL || cmd.ce_id == NULL || st == NULL || at == NULL ||
        !sim_active_order_index(opts, key, &index)) {
        if (r->unreadable++ < 5)
            fprintf(stderr,
                    "steward-sim: a command on %s without the CloudEvents headers of one of "
                    "this run's orders (key '%s'); ignored\n",
                    rd_kafka_topic_name(m->rkt), key);
        return;
    }
    r->commands++;
    if (r->truth != NULL) {
        json_t *line = json_pack(
            "{s:{s:s, s:s, s:s, s:I, s:I, s:I, s:s, s:s}}", "command", "order_id", key, "type",
            cmd.type, "state", cmd.state ? cmd.state : "", "step", (json_int_t) cmd.step, "attempt",
            (json_int_t) cmd.attempt, "token", (json_int_t) cmd.token, "ce_id", cmd.ce_id, "topic",
            rd_kafka_topic_name(m->rkt));
        json_dumpf(line, r->truth, JSON_COMPACT);
        fputc('\n', r->truth);
        json_decref(line);
    }

    sim_order_t order;
    sim_active_plan(opts, &r->model, index, r->cfg->fault_every, &order);
    sim_fault_t fault = sim_active_fault(&r->model, index, r->cfg->fault_every);
    sim_reply_t out[SIM_MAX_REPLIES];
    size_t n =
        sim_active_respond(opts, &r->model, &order, fault, &cmd, wall_ms(), out, SIM_MAX_REPLIES);
    for (size_t i = 0; i < n; i++)
        if (!pending_push(r, &out[i], key))
            fprintf(stderr, "steward-sim: out of memory holding a reply\n");
}

/* Produces one due reply. */
static err_class_t send_reply(responder_t *r, const pending_t *p, char *errstr, size_t errstr_size)
{
    const sim_reply_t *reply = &p->reply;
    for (;;) {
        rd_kafka_headers_t *hdrs = NULL;
        char token[24];
        if (reply->token_header != NULL && reply->token > 0) {
            snprintf(token, sizeof token, "%lld", reply->token);
            hdrs = rd_kafka_headers_new(1);
            rd_kafka_header_add(hdrs, reply->token_header, -1, token, -1);
        }
        rd_kafka_resp_err_t err;
        if (hdrs != NULL)
            err = rd_kafka_producev(r->producer->rk, RD_KAFKA_V_TOPIC(reply->topic),
                                    RD_KAFKA_V_KEY(p->key, strlen(p->key)),
                                    RD_KAFKA_V_VALUE((void *) reply->value, reply->value_len),
                                    RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                    RD_KAFKA_V_TIMESTAMP(reply->emit_ms), RD_KAFKA_V_HEADERS(hdrs),
                                    RD_KAFKA_V_END);
        else
            err = rd_kafka_producev(r->producer->rk, RD_KAFKA_V_TOPIC(reply->topic),
                                    RD_KAFKA_V_KEY(p->key, strlen(p->key)),
                                    RD_KAFKA_V_VALUE((void *) reply->value, reply->value_len),
                                    RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                    RD_KAFKA_V_TIMESTAMP(reply->emit_ms), RD_KAFKA_V_END);
        if (err == RD_KAFKA_RESP_ERR_NO_ERROR)
            break; /* hdrs now owned by the message */
        if (hdrs != NULL)
            rd_kafka_headers_destroy(hdrs);
        if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL)
            return err_set(ERR_FATAL, errstr, errstr_size, "producing to %s: %s", reply->topic,
                           rd_kafka_err2str(err));
        if (stop_requested)
            return err_set(ERR_TRANSIENT, errstr, errstr_size, "interrupted");
        rd_kafka_poll(r->producer->rk, 10);
    }
    r->replies++;
    if (reply->stale) {
        r->stale++;
        if (r->truth != NULL) {
            json_t *line =
                json_pack("{s:{s:s, s:s, s:s, s:I}}", "stale_reply", "order_id", p->key, "event_id",
                          reply->event_id, "type", reply->type, "token", (json_int_t) reply->token);
            json_dumpf(line, r->truth, JSON_COMPACT);
            fputc('\n', r->truth);
            json_decref(line);
        }
    }
    return ERR_OK;
}

/* How many partitions `topic` has, once the cluster's metadata shows it
 * (at most timeout_ms); 0 when it does not by then. */
static int topic_partitions(rd_kafka_t *rk, const char *topic, int timeout_ms)
{
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
    int partitions = 0;
    double until = mono_s() + timeout_ms / 1000.0;
    while (rkt != NULL && partitions == 0 && mono_s() < until && !stop_requested) {
        const struct rd_kafka_metadata *md = NULL;
        if (rd_kafka_metadata(rk, 0, rkt, &md, 2000) == RD_KAFKA_RESP_ERR_NO_ERROR &&
            md->topic_cnt == 1 && md->topics[0].err == RD_KAFKA_RESP_ERR_NO_ERROR)
            partitions = md->topics[0].partition_cnt;
        if (md != NULL)
            rd_kafka_metadata_destroy(md);
        if (partitions == 0)
            usleep(200 * 1000);
    }
    if (rkt != NULL)
        rd_kafka_topic_destroy(rkt);
    return partitions;
}

/*
 * A reader of every partition of the command topics, from their beginning.
 * It joins no consumer group: the responder is their only reader, and a
 * group's first join can be held back for a whole session timeout (45 s)
 * when the coordinator keeps a member from an attempt that timed out,
 * which on a loaded machine cost every order of a demo its payment step.
 * The topics exist: the responder created them first.
 */
static rd_kafka_t *command_consumer(const config_t *cfg, const sim_active_model_t *model,
                                    char *errstr, size_t errstr_size)
{
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    /* librdkafka's consumer wants a group id even to assign; it joins
     * nothing without a subscription, and commits nothing. */
    char group[96];
    snprintf(group, sizeof group, "steward-sim-%" PRIx64 "-%ld", cfg->sim.seed, (long) getpid());
    const char *settings[][2] = {
        {"bootstrap.servers", cfg->brokers},
        {"client.id", "steward-sim-responder"},
        {"group.id", group},
        {"enable.auto.commit", "false"},
    };
    for (size_t i = 0; i < sizeof settings / sizeof settings[0]; i++)
        if (rd_kafka_conf_set(conf, settings[i][0], settings[i][1], errstr, errstr_size) !=
            RD_KAFKA_CONF_OK) {
            rd_kafka_conf_destroy(conf);
            return NULL;
        }
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, errstr_size);
    if (rk == NULL) {
        rd_kafka_conf_destroy(conf);
        return NULL;
    }
    rd_kafka_poll_set_consumer(rk);
    rd_kafka_topic_partition_list_t *parts = rd_kafka_topic_partition_list_new(32);
    bool ok = true;
    for (size_t i = 0; i < model->n_states && ok; i++) {
        const char *t = model->states[i].command_topic;
        if (t[0] == '\0' || rd_kafka_topic_partition_list_find(parts, t, 0) != NULL)
            continue;
        int n = topic_partitions(rk, t, 30000);
        if (n == 0) {
            snprintf(errstr, errstr_size, "command topic %s: no partitions within 30 s", t);
            ok = false;
        }
        for (int p = 0; p < n; p++)
            rd_kafka_topic_partition_list_add(parts, t, p)->offset = RD_KAFKA_OFFSET_BEGINNING;
    }
    rd_kafka_resp_err_t err = ok ? rd_kafka_assign(rk, parts) : RD_KAFKA_RESP_ERR_NO_ERROR;
    rd_kafka_topic_partition_list_destroy(parts);
    if (ok && err != RD_KAFKA_RESP_ERR_NO_ERROR)
        snprintf(errstr, errstr_size, "reading the command topics: %s", rd_kafka_err2str(err));
    if (!ok || err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        rd_kafka_destroy(rk);
        return NULL;
    }
    return rk;
}

/* The responder's loop: places the orders on schedule, answers commands,
 * sends replies when due; ends --linger seconds after the last order was
 * placed and the last command answered, or on SIGTERM. Returns an exit
 * code. */
static int active_loop(responder_t *r)
{
    char err[512];
    outgoing_t *o = malloc(sizeof *o);
    int rc = EXIT_OK;
    double last_activity = mono_s(), last_progress = mono_s();
    if (o == NULL)
        return EXIT_RUNTIME;

    while (!stop_requested) {
        int64_t now = wall_ms();
        /* The orders service: OrderPlaced (and poison) on schedule; the
         * rest of each order's plan is the responder's to send. */
        while (sim_peek(r->sim, now) <= now) {
            sim_item_t item;
            err[0] = '\0';
            if (!sim_pop(r->sim, now, &item, err, sizeof err)) {
                if (err[0] != '\0') {
                    fprintf(stderr, "steward-sim: %s\n", err);
                    rc = EXIT_RUNTIME;
                }
                break;
            }
            if (item.order != NULL && item.msg->kind != SIM_ORDER_PLACED)
                continue;
            outgoing_fill(o, sim_options(r->sim), &item);
            o->timestamp_ms = now;
            if (produce(r->producer, o, err, sizeof err) != ERR_OK) {
                fprintf(stderr, "steward-sim: %s\n", err);
                rc = EXIT_RUNTIME;
                goto done;
            }
            if (item.order != NULL && !(item.msg->flags & SIM_MSG_DUPLICATE)) {
                print_expectation(r, item.order->index);
                r->placed++;
            }
            last_activity = mono_s();
        }
        while (r->n_heap > 0 && r->heap[0]->reply.emit_ms <= now) {
            pending_t *p = pending_pop(r);
            err_class_t sent = send_reply(r, p, err, sizeof err);
            free(p);
            if (sent != ERR_OK) {
                fprintf(stderr, "steward-sim: %s\n", err);
                rc = EXIT_RUNTIME;
                goto done;
            }
            last_activity = mono_s();
        }
        rd_kafka_poll(r->producer->rk, 0);

        int64_t next = sim_peek(r->sim, now);
        if (r->n_heap > 0 && r->heap[0]->reply.emit_ms < next)
            next = r->heap[0]->reply.emit_ms;
        int wait = next <= now ? 0 : next - now > 50 ? 50 : (int) (next - now);
        rd_kafka_message_t *m = rd_kafka_consumer_poll(r->consumer, wait);
        if (m != NULL) {
            if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
                on_command(r, m);
                last_activity = mono_s();
            } else if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF &&
                       m->err != RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART && !r->cfg->quiet) {
                fprintf(stderr, "steward-sim: reading commands: %s\n", rd_kafka_message_errstr(m));
            }
            rd_kafka_message_destroy(m);
        }

        if (sim_peek(r->sim, now) == SIM_DONE && r->n_heap == 0 &&
            mono_s() - last_activity > r->cfg->linger_s)
            break;
        if (!r->cfg->quiet && mono_s() - last_progress >= 1.0) {
            fprintf(stderr,
                    "steward-sim: %" PRIu64 " orders placed, %" PRIu64
                    " commands answered with %" PRIu64 " replies (%" PRIu64
                    " stale), %zu replies pending\n",
                    r->placed, r->commands, r->replies, r->stale, r->n_heap);
            last_progress = mono_s();
        }
    }
done:
    free(o);
    return rc;
}

/* steward-sim --active: returns the exit code. */
static int run_active(config_t *cfg, const char *src)
{
    char errstr[512];
    json_error_t jerr;
    responder_t r = {0};
    int rc = EXIT_OK;
    r.cfg = cfg;

    json_t *doc = json_load_file(src, 0, &jerr);
    if (doc == NULL) {
        fprintf(stderr, "steward-sim: --definition %s: %s (line %d)\n", src, jerr.text, jerr.line);
        return EXIT_USAGE;
    }
    err_class_t loaded = sim_active_load(doc, cfg->topic_prefix, &r.model, errstr, sizeof errstr);
    json_decref(doc);
    if (loaded != ERR_OK) {
        fprintf(stderr, "steward-sim: --definition %s: %s\n", src, errstr);
        return EXIT_USAGE;
    }

    /* Faults replace stalls; no duplicates or reordering of what the
     * responder itself sends. Latencies are cut below the deadlines. */
    cfg->sim.stall_rate = 0.0;
    cfg->sim.duplicate_rate = 0.0;
    cfg->sim.reorder_rate = 0.0;
    sim_active_deadlines(
        &r.model, cfg->deadline_scale_given ? cfg->deadline_scale : cfg->sim.time_scale, &cfg->sim);
    cfg->sim.start_ms = wall_ms();
    r.sim = sim_new(&cfg->sim, errstr, sizeof errstr);
    if (r.sim == NULL) {
        fprintf(stderr, "steward-sim: %s\n", errstr);
        return EXIT_USAGE;
    }

    if (cfg->ground_truth != NULL && (r.truth = fopen(cfg->ground_truth, "w")) == NULL) {
        fprintf(stderr, "steward-sim: --ground-truth %s: %s\n", cfg->ground_truth, strerror(errno));
        rc = EXIT_RUNTIME;
        goto done;
    }
    if (r.truth != NULL)
        setvbuf(r.truth, NULL, _IOLBF, 0); /* whole lines, for a reader during the run */

    r.producer = producer_new(cfg->brokers, errstr, sizeof errstr);
    if (r.producer == NULL) {
        fprintf(stderr, "steward-sim: Kafka producer: %s\n", errstr);
        rc = EXIT_RUNTIME;
        goto done;
    }
    const char *names[SIM_MAX_TOPICS];
    size_t n = 0;
    sim_def_flow_t flow = {0};
    for (int k = 0; k < SIM_N_KINDS; k++) {
        snprintf(flow.topic[k], sizeof flow.topic[k], "%s", r.model.topic[k]);
        names[n++] = r.model.topic[k];
    }
    for (size_t i = 0; i < r.model.n_states; i++)
        if (r.model.states[i].command_topic[0] != '\0')
            names[n++] = r.model.states[i].command_topic;
    if (create_topics(r.producer, names, n, cfg->partitions, errstr, sizeof errstr) != ERR_OK ||
        producer_topics(r.producer, &flow, errstr, sizeof errstr) != ERR_OK) {
        fprintf(stderr, "steward-sim: %s\n", errstr);
        rc = EXIT_RUNTIME;
        goto done;
    }
    r.consumer = command_consumer(cfg, &r.model, errstr, sizeof errstr);
    if (r.consumer == NULL) {
        fprintf(stderr, "steward-sim: Kafka consumer: %s\n", errstr);
        rc = EXIT_RUNTIME;
        goto done;
    }
    if (!cfg->quiet)
        fprintf(stderr,
                "steward-sim: responder for %s: %" PRIu32 " orders, seed %" PRIu64
                ", a fault every %" PRIu32 " orders\n",
                r.model.process, cfg->sim.orders, cfg->sim.seed, cfg->fault_every);

    double started = mono_s();
    rc = active_loop(&r);
    rd_kafka_flush(r.producer->rk, 10000);
    if (r.producer->failed > 0 || rd_kafka_outq_len(r.producer->rk) > 0) {
        fprintf(stderr,
                "steward-sim: %" PRIu64 " messages failed to deliver, %d not acknowledged\n",
                r.producer->failed, rd_kafka_outq_len(r.producer->rk));
        rc = EXIT_RUNTIME;
    }
    if (r.truth != NULL) {
        /* SIGTERM is how steward demo ends a responder: not a failure. */
        fprintf(r.truth,
                "{\"summary\":{\"mode\":\"active\",\"orders\":%" PRIu64 ",\"commands\":%" PRIu64
                ",\"unreadable_commands\":%" PRIu64 ",\"replies\":%" PRIu64
                ",\"stale_replies\":%" PRIu64 ",\"faults\":{\"none\":%" PRIu64
                ",\"drop_first\":%" PRIu64 ",\"silent\":%" PRIu64 ",\"zombie\":%" PRIu64
                "},\"seed\":%" PRIu64 ",\"process\":\"%s\"}}\n",
                r.placed, r.commands, r.unreadable, r.replies, r.stale, r.faults[0], r.faults[1],
                r.faults[2], r.faults[3], cfg->sim.seed, r.model.process);
    }
    printf("placed %" PRIu64 " orders, answered %" PRIu64 " commands with %" PRIu64
           " replies (%" PRIu64 " stale) in %.1f s; ground truth in %s\n",
           r.placed, r.commands, r.replies, r.stale, mono_s() - started,
           cfg->ground_truth ? cfg->ground_truth : "(none: no --ground-truth)");

done:
    if (r.consumer != NULL) {
        rd_kafka_consumer_close(r.consumer);
        rd_kafka_destroy(r.consumer);
    }
    while (r.n_heap > 0)
        free(pending_pop(&r));
    free(r.heap);
    if (r.truth != NULL && fclose(r.truth) != 0)
        rc = EXIT_RUNTIME;
    producer_free(r.producer);
    sim_free(r.sim);
    return rc;
}

/*
 * Warns about steps whose median latency, at this time scale, is over half
 * the deadline waiting for it: the cut at 80% of the deadline then makes
 * most of them take exactly that long. Says which time scale would put
 * every median at a quarter of its deadline.
 */
static void warn_collapsed_latencies(const sim_options_t *opts)
{
    double best = 0.0;
    for (int k = SIM_PAYMENT_CAPTURED; k < SIM_N_KINDS; k++) {
        double median = opts->latency[k].median_ms * opts->time_scale;
        double deadline = (double) opts->deadline_ms[k];
        if (deadline <= 0.0)
            continue;
        double scale = 0.25 * deadline / opts->latency[k].median_ms;
        if (best == 0.0 || scale < best)
            best = scale;
        if (median > 0.5 * deadline)
            fprintf(stderr,
                    "steward-sim: warning: %s takes %.0f ms at the median with --time-scale %g, "
                    "over half its %.0f ms deadline: most will take 80%% of the deadline\n",
                    sim_kind_name((sim_kind_t) k), median, opts->time_scale, deadline);
    }
    for (int k = SIM_PAYMENT_CAPTURED; k < SIM_N_KINDS; k++) {
        if (opts->deadline_ms[k] > 0 &&
            opts->latency[k].median_ms * opts->time_scale > 0.5 * (double) opts->deadline_ms[k]) {
            fprintf(stderr, "steward-sim: warning: --time-scale %.2g or less keeps the spread\n",
                    best);
            break;
        }
    }
}

int main(int argc, char **argv)
{
    config_t cfg;
    int rc = parse_args(argc, argv, &cfg);
    if (rc >= 0)
        return rc;

    char errstr[512], pathbuf[4096];
    const char *src = definition_path(&cfg, pathbuf, sizeof pathbuf);
    sim_def_flow_t flow = {0};
    def_t *def = NULL;
    sim_t *sim = NULL;
    run_t r = {0};
    rc = EXIT_OK;

    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    if (cfg.write_definition != NULL) {
        rc = write_definition(&cfg, src);
        if (rc != EXIT_OK || (cfg.brokers == NULL && !cfg.plan_only))
            return rc;
    }

    if (cfg.active)
        return run_active(&cfg, src);

    def_problems_t problems = {0};
    def = def_load_file(src, &problems);
    if (def == NULL) {
        for (size_t i = 0; i < problems.n; i++)
            fprintf(stderr, "steward-sim: %s: %s: %s\n", problems.items[i].file,
                    problems.items[i].pointer, problems.items[i].message);
        def_problems_clear(&problems);
        return EXIT_USAGE;
    }
    if (sim_def_flow(def, cfg.topic_prefix, cfg.single_topic, &flow, errstr, sizeof errstr) !=
        ERR_OK) {
        fprintf(stderr, "steward-sim: --definition: %s\n", errstr);
        rc = EXIT_USAGE;
        goto done;
    }

    /* Latencies are cut below each deadline as Steward will see it: scaled
     * by --deadline-scale, or when that is not given, by the time scale
     * (a definition scaled like the latencies). */
    double cap_scale = cfg.deadline_scale_given ? cfg.deadline_scale : cfg.sim.time_scale;
    for (int k = 0; k < SIM_N_KINDS; k++)
        cfg.sim.deadline_ms[k] = sim_def_scale_ms(flow.deadline_ms[k], cap_scale);
    warn_collapsed_latencies(&cfg.sim);

    int64_t now = wall_ms();
    if (!cfg.sim.virtual_time) {
        cfg.sim.start_ms = now;
    } else if (cfg.start_time == NULL) {
        cfg.sim.start_ms = now - sim_span_ms(&cfg.sim);
    } else if (!cfg.plan_only && cfg.sim.start_ms + sim_span_ms(&cfg.sim) > now + 3600000) {
        /* Kafka refuses timestamps further ahead than
         * log.message.timestamp.after.max.ms, one hour by default. */
        fprintf(stderr,
                "steward-sim: warning: --start-time puts event times more than an hour in the "
                "future; the broker may refuse them\n");
    }

    sim = sim_new(&cfg.sim, errstr, sizeof errstr);
    if (sim == NULL) {
        fprintf(stderr, "steward-sim: %s\n", errstr);
        rc = EXIT_USAGE;
        goto done;
    }
    r.cfg = &cfg;
    r.flow = &flow;
    r.sim = sim;

    if (cfg.ground_truth != NULL) {
        r.truth = fopen(cfg.ground_truth, "w");
        if (r.truth == NULL) {
            fprintf(stderr, "steward-sim: --ground-truth %s: %s\n", cfg.ground_truth,
                    strerror(errno));
            rc = EXIT_RUNTIME;
            goto done;
        }
    }

    if (!cfg.plan_only) {
        r.producer = producer_new(cfg.brokers, errstr, sizeof errstr);
        if (r.producer == NULL) {
            fprintf(stderr, "steward-sim: Kafka producer: %s\n", errstr);
            rc = EXIT_RUNTIME;
            goto done;
        }
        const char *names[SIM_N_KINDS];
        for (int k = 0; k < SIM_N_KINDS; k++)
            names[k] = flow.topic[k];
        if (create_topics(r.producer, names, SIM_N_KINDS, cfg.partitions, errstr, sizeof errstr) !=
                ERR_OK ||
            producer_topics(r.producer, &flow, errstr, sizeof errstr) != ERR_OK) {
            fprintf(stderr, "steward-sim: %s\n", errstr);
            rc = EXIT_RUNTIME;
            goto done;
        }
    }

    if (!cfg.quiet) {
        char start[40];
        fprintf(stderr,
                "steward-sim: %" PRIu32 " orders, seed %" PRIu64 ", %s time from %s, "
                "topics %s%s%s\n",
                cfg.sim.orders, cfg.sim.seed, cfg.sim.virtual_time ? "virtual" : "real",
                sim_format_time(cfg.sim.start_ms, start, sizeof start),
                cfg.single_topic ? cfg.single_topic : cfg.topic_prefix,
                cfg.single_topic ? "" : "orders, ", cfg.single_topic ? "" : "...");
    }

    r.started = r.last_progress = mono_s();
    rc = run_loop(&r);
    int left = r.producer != NULL ? flush_all(&r) : 0;
    double elapsed = mono_s() - r.started;
    const sim_stats_t *st = sim_stats(sim);
    bool interrupted = stop_requested != 0;

    if (r.producer != NULL && (r.producer->failed > 0 || left > 0)) {
        fprintf(stderr,
                "steward-sim: %" PRIu64 " messages failed to deliver, %d not acknowledged\n",
                r.producer->failed, left);
        rc = EXIT_RUNTIME;
    }
    if (interrupted) {
        fprintf(stderr, "steward-sim: interrupted\n");
        rc = EXIT_RUNTIME;
    }
    if (r.truth != NULL) {
        print_summary(r.truth, &cfg.sim, st, interrupted);
        if (fclose(r.truth) != 0) {
            fprintf(stderr, "steward-sim: --ground-truth %s: %s\n", cfg.ground_truth,
                    strerror(errno));
            rc = EXIT_RUNTIME;
        }
        r.truth = NULL;
    }

    /* The closing line counts what Kafka acknowledged; with --plan-only
     * stdout holds the plan, so it goes to stderr. */
    progress(&r, true);
    uint64_t done_messages = r.producer != NULL ? r.producer->delivered : st->messages;
    fprintf(cfg.plan_only ? stderr : stdout,
            "%s %" PRIu64 " events for %" PRIu64
            " orders in %.2f s (%.0f events/s); stalled %" PRIu64 "; ground truth in %s\n",
            cfg.plan_only ? "planned" : "produced", done_messages, st->orders, elapsed,
            elapsed > 0 ? (double) done_messages / elapsed : 0.0, st->stalled,
            cfg.ground_truth ? cfg.ground_truth : "(none: no --ground-truth)");

done:
    if (r.truth != NULL)
        fclose(r.truth);
    producer_free(r.producer);
    sim_free(sim);
    sim_def_flow_clear(&flow);
    def_free(def);
    return rc;
}
