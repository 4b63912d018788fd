/*
 * sim - plans and schedules the simulated orders; see sim.h.
 *
 * Random numbers come from xoshiro256**, seeded through splitmix64: one
 * stream for the arrivals and one per order, seeded from (seed, index).
 * Each order draws the same numbers in the same sequence whatever its
 * path and the rates, so raising --stall-rate stalls more orders without
 * changing the latencies of the others.
 */
#include "sim/sim.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- random numbers -------------------------------------------------- */

typedef struct sim_rng {
    uint64_t s[4];
} sim_rng_t;

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static void rng_seed(sim_rng_t *rng, uint64_t seed, uint64_t stream)
{
    uint64_t x = seed ^ (stream * 0xD1B54A32D192ED03ULL);
    for (int i = 0; i < 4; i++)
        rng->s[i] = splitmix64(&x);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static uint64_t rng_next(sim_rng_t *rng)
{
    uint64_t *s = rng->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

/* Uniform in [0, 1). */
static double rng_uniform(sim_rng_t *rng)
{
    return (double) (rng_next(rng) >> 11) * 0x1.0p-53;
}

/* Uniform in [lo, hi] for integers. */
static uint32_t rng_range(sim_rng_t *rng, uint32_t lo, uint32_t hi)
{
    return lo + (uint32_t) (rng_uniform(rng) * ((double) (hi - lo) + 1.0));
}

/* A standard normal (Box-Muller; the second value is dropped so that each
 * call draws exactly two numbers). */
static double rng_normal(sim_rng_t *rng)
{
    double u1 = 1.0 - rng_uniform(rng); /* (0, 1]: log() stays finite */
    double u2 = rng_uniform(rng);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

/* Exponential with mean `mean`. */
static double rng_exponential(sim_rng_t *rng, double mean)
{
    return -log(1.0 - rng_uniform(rng)) * mean;
}

/* The streams: 0 for the arrivals, index + 1 for order `index`. */
#define STREAM_ARRIVALS 0

/* ---- kinds and options ----------------------------------------------- */

static const char *const kind_names[SIM_N_KINDS] = {
    "OrderPlaced",  "PaymentCaptured",    "PaymentDeclined", "StockReserved",    "StockUnavailable",
    "RefundIssued", "ShipmentDispatched", "OrderDelivered",  "CustomerNotified",
};

static const char *const kind_services[SIM_N_KINDS] = {
    "orders",   "payments", "payments", "inventory",     "inventory",
    "payments", "shipping", "delivery", "notifications",
};

const char *sim_kind_name(sim_kind_t kind)
{
    return (unsigned) kind < SIM_N_KINDS ? kind_names[kind] : NULL;
}

const char *sim_kind_service(sim_kind_t kind)
{
    return (unsigned) kind < SIM_N_KINDS ? kind_services[kind] : NULL;
}

static const char *const poison_names[SIM_N_POISON] = {
    "invalid_json", "invalid_utf8", "json_array", "missing_order_id", "tombstone",
};

const char *sim_poison_name(sim_poison_t poison)
{
    return (unsigned) poison < SIM_N_POISON ? poison_names[poison] : "unknown";
}

#define SECOND 1000.0
#define MINUTE (60 * SECOND)
#define HOUR   (60 * MINUTE)
#define DAY    (24 * HOUR)

void sim_options_init(sim_options_t *opts)
{
    memset(opts, 0, sizeof *opts);
    opts->orders = 1000;
    opts->time_scale = 1.0;
    opts->stall_rate = 0.004;
    opts->decline_rate = 0.03;
    opts->stock_fail_rate = 0.02;
    opts->duplicate_rate = 0.01;
    opts->reorder_rate = 0.01;

    /* Medians and spreads by service: a card payment takes seconds (a 3-D
     * Secure challenge a minute), a warehouse minutes, picking and packing
     * hours to a day, a carrier days, an e-mail seconds. sigma 0.7 puts the
     * 95th percentile at about 3x the median. */
    opts->latency[SIM_PAYMENT_CAPTURED] = (sim_latency_t){4 * SECOND, 1.0};
    opts->latency[SIM_PAYMENT_DECLINED] = (sim_latency_t){4 * SECOND, 1.0};
    opts->latency[SIM_STOCK_RESERVED] = (sim_latency_t){3 * MINUTE, 0.7};
    opts->latency[SIM_STOCK_UNAVAILABLE] = (sim_latency_t){3 * MINUTE, 0.7};
    opts->latency[SIM_REFUND_ISSUED] = (sim_latency_t){20 * MINUTE, 0.9};
    opts->latency[SIM_SHIPMENT_DISPATCHED] = (sim_latency_t){6 * HOUR, 0.7};
    opts->latency[SIM_ORDER_DELIVERED] = (sim_latency_t){36 * HOUR, 0.4};
    opts->latency[SIM_CUSTOMER_NOTIFIED] = (sim_latency_t){3 * SECOND, 0.8};
}

static bool is_share(double v)
{
    return v >= 0.0 && v <= 1.0; /* false for NaN too */
}

err_class_t sim_options_check(const sim_options_t *opts, char *errstr, size_t errstr_size)
{
    static const struct {
        const char *name;
        size_t offset;
    } shares[] = {
        {"stall-rate", offsetof(sim_options_t, stall_rate)},
        {"decline-rate", offsetof(sim_options_t, decline_rate)},
        {"stock-fail-rate", offsetof(sim_options_t, stock_fail_rate)},
        {"duplicate-rate", offsetof(sim_options_t, duplicate_rate)},
        {"reorder-rate", offsetof(sim_options_t, reorder_rate)},
        {"cloudevents-rate", offsetof(sim_options_t, cloudevents_rate)},
    };
    for (size_t i = 0; i < sizeof shares / sizeof shares[0]; i++) {
        double v = *(const double *) ((const char *) opts + shares[i].offset);
        if (!is_share(v))
            return err_set(ERR_INVALID, errstr, errstr_size, "%s must be between 0 and 1, not %g",
                           shares[i].name, v);
    }
    if (opts->orders == 0)
        return err_set(ERR_INVALID, errstr, errstr_size, "orders must be at least 1");
    if (!(opts->rate >= 0.0) || isinf(opts->rate))
        return err_set(ERR_INVALID, errstr, errstr_size, "rate must be 0 or more, not %g",
                       opts->rate);
    if (!(opts->time_scale > 0.0) || isinf(opts->time_scale))
        return err_set(ERR_INVALID, errstr, errstr_size, "time-scale must be above 0, not %g",
                       opts->time_scale);
    for (int k = 0; k < SIM_N_KINDS; k++) {
        if (opts->type_header[k] != NULL && opts->type_header[k][0] == '\0')
            return err_set(ERR_INVALID, errstr, errstr_size, "type-header of %s is empty",
                           kind_names[k]);
    }
    for (int k = SIM_PAYMENT_CAPTURED; k < SIM_N_KINDS; k++) {
        const sim_latency_t *l = &opts->latency[k];
        if (!(l->median_ms > 0.0) || !(l->sigma >= 0.0) || isinf(l->median_ms) || isinf(l->sigma))
            return err_set(ERR_INVALID, errstr, errstr_size,
                           "latency of %s: the median must be above 0 and sigma 0 or more",
                           kind_names[k]);
        if (opts->deadline_ms[k] < 0)
            return err_set(ERR_INVALID, errstr, errstr_size, "deadline before %s is negative",
                           kind_names[k]);
    }
    return ERR_OK;
}

/* ---- one order ------------------------------------------------------- */

/* The longest a step may take, in scaled ms: the log-normal is cut at 4
 * sigma (about 3 in 100,000 draws) so that the run's span has a bound, and
 * at 80% of the deadline of the state waiting for it, so that an order
 * misses a deadline only when the plan stalls it. */
static double step_cap_ms(const sim_options_t *opts, sim_kind_t kind)
{
    const sim_latency_t *l = &opts->latency[kind];
    double cap = l->median_ms * exp(4.0 * l->sigma) * opts->time_scale;
    if (opts->deadline_ms[kind] > 0 && 0.8 * (double) opts->deadline_ms[kind] < cap)
        cap = 0.8 * (double) opts->deadline_ms[kind];
    return cap < 1.0 ? 1.0 : cap;
}

/* A reordered event follows its predecessor by at most this (scaled): two
 * services reacting within a second of each other is when topics overtake
 * one another. */
static double reorder_gap_ms(const sim_options_t *opts)
{
    double gap = 1000.0 * opts->time_scale;
    return gap < 1.0 ? 1.0 : gap;
}

/* A duplicate (a producer retry, a redelivery) follows the original by at
 * most this (scaled). */
static double duplicate_gap_ms(const sim_options_t *opts)
{
    return 2000.0 * opts->time_scale;
}

static int64_t step_latency_ms(const sim_options_t *opts, sim_kind_t kind, double z)
{
    const sim_latency_t *l = &opts->latency[kind];
    double ms = l->median_ms * exp(l->sigma * z) * opts->time_scale;
    double cap = step_cap_ms(opts, kind);
    if (ms > cap)
        ms = cap;
    int64_t out = llround(ms);
    return out < 1 ? 1 : out; /* strictly after the previous step */
}

/* The random numbers of one path position, drawn whether used or not. */
typedef struct step_draw {
    double z;         /* latency */
    double duplicate; /* < duplicate_rate: send twice */
    double reorder;   /* < reorder_rate: send before the previous event */
    double cloudevent;
    double duplicate_gap; /* [0, 1) of duplicate_gap_ms() */
    double reorder_gap;   /* [0, 1) of reorder_gap_ms() */
} step_draw_t;

/* Sorts msgs by emit time; ties keep `rank` order. Insertion sort: at most
 * SIM_MAX_MSGS elements. */
static void sort_msgs(sim_msg_t *msgs, int *rank, int n)
{
    for (int i = 1; i < n; i++) {
        sim_msg_t m = msgs[i];
        int r = rank[i], j = i - 1;
        while (j >= 0 &&
               (msgs[j].emit_ms > m.emit_ms || (msgs[j].emit_ms == m.emit_ms && rank[j] > r))) {
            msgs[j + 1] = msgs[j];
            rank[j + 1] = rank[j];
            j--;
        }
        msgs[j + 1] = m;
        rank[j + 1] = r;
    }
}

void sim_plan_order(const sim_options_t *opts, uint32_t index, int64_t start_ms, sim_order_t *out)
{
    sim_rng_t rng;
    rng_seed(&rng, opts->seed, (uint64_t) index + 1);
    memset(out, 0, sizeof *out);
    out->index = index;
    out->start_ms = start_ms;

    /* Every draw, in a fixed sequence. */
    double u_decline = rng_uniform(&rng);
    double u_stock = rng_uniform(&rng);
    double u_stall = rng_uniform(&rng);
    double u_stall_at = rng_uniform(&rng);
    step_draw_t draw[SIM_MAX_PATH];
    for (int k = 0; k < SIM_MAX_PATH; k++) {
        draw[k].z = rng_normal(&rng);
        draw[k].duplicate = rng_uniform(&rng);
        draw[k].reorder = rng_uniform(&rng);
        draw[k].cloudevent = rng_uniform(&rng);
        draw[k].duplicate_gap = rng_uniform(&rng);
        draw[k].reorder_gap = rng_uniform(&rng);
    }
    out->customer = rng_range(&rng, 1, 99999);
    /* Basket totals: log-normal around 45.00, at least 1.00. */
    double total = 4500.0 * exp(0.8 * rng_normal(&rng));
    out->total_cents = total < 100.0 ? 100 : total > 5e6 ? 5000000 : (uint32_t) total;
    out->warehouse = (uint8_t) rng_range(&rng, 1, 6);
    out->carrier = (uint8_t) rng_range(&rng, 0, 3);
    out->tracking = rng_next(&rng);

    /* The path. */
    uint8_t *path = out->path;
    int n = 0;
    path[n++] = SIM_ORDER_PLACED;
    if (u_decline < opts->decline_rate) {
        path[n++] = SIM_PAYMENT_DECLINED;
        out->outcome = SIM_DECLINED;
    } else if (u_stock < opts->stock_fail_rate) {
        path[n++] = SIM_PAYMENT_CAPTURED;
        path[n++] = SIM_STOCK_UNAVAILABLE;
        path[n++] = SIM_REFUND_ISSUED;
        out->outcome = SIM_REFUNDED;
    } else {
        path[n++] = SIM_PAYMENT_CAPTURED;
        path[n++] = SIM_STOCK_RESERVED;
        path[n++] = SIM_SHIPMENT_DISPATCHED;
        path[n++] = SIM_ORDER_DELIVERED;
        path[n++] = SIM_CUSTOMER_NOTIFIED;
        out->outcome = SIM_COMPLETED;
    }
    out->n_path = (uint8_t) n;
    out->n_sent = (uint8_t) n;

    /* A stall stops the order in one of the n - 1 non-terminal states it
     * would pass through, each as likely: after sending 1 .. n-1 events. */
    if (u_stall < opts->stall_rate) {
        int sent = 1 + (int) (u_stall_at * (n - 1));
        out->n_sent = (uint8_t) (sent > n - 1 ? n - 1 : sent);
        out->outcome = SIM_STALLED;
    }

    /* Event times, and the messages. A reordered event k happens shortly
     * after event k - 1 and is sent just before it, both when k - 1 would
     * be: ranks order the messages of one instant (reordered event first,
     * then the original, then duplicates). */
    int rank[SIM_MAX_MSGS];
    int m = 0;
    bool prev_reordered = false;
    int64_t emit_prev = start_ms;
    for (int k = 0; k < out->n_sent; k++) {
        sim_kind_t kind = (sim_kind_t) path[k];
        bool reordered = false;
        if (k == 0) {
            out->time_ms[0] = start_ms;
        } else if (!prev_reordered && draw[k].reorder < opts->reorder_rate) {
            reordered = true;
            out->time_ms[k] =
                out->time_ms[k - 1] + 1 + (int64_t) (draw[k].reorder_gap * reorder_gap_ms(opts));
        } else {
            out->time_ms[k] = out->time_ms[k - 1] + step_latency_ms(opts, kind, draw[k].z);
        }
        prev_reordered = reordered;

        sim_msg_t msg = {0};
        msg.kind = (uint8_t) kind;
        msg.step = (uint8_t) k;
        msg.time_ms = out->time_ms[k];
        msg.emit_ms = reordered ? emit_prev : msg.time_ms;
        /* The draw is made either way, so that a type header on one topic
         * leaves every other message of the plan as it was. */
        if (draw[k].cloudevent < opts->cloudevents_rate && opts->type_header[kind] == NULL)
            msg.flags |= SIM_MSG_CLOUDEVENT;
        emit_prev = msg.emit_ms;

        msg.flags |= reordered ? SIM_MSG_REORDERED : 0;
        out->msgs[m] = msg;
        rank[m++] = reordered ? 3 * k - 4 : 3 * k; /* before event k-1's 3k-3 */

        if (draw[k].duplicate < opts->duplicate_rate) {
            sim_msg_t dup = msg;
            dup.flags = (uint8_t) ((msg.flags & ~SIM_MSG_REORDERED) | SIM_MSG_DUPLICATE);
            dup.emit_ms = msg.emit_ms + (int64_t) (draw[k].duplicate_gap * duplicate_gap_ms(opts));
            out->msgs[m] = dup;
            rank[m++] = 3 * k + 1;
        }
    }
    out->n_msgs = (uint8_t) m;
    sort_msgs(out->msgs, rank, m);
}

/* ---- arrivals -------------------------------------------------------- */

/* Virtual time at rate 0: evenly, 100 orders a second. */
#define VIRTUAL_DEFAULT_GAP_MS 10.0

typedef struct arrivals {
    sim_rng_t rng;
    double offset_ms; /* of the next order, from start_ms */
    int64_t last_ms;  /* the previous order's start */
} arrivals_t;

static void arrivals_init(arrivals_t *a, const sim_options_t *opts)
{
    rng_seed(&a->rng, opts->seed, STREAM_ARRIVALS);
    a->offset_ms = 0.0;
    a->last_ms = opts->start_ms;
}

/* The next order's start, not consuming it. */
static int64_t arrivals_peek(const arrivals_t *a, const sim_options_t *opts, int64_t now_ms)
{
    if (opts->rate == 0.0 && !opts->virtual_time)
        return now_ms > a->last_ms ? now_ms : a->last_ms;
    return opts->start_ms + llround(a->offset_ms);
}

static void arrivals_advance(arrivals_t *a, const sim_options_t *opts, int64_t start_ms)
{
    a->last_ms = start_ms;
    if (opts->rate > 0.0)
        a->offset_ms += rng_exponential(&a->rng, 1000.0 / opts->rate);
    else
        a->offset_ms += VIRTUAL_DEFAULT_GAP_MS;
}

int64_t sim_span_ms(const sim_options_t *opts)
{
    /* Plans every order once: a few hundred nanoseconds each, and exact,
     * so that with start_ms = now - span the last event happens now. */
    sim_options_t o = *opts;
    o.start_ms = 0;
    arrivals_t a;
    arrivals_init(&a, &o);
    sim_order_t order;
    int64_t span = 0;
    for (uint32_t i = 0; i < o.orders; i++) {
        int64_t start = arrivals_peek(&a, &o, 0);
        sim_plan_order(&o, i, start, &order);
        for (int m = 0; m < order.n_msgs; m++) {
            if (order.msgs[m].emit_ms > span)
                span = order.msgs[m].emit_ms;
            if (order.msgs[m].time_ms > span)
                span = order.msgs[m].time_ms;
        }
        arrivals_advance(&a, &o, start);
    }
    return span;
}

/* ---- the schedule ---------------------------------------------------- */

typedef struct heap_entry {
    int64_t emit_ms;
    uint64_t seq;       /* ties go first in, first out */
    sim_order_t *order; /* NULL for poison */
    long poison;
} heap_entry_t;

struct sim {
    sim_options_t opts;
    arrivals_t arrivals;
    uint32_t next_order;
    uint32_t next_poison;
    uint64_t seq;

    heap_entry_t *heap;
    size_t n_heap, cap_heap;

    sim_order_t *retired; /* the order of the last item; freed by the next pop */
    sim_stats_t stats;
};

static bool entry_before(const heap_entry_t *a, const heap_entry_t *b)
{
    return a->emit_ms < b->emit_ms || (a->emit_ms == b->emit_ms && a->seq < b->seq);
}

static void heap_sift_up(sim_t *sim, size_t i)
{
    heap_entry_t e = sim->heap[i];
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!entry_before(&e, &sim->heap[parent]))
            break;
        sim->heap[i] = sim->heap[parent];
        i = parent;
    }
    sim->heap[i] = e;
}

static void heap_sift_down(sim_t *sim, size_t i)
{
    heap_entry_t e = sim->heap[i];
    size_t n = sim->n_heap;
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= n)
            break;
        if (child + 1 < n && entry_before(&sim->heap[child + 1], &sim->heap[child]))
            child++;
        if (!entry_before(&sim->heap[child], &e))
            break;
        sim->heap[i] = sim->heap[child];
        i = child;
    }
    sim->heap[i] = e;
}

static bool heap_push(sim_t *sim, int64_t emit_ms, sim_order_t *order, long poison)
{
    if (sim->n_heap == sim->cap_heap) {
        size_t cap = sim->cap_heap ? 2 * sim->cap_heap : 1024;
        heap_entry_t *h = realloc(sim->heap, cap * sizeof *h);
        if (h == NULL)
            return false;
        sim->heap = h;
        sim->cap_heap = cap;
    }
    sim->heap[sim->n_heap] = (heap_entry_t){emit_ms, sim->seq++, order, poison};
    sim->n_heap++;
    heap_sift_up(sim, sim->n_heap - 1);
    return true;
}

/* The order poison message n rides with: the N messages sit in the middle
 * of N equal slices of the orders. */
static uint32_t poison_order(const sim_options_t *opts, uint32_t n)
{
    return (uint32_t) (((2 * (uint64_t) n + 1) * opts->orders) / (2 * (uint64_t) opts->poison));
}

sim_t *sim_new(const sim_options_t *opts, char *errstr, size_t errstr_size)
{
    if (sim_options_check(opts, errstr, errstr_size) != ERR_OK)
        return NULL;
    sim_t *sim = calloc(1, sizeof *sim);
    if (sim == NULL) {
        err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
        return NULL;
    }
    sim->opts = *opts;
    arrivals_init(&sim->arrivals, &sim->opts);
    return sim;
}

void sim_free(sim_t *sim)
{
    if (sim == NULL)
        return;
    for (size_t i = 0; i < sim->n_heap; i++)
        free(sim->heap[i].order);
    free(sim->heap);
    free(sim->retired);
    free(sim);
}

int64_t sim_peek(sim_t *sim, int64_t now_ms)
{
    int64_t next = sim->n_heap > 0 ? sim->heap[0].emit_ms : SIM_DONE;
    if (sim->next_order < sim->opts.orders) {
        int64_t arrival = arrivals_peek(&sim->arrivals, &sim->opts, now_ms);
        if (arrival < next)
            next = arrival;
    }
    return next;
}

/* Plans the next order and puts it, and the poison riding with it, on the
 * heap. */
static bool admit_order(sim_t *sim, int64_t start_ms)
{
    sim_order_t *order = malloc(sizeof *order);
    if (order == NULL)
        return false;
    sim_plan_order(&sim->opts, sim->next_order, start_ms, order);
    if (!heap_push(sim, order->msgs[0].emit_ms, order, -1)) {
        free(order);
        return false;
    }
    while (sim->next_poison < sim->opts.poison &&
           poison_order(&sim->opts, sim->next_poison) == sim->next_order) {
        if (!heap_push(sim, start_ms, NULL, (long) sim->next_poison))
            return false;
        sim->next_poison++;
    }
    arrivals_advance(&sim->arrivals, &sim->opts, start_ms);
    sim->next_order++;
    sim->stats.orders++;
    sim->stats.in_flight++;
    return true;
}

bool sim_pop(sim_t *sim, int64_t now_ms, sim_item_t *item, char *errstr, size_t errstr_size)
{
    free(sim->retired);
    sim->retired = NULL;
    memset(item, 0, sizeof *item);
    item->poison = -1;

    /* At most one arrival per pop: at rate 0 in real time every order
     * arrives "now", and admitting them all at once would put the whole
     * run in memory before its first message is sent. */
    if (sim->next_order < sim->opts.orders) {
        int64_t arrival = arrivals_peek(&sim->arrivals, &sim->opts, now_ms);
        if (sim->n_heap == 0 || arrival <= sim->heap[0].emit_ms) {
            if (!admit_order(sim, arrival)) {
                err_set(ERR_FATAL, errstr, errstr_size, "out of memory planning order %" PRIu32,
                        sim->next_order);
                return false;
            }
        }
    }
    if (sim->n_heap == 0)
        return false;

    heap_entry_t *top = &sim->heap[0];
    item->emit_ms = top->emit_ms;
    sim->stats.messages++;
    if (top->order == NULL) {
        item->poison = top->poison;
        sim->stats.poison++;
        sim->heap[0] = sim->heap[--sim->n_heap];
        if (sim->n_heap > 0)
            heap_sift_down(sim, 0);
        return true;
    }

    sim_order_t *order = top->order;
    const sim_msg_t *msg = &order->msgs[order->next++];
    item->order = order;
    item->msg = msg;
    if (msg->flags & SIM_MSG_DUPLICATE)
        sim->stats.duplicates++;
    else
        sim->stats.events++;
    if (msg->flags & SIM_MSG_REORDERED)
        sim->stats.reordered++;
    if (msg->flags & SIM_MSG_CLOUDEVENT)
        sim->stats.cloudevents++;

    if (order->next < order->n_msgs) {
        top->emit_ms = order->msgs[order->next].emit_ms;
        top->seq = sim->seq++;
    } else {
        item->order_done = true;
        sim->stats.in_flight--;
        switch (order->outcome) {
        case SIM_COMPLETED:
            sim->stats.completed++;
            break;
        case SIM_DECLINED:
            sim->stats.declined++;
            break;
        case SIM_REFUNDED:
            sim->stats.refunded++;
            break;
        case SIM_STALLED:
            sim->stats.stalled++;
            break;
        }
        sim->retired = order; /* the caller reads it until the next pop */
        sim->heap[0] = sim->heap[--sim->n_heap];
    }
    if (sim->n_heap > 0)
        heap_sift_down(sim, 0);
    return true;
}

const sim_stats_t *sim_stats(const sim_t *sim)
{
    return &sim->stats;
}

const sim_options_t *sim_options(const sim_t *sim)
{
    return &sim->opts;
}

/* ---- messages -------------------------------------------------------- */

int sim_order_id(const sim_options_t *opts, uint32_t index, char *buf, size_t size)
{
    return snprintf(buf, size, "ord-%" PRIx64 "-%" PRIu32, opts->seed, index);
}

int sim_event_id(const sim_options_t *opts, uint32_t index, unsigned step, char *buf, size_t size)
{
    return snprintf(buf, size, "evt-%" PRIx64 "-%" PRIu32 "-%u", opts->seed, index, step);
}

int sim_poison_id(const sim_options_t *opts, long n, char *buf, size_t size)
{
    return snprintf(buf, size, "poison-%" PRIx64 "-%ld", opts->seed, n);
}

static const char *const carriers[4] = {"dhl", "ups", "postnl", "dpd"};

int sim_format_value(const sim_options_t *opts, const sim_order_t *order, const sim_msg_t *msg,
                     char *buf, size_t size)
{
    char order_id[64], event_id[80];
    sim_order_id(opts, order->index, order_id, sizeof order_id);
    sim_event_id(opts, order->index, msg->step, event_id, sizeof event_id);
    unsigned euros = order->total_cents / 100, cents = order->total_cents % 100;
    sim_kind_t kind = (sim_kind_t) msg->kind;
    int n;

    if (msg->flags & SIM_MSG_CLOUDEVENT)
        n = snprintf(buf, size, "{\"order_id\":\"%s\"", order_id);
    else if (opts->type_header[kind] != NULL)
        n = snprintf(buf, size, "{\"id\":\"%s\",\"order_id\":\"%s\"", event_id, order_id);
    else
        n = snprintf(buf, size, "{\"type\":\"%s\",\"id\":\"%s\",\"order_id\":\"%s\"",
                     kind_names[kind], event_id, order_id);
    if (n < 0)
        return n;

    /* The rest goes after the n bytes written so far; when they did not fit,
     * snprintf(NULL, 0) still counts the length. */
    char *p = (size_t) n < size ? buf + n : NULL;
    size_t left = (size_t) n < size ? size - (size_t) n : 0;
    int more = 0;
    switch (kind) {
    case SIM_ORDER_PLACED:
        more = snprintf(p, left,
                        ",\"customer_id\":\"cus-%05" PRIu32 "\",\"total\":%u.%02u,"
                        "\"currency\":\"EUR\"}",
                        order->customer, euros, cents);
        break;
    case SIM_PAYMENT_CAPTURED:
        more = snprintf(p, left, ",\"payment_id\":\"pay-%s\",\"amount\":%u.%02u}", order_id + 4,
                        euros, cents);
        break;
    case SIM_PAYMENT_DECLINED:
        more = snprintf(p, left, ",\"reason\":\"%s\"}",
                        order->customer % 3 ? "insufficient_funds" : "card_expired");
        break;
    case SIM_STOCK_RESERVED:
        more = snprintf(p, left, ",\"warehouse_id\":\"wh-%u\"}", order->warehouse);
        break;
    case SIM_STOCK_UNAVAILABLE:
        more = snprintf(p, left, ",\"reason\":\"out_of_stock\",\"warehouse_id\":\"wh-%u\"}",
                        order->warehouse);
        break;
    case SIM_REFUND_ISSUED:
        more = snprintf(p, left,
                        ",\"refund_id\":\"ref-%s\",\"payment_id\":\"pay-%s\",\"amount\":%u.%02u}",
                        order_id + 4, order_id + 4, euros, cents);
        break;
    case SIM_SHIPMENT_DISPATCHED:
        more = snprintf(p, left,
                        ",\"warehouse_id\":\"wh-%u\",\"carrier\":\"%s\","
                        "\"tracking_number\":\"%s%012" PRIX64 "\"}",
                        order->warehouse, carriers[order->carrier], "TRK",
                        (uint64_t) (order->tracking & 0xFFFFFFFFFFFFu));
        break;
    case SIM_ORDER_DELIVERED:
        more = snprintf(p, left, ",\"carrier\":\"%s\"}", carriers[order->carrier]);
        break;
    case SIM_CUSTOMER_NOTIFIED:
        more = snprintf(p, left, ",\"customer_id\":\"cus-%05" PRIu32 "\",\"channel\":\"email\"}",
                        order->customer);
        break;
    default:
        more = snprintf(p, left, "}");
        break;
    }
    return more < 0 ? more : n + more;
}

size_t sim_format_headers(const sim_options_t *opts, const sim_order_t *order, const sim_msg_t *msg,
                          sim_header_t headers[SIM_MAX_HEADERS], char *buf, size_t size)
{
    if (!(msg->flags & SIM_MSG_CLOUDEVENT) && opts->type_header[msg->kind] != NULL) {
        headers[0] = (sim_header_t){opts->type_header[msg->kind], kind_names[msg->kind]};
        return 1;
    }
    if (!(msg->flags & SIM_MSG_CLOUDEVENT) || size < 128)
        return 0;
    /* buf holds the three values that vary: id, source, time. */
    char *id = buf;
    int n = sim_event_id(opts, order->index, msg->step, id, size / 2);
    char *source = id + n + 1;
    n = snprintf(source, 32, "/sim/%s", kind_services[msg->kind]);
    char *time = source + n + 1;
    sim_format_time(msg->time_ms, time, (size_t) (buf + size - time));

    headers[0] = (sim_header_t){"ce_specversion", "1.0"};
    headers[1] = (sim_header_t){"ce_type", kind_names[msg->kind]};
    headers[2] = (sim_header_t){"ce_id", id};
    headers[3] = (sim_header_t){"ce_source", source};
    headers[4] = (sim_header_t){"ce_time", time};
    headers[5] = (sim_header_t){"content-type", "application/json"};
    return 6;
}

/* Poison goes round the topics of the six services. */
static const sim_kind_t poison_kinds[] = {
    SIM_ORDER_PLACED,        SIM_PAYMENT_CAPTURED, SIM_STOCK_RESERVED,
    SIM_SHIPMENT_DISPATCHED, SIM_ORDER_DELIVERED,  SIM_CUSTOMER_NOTIFIED,
};

sim_kind_t sim_poison_kind(long n)
{
    return poison_kinds[n % (long) (sizeof poison_kinds / sizeof poison_kinds[0])];
}

sim_poison_t sim_format_poison(const sim_options_t *opts, long n, char *buf, size_t size, long *len)
{
    sim_poison_t kind = (sim_poison_t) (n % SIM_N_POISON);
    const char *type = kind_names[sim_poison_kind(n)];
    char id[64];
    sim_poison_id(opts, n, id, sizeof id);
    int w = 0;

    switch (kind) {
    case SIM_POISON_INVALID_JSON: /* cut off mid-object, as a truncated write would */
        w = snprintf(buf, size, "{\"type\":\"%s\",\"id\":\"%s\",\"order_id\":", type, id);
        break;
    case SIM_POISON_INVALID_UTF8: /* 0xC3 0x28: a lead byte, then no continuation */
        w = snprintf(buf, size, "{\"type\":\"%s\",\"id\":\"%s\",\"order_id\":\"ord-\xC3\x28\"}",
                     type, id);
        break;
    case SIM_POISON_ARRAY:
        w = snprintf(buf, size, "[{\"type\":\"%s\",\"id\":\"%s\"}]", type, id);
        break;
    case SIM_POISON_MISSING_KEY:
        w = snprintf(buf, size, "{\"type\":\"%s\",\"id\":\"%s\"}", type, id);
        break;
    case SIM_POISON_TOMBSTONE:
    case SIM_N_POISON:
        w = -1;
        if (size > 0)
            buf[0] = '\0';
        break;
    }
    *len = w < 0 ? -1 : (size_t) w < size ? w : (long) size - 1;
    return kind;
}

/* Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm),
 * which needs neither the time zone nor the C library's tables. */
static void civil_from_days(int64_t z, int64_t *y, unsigned *m, unsigned *d)
{
    z += 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    unsigned doe = (unsigned) (z - era * 146097);
    unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t year = (int64_t) yoe + era * 400;
    unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    unsigned mp = (5 * doy + 2) / 153;
    *d = doy - (153 * mp + 2) / 5 + 1;
    *m = mp < 10 ? mp + 3 : mp - 9;
    *y = year + (*m <= 2);
}

char *sim_format_time(int64_t ms, char *buf, size_t size)
{
    int64_t days = ms >= 0 ? ms / 86400000 : -((-ms + 86399999) / 86400000);
    int64_t rest = ms - days * 86400000;
    int64_t y;
    unsigned mo, d;
    civil_from_days(days, &y, &mo, &d);
    snprintf(buf, size, "%04" PRId64 "-%02u-%02uT%02u:%02u:%02u.%03uZ", y, mo, d,
             (unsigned) (rest / 3600000), (unsigned) (rest / 60000 % 60),
             (unsigned) (rest / 1000 % 60), (unsigned) (rest % 1000));
    return buf;
}
