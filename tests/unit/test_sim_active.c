/*
 * test_sim_active - steward-sim's responder (active mode): the model read
 * from the active demo's definition, the faults and what each order should
 * end as, the replies to each command (leases, stale tokens and duplicates
 * included),
 * the ids of orders and commands, and the rewrite of an active definition.
 */
#include "sim/sim.h"
#include "sim/sim_active.h"
#include "sim/sim_def.h"
#include "test_sim.h"
#include "testlib.h"

#include <check.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

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
    unsigned seen[SIM_N_FAULTS] = {0};
    bool zombie_on_dispatch = false, silent_on_delivered = false, silent_on_stock = false;
    bool late_zombie_on_dispatch = false, duplicate_on[SIM_ACTIVE_MAX_STATES] = {false};
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
        late_zombie_on_dispatch |=
            f.kind == SIM_FAULT_LATE_ZOMBIE && f.state == state_of(&m, "awaiting_dispatch");
        if (f.kind == SIM_FAULT_DUPLICATE) {
            EXPECT(m.states[f.state].token_pointer[0] != '\0');
            duplicate_on[f.state] = true;
        }
        /* refunding is off the completed path: a fault there would never fire. */
        EXPECT(f.state != state_of(&m, "refunding"));
    }
    ck_assert_uint_eq(seen[SIM_FAULT_NONE], 300);
    for (int k = 1; k < SIM_N_FAULTS; k++)
        ck_assert_msg(seen[k] > 0, "no %s in the rotation", sim_fault_name((sim_fault_kind_t) k));
    ck_assert(zombie_on_dispatch && silent_on_delivered && silent_on_stock &&
              late_zombie_on_dispatch);
    /* A duplicate on every commanded step of the completed path. */
    ck_assert(duplicate_on[state_of(&m, "awaiting_payment")] &&
              duplicate_on[state_of(&m, "awaiting_stock")] &&
              duplicate_on[state_of(&m, "awaiting_dispatch")] &&
              duplicate_on[state_of(&m, "delivered")]);
    /* The kinds added later come after the first three: the orders the
     * demo's responder test plays keep their faults. */
    sim_fault_t f = sim_active_fault(&m, 3, 4);
    ck_assert(f.kind == SIM_FAULT_DROP_FIRST && f.state == state_of(&m, "awaiting_payment"));
    f = sim_active_fault(&m, 27, 4);
    ck_assert(f.kind == SIM_FAULT_ZOMBIE && f.state == state_of(&m, "awaiting_dispatch"));
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
        {SIM_FAULT_LATE_ZOMBIE, "awaiting_dispatch", "completed", NULL, 1},
        {SIM_FAULT_DUPLICATE, "awaiting_payment", "completed", NULL, 1},
        {SIM_FAULT_DUPLICATE, "awaiting_dispatch", "completed", NULL, 1},
        {SIM_FAULT_DUPLICATE, "delivered", "completed", NULL, 1},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        sim_fault_t f = {cases[c].kind, state_of(&m, cases[c].at)};
        sim_expect_t e = sim_active_expect(&m, &order, f);
        ck_assert_msg(e.terminal == (cases[c].terminal ? state_of(&m, cases[c].terminal) : -1) &&
                          e.paged_at == (cases[c].paged ? state_of(&m, cases[c].paged) : -1) &&
                          e.stale_replies == cases[c].stale,
                      "case %zu: %s at %s", c, sim_fault_name(f.kind), cases[c].at);
    }

    /* A lease that runs out with no attempt left is not handed off: the
     * quiet worker pages the step's owner, and no stale answer comes. */
    sim_active_model_t no_retry = m;
    no_retry.states[state_of(&m, "awaiting_dispatch")].retry_max = 0;
    const sim_fault_kind_t zombies[] = {SIM_FAULT_ZOMBIE, SIM_FAULT_LATE_ZOMBIE};
    for (size_t k = 0; k < 2; k++) {
        sim_fault_t f = {zombies[k], state_of(&m, "awaiting_dispatch")};
        sim_expect_t e = sim_active_expect(&no_retry, &order, f);
        ck_assert_int_eq(e.terminal, -1);
        ck_assert_int_eq(e.paged_at, state_of(&m, "awaiting_dispatch"));
        ck_assert_uint_eq(e.stale_replies, 0);
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

    /* duplicate: the answer, then the same event under a new id with the
     * same token, just after it; the second is the one Steward must find
     * stale. A copy of the command gets both again, with their ids. */
    sim_fault_t dup = {SIM_FAULT_DUPLICATE, state_of(&m, "awaiting_payment")};
    c = command(&m, key, "awaiting_payment", 1, 0, 1);
    n = sim_active_respond(&o, &m, &order, dup, &c, T0, out, SIM_MAX_REPLIES);
    ck_assert_uint_eq(n, 2);
    ck_assert_str_eq(out[0].type, "PaymentCaptured");
    ck_assert_str_eq(out[1].type, "PaymentCaptured");
    ck_assert(!out[0].stale && out[1].stale);
    ck_assert_int_eq(out[0].token, 1);
    ck_assert_int_eq(out[1].token, 1);
    ck_assert_str_eq(out[0].topic, out[1].topic);
    ck_assert(out[1].emit_ms > out[0].emit_ms);
    ck_assert_str_ne(out[0].event_id, out[1].event_id);
    v = reply_json(&out[1]);
    ck_assert_int_eq(json_integer_value(json_object_get(v, "steward_token")), 1);
    ck_assert_str_eq(json_string_value(json_object_get(v, "id")), out[1].event_id);
    json_decref(v);
    ck_assert_uint_eq(sim_active_respond(&o, &m, &order, dup, &c, T0, again, SIM_MAX_REPLIES), 2);
    ck_assert_str_eq(again[1].event_id, out[1].event_id);
    /* ... and only on its own step. */
    c = command(&m, key, "awaiting_stock", 2, 0, 2);
    ck_assert_uint_eq(sim_active_respond(&o, &m, &order, dup, &c, T0, out, SIM_MAX_REPLIES), 1);
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
    /* The delivery is one event whichever attempt was answered: the
     * choreography's id, the same after a re-send, so Steward drops the
     * second as a copy instead of judging it out of sequence. */
    char delivered_id[64];
    sim_event_id(&o, 9, (unsigned) (order.n_path - 2), delivered_id, sizeof delivered_id);
    ck_assert_str_eq(out[n - 1].event_id, delivered_id);
    sim_command_t resent = c;
    resent.attempt = 1;
    resent.token = 4;
    sim_reply_t again[SIM_MAX_REPLIES];
    size_t n_again = sim_active_respond(&o, &m, &order, (sim_fault_t){SIM_FAULT_NONE, -1}, &resent,
                                        T0 + 3000, again, SIM_MAX_REPLIES);
    ck_assert_str_eq(again[n_again - 1].type, "OrderDelivered");
    ck_assert_str_eq(again[n_again - 1].event_id, delivered_id);
    ck_assert_str_ne(again[n_again - 2].event_id, out[n - 2].event_id);

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

    /* The late zombie claims and goes quiet as the zombie does; after the
     * hand-off the new worker claims and answers with token 4 first, and
     * only then does the old worker's answer with token 3 come, once the
     * step has been left; the carrier's delivery follows. */
    sim_fault_t late = {SIM_FAULT_LATE_ZOMBIE, ship};
    c.attempt = 0;
    c.token = 3;
    n = sim_active_respond(&o, &m, &order, late, &c, T0, out, SIM_MAX_REPLIES);
    ck_assert_uint_eq(n, 2);
    expect_lease_work(out, 0, 2, "picker-9-0", 3, lease);
    c.attempt = 1;
    c.token = 4;
    n = sim_active_respond(&o, &m, &order, late, &c, T0 + 5000, out, SIM_MAX_REPLIES);
    ck_assert_uint_ge(n, 4);
    expect_lease_work(out, 0, n - 3, "picker-9-1", 4, lease);
    ck_assert_str_eq(out[n - 3].type, "ShipmentDispatched");
    ck_assert(!out[n - 3].stale);
    ck_assert_int_eq(out[n - 3].token, 4);
    ck_assert_str_eq(out[n - 2].type, "ShipmentDispatched");
    ck_assert(out[n - 2].stale);
    ck_assert_int_eq(out[n - 2].token, 3);
    ck_assert_str_eq(out[n - 2].topic, out[n - 3].topic);
    ck_assert(out[n - 2].emit_ms > out[n - 3].emit_ms);
    ck_assert_str_eq(out[n - 1].type, "OrderDelivered");
    for (size_t i = 1; i < n; i++)
        EXPECT(out[i].emit_ms >= out[i - 1].emit_ms);
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

Suite *sim_active_suite(void)
{
    Suite *s = suite_create("sim_active");
    TCase *tc = tcase_create("sim_active");
    tcase_add_test(tc, test_active_model);
    tcase_add_test(tc, test_active_faults);
    tcase_add_test(tc, test_active_expect);
    tcase_add_test(tc, test_active_respond);
    tcase_add_test(tc, test_active_lease);
    tcase_add_test(tc, test_active_ids);
    tcase_add_test(tc, test_active_rewrite);
    suite_add_tcase(s, tc);
    return s;
}
