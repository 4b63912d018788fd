/*
 * intake_lanes - the lanes (see lane_t): each lane's pending messages
 * handed as a batch to a thread of its own, decoded first on the
 * consumer's thread, while the next batch is read; then the batch
 * finished on the consumer's thread: fenced partitions paused and logged,
 * Kafka's offsets moved, its messages released.
 */
#include "manager/intake/intake_int.h"

#include "common/clock.h"
#include "common/log.h"
#include "manager/runtime/metrics.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Drops every lane's gathered messages (not handed to a transaction):
 * they are read again from the stored offsets. */
void intake_drop_pending(intake_t *in)
{
    for (size_t l = 0; l < in->n_lanes; l++) {
        lane_t *lane = &in->lanes[l];
        for (size_t i = 0; i < lane->n_pending; i++)
            rd_kafka_message_destroy(lane->pending[i]);
        lane->n_pending = 0;
    }
}

/* Whether any lane gathered messages not yet handed to a transaction. */
bool intake_any_pending(const intake_t *in)
{
    for (size_t l = 0; l < in->n_lanes; l++) {
        if (in->lanes[l].n_pending > 0)
            return true;
    }
    return false;
}

/* ---- batches -------------------------------------------------------------- */

/* Fills decode inputs for the first n pending messages; headers live in
 * `headers`. */
static void describe_pending(const lane_t *lane, size_t n, decode_input_t *inputs,
                             decode_header_t **headers)
{
    for (size_t i = 0; i < n; i++) {
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

/* The progress of every partition of the lane the batch touches, plus
 * every caught-up one (so their watermark moves to now). */
static size_t batch_progress(intake_t *in, const lane_t *lane, size_t n_msgs,
                             store_partition_t *parts)
{
    size_t n = 0;
    int64_t now = clock_wall_ms();

    for (size_t i = 0; i < in->n_owned; i++) {
        owned_t *o = &in->owned[i];
        if (&in->lanes[o->lane] != lane)
            continue;
        int64_t next = -1, max_ts = -1;
        for (size_t m = 0; m < n_msgs; m++) {
            const rd_kafka_message_t *msg = lane->pending[m];
            if (msg->partition != o->partition || strcmp(rd_kafka_topic_name(msg->rkt), o->topic))
                continue;
            next = msg->offset + 1;
            rd_kafka_timestamp_type_t tstype;
            int64_t ts = rd_kafka_message_timestamp(msg, &tstype);
            if (ts > max_ts && ts <= now && decode_time_in_range(ts)) /* as intake_run() keeps it */
                max_ts = ts;
        }
        /* With messages left for the lane's next batch, the watermark is
         * this batch's newest, not the newest read: a deadline must not be
         * judged before the events read after this batch are committed. */
        bool rest = n_msgs < lane->n_pending;
        bool read_all = !rest && intake_caught_up(in, o);
        if (o->fenced || (next < 0 && !read_all))
            continue;
        parts[n] = (store_partition_t){.topic = o->topic,
                                       .partition = o->partition,
                                       .epoch = o->epoch,
                                       .next_offset = next,
                                       .watermark_ms = read_all ? now
                                                       : rest   ? max_ts
                                                                : o->max_ts};
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
    atomic_bool done;       /* set by the thread as it ends: joining will not wait */
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
    job->cls = intake_apply_retrying(in, job->lane, job->inputs, job->n, job->parts, job->n_parts,
                                     job->prepared, &job->stats, job->errstr, sizeof job->errstr);
    if (job->cls == ERR_INVALID) /* some message's content: find it, commit the rest */
        job->cls = intake_isolate(in, job->lane, job->inputs, job->n, job->parts, job->n_parts,
                                  &job->stats, job->errstr, sizeof job->errstr);
    job->ended = clock_monotonic_ms();
    pthread_mutex_lock(&in->jobs_lock);
    atomic_store(&job->done, true);
    pthread_cond_broadcast(&in->job_ended);
    pthread_mutex_unlock(&in->jobs_lock);
    return NULL;
}

bool intake_lane_free(const lane_t *lane)
{
    return lane->job == NULL || atomic_load(&lane->job->done);
}

/* A lane other than `lane` whose connection is free and which has
 * gathered messages, or NULL. */
static lane_t *other_ready(intake_t *in, const lane_t *lane)
{
    for (size_t l = 0; l < in->n_lanes; l++) {
        lane_t *other = &in->lanes[l];
        if (other != lane && other->n_pending > 0 && intake_lane_free(other))
            return other;
    }
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
    int64_t ended_before = lane->ended_ms;
    lane->ended_ms = job->ended;
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
        owned_t *o = intake_find_owned(in, part->topic, part->partition);
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
        char count[24], ms[24], idle[24];
        int64_t took = job->ended - job->started;
        snprintf(count, sizeof count, "%zu", job->stats.messages);
        snprintf(ms, sizeof ms, "%" PRId64, took);
        /* How long the lane's connection waited for this batch. */
        snprintf(idle, sizeof idle, "%" PRId64, ended_before > 0 ? job->started - ended_before : 0);
        LOG_DEBUG("batch committed", "messages", count, "ms", ms, "idle_ms", idle);
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
err_class_t intake_flush_start(intake_t *in, lane_t *lane, char *errstr, size_t errstr_size)
{
    size_t n = lane->n_pending < in->batch_max ? lane->n_pending : in->batch_max;
    job_t *job = calloc(1, sizeof *job);
    err_class_t cls = ERR_OK;

    if (job == NULL)
        return err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
    atomic_init(&job->done, false);
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
    describe_pending(lane, n, job->inputs, job->headers);
    job->n_parts = batch_progress(in, lane, n, job->parts);
    memcpy(job->msgs, lane->pending, n * sizeof *job->msgs);
    job->n = n;
    lane->n_pending -= n;
    memmove(lane->pending, lane->pending + n, lane->n_pending * sizeof *lane->pending);
    if (lane->n_pending > 0)
        lane->pending_since_ms = clock_monotonic_ms();
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
    /* While this lane's connection is busy, every other lane whose own
     * batch ends meanwhile is handed what it has gathered at once: the
     * consumer reads nothing while it waits here, and a connection left
     * idle until this wait ends is most of what two transactions in flight
     * lost to one. */
    while (!intake_lane_free(lane)) {
        lane_t *other = NULL;
        pthread_mutex_lock(&in->jobs_lock);
        while (!intake_lane_free(lane) && (other = other_ready(in, lane)) == NULL)
            pthread_cond_wait(&in->job_ended, &in->jobs_lock);
        pthread_mutex_unlock(&in->jobs_lock);
        if (other != NULL && (cls = intake_flush_start(in, other, errstr, errstr_size)) != ERR_OK) {
            job_free(job);
            return cls;
        }
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
err_class_t intake_finish_all(intake_t *in, char *errstr, size_t errstr_size)
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
err_class_t intake_flush_all(intake_t *in, char *errstr, size_t errstr_size)
{
    err_class_t cls = ERR_OK;
    /* intake_flush_start() has joined every batch of its lane before it on any
     * failure; the others are joined below either way. */
    for (size_t l = 0; l < in->n_lanes && cls == ERR_OK; l++) {
        do /* a lane may hold more than a batch */
            cls = intake_flush_start(in, &in->lanes[l], errstr, errstr_size);
        while (cls == ERR_OK && in->lanes[l].n_pending > 0);
    }
    if (cls != ERR_OK) {
        char ignored[512];
        intake_finish_all(in, ignored, sizeof ignored);
        return cls;
    }
    return intake_finish_all(in, errstr, errstr_size);
}
