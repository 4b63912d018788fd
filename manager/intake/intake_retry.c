/*
 * intake_retry - a lane's batch committed until it lands, on the batch's
 * own thread: conflicts retried at once and lost connections with backoff;
 * a batch PostgreSQL refuses for what one message carries applied in
 * halves until that message is found and recorded in steward.rejected
 * (database_refused); one too big for the server's resources committed in
 * parts, a single message of it retried, never rejected.
 */
#include "manager/intake/intake_int.h"

#include "common/log.h"
#include "manager/runtime/metrics.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * batch_apply(), retrying conflicts at once and lost connections
 * with backoff until it commits, fails otherwise or intake is told to stop.
 */
err_class_t intake_apply_retrying(intake_t *in, lane_t *lane, const decode_input_t *msgs, size_t n,
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
            intake_nap(in, backoff);
            backoff = backoff < 10000 ? backoff * 2 : 10000;
            if (!*in->stop) /* a stop gives up at the next try, without a connect */
                store_reconnect(lane->store, errstr, errstr_size);
        }
    }
}

/* batch_refuse_message(), retried like intake_apply_retrying(). */
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
            intake_nap(in, backoff);
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

    cls = intake_apply_retrying(in, lane, msgs + lo, hi - lo, sub, n_sub, NULL, &part_stats, errstr,
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
        intake_nap(in, backoff);
        for (size_t k = 0; k < n_sub; k++)
            sub[k].fenced = false;
        cls = intake_apply_retrying(in, lane, msgs + lo, hi - lo, sub, n_sub, NULL, &part_stats,
                                    errstr, errstr_size);
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
err_class_t intake_isolate(intake_t *in, lane_t *lane, const decode_input_t *msgs, size_t n,
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
    cls = intake_apply_retrying(in, lane, msgs, 0, marks, n_parts, NULL, &ignored, errstr,
                                errstr_size);
    free(marks);
    if (cls == ERR_INVALID) {
        LOG_LIMITED(LOG_LEVEL_WARN, "watermark-refused", 10000,
                    "watermarks not moved: the database refused them", "error", errstr);
        cls = ERR_OK;
    }
    return cls;
}
