/*
 * cli_discover - `steward discover`: what flows on a set of topics, and a
 * draft definition for it (shadow/discover.h has the analysis).
 *
 * It reads each partition from the first message stamped at or after
 * --since to the end it had when reading began, with assign() and no
 * commits: no consumer group is joined and no offset is stored, so no
 * running consumer is disturbed. Messages are judged as `steward run`
 * judges them (decode_message()) and read by an envelope (decode_read())
 * that the flags say (--type, --id, --time) or the default one: the type
 * ce_type, else the string at /type; the id ce_source#ce_id, else /id; the
 * time ce_time, else the Kafka timestamp. Each of those flags may also be
 * given for one topic (--type TOPIC=WHERE), over the global one there. The
 * draft's envelope is what the flags said, and its `topics` what they said
 * per topic, so it reads what discover read. The Kafka message key is a
 * candidate key like any field (--key names the key instead).
 */
#include "cli/cli.h"
#include "cli/options.h"
#include "common/clock.h"
#include "common/err.h"
#include "common/rfc3339.h"
#include "common/utf8.h"
#include "definitions/duration.h"
#include "definitions/jsonptr.h"
#include "formats/decode.h"
#include "formats/format_confluent.h"
#include "manager/intake/schemas.h"
#include "manager/config/config.h"
#include "manager/runtime/kafka_conf.h"
#include "shadow/discover.h"

#include <getopt.h>
#include <inttypes.h>
#include <librdkafka/rdkafka.h>
#include <stdarg.h>
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
    "  --key KEY             the correlation key: a JSON pointer, or message_key\n"
    "                        (default: the field, or the message key, that joins\n"
    "                        the most events of different types)\n"
    "  --type TYPE           where the event type is: a JSON pointer, or header:NAME\n"
    "                        (default: ce_type, else /type)\n"
    "  --id POINTER          the event id, for dropping repeats (default: ce_id, else\n"
    "                        /id)\n"
    "  --time TIME           the event time, which orders events: a JSON pointer, or\n"
    "                        kafka_timestamp (default: ce_time, else the Kafka\n"
    "                        timestamp)\n"
    "  --time-format F       how --time's field is written: rfc3339, epoch_seconds or\n"
    "                        epoch_millis (default: RFC 3339 text or epoch ms)\n"
    "  --type TOPIC=TYPE, --id TOPIC=POINTER, --time TOPIC=TIME,\n"
    "  --time-format TOPIC=F\n"
    "                        the same for the events of one topic of --topics,\n"
    "                        over the flag without TOPIC= there (e.g. --type\n"
    "                        shipping=header:x-event-type); repeatable, once per\n"
    "                        topic each; the draft declares the topic's envelope\n"
    "                        in its topics\n"
    "  --format F            json; confluent_json for JSON in the Confluent wire\n"
    "                        format; confluent_avro for Avro in it, each value read\n"
    "                        with the writer schema its id names, from the\n"
    "                        config's schema_registry.url or .directory\n"
    "                        ($STEWARD_SCHEMA_REGISTRY_URL); unframed values are\n"
    "                        read as JSON (default: json; framed values are then\n"
    "                        counted as schema_registry_format)\n"
    "  --kafka NAME=VALUE    a librdkafka property; repeatable, over the config's\n"
    "  --json                print everything as one JSON document\n";

typedef struct read_event {
    decode_message_t msg;
    char *topic;
    char *id;
    char *message_key; /* as text; NULL when none or not text */
    const char *type;  /* borrowed from msg */
    int64_t time_ms;
} read_event_t;

/* One topic's own envelope flags (--type TOPIC=WHERE and the others). */
typedef struct topic_flags {
    char *topic; /* owned */
    /* What followed "TOPIC=", borrowed from argv; NULL: not given. */
    const char *type, *id, *time, *time_format;
    def_envelope_t env; /* the process's, the topic's own over it; borrowed pointers */
    json_t *json;       /* the topic's "envelope" as the draft says it */
} topic_flags_t;

typedef struct reader {
    const def_envelope_t *env;   /* where the type, id and time are */
    const topic_flags_t *topics; /* topics read by an envelope of their own */
    size_t n_topics;
    def_format_t format;      /* how the values are framed (--format) */
    schemas_t *schemas;       /* confluent_avro's writer schemas; borrowed, NULL otherwise */
    char registry_error[512]; /* why the registry could not answer ("" while it does) */
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
        free(r->ev[i].message_key);
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

/*
 * Reads a framed value of a confluent_avro topic with the writer schema
 * its id names. A schema the registry cannot give now is no verdict on
 * the message: discover then stops (registry_error), as a draft from the
 * messages it could read would leave the others out unsaid.
 */
static decode_reason_t decode_avro(reader_t *r, const decode_input_t *in, uint32_t id,
                                   const decode_limits_t *limits, decode_message_t *msg,
                                   char *detail, size_t detail_size)
{
    const format_avro_schema_t *schema = NULL;
    decode_reason_t why = DECODE_OK;
    switch (schemas_get(r->schemas, id, true, &schema, detail, detail_size)) {
    case SCHEMAS_AVRO:
        why = decode_message_avro(in, limits, schema, msg, detail, detail_size);
        schemas_release(r->schemas, id, schema);
        return why;
    case SCHEMAS_NOT_FOUND:
        return DECODE_UNKNOWN_SCHEMA;
    case SCHEMAS_WRONG_TYPE:
        return DECODE_UNSUPPORTED_SCHEMA_TYPE;
    case SCHEMAS_INVALID:
        return DECODE_INVALID_AVRO;
    case SCHEMAS_UNAVAILABLE:
        break;
    }
    snprintf(r->registry_error, sizeof r->registry_error, "%s", detail);
    return DECODE_UNKNOWN_SCHEMA; /* not counted: the caller stops */
}

/* Keeps one message as an event, or counts why it cannot be one. False
 * when out of memory or when the schema registry cannot answer
 * (r->registry_error). */
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
    const def_envelope_t *where = r->env;
    for (size_t t = 0; t < r->n_topics; t++)
        if (strcmp(r->topics[t].topic, in.topic) == 0)
            where = &r->topics[t].env;
    decode_limits_t limits = {DECODE_DEFAULT_MAX_BYTES, DECODE_DEFAULT_MAX_DEPTH};
    decode_message_t msg;
    char detail[256];
    uint32_t schema_id;
    const void *payload;
    size_t payload_len;
    decode_reason_t why =
        r->format == DEF_FORMAT_CONFLUENT_AVRO && in.value_len <= limits.max_bytes &&
                format_confluent_frame(in.value, in.value_len, &schema_id, &payload, &payload_len)
            ? decode_avro(r, &in, schema_id, &limits, &msg, detail, sizeof detail)
            : decode_message_as(&in, &limits, r->format, &msg, detail, sizeof detail);
    if (r->registry_error[0] != '\0')
        return false;
    if (why != DECODE_OK) {
        r->rejected[why]++;
        return true;
    }
    const char *type = decode_type_of(&msg, where);
    if (type == NULL) {
        r->untyped++;
        decode_message_clear(&msg);
        return true;
    }
    decode_envelope_t env;
    why = decode_read(&msg, &in, where, type, &env, detail, sizeof detail);
    if (why != DECODE_OK) {
        r->rejected[why]++;
        decode_message_clear(&msg);
        return true;
    }
    if (r->n == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 1024;
        read_event_t *grown = realloc(r->ev, cap * sizeof *grown);
        if (grown == NULL) {
            decode_envelope_clear(&env);
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
    e->time_ms = env.time_ms;
    /* topic/partition/offset is no identity to drop repeats by */
    if (msg.cloudevent ||
        (where->id_pointer != NULL && jsonptr_get(msg.data, where->id_pointer) != NULL)) {
        e->id = env.id;
        env.id = NULL;
    }
    decode_envelope_clear(&env);
    if (m->key != NULL && m->key_len > 0 && m->key_len <= DECODE_MAX_KEY_BYTES &&
        memchr(m->key, 0, m->key_len) == NULL && utf8_valid(m->key, m->key_len))
        e->message_key = strndup(m->key, m->key_len);
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
                if (r->registry_error[0] != '\0')
                    fprintf(stderr,
                            "steward discover: the schema registry cannot answer after %zu "
                            "messages; try again when it is back: %s\n",
                            read, r->registry_error);
                else
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
        printf("%s\n", json_is_true(json_object_get(v, "set_aside")) ? "  (set aside)" : "");
    }
    printf("\ncandidate correlation keys (share: of the least covered type's events;\n"
           "joining: values seen in events of two or more types; joins: the types\n"
           "those values join, beyond the first, which ranks them):\n");
    json_array_foreach(json_object_get(report, "keys"), i, v)
    {
        const char *pointer = json_string_value(json_object_get(v, "pointer"));
        printf("  %-28s share %5.1f%%  joining %lld of %lld values, %lld joins%s\n",
               pointer != NULL ? pointer : "(the Kafka message key)",
               100 * json_real_value(json_object_get(v, "share")),
               (long long) json_integer_value(json_object_get(v, "joining")),
               (long long) json_integer_value(json_object_get(v, "distinct")),
               (long long) json_integer_value(json_object_get(v, "joins")),
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

/* Gives every topic of the draft on which framed values were read its
 * format: the definition must say so to read them. */
static void mark_framed_topics(json_t *draft, const reader_t *r)
{
    const char *name;
    json_t *ev;
    json_object_foreach(json_object_get(draft, "events"), name, ev)
    {
        const char *topic = json_string_value(json_object_get(ev, "topic"));
        bool framed = false, avro = false;
        for (size_t i = 0; topic != NULL && i < r->n; i++) {
            if (r->ev[i].msg.schema_id >= 0 && strcmp(r->ev[i].topic, topic) == 0) {
                framed = true;
                avro = avro || r->ev[i].msg.avro;
            }
        }
        if (!framed)
            continue;
        json_t *topics = json_object_get(draft, "topics");
        if (topics == NULL) {
            topics = json_object();
            json_object_set_new(draft, "topics", topics);
        }
        json_t *entry = json_object_get(topics, topic);
        if (entry == NULL) {
            entry = json_object();
            json_object_set_new(topics, topic, entry);
        }
        json_object_set_new(entry, "format",
                            json_string(avro ? "confluent_avro" : "confluent_json"));
    }
}

/* Declares in the draft's topics the envelope of each topic the flags
 * gave one, where some event of the draft arrives; says so of the others
 * (a topic in `topics` must be some event's). */
static void mark_topic_envelopes(json_t *draft, const topic_flags_t *tf, size_t n)
{
    for (size_t t = 0; t < n; t++) {
        bool used = false;
        const char *name;
        json_t *ev;
        json_object_foreach(json_object_get(draft, "events"), name, ev)
        {
            const char *topic = json_string_value(json_object_get(ev, "topic"));
            used = used || (topic != NULL && strcmp(topic, tf[t].topic) == 0);
        }
        if (!used) {
            fprintf(stderr,
                    "steward discover: no event of the draft arrives on %s: its envelope is "
                    "left out of the draft\n",
                    tf[t].topic);
            continue;
        }
        json_t *topics = json_object_get(draft, "topics");
        if (topics == NULL) {
            topics = json_object();
            json_object_set_new(draft, "topics", topics);
        }
        json_t *entry = json_object_get(topics, tf[t].topic);
        if (entry == NULL) {
            entry = json_object();
            json_object_set_new(topics, tf[t].topic, entry);
        }
        json_object_set_new(entry, "envelope", json_deep_copy(tf[t].json));
    }
}

/* The flag as the user gave it, for a message: "--type", or "--type
 * shipping=..." for one topic's. */
static const char *flag_name(char *buf, size_t size, const char *flag, const char *topic)
{
    if (topic == NULL)
        return flag;
    snprintf(buf, size, "%s %s=...", flag, topic);
    return buf;
}

/* Writes a refusal of a flag into why; false, for `return refuse(...)`.
 * A longer message is cut at why_size. */
__attribute__((format(printf, 3, 4))) static bool refuse(char *why, size_t why_size,
                                                         const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, why_size, fmt, ap);
    va_end(ap);
    return false;
}

/*
 * The envelope the flags describe, over what *env holds (the defaults, or
 * the process's for one topic's flags; pointers borrowed from the
 * arguments) and, in `json`, as a definition's "envelope" says it (the
 * members the flags gave). `topic` names the topic of per-topic flags, for
 * the messages; NULL for the global ones. False with the problem in why.
 */
static bool envelope_from_flags(def_envelope_t *env, json_t *json, const char *topic,
                                const char *type, const char *id, const char *time,
                                const char *format, char *why, size_t why_size)
{
    char err[256], f1[300], f2[300];
    if (type != NULL && strncmp(type, "header:", 7) == 0) {
        if (type[7] == '\0') {
            return refuse(why, why_size, "%s: header:NAME needs a header name",
                          flag_name(f1, sizeof f1, "--type", topic));
        }
        env->type_header = (char *) type + 7;
        json_object_set_new(json, "type", json_pack("{s:s}", "header", type + 7));
    } else if (type != NULL) {
        if (!jsonptr_valid(type, err, sizeof err) || type[0] == '\0') {
            return refuse(why, why_size, "%s is a JSON pointer or header:NAME: %s",
                          flag_name(f1, sizeof f1, "--type", topic),
                          type[0] == '\0' ? "empty" : err);
        }
        /* A type rule replaces the one it is over, header and all. */
        env->type_pointer = (char *) type;
        env->type_header = NULL;
        json_object_set_new(json, "type", json_string(type));
    }
    if (id != NULL) {
        if (!jsonptr_valid(id, err, sizeof err) || id[0] == '\0') {
            return refuse(why, why_size, "%s is a JSON pointer: %s",
                          flag_name(f1, sizeof f1, "--id", topic), id[0] == '\0' ? "empty" : err);
        }
        env->id_pointer = (char *) id;
        json_object_set_new(json, "id", json_string(id));
    }
    static const char *const formats[] = {"rfc3339", "epoch_seconds", "epoch_millis"};
    static const def_time_format_t values[] = {DEF_TIME_RFC3339, DEF_TIME_EPOCH_SECONDS,
                                               DEF_TIME_EPOCH_MILLIS};
    long f = -1;
    for (long i = 0; format != NULL && i < 3; i++) {
        if (strcmp(format, formats[i]) == 0)
            f = i;
    }
    if (format != NULL && f < 0) {
        return refuse(why, why_size, "%s is rfc3339, epoch_seconds or epoch_millis",
                      flag_name(f1, sizeof f1, "--time-format", topic));
    }
    if (time != NULL && strcmp(time, "kafka_timestamp") == 0) {
        if (format != NULL) {
            return refuse(why, why_size, "%s goes with a %s pointer",
                          flag_name(f1, sizeof f1, "--time-format", topic),
                          topic != NULL ? flag_name(f2, sizeof f2, "--time", topic) : "--time");
        }
        env->time_pointer = NULL;
        env->time_format = DEF_TIME_KAFKA;
        json_object_set_new(json, "time", json_pack("{s:s}", "from", "kafka_timestamp"));
    } else if (time != NULL) {
        if (!jsonptr_valid(time, err, sizeof err) || time[0] == '\0') {
            return refuse(why, why_size, "%s is a JSON pointer or kafka_timestamp: %s",
                          flag_name(f1, sizeof f1, "--time", topic),
                          time[0] == '\0' ? "empty" : err);
        }
        env->time_pointer = (char *) time;
        env->time_format = f >= 0 ? values[f] : DEF_TIME_TEXT_OR_MS;
        json_object_set_new(json, "time",
                            f >= 0 ? json_pack("{s:s, s:s}", "pointer", time, "format", formats[f])
                                   : json_string(time));
    } else if (format != NULL) {
        return refuse(why, why_size, "%s goes with a %s pointer",
                      flag_name(f1, sizeof f1, "--time-format", topic),
                      flag_name(f2, sizeof f2, "--time", topic));
    }
    return true;
}

/* Whether `topic` is one of the comma-separated `list`. */
static bool in_list(const char *list, const char *topic)
{
    size_t len = strlen(topic);
    for (const char *p = list; p != NULL && *p != '\0';) {
        const char *comma = strchr(p, ',');
        size_t n = comma != NULL ? (size_t) (comma - p) : strlen(p);
        if (n == len && strncmp(p, topic, len) == 0)
            return true;
        p = comma != NULL ? comma + 1 : NULL;
    }
    return false;
}

/*
 * Whether arg is the per-topic form TOPIC=VALUE of an envelope flag, and
 * where its value starts. A global value is a JSON pointer, header:NAME or
 * a word without '=' (kafka_timestamp, rfc3339); a topic name has neither
 * '/' nor ':'.
 */
static bool per_topic(const char *arg, const char **value)
{
    const char *eq = strchr(arg, '=');
    if (eq == NULL || arg[0] == '/' || strncmp(arg, "header:", 7) == 0)
        return false;
    *value = eq + 1;
    return true;
}

/*
 * Records one per-topic flag (arg is "TOPIC=VALUE") in tf[0..*n). False
 * with the problem in why: no topic before '=', or the flag given twice
 * for the topic.
 */
static bool add_topic_flag(topic_flags_t *tf, size_t *n, int opt, const char *arg, char *why,
                           size_t why_size)
{
    const char *flag = opt == 'T'   ? "--type"
                       : opt == 'I' ? "--id"
                       : opt == 'M' ? "--time"
                                    : "--time-format";
    const char *value = strchr(arg, '=') + 1;
    size_t len = (size_t) (value - 1 - arg);
    if (len == 0) {
        snprintf(why, why_size, "%s %s: expected TOPIC=VALUE, the topic before '='", flag, arg);
        return false;
    }
    topic_flags_t *t = NULL;
    for (size_t i = 0; i < *n && t == NULL; i++)
        if (strlen(tf[i].topic) == len && strncmp(tf[i].topic, arg, len) == 0)
            t = &tf[i];
    if (t == NULL) {
        t = &tf[(*n)++];
        t->topic = strndup(arg, len);
        if (t->topic == NULL) {
            snprintf(why, why_size, "out of memory");
            return false;
        }
    }
    const char **slot = opt == 'T'   ? &t->type
                        : opt == 'I' ? &t->id
                        : opt == 'M' ? &t->time
                                     : &t->time_format;
    if (*slot != NULL) {
        snprintf(why, why_size, "%s %s=... given twice", flag, t->topic);
        return false;
    }
    *slot = value;
    return true;
}

/*
 * Each topic's envelope from its flags, over the process's (*global):
 * every topic must be one of --topics. False with the problem in why.
 */
static bool topic_envelopes(topic_flags_t *tf, size_t n, const def_envelope_t *global,
                            const char *topics_arg, char *why, size_t why_size)
{
    for (size_t t = 0; t < n; t++) {
        if (!in_list(topics_arg, tf[t].topic)) {
            snprintf(why, why_size, "%s %s=...: %s is not one of --topics",
                     tf[t].type   ? "--type"
                     : tf[t].id   ? "--id"
                     : tf[t].time ? "--time"
                                  : "--time-format",
                     tf[t].topic, tf[t].topic);
            return false;
        }
        tf[t].env = *global;
        if ((tf[t].json = json_object()) == NULL) {
            snprintf(why, why_size, "out of memory");
            return false;
        }
        if (!envelope_from_flags(&tf[t].env, tf[t].json, tf[t].topic, tf[t].type, tf[t].id,
                                 tf[t].time, tf[t].time_format, why, why_size))
            return false;
    }
    return true;
}

static void topic_flags_free(topic_flags_t *tf, size_t n)
{
    for (size_t t = 0; tf != NULL && t < n; t++) {
        free(tf[t].topic);
        json_decref(tf[t].json);
    }
    free(tf);
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
        {"key", required_argument, NULL, 'K'},
        {"type", required_argument, NULL, 'T'},
        {"id", required_argument, NULL, 'I'},
        {"time", required_argument, NULL, 'M'},
        {"time-format", required_argument, NULL, 'F'},
        {"format", required_argument, NULL, 'R'},
        {"config", required_argument, NULL, 'c'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *topics_arg = NULL, *since = "1h", *max_arg = NULL, *process = NULL,
               *draft_file = NULL;
    const char *brokers = NULL, *config_path = getenv("STEWARD_CONFIG");
    const char *key_arg = NULL, *type_arg = NULL, *id_arg = NULL, *time_arg = NULL,
               *time_format = NULL, *format_arg = NULL;
    const char **props = calloc((size_t) argc + 1, sizeof *props);
    size_t n_props = 0;
    topic_flags_t *tflags = calloc((size_t) argc + 1, sizeof *tflags);
    size_t n_tflags = 0;
    char flag_problem[512] = "";
    int opt, as_json = 0;

    optind = 1;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, CLI_SHORT_OPTIONS, options, NULL)) != -1) {
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
        case 'K':
            key_arg = optarg;
            break;
        case 'T':
        case 'I':
        case 'M':
        case 'F': {
            const char *value;
            if (per_topic(optarg, &value)) {
                if (flag_problem[0] == '\0')
                    add_topic_flag(tflags, &n_tflags, opt, optarg, flag_problem,
                                   sizeof flag_problem);
                break;
            }
            *(opt == 'T'   ? &type_arg
              : opt == 'I' ? &id_arg
              : opt == 'M' ? &time_arg
                           : &time_format) = optarg;
            break;
        }
        case 'R':
            format_arg = optarg;
            break;
        default:
            free(props);
            topic_flags_free(tflags, n_tflags);
            return cli_help_or_usage("steward discover", opt, argv, discover_usage);
        }
    }
    /* The config as `steward run` reads it (file, then the environment), for
     * its brokers and librdkafka properties; --brokers and --kafka win. */
    config_t *cfg = NULL;
    bool avro = format_arg != NULL && strcmp(format_arg, "confluent_avro") == 0;
    if ((config_path != NULL && *config_path != '\0') || avro) {
        char why[1024];
        err_class_t cls;
        if ((cfg = config_build(avro && (config_path == NULL || *config_path == '\0') ? NULL
                                                                                      : config_path,
                                NULL, 0, &cls, why, sizeof why)) == NULL) {
            fprintf(stderr, "steward discover: config: %s\n",
                    cls == ERR_FATAL ? "out of memory" : why);
            free(props);
            topic_flags_free(tflags, n_tflags);
            return EXIT_USAGE;
        }
    }
    if (brokers == NULL)
        brokers = cfg != NULL ? cfg->brokers : getenv("STEWARD_KAFKA_BROKERS");
    if (brokers != NULL && *brokers == '\0')
        brokers = NULL;
    int64_t since_ms = 0;
    unsigned long long max_messages = DISCOVER_DEFAULT_MAX;
    def_envelope_t where = {.type_pointer = "/type", .id_pointer = "/id"};
    json_t *envelope = json_object();
    char why[512];
    char key_err[256];
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
        : format_arg != NULL && strcmp(format_arg, "json") != 0 &&
                strcmp(format_arg, "confluent_json") != 0 && !avro
            ? "--format is json, confluent_json or confluent_avro"
        : avro && cfg->registry_url[0] == '\0' && cfg->registry_directory[0] == '\0'
            ? "--format confluent_avro reads each value with its writer schema: set "
              "schema_registry.url (STEWARD_SCHEMA_REGISTRY_URL) or schema_registry.directory "
              "in the config"
        : key_arg != NULL && strcmp(key_arg, "message_key") != 0 && key_arg[0] != '/' &&
                strchr(key_arg, '=') != NULL
            ? "--key is one key for every topic (a JSON pointer or message_key): a type whose "
              "events carry it elsewhere gets its own key in the draft without being told"
        : key_arg != NULL && strcmp(key_arg, "message_key") != 0 &&
                !jsonptr_valid(key_arg, key_err, sizeof key_err)
            ? (snprintf(why, sizeof why, "--key is a JSON pointer or message_key: %s", key_err),
               why)
        : flag_problem[0] != '\0' ? flag_problem
        : !envelope_from_flags(&where, envelope, NULL, type_arg, id_arg, time_arg, time_format, why,
                               sizeof why)
            ? why
        : !topic_envelopes(tflags, n_tflags, &where, topics_arg, why, sizeof why) ? why
        : optind < argc ? "unexpected arguments"
                        : NULL;
    if (problem != NULL) {
        fprintf(stderr, "steward discover: %s\n%s", problem, discover_usage);
        config_free(cfg);
        free(props);
        topic_flags_free(tflags, n_tflags);
        json_decref(envelope);
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
    reader_t r = {.env = &where,
                  .topics = tflags,
                  .n_topics = n_tflags,
                  .format = avro ? DEF_FORMAT_CONFLUENT_AVRO
                            : format_arg != NULL && strcmp(format_arg, "confluent_json") == 0
                                ? DEF_FORMAT_CONFLUENT_JSON
                                : DEF_FORMAT_JSON};
    cli_schemas_t schemas = {0};
    json_t *report = NULL;
    rd_kafka_t *rk = NULL;
    rd_kafka_conf_t *conf = NULL;
    if (avro) {
        if (!cli_schemas_open(cfg, NULL, &schemas, errstr, sizeof errstr)) {
            fprintf(stderr, "steward discover: schema registry: %s\n", errstr);
            rc = EXIT_USAGE;
            goto out;
        }
        r.schemas = schemas.schemas;
    }
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
            events[n_events++] =
                (discover_event_t){r.ev[i].type, r.ev[i].topic,    r.ev[i].time_ms,
                                   r.ev[i].id,   r.ev[i].msg.data, r.ev[i].message_key};
    }
    /* Each topic's fields that are not keys there; the order of events is
     * the broker's on any topic read without a time of its own. */
    discover_topic_fields_t *fields = calloc(n_tflags + 1, sizeof *fields);
    bool kafka_time = false;
    for (size_t t = 0; fields != NULL && t < n_tflags; t++)
        fields[t] = (discover_topic_fields_t){
            tflags[t].topic, tflags[t].env.type_header == NULL ? tflags[t].env.type_pointer : NULL,
            tflags[t].env.id_pointer, tflags[t].env.time_pointer};
    for (size_t t = 0; t < n_topics; t++) {
        bool own_time = false;
        for (size_t f = 0; f < n_tflags; f++)
            own_time =
                own_time || (tflags[f].time != NULL && strcmp(tflags[f].topic, topics[t]) == 0);
        kafka_time = kafka_time || (time_arg == NULL && !own_time);
    }
    discover_options_t dopts = {.process = process,
                                .source = topics_arg,
                                .key = key_arg,
                                .type_pointer =
                                    where.type_header == NULL ? where.type_pointer : NULL,
                                .id_pointer = where.id_pointer,
                                .time_pointer = where.time_pointer,
                                .envelope = envelope,
                                .topic_fields = fields,
                                .n_topic_fields = fields != NULL ? n_tflags : 0,
                                .kafka_time = kafka_time};
    err_class_t cls = discover_analyse(events, n_events, &dopts, &report, errstr, sizeof errstr);
    free(events);
    free(fields);
    if (cls != ERR_OK) {
        fprintf(stderr, "steward discover: %zu events read; %s\n", n_events, errstr);
        /* What was left out is often why: say it here too. */
        size_t bad = r.untyped;
        for (int k = 0; k < DECODE_N_REASONS; k++)
            bad += r.rejected[k];
        if (bad > 0) {
            fprintf(stderr, "steward discover: %zu messages left out:", bad);
            for (int k = 0; k < DECODE_N_REASONS; k++) {
                if (r.rejected[k] > 0)
                    fprintf(stderr, " %s %zu", decode_reason_name((decode_reason_t) k),
                            r.rejected[k]);
            }
            if (r.untyped > 0)
                fprintf(stderr, " no_type %zu", r.untyped);
            fprintf(stderr, "\n");
        }
        rc = EXIT_RUNTIME;
        goto out;
    }
    mark_topic_envelopes(json_object_get(report, "draft"), tflags, n_tflags);
    mark_framed_topics(json_object_get(report, "draft"), &r);
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
    cli_schemas_close(&schemas); /* after the reader, which borrowed it */
    if (rk != NULL) {
        rd_kafka_consumer_close(rk);
        rd_kafka_destroy(rk);
    }
    if (conf != NULL)
        rd_kafka_conf_destroy(conf);
    free(topics);
    free(topics_copy);
    free(props);
    topic_flags_free(tflags, n_tflags); /* after the reader, which borrowed it */
    config_free(cfg);                   /* after rk: brokers may be the config's */
    json_decref(envelope);
    return rc;
}
