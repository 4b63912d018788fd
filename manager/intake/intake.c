/*
 * intake - the consumer loop, rebalances and batching; see intake.h.
 */
#include "manager/intake/intake.h"

#include "common/clock.h"
#include "common/log.h"
#include "manager/runtime/metrics.h"
#include "manager/intake/batch.h"
#include "manager/runtime/defcache.h"
#include "manager/runtime/kafka_conf.h"
#include "manager/intake/store.h"

#include <inttypes.h>
#include <librdkafka/rdkafka.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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
    rd_kafka_message_t **pending; /* the batch being gathered */
    size_t n_pending;
    int64_t pending_since_ms;
    struct job *job; /* the batch being committed on its own thread; NULL when none */
} lane_t;

struct intake {
    rd_kafka_t *rk;
    /* Lane 0's store also claims and releases partitions and records the
     * definitions: always between batches, when no lane's job runs. */
    lane_t lanes[INTAKE_MAX_TRANSACTIONS];
    size_t n_lanes;
    const def_set_t *defs; /* borrowed */
    route_table_t *routes; /* borrowed */
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

    rd_kafka_t *dlq; /* the dead-letter producer; NULL when off */
    char *dlq_topic;
};

static owned_t *find_owned(intake_t *in, const char *topic, int32_t partition)
{
    for (size_t i = 0; i < in->n_owned; i++) {
        if (in->owned[i].partition == partition && strcmp(in->owned[i].topic, topic) == 0)
            return &in->owned[i];
    }
    return NULL;
}

static void clear_owned(intake_t *in)
{
    for (size_t i = 0; i < in->n_owned; i++)
        free(in->owned[i].topic);
    free(in->owned);
    in->owned = NULL;
    in->n_owned = 0;
}

/* Sleeps up to ms, waking early when asked to stop. Waiting out an
 * outage is progress as far as /healthz is concerned. */
static void nap(intake_t *in, int ms)
{
    for (int slept = 0; slept < ms && !*in->stop; slept += 100) {
        metrics_beat(METRICS_INTAKE);
        usleep(100 * 1000);
    }
}

/* ---- librdkafka callbacks ------------------------------------------------- */

static void on_log(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    (void) rk;
    /* syslog levels: 0-3 errors, 4 warning, 5-6 info, 7 debug */
    log_level_t lvl = level <= 3   ? LOG_LEVEL_ERROR
                      : level == 4 ? LOG_LEVEL_WARN
                      : level <= 6 ? LOG_LEVEL_INFO
                                   : LOG_LEVEL_DEBUG;
    LOG_LIMITED(lvl, "librdkafka", 1000, buf, "component", "librdkafka", "facility", fac);
}

static void on_error(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    (void) rk;
    (void) opaque;
    LOG_LIMITED(LOG_LEVEL_WARN, "kafka-error", 5000, reason, "component", "kafka", "error",
                rd_kafka_err2name((rd_kafka_resp_err_t) err));
}

static err_class_t flush_all(intake_t *in, char *errstr, size_t errstr_size);
static err_class_t finish_all(intake_t *in, char *errstr, size_t errstr_size);

/* Drops every lane's gathered messages (not handed to a transaction):
 * they are read again from the stored offsets. */
static void drop_pending(intake_t *in)
{
    for (size_t l = 0; l < in->n_lanes; l++) {
        lane_t *lane = &in->lanes[l];
        for (size_t i = 0; i < lane->n_pending; i++)
            rd_kafka_message_destroy(lane->pending[i]);
        lane->n_pending = 0;
    }
}

/* Whether any lane gathered messages not yet handed to a transaction. */
static bool any_pending(const intake_t *in)
{
    for (size_t l = 0; l < in->n_lanes; l++) {
        if (in->lanes[l].n_pending > 0)
            return true;
    }
    return false;
}

/* One line per partition; next_offset only where it is known (claims). */
static void log_partitions(const char *msg, const store_partition_t *parts, size_t n,
                           bool with_offset)
{
    for (size_t i = 0; i < n; i++) {
        char partition[16], epoch[24], offset[24];
        snprintf(partition, sizeof partition, "%" PRId32, parts[i].partition);
        snprintf(epoch, sizeof epoch, "%" PRId64, parts[i].epoch);
        snprintf(offset, sizeof offset, "%" PRId64, parts[i].next_offset);
        LOG_INFO(msg, "topic", parts[i].topic, "partition", partition, "epoch", epoch,
                 "next_offset", with_offset ? offset : NULL);
    }
}

/*
 * A replay from a point in time: partitions never read by this group start
 * at the first message stamped at or after from_ms (the end, if none is).
 */
static void start_at_time(intake_t *in, rd_kafka_topic_partition_list_t *list)
{
    rd_kafka_topic_partition_list_t *times = rd_kafka_topic_partition_list_new(list->cnt);
    for (int i = 0; i < list->cnt; i++) {
        if (list->elems[i].offset == RD_KAFKA_OFFSET_BEGINNING)
            rd_kafka_topic_partition_list_add(times, list->elems[i].topic, list->elems[i].partition)
                ->offset = in->from_ms;
    }
    if (times->cnt > 0 &&
        rd_kafka_offsets_for_times(in->rk, times, 10000) == RD_KAFKA_RESP_ERR_NO_ERROR) {
        for (int i = 0; i < times->cnt; i++) {
            rd_kafka_topic_partition_t *p = rd_kafka_topic_partition_list_find(
                list, times->elems[i].topic, times->elems[i].partition);
            if (p != NULL && times->elems[i].err == RD_KAFKA_RESP_ERR_NO_ERROR)
                p->offset =
                    times->elems[i].offset >= 0 ? times->elems[i].offset : RD_KAFKA_OFFSET_END;
        }
    } else if (times->cnt > 0) {
        LOG_WARN("cannot look up offsets by time; replaying from the beginning");
    }
    rd_kafka_topic_partition_list_destroy(times);
}

static void on_assign(intake_t *in, rd_kafka_topic_partition_list_t *list)
{
    store_partition_t *parts = calloc((size_t) list->cnt + 1, sizeof *parts);
    char errstr[512];
    int backoff = 200;

    /* Lane 0's connection is its committing batch's until it is done, and
     * the lanes are dealt partitions anew. */
    if (finish_all(in, errstr, sizeof errstr) != ERR_OK)
        LOG_WARN("batch dropped at assignment; it is read again", "error", errstr);

    for (int i = 0; i < list->cnt; i++) {
        parts[i].topic = list->elems[i].topic;
        parts[i].partition = list->elems[i].partition;
    }
    /* No claim, no reading: keep trying while the database is away. */
    err_class_t cls;
    while ((cls = store_claim(in->lanes[0].store, parts, (size_t) list->cnt, errstr,
                              sizeof errstr)) != ERR_OK) {
        LOG_LIMITED(LOG_LEVEL_WARN, "claim", 5000, "cannot claim assigned partitions yet", "error",
                    errstr);
        if (cls == ERR_FATAL || *in->stop) {
            in->failure = cls == ERR_FATAL ? ERR_FATAL : ERR_OK;
            snprintf(in->failure_text, sizeof in->failure_text, "%s", errstr);
            rd_kafka_assign(in->rk, NULL);
            free(parts);
            return;
        }
        if (cls == ERR_TRANSIENT)
            store_reconnect(in->lanes[0].store, errstr, sizeof errstr);
        nap(in, backoff);
        backoff = backoff < 5000 ? backoff * 2 : 5000;
    }
    log_partitions("partition claimed", parts, (size_t) list->cnt, true);

    clear_owned(in);
    in->owned = calloc((size_t) list->cnt + 1, sizeof *in->owned);
    for (int i = 0; i < list->cnt; i++) {
        list->elems[i].offset = parts[i].next_offset == STORE_OFFSET_BEGINNING
                                    ? RD_KAFKA_OFFSET_BEGINNING
                                    : parts[i].next_offset;
        owned_t *o = &in->owned[in->n_owned++];
        o->topic = strdup(parts[i].topic);
        o->partition = parts[i].partition;
        o->epoch = parts[i].epoch;
        o->next = parts[i].next_offset;
        o->max_ts = -1;
        o->lane = (size_t) i % in->n_lanes;
    }
    free(parts);
    if (in->from_ms > 0)
        start_at_time(in, list);
    rd_kafka_assign(in->rk, list);
    metrics_set_assigned(list->cnt);
    /* In the group, even with nothing assigned: a standby is ready. */
    metrics_set(&metrics.group_joined, 1);
}

static void on_revoke(intake_t *in, rd_kafka_topic_partition_list_t *list)
{
    char errstr[512];
    bool lost = rd_kafka_assignment_lost(in->rk);

    /* Commit what was read while the partitions are still ours; if that
     * fails, the next owner reads it again from the stored offsets. The
     * batch already committing finishes either way: it holds the
     * partitions' names, and its fence decides whether it lands. */
    err_class_t cls = finish_all(in, errstr, sizeof errstr);
    if (cls == ERR_OK && !lost && any_pending(in))
        cls = flush_all(in, errstr, sizeof errstr);
    if (cls != ERR_OK)
        LOG_WARN("batch dropped at revoke; the next owner rereads it", "error", errstr);

    store_partition_t *parts = calloc((size_t) list->cnt + 1, sizeof *parts);
    size_t n = 0;
    for (int i = 0; i < list->cnt; i++) {
        owned_t *o = find_owned(in, list->elems[i].topic, list->elems[i].partition);
        if (o == NULL)
            continue;
        parts[n].topic = o->topic;
        parts[n].partition = o->partition;
        parts[n].epoch = o->epoch;
        n++;
    }
    if (n > 0 && store_release(in->lanes[0].store, parts, n, lost ? STORE_LOST : STORE_RELEASED,
                               errstr, sizeof errstr) != ERR_OK)
        LOG_WARN("could not log the partition release", "error", errstr);
    log_partitions(lost ? "partition lost" : "partition released", parts, n, false);
    free(parts);

    drop_pending(in);
    clear_owned(in);
    rd_kafka_assign(in->rk, NULL);
    metrics_set_assigned(0);
    metrics_clear_partitions();
}

static void on_rebalance(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                         rd_kafka_topic_partition_list_t *list, void *opaque)
{
    (void) rk;
    if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS)
        on_assign(opaque, list);
    else
        on_revoke(opaque, list);
}

/* ---- batches -------------------------------------------------------------- */

/* Fills decode inputs for the pending messages; headers live in `headers`. */
static void describe_pending(const lane_t *lane, decode_input_t *inputs, decode_header_t **headers)
{
    for (size_t i = 0; i < lane->n_pending; i++) {
        const rd_kafka_message_t *m = lane->pending[i];
        rd_kafka_headers_t *hdrs = NULL;
        decode_input_t *d = &inputs[i];
        rd_kafka_timestamp_type_t tstype;

        d->topic = rd_kafka_topic_name(m->rkt);
        d->partition = m->partition;
        d->offset = m->offset;
        d->key = m->key;
        d->key_len = m->key_len;
        d->value = m->payload;
        d->value_len = m->len;
        d->timestamp_ms = rd_kafka_message_timestamp(m, &tstype);
        headers[i] = NULL;
        d->headers = NULL;
        d->n_headers = 0;
        /* rd_kafka_message_headers() keeps ownership of the headers. */
        if (rd_kafka_message_headers(m, &hdrs) == RD_KAFKA_RESP_ERR_NO_ERROR && hdrs != NULL) {
            size_t count = rd_kafka_header_cnt(hdrs);
            headers[i] = calloc(count + 1, sizeof *headers[i]);
            for (size_t h = 0; headers[i] != NULL && h < count; h++) {
                const char *name;
                const void *value;
                size_t size;
                if (rd_kafka_header_get_all(hdrs, h, &name, &value, &size) ==
                    RD_KAFKA_RESP_ERR_NO_ERROR)
                    headers[i][d->n_headers++] = (decode_header_t){name, value, size};
            }
            d->headers = headers[i];
        }
    }
}

/*
 * Whether intake has read all a partition holds: the broker answers, and
 * nothing lies between what was read and the high watermark of the last
 * fetch. Only then may the partition's watermark be "now": a silent
 * partition on a broker that cannot be reached is not caught up, it is
 * unseen.
 */
static bool caught_up(intake_t *in, const owned_t *o)
{
    int64_t lo, hi;
    if (!in->reachable ||
        rd_kafka_get_watermark_offsets(in->rk, o->topic, o->partition, &lo, &hi) !=
            RD_KAFKA_RESP_ERR_NO_ERROR ||
        hi < 0 || lo < 0)
        return false;
    return (o->next >= 0 ? o->next : lo) >= hi;
}

/* The progress of every partition of the lane the batch touches, plus
 * every caught-up one (so their watermark moves to now). */
static size_t batch_progress(intake_t *in, const lane_t *lane, store_partition_t *parts)
{
    size_t n = 0;
    int64_t now = clock_wall_ms();

    for (size_t i = 0; i < in->n_owned; i++) {
        owned_t *o = &in->owned[i];
        if (&in->lanes[o->lane] != lane)
            continue;
        int64_t next = -1;
        for (size_t m = 0; m < lane->n_pending; m++) {
            const rd_kafka_message_t *msg = lane->pending[m];
            if (msg->partition == o->partition &&
                strcmp(rd_kafka_topic_name(msg->rkt), o->topic) == 0)
                next = msg->offset + 1;
        }
        bool read_all = caught_up(in, o);
        if (o->fenced || (next < 0 && !read_all))
            continue;
        parts[n] = (store_partition_t){.topic = o->topic,
                                       .partition = o->partition,
                                       .epoch = o->epoch,
                                       .next_offset = next,
                                       .watermark_ms = read_all ? now : o->max_ts};
        n++;
    }
    return n;
}

/* Kafka's own committed offsets, for lag tools only. */
static void commit_to_kafka(intake_t *in, const store_partition_t *parts, size_t n)
{
    rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new((int) n);
    for (size_t i = 0; i < n; i++) {
        if (!parts[i].fenced && parts[i].next_offset >= 0)
            rd_kafka_topic_partition_list_add(list, parts[i].topic, parts[i].partition)->offset =
                parts[i].next_offset;
    }
    if (list->cnt > 0)
        rd_kafka_commit(in->rk, list, 1);
    rd_kafka_topic_partition_list_destroy(list);
}

/*
 * batch_apply(), retrying conflicts at once and lost connections
 * with backoff until it commits, fails otherwise or intake is told to stop.
 */
static err_class_t apply_retrying(intake_t *in, lane_t *lane, const decode_input_t *msgs, size_t n,
                                  store_partition_t *parts, size_t n_parts, batch_t *prepared,
                                  batch_stats_t *stats, char *errstr, size_t errstr_size)
{
    int backoff = 100;
    err_class_t cls;

    for (;;) {
        if (prepared != NULL)
            cls = batch_commit(lane->batch, prepared, stats, errstr, errstr_size);
        else
            cls = batch_apply(lane->batch, msgs, n, parts, n_parts, stats, errstr, errstr_size);
        if (cls == ERR_OK || cls == ERR_FATAL || cls == ERR_INVALID || *in->stop)
            return cls;
        metrics_add(&metrics.batches_retried, 1);
        LOG_LIMITED(LOG_LEVEL_WARN, "batch-retry", 5000, "batch not committed; retrying", "error",
                    errstr, "class", err_class_name(cls));
        if (cls == ERR_TRANSIENT) {
            nap(in, backoff);
            backoff = backoff < 10000 ? backoff * 2 : 10000;
            if (!*in->stop) /* a stop gives up at the next try, without a connect */
                store_reconnect(lane->store, errstr, errstr_size);
        }
    }
}

/* batch_refuse_message(), retried like apply_retrying(). */
static err_class_t refuse_retrying(intake_t *in, lane_t *lane, const decode_input_t *msg,
                                   store_partition_t *part, const char *detail, char *errstr,
                                   size_t errstr_size)
{
    int backoff = 100;
    err_class_t cls;

    for (;;) {
        cls = batch_refuse_message(lane->batch, msg, part, detail, errstr, errstr_size);
        if (cls == ERR_OK || cls == ERR_FATAL || cls == ERR_INVALID || *in->stop)
            return cls;
        if (cls == ERR_TRANSIENT) {
            nap(in, backoff);
            backoff = backoff < 10000 ? backoff * 2 : 10000;
            if (!*in->stop) /* a stop gives up at the next try, without a connect */
                store_reconnect(lane->store, errstr, errstr_size);
        }
    }
}

/* Whether an ERR_INVALID names the server's resources (SQLSTATE class 53,
 * as db_query() words it, or the lock budget) rather than a message: a
 * smaller batch may pass, but one message is never to blame. */
static bool resource_refusal(const char *errstr)
{
    return strstr(errstr, "(SQLSTATE 53") != NULL || strstr(errstr, "instance locks one") != NULL;
}

/*
 * Applies msgs[lo, hi) alone: the progress of each partition among them
 * goes to the offset after its last message there, watermarks unchanged
 * (the next batch moves them). Fenced partitions are marked in `parts`.
 * A part PostgreSQL refuses is halved until the one message it refuses is
 * found; that message is recorded in steward.rejected (database_refused)
 * with the database's words. Parts commit in order, each with its own
 * offsets, so every message is committed exactly once.
 */
static err_class_t apply_range(intake_t *in, lane_t *lane, const decode_input_t *msgs, size_t lo,
                               size_t hi, store_partition_t *parts, size_t n_parts,
                               batch_stats_t *stats, char *errstr, size_t errstr_size)
{
    store_partition_t *sub = calloc(n_parts + 1, sizeof *sub);
    size_t n_sub = 0;
    batch_stats_t part_stats = {0};
    err_class_t cls;

    if (sub == NULL)
        return err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
    for (size_t i = 0; i < n_parts; i++) {
        int64_t next = -1;
        for (size_t m = lo; m < hi; m++) {
            if (msgs[m].partition == parts[i].partition &&
                strcmp(msgs[m].topic, parts[i].topic) == 0)
                next = msgs[m].offset + 1;
        }
        if (next < 0)
            continue;
        /* A partition found fenced stays in: the store needs an entry for
         * each message's partition, and finds it fenced again. */
        sub[n_sub] = parts[i];
        sub[n_sub].next_offset = next;
        sub[n_sub].watermark_ms = -1;
        sub[n_sub].fenced = false;
        n_sub++;
    }
    if (n_sub == 0) { /* no messages: nothing to apply */
        free(sub);
        return ERR_OK;
    }

    cls = apply_retrying(in, lane, msgs + lo, hi - lo, sub, n_sub, NULL, &part_stats, errstr,
                         errstr_size);
    /* One message out of the server's resources: not its fault, so it is
     * retried with backoff like a lost connection, never refused. */
    for (int backoff = 100;
         cls == ERR_INVALID && hi - lo == 1 && resource_refusal(errstr) && !*in->stop;
         backoff = backoff < 10000 ? backoff * 2 : 10000) {
        metrics_add(&metrics.batches_retried, 1);
        LOG_LIMITED(LOG_LEVEL_WARN, "batch-resources", 5000,
                    "the database is out of resources for even one message; retrying", "error",
                    errstr);
        nap(in, backoff);
        for (size_t k = 0; k < n_sub; k++)
            sub[k].fenced = false;
        cls = apply_retrying(in, lane, msgs + lo, hi - lo, sub, n_sub, NULL, &part_stats, errstr,
                             errstr_size);
    }
    if (cls == ERR_INVALID && hi - lo == 1 && resource_refusal(errstr))
        cls = ERR_TRANSIENT; /* stopping: read again from the stored offsets */
    if (cls == ERR_INVALID && hi - lo == 1) {
        char detail[512], offset[24];
        snprintf(detail, sizeof detail, "%s", errstr);
        snprintf(offset, sizeof offset, "%" PRId64, msgs[lo].offset);
        LOG_WARN("the database refused a message; recorded in steward.rejected", "topic",
                 msgs[lo].topic, "offset", offset, "error", detail);
        cls = refuse_retrying(in, lane, &msgs[lo], &sub[0], detail, errstr, errstr_size);
        if (cls == ERR_OK && !sub[0].fenced)
            part_stats.messages = 1;
    } else if (cls == ERR_INVALID) {
        size_t mid = lo + (hi - lo) / 2;
        free(sub);
        cls = apply_range(in, lane, msgs, lo, mid, parts, n_parts, stats, errstr, errstr_size);
        if (cls == ERR_OK)
            cls = apply_range(in, lane, msgs, mid, hi, parts, n_parts, stats, errstr, errstr_size);
        return cls;
    }
    if (cls == ERR_OK) {
        stats->messages += part_stats.messages;
        for (size_t k = 0; k < n_sub; k++) {
            for (size_t i = 0; sub[k].fenced && i < n_parts; i++) {
                if (parts[i].partition == sub[k].partition &&
                    strcmp(parts[i].topic, sub[k].topic) == 0)
                    parts[i].fenced = true;
            }
        }
    }
    free(sub);
    return cls;
}

/*
 * The batch was refused for what some message carried (ERR_INVALID from
 * the store): applies it in parts to find that message, then moves the
 * watermarks with an empty batch. Intake never stops for one message.
 */
static err_class_t isolate(intake_t *in, lane_t *lane, const decode_input_t *msgs, size_t n,
                           store_partition_t *parts, size_t n_parts, batch_stats_t *stats,
                           char *errstr, size_t errstr_size)
{
    char count[24];
    snprintf(count, sizeof count, "%zu", n);
    if (resource_refusal(errstr)) /* may be every batch while batch_size exceeds the budget */
        LOG_LIMITED(LOG_LEVEL_WARN, "batch-parts", 60000,
                    "the batch is more than the database takes in one transaction; committing "
                    "it in parts (logged once a minute)",
                    "messages", count, "error", errstr);
    else
        LOG_WARN("the database refused the batch for a message's content; applying it in parts "
                 "to find the message",
                 "messages", count, "error", errstr);
    memset(stats, 0, sizeof *stats);
    err_class_t cls = apply_range(in, lane, msgs, 0, n, parts, n_parts, stats, errstr, errstr_size);
    if (cls == ERR_INVALID) /* a single message's refusal refused too: not its doing */
        cls = ERR_FATAL;
    if (cls != ERR_OK)
        return cls;

    /* The parts left watermarks alone; move them now, offsets unchanged. */
    store_partition_t *marks = calloc(n_parts + 1, sizeof *marks);
    batch_stats_t ignored;
    if (marks == NULL)
        return err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
    for (size_t i = 0; i < n_parts; i++) {
        marks[i] = parts[i];
        marks[i].next_offset = -1;
        marks[i].fenced = false;
    }
    cls = apply_retrying(in, lane, msgs, 0, marks, n_parts, NULL, &ignored, errstr, errstr_size);
    free(marks);
    if (cls == ERR_INVALID) {
        LOG_LIMITED(LOG_LEVEL_WARN, "watermark-refused", 10000,
                    "watermarks not moved: the database refused them", "error", errstr);
        cls = ERR_OK;
    }
    return cls;
}

/*
 * A batch handed to its own thread: the messages (owned), their decode
 * inputs, the progress of the partitions, and the batch already decoded.
 * The thread runs the transaction while the consumer loop reads and
 * decodes the next batch; flush_finish() joins it.
 */
typedef struct job {
    intake_t *in;
    lane_t *lane;
    rd_kafka_message_t **msgs; /* owned */
    size_t n;
    decode_input_t *inputs;
    decode_header_t **headers;
    store_partition_t *parts;
    size_t n_parts;
    batch_t *prepared;
    pthread_t thread;
    int64_t started, ended; /* the transaction's, monotonic ms */
    batch_stats_t stats;
    err_class_t cls;
    char errstr[512];
} job_t;

static void job_free(job_t *job)
{
    if (job == NULL)
        return;
    batch_free(job->prepared);
    for (size_t i = 0; i < job->n; i++) {
        free(job->headers != NULL ? job->headers[i] : NULL);
        rd_kafka_message_destroy(job->msgs[i]);
    }
    free(job->msgs);
    free(job->inputs);
    free(job->headers);
    free(job->parts);
    free(job);
}

/* The committing thread: the transaction, its retries and, for a message
 * the database refuses, the search for it. Touches only the store and the
 * batch context, which the consumer loop leaves alone until it joins. */
static void *job_run(void *arg)
{
    job_t *job = arg;
    intake_t *in = job->in;

    job->started = clock_monotonic_ms();
    job->cls = apply_retrying(in, job->lane, job->inputs, job->n, job->parts, job->n_parts,
                              job->prepared, &job->stats, job->errstr, sizeof job->errstr);
    if (job->cls == ERR_INVALID) /* some message's content: find it, commit the rest */
        job->cls = isolate(in, job->lane, job->inputs, job->n, job->parts, job->n_parts,
                           &job->stats, job->errstr, sizeof job->errstr);
    job->ended = clock_monotonic_ms();
    return NULL;
}

/*
 * Waits for the lane's batch being committed, if any, and finishes it on
 * the consumer's thread: fenced partitions paused and logged, Kafka's
 * offsets moved, its messages released. Returns its outcome.
 */
static err_class_t flush_finish(intake_t *in, lane_t *lane, char *errstr, size_t errstr_size)
{
    job_t *job = lane->job;
    err_class_t cls;

    if (job == NULL)
        return ERR_OK;
    pthread_join(job->thread, NULL);
    lane->job = NULL;
    cls = job->cls;
    if (cls != ERR_OK)
        snprintf(errstr, errstr_size, "%s", job->errstr);
    if ((cls == ERR_TRANSIENT || cls == ERR_CONFLICT) && *in->stop) {
        /* Nothing is lost by giving up here: the offsets in PostgreSQL did
         * not move past what was committed, so whoever reads these
         * partitions next reads the rest again. A stop must not wait for
         * the database. */
        LOG_WARN("stopping: the batch in hand is abandoned, not committed; it is read again "
                 "from the stored offsets",
                 "error", errstr, "class", err_class_name(cls));
        cls = ERR_OK;
        goto done;
    }
    if (cls != ERR_OK)
        goto done;

    for (size_t i = 0; i < job->n_parts; i++) {
        store_partition_t *part = &job->parts[i];
        owned_t *o = find_owned(in, part->topic, part->partition);
        /* A batch read before the one that found it fenced finds it again. */
        if (!part->fenced || (o != NULL && o->fenced))
            continue;
        char partition[16];
        snprintf(partition, sizeof partition, "%" PRId32, part->partition);
        LOG_WARN("partition fenced: another replica claimed it; its messages are left to it",
                 "topic", part->topic, "partition", partition);
        metrics_add(&metrics.partitions_fenced, 1);
        if (store_release(lane->store, part, 1, STORE_FENCED, errstr, errstr_size) != ERR_OK)
            LOG_WARN("could not log the fenced partition", "error", errstr);
        if (o != NULL) {
            o->fenced = true;
            rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(1);
            rd_kafka_topic_partition_list_add(list, o->topic, o->partition);
            rd_kafka_pause_partitions(in->rk, list);
            rd_kafka_topic_partition_list_destroy(list);
        }
    }
    if (job->n > 0) {
        char count[24], ms[24];
        int64_t took = job->ended - job->started;
        snprintf(count, sizeof count, "%zu", job->stats.messages);
        snprintf(ms, sizeof ms, "%" PRId64, took);
        LOG_DEBUG("batch committed", "messages", count, "ms", ms);
        metrics_observe_batch(took);
        commit_to_kafka(in, job->parts, job->n_parts);
    }
done:
    job_free(job);
    return cls;
}

/*
 * Hands the lane's pending batch (possibly empty: a heartbeat that moves
 * the watermarks of its caught-up partitions) to a thread of its own,
 * after decoding it here, while the lane's batch before it may still be
 * committing; then waits for that one. The batch is committed with retries
 * (conflicts at once, lost connections with backoff) until it commits or
 * intake is told to stop; flush_finish() collects the outcome. Returns the
 * previous batch's outcome.
 */
static err_class_t flush_start(intake_t *in, lane_t *lane, char *errstr, size_t errstr_size)
{
    size_t n = lane->n_pending;
    job_t *job = calloc(1, sizeof *job);
    err_class_t cls = ERR_OK;

    if (job == NULL)
        return err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
    job->in = in;
    job->lane = lane;
    job->msgs = calloc(n + 1, sizeof *job->msgs);
    job->inputs = calloc(n + 1, sizeof *job->inputs);
    job->headers = calloc(n + 1, sizeof *job->headers);
    job->parts = calloc(in->n_owned + 1, sizeof *job->parts);
    if (job->msgs == NULL || job->inputs == NULL || job->headers == NULL || job->parts == NULL) {
        job_free(job);
        return err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
    }
    describe_pending(lane, job->inputs, job->headers);
    job->n_parts = batch_progress(in, lane, job->parts);
    memcpy(job->msgs, lane->pending, n * sizeof *job->msgs);
    job->n = n;
    lane->n_pending = 0;
    if (n == 0 && job->n_parts == 0) {
        job_free(job);
        return flush_finish(in, lane, errstr, errstr_size);
    }
    /* The decode stage, here, while the previous batch may still commit. */
    job->prepared = batch_prepare(lane->batch, job->inputs, n, job->parts, job->n_parts,
                                  job->errstr, sizeof job->errstr);
    if (job->prepared == NULL) {
        cls = err_set(ERR_FATAL, errstr, errstr_size, "%s", job->errstr);
        job_free(job);
        err_class_t prev = flush_finish(in, lane, errstr, errstr_size);
        return prev != ERR_OK ? prev : cls;
    }
    if ((cls = flush_finish(in, lane, errstr, errstr_size)) != ERR_OK) {
        job_free(job);
        return cls;
    }
    if (pthread_create(&job->thread, NULL, job_run, job) != 0) {
        job_free(job);
        return err_set(ERR_FATAL, errstr, errstr_size, "cannot start the batch's thread");
    }
    lane->job = job;
    return ERR_OK;
}

/* Waits for every lane's batch; the first failure's outcome. */
static err_class_t finish_all(intake_t *in, char *errstr, size_t errstr_size)
{
    err_class_t first = ERR_OK;
    char why[512];
    for (size_t l = 0; l < in->n_lanes; l++) {
        err_class_t cls = flush_finish(in, &in->lanes[l], why, sizeof why);
        if (cls != ERR_OK && first == ERR_OK)
            first = err_set(cls, errstr, errstr_size, "%s", why);
    }
    return first;
}

/* Commits every lane's pending batch, the lanes' transactions side by
 * side, and waits for them: where the loop must know every batch read so
 * far is committed (a revoke, a reload, the end) and for the heartbeat. */
static err_class_t flush_all(intake_t *in, char *errstr, size_t errstr_size)
{
    err_class_t cls = ERR_OK;
    /* flush_start() has joined every batch of its lane before it on any
     * failure; the others are joined below either way. */
    for (size_t l = 0; l < in->n_lanes && cls == ERR_OK; l++)
        cls = flush_start(in, &in->lanes[l], errstr, errstr_size);
    if (cls != ERR_OK) {
        char ignored[512];
        finish_all(in, ignored, sizeof ignored);
        return cls;
    }
    return finish_all(in, errstr, errstr_size);
}

/* ---- the dead-letter topic -------------------------------------------------- */

static void on_dlq_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void) rk;
    (void) opaque;
    if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR)
        LOG_LIMITED(LOG_LEVEL_WARN, "dlq-delivery", 5000,
                    "a rejected message could not be copied to the dead-letter topic (it stays "
                    "in steward.rejected)",
                    "error", rd_kafka_err2str(m->err));
}

/*
 * The reject hook: copies a rejected message to the dead-letter topic
 * with its key, value and headers, plus Kafka Connect's error headers
 * (__connect.errors.topic, .partition, .offset, .exception.class.name =
 * the reason, .exception.message = the detail) and steward.process when
 * only one process rejected it. Runs on the intake thread after COMMIT.
 */
static void to_dead_letter(void *arg, const decode_input_t *msg, const char *process,
                           const char *reason, const char *detail)
{
    intake_t *in = arg;
    rd_kafka_headers_t *hdrs = rd_kafka_headers_new(msg->n_headers + 6);
    char partition[16], offset[24];

    for (size_t i = 0; i < msg->n_headers; i++)
        rd_kafka_header_add(hdrs, msg->headers[i].name, -1, msg->headers[i].value,
                            (ssize_t) msg->headers[i].len);
    snprintf(partition, sizeof partition, "%" PRId32, msg->partition);
    snprintf(offset, sizeof offset, "%" PRId64, msg->offset);
    rd_kafka_header_add(hdrs, "__connect.errors.topic", -1, msg->topic, -1);
    rd_kafka_header_add(hdrs, "__connect.errors.partition", -1, partition, -1);
    rd_kafka_header_add(hdrs, "__connect.errors.offset", -1, offset, -1);
    rd_kafka_header_add(hdrs, "__connect.errors.exception.class.name", -1, reason, -1);
    rd_kafka_header_add(hdrs, "__connect.errors.exception.message", -1, detail ? detail : "", -1);
    if (process != NULL)
        rd_kafka_header_add(hdrs, "steward.process", -1, process, -1);

    rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR;
    for (int attempt = 0; attempt < 2; attempt++) {
        err = rd_kafka_producev(in->dlq, RD_KAFKA_V_TOPIC(in->dlq_topic),
                                RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                RD_KAFKA_V_KEY(msg->key, msg->key_len),
                                RD_KAFKA_V_VALUE((void *) msg->value, msg->value_len),
                                RD_KAFKA_V_HEADERS(hdrs), RD_KAFKA_V_END);
        if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL)
            break;
        rd_kafka_poll(in->dlq, 1000); /* make room, once */
    }
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        rd_kafka_headers_destroy(hdrs); /* not taken on failure */
        LOG_LIMITED(LOG_LEVEL_WARN, "dlq-produce", 5000,
                    "a rejected message could not be copied to the dead-letter topic (it stays "
                    "in steward.rejected)",
                    "error", rd_kafka_err2str(err));
    }
    rd_kafka_poll(in->dlq, 0);
}

/* Creates the dead-letter producer with the consumer's brokers and
 * properties. Returns false with the reason in errstr. */
static bool dlq_new(intake_t *in, const intake_config_t *cfg, char *errstr, size_t errstr_size)
{
    kconf_params_t kp = {
        .brokers = cfg->brokers, .props = cfg->kafka_props, .n_props = cfg->n_kafka_props};
    rd_kafka_conf_t *conf = kconf_new(KCONF_DEAD_LETTER_PRODUCER, &kp, errstr, errstr_size);
    char kerr[512];

    if (conf == NULL)
        return false;
    rd_kafka_conf_set_log_cb(conf, on_log);
    rd_kafka_conf_set_dr_msg_cb(conf, on_dlq_delivery);
    in->dlq = rd_kafka_new(RD_KAFKA_PRODUCER, conf, kerr, sizeof kerr);
    if (in->dlq == NULL) {
        rd_kafka_conf_destroy(conf);
        err_set(ERR_INVALID, errstr, errstr_size, "cannot create the dead-letter producer: %s",
                kerr);
        return false;
    }
    in->dlq_topic = strdup(cfg->dead_letter_topic);
    for (size_t l = 0; l < in->n_lanes; l++)
        batch_set_reject_hook(in->lanes[l].batch, to_dead_letter, in);
    return true;
}

/* ---- setup and the loop ----------------------------------------------------- */

/*
 * The topics that hold the watermarks (defcache_watch_topics()): those of
 * every loaded definition and of the versions that still have open
 * instances, each once. Lane 0's connection, between batches. When the
 * database cannot say which old versions are open, the loaded topics
 * alone: the scheduler's blind check names what is not read.
 */
static rd_kafka_topic_partition_list_t *subscription(intake_t *in, const def_set_t *defs)
{
    rd_kafka_topic_partition_list_t *topics = rd_kafka_topic_partition_list_new(8);
    engine_watch_topics_t watch = {0};
    char errstr[512];
    defcache_t *versions = defcache_new(defs);
    if (versions != NULL)
        defcache_set_quiet(versions, true);
    if (versions == NULL || defcache_watch_topics(versions, store_conn(in->lanes[0].store), &watch,
                                                  errstr, sizeof errstr) != ERR_OK) {
        LOG_WARN("cannot read which old definition versions have open instances; reading the "
                 "loaded versions' topics only",
                 "error", versions != NULL ? errstr : "out of memory");
        engine_watch_topics(defs, NULL, 0, &watch);
    }
    for (size_t i = 0; i < watch.n; i++) {
        const char *topic = watch.items[i].topic;
        if (rd_kafka_topic_partition_list_find(topics, topic, RD_KAFKA_PARTITION_UA) == NULL)
            rd_kafka_topic_partition_list_add(topics, topic, RD_KAFKA_PARTITION_UA);
    }
    engine_watch_topics_clear(&watch);
    defcache_free(versions); /* after the list copied the names it borrowed */
    return topics;
}

intake_t *intake_new(const intake_config_t *cfg, const def_set_t *defs, err_class_t *cls,
                     char *errstr, size_t errstr_size)
{
    intake_t *in = calloc(1, sizeof *in);
    rd_kafka_conf_t *conf = NULL;
    char kerr[512];

    if (in == NULL) {
        *cls = err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
        return NULL;
    }
    in->defs = defs;
    in->routes = cfg->routes;
    in->on_tick = cfg->on_tick;
    in->tick_arg = cfg->tick_arg;
    in->from_ms = cfg->from_ms;
    in->until_ms = cfg->until_ms;
    in->batch_max = cfg->batch_max > 0 ? cfg->batch_max : INTAKE_DEFAULT_BATCH_MAX;
    in->batch_ms = cfg->batch_ms > 0 ? cfg->batch_ms : INTAKE_DEFAULT_BATCH_MS;
    in->n_lanes = cfg->transactions > 0 ? cfg->transactions : INTAKE_DEFAULT_TRANSACTIONS;
    if (in->n_lanes > INTAKE_MAX_TRANSACTIONS) {
        *cls = err_set(ERR_INVALID, errstr, errstr_size,
                       "intake.transactions is %zu; at most %d transactions may be in flight",
                       in->n_lanes, INTAKE_MAX_TRANSACTIONS);
        goto fail;
    }

    store_config_t scfg = {cfg->conninfo, cfg->group, cfg->replica};
    batch_config_t bcfg = {cfg->limits, cfg->routes, cfg->record_unknown, cfg->lock_timeout_ms, 0};
    for (size_t l = 0; l < in->n_lanes; l++) {
        lane_t *lane = &in->lanes[l];
        if ((lane->pending = calloc(in->batch_max, sizeof *lane->pending)) == NULL) {
            *cls = err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
            goto fail;
        }
        if ((lane->store = store_new(&scfg, errstr, errstr_size)) == NULL) {
            *cls = ERR_TRANSIENT;
            goto fail;
        }
        bcfg.lock_budget = batch_lock_budget(store_lock_table(lane->store), in->n_lanes);
        if ((lane->batch = batch_ctx_new(&bcfg, lane->store, defs)) == NULL) {
            *cls = err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
            goto fail;
        }
    }
    if (bcfg.lock_budget < in->batch_max) {
        char budget[24], table[24], size[24];
        snprintf(budget, sizeof budget, "%zu", bcfg.lock_budget);
        snprintf(table, sizeof table, "%ld", store_lock_table(in->lanes[0].store));
        snprintf(size, sizeof size, "%zu", in->batch_max);
        LOG_INFO("intake.batch_size allows more instances per batch than one transaction may "
                 "lock; such batches are committed in parts (raise max_locks_per_transaction to "
                 "lock more at once)",
                 "batch_size", size, "lock_budget", budget, "lock_table", table);
    }
    if ((*cls = store_register_definitions(in->lanes[0].store, defs, errstr, errstr_size)) !=
        ERR_OK)
        goto fail;
    if (cfg->dead_letter_topic != NULL && *cfg->dead_letter_topic != '\0' &&
        !dlq_new(in, cfg, errstr, errstr_size)) {
        *cls = ERR_INVALID;
        goto fail;
    }

    char client_id[128];
    snprintf(client_id, sizeof client_id, "steward-%s", cfg->replica);
    kconf_params_t kp = {.brokers = cfg->brokers,
                         .props = cfg->kafka_props,
                         .n_props = cfg->n_kafka_props,
                         .client_id = client_id,
                         .group = cfg->group};
    if ((conf = kconf_new(KCONF_CONSUMER, &kp, errstr, errstr_size)) == NULL) {
        *cls = ERR_INVALID;
        goto fail;
    }
    rd_kafka_conf_set_log_cb(conf, on_log);
    rd_kafka_conf_set_error_cb(conf, on_error);
    rd_kafka_conf_set_rebalance_cb(conf, on_rebalance);
    rd_kafka_conf_set_opaque(conf, in);

    in->rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, kerr, sizeof kerr);
    if (in->rk == NULL) {
        *cls =
            err_set(ERR_INVALID, errstr, errstr_size, "cannot create the Kafka consumer: %s", kerr);
        goto fail;
    }
    conf = NULL; /* now owned by rk */
    rd_kafka_poll_set_consumer(in->rk);

    rd_kafka_topic_partition_list_t *topics = subscription(in, defs);
    rd_kafka_resp_err_t err = rd_kafka_subscribe(in->rk, topics);
    rd_kafka_topic_partition_list_destroy(topics);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        *cls =
            err_set(ERR_FATAL, errstr, errstr_size, "cannot subscribe: %s", rd_kafka_err2str(err));
        goto fail;
    }
    *cls = ERR_OK;
    return in;

fail:
    if (conf != NULL)
        rd_kafka_conf_destroy(conf);
    intake_free(in);
    return NULL;
}

static void handle_event(rd_kafka_message_t *m)
{
    LOG_LIMITED(LOG_LEVEL_WARN, "consume-error", 5000, rd_kafka_message_errstr(m), "error",
                rd_kafka_err2name(m->err), "topic",
                m->rkt != NULL ? rd_kafka_topic_name(m->rkt) : NULL);
    rd_kafka_message_destroy(m);
}

/* Asks the cluster for metadata, briefly: can intake reach it at all? */
static void check_reachable(intake_t *in)
{
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t err = rd_kafka_metadata(in->rk, 0, NULL, &md, 1000);
    bool reachable = err == RD_KAFKA_RESP_ERR_NO_ERROR && md != NULL && md->broker_cnt > 0;
    if (md != NULL)
        rd_kafka_metadata_destroy(md);
    metrics_set(&metrics.kafka_reachable, reachable);
    /* Said at the first look only when it is bad news. */
    if (in->reachable_known ? reachable != in->reachable : !reachable) {
        if (reachable)
            LOG_INFO("Kafka reachable");
        else
            LOG_WARN("Kafka unreachable: watermarks hold until it answers", "error",
                     rd_kafka_err2str(err));
    }
    in->reachable = reachable;
    in->reachable_known = true;
}

err_class_t intake_run(intake_t *in, volatile sig_atomic_t *stop, char *errstr, size_t errstr_size)
{
    err_class_t cls = ERR_OK;
    int64_t last_tick = clock_monotonic_ms();

    in->stop = stop;
    while (!*stop && cls == ERR_OK) {
        metrics_beat(METRICS_INTAKE);
        rd_kafka_message_t *m = rd_kafka_consumer_poll(in->rk, 100);
        if (in->failure != ERR_OK) {
            cls = err_set(in->failure, errstr, errstr_size, "%s", in->failure_text);
            if (m != NULL)
                rd_kafka_message_destroy(m);
            break;
        }
        if (m != NULL && m->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
            handle_event(m);
        } else if (m != NULL) {
            owned_t *o = find_owned(in, rd_kafka_topic_name(m->rkt), m->partition);
            metrics_add(&metrics.events_read, 1);
            rd_kafka_timestamp_type_t ts_type;
            if (o != NULL && in->until_ms > 0 &&
                rd_kafka_message_timestamp(m, &ts_type) > in->until_ms)
                o->past_window = true;
            if (o == NULL || o->fenced || o->past_window) {
                rd_kafka_message_destroy(m);
            } else {
                rd_kafka_timestamp_type_t tstype;
                int64_t ts = rd_kafka_message_timestamp(m, &tstype);
                /* A producer sets the timestamp: one PostgreSQL cannot
                 * store must not become the partition's watermark. */
                if (ts > o->max_ts && decode_time_in_range(ts))
                    o->max_ts = ts;
                o->next = m->offset + 1;
                lane_t *lane = &in->lanes[o->lane];
                if (lane->n_pending == 0)
                    lane->pending_since_ms = clock_monotonic_ms();
                lane->pending[lane->n_pending++] = m;
            }
        }

        int64_t now = clock_monotonic_ms();
        bool idle = true;
        for (size_t l = 0; l < in->n_lanes && cls == ERR_OK; l++) {
            lane_t *lane = &in->lanes[l];
            bool full = lane->n_pending >= in->batch_max;
            bool due = lane->n_pending > 0 && now - lane->pending_since_ms >= in->batch_ms;
            if (full || due)
                cls = flush_start(in, lane, errstr, errstr_size);
            idle = idle && lane->n_pending == 0;
        }
        if (cls == ERR_OK && now - last_tick >= 1000) {
            /* Once a second, busy or not, consumer work only: is Kafka
             * there, move caught-up watermarks. Parked expiry is the
             * scheduler's (it judges against the watermark, like deadlines). */
            check_reachable(in);
            for (size_t i = 0; i < in->n_owned; i++) { /* for /metrics: the cached watermark */
                owned_t *o = &in->owned[i];
                int64_t lo, hi, pos;
                if (rd_kafka_get_watermark_offsets(in->rk, o->topic, o->partition, &lo, &hi) ==
                        RD_KAFKA_RESP_ERR_NO_ERROR &&
                    hi >= 0 && (pos = o->next > lo ? o->next : lo) >= 0)
                    metrics_set_partition_lag(o->topic, o->partition, hi - pos);
            }
            /* A heartbeat for caught-up partitions, committed before the
             * tick's callback looks at what intake has done. A batch being
             * gathered is left to fill: it moves the watermarks too. */
            if (cls == ERR_OK && idle)
                cls = flush_all(in, errstr, errstr_size);
            last_tick = now;
            if (in->dlq != NULL)
                rd_kafka_poll(in->dlq, 0);
            if (cls == ERR_OK && in->on_tick != NULL)
                in->on_tick(in, in->tick_arg);
        }
    }
    if (cls == ERR_OK && any_pending(in))
        cls = flush_all(in, errstr, errstr_size);
    char last[512];
    err_class_t last_cls = finish_all(in, last, sizeof last);
    if (cls == ERR_OK && last_cls != ERR_OK)
        cls = err_set(last_cls, errstr, errstr_size, "%s", last);
    /* Leaving the group revokes the partitions, which logs their release. */
    rd_kafka_consumer_close(in->rk);
    return cls;
}

bool intake_drained(intake_t *in)
{
    if (in->n_owned == 0 || any_pending(in))
        return false;
    for (size_t l = 0; l < in->n_lanes; l++) {
        if (in->lanes[l].job != NULL)
            return false;
    }
    for (size_t i = 0; i < in->n_owned; i++) {
        if (!in->owned[i].past_window && !caught_up(in, &in->owned[i]))
            return false;
    }
    return true;
}

/* True if both lists name the same topics. */
static bool same_topics(const rd_kafka_topic_partition_list_t *a,
                        const rd_kafka_topic_partition_list_t *b)
{
    if (a->cnt != b->cnt)
        return false;
    for (int i = 0; i < a->cnt; i++) {
        if (rd_kafka_topic_partition_list_find(b, a->elems[i].topic, RD_KAFKA_PARTITION_UA) == NULL)
            return false;
    }
    return true;
}

err_class_t intake_set_definitions(intake_t *in, const def_set_t *defs, route_table_t *routes,
                                   char *errstr, size_t errstr_size)
{
    err_class_t cls;

    /* A batch routed by the old definitions commits with them. One that
     * failed stops the loop, as it would have there. */
    if ((cls = finish_all(in, errstr, errstr_size)) != ERR_OK) {
        in->failure = cls;
        snprintf(in->failure_text, sizeof in->failure_text, "%s", errstr);
        return cls;
    }
    /* Record first: a changed document under a recorded version is refused
     * before anything switches. */
    if ((cls = store_register_definitions(in->lanes[0].store, defs, errstr, errstr_size)) != ERR_OK)
        return cls;
    for (size_t l = 0; l < in->n_lanes; l++)
        batch_set_definitions(in->lanes[l].batch, defs, routes);
    in->defs = defs;
    in->routes = routes;

    rd_kafka_topic_partition_list_t *wanted = subscription(in, defs), *current = NULL;
    rd_kafka_resp_err_t err = rd_kafka_subscription(in->rk, &current);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR || !same_topics(wanted, current)) {
        err = rd_kafka_subscribe(in->rk, wanted);
        if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
            cls = err_set(ERR_FATAL, errstr, errstr_size, "cannot subscribe to the new topics: %s",
                          rd_kafka_err2str(err));
    }
    if (current != NULL)
        rd_kafka_topic_partition_list_destroy(current);
    rd_kafka_topic_partition_list_destroy(wanted);
    return cls;
}

void intake_free(intake_t *in)
{
    char errstr[512];

    if (in == NULL)
        return;
    finish_all(in, errstr, sizeof errstr);
    drop_pending(in);
    if (in->rk != NULL)
        rd_kafka_destroy(in->rk);
    if (in->dlq != NULL) {
        rd_kafka_flush(in->dlq, 5000); /* the copies still queued, briefly */
        rd_kafka_destroy(in->dlq);
    }
    free(in->dlq_topic);
    for (size_t l = 0; l < INTAKE_MAX_TRANSACTIONS; l++) {
        batch_ctx_free(in->lanes[l].batch);
        store_free(in->lanes[l].store);
        free(in->lanes[l].pending);
    }
    clear_owned(in);
    free(in);
}
