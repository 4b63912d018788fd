/*
 * test_sim - steward-sim's pure parts: the plan of each order (paths,
 * stalls, duplicates, reorders), the distributions with a fixed seed, the
 * schedule's order and memory, what messages look like, and the rewrite of
 * the definition. No Kafka.
 */
#include "cli/cli_demo.h"
#include "common/rfc3339.h"
#include "common/utf8.h"
#include "definitions/def.h"
#include "definitions/duration.h"
#include "formats/decode.h"
#include "sim/sim.h"
#include "sim/sim_active.h"
#include "sim/sim_def.h"
#include "testlib.h"

#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define T0 1767225600000LL /* 2026-01-01T00:00:00Z */

/* For checks inside loops over thousands of orders: libcheck records
 * every ck_assert's location with a write(2), which would make this suite
 * take seconds; EXPECT costs nothing until it fails. */
#define EXPECT(cond)                                                                               \
    do {                                                                                           \
        if (!(cond))                                                                               \
            ck_abort_msg("%s:%d: expected %s", __FILE__, __LINE__, #cond);                         \
    } while (0)

static sim_options_t base_options(void)
{
    sim_options_t o;
    sim_options_init(&o);
    o.seed = 42;
    o.start_ms = T0;
    o.virtual_time = true;
    return o;
}

/* Runs a whole schedule, checking as it goes that emit times never go
 * back, and returns its stats. */
static sim_stats_t run_all(const sim_options_t *o)
{
    char err[256];
    sim_t *sim = sim_new(o, err, sizeof err);
    ck_assert_msg(sim != NULL, "sim_new: %s", err);
    sim_item_t item;
    int64_t last = INT64_MIN;
    while (sim_peek(sim, T0) != SIM_DONE) {
        int64_t peeked = sim_peek(sim, T0);
        EXPECT(sim_pop(sim, T0, &item, err, sizeof err));
        EXPECT(item.emit_ms == peeked);
        EXPECT(item.emit_ms >= last); /* emit times never go back */
        last = item.emit_ms;
    }
    EXPECT(!sim_pop(sim, T0, &item, err, sizeof err));
    sim_stats_t st = *sim_stats(sim);
    sim_free(sim);
    return st;
}

START_TEST(test_plan_deterministic)
{
    sim_options_t o = base_options();
    o.duplicate_rate = o.reorder_rate = o.cloudevents_rate = 0.3;
    sim_order_t a, b;
    for (uint32_t i = 0; i < 200; i++) {
        sim_plan_order(&o, i, T0 + i, &a);
        sim_plan_order(&o, i, T0 + i, &b);
        EXPECT(memcmp(&a, &b, sizeof a) == 0);
    }

    /* Another seed, other plans. */
    sim_options_t o2 = o;
    o2.seed = 43;
    int differ = 0;
    for (uint32_t i = 0; i < 50; i++) {
        sim_plan_order(&o, i, T0, &a);
        sim_plan_order(&o2, i, T0, &b);
        differ += a.time_ms[1] != b.time_ms[1];
    }
    EXPECT(differ >= 45);

    /* The whole schedule twice: the same messages. */
    sim_options_t s = base_options();
    s.orders = 500;
    s.rate = 50;
    s.poison = 7;
    sim_stats_t x = run_all(&s), y = run_all(&s);
    EXPECT(memcmp(&x, &y, sizeof x) == 0);
}
END_TEST

/* A plan is consistent whatever the rates. */
static void check_plan(const sim_order_t *p)
{
    static const uint8_t complete[] = {SIM_ORDER_PLACED,    SIM_PAYMENT_CAPTURED,
                                       SIM_STOCK_RESERVED,  SIM_SHIPMENT_DISPATCHED,
                                       SIM_ORDER_DELIVERED, SIM_CUSTOMER_NOTIFIED};
    static const uint8_t refund[] = {SIM_ORDER_PLACED, SIM_PAYMENT_CAPTURED, SIM_STOCK_UNAVAILABLE,
                                     SIM_REFUND_ISSUED};
    static const uint8_t declined[] = {SIM_ORDER_PLACED, SIM_PAYMENT_DECLINED};
    if (p->n_path == 6)
        EXPECT(memcmp(p->path, complete, sizeof complete) == 0);
    else if (p->n_path == 4)
        EXPECT(memcmp(p->path, refund, sizeof refund) == 0);
    else
        EXPECT(p->n_path == 2 && memcmp(p->path, declined, sizeof declined) == 0);

    if (p->outcome == SIM_STALLED)
        EXPECT(p->n_sent >= 1 && p->n_sent < p->n_path);
    else
        EXPECT(p->n_sent == p->n_path);

    /* Event times increase along the path. */
    EXPECT(p->time_ms[0] == p->start_ms);
    for (int k = 1; k < p->n_sent; k++)
        EXPECT(p->time_ms[k] > p->time_ms[k - 1]);

    /* Messages: in emit order, each event once plus its duplicate. */
    int seen[SIM_MAX_PATH] = {0}, dups[SIM_MAX_PATH] = {0};
    for (int i = 0; i < p->n_msgs; i++) {
        const sim_msg_t *m = &p->msgs[i];
        if (i > 0)
            EXPECT(m->emit_ms >= p->msgs[i - 1].emit_ms);
        EXPECT(m->step < p->n_sent);
        EXPECT(m->kind == p->path[m->step]);
        EXPECT(m->time_ms == p->time_ms[m->step]);
        if (m->flags & SIM_MSG_DUPLICATE) {
            dups[m->step]++;
            EXPECT(m->emit_ms >= m->time_ms - 1000);
        } else {
            seen[m->step]++;
        }
    }
    for (int k = 0; k < p->n_sent; k++) {
        EXPECT(seen[k] == 1);
        EXPECT(dups[k] <= 1);
    }
}

/* The position in msgs of step k's first copy. */
static int position(const sim_order_t *p, int step)
{
    for (int i = 0; i < p->n_msgs; i++)
        if (p->msgs[i].step == step && !(p->msgs[i].flags & SIM_MSG_DUPLICATE))
            return i;
    return -1;
}

START_TEST(test_plan_shapes)
{
    sim_options_t o = base_options();
    o.stall_rate = 0.2;
    o.decline_rate = 0.1;
    o.stock_fail_rate = 0.1;
    o.duplicate_rate = 0.2;
    o.reorder_rate = 0.2;
    sim_order_t p;
    int reordered = 0, duplicated = 0;
    for (uint32_t i = 0; i < 5000; i++) {
        sim_plan_order(&o, i, T0 + 10 * i, &p);
        check_plan(&p);
        for (int k = 1; k < p.n_sent; k++) {
            int at = position(&p, k);
            if (p.msgs[at].flags & SIM_MSG_REORDERED) {
                /* Sent before its predecessor, at the predecessor's time,
                 * and happened just after it. */
                reordered++;
                EXPECT(at < position(&p, k - 1));
                EXPECT(p.msgs[at].emit_ms == p.time_ms[k - 1]);
                EXPECT(p.time_ms[k] - p.time_ms[k - 1] <= 1001);
                EXPECT(!(p.msgs[position(&p, k - 1)].flags & SIM_MSG_REORDERED));
            }
        }
        for (int i2 = 0; i2 < p.n_msgs; i2++)
            duplicated += (p.msgs[i2].flags & SIM_MSG_DUPLICATE) != 0;
    }
    EXPECT(reordered > 1000);
    EXPECT(duplicated > 2000);
}
END_TEST

START_TEST(test_rates)
{
    sim_options_t o = base_options();
    o.orders = 20000;
    o.poison = 25;
    o.cloudevents_rate = 0.25;
    sim_stats_t st = run_all(&o);

    ck_assert_int_eq(st.orders, 20000);
    ck_assert_int_eq(st.completed + st.declined + st.refunded + st.stalled, 20000);
    ck_assert_int_eq(st.in_flight, 0);
    ck_assert_int_eq(st.poison, 25);
    ck_assert_int_eq(st.messages, st.events + st.duplicates + st.poison);

    /* Binomial counts: within about 4 standard deviations of the mean. */
    ck_assert_msg(fabs((double) st.stalled - 80.0) < 40.0, "stalled %lu",
                  (unsigned long) st.stalled);
    ck_assert_msg(fabs((double) st.declined - 600.0) < 100.0, "declined %lu",
                  (unsigned long) st.declined);
    ck_assert_msg(fabs((double) st.refunded - 388.0) < 80.0, "refunded %lu",
                  (unsigned long) st.refunded);
    double dup_share = (double) st.duplicates / (double) st.events;
    double ce_share = (double) st.cloudevents / (double) (st.events + st.duplicates);
    double reorder_share = (double) st.reordered / (double) (st.events - st.orders);
    ck_assert_msg(fabs(dup_share - 0.01) < 0.002, "duplicates %f", dup_share);
    ck_assert_msg(fabs(reorder_share - 0.01) < 0.002, "reordered %f", reorder_share);
    ck_assert_msg(fabs(ce_share - 0.25) < 0.01, "cloudevents %f", ce_share);
}
END_TEST

/* With every order stalled, the stall point is uniform over the
 * non-terminal states of its path. */
START_TEST(test_stall_uniform)
{
    sim_options_t o = base_options();
    o.stall_rate = 1.0;
    o.decline_rate = 0.0;
    o.stock_fail_rate = 0.0;
    int count[SIM_MAX_PATH] = {0};
    sim_order_t p;
    for (uint32_t i = 0; i < 10000; i++) {
        sim_plan_order(&o, i, T0, &p);
        EXPECT(p.outcome == SIM_STALLED);
        EXPECT(p.n_path == 6);
        count[p.n_sent]++;
    }
    EXPECT(count[0] == 0);
    for (int s = 1; s <= 5; s++)
        ck_assert_msg(abs(count[s] - 2000) < 200, "stalls after %d events: %d", s, count[s]);

    /* Declined orders have one non-terminal state: they stall in it. */
    o.decline_rate = 1.0;
    for (uint32_t i = 0; i < 100; i++) {
        sim_plan_order(&o, i, T0, &p);
        EXPECT(p.n_sent == 1);
        EXPECT(sim_order_last_kind(&p) == SIM_ORDER_PLACED);
    }
}
END_TEST

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *) a, y = *(const int64_t *) b;
    return (x > y) - (x < y);
}

/* The median latency of each step, with a fixed seed, near its
 * configured median times the time scale; and the tail cut below the
 * deadline. */
START_TEST(test_latency_distribution)
{
    sim_options_t o = base_options();
    o.stall_rate = o.decline_rate = o.stock_fail_rate = o.reorder_rate = 0.0;
    o.time_scale = 0.01;
    o.deadline_ms[SIM_ORDER_DELIVERED] = (int64_t) (5 * 86400000LL * 0.01); /* 5d, scaled */
    enum { N = 4001 };
    static int64_t lat[5][N];
    sim_order_t p;
    for (uint32_t i = 0; i < N; i++) {
        sim_plan_order(&o, i, T0, &p);
        for (int k = 1; k < 6; k++)
            lat[k - 1][i] = p.time_ms[k] - p.time_ms[k - 1];
    }
    static const sim_kind_t kinds[] = {SIM_PAYMENT_CAPTURED, SIM_STOCK_RESERVED,
                                       SIM_SHIPMENT_DISPATCHED, SIM_ORDER_DELIVERED,
                                       SIM_CUSTOMER_NOTIFIED};
    for (int s = 0; s < 5; s++) {
        qsort(lat[s], N, sizeof lat[s][0], cmp_i64);
        double want = o.latency[kinds[s]].median_ms * o.time_scale;
        double got = (double) lat[s][N / 2];
        ck_assert_msg(fabs(got - want) / want < 0.08, "%s: median %.0f, want %.0f",
                      sim_kind_name(kinds[s]), got, want);
        /* A long tail: the 99th percentile well above the median. */
        ck_assert_msg((double) lat[s][N * 99 / 100] > 2.2 * got, "%s: no tail",
                      sim_kind_name(kinds[s]));
    }
    /* Delivery (median 36h) is cut at 80% of its 5d deadline. */
    ck_assert_int_le(lat[3][N - 1], (int64_t) (0.8 * 5 * 86400000LL * 0.01) + 1);
}
END_TEST

/* Changing one rate does not move the latencies of unaffected orders. */
START_TEST(test_rates_independent)
{
    sim_options_t a = base_options(), b = base_options();
    b.stall_rate = 0.5;
    sim_order_t pa, pb;
    for (uint32_t i = 0; i < 300; i++) {
        sim_plan_order(&a, i, T0, &pa);
        sim_plan_order(&b, i, T0, &pb);
        if (pb.outcome != SIM_STALLED)
            EXPECT(memcmp(pa.time_ms, pb.time_ms, sizeof pa.time_ms) == 0);
    }
}
END_TEST

START_TEST(test_arrivals)
{
    /* Virtual time at rate 0: every 10 ms. */
    sim_options_t o = base_options();
    o.orders = 100;
    o.stall_rate = o.decline_rate = o.stock_fail_rate = o.reorder_rate = o.duplicate_rate = 0;
    char err[256];
    sim_t *sim = sim_new(&o, err, sizeof err);
    sim_item_t item;
    int64_t starts[100];
    int n = 0;
    while (sim_pop(sim, 0, &item, err, sizeof err))
        if (item.msg->kind == SIM_ORDER_PLACED)
            starts[n++] = item.msg->time_ms;
    ck_assert_int_eq(n, 100);
    for (int i = 0; i < 100; i++)
        ck_assert_int_eq(starts[i], T0 + 10 * i);
    sim_free(sim);

    /* Poisson at 200/s: the mean gap near 5 ms. */
    o.orders = 5000;
    o.rate = 200;
    sim = sim_new(&o, err, sizeof err);
    int64_t first = -1, last = 0;
    while (sim_pop(sim, 0, &item, err, sizeof err)) {
        if (item.msg->kind != SIM_ORDER_PLACED)
            continue;
        if (first < 0)
            first = item.msg->time_ms;
        last = item.msg->time_ms;
    }
    double mean = (double) (last - first) / 4999.0;
    ck_assert_msg(fabs(mean - 5.0) < 0.4, "mean gap %f", mean);
    sim_free(sim);

    /* Real time at rate 0: an order arrives at "now", one per pop. */
    o.virtual_time = false;
    o.rate = 0;
    o.orders = 3;
    sim = sim_new(&o, err, sizeof err);
    ck_assert_int_eq(sim_peek(sim, T0 + 500), T0 + 500);
    ck_assert(sim_pop(sim, T0 + 500, &item, err, sizeof err));
    ck_assert_int_eq(item.msg->time_ms, T0 + 500);
    ck_assert_int_eq(sim_stats(sim)->orders, 1);
    ck_assert_int_eq(sim_peek(sim, T0 + 700), T0 + 700);
    sim_free(sim);
}
END_TEST

/* The heap holds orders in flight only. */
START_TEST(test_memory_in_flight)
{
    sim_options_t o = base_options();
    o.orders = 2000;
    o.rate = 100;           /* 10 ms apart */
    o.time_scale = 0.00001; /* every path within a few seconds... */
    char err[256];
    sim_t *sim = sim_new(&o, err, sizeof err);
    sim_item_t item;
    uint64_t most = 0;
    while (sim_pop(sim, 0, &item, err, sizeof err))
        if (sim_stats(sim)->in_flight > most)
            most = sim_stats(sim)->in_flight;
    /* ...while arrivals take 20 s: far fewer than 2000 at once. */
    ck_assert_msg(most < 700, "%lu orders in flight", (unsigned long) most);
    sim_free(sim);
}
END_TEST

START_TEST(test_span)
{
    sim_options_t o = base_options();
    o.orders = 3000;
    o.rate = 30;
    o.reorder_rate = o.duplicate_rate = 0.2;
    o.deadline_ms[SIM_ORDER_DELIVERED] = 5 * 86400000LL;
    int64_t span = sim_span_ms(&o);
    char err[256];
    sim_t *sim = sim_new(&o, err, sizeof err);
    sim_item_t item;
    int64_t latest = 0;
    while (sim_pop(sim, 0, &item, err, sizeof err)) {
        EXPECT(item.emit_ms <= T0 + span);
        if (item.msg && item.msg->time_ms > latest)
            latest = item.msg->time_ms;
        if (item.emit_ms > latest)
            latest = item.emit_ms;
    }
    EXPECT(latest <= T0 + span);
    sim_free(sim);
}
END_TEST

START_TEST(test_options_check)
{
    char err[256];
    sim_options_t o = base_options();
    ck_assert_int_eq(sim_options_check(&o, err, sizeof err), ERR_OK);
    o.stall_rate = 1.5;
    ck_assert_int_eq(sim_options_check(&o, err, sizeof err), ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(err, "stall-rate"));
    o = base_options();
    o.time_scale = 0;
    ck_assert_ptr_null(sim_new(&o, err, sizeof err));
    ck_assert_ptr_nonnull(strstr(err, "time-scale"));
}
END_TEST

/* ---- messages ---------------------------------------------------------- */

START_TEST(test_values)
{
    sim_options_t o = base_options();
    o.stall_rate = o.decline_rate = o.stock_fail_rate = 0;
    sim_order_t p;
    sim_plan_order(&o, 7, T0, &p);
    char buf[1024], oid[64];
    sim_order_id(&o, 7, oid, sizeof oid);
    ck_assert_str_eq(oid, "ord-2a-7");

    static const char *const fields[][3] = {
        {"customer_id", "total", NULL},
        {"payment_id", NULL, NULL},
        {"warehouse_id", NULL, NULL},
        {"carrier", "tracking_number", "warehouse_id"},
        {NULL, NULL, NULL},
        {NULL, NULL, NULL},
    };
    for (int k = 0; k < 6; k++) {
        sim_msg_t m = p.msgs[position(&p, k)];
        int n = sim_format_value(&o, &p, &m, buf, sizeof buf);
        ck_assert_int_lt(n, (int) sizeof buf);
        json_error_t jerr;
        json_t *v = json_loads(buf, 0, &jerr);
        ck_assert_msg(v != NULL, "%s: %s", buf, jerr.text);
        ck_assert_str_eq(json_string_value(json_object_get(v, "type")),
                         sim_kind_name((sim_kind_t) m.kind));
        ck_assert_str_eq(json_string_value(json_object_get(v, "order_id")), oid);
        char id[64];
        sim_event_id(&o, 7, (unsigned) k, id, sizeof id);
        ck_assert_str_eq(json_string_value(json_object_get(v, "id")), id);
        for (int f = 0; f < 3 && fields[k][f]; f++)
            ck_assert_msg(json_object_get(v, fields[k][f]) != NULL, "%s lacks %s", buf,
                          fields[k][f]);
        json_decref(v);

        /* Truncation reports the full length, like snprintf. */
        char small[16];
        ck_assert_int_eq(sim_format_value(&o, &p, &m, small, sizeof small), n);

        /* As a CloudEvent, the value is the data alone, and the headers
         * carry the envelope. */
        m.flags |= SIM_MSG_CLOUDEVENT;
        sim_format_value(&o, &p, &m, buf, sizeof buf);
        v = json_loads(buf, 0, &jerr);
        ck_assert_ptr_nonnull(v);
        ck_assert_ptr_null(json_object_get(v, "type"));
        ck_assert_ptr_null(json_object_get(v, "id"));
        ck_assert_str_eq(json_string_value(json_object_get(v, "order_id")), oid);
        json_decref(v);

        sim_header_t h[SIM_MAX_HEADERS];
        char hbuf[256];
        size_t nh = sim_format_headers(&o, &p, &m, h, hbuf, sizeof hbuf);
        ck_assert_int_eq(nh, 6);
        ck_assert_str_eq(h[0].name, "ce_specversion");
        ck_assert_str_eq(h[0].value, "1.0");
        ck_assert_str_eq(h[1].value, sim_kind_name((sim_kind_t) m.kind));
        ck_assert_str_eq(h[2].value, id);
        ck_assert_str_eq(h[3].name, "ce_source");
        ck_assert(strncmp(h[3].value, "/sim/", 5) == 0);
        int64_t t;
        ck_assert(rfc3339_parse(h[4].value, &t));
        ck_assert_int_eq(t, m.time_ms);
    }

    /* Plain JSON: no headers. */
    sim_header_t h[SIM_MAX_HEADERS];
    char hbuf[256];
    ck_assert_int_eq(sim_format_headers(&o, &p, &p.msgs[0], h, hbuf, sizeof hbuf), 0);
}
END_TEST

START_TEST(test_poison)
{
    sim_options_t o = base_options();
    char buf[512];
    long len;
    json_error_t jerr;

    ck_assert_int_eq(sim_format_poison(&o, 0, buf, sizeof buf, &len), SIM_POISON_INVALID_JSON);
    ck_assert_ptr_null(json_loadb(buf, (size_t) len, 0, &jerr));

    ck_assert_int_eq(sim_format_poison(&o, 1, buf, sizeof buf, &len), SIM_POISON_INVALID_UTF8);
    ck_assert(!utf8_valid((const unsigned char *) buf, (size_t) len));

    ck_assert_int_eq(sim_format_poison(&o, 2, buf, sizeof buf, &len), SIM_POISON_ARRAY);
    json_t *v = json_loadb(buf, (size_t) len, 0, &jerr);
    ck_assert(json_is_array(v));
    json_decref(v);

    ck_assert_int_eq(sim_format_poison(&o, 3, buf, sizeof buf, &len), SIM_POISON_MISSING_KEY);
    v = json_loadb(buf, (size_t) len, 0, &jerr);
    ck_assert(json_is_object(v));
    ck_assert_ptr_null(json_object_get(v, "order_id"));
    ck_assert_ptr_nonnull(json_object_get(v, "type"));
    json_decref(v);

    ck_assert_int_eq(sim_format_poison(&o, 4, buf, sizeof buf, &len), SIM_POISON_TOMBSTONE);
    ck_assert_int_eq(len, -1);
    ck_assert_int_eq(sim_format_poison(&o, 5, buf, sizeof buf, &len), SIM_POISON_INVALID_JSON);

    /* Spread over the run: 4 poison among 400 orders ride with orders 50,
     * 150, 250, 350, each just after that order's start. */
    o.orders = 400;
    o.poison = 4;
    o.reorder_rate = 0;
    char err[256];
    sim_t *sim = sim_new(&o, err, sizeof err);
    sim_item_t item;
    uint32_t last_order = 0;
    int n = 0;
    while (sim_pop(sim, 0, &item, err, sizeof err)) {
        if (item.order != NULL && item.msg->kind == SIM_ORDER_PLACED)
            last_order = item.order->index;
        if (item.poison >= 0) {
            ck_assert_int_eq(item.poison, n);
            ck_assert_int_eq(last_order, 50 + 100 * (uint32_t) n);
            ck_assert_int_eq(item.emit_ms, T0 + 10 * (int64_t) last_order);
            n++;
        }
    }
    ck_assert_int_eq(n, 4);
    sim_free(sim);
}
END_TEST

START_TEST(test_format_time)
{
    char buf[40];
    ck_assert_str_eq(sim_format_time(0, buf, sizeof buf), "1970-01-01T00:00:00.000Z");
    ck_assert_str_eq(sim_format_time(T0 + 3723004, buf, sizeof buf), "2026-01-01T01:02:03.004Z");
    ck_assert_str_eq(sim_format_time(951782400000LL, buf, sizeof buf), "2000-02-29T00:00:00.000Z");
    /* Round trip through Steward's own parser. */
    for (int64_t t = 0; t < 4000000000000LL; t += 123456789011LL) {
        int64_t back;
        EXPECT(rfc3339_parse(sim_format_time(t, buf, sizeof buf), &back));
        EXPECT(back == t);
    }
}
END_TEST

/* ---- the definition ---------------------------------------------------- */

static def_t *load_example(void)
{
    return tl_def_load("definitions/examples/order_fulfilment.json");
}

START_TEST(test_flow)
{
    def_t *def = load_example();
    sim_def_flow_t flow;
    char err[512];
    ck_assert_int_eq(sim_def_flow(def, "t1.", NULL, &flow, err, sizeof err), ERR_OK);
    ck_assert_str_eq(flow.topic[SIM_ORDER_PLACED], "t1.orders");
    ck_assert_str_eq(flow.topic[SIM_REFUND_ISSUED], "t1.payments");
    ck_assert_str_eq(flow.topic[SIM_CUSTOMER_NOTIFIED], "t1.notifications");
    ck_assert_str_eq(flow.state_after[SIM_ORDER_PLACED], "awaiting_payment");
    ck_assert_str_eq(flow.expected_after[SIM_ORDER_PLACED],
                     "[\"PaymentCaptured\",\"PaymentDeclined\"]");
    ck_assert_str_eq(flow.state_after[SIM_PAYMENT_CAPTURED], "awaiting_stock");
    ck_assert_str_eq(flow.state_after[SIM_STOCK_UNAVAILABLE], "refunding");
    ck_assert_str_eq(flow.expected_after[SIM_STOCK_UNAVAILABLE], "[\"RefundIssued\"]");
    ck_assert_str_eq(flow.state_after[SIM_ORDER_DELIVERED], "delivered");
    ck_assert_str_eq(flow.state_after[SIM_CUSTOMER_NOTIFIED], "completed");
    ck_assert_int_eq(flow.deadline_ms[SIM_PAYMENT_CAPTURED], 15 * 60000);
    ck_assert_int_eq(flow.deadline_ms[SIM_ORDER_DELIVERED], 5 * 86400000LL);
    ck_assert_int_eq(flow.deadline_ms[SIM_ORDER_PLACED], 0);
    sim_def_flow_clear(&flow);

    ck_assert_int_eq(sim_def_flow(def, "t1.", "all-events", &flow, err, sizeof err), ERR_OK);
    for (int k = 0; k < SIM_N_KINDS; k++)
        ck_assert_str_eq(flow.topic[k], "all-events");
    sim_def_flow_clear(&flow);
    def_free(def);

    /* A definition without the flow is refused with a reason. */
    const char *doc = "{\"process\":\"p\",\"version\":1,\"mode\":\"shadow\",\"owner\":\"team\","
                      "\"key\":\"/order_id\",\"events\":{\"OrderPlaced\":{\"topic\":\"o\"}},"
                      "\"start\":{\"on\":\"OrderPlaced\",\"to\":\"open\"},"
                      "\"states\":{\"open\":{\"deadline\":\"1h\",\"on\":{\"OrderPlaced\":\"d\"}},"
                      "\"d\":{\"terminal\":\"success\"}}}";
    def_problems_t problems = {0};
    def = def_load_json(doc, strlen(doc), "small.json", &problems);
    ck_assert_ptr_nonnull(def);
    ck_assert_int_eq(sim_def_flow(def, "", NULL, &flow, err, sizeof err), ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(err, "PaymentCaptured"));
    def_free(def);
}
END_TEST

START_TEST(test_format_duration)
{
    char buf[64];
    ck_assert_str_eq(sim_def_format_duration(900, buf, sizeof buf), "900ms");
    ck_assert_str_eq(sim_def_format_duration(3600, buf, sizeof buf), "3s600ms");
    ck_assert_str_eq(sim_def_format_duration(864000, buf, sizeof buf), "14m24s");
    ck_assert_str_eq(sim_def_format_duration(0, buf, sizeof buf), "0s");
    ck_assert_str_eq(sim_def_format_duration(93784005, buf, sizeof buf), "1d2h3m4s5ms");
    ck_assert_int_eq(sim_def_scale_ms(15 * 60000, 0.001), 900);
    ck_assert_int_eq(sim_def_scale_ms(1000, 0.0001), 1); /* never zero */
    ck_assert_int_eq(sim_def_scale_ms(0, 0.5), 0);

    /* Every value survives format then parse, exactly. */
    for (int64_t ms = 1; ms < 400LL * 86400000; ms = ms * 3 + 7) {
        int64_t back;
        char err[128];
        EXPECT(
            duration_parse(sim_def_format_duration(ms, buf, sizeof buf), &back, err, sizeof err));
        EXPECT(back == ms);
    }
}
END_TEST

START_TEST(test_rewrite)
{
    char *path = tl_source_path("definitions/examples/order_fulfilment.json");
    json_error_t jerr;
    json_t *doc = json_load_file(path, 0, &jerr);
    ck_assert_ptr_nonnull(doc);
    char err[512];
    ck_assert_int_eq(sim_def_rewrite(doc, "run7.", NULL, 0.001, err, sizeof err), ERR_OK);

    ck_assert_str_eq(json_string_value(json_object_get(doc, "deadline")), "14m24s");
    ck_assert_str_eq(json_string_value(json_object_get(doc, "reorder_window")), "120ms");
    json_t *states = json_object_get(doc, "states");
    json_t *ap = json_object_get(states, "awaiting_payment");
    ck_assert_str_eq(json_string_value(json_object_get(ap, "deadline")), "900ms");
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(ap, "command"), "topic")),
                     "run7.payment-commands");
    ck_assert_str_eq(
        json_string_value(json_object_get(json_object_get(states, "awaiting_stock"), "deadline")),
        "3s600ms");
    ck_assert_str_eq(
        json_string_value(json_object_get(json_object_get(states, "shipped"), "deadline")),
        "7m12s");
    const char *name;
    json_t *ev;
    json_object_foreach(json_object_get(doc, "events"), name, ev)
    {
        const char *topic = json_string_value(json_object_get(ev, "topic"));
        ck_assert_msg(strncmp(topic, "run7.", 5) == 0, "%s: %s", name, topic);
    }
    /* Payload templates are left alone. */
    ck_assert_str_eq(json_string_value(json_object_get(
                         json_object_get(json_object_get(ap, "command"), "payload"), "amount")),
                     "${vars.total}");

    /* The result is a valid definition with the scaled deadlines. */
    char *text = json_dumps(doc, 0);
    def_problems_t problems = {0};
    def_t *def = def_load_json(text, strlen(text), "rewritten", &problems);
    ck_assert_msg(def != NULL, "%s", problems.n ? problems.items[0].message : "?");
    ck_assert_int_eq(def->states[def_find_state(def, "awaiting_payment")].deadline_ms, 900);
    ck_assert_int_eq(def->deadline_ms, 864000);
    ck_assert_str_eq(def->events[def_find_event(def, "OrderPlaced")].topic, "run7.orders");
    def_free(def);
    free(text);
    json_decref(doc);

    /* A single topic for every event; commands keep their own. */
    doc = json_load_file(path, 0, &jerr);
    ck_assert_int_eq(sim_def_rewrite(doc, "p.", "one", 1.0, err, sizeof err), ERR_OK);
    json_object_foreach(json_object_get(doc, "events"), name, ev)
    {
        ck_assert_str_eq(json_string_value(json_object_get(ev, "topic")), "one");
    }
    json_t *refunding = json_object_get(json_object_get(doc, "states"), "refunding");
    ck_assert_str_eq(json_string_value(json_object_get(refunding, "deadline")), "1d");
    ck_assert_str_eq(
        json_string_value(json_object_get(json_object_get(refunding, "command"), "topic")),
        "p.payment-commands");
    json_decref(doc);

    /* Not a definition. */
    doc = json_loads("{\"deadline\": 5}", 0, &jerr);
    ck_assert_int_eq(sim_def_rewrite(doc, "", NULL, 1.0, err, sizeof err), ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(err, "deadline"));
    json_decref(doc);
    free(path);
}
END_TEST

/* ---- the responder (active mode) ----------------------------------------- */

static json_t *load_doc(const char *rel)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", STEWARD_SOURCE_DIR, rel);
    json_error_t jerr;
    json_t *doc = json_load_file(path, 0, &jerr);
    ck_assert_msg(doc != NULL, "%s: %s", path, jerr.text);
    return doc;
}

static void load_active(sim_active_model_t *m)
{
    json_t *doc = load_doc("definitions/demo/order_fulfilment_active.json");
    char err[512];
    ck_assert_msg(sim_active_load(doc, "d1.", m, err, sizeof err) == ERR_OK, "%s", err);
    json_decref(doc);
}

static int state_of(const sim_active_model_t *m, const char *name)
{
    int s = sim_active_find_state(m, name);
    ck_assert_msg(s >= 0, "no state %s", name);
    return s;
}

/* The responder's options for the active demo: the demo's time scale, and
 * the latencies cut below the active definition's deadlines. */
static sim_options_t active_options(const sim_active_model_t *m)
{
    sim_options_t o = base_options();
    o.time_scale = 0.00002;
    o.orders = 1000;
    sim_active_deadlines(m, 1.0, &o);
    return o;
}

START_TEST(test_active_model)
{
    sim_active_model_t m;
    load_active(&m);
    ck_assert_str_eq(m.process, "order_fulfilment");
    ck_assert_str_eq(m.topic[SIM_PAYMENT_CAPTURED], "d1.payments");
    const sim_active_state_t *pay = &m.states[state_of(&m, "awaiting_payment")];
    ck_assert_int_eq(m.start_state, state_of(&m, "awaiting_payment"));
    ck_assert_str_eq(pay->command_type, "CapturePayment");
    ck_assert_str_eq(pay->command_topic, "d1.payment-commands");
    ck_assert_int_eq(pay->retry_max, 2);
    ck_assert_int_eq(pay->deadline_ms, 3000);
    ck_assert_int_eq(pay->on_timeout, state_of(&m, "cancelled"));
    ck_assert_str_eq(pay->token_pointer, "/steward_token");
    const sim_active_state_t *stock = &m.states[state_of(&m, "awaiting_stock")];
    ck_assert_int_eq(stock->on_timeout, state_of(&m, "refunding"));
    const sim_active_state_t *ship = &m.states[state_of(&m, "awaiting_dispatch")];
    ck_assert(ship->leased);
    ck_assert_str_eq(ship->lease_claim, "PickStarted");
    ck_assert_str_eq(ship->lease_renew, "PickHeartbeat");
    ck_assert_str_eq(ship->lease_holder, "/worker_id");
    ck_assert_str_eq(ship->lease_topic, "d1.shipping");
    ck_assert_int_eq(ship->lease_ms, 1500);
    ck_assert_str_eq(m.states[state_of(&m, "shipped")].command_type, "");
    ck_assert(m.states[state_of(&m, "refunded")].terminal);

    /* The shadow demo sends nothing: the responder says why it refuses it. */
    json_t *shadow = load_doc("definitions/demo/order_fulfilment.json");
    char err[512];
    ck_assert_int_eq(sim_active_load(shadow, "", &m, err, sizeof err), ERR_INVALID);
    ck_assert_msg(strstr(err, "active") != NULL, "%s", err);
    json_decref(shadow);
}
END_TEST

START_TEST(test_active_faults)
{
    sim_active_model_t m;
    load_active(&m);
    sim_options_t o = active_options(&m);
    unsigned seen[4] = {0};
    bool zombie_on_dispatch = false, silent_on_delivered = false, silent_on_stock = false;
    for (uint32_t i = 0; i < 400; i++) {
        sim_fault_t f = sim_active_fault(&m, i, 4);
        seen[f.kind]++;
        EXPECT((f.kind == SIM_FAULT_NONE) == (i % 4 != 3));
        if (f.kind == SIM_FAULT_NONE) {
            EXPECT(f.state == -1);
            continue;
        }
        /* Every fault is reached: the order takes the completed path. */
        sim_order_t order;
        sim_active_plan(&o, &m, i, 4, &order);
        EXPECT(order.outcome == SIM_COMPLETED && order.n_sent == order.n_path);
        EXPECT(m.states[f.state].command_type[0] != '\0');
        if (f.kind == SIM_FAULT_DROP_FIRST)
            EXPECT(m.states[f.state].retry_max > 0);
        zombie_on_dispatch |=
            f.kind == SIM_FAULT_ZOMBIE && f.state == state_of(&m, "awaiting_dispatch");
        silent_on_delivered |= f.kind == SIM_FAULT_SILENT && f.state == state_of(&m, "delivered");
        silent_on_stock |= f.kind == SIM_FAULT_SILENT && f.state == state_of(&m, "awaiting_stock");
        /* refunding is off the completed path: a fault there would never fire. */
        EXPECT(f.state != state_of(&m, "refunding"));
    }
    ck_assert_uint_eq(seen[SIM_FAULT_NONE], 300);
    ck_assert(seen[SIM_FAULT_DROP_FIRST] > 0 && seen[SIM_FAULT_SILENT] > 0 &&
              seen[SIM_FAULT_ZOMBIE] > 0);
    ck_assert(zombie_on_dispatch && silent_on_delivered && silent_on_stock);
    ck_assert_int_eq(sim_active_fault(&m, 7, 0).kind, SIM_FAULT_NONE);
}
END_TEST

START_TEST(test_active_expect)
{
    sim_active_model_t m;
    load_active(&m);
    sim_options_t o = active_options(&m);
    o.decline_rate = 0.2;
    o.stock_fail_rate = 0.2;
    sim_order_t order;
    unsigned outcomes[4] = {0};
    /* Without a fault, the plan's own outcome. */
    for (uint32_t i = 0; i < 300; i++) {
        sim_active_plan(&o, &m, i, 0, &order);
        sim_expect_t e = sim_active_expect(&m, &order, (sim_fault_t){SIM_FAULT_NONE, -1});
        EXPECT(e.paged_at == -1 && e.stale_replies == 0);
        const char *want = order.outcome == SIM_COMPLETED  ? "completed"
                           : order.outcome == SIM_DECLINED ? "cancelled"
                                                           : "refunded";
        EXPECT(e.terminal == sim_active_find_state(&m, want));
        outcomes[order.outcome]++;
    }
    ck_assert(outcomes[SIM_COMPLETED] && outcomes[SIM_DECLINED] && outcomes[SIM_REFUNDED]);
    ck_assert_uint_eq(outcomes[SIM_STALLED], 0); /* faults replace stalls */

    o.decline_rate = o.stock_fail_rate = 0.0;
    sim_active_plan(&o, &m, 0, 0, &order);
    struct {
        sim_fault_kind_t kind;
        const char *at, *terminal, *paged;
        unsigned stale;
    } cases[] = {
        {SIM_FAULT_DROP_FIRST, "awaiting_payment", "completed", NULL, 0},
        {SIM_FAULT_SILENT, "awaiting_payment", "cancelled", NULL, 0},          /* on_timeout */
        {SIM_FAULT_SILENT, "awaiting_stock", "refunded", NULL, 0},             /* compensation */
        {SIM_FAULT_SILENT, "awaiting_dispatch", NULL, "awaiting_dispatch", 0}, /* paged */
        {SIM_FAULT_SILENT, "delivered", NULL, "delivered", 0},
        {SIM_FAULT_ZOMBIE, "awaiting_dispatch", "completed", NULL, 1},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        sim_fault_t f = {cases[c].kind, state_of(&m, cases[c].at)};
        sim_expect_t e = sim_active_expect(&m, &order, f);
        ck_assert_msg(e.terminal == (cases[c].terminal ? state_of(&m, cases[c].terminal) : -1) &&
                          e.paged_at == (cases[c].paged ? state_of(&m, cases[c].paged) : -1) &&
                          e.stale_replies == cases[c].stale,
                      "case %zu: %s at %s", c, sim_fault_name(f.kind), cases[c].at);
    }
}
END_TEST

/* A command as the dispatcher sends it for `state`. */
static sim_command_t command(const sim_active_model_t *m, const char *key, const char *state,
                             long step, long attempt, long long token)
{
    sim_command_t c = {0};
    c.type = m->states[sim_active_find_state(m, state)].command_type;
    c.key = key;
    c.state = state;
    c.step = step;
    c.attempt = attempt;
    c.token = token;
    return c;
}

static json_t *reply_json(const sim_reply_t *r)
{
    json_t *v = json_loads(r->value, 0, NULL);
    ck_assert_msg(v != NULL, "not JSON: %s", r->value);
    return v;
}

START_TEST(test_active_respond)
{
    sim_active_model_t m;
    load_active(&m);
    sim_options_t o = active_options(&m);
    o.decline_rate = o.stock_fail_rate = 0.0;
    sim_order_t order;
    sim_active_plan(&o, &m, 5, 0, &order);
    char key[64];
    sim_order_id(&o, 5, key, sizeof key);
    sim_reply_t out[SIM_MAX_REPLIES], again[SIM_MAX_REPLIES];
    sim_fault_t none = {SIM_FAULT_NONE, -1};

    /* A payment is answered after the plan's latency, echoing the token. */
    sim_command_t c = command(&m, key, "awaiting_payment", 1, 0, 1);
    size_t n = sim_active_respond(&o, &m, &order, none, &c, T0, out, SIM_MAX_REPLIES);
    ck_assert_uint_eq(n, 1);
    ck_assert_str_eq(out[0].type, "PaymentCaptured");
    ck_assert_str_eq(out[0].topic, "d1.payments");
    ck_assert_int_eq(out[0].emit_ms, T0 + order.time_ms[1] - order.time_ms[0]);
    ck_assert(out[0].emit_ms - T0 <= 3000 * 8 / 10);
    json_t *v = reply_json(&out[0]);
    ck_assert_int_eq(json_integer_value(json_object_get(v, "steward_token")), 1);
    ck_assert_str_eq(json_string_value(json_object_get(v, "order_id")), key);
    ck_assert_str_eq(json_string_value(json_object_get(v, "type")), "PaymentCaptured");
    ck_assert_str_eq(json_string_value(json_object_get(v, "id")), out[0].event_id);
    json_decref(v);

    /* A copy of a command (same ce_id) gets the same replies, same ids. */
    ck_assert_uint_eq(sim_active_respond(&o, &m, &order, none, &c, T0, again, SIM_MAX_REPLIES), 1);
    ck_assert_str_eq(again[0].value, out[0].value);
    /* A re-send is another attempt: other ids. */
    c.attempt = 1;
    c.token = 2;
    ck_assert_uint_eq(sim_active_respond(&o, &m, &order, none, &c, T0, again, SIM_MAX_REPLIES), 1);
    ck_assert_str_ne(again[0].event_id, out[0].event_id);

    /* drop_first: the first command is lost, the re-send is answered. */
    sim_fault_t drop = {SIM_FAULT_DROP_FIRST, state_of(&m, "awaiting_stock")};
    c = command(&m, key, "awaiting_stock", 2, 0, 2);
    ck_assert_uint_eq(sim_active_respond(&o, &m, &order, drop, &c, T0, out, SIM_MAX_REPLIES), 0);
    c.attempt = 1;
    c.token = 3;
    ck_assert_uint_eq(sim_active_respond(&o, &m, &order, drop, &c, T0, out, SIM_MAX_REPLIES), 1);
    ck_assert_str_eq(out[0].type, "StockReserved");
    /* ... and only on its own step. */
    c = command(&m, key, "awaiting_payment", 1, 0, 1);
    ck_assert_uint_eq(sim_active_respond(&o, &m, &order, drop, &c, T0, out, SIM_MAX_REPLIES), 1);

    /* silent: no attempt is ever answered; its compensation is. */
    sim_fault_t silent = {SIM_FAULT_SILENT, state_of(&m, "awaiting_stock")};
    for (long a = 0; a < 3; a++) {
        c = command(&m, key, "awaiting_stock", 2, a, 2 + a);
        ck_assert_uint_eq(sim_active_respond(&o, &m, &order, silent, &c, T0, out, SIM_MAX_REPLIES),
                          0);
    }
    c = command(&m, key, "refunding", 3, 0, 4);
    ck_assert_uint_eq(sim_active_respond(&o, &m, &order, silent, &c, T0, out, SIM_MAX_REPLIES), 1);
    ck_assert_str_eq(out[0].type, "RefundIssued");
    v = reply_json(&out[0]);
    ck_assert_int_eq(json_integer_value(json_object_get(v, "steward_token")), 4);
    ck_assert_ptr_nonnull(json_object_get(v, "refund_id"));
    json_decref(v);
}
END_TEST

/* Checks the lease work in out[from..to): a claim, then renewals no
 * further apart than the lease, all by `worker` with `token`. */
static void expect_lease_work(const sim_reply_t *out, size_t from, size_t to, const char *worker,
                              long long token, int64_t lease_ms)
{
    ck_assert_str_eq(out[from].type, "PickStarted");
    for (size_t i = from; i < to; i++) {
        json_t *v = reply_json(&out[i]);
        ck_assert_str_eq(json_string_value(json_object_get(v, "worker_id")), worker);
        ck_assert_int_eq(json_integer_value(json_object_get(v, "steward_token")), token);
        json_decref(v);
        if (i > from) {
            ck_assert_str_eq(out[i].type, "PickHeartbeat");
            ck_assert(out[i].emit_ms - out[i - 1].emit_ms < lease_ms);
        }
    }
}

START_TEST(test_active_lease)
{
    sim_active_model_t m;
    load_active(&m);
    sim_options_t o = active_options(&m);
    o.decline_rate = o.stock_fail_rate = 0.0;
    sim_order_t order;
    sim_active_plan(&o, &m, 9, 0, &order);
    char key[64];
    sim_order_id(&o, 9, key, sizeof key);
    sim_reply_t out[SIM_MAX_REPLIES];
    const int ship = state_of(&m, "awaiting_dispatch");
    const int64_t lease = m.states[ship].lease_ms;

    /* A healthy picker claims, heartbeats within the lease, dispatches,
     * and the carrier's delivery follows (shipped sends no command). */
    sim_command_t c = command(&m, key, "awaiting_dispatch", 3, 0, 3);
    size_t n = sim_active_respond(&o, &m, &order, (sim_fault_t){SIM_FAULT_NONE, -1}, &c, T0, out,
                                  SIM_MAX_REPLIES);
    ck_assert_uint_ge(n, 3);
    ck_assert_str_eq(out[n - 2].type, "ShipmentDispatched");
    ck_assert_str_eq(out[n - 1].type, "OrderDelivered");
    ck_assert_str_eq(out[n - 1].topic, "d1.delivery");
    expect_lease_work(out, 0, n - 2, "picker-9-0", 3, lease);
    ck_assert(out[n - 2].emit_ms - out[n - 3].emit_ms < lease);
    for (size_t i = 1; i < n; i++)
        EXPECT(out[i].emit_ms >= out[i - 1].emit_ms);
    json_t *v = reply_json(&out[n - 1]);
    ck_assert_ptr_null(json_object_get(v, "steward_token")); /* shipped names no token */
    json_decref(v);

    /* The zombie claims, heartbeats once and goes quiet: nothing more. */
    sim_fault_t zombie = {SIM_FAULT_ZOMBIE, ship};
    n = sim_active_respond(&o, &m, &order, zombie, &c, T0, out, SIM_MAX_REPLIES);
    ck_assert_uint_eq(n, 2);
    expect_lease_work(out, 0, 2, "picker-9-0", 3, lease);

    /* The hand-off (attempt 1, token 4): the old worker's late answer with
     * token 3 comes first and is marked stale; then the new worker's claim
     * and answer with token 4. */
    c.attempt = 1;
    c.token = 4;
    n = sim_active_respond(&o, &m, &order, zombie, &c, T0 + 5000, out, SIM_MAX_REPLIES);
    ck_assert_uint_ge(n, 4);
    ck_assert_str_eq(out[0].type, "ShipmentDispatched");
    ck_assert(out[0].stale);
    ck_assert_int_eq(out[0].token, 3);
    v = reply_json(&out[0]);
    ck_assert_int_eq(json_integer_value(json_object_get(v, "steward_token")), 3);
    json_decref(v);
    expect_lease_work(out, 1, n - 2, "picker-9-1", 4, lease);
    ck_assert_str_eq(out[n - 2].type, "ShipmentDispatched");
    ck_assert(!out[n - 2].stale);
    ck_assert_int_eq(out[n - 2].token, 4);
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++)
            EXPECT(strcmp(out[i].event_id, out[j].event_id) != 0);
}
END_TEST

START_TEST(test_active_rewrite)
{
    /* Backoffs and the lease scale with the deadlines they pace. */
    json_t *doc = load_doc("definitions/demo/order_fulfilment_active.json");
    char err[512];
    ck_assert_int_eq(sim_def_rewrite(doc, "x.", NULL, 2.0, err, sizeof err), ERR_OK);
    json_t *states = json_object_get(doc, "states");
    json_t *pay = json_object_get(states, "awaiting_payment");
    ck_assert_str_eq(json_string_value(json_object_get(pay, "deadline")), "6s");
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(pay, "retry"), "backoff")),
                     "1s");
    ck_assert_str_eq(
        json_string_value(json_object_get(json_object_get(pay, "retry"), "max_backoff")), "4s");
    json_t *ship = json_object_get(states, "awaiting_dispatch");
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(ship, "lease"), "duration")),
                     "3s");
    sim_active_model_t m;
    ck_assert_int_eq(sim_active_load(doc, "", &m, err, sizeof err), ERR_OK);
    ck_assert_int_eq(m.states[state_of(&m, "awaiting_dispatch")].lease_ms, 3000);
    ck_assert_str_eq(m.states[state_of(&m, "awaiting_dispatch")].command_topic,
                     "x.shipping-commands");
    json_decref(doc);
}
END_TEST

START_TEST(test_active_ids)
{
    /* The contract's ce_id: SHA-256 of process, key, step, attempt joined by 0x1f. */
    char hex[65];
    sim_active_ce_id("order_fulfilment", "ord-2a-17", 3, 1, hex);
    ck_assert_str_eq(hex, "1eabd79d3fa89de9c206879172289d61d1cecc6473800d5032ac487529f0f481");
    sim_active_ce_id("order_fulfilment", "ord-2a-17", 3, 2, hex);
    ck_assert_str_ne(hex, "1eabd79d3fa89de9c206879172289d61d1cecc6473800d5032ac487529f0f481");

    sim_options_t o = base_options(); /* seed 42 = 0x2a, 1000 orders */
    uint32_t index = 0;
    ck_assert(sim_active_order_index(&o, "ord-2a-17", &index));
    ck_assert_uint_eq(index, 17);
    ck_assert(!sim_active_order_index(&o, "ord-2b-17", &index));
    ck_assert(!sim_active_order_index(&o, "ord-2a-", &index));
    ck_assert(!sim_active_order_index(&o, "ord-2a-17x", &index));
    ck_assert(!sim_active_order_index(&o, "ord-2a-1000", &index)); /* not of this run */
}
END_TEST

/* ---- the active demo's closing check ------------------------------------- */

typedef struct check_case {
    demo_order_t orders[4];
    demo_command_t received[4], outbox[3];
    demo_pair_t stale_sent[1], stale_recorded[1], instances[4], alerts[2];
    size_t n_received, n_outbox, n_stale_recorded, n_alerts;
    char ids[3][65];
} check_case_t;

/* Four orders that each ended as planned: completed, paged at delivered,
 * refunded by compensation, completed past a zombie whose reply was
 * recorded stale; one command seen twice (a copy), and in the outbox. */
static void good_case(check_case_t *c, demo_active_facts_t *f)
{
    memset(c, 0, sizeof *c);
    c->orders[0] = (demo_order_t){"ord-1", "completed", NULL};
    c->orders[1] = (demo_order_t){"ord-2", NULL, "delivered"};
    c->orders[2] = (demo_order_t){"ord-3", "refunded", NULL};
    c->orders[3] = (demo_order_t){"ord-4", "completed", NULL};
    c->instances[0] = (demo_pair_t){"ord-1", "completed"};
    c->instances[1] = (demo_pair_t){"ord-2", "delivered"};
    c->instances[2] = (demo_pair_t){"ord-3", "refunded"};
    c->instances[3] = (demo_pair_t){"ord-4", "completed"};
    c->alerts[0] = (demo_pair_t){"ord-2", "delivered"};
    c->n_alerts = 1;
    sim_active_ce_id("order_fulfilment", "ord-1", 1, 0, c->ids[0]);
    sim_active_ce_id("order_fulfilment", "ord-4", 3, 1, c->ids[1]);
    c->received[0] = (demo_command_t){"ord-1", 1, 0, c->ids[0]};
    c->received[1] = (demo_command_t){"ord-1", 1, 0, c->ids[0]};
    c->received[2] = (demo_command_t){"ord-4", 3, 1, c->ids[1]};
    c->n_received = 3;
    c->outbox[0] = (demo_command_t){"ord-1", 1, 0, c->ids[0]};
    c->outbox[1] = (demo_command_t){"ord-4", 3, 1, c->ids[1]};
    c->n_outbox = 2;
    c->stale_sent[0] = (demo_pair_t){"ord-4", "evt-2a-4-s3a1-0"};
    c->stale_recorded[0] = (demo_pair_t){"ord-4", "evt-2a-4-s3a1-0"};
    c->n_stale_recorded = 1;
    *f = (demo_active_facts_t){"order_fulfilment",
                               c->orders,
                               4,
                               c->received,
                               c->n_received,
                               c->outbox,
                               c->n_outbox,
                               c->stale_sent,
                               1,
                               c->stale_recorded,
                               c->n_stale_recorded,
                               c->instances,
                               4,
                               c->alerts,
                               c->n_alerts};
}

START_TEST(test_active_check)
{
    check_case_t c;
    demo_active_facts_t f;
    demo_active_verdict_t v;

    good_case(&c, &f);
    ck_assert_msg(demo_active_check(&f, &v), "%s", v.n_problems ? v.problems[0] : "?");
    ck_assert_uint_eq(v.ended_right, 3);
    ck_assert_uint_eq(v.paged_right, 1);
    ck_assert_uint_eq(v.commands, 2);
    ck_assert_uint_eq(v.copies, 1); /* the same id twice is a copy, allowed */
    ck_assert_uint_eq(v.stale_recorded, 1);
    ck_assert_uint_eq(v.n_problems, 0);

    /* An order stuck short of its end. */
    good_case(&c, &f);
    c.instances[0].value = "awaiting_stock";
    ck_assert(!demo_active_check(&f, &v));
    ck_assert_uint_eq(v.wrong_end, 1);
    ck_assert_ptr_nonnull(strstr(v.problems[0], "ord-1 should have ended completed"));

    /* Paged although its retries should have carried it through. */
    good_case(&c, &f);
    c.alerts[1] = (demo_pair_t){"ord-3", "awaiting_stock"};
    f.n_alerts = 2;
    ck_assert(!demo_active_check(&f, &v));
    ck_assert_uint_eq(v.unexpected_pages, 1);

    /* Paged at the wrong step, or not at all. */
    good_case(&c, &f);
    c.alerts[0].value = "shipped";
    ck_assert(!demo_active_check(&f, &v));
    ck_assert_uint_eq(v.missed_pages, 1);
    f.n_alerts = 0;
    ck_assert(!demo_active_check(&f, &v));
    ck_assert_uint_eq(v.missed_pages, 1);

    /* One attempt under a second id: on Kafka or in the outbox. */
    good_case(&c, &f);
    sim_active_ce_id("order_fulfilment", "ord-1", 1, 1, c.ids[2]);
    c.received[3] = (demo_command_t){"ord-1", 1, 0, c.ids[2]};
    f.n_received = 4;
    ck_assert(!demo_active_check(&f, &v));
    ck_assert_uint_eq(v.conflicting_ids, 1);
    good_case(&c, &f);
    c.outbox[2] = (demo_command_t){"ord-4", 3, 1, c.ids[0]};
    f.n_outbox = 3;
    ck_assert(!demo_active_check(&f, &v));
    ck_assert_uint_eq(v.conflicting_ids, 1);

    /* An id that is not the contract's derivation. */
    good_case(&c, &f);
    c.received[2].ce_id = c.outbox[1].ce_id = c.ids[0];
    ck_assert(!demo_active_check(&f, &v));
    ck_assert_uint_eq(v.conflicting_ids, 0);
    ck_assert_uint_eq(v.foreign_ids, 1);

    /* A stale reply steward did not record as stale. */
    good_case(&c, &f);
    f.n_stale_recorded = 0;
    ck_assert(!demo_active_check(&f, &v));
    ck_assert_uint_eq(v.stale_missing, 1);
    ck_assert_ptr_nonnull(strstr(v.problems[0], "evt-2a-4-s3a1-0"));

    /* Nothing sent proves nothing. */
    good_case(&c, &f);
    f.n_received = f.n_outbox = 0;
    ck_assert(!demo_active_check(&f, &v));
}
END_TEST

Suite *sim_suite(void)
{
    Suite *s = suite_create("sim");
    TCase *tc = tcase_create("sim");
    tcase_add_test(tc, test_plan_deterministic);
    tcase_add_test(tc, test_plan_shapes);
    tcase_add_test(tc, test_rates);
    tcase_add_test(tc, test_stall_uniform);
    tcase_add_test(tc, test_latency_distribution);
    tcase_add_test(tc, test_rates_independent);
    tcase_add_test(tc, test_arrivals);
    tcase_add_test(tc, test_memory_in_flight);
    tcase_add_test(tc, test_span);
    tcase_add_test(tc, test_options_check);
    tcase_add_test(tc, test_values);
    tcase_add_test(tc, test_poison);
    tcase_add_test(tc, test_format_time);
    tcase_add_test(tc, test_flow);
    tcase_add_test(tc, test_format_duration);
    tcase_add_test(tc, test_rewrite);
    tcase_add_test(tc, test_active_model);
    tcase_add_test(tc, test_active_faults);
    tcase_add_test(tc, test_active_expect);
    tcase_add_test(tc, test_active_respond);
    tcase_add_test(tc, test_active_lease);
    tcase_add_test(tc, test_active_ids);
    tcase_add_test(tc, test_active_rewrite);
    tcase_add_test(tc, test_active_check);
    suite_add_tcase(s, tc);
    return s;
}
