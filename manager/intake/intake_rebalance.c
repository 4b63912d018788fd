/*
 * intake_rebalance - the consumer group's rebalance callback, on the
 * intake thread inside rd_kafka_consumer_poll(): an assignment finishes
 * the lanes' batches, claims the partitions in steward.offsets (a new
 * epoch) and seeks to the stored offsets; a revoke commits what was read,
 * logs the release and forgets the partitions.
 */
#include "manager/intake/intake_int.h"

#include "common/log.h"
#include "manager/runtime/metrics.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    if (intake_finish_all(in, errstr, sizeof errstr) != ERR_OK)
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
        intake_nap(in, backoff);
        backoff = backoff < 5000 ? backoff * 2 : 5000;
    }
    log_partitions("partition claimed", parts, (size_t) list->cnt, true);

    intake_clear_owned(in);
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
    err_class_t cls = intake_finish_all(in, errstr, sizeof errstr);
    if (cls == ERR_OK && !lost && intake_any_pending(in))
        cls = intake_flush_all(in, errstr, sizeof errstr);
    if (cls != ERR_OK)
        LOG_WARN("batch dropped at revoke; the next owner rereads it", "error", errstr);

    store_partition_t *parts = calloc((size_t) list->cnt + 1, sizeof *parts);
    size_t n = 0;
    for (int i = 0; i < list->cnt; i++) {
        owned_t *o = intake_find_owned(in, list->elems[i].topic, list->elems[i].partition);
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

    intake_drop_pending(in);
    intake_clear_owned(in);
    rd_kafka_assign(in->rk, NULL);
    metrics_set_assigned(0);
    metrics_clear_partitions();
}

void intake_on_rebalance(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                         rd_kafka_topic_partition_list_t *list, void *opaque)
{
    (void) rk;
    if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS)
        on_assign(opaque, list);
    else
        on_revoke(opaque, list);
}
