/*
 * sim_run - the choreographed run: pacing, flushing, progress; see
 * sim_run.h.
 */
#include "sim/sim_run.h"

#include "common/clock.h"
#include "common/err.h"
#include "definitions/def.h"
#include "sim/sim.h"
#include "sim/sim_def.h"
#include "sim/sim_kafka.h"
#include "sim/sim_output.h"
#include "sim/sim_schemas.h"

#include <errno.h>
#include <inttypes.h>
#include <librdkafka/rdkafka.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Seconds on the monotonic clock: rates, timeouts, lingering. */
static double mono_s(void)
{
    return (double) clock_monotonic_ms() / 1000.0;
}

typedef struct run {
    const sim_args_t *cfg;
    const sim_def_flow_t *flow;
    sim_t *sim;
    sim_kafka_producer_t *producer; /* NULL with --plan-only */
    FILE *truth;                    /* NULL without --ground-truth */
    sim_schemas_t *schemas;         /* NULL without --avro-topic */
    double started;
    double last_progress;
    uint64_t last_messages;
    const volatile sig_atomic_t *stop; /* main()'s signal flag */
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
    sim_kafka_msg_t *o = malloc(sizeof *o);
    int rc = EXIT_OK;
    unsigned tick = 0;

    if (o == NULL) {
        fprintf(stderr, "steward-sim: out of memory\n");
        return EXIT_RUNTIME;
    }
    while (!*r->stop) {
        int64_t now = clock_wall_ms();
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
        sim_kafka_msg_fill(o, &r->cfg->sim, &item);
        if (r->schemas != NULL &&
            sim_schemas_frame(r->schemas, r->flow->topic[o->kind], item.order == NULL, o, err,
                              sizeof err) != ERR_OK) {
            fprintf(stderr, "steward-sim: %s\n", err);
            rc = EXIT_RUNTIME;
            break;
        }
        if (r->producer != NULL) {
            if (sim_kafka_produce(r->producer, o, err, sizeof err) != ERR_OK) {
                if (!*r->stop) {
                    fprintf(stderr, "steward-sim: %s\n", err);
                    rc = EXIT_RUNTIME;
                }
                break;
            }
        } else {
            sim_output_plan_line(stdout, &r->cfg->sim, r->flow, &item, o);
        }
        if (item.order_done && item.order->outcome == SIM_STALLED && r->truth != NULL)
            sim_output_stall(r->truth, &r->cfg->sim, r->flow, item.order);

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
        if (*r->stop) {
            if (give_up == 0)
                give_up = mono_s() + 5.0;
            else if (mono_s() > give_up)
                break;
        }
    }
    return rd_kafka_outq_len(r->producer->rk);
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

/* Whether some event goes to `topic`; when none does, says so, naming
 * the topics that the flow has. */
static bool known_topic(const sim_def_flow_t *flow, const char *flag, const char *topic)
{
    for (int k = 0; k < SIM_N_KINDS; k++)
        if (strcmp(flow->topic[k], topic) == 0)
            return true;
    fprintf(stderr, "steward-sim: %s %s: no event goes to that topic (", flag, topic);
    for (int k = 0; k < SIM_N_KINDS; k++) {
        bool seen = false;
        for (int j = 0; j < k; j++)
            seen |= strcmp(flow->topic[j], flow->topic[k]) == 0;
        if (!seen)
            fprintf(stderr, "%s%s", k ? ", " : "", flow->topic[k]);
    }
    fprintf(stderr, ")\n");
    return false;
}

int sim_run_choreographed(sim_args_t *cfg, const char *src, const volatile sig_atomic_t *stop)
{
    char errstr[512];
    sim_def_flow_t flow = {0};
    def_t *def = NULL;
    sim_t *sim = NULL;
    run_t r = {0};
    int rc = EXIT_OK;
    r.stop = stop;

    def_problems_t problems = {0};
    def = def_load_file(src, &problems);
    if (def == NULL) {
        for (size_t i = 0; i < problems.n; i++)
            fprintf(stderr, "steward-sim: %s: %s: %s\n", problems.items[i].file,
                    problems.items[i].pointer, problems.items[i].message);
        def_problems_clear(&problems);
        return EXIT_USAGE;
    }
    if (sim_def_flow(def, cfg->topic_prefix, cfg->single_topic, &flow, errstr, sizeof errstr) !=
        ERR_OK) {
        fprintf(stderr, "steward-sim: --definition: %s\n", errstr);
        rc = EXIT_USAGE;
        goto done;
    }

    /* Latencies are cut below each deadline as Steward will see it: scaled
     * by --deadline-scale, or when that is not given, by the time scale
     * (a definition scaled like the latencies). */
    double cap_scale = cfg->deadline_scale_given ? cfg->deadline_scale : cfg->sim.time_scale;
    for (int k = 0; k < SIM_N_KINDS; k++)
        cfg->sim.deadline_ms[k] = sim_def_scale_ms(flow.deadline_ms[k], cap_scale);
    warn_collapsed_latencies(&cfg->sim);

    int64_t now = clock_wall_ms();
    if (!cfg->sim.virtual_time) {
        cfg->sim.start_ms = now;
    } else if (cfg->start_time == NULL) {
        cfg->sim.start_ms = now - sim_span_ms(&cfg->sim);
    } else if (!cfg->plan_only && cfg->sim.start_ms + sim_span_ms(&cfg->sim) > now + 3600000) {
        /* Kafka refuses timestamps further ahead than
         * log.message.timestamp.after.max.ms, one hour by default. */
        fprintf(stderr,
                "steward-sim: warning: --start-time puts event times more than an hour in the "
                "future; the broker may refuse them\n");
    }

    for (size_t i = 0; i < cfg->n_type_headers; i++) {
        if (!known_topic(&flow, "--type-header", cfg->type_headers[i].topic)) {
            rc = EXIT_USAGE;
            goto done;
        }
        for (int k = 0; k < SIM_N_KINDS; k++)
            if (strcmp(flow.topic[k], cfg->type_headers[i].topic) == 0)
                cfg->sim.type_header[k] = cfg->type_headers[i].header;
    }

    sim = sim_new(&cfg->sim, errstr, sizeof errstr);
    if (sim == NULL) {
        fprintf(stderr, "steward-sim: %s\n", errstr);
        rc = EXIT_USAGE;
        goto done;
    }
    r.cfg = cfg;
    r.flow = &flow;
    r.sim = sim;

    if (cfg->ground_truth != NULL) {
        r.truth = fopen(cfg->ground_truth, "w");
        if (r.truth == NULL) {
            fprintf(stderr, "steward-sim: --ground-truth %s: %s\n", cfg->ground_truth,
                    strerror(errno));
            rc = EXIT_RUNTIME;
            goto done;
        }
    }

    if (cfg->avro_topic != NULL) {
        if (!known_topic(&flow, "--avro-topic", cfg->avro_topic)) {
            rc = EXIT_USAGE;
            goto done;
        }
        r.schemas = sim_schemas_new(cfg->avro_topic, cfg->schema_registry, cfg->avro_schema_dir,
                                    errstr, sizeof errstr);
        if (r.schemas == NULL) {
            fprintf(stderr, "steward-sim: %s\n", errstr);
            rc = EXIT_USAGE;
            goto done;
        }
    }

    if (!cfg->plan_only) {
        r.producer = sim_kafka_producer_new(cfg->brokers, stop, errstr, sizeof errstr);
        if (r.producer == NULL) {
            fprintf(stderr, "steward-sim: Kafka producer: %s\n", errstr);
            rc = EXIT_RUNTIME;
            goto done;
        }
        const char *names[SIM_N_KINDS];
        for (int k = 0; k < SIM_N_KINDS; k++)
            names[k] = flow.topic[k];
        if (sim_kafka_create_topics(r.producer, names, SIM_N_KINDS, cfg->partitions, errstr,
                                    sizeof errstr) != ERR_OK ||
            sim_kafka_producer_topics(r.producer, &flow, errstr, sizeof errstr) != ERR_OK) {
            fprintf(stderr, "steward-sim: %s\n", errstr);
            rc = EXIT_RUNTIME;
            goto done;
        }
    }

    if (!cfg->quiet) {
        char start[40];
        fprintf(stderr,
                "steward-sim: %" PRIu32 " orders, seed %" PRIu64 ", %s time from %s, "
                "topics %s%s%s\n",
                cfg->sim.orders, cfg->sim.seed, cfg->sim.virtual_time ? "virtual" : "real",
                sim_format_time(cfg->sim.start_ms, start, sizeof start),
                cfg->single_topic ? cfg->single_topic : cfg->topic_prefix,
                cfg->single_topic ? "" : "orders, ", cfg->single_topic ? "" : "...");
    }

    r.started = r.last_progress = mono_s();
    rc = run_loop(&r);
    int left = r.producer != NULL ? flush_all(&r) : 0;
    double elapsed = mono_s() - r.started;
    const sim_stats_t *st = sim_stats(sim);
    bool interrupted = *stop != 0;

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
        sim_output_summary(r.truth, &cfg->sim, st, interrupted);
        if (fclose(r.truth) != 0) {
            fprintf(stderr, "steward-sim: --ground-truth %s: %s\n", cfg->ground_truth,
                    strerror(errno));
            rc = EXIT_RUNTIME;
        }
        r.truth = NULL;
    }

    /* The closing line counts what Kafka acknowledged; with --plan-only
     * stdout holds the plan, so it goes to stderr. */
    progress(&r, true);
    uint64_t done_messages = r.producer != NULL ? r.producer->delivered : st->messages;
    fprintf(cfg->plan_only ? stderr : stdout,
            "%s %" PRIu64 " events for %" PRIu64
            " orders in %.2f s (%.0f events/s); stalled %" PRIu64 "; ground truth in %s\n",
            cfg->plan_only ? "planned" : "produced", done_messages, st->orders, elapsed,
            elapsed > 0 ? (double) done_messages / elapsed : 0.0, st->stalled,
            cfg->ground_truth ? cfg->ground_truth : "(none: no --ground-truth)");
    if (r.schemas != NULL && !cfg->quiet)
        fprintf(stderr, "steward-sim: %s in Avro, %zu schema(s) %s\n", cfg->avro_topic,
                sim_schemas_count(r.schemas), cfg->schema_registry ? "registered" : "written");

done:
    if (r.truth != NULL)
        fclose(r.truth);
    sim_kafka_producer_free(r.producer);
    sim_schemas_free(r.schemas);
    sim_free(sim);
    sim_def_flow_clear(&flow);
    def_free(def);
    return rc;
}
