/*
 * intake - the consumer: setup, the poll loop (messages dealt to the lanes,
 * the once-a-second tick), the subscription, caught-up detection and a
 * replay's end. Rebalances, lanes, retries and the dead-letter copy are
 * the other intake_*.c files (intake_int.h lists them). See intake.h.
 */
#include "manager/intake/intake.h"

#include "common/clock.h"
#include "common/log.h"
#include "manager/intake/intake_int.h"
#include "manager/runtime/defcache.h"
#include "manager/runtime/kafka_conf.h"
#include "manager/runtime/metrics.h"

#include <inttypes.h>
#include <librdkafka/rdkafka.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

owned_t *intake_find_owned(intake_t *in, const char *topic, int32_t partition)
{
    for (size_t i = 0; i < in->n_owned; i++) {
        if (in->owned[i].partition == partition && strcmp(in->owned[i].topic, topic) == 0)
            return &in->owned[i];
    }
    return NULL;
}

void intake_clear_owned(intake_t *in)
{
    for (size_t i = 0; i < in->n_owned; i++)
        free(in->owned[i].topic);
    free(in->owned);
    in->owned = NULL;
    in->n_owned = 0;
}

/* Sleeps up to ms, waking early when asked to stop. Waiting out an
 * outage is progress as far as /healthz is concerned. */
void intake_nap(intake_t *in, int ms)
{
    for (int slept = 0; slept < ms && !*in->stop; slept += 100) {
        metrics_beat(METRICS_INTAKE);
        usleep(100 * 1000);
    }
}

/* ---- librdkafka callbacks ------------------------------------------------- */

void intake_on_log(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
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

/*
 * Whether intake has read all a partition holds: the broker answers, and
 * nothing lies between what was read and the high watermark of the last
 * fetch. Only then may the partition's watermark be "now": a silent
 * partition on a broker that cannot be reached is not caught up, it is
 * unseen.
 */
bool intake_caught_up(intake_t *in, const owned_t *o)
{
    int64_t lo, hi;
    if (!in->reachable ||
        rd_kafka_get_watermark_offsets(in->rk, o->topic, o->partition, &lo, &hi) !=
            RD_KAFKA_RESP_ERR_NO_ERROR ||
        hi < 0 || lo < 0)
        return false;
    return (o->next >= 0 ? o->next : lo) >= hi;
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

/* A confluent_avro topic needs somewhere to find its schemas. */
static err_class_t intake_check_schemas(const intake_t *in, const def_set_t *defs, char *errstr,
                                        size_t errstr_size)
{
    const def_event_t *ev = schemas_avro_event(defs);
    if (ev == NULL || in->schemas != NULL)
        return ERR_OK;
    return err_set(ERR_INVALID, errstr, errstr_size,
                   "event %s's topic %s has \"format\": \"confluent_avro\", but no schema "
                   "registry is configured: set schema_registry.url (or "
                   "schema_registry.directory for <id>.avsc files)",
                   ev->name, ev->topic);
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
    pthread_mutex_init(&in->jobs_lock, NULL);
    pthread_cond_init(&in->job_ended, NULL);
    in->defs = defs;
    in->routes = cfg->routes;
    in->schemas = cfg->schemas;
    if ((*cls = intake_check_schemas(in, defs, errstr, errstr_size)) != ERR_OK)
        goto fail;
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
    batch_config_t bcfg = {cfg->limits,          cfg->routes, cfg->record_unknown,
                           cfg->lock_timeout_ms, 0,           cfg->schemas};
    for (size_t l = 0; l < in->n_lanes; l++) {
        lane_t *lane = &in->lanes[l];
        if ((lane->pending = calloc(in->batch_max * INTAKE_LANE_BATCHES, sizeof *lane->pending)) ==
            NULL) {
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
        !intake_dlq_new(in, cfg, errstr, errstr_size)) {
        *cls = ERR_INVALID;
        goto fail;
    }
    if ((in->rejsum = rejsum_new(cfg->rejection_summary_ms, clock_monotonic_ms())) == NULL) {
        *cls = err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
        goto fail;
    }
    for (size_t l = 0; l < in->n_lanes; l++)
        batch_set_reject_hook(in->lanes[l].batch, intake_on_rejected, in);

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
    rd_kafka_conf_set_log_cb(conf, intake_on_log);
    rd_kafka_conf_set_error_cb(conf, on_error);
    rd_kafka_conf_set_rebalance_cb(conf, intake_on_rebalance);
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
            owned_t *o = intake_find_owned(in, rd_kafka_topic_name(m->rkt), m->partition);
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
                 * store must not become the partition's watermark, nor
                 * one ahead of the clock, which would count the partition
                 * as read past what it still holds (the judging time is
                 * capped at the clock, so deadlines would then be judged
                 * before the events that answer them are read). */
                if (ts > o->max_ts && ts <= clock_wall_ms() && decode_time_in_range(ts))
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
            /* A busy lane's batch waits while the loop reads on for the
             * other lanes; only a lane with no room left is waited for. */
            if ((full || due) &&
                (intake_lane_free(lane) || lane->n_pending >= in->batch_max * INTAKE_LANE_BATCHES))
                cls = intake_flush_start(in, lane, errstr, errstr_size);
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
             * gathered is left to fill: it moves the watermarks too. While
             * one lane gathers, each idle lane beats on its own, or a busy
             * lane would hold the others' quiet partitions (and every
             * deadline of the processes reading them) at their last batch. */
            if (cls == ERR_OK && idle)
                cls = intake_flush_all(in, errstr, errstr_size);
            for (size_t l = 0; cls == ERR_OK && !idle && l < in->n_lanes; l++)
                if (in->lanes[l].n_pending == 0 && intake_lane_free(&in->lanes[l]))
                    cls = intake_flush_start(in, &in->lanes[l], errstr, errstr_size);
            last_tick = now;
            if (in->dlq != NULL)
                rd_kafka_poll(in->dlq, 0);
            rejsum_tick(in->rejsum, now, 0);
            if (cls == ERR_OK && in->on_tick != NULL)
                in->on_tick(in, in->tick_arg);
        }
    }
    if (cls == ERR_OK && intake_any_pending(in))
        cls = intake_flush_all(in, errstr, errstr_size);
    char last[512];
    err_class_t last_cls = intake_finish_all(in, last, sizeof last);
    if (cls == ERR_OK && last_cls != ERR_OK)
        cls = err_set(last_cls, errstr, errstr_size, "%s", last);
    /* Leaving the group revokes the partitions, which logs their release. */
    rd_kafka_consumer_close(in->rk);
    return cls;
}

bool intake_drained(intake_t *in)
{
    if (in->n_owned == 0 || intake_any_pending(in))
        return false;
    for (size_t l = 0; l < in->n_lanes; l++) {
        if (in->lanes[l].job != NULL)
            return false;
    }
    for (size_t i = 0; i < in->n_owned; i++) {
        if (!in->owned[i].past_window && !intake_caught_up(in, &in->owned[i]))
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

    if ((cls = intake_check_schemas(in, defs, errstr, errstr_size)) != ERR_OK)
        return cls;
    /* A batch routed by the old definitions commits with them. One that
     * failed stops the loop, as it would have there. */
    if ((cls = intake_finish_all(in, errstr, errstr_size)) != ERR_OK) {
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
    intake_finish_all(in, errstr, sizeof errstr);
    intake_drop_pending(in);
    if (in->rk != NULL)
        rd_kafka_destroy(in->rk);
    if (in->dlq != NULL) {
        rd_kafka_flush(in->dlq, 5000); /* the copies still queued, briefly */
        /* The topic handle goes before the producer, or its destruction waits. */
        if (in->dlq_topic != NULL)
            rd_kafka_topic_destroy(in->dlq_topic);
        rd_kafka_destroy(in->dlq);
    }
    rejsum_tick(in->rejsum, clock_monotonic_ms(), 1); /* what the last batches rejected */
    rejsum_free(in->rejsum);
    for (size_t l = 0; l < INTAKE_MAX_TRANSACTIONS; l++) {
        batch_ctx_free(in->lanes[l].batch);
        store_free(in->lanes[l].store);
        free(in->lanes[l].pending);
    }
    intake_clear_owned(in);
    pthread_cond_destroy(&in->job_ended);
    pthread_mutex_destroy(&in->jobs_lock);
    free(in);
}
