/*
 * dispatcher - the command outbox onto Kafka; see dispatcher.h.
 */
#include "manager/commands/dispatcher.h"

#include "common/backoff.h"
#include "common/clock.h"
#include "common/db.h"
#include "common/failpoint.h"
#include "common/log.h"
#include "common/pgarr.h"
#include "manager/alerting/alerts.h"
#include "manager/commands/cmdqueue.h"
#include "manager/commands/cmdwake.h"
#include "manager/runtime/kafka_conf.h"
#include "manager/runtime/metrics.h"

#include <inttypes.h>
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ERROR_KEEP 512

/* One produced row waiting for its delivery report (the message's opaque).
 * In d->flying until reported, then in d->done. */
typedef struct flight {
    struct flight *prev, *next;
    long long id;
    int attempts; /* failed attempts before this one */
    char *process, *topic, *key, *ce_id;
    char lease[48]; /* the row's next_attempt_at as this claim last wrote it */
    bool lost;      /* cancelled, or no longer this claim's: never to be sent from here */
    rd_kafka_resp_err_t err;
} flight_t;

struct dispatcher {
    PGconn *conn;
    char *conninfo;
    rd_kafka_t *rk;
    dispatcher_config_t cfg; /* strings below are copies */
    char *brokers, *owner;
    char **kafka_props;
    size_t n_kafka_props;
    const gen_t *gen; /* borrowed */
    pgarr_t paused;   /* the pause list as a text[] */
    bool paused_all;
    char *paused_text;  /* as given, to tell a change */
    bool paused_logged; /* the last change logged was a pause */
    char *source;
    size_t in_flight;
    flight_t *flying;          /* produced, not yet reported */
    flight_t *done;            /* reported, not yet recorded; newest first */
    int64_t renewed_ms;        /* monotonic: when every flying row's lease was last written */
    int64_t renew_at_ms;       /* monotonic: the next renewal */
    bool taken_back;           /* the queue was purged since the last renewal that worked */
    bool fatal;                /* the idempotent producer hit a fatal error: make a new one */
    rd_kafka_queue_t *reports; /* the producer's main queue, which wakes `wake` */
    cmdwake_t *wake;
    bool look_now;        /* something may be claimable: claim at the next step */
    bool draining;        /* stopping: claim nothing more */
    int64_t next_look_ms; /* monotonic: the next claim when nothing wakes it */
    size_t max_in_flight; /* no claim while this many rows are in flight */
    /* A handle per topic commands went to, the producer's (made with it,
     * destroyed before it). */
    rd_kafka_topic_t **topics;
    size_t n_topics, cap_topics;
};

/* ---- the pure parts ------------------------------------------------------- */

/* source with each "${process}" replaced by process, cut to fit. */
static void source_of(const char *source, const char *process, char *buf, size_t size)
{
    static const char var[] = "${process}";
    size_t len = 0;
    if (size == 0)
        return;
    buf[0] = '\0';
    for (const char *p = source; *p != '\0' && len + 1 < size;) {
        const char *part = p;
        size_t n = 1;
        if (strncmp(p, var, sizeof var - 1) == 0) {
            part = process;
            n = strlen(process);
            p += sizeof var - 1;
        } else {
            p++;
        }
        if (n > size - 1 - len)
            n = size - 1 - len;
        memcpy(buf + len, part, n);
        len += n;
    }
    buf[len] = '\0';
}

size_t dispatcher_headers(const dispatcher_command_t *c, const char *source,
                          dispatcher_header_t *out, char *source_buf, size_t source_size)
{
    static const char *const names[DISPATCHER_N_HEADERS] = {
        "ce_specversion",    "ce_id",          "ce_source",         "ce_type",
        "ce_time",           "content-type",   "ce_idempotencykey", "steward_idempotency_key",
        "ce_stewardprocess", "ce_stewardkey",  "ce_stewardstate",   "ce_stewardstep",
        "ce_stewardattempt", "ce_stewardtoken"};
    source_of(source != NULL ? source : DISPATCHER_SOURCE_DEFAULT, c->process, source_buf,
              source_size);
    for (int i = 0; i < DISPATCHER_N_HEADERS; i++) {
        out[i].name = names[i];
        out[i].value_buf[0] = '\0';
    }
    const char *idem = c->idempotency_key != NULL ? c->idempotency_key : "";
    out[0].value = "1.0";
    out[1].value = c->ce_id;
    out[2].value = source_buf;
    out[3].value = c->type;
    out[4].value = c->time;
    out[5].value = "application/json";
    out[6].value = idem;
    out[7].value = idem;
    out[8].value = c->process;
    out[9].value = c->key;
    out[10].value = c->state;
    snprintf(out[11].value_buf, sizeof out[11].value_buf, "%ld", c->step);
    out[11].value = out[11].value_buf;
    snprintf(out[12].value_buf, sizeof out[12].value_buf, "%ld", c->attempt);
    out[12].value = out[12].value_buf;
    snprintf(out[13].value_buf, sizeof out[13].value_buf, "%lld", c->token);
    out[13].value = out[13].value_buf;
    size_t n = DISPATCHER_N_HEADERS;
    if (c->traceparent != NULL && c->traceparent[0] != '\0') {
        const char *names_trace[4] = {"traceparent", "ce_traceparent", "tracestate",
                                      "ce_tracestate"};
        const char *values[4] = {c->traceparent, c->traceparent, c->tracestate, c->tracestate};
        for (int i = 0; i < 4; i++) {
            if (values[i] == NULL || values[i][0] == '\0')
                continue;
            out[n].name = names_trace[i];
            out[n].value_buf[0] = '\0';
            out[n].value = values[i];
            n++;
        }
    }
    return n;
}

int64_t dispatcher_backoff_ms(int attempts, int64_t max_backoff_ms)
{
    return backoff_doubling_ms(attempts, 1000, max_backoff_ms);
}

/* ---- the producer ------------------------------------------------------------ */

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    dispatcher_t *d = opaque;
    flight_t *f = m->_private;
    (void) rk;
    if (f == NULL)
        return;
    if (d->in_flight > 0)
        d->in_flight--;
    if (f->prev != NULL)
        f->prev->next = f->next;
    else if (d->flying == f)
        d->flying = f->next;
    if (f->next != NULL)
        f->next->prev = f->prev;
    f->prev = NULL;
    f->err = m->err;
    f->next = d->done;
    d->done = f;
}

static void on_error(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    dispatcher_t *d = opaque;
    char why[512];
    if (err == RD_KAFKA_RESP_ERR__FATAL) {
        rd_kafka_fatal_error(rk, why, sizeof why);
        d->fatal = true;
        LOG_ERROR("the command producer hit a fatal error; starting a new one", "error", why);
        return;
    }
    LOG_LIMITED(LOG_LEVEL_WARN, "dispatch-kafka", 10000, "command producer", "error", reason);
}

static void on_log(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    (void) rk;
    /* The `kafka` properties are the consumer's too: that a consumer
     * property means nothing to this producer is no news. */
    if (strcmp(fac, "CONFWARN") == 0)
        LOG_DEBUG("librdkafka (command producer)", "facility", fac, "message", buf);
    else if (level <= 4)
        LOG_LIMITED(LOG_LEVEL_WARN, "dispatch-rdkafka", 10000, "librdkafka (command producer)",
                    "facility", fac, "message", buf);
}

static rd_kafka_t *producer_new(dispatcher_t *d, char *errstr, size_t errstr_size)
{
    kconf_params_t kp = {.brokers = d->brokers,
                         .props = (const char *const *) d->kafka_props,
                         .n_props = d->n_kafka_props,
                         .message_timeout_ms = d->cfg.timeout_ms};
    rd_kafka_conf_t *conf = kconf_new(KCONF_COMMAND_PRODUCER, &kp, errstr, errstr_size);
    char kerr[512];
    if (conf == NULL)
        return NULL;
    rd_kafka_conf_set_opaque(conf, d);
    rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
    rd_kafka_conf_set_error_cb(conf, on_error);
    rd_kafka_conf_set_log_cb(conf, on_log);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, kerr, sizeof kerr);
    if (rk == NULL) {
        rd_kafka_conf_destroy(conf);
        err_set(ERR_INVALID, errstr, errstr_size, "cannot create the command producer: %s", kerr);
    }
    return rk;
}

/* A producer whose delivery reports wake cmdwake_wait(). */
static bool producer_start(dispatcher_t *d, char *errstr, size_t errstr_size)
{
    if ((d->rk = producer_new(d, errstr, errstr_size)) == NULL)
        return false;
    d->reports = rd_kafka_queue_get_main(d->rk);
    if (d->reports != NULL)
        rd_kafka_queue_io_event_enable(d->reports, cmdwake_fd(d->wake), "r", 1);
    return true;
}

/*
 * The producer's handle for `topic`, made at its first command. A message
 * produced by topic name to a topic the producer has no metadata for waits
 * for librdkafka's scan of unknown topics, once a second; making the handle
 * asks for the topic's leader at once, so the first command to each topic
 * costs a metadata round trip instead of up to a second (which a lease or a
 * step deadline of a few seconds cannot spare). NULL, with *err saying why,
 * when librdkafka refuses the name or memory runs out.
 */
static rd_kafka_topic_t *topic_handle(dispatcher_t *d, const char *topic, rd_kafka_resp_err_t *err)
{
    for (size_t i = 0; i < d->n_topics; i++)
        if (strcmp(rd_kafka_topic_name(d->topics[i]), topic) == 0)
            return d->topics[i];
    *err = RD_KAFKA_RESP_ERR__CRIT_SYS_RESOURCE; /* out of memory */
    if (d->n_topics == d->cap_topics) {
        size_t cap = d->cap_topics ? d->cap_topics * 2 : 8;
        rd_kafka_topic_t **grown = realloc(d->topics, cap * sizeof *grown);
        if (grown == NULL)
            return NULL;
        d->topics = grown;
        d->cap_topics = cap;
    }
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(d->rk, topic, NULL);
    if (rkt == NULL) {
        *err = rd_kafka_last_error();
        return NULL;
    }
    d->topics[d->n_topics++] = rkt;
    return rkt;
}

/* Every queue and topic handle goes before the producer, or its
 * destruction waits. */
static void producer_stop(dispatcher_t *d)
{
    for (size_t i = 0; i < d->n_topics; i++)
        rd_kafka_topic_destroy(d->topics[i]);
    d->n_topics = 0;
    if (d->reports != NULL)
        rd_kafka_queue_destroy(d->reports);
    d->reports = NULL;
    if (d->rk != NULL)
        rd_kafka_destroy(d->rk);
    d->rk = NULL;
}

static void flight_free(flight_t *f)
{
    if (f == NULL)
        return;
    free(f->process);
    free(f->topic);
    free(f->key);
    free(f->ce_id);
    free(f);
}

/* ---- life ------------------------------------------------------------------- */

dispatcher_t *dispatcher_new(const dispatcher_config_t *cfg, err_class_t *cls, char *errstr,
                             size_t errstr_size)
{
    dispatcher_t *d = calloc(1, sizeof *d);
    if (d == NULL) {
        *cls = err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
        return NULL;
    }
    d->cfg = *cfg;
    d->conninfo = strdup(cfg->conninfo != NULL ? cfg->conninfo : "");
    d->brokers = strdup(cfg->brokers != NULL ? cfg->brokers : "");
    d->owner = strdup(cfg->owner != NULL ? cfg->owner : "steward");
    d->source = strdup(cfg->source != NULL ? cfg->source : DISPATCHER_SOURCE_DEFAULT);
    d->kafka_props = calloc(cfg->n_kafka_props + 1, sizeof *d->kafka_props);
    bool ok = d->conninfo != NULL && d->brokers != NULL && d->owner != NULL && d->source != NULL &&
              d->kafka_props != NULL;
    for (size_t i = 0; ok && i < cfg->n_kafka_props; i++)
        ok = (d->kafka_props[d->n_kafka_props++] = strdup(cfg->kafka_props[i])) != NULL;
    d->cfg.conninfo = d->cfg.brokers = d->cfg.owner = d->cfg.source = NULL;
    d->cfg.kafka_props = NULL;
    if (d->cfg.batch_size <= 0)
        d->cfg.batch_size = 500;
    if (d->cfg.lease_ms <= 0)
        d->cfg.lease_ms = 5000;
    if (d->cfg.interval_ms <= 0)
        d->cfg.interval_ms = 100;
    /* A few batches on their way at once: enough to stream while the
     * broker acknowledges the ones before, few enough to renew cheaply. */
    d->max_in_flight = (size_t) d->cfg.batch_size * 4;
    d->look_now = true;
    if (!ok) {
        *cls = err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
        dispatcher_free(d);
        return NULL;
    }
    if ((d->wake = cmdwake_new(errstr, errstr_size)) == NULL) {
        *cls = ERR_FATAL;
        dispatcher_free(d);
        return NULL;
    }
    /* CloudEvents requires a non-empty URI-reference; a space or a control
     * character cannot be in one. */
    bool source_ok = d->source[0] != '\0';
    for (const unsigned char *p = (const unsigned char *) d->source; source_ok && *p; p++)
        source_ok = *p > ' ' && *p != 0x7f;
    if (!source_ok) {
        *cls = err_set(ERR_INVALID, errstr, errstr_size,
                       "dispatch.source \"%s\" is not a URI-reference (CloudEvents' source): "
                       "give a non-empty URI without spaces, e.g. \"%s\"",
                       d->source, DISPATCHER_SOURCE_DEFAULT);
        dispatcher_free(d);
        return NULL;
    }
    if (!producer_start(d, errstr, errstr_size)) {
        *cls = ERR_INVALID;
        dispatcher_free(d);
        return NULL;
    }
    if ((d->conn = db_connect(d->conninfo, "steward dispatcher", errstr, errstr_size)) == NULL) {
        *cls = ERR_TRANSIENT;
        dispatcher_free(d);
        return NULL;
    }
    *cls = ERR_OK;
    return d;
}

void dispatcher_free(dispatcher_t *d)
{
    if (d == NULL)
        return;
    if (d->rk != NULL) {
        /* What is still in flight is dropped unrecorded: its lease runs
         * out and it is sent again under the same ce_id (at least once).
         * The purge hands every message back, so its opaque is freed. */
        rd_kafka_purge(d->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
        for (int i = 0; i < 50 && d->in_flight > 0; i++)
            rd_kafka_poll(d->rk, 100);
    }
    producer_stop(d);
    cmdwake_free(d->wake);
    while (d->flying != NULL) { /* no report came: nothing will now */
        flight_t *f = d->flying;
        d->flying = f->next;
        flight_free(f);
    }
    while (d->done != NULL) {
        flight_t *f = d->done;
        d->done = f->next;
        flight_free(f);
    }
    if (d->conn != NULL)
        PQfinish(d->conn);
    for (size_t i = 0; i < d->n_kafka_props; i++)
        free(d->kafka_props[i]);
    free(d->kafka_props);
    free(d->topics);
    pgarr_free(&d->paused);
    free(d->paused_text);
    free(d->conninfo);
    free(d->brokers);
    free(d->owner);
    free(d->source);
    free(d);
}

void dispatcher_set_generation(dispatcher_t *d, const gen_t *gen)
{
    d->gen = gen;
}

typedef struct pause_ctx {
    dispatcher_t *d;
    bool same;
} pause_ctx_t;

static void pause_name(const char *name, void *arg)
{
    pause_ctx_t *c = arg;
    pgarr_add(&c->d->paused, name);
    /* A typo would leave the process it meant sending: say so. */
    if (!c->same && c->d->gen != NULL && def_set_latest(c->d->gen->defs, name) == NULL)
        LOG_WARN("dispatch.paused names a process no loaded definition has; check the "
                 "spelling",
                 "process", name);
}

void dispatcher_set_paused(dispatcher_t *d, const char *list)
{
    if (list == NULL)
        list = "";
    pause_ctx_t ctx = {d, d->paused_text != NULL && strcmp(d->paused_text, list) == 0};
    free(d->paused_text);
    d->paused_text = strdup(list);
    pgarr_reset(&d->paused);
    /* Out of memory holds everything rather than send what should wait. */
    d->paused_all = gen_pause_each(list, pause_name, &ctx);
    if (ctx.same)
        return;
    d->look_now = true; /* what a lifted pause held is due now */
    if (*list != '\0')
        LOG_INFO("command dispatch paused", "processes", list);
    else if (d->paused_text != NULL && d->paused_logged)
        LOG_INFO("command dispatch resumed");
    d->paused_logged = *list != '\0';
}

size_t dispatcher_in_flight(const dispatcher_t *d)
{
    return d->in_flight;
}

/* ---- recording -------------------------------------------------------------- */

/* The team a dispatch_failed alert of `process` pages. Borrowed. */
static const char *owner_of(const dispatcher_t *d, const char *process)
{
    const def_t *def = d->gen != NULL ? def_set_latest(d->gen->defs, process) : NULL;
    return def != NULL && def->owner != NULL ? def->owner : d->owner;
}

static void identity_of(const char *process, const char *topic, char **out)
{
    if (asprintf(out, "steward:dispatch_failed:%s:%s", process, topic) < 0)
        *out = NULL;
}

/* The broker has it, whatever happened to the row since: a row cancelled
 * after its message left is recorded as sent, honestly, the cancellation
 * kept in last_error (a row is sent or cancelled, never both). */
static const char sent_sql[] =
    "UPDATE steward.commands SET sent_at = now(), attempts = attempts + 1, "
    "  last_error = CASE WHEN cancelled_at IS NULL THEN NULL "
    "    ELSE 'delivered although it was cancelled: ' || cancel_reason END, "
    "  cancelled_at = NULL, cancel_reason = NULL "
    "WHERE id = ANY($1::bigint[]) AND sent_at IS NULL";

/* Only a row this claim still holds ($4 its lease) takes the failure: one
 * cancelled, or claimed elsewhere since, is not ours to put off. */
static const char failed_sql[] =
    "UPDATE steward.commands c SET attempts = c.attempts + 1, last_error = u.e, "
    "  next_attempt_at = now() + steward.ms_interval(u.b) "
    "FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::text[]) AS u(id, e, b, l) "
    "WHERE c.id = u.id AND c.sent_at IS NULL AND c.cancelled_at IS NULL "
    "  AND c.next_attempt_at = u.l::timestamptz";

/* Taken back unsent (purged) while still this claim's: due again at once,
 * no attempt counted. */
static const char release_sql[] =
    "UPDATE steward.commands c SET next_attempt_at = now() "
    "FROM unnest($1::bigint[], $2::text[]) AS u(id, l) "
    "WHERE c.id = u.id AND c.sent_at IS NULL AND c.cancelled_at IS NULL "
    "  AND c.next_attempt_at = u.l::timestamptz";

static bool purged(rd_kafka_resp_err_t err)
{
    return err == RD_KAFKA_RESP_ERR__PURGE_QUEUE || err == RD_KAFKA_RESP_ERR__PURGE_INFLIGHT;
}

/* Writes what the reports said: sent rows (and the alerts their success
 * resolves), failed rows with their backoff (and the alerts they open), in
 * one transaction. A failure rolls back; the rows are sent again after
 * their lease. */
static err_class_t record(dispatcher_t *d, dispatcher_stats_t *stats, char *errstr,
                          size_t errstr_size)
{
    pgarr_t sent = {0}, failed = {0}, errors = {0}, backoff = {0}, leases = {0};
    pgarr_t released = {0}, released_leases = {0};
    alert_batch_t alerts = {0};
    err_class_t cls = ERR_OK;
    flight_t *list = d->done;
    size_t n_sent = 0, n_failed = 0, n_dropped = 0;

    if (list == NULL)
        return ERR_OK;
    d->done = NULL;
    for (flight_t *f = list; f != NULL; f = f->next) {
        char *identity = NULL;
        if (f->err != RD_KAFKA_RESP_ERR_NO_ERROR && (purged(f->err) || f->lost)) {
            /* Not the broker's verdict: this dispatcher took it back, or
             * the row is no longer this claim's to send. */
            if (f->lost) {
                n_dropped++;
            } else {
                pgarr_add_int(&released, f->id);
                pgarr_add(&released_leases, f->lease);
            }
            continue;
        }
        identity_of(f->process, f->topic, &identity);
        if (f->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
            pgarr_add_int(&sent, f->id);
            if (identity != NULL)
                alert_batch_resolve_key(&alerts, ALERT_DISPATCH_FAILED, identity, "delivered");
            n_sent++;
        } else {
            char error[ERROR_KEEP], summary[1024];
            snprintf(error, sizeof error, "%s (%s)", rd_kafka_err2str(f->err),
                     rd_kafka_err2name(f->err));
            pgarr_add_int(&failed, f->id);
            pgarr_add(&errors, error);
            pgarr_add_int(&backoff, dispatcher_backoff_ms(f->attempts + 1, d->cfg.max_backoff_ms));
            pgarr_add(&leases, f->lease);
            snprintf(summary, sizeof summary,
                     "%s: commands cannot be delivered to topic %s: %s (retrying; nothing is "
                     "dropped)",
                     f->process, f->topic, error);
            json_t *details =
                json_pack("{s:s, s:s, s:s, s:s, s:i}", "topic", f->topic, "error", error, "key",
                          f->key, "ce_id", f->ce_id, "attempts", f->attempts + 1);
            if (identity != NULL)
                alert_batch_open(&alerts, ALERT_DISPATCH_FAILED, f->process, NULL, NULL,
                                 owner_of(d, f->process), summary, details, identity, -1);
            json_decref(details);
            LOG_LIMITED(LOG_LEVEL_WARN, "dispatch-failed", 5000, "a command could not be delivered",
                        "process", f->process, "topic", f->topic, "key", f->key, "error", error);
            n_failed++;
        }
        free(identity);
    }

    alert_counts_t counts = {0};
    cls = db_exec(d->conn, "recording deliveries", "BEGIN", 0, NULL, errstr, errstr_size);
    if (cls == ERR_OK)
        cls = FAILPOINT_ERROR("dispatcher.before_mark_sent", errstr, errstr_size);
    if (cls == ERR_OK && sent.n > 0) {
        const char *params[1] = {pgarr_text(&sent)};
        cls = params[0] == NULL
                  ? err_set(ERR_TRANSIENT, errstr, errstr_size, "recording: out of memory")
                  : db_exec(d->conn, "marking commands sent", sent_sql, 1, params, errstr,
                            errstr_size);
    }
    if (cls == ERR_OK && failed.n > 0) {
        pgarr_t *cols[4] = {&failed, &errors, &backoff, &leases};
        const char *params[4];
        cls = !pgarr_params(cols, 4, params)
                  ? err_set(ERR_TRANSIENT, errstr, errstr_size, "recording: out of memory")
                  : db_exec(d->conn, "recording failed deliveries", failed_sql, 4, params, errstr,
                            errstr_size);
    }
    if (cls == ERR_OK && released.n > 0) {
        pgarr_t *cols[2] = {&released, &released_leases};
        const char *params[2];
        cls = !pgarr_params(cols, 2, params)
                  ? err_set(ERR_TRANSIENT, errstr, errstr_size, "recording: out of memory")
                  : db_exec(d->conn, "releasing commands taken back", release_sql, 2, params,
                            errstr, errstr_size);
    }
    if (cls == ERR_OK)
        cls = alert_batch_write(d->conn, &alerts, d->gen != NULL ? d->gen->routes : NULL, &counts,
                                errstr, errstr_size);
    if (cls == ERR_OK)
        cls = db_exec(d->conn, "committing deliveries", "COMMIT", 0, NULL, errstr, errstr_size);
    if (cls != ERR_OK) {
        db_rollback(d->conn);
    } else {
        FAILPOINT("dispatcher.after_mark_sent");
        /* A row sent may have held back its instance's next one, and a
         * row released is due again at once: look without waiting. */
        if (n_sent > 0 || released.n > 0)
            d->look_now = true;
        stats->sent += n_sent;
        stats->failed += n_failed;
        stats->dropped += n_dropped;
        metrics_add(&metrics.commands_sent, (long long) n_sent);
        metrics_add(&metrics.dispatch_failures, (long long) n_failed);
        if (counts.opened > 0) {
            char opened[24];
            snprintf(opened, sizeof opened, "%zu", counts.opened);
            LOG_WARN("dispatch_failed alert opened", "alerts", opened);
        }
    }
    if (n_dropped > 0) { /* nothing to write: the rows say why already */
        char dropped[24];
        snprintf(dropped, sizeof dropped, "%zu", n_dropped);
        LOG_INFO("claimed commands taken back unsent: cancelled, or claimed elsewhere", "commands",
                 dropped);
    }
    while (list != NULL) {
        flight_t *f = list;
        list = f->next;
        flight_free(f);
    }
    pgarr_free(&sent);
    pgarr_free(&failed);
    pgarr_free(&errors);
    pgarr_free(&backoff);
    pgarr_free(&leases);
    pgarr_free(&released);
    pgarr_free(&released_leases);
    alert_batch_clear(&alerts);
    return cls;
}

/* ---- claiming and producing ------------------------------------------------------ */

/*
 * Due rows, oldest first, none of a paused process ($2 the names, $3 all),
 * none cancelled (the instance left its step) and none with an earlier
 * unsent, uncancelled row of its instance: one instance's commands go one
 * at a time, in order. The lease ($1 ms) is the new next_attempt_at.
 *
 * Written so that its plan does not depend on the table's statistics,
 * which lag far behind a backlog that grows from nothing (on a fresh table
 * the planner took it for empty and checked each candidate against every
 * unsent row: 1.5 s a claim at 20,000 rows, docs/performance-active.md).
 * The due rows are read in the order of commands_pending and the
 * earlier-row check is a subquery per candidate (not an anti-join the
 * planner may turn around), probing commands_unsent (migration 0022); the
 * rows are then updated by their ids as one array, so by the primary key,
 * never by scanning the table.
 */
static const char claim_sql[] =
    "WITH due AS MATERIALIZED ("
    "  SELECT p.id FROM steward.commands p "
    "  WHERE p.sent_at IS NULL AND p.cancelled_at IS NULL AND p.next_attempt_at <= now() "
    "    AND NOT ($3::bool OR p.process = ANY($2::text[])) "
    "    AND NOT (SELECT EXISTS (SELECT 1 FROM steward.commands e WHERE e.process = p.process "
    "      AND e.key = p.key AND e.id < p.id AND e.sent_at IS NULL AND e.cancelled_at IS NULL)) "
    "  ORDER BY p.next_attempt_at, p.id LIMIT $4::int FOR UPDATE SKIP LOCKED), "
    "claimed AS ("
    "  UPDATE steward.commands c SET next_attempt_at = now() + steward.ms_interval($1::bigint) "
    "  WHERE c.id = ANY (ARRAY(SELECT id FROM due)) "
    "  RETURNING c.id, c.process, c.key, c.state, c.step, c.attempt, c.token, c.topic, c.type, "
    "    c.payload::text, c.ce_id, steward.rfc3339(c.created_at), c.attempts, "
    "    c.next_attempt_at::text, c.traceparent, c.tracestate) "
    "SELECT * FROM claimed ORDER BY id";

enum {
    C_ID,
    C_PROCESS,
    C_KEY,
    C_STATE,
    C_STEP,
    C_ATTEMPT,
    C_TOKEN,
    C_TOPIC,
    C_TYPE,
    C_PAYLOAD,
    C_CE_ID,
    C_TIME,
    C_ATTEMPTS,
    C_LEASE,
    C_TRACEPARENT,
    C_TRACESTATE
};

/* Produces one claimed row. A refusal at once (too large, unknown topic)
 * is reported like a failed delivery. */
static void produce_row(dispatcher_t *d, const PGresult *res, int row)
{
    flight_t *f = calloc(1, sizeof *f);
    if (f == NULL)
        return; /* the lease runs out and the row is claimed again */
    f->id = strtoll(PQgetvalue(res, row, C_ID), NULL, 10);
    f->attempts = atoi(PQgetvalue(res, row, C_ATTEMPTS));
    f->process = strdup(PQgetvalue(res, row, C_PROCESS));
    f->topic = strdup(PQgetvalue(res, row, C_TOPIC));
    f->key = strdup(PQgetvalue(res, row, C_KEY));
    f->ce_id = strdup(PQgetvalue(res, row, C_CE_ID));
    if (f->process == NULL || f->topic == NULL || f->key == NULL || f->ce_id == NULL) {
        flight_free(f);
        return;
    }
    snprintf(f->lease, sizeof f->lease, "%s", PQgetvalue(res, row, C_LEASE));
    char idempotency_key[65];
    dispatcher_command_t c = {
        .process = f->process,
        .key = f->key,
        .state = PQgetvalue(res, row, C_STATE),
        .type = PQgetvalue(res, row, C_TYPE),
        .ce_id = f->ce_id,
        .time = PQgetvalue(res, row, C_TIME),
        .step = atol(PQgetvalue(res, row, C_STEP)),
        .attempt = atol(PQgetvalue(res, row, C_ATTEMPT)),
        .token = strtoll(PQgetvalue(res, row, C_TOKEN), NULL, 10),
        .idempotency_key = idempotency_key,
        .traceparent =
            PQgetisnull(res, row, C_TRACEPARENT) ? NULL : PQgetvalue(res, row, C_TRACEPARENT),
        .tracestate =
            PQgetisnull(res, row, C_TRACESTATE) ? NULL : PQgetvalue(res, row, C_TRACESTATE),
    };
    cmdq_idempotency_key(c.process, c.key, c.step, idempotency_key);
    dispatcher_header_t h[DISPATCHER_MAX_HEADERS];
    char source[512];
    size_t n_headers = dispatcher_headers(&c, d->source, h, source, sizeof source);
    rd_kafka_headers_t *hdrs = rd_kafka_headers_new(n_headers);
    for (size_t i = 0; i < n_headers; i++)
        rd_kafka_header_add(hdrs, h[i].name, -1, h[i].value, -1);
    const char *payload = PQgetvalue(res, row, C_PAYLOAD);
    rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR;
    rd_kafka_topic_t *rkt = topic_handle(d, f->topic, &err);
    if (rkt != NULL)
        err =
            rd_kafka_producev(d->rk, RD_KAFKA_V_RKT(rkt), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                              RD_KAFKA_V_KEY(f->key, strlen(f->key)),
                              RD_KAFKA_V_VALUE((void *) payload, strlen(payload)),
                              RD_KAFKA_V_HEADERS(hdrs), RD_KAFKA_V_OPAQUE(f), RD_KAFKA_V_END);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        rd_kafka_headers_destroy(hdrs); /* not taken on failure */
        f->err = err;
        f->next = d->done;
        d->done = f;
        return;
    }
    if (d->flying == NULL) { /* the oldest lease now is this claim's */
        d->renewed_ms = clock_monotonic_ms();
        d->renew_at_ms = d->renewed_ms + d->cfg.lease_ms / 3;
    }
    f->next = d->flying;
    if (d->flying != NULL)
        d->flying->prev = f;
    d->flying = f;
    d->in_flight++;
}

static err_class_t claim_and_produce(dispatcher_t *d, dispatcher_stats_t *stats, char *errstr,
                                     size_t errstr_size)
{
    char lease[24], limit[16];
    size_t room = d->max_in_flight - d->in_flight, want = (size_t) d->cfg.batch_size;
    if (want > room)
        want = room;
    snprintf(lease, sizeof lease, "%" PRId64, d->cfg.lease_ms);
    snprintf(limit, sizeof limit, "%zu", want);
    const char *names = pgarr_text(&d->paused);
    if (names == NULL)
        return err_set(ERR_TRANSIENT, errstr, errstr_size, "claiming commands: out of memory");
    const char *params[4] = {lease, names, d->paused_all ? "t" : "f", limit};
    err_class_t cls;
    PGresult *res =
        db_query(d->conn, "claiming commands", claim_sql, 4, params, &cls, errstr, errstr_size);
    if (res == NULL)
        return cls;
    int rows = PQntuples(res);
    if (rows > 0) /* the claim runs every interval; one that leased nothing is no test */
        FAILPOINT("dispatcher.after_claim");
    /* A full claim may have left due rows behind it. */
    if ((size_t) rows >= want)
        d->look_now = true;
    stats->claimed += (size_t) rows;
    for (int row = 0; row < rows; row++)
        produce_row(d, res, row);
    if (rows > 0)
        FAILPOINT("dispatcher.after_produce");
    PQclear(res);
    return ERR_OK;
}

/*
 * The rows in flight keep their lease ($3 ms) while the claim that wrote
 * $2 still holds them; a row that is not renewed was cancelled, sent, or
 * (after a lapse) claimed elsewhere, and NULL comes back for it.
 */
static const char renew_sql[] =
    "WITH f AS (SELECT * FROM unnest($1::bigint[], $2::text[]) WITH ORDINALITY AS f(id, lease, "
    "n)), "
    "renewed AS ("
    "  UPDATE steward.commands c SET next_attempt_at = now() + steward.ms_interval($3::bigint) "
    "  FROM f WHERE c.id = f.id AND c.next_attempt_at = f.lease::timestamptz "
    "    AND c.sent_at IS NULL AND c.cancelled_at IS NULL "
    "  RETURNING c.id, c.next_attempt_at::text AS lease) "
    "SELECT f.id, r.lease FROM f LEFT JOIN renewed r ON r.id = f.id ORDER BY f.n";

/* librdkafka gives back what it has not transmitted yet (reported as
 * purged at the next poll); what is on the wire stays. */
static void take_back(dispatcher_t *d)
{
    rd_kafka_resp_err_t err =
        rd_kafka_purge(d->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_NON_BLOCKING);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
        LOG_WARN("the command producer refused to give back queued commands", "error",
                 rd_kafka_err2str(err));
    d->taken_back = true;
}

/* Renews the lease of every row in flight, a third of a lease after the
 * last renewal; a row lost meanwhile (cancelled, or no longer this claim's)
 * is taken back from the producer so that it is never sent from here. When
 * renewing has not worked for two thirds of a lease, the rows may soon be
 * another replica's: everything not yet transmitted is taken back. */
static err_class_t renew(dispatcher_t *d, char *errstr, size_t errstr_size)
{
    int64_t now = clock_monotonic_ms();
    if (d->flying == NULL) {
        d->taken_back = false;
        return ERR_OK;
    }
    if (now < d->renew_at_ms)
        return ERR_OK;
    d->renew_at_ms = now + (d->cfg.lease_ms / 3 > 100 ? d->cfg.lease_ms / 3 : 100);
    pgarr_t ids = {0}, leases = {0};
    for (flight_t *f = d->flying; f != NULL; f = f->next) {
        pgarr_add_int(&ids, f->id);
        pgarr_add(&leases, f->lease);
    }
    char lease[24];
    snprintf(lease, sizeof lease, "%" PRId64, d->cfg.lease_ms);
    pgarr_t *cols[2] = {&ids, &leases};
    const char *params[3] = {NULL, NULL, lease};
    err_class_t cls = ERR_OK;
    PGresult *res = NULL;
    if (!pgarr_params(cols, 2, params))
        cls = err_set(ERR_TRANSIENT, errstr, errstr_size, "renewing leases: out of memory");
    else
        res = db_query(d->conn, "renewing the leases of commands in flight", renew_sql, 3, params,
                       &cls, errstr, errstr_size);
    if (res != NULL) {
        /* Rows in the list's order: the list is as it was, since reports
         * are served only by rd_kafka_poll() on this thread. */
        size_t lost = 0;
        int rows = PQntuples(res), row = 0;
        for (flight_t *f = d->flying; f != NULL && row < rows; f = f->next, row++) {
            if (strtoll(PQgetvalue(res, row, 0), NULL, 10) != f->id)
                break; /* cannot be; renew nothing rather than the wrong row */
            if (PQgetisnull(res, row, 1)) {
                lost += !f->lost;
                f->lost = true;
            } else {
                snprintf(f->lease, sizeof f->lease, "%s", PQgetvalue(res, row, 1));
            }
        }
        PQclear(res);
        d->renewed_ms = now;
        d->taken_back = false;
        if (lost > 0)
            take_back(d);
    } else if (!d->taken_back && now - d->renewed_ms > d->cfg.lease_ms * 2 / 3) {
        LOG_WARN("the leases of commands in flight cannot be renewed; taking back what is not "
                 "yet sent, so that no other dispatcher sends it too",
                 "error", errstr);
        take_back(d);
    }
    pgarr_free(&ids);
    pgarr_free(&leases);
    return cls;
}

/* After a fatal error the producer is of no further use: what it holds
 * comes back as failed (purged) and a new one takes over. */
static err_class_t renew_producer(dispatcher_t *d, char *errstr, size_t errstr_size)
{
    rd_kafka_purge(d->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
    rd_kafka_poll(d->rk, 0);
    if (d->in_flight > 0)
        return ERR_OK; /* reports still to come: next step */
    producer_stop(d);
    d->fatal = false;
    if (!producer_start(d, errstr, errstr_size))
        return ERR_TRANSIENT;
    return ERR_OK;
}

/* ---- one step ------------------------------------------------------------------ */

/*
 * Waits at most wait_ms for something to do: a transaction that queued
 * commands, a delivery report to serve, or, while rows are in flight, the
 * next renewal of their leases. Rows that fall due by time alone (a
 * backoff passed, a dead dispatcher's lease run out) are found by the look
 * every dispatch.interval, when a claim may be made (`may_claim`). After a
 * failure (`failed`) it waits the whole wait_ms, so that a database or
 * producer that is not there is not asked again at once.
 */
static void wait_for_work(dispatcher_t *d, int64_t wait_ms, bool may_claim, bool failed)
{
    int64_t now = clock_monotonic_ms();
    if (!failed && may_claim && d->next_look_ms - now < wait_ms)
        wait_ms = d->next_look_ms - now;
    if (!failed && d->flying != NULL && d->renew_at_ms - now < wait_ms)
        wait_ms = d->renew_at_ms - now;
    if (cmdwake_wait(d->wake, d->conn, wait_ms))
        d->look_now = true;
}

/* Whether a claim may be made now: a producer that works, room for more
 * in flight, not stopping. */
static bool may_claim(const dispatcher_t *d)
{
    return d->rk != NULL && !d->fatal && !d->draining && d->in_flight < d->max_in_flight;
}

err_class_t dispatcher_tick(dispatcher_t *d, int64_t wait_ms, dispatcher_stats_t *stats,
                            char *errstr, size_t errstr_size)
{
    err_class_t cls = ERR_OK;
    memset(stats, 0, sizeof *stats);
    if (d->rk == NULL && !producer_start(d, errstr, errstr_size)) {
        wait_for_work(d, wait_ms, false, true);
        return ERR_TRANSIENT;
    }
    if (PQstatus(d->conn) != CONNECTION_OK) {
        PQfinish(d->conn);
        cmdwake_lost(d->wake);
        if ((d->conn = db_connect(d->conninfo, "steward dispatcher", errstr, errstr_size)) ==
            NULL) {
            wait_for_work(d, wait_ms, false, true);
            return ERR_TRANSIENT;
        }
    }
    bool fresh = false;
    cls = cmdwake_listen(d->wake, d->conn, &fresh, errstr, errstr_size);
    if (fresh) /* what was queued while nobody listened is found by looking */
        d->look_now = true;
    if (cls == ERR_OK && d->fatal)
        cls = renew_producer(d, errstr, errstr_size);
    int64_t now = clock_monotonic_ms();
    if (cls == ERR_OK && may_claim(d) && (d->look_now || now >= d->next_look_ms)) {
        d->look_now = false;
        d->next_look_ms = now + d->cfg.interval_ms;
        cls = claim_and_produce(d, stats, errstr, errstr_size);
    }
    if (cls == ERR_OK && d->rk != NULL)
        cls = renew(d, errstr, errstr_size);
    if (d->rk != NULL)
        rd_kafka_poll(d->rk, 0);
    err_class_t recorded = record(d, stats, errstr, errstr_size);
    if (cmdwake_take(d->wake, d->conn))
        d->look_now = true;
    bool failed = cls != ERR_OK || recorded != ERR_OK;
    if (failed || !d->look_now || !may_claim(d))
        wait_for_work(d, wait_ms, may_claim(d), failed);
    return cls != ERR_OK ? cls : recorded;
}

void dispatcher_run(dispatcher_t *d, volatile sig_atomic_t *stop, int64_t drain_ms,
                    gen_current_t *cur)
{
    char errstr[1024];
    gen_t *held = gen_acquire(cur);
    int64_t drain_until = -1;

    unsigned paused_seen = 0;
    dispatcher_set_generation(d, held);
    for (;;) {
        dispatcher_stats_t stats;
        metrics_beat(METRICS_DISPATCHER); /* /healthz: this thread is not stuck */
        if (gen_refresh(cur, &held))
            dispatcher_set_generation(d, held);
        char *paused = gen_paused_refresh(cur, &paused_seen);
        if (paused != NULL)
            dispatcher_set_paused(d, paused);
        free(paused);
        if (*stop) {
            /* Claim nothing more; record what is in flight, within the bound. */
            if (drain_until < 0)
                drain_until = clock_wall_ms() + drain_ms;
            if (d->in_flight == 0 || clock_wall_ms() >= drain_until)
                break;
            d->draining = true;
        }
        err_class_t cls = dispatcher_tick(d, 50, &stats, errstr, sizeof errstr);
        if (cls != ERR_OK)
            LOG_LIMITED(LOG_LEVEL_WARN, "dispatcher-tick", 10000,
                        "dispatcher pass failed; retrying", "error", errstr, "class",
                        err_class_name(cls));
    }
    /* What came back is recorded while the routes are still held; what
     * is still in flight is left to its lease. */
    dispatcher_stats_t last = {0};
    if (record(d, &last, errstr, sizeof errstr) != ERR_OK)
        LOG_WARN("the last deliveries could not be recorded; they will be sent again", "error",
                 errstr);
    d->gen = NULL;
    gen_release(held);
}
