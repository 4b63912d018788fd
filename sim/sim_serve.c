/*
 * sim_serve - the responder of steward-sim --active: orders placed,
 * commands read, replies sent when due; see sim_serve.h.
 */
#include "sim/sim_serve.h"

#include "common/clock.h"
#include "common/err.h"
#include "sim/sim.h"
#include "sim/sim_active.h"
#include "sim/sim_def.h"
#include "sim/sim_kafka.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <librdkafka/rdkafka.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Seconds on the monotonic clock: rates, timeouts, lingering. */
static double mono_s(void)
{
    return (double) clock_monotonic_ms() / 1000.0;
}

/* A reply waiting for its emit time, on a min-heap. */
typedef struct pending {
    sim_reply_t reply;
    char key[96];
    uint64_t seq;
} pending_t;

typedef struct responder {
    const sim_args_t *cfg;
    sim_active_model_t model;
    sim_t *sim;
    sim_kafka_producer_t *producer;
    rd_kafka_t *consumer;
    FILE *truth;
    pending_t **heap;
    size_t n_heap, cap_heap;
    uint64_t seq;
    uint64_t commands, unreadable, replies, stale, placed;
    uint64_t faults[SIM_N_FAULTS];
    const volatile sig_atomic_t *stop; /* main()'s signal flag */
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
    size_t n = sim_active_respond(opts, &r->model, &order, fault, &cmd, clock_wall_ms(), out,
                                  SIM_MAX_REPLIES);
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
        if (*r->stop)
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
static int topic_partitions(rd_kafka_t *rk, const char *topic, int timeout_ms,
                            const volatile sig_atomic_t *stop)
{
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
    int partitions = 0;
    double until = mono_s() + timeout_ms / 1000.0;
    while (rkt != NULL && partitions == 0 && mono_s() < until && !*stop) {
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
static rd_kafka_t *command_consumer(const sim_args_t *cfg, const sim_active_model_t *model,
                                    const volatile sig_atomic_t *stop, char *errstr,
                                    size_t errstr_size)
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
        int n = topic_partitions(rk, t, 30000, stop);
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
    sim_kafka_msg_t *o = malloc(sizeof *o);
    int rc = EXIT_OK;
    double last_activity = mono_s(), last_progress = mono_s();
    if (o == NULL)
        return EXIT_RUNTIME;

    while (!*r->stop) {
        int64_t now = clock_wall_ms();
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
            sim_kafka_msg_fill(o, sim_options(r->sim), &item);
            o->timestamp_ms = now;
            if (sim_kafka_produce(r->producer, o, err, sizeof err) != ERR_OK) {
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

int sim_serve_run(sim_args_t *cfg, const char *src, const volatile sig_atomic_t *stop)
{
    char errstr[512];
    json_error_t jerr;
    responder_t r = {0};
    int rc = EXIT_OK;
    r.cfg = cfg;
    r.stop = stop;

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
    cfg->sim.start_ms = clock_wall_ms();
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

    r.producer = sim_kafka_producer_new(cfg->brokers, stop, errstr, sizeof errstr);
    if (r.producer == NULL) {
        fprintf(stderr, "steward-sim: Kafka producer: %s\n", errstr);
        rc = EXIT_RUNTIME;
        goto done;
    }
    const char *names[SIM_KAFKA_MAX_TOPICS];
    size_t n = 0;
    sim_def_flow_t flow = {0};
    for (int k = 0; k < SIM_N_KINDS; k++) {
        snprintf(flow.topic[k], sizeof flow.topic[k], "%s", r.model.topic[k]);
        names[n++] = r.model.topic[k];
    }
    for (size_t i = 0; i < r.model.n_states; i++)
        if (r.model.states[i].command_topic[0] != '\0')
            names[n++] = r.model.states[i].command_topic;
    if (sim_kafka_create_topics(r.producer, names, n, cfg->partitions, errstr, sizeof errstr) !=
            ERR_OK ||
        sim_kafka_producer_topics(r.producer, &flow, errstr, sizeof errstr) != ERR_OK) {
        fprintf(stderr, "steward-sim: %s\n", errstr);
        rc = EXIT_RUNTIME;
        goto done;
    }
    r.consumer = command_consumer(cfg, &r.model, stop, errstr, sizeof errstr);
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
        char faults[256] = "";
        size_t len = 0;
        for (int k = 0; k < SIM_N_FAULTS && len < sizeof faults; k++)
            len += (size_t) snprintf(faults + len, sizeof faults - len, "%s\"%s\":%" PRIu64,
                                     k > 0 ? "," : "", sim_fault_name((sim_fault_kind_t) k),
                                     r.faults[k]);
        fprintf(r.truth,
                "{\"summary\":{\"mode\":\"active\",\"orders\":%" PRIu64 ",\"commands\":%" PRIu64
                ",\"unreadable_commands\":%" PRIu64 ",\"replies\":%" PRIu64
                ",\"stale_replies\":%" PRIu64 ",\"faults\":{%s},\"seed\":%" PRIu64
                ",\"process\":\"%s\"}}\n",
                r.placed, r.commands, r.unreadable, r.replies, r.stale, faults, cfg->sim.seed,
                r.model.process);
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
    sim_kafka_producer_free(r.producer);
    sim_free(r.sim);
    return rc;
}
