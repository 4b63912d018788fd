/*
 * cli_discover - `steward discover`: what flows on a set of topics, and a
 * draft definition for it (shadow/discover.h has the analysis).
 *
 * It reads each partition from the first message stamped at or after
 * --since to the end it had when reading began, with assign() and no
 * commits: no consumer group is joined and no offset is stored, so no
 * running consumer is disturbed. Messages are judged as `steward run`
 * judges them (decode_message()); the type is ce_type, else the string at
 * /type; the id ce_source#ce_id, else /id; the time ce_time, else the
 * Kafka timestamp, which is what the draft's default envelope reads.
 */
#include "cli/cli.h"
#include "common/clock.h"
#include "common/err.h"
#include "common/rfc3339.h"
#include "definitions/duration.h"
#include "formats/decode.h"
#include "manager/config/config.h"
#include "manager/runtime/kafka_conf.h"
#include "shadow/discover.h"

#include <getopt.h>
#include <inttypes.h>
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A partition with no new message for this long is taken as read. */
#define DISCOVER_IDLE_MS     10000
#define DISCOVER_DEFAULT_MAX 100000

static const char discover_usage[] =
    "usage: steward discover --topics T1,T2,... [OPTIONS]\n"
    "\n"
    "Reads recent messages of the topics (no consumer group is joined, no offset\n"
    "committed) and prints the event types, the candidate correlation keys, the\n"
    "order events come in per key, the latency of each step, and a draft\n"
    "definition with what it could not decide.\n"
    "\n"
    "  --topics LIST         the topics, comma-separated\n"
    "  --brokers LIST        Kafka bootstrap servers ($STEWARD_KAFKA_BROKERS, or\n"
    "                        the config's brokers)\n"
    "  --config FILE         a JSON config file ($STEWARD_CONFIG): its brokers and\n"
    "                        kafka properties (security, SASL) are used; the\n"
    "                        topics are the broker's names (topics.prefix and\n"
    "                        topics.map do not apply)\n"
    "  --since TIME          RFC 3339, or a duration back from now (default: 1h)\n"
    "  --max-messages N      stop after N messages (default: 100000)\n"
    "  --process NAME        the draft's process name (default: discovered)\n"
    "  --draft FILE          also write the draft definition to FILE\n"
    "  --kafka NAME=VALUE    a librdkafka property; repeatable, over the config's\n"
    "  --json                print everything as one JSON document\n";

typedef struct read_event {
    decode_message_t msg;
    char *topic;
    char *id;
    const char *type; /* borrowed from msg */
    int64_t time_ms;
} read_event_t;

typedef struct reader {
    read_event_t *ev;
    size_t n, cap;
    size_t rejected[DECODE_N_REASONS];
    size_t untyped;
} reader_t;

static void reader_clear(reader_t *r)
{
    for (size_t i = 0; i < r->n; i++) {
        decode_message_clear(&r->ev[i].msg);
        free(r->ev[i].topic);
        free(r->ev[i].id);
    }
    free(r->ev);
}

/* A process name as definitions allow it: [a-z][a-z0-9_]*, at most 63. */
static bool valid_process_name(const char *name)
{
    size_t len = strlen(name);
    if (len == 0 || len > 63 || name[0] < 'a' || name[0] > 'z')
        return false;
    for (size_t i = 1; i < len; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'))
            return false;
    }
    return true;
}

/* Keeps one message as an event, or counts why it cannot be one. */
static bool reader_add(reader_t *r, const rd_kafka_message_t *m)
{
    decode_header_t headers[32];
    size_t n_headers = 0;
    rd_kafka_headers_t *hdrs = NULL;
    if (rd_kafka_message_headers(m, &hdrs) == RD_KAFKA_RESP_ERR_NO_ERROR) {
        const char *name;
        const void *value;
        size_t len;
        for (size_t i = 0;
             n_headers < 32 &&
             rd_kafka_header_get_all(hdrs, i, &name, &value, &len) == RD_KAFKA_RESP_ERR_NO_ERROR;
             i++)
            headers[n_headers++] = (decode_header_t){name, value, len};
    }
    rd_kafka_timestamp_type_t tstype;
    decode_input_t in = {
        .topic = rd_kafka_topic_name(m->rkt),
        .partition = m->partition,
        .offset = m->offset,
        .key = m->key,
        .key_len = m->key_len,
        .value = m->payload,
        .value_len = m->len,
        .headers = headers,
        .n_headers = n_headers,
        .timestamp_ms = rd_kafka_message_timestamp(m, &tstype),
    };
    decode_limits_t limits = {DECODE_DEFAULT_MAX_BYTES, DECODE_DEFAULT_MAX_DEPTH};
    decode_message_t msg;
    char detail[256];
    decode_reason_t why = decode_message(&in, &limits, &msg, detail, sizeof detail);
    if (why != DECODE_OK) {
        r->rejected[why]++;
        return true;
    }
    const char *type = msg.ce_type;
    if (type == NULL)
        type = json_string_value(json_object_get(msg.data, "type"));
    if (type == NULL) {
        r->untyped++;
        decode_message_clear(&msg);
        return true;
    }
    if (r->n == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 1024;
        read_event_t *grown = realloc(r->ev, cap * sizeof *grown);
        if (grown == NULL) {
            decode_message_clear(&msg);
            return false;
        }
        r->ev = grown;
        r->cap = cap;
    }
    read_event_t *e = &r->ev[r->n];
    memset(e, 0, sizeof *e);
    e->msg = msg;
    e->type = type;
    e->topic = strdup(in.topic);
    e->time_ms = in.timestamp_ms;
    if (msg.ce_time != NULL && !rfc3339_parse(msg.ce_time, &e->time_ms))
        e->time_ms = in.timestamp_ms;
    const json_t *id = json_object_get(msg.data, "id");
    char num[32];
    if (msg.ce_id != NULL) {
        size_t len = strlen(msg.ce_id) + (msg.ce_source ? strlen(msg.ce_source) : 0) + 2;
        if ((e->id = malloc(len)) != NULL)
            snprintf(e->id, len, "%s#%s", msg.ce_source ? msg.ce_source : "", msg.ce_id);
    } else if (json_is_string(id)) {
        e->id = strdup(json_string_value(id));
    } else if (json_is_integer(id)) {
        snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT, json_integer_value(id));
        e->id = strdup(num);
    }
    r->n++;
    return e->topic != NULL;
}

typedef struct window {
    char *topic;
    int32_t partition;
    int64_t end; /* the high watermark when reading began */
    bool done;
} window_t;

/*
 * Reads every partition of `topics` from since_ms to its end into r.
 * EXIT_OK, or another exit code with the reason printed.
 */
static int read_topics(rd_kafka_t *rk, char **topics, size_t n_topics, int64_t since_ms,
                       size_t max_messages, reader_t *r)
{
    rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(16);
    window_t *win = NULL;
    size_t n_win = 0;
    int rc = EXIT_OK;

    for (size_t t = 0; t < n_topics; t++) {
        rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topics[t], NULL);
        const struct rd_kafka_metadata *md = NULL;
        rd_kafka_resp_err_t err =
            rkt != NULL ? rd_kafka_metadata(rk, 0, rkt, &md, 10000) : RD_KAFKA_RESP_ERR__FAIL;
        if (err != RD_KAFKA_RESP_ERR_NO_ERROR || md->topic_cnt != 1 || md->topics[0].err != 0 ||
            md->topics[0].partition_cnt == 0) {
            fprintf(stderr, "steward discover: topic %s: %s\n", topics[t],
                    err != RD_KAFKA_RESP_ERR_NO_ERROR
                        ? rd_kafka_err2str(err)
                        : rd_kafka_err2str(md->topic_cnt == 1 && md->topics[0].err != 0
                                               ? md->topics[0].err
                                               : RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART));
            if (md != NULL)
                rd_kafka_metadata_destroy(md);
            if (rkt != NULL)
                rd_kafka_topic_destroy(rkt);
            rc = err == RD_KAFKA_RESP_ERR_NO_ERROR ? EXIT_USAGE : EXIT_RUNTIME;
            goto out;
        }
        for (int p = 0; p < md->topics[0].partition_cnt; p++)
            rd_kafka_topic_partition_list_add(list, topics[t], md->topics[0].partitions[p].id)
                ->offset = since_ms;
        rd_kafka_metadata_destroy(md);
        rd_kafka_topic_destroy(rkt);
    }

    rd_kafka_resp_err_t err = rd_kafka_offsets_for_times(rk, list, 10000);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        fprintf(stderr, "steward discover: cannot look up offsets by time: %s\n",
                rd_kafka_err2str(err));
        rc = EXIT_RUNTIME;
        goto out;
    }
    win = calloc((size_t) list->cnt + 1, sizeof *win);
    if (win == NULL) {
        rc = EXIT_RUNTIME;
        goto out;
    }
    size_t open = 0;
    for (int i = 0; i < list->cnt; i++) {
        rd_kafka_topic_partition_t *p = &list->elems[i];
        int64_t low, high;
        err = rd_kafka_query_watermark_offsets(rk, p->topic, p->partition, &low, &high, 10000);
        if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
            fprintf(stderr, "steward discover: %s [%" PRId32 "]: %s\n", p->topic, p->partition,
                    rd_kafka_err2str(err));
            rc = EXIT_RUNTIME;
            goto out;
        }
        window_t *w = &win[n_win++];
        w->topic = strdup(p->topic);
        w->partition = p->partition;
        w->end = high;
        /* No message since the time: offsets_for_times says -1. */
        w->done = p->err != 0 || p->offset < 0 || p->offset >= high;
        if (w->done)
            p->offset = RD_KAFKA_OFFSET_END;
        else
            open++;
    }
    if (open > 0 && (err = rd_kafka_assign(rk, list)) != RD_KAFKA_RESP_ERR_NO_ERROR) {
        fprintf(stderr, "steward discover: assign: %s\n", rd_kafka_err2str(err));
        rc = EXIT_RUNTIME;
        goto out;
    }
    int64_t last_ms = clock_wall_ms();
    size_t read = 0;
    while (open > 0 && read < max_messages) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 100);
        if (m == NULL) {
            if (clock_wall_ms() - last_ms > DISCOVER_IDLE_MS) {
                fprintf(stderr,
                        "steward discover: %zu partitions sent nothing for %d s; analysing what "
                        "was read\n",
                        open, DISCOVER_IDLE_MS / 1000);
                break;
            }
            continue;
        }
        last_ms = clock_wall_ms();
        if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR && m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF) {
            fprintf(stderr, "steward discover: %s\n", rd_kafka_message_errstr(m));
            rd_kafka_message_destroy(m);
            continue;
        }
        window_t *w = NULL;
        for (size_t i = 0; i < n_win && w == NULL; i++) {
            if (win[i].partition == m->partition &&
                strcmp(win[i].topic, rd_kafka_topic_name(m->rkt)) == 0)
                w = &win[i];
        }
        bool eof = m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF;
        if (w != NULL && !w->done && !eof && m->offset < w->end) {
            if (!reader_add(r, m)) {
                fprintf(stderr, "steward discover: out of memory after %zu messages\n", read);
                rd_kafka_message_destroy(m);
                rc = EXIT_RUNTIME;
                goto out;
            }
            read++;
        }
        if (w != NULL && !w->done && (eof || m->offset + 1 >= w->end)) {
            w->done = true;
            open--;
        }
        rd_kafka_message_destroy(m);
    }
    if (read >= max_messages && open > 0)
        fprintf(stderr, "steward discover: stopped at --max-messages %zu\n", max_messages);

out:
    rd_kafka_assign(rk, NULL);
    for (size_t i = 0; i < n_win; i++)
        free(win[i].topic);
    free(win);
    rd_kafka_topic_partition_list_destroy(list);
    return rc;
}

static void print_text(const json_t *report, const reader_t *r, const char *since_text,
                       const char *draft_file)
{
    size_t i;
    json_t *v;
    char a[32], b[32], c[32], d[32];

    printf("%zu events of %zu types since %s", r->n,
           json_array_size(json_object_get(report, "types")), since_text);
    size_t bad = r->untyped;
    for (int k = 0; k < DECODE_N_REASONS; k++)
        bad += r->rejected[k];
    if (bad > 0) {
        printf("; %zu messages left out:", bad);
        for (int k = 0; k < DECODE_N_REASONS; k++) {
            if (r->rejected[k] > 0)
                printf(" %s %zu", decode_reason_name((decode_reason_t) k), r->rejected[k]);
        }
        if (r->untyped > 0)
            printf(" no_type %zu", r->untyped);
    }
    printf("\n\nevent types:\n");
    json_array_foreach(json_object_get(report, "types"), i, v)
    {
        printf("  %-28s %8lld  ", json_string_value(json_object_get(v, "type")),
               (long long) json_integer_value(json_object_get(v, "count")));
        const char *topic;
        json_t *count;
        const char *sep = "";
        json_object_foreach(json_object_get(v, "topics"), topic, count)
        {
            printf("%s%s", sep, topic);
            sep = ", ";
        }
        printf("\n");
    }
    printf("\ncandidate correlation keys (share: of the least covered type's events;\n"
           "joining: values seen in events of two or more types):\n");
    json_array_foreach(json_object_get(report, "keys"), i, v)
    {
        printf("  %-28s share %5.1f%%  joining %lld of %lld values%s\n",
               json_string_value(json_object_get(v, "pointer")),
               100 * json_real_value(json_object_get(v, "share")),
               (long long) json_integer_value(json_object_get(v, "joining")),
               (long long) json_integer_value(json_object_get(v, "distinct")),
               i == 0 ? "  <- the key" : "");
    }
    printf("\nthe order of events per key (%lld keys; directly follows, count):\n",
           (long long) json_integer_value(json_object_get(report, "traces")));
    const char *type;
    json_object_foreach(json_object_get(report, "starts"), type, v)
    {
        printf("  %-28s -> %-28s %8lld\n", "(first)", type, (long long) json_integer_value(v));
    }
    json_array_foreach(json_object_get(report, "graph"), i, v)
    {
        printf("  %-28s -> %-28s %8lld\n", json_string_value(json_object_get(v, "from")),
               json_string_value(json_object_get(v, "to")),
               (long long) json_integer_value(json_object_get(v, "count")));
    }
    const json_t *draft = json_object_get(report, "draft");
    printf("\nproposed start: %s\n",
           json_string_value(json_object_get(json_object_get(draft, "start"), "on")));
    printf("\nsteps (time from the event that entered the state to the next event):\n");
    printf("  %-28s %8s %9s %9s %9s %9s %9s\n", "state", "samples", "p50", "p90", "p99", "max",
           "deadline");
    json_array_foreach(json_object_get(report, "steps"), i, v)
    {
        printf(
            "  %-28s %8lld %9s %9s %9s %9s %9s%s\n", json_string_value(json_object_get(v, "state")),
            (long long) json_integer_value(json_object_get(v, "samples")),
            duration_format_rounded(json_integer_value(json_object_get(v, "p50_ms")), a, sizeof a),
            duration_format_rounded(json_integer_value(json_object_get(v, "p90_ms")), b, sizeof b),
            duration_format_rounded(json_integer_value(json_object_get(v, "p99_ms")), c, sizeof c),
            duration_format_rounded(json_integer_value(json_object_get(v, "max_ms")), d, sizeof d),
            json_string_value(json_object_get(v, "deadline")),
            json_is_null(json_object_get(v, "suggested_ms")) ? " (too few samples)" : "");
    }
    printf("\nundecided (also in the draft's description):\n");
    json_array_foreach(json_object_get(report, "undecided"), i, v)
    {
        printf("  %zu. %s\n", i + 1, json_string_value(v));
    }
    printf("\ndraft definition%s%s:\n", draft_file != NULL ? ", written to " : "",
           draft_file != NULL ? draft_file : "");
    cli_print_json(draft);
}

int cli_discover(int argc, char **argv)
{
    static const struct option options[] = {
        {"topics", required_argument, NULL, 't'},
        {"brokers", required_argument, NULL, 'b'},
        {"since", required_argument, NULL, 's'},
        {"max-messages", required_argument, NULL, 'n'},
        {"process", required_argument, NULL, 'p'},
        {"draft", required_argument, NULL, 'D'},
        {"kafka", required_argument, NULL, 'k'},
        {"json", no_argument, NULL, 'j'},
        {"config", required_argument, NULL, 'c'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *topics_arg = NULL, *since = "1h", *max_arg = NULL, *process = NULL,
               *draft_file = NULL;
    const char *brokers = NULL, *config_path = getenv("STEWARD_CONFIG");
    const char **props = calloc((size_t) argc + 1, sizeof *props);
    size_t n_props = 0;
    int opt, as_json = 0;

    optind = 1;
    while ((opt = getopt_long(argc, argv, "", options, NULL)) != -1) {
        switch (opt) {
        case 't':
            topics_arg = optarg;
            break;
        case 'b':
            brokers = optarg;
            break;
        case 'c':
            config_path = optarg;
            break;
        case 's':
            since = optarg;
            break;
        case 'n':
            max_arg = optarg;
            break;
        case 'p':
            process = optarg;
            break;
        case 'D':
            draft_file = optarg;
            break;
        case 'k':
            props[n_props++] = optarg;
            break;
        case 'j':
            as_json = 1;
            break;
        default:
            free(props);
            return cli_help_or_usage(opt, discover_usage);
        }
    }
    /* The config as `steward run` reads it (file, then the environment), for
     * its brokers and librdkafka properties; --brokers and --kafka win. */
    config_t *cfg = NULL;
    if (config_path != NULL && *config_path != '\0') {
        char why[1024];
        err_class_t cls;
        if ((cfg = config_build(config_path, NULL, 0, &cls, why, sizeof why)) == NULL) {
            fprintf(stderr, "steward discover: config: %s\n",
                    cls == ERR_FATAL ? "out of memory" : why);
            free(props);
            return EXIT_USAGE;
        }
    }
    if (brokers == NULL)
        brokers = cfg != NULL ? cfg->brokers : getenv("STEWARD_KAFKA_BROKERS");
    if (brokers != NULL && *brokers == '\0')
        brokers = NULL;
    int64_t since_ms = 0;
    unsigned long long max_messages = DISCOVER_DEFAULT_MAX;
    char *end = NULL;
    if (max_arg != NULL)
        max_messages = strtoull(max_arg, &end, 10);
    const char *problem =
        topics_arg == NULL || topics_arg[0] == '\0' ? "--topics is required"
        : brokers == NULL
            ? "no brokers: give --brokers, STEWARD_KAFKA_BROKERS or a config's brokers"
        : !cli_parse_when(since, &since_ms) ? "--since is neither RFC 3339 nor a duration"
        : max_arg != NULL && (max_arg[0] < '0' || max_arg[0] > '9' || *end != '\0' ||
                              max_messages == 0 || max_messages > 100000000)
            ? "--max-messages is a whole number from 1 to 100000000"
        : process != NULL && !valid_process_name(process)
            ? "--process is a name: [a-z][a-z0-9_]*, at most 63 characters"
        : optind < argc ? "unexpected arguments"
                        : NULL;
    if (problem != NULL) {
        fprintf(stderr, "steward discover: %s\n%s", problem, discover_usage);
        config_free(cfg);
        free(props);
        return EXIT_USAGE;
    }

    /* The topics, split on commas. */
    char *topics_copy = strdup(topics_arg);
    char **topics = calloc(strlen(topics_arg) + 1, sizeof *topics);
    size_t n_topics = 0;
    char *save = NULL;
    for (char *tok = topics_copy != NULL ? strtok_r(topics_copy, ",", &save) : NULL; tok != NULL;
         tok = strtok_r(NULL, ",", &save))
        topics[n_topics++] = tok;

    char errstr[1024], group[64];
    int rc = EXIT_OK;
    reader_t r = {0};
    json_t *report = NULL;
    rd_kafka_t *rk = NULL;
    rd_kafka_conf_t *conf = NULL;
    /* The config's properties first, so that --kafka overrides them. */
    size_t n_cfg_props = cfg != NULL ? cfg->n_kafka_props : 0;
    const char **all_props = calloc(n_cfg_props + n_props + 1, sizeof *all_props);
    if (all_props == NULL) {
        fprintf(stderr, "steward discover: out of memory\n");
        rc = EXIT_RUNTIME;
        goto out;
    }
    for (size_t i = 0; i < n_cfg_props + n_props; i++)
        all_props[i] = i < n_cfg_props ? cfg->kafka_props[i] : props[i - n_cfg_props];
    snprintf(group, sizeof group, "steward-discover-%ld", (long) getpid());
    kconf_params_t kp = {
        .brokers = brokers, .props = all_props, .n_props = n_cfg_props + n_props, .group = group};
    conf = kconf_new(KCONF_DISCOVER, &kp, errstr, sizeof errstr);
    free(all_props);
    if (conf == NULL) {
        fprintf(stderr, "steward discover: %s\n", errstr);
        rc = EXIT_USAGE;
        goto out;
    }
    rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof errstr);
    if (rk == NULL) {
        fprintf(stderr, "steward discover: %s\n", errstr);
        rc = EXIT_RUNTIME;
        goto out;
    }
    conf = NULL; /* now owned by rk */

    rc = read_topics(rk, topics, n_topics, since_ms, (size_t) max_messages, &r);
    if (rc != EXIT_OK)
        goto out;

    discover_event_t *events = calloc(r.n + 1, sizeof *events);
    if (events == NULL) {
        rc = EXIT_RUNTIME;
        goto out;
    }
    size_t n_events = 0;
    for (size_t i = 0; i < r.n; i++) {
        if (json_is_object(r.ev[i].msg.data))
            events[n_events++] = (discover_event_t){r.ev[i].type, r.ev[i].topic, r.ev[i].time_ms,
                                                    r.ev[i].id, r.ev[i].msg.data};
    }
    discover_options_t dopts = {.process = process, .source = topics_arg};
    err_class_t cls = discover_analyse(events, n_events, &dopts, &report, errstr, sizeof errstr);
    free(events);
    if (cls != ERR_OK) {
        fprintf(stderr, "steward discover: %zu events read; %s\n", n_events, errstr);
        rc = EXIT_RUNTIME;
        goto out;
    }
    if (draft_file != NULL && json_dump_file(json_object_get(report, "draft"), draft_file,
                                             JSON_INDENT(2) | JSON_PRESERVE_ORDER) != 0) {
        fprintf(stderr, "steward discover: cannot write %s\n", draft_file);
        rc = EXIT_RUNTIME;
        goto out;
    }
    if (as_json)
        cli_print_json(report);
    else
        print_text(report, &r, since, draft_file);

out:
    json_decref(report);
    reader_clear(&r);
    if (rk != NULL) {
        rd_kafka_consumer_close(rk);
        rd_kafka_destroy(rk);
    }
    if (conf != NULL)
        rd_kafka_conf_destroy(conf);
    free(topics);
    free(topics_copy);
    free(props);
    config_free(cfg); /* after rk: brokers may be the config's */
    return rc;
}
