/*
 * test_sim - steward-sim's planner: the plan of each order (paths, stalls,
 * duplicates, reorders), the distributions with a fixed seed, the
 * schedule's order and memory and what messages look like (a topic's type
 * header among them); and the active
 * demo's closing check of the responder's ground truth. No Kafka. The
 * definition's flow and rewrite are test_sim_def.c's, the responder's
 * plans test_sim_active.c's.
 */
#include "cli/cli_demo.h"
#include "common/rfc3339.h"
#include "common/utf8.h"
#include "sim/sim.h"
#include "sim/sim_active.h"
#include "test_sim.h"
#include "testlib.h"

#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

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

/* --type-header: the kinds of one topic carry their type in that header,
 * never in the value and never as CloudEvents; every other kind, and the
 * rest of the plan, is as without it. */
START_TEST(test_type_header)
{
    sim_options_t plain = base_options();
    plain.cloudevents_rate = 0.5;
    plain.stall_rate = plain.decline_rate = plain.stock_fail_rate = 0;
    sim_options_t o = plain;
    o.type_header[SIM_SHIPMENT_DISPATCHED] = "x-event-type";
    char err[256];
    ck_assert_int_eq(sim_options_check(&o, err, sizeof err), ERR_OK);

    size_t shipped = 0, others_ce = 0;
    for (uint32_t i = 0; i < 200; i++) {
        sim_order_t a, b;
        sim_plan_order(&plain, i, T0, &a);
        sim_plan_order(&o, i, T0, &b);
        ck_assert_uint_eq(a.n_msgs, b.n_msgs);
        for (int m = 0; m < b.n_msgs; m++) {
            const sim_msg_t *ma = &a.msgs[m], *mb = &b.msgs[m];
            EXPECT(ma->kind == mb->kind && ma->time_ms == mb->time_ms &&
                   ma->emit_ms == mb->emit_ms);
            if (mb->kind != SIM_SHIPMENT_DISPATCHED) {
                EXPECT(ma->flags == mb->flags);
                others_ce += (mb->flags & SIM_MSG_CLOUDEVENT) != 0;
                continue;
            }
            EXPECT(!(mb->flags & SIM_MSG_CLOUDEVENT));
            shipped++;

            char buf[1024], id[64];
            sim_format_value(&o, &b, mb, buf, sizeof buf);
            json_t *v = json_loads(buf, 0, NULL);
            ck_assert_msg(v != NULL, "not JSON: %s", buf);
            ck_assert_msg(json_object_get(v, "type") == NULL, "a type in the value: %s", buf);
            sim_event_id(&o, i, mb->step, id, sizeof id);
            ck_assert_str_eq(json_string_value(json_object_get(v, "id")), id);
            ck_assert_ptr_nonnull(json_object_get(v, "order_id"));
            ck_assert_ptr_nonnull(json_object_get(v, "tracking_number"));
            json_decref(v);

            sim_header_t h[SIM_MAX_HEADERS];
            char hbuf[256];
            ck_assert_uint_eq(sim_format_headers(&o, &b, mb, h, hbuf, sizeof hbuf), 1);
            ck_assert_str_eq(h[0].name, "x-event-type");
            ck_assert_str_eq(h[0].value, "ShipmentDispatched");
        }
    }
    ck_assert_uint_gt(shipped, 100);
    ck_assert_uint_gt(others_ce, 100); /* the other topics still mix */

    o.type_header[SIM_SHIPMENT_DISPATCHED] = "";
    ck_assert_int_eq(sim_options_check(&o, err, sizeof err), ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(err, "type-header"));
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
    tcase_add_test(tc, test_type_header);
    tcase_add_test(tc, test_poison);
    tcase_add_test(tc, test_format_time);
    tcase_add_test(tc, test_active_check);
    suite_add_tcase(s, tc);
    return s;
}
