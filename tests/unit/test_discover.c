/*
 * test_discover - the analysis behind `steward discover`: from a list of
 * events to the key, the directly-follows graph, the step latencies and a
 * draft the validator accepts.
 */
#include "definitions/def.h"
#include "shadow/discover.h"
#include "testlib.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_EVENTS 512

typedef struct fixture {
    discover_event_t ev[MAX_EVENTS];
    json_t *payloads[MAX_EVENTS];
    char ids[MAX_EVENTS][32];
    size_t n;
} fixture_t;

static void add(fixture_t *f, const char *type, const char *topic, int64_t t, json_t *payload)
{
    ck_assert_uint_lt(f->n, MAX_EVENTS);
    snprintf(f->ids[f->n], sizeof f->ids[f->n], "e%zu", f->n);
    json_object_set_new(payload, "type", json_string(type));
    json_object_set_new(payload, "id", json_string(f->ids[f->n]));
    f->payloads[f->n] = payload;
    f->ev[f->n] = (discover_event_t){type, topic, t, f->ids[f->n], payload, NULL};
    f->n++;
}

static void fixture_free(fixture_t *f)
{
    for (size_t i = 0; i < f->n; i++)
        json_decref(f->payloads[i]);
}

/* 40 orders: most placed, paid, shipped; every fifth declined. Each
 * order's events carry order_id; payments also carry a payment_id that
 * joins nothing, and every event a customer id that joins some. */
static void orders(fixture_t *f, bool integer_keys)
{
    for (int i = 0; i < 40; i++) {
        int64_t t0 = 1000000 + i * 10000;
        json_t *key = integer_keys ? json_integer(7000 + i) : json_sprintf("ord-%d", i);
        add(f, "OrderPlaced", "orders", t0,
            json_pack("{s:O, s:s}", "order_id", key, "customer", "c1"));
        if (i % 5 == 4) {
            add(f, "PaymentDeclined", "payments", t0 + 100 + i,
                json_pack("{s:O, s:s}", "order_id", key, "payment_id", "p"));
        } else {
            /* step latency after OrderPlaced: 100 + i ms */
            add(f, "PaymentCaptured", "payments", t0 + 100 + i,
                json_pack("{s:O, s:s}", "order_id", key, "payment_id", "p"));
            add(f, "ShipmentDispatched", "shipping", t0 + 5000,
                json_pack("{s:O}", "order_id", key));
        }
        json_decref(key);
    }
}

static json_t *analyse(fixture_t *f)
{
    discover_options_t opts = {.process = "orders_seen", .source = "orders,payments"};
    json_t *report = NULL;
    char errstr[512];
    err_class_t rc = discover_analyse(f->ev, f->n, &opts, &report, errstr, sizeof errstr);
    ck_assert_msg(rc == ERR_OK, "discover failed: %s", errstr);
    return report;
}

static const char *transition(const json_t *draft, const char *state, const char *event)
{
    const json_t *st = json_object_get(json_object_get(draft, "states"), state);
    return json_string_value(json_object_get(json_object_get(st, "on"), event));
}

START_TEST(recovers_key_start_and_transitions)
{
    fixture_t f = {0};
    orders(&f, false);
    json_t *report = analyse(&f);
    const json_t *draft = json_object_get(report, "draft");

    ck_assert_str_eq(json_string_value(json_object_get(report, "key")), "/order_id");
    /* the type and the id are in every event but are never the key */
    const json_t *best = json_array_get(json_object_get(report, "keys"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(best, "pointer")), "/order_id");
    ck_assert_int_eq(json_integer_value(json_object_get(best, "joining")), 40);
    ck_assert(json_real_value(json_object_get(best, "share")) == 1.0);

    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(draft, "start"), "on")),
                     "OrderPlaced");
    ck_assert_str_eq(transition(draft, "order_placed", "PaymentCaptured"), "payment_captured");
    ck_assert_str_eq(transition(draft, "order_placed", "PaymentDeclined"), "payment_declined");
    ck_assert_str_eq(transition(draft, "payment_captured", "ShipmentDispatched"),
                     "shipment_dispatched");
    const json_t *states = json_object_get(draft, "states");
    ck_assert_uint_eq(json_object_size(states), 4);
    ck_assert_ptr_nonnull(json_object_get(json_object_get(states, "payment_declined"), "terminal"));
    ck_assert_ptr_nonnull(
        json_object_get(json_object_get(states, "shipment_dispatched"), "terminal"));
    ck_assert_str_eq(
        json_string_value(json_object_get(
            json_object_get(json_object_get(draft, "events"), "PaymentCaptured"), "topic")),
        "payments");

    /* the graph, most travelled edge first */
    const json_t *edge = json_array_get(json_object_get(report, "graph"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(edge, "from")), "OrderPlaced");
    ck_assert_str_eq(json_string_value(json_object_get(edge, "to")), "PaymentCaptured");
    ck_assert_int_eq(json_integer_value(json_object_get(edge, "count")), 32);
    json_decref(report);
    fixture_free(&f);
}
END_TEST

START_TEST(draft_passes_the_validator_and_is_marked)
{
    fixture_t f = {0};
    orders(&f, false);
    json_t *report = analyse(&f);
    char *text = json_dumps(json_object_get(report, "draft"), JSON_INDENT(2));
    def_problems_t problems = {0};
    def_t *def = def_load_json(text, strlen(text), "draft.json", &problems);
    ck_assert_msg(def != NULL, "draft refused: %s: %s\n%s",
                  problems.n ? problems.items[0].pointer : "",
                  problems.n ? problems.items[0].message : "", text);
    const char *desc =
        json_string_value(json_object_get(json_object_get(report, "draft"), "description"));
    ck_assert_msg(strncmp(desc, DISCOVER_DRAFT_MARKER " ", strlen(DISCOVER_DRAFT_MARKER) + 1) == 0,
                  "%s", desc);
    ck_assert_msg(tl_contains(desc, "unassigned"), "the owner is not named undecided: %s", desc);
    ck_assert_uint_gt(json_array_size(json_object_get(report, "undecided")), 0);
    def_free(def);
    def_problems_clear(&problems);
    free(text);
    json_decref(report);
    fixture_free(&f);
}
END_TEST

START_TEST(step_latencies_and_suggested_deadline)
{
    fixture_t f = {0};
    orders(&f, false);
    json_t *report = analyse(&f);
    const json_t *steps = json_object_get(report, "steps"), *placed = NULL, *captured = NULL;
    size_t i;
    json_t *s;
    json_array_foreach(steps, i, s)
    {
        if (strcmp(json_string_value(json_object_get(s, "state")), "order_placed") == 0)
            placed = s;
        if (strcmp(json_string_value(json_object_get(s, "state")), "payment_captured") == 0)
            captured = s;
    }
    ck_assert_ptr_nonnull(placed);
    /* 40 exits at 100 + i ms, i = 0..39: p50 the 20th, p99 the 40th */
    ck_assert_int_eq(json_integer_value(json_object_get(placed, "samples")), 40);
    ck_assert_int_eq(json_integer_value(json_object_get(placed, "p50_ms")), 119);
    ck_assert_int_eq(json_integer_value(json_object_get(placed, "p99_ms")), 139);
    ck_assert_int_eq(json_integer_value(json_object_get(placed, "max_ms")), 139);
    /* the report's rule: p99 * 1.5 = 208.5 -> the 500ms step */
    ck_assert_int_eq(json_integer_value(json_object_get(placed, "suggested_ms")), 500);
    ck_assert_str_eq(json_string_value(json_object_get(placed, "deadline")), "500ms");
    const json_t *state = json_object_get(
        json_object_get(json_object_get(report, "draft"), "states"), "order_placed");
    ck_assert_str_eq(json_string_value(json_object_get(state, "deadline")), "500ms");
    /* 32 exits from payment_captured, each 5000 - 100 - i ms: enough */
    ck_assert_ptr_nonnull(captured);
    ck_assert_int_eq(json_integer_value(json_object_get(captured, "samples")), 32);
    ck_assert_int_eq(json_integer_value(json_object_get(captured, "max_ms")), 4900);
    json_decref(report);
    fixture_free(&f);
}
END_TEST

START_TEST(too_few_exits_get_a_fallback_deadline_and_a_note)
{
    fixture_t f = {0};
    for (int i = 0; i < 3; i++) {
        json_t *k = json_sprintf("k%d", i);
        add(&f, "Opened", "a", 1000 + i * 100, json_pack("{s:O}", "case", k));
        add(&f, "Closed", "b", 1000 + i * 100 + 40 * (i + 1), json_pack("{s:O}", "case", k));
        json_decref(k);
    }
    json_t *report = analyse(&f);
    const json_t *step = json_array_get(json_object_get(report, "steps"), 0);
    ck_assert(json_is_null(json_object_get(step, "suggested_ms")));
    /* max 120ms * 1.5 = 180 -> 200ms */
    ck_assert_str_eq(json_string_value(json_object_get(step, "deadline")), "200ms");
    const char *desc =
        json_string_value(json_object_get(json_object_get(report, "draft"), "description"));
    ck_assert_msg(tl_contains(desc, "opened: left only 3 times"), "%s", desc);
    json_decref(report);
    fixture_free(&f);
}
END_TEST

START_TEST(integer_keys_join_as_decimal_text)
{
    fixture_t f = {0};
    orders(&f, true);
    json_t *report = analyse(&f);
    ck_assert_str_eq(json_string_value(json_object_get(report, "key")), "/order_id");
    ck_assert_int_eq(json_integer_value(json_object_get(report, "traces")), 40);
    json_decref(report);
    fixture_free(&f);
}
END_TEST

START_TEST(repeats_of_an_id_and_late_arrivals_are_ordered_by_time)
{
    fixture_t f = {0};
    orders(&f, false);
    /* A duplicate of the first order's OrderPlaced (same id), sent last,
     * and the events listed out of time order do not change the graph. */
    json_t *dup = json_pack("{s:s, s:s}", "order_id", "ord-0", "customer", "c1");
    add(&f, "OrderPlaced", "orders", 1000000 + 3000, dup);
    snprintf(f.ids[f.n - 1], sizeof f.ids[0], "e0");
    json_object_set_new(dup, "id", json_string("e0"));
    for (size_t i = 0; i + 1 < f.n; i += 2) {
        discover_event_t t = f.ev[i];
        f.ev[i] = f.ev[i + 1];
        f.ev[i + 1] = t;
    }
    json_t *report = analyse(&f);
    ck_assert_int_eq(json_integer_value(json_object_get(report, "repeats_dropped")), 1);
    const json_t *edge = json_array_get(json_object_get(report, "graph"), 0);
    ck_assert_int_eq(json_integer_value(json_object_get(edge, "count")), 32);
    ck_assert_uint_eq(json_array_size(json_object_get(report, "graph")), 3);
    json_decref(report);
    fixture_free(&f);
}
END_TEST

START_TEST(nothing_correlated_is_refused_with_a_reason)
{
    fixture_t f = {0};
    for (int i = 0; i < 10; i++) {
        add(&f, "A", "a", i, json_pack("{s:i}", "x", i));
        add(&f, "B", "b", i, json_pack("{s:i}", "y", i));
    }
    json_t *report = NULL;
    char errstr[512];
    discover_options_t opts = {0};
    ck_assert_int_eq(discover_analyse(f.ev, f.n, &opts, &report, errstr, sizeof errstr),
                     ERR_INVALID);
    ck_assert_ptr_null(report);
    ck_assert_msg(tl_contains(errstr, "no field carries the same value"), "%s", errstr);
    ck_assert_int_eq(discover_analyse(f.ev, 0, &opts, &report, errstr, sizeof errstr), ERR_INVALID);
    fixture_free(&f);
}
END_TEST

/* The draft loads; its problems otherwise fail the test. */
static void expect_loads(const json_t *report)
{
    char *text = json_dumps(json_object_get(report, "draft"), JSON_INDENT(2));
    def_problems_t problems = {0};
    def_t *def = def_load_json(text, strlen(text), "draft.json", &problems);
    ck_assert_msg(def != NULL, "draft refused: %s: %s\n%s",
                  problems.n ? problems.items[0].pointer : "",
                  problems.n ? problems.items[0].message : "", text);
    def_free(def);
    def_problems_clear(&problems);
    free(text);
}

static bool undecided_says(const json_t *report, const char *words)
{
    size_t i;
    json_t *u;
    json_array_foreach(json_object_get(report, "undecided"), i, u)
    {
        if (tl_contains(json_string_value(u), words))
            return true;
    }
    return false;
}

/*
 * Claims as four teams publish them: the claim id in the Kafka message
 * key (no payload field on payments), an occurredAt in every event whose
 * values sometimes coincide across types, and an unrelated type on the
 * payments topic (PremiumCollected, keyed by its policy). The key is the
 * field that joins types, not the one in every event; the unrelated type
 * is set aside.
 */
static void claims(fixture_t *f, char keys[][16])
{
    for (int i = 0; i < 30; i++) {
        snprintf(keys[i], 16, "C-%d", i);
        int64_t t0 = 5000000 + i * 100000;
        char at[32];
        snprintf(at, sizeof at, "2026-11-29T10:%02d:00Z", i % 3); /* joins a few */
        add(f, "ClaimFiled", "claims", t0,
            json_pack("{s:s, s:s}", "claimId", keys[i], "occurredAt", at));
        f->ev[f->n - 1].message_key = keys[i];
        add(f, "ClaimAssessed", "assessments", t0 + 1000,
            json_pack("{s:s, s:s}", "claimId", keys[i], "occurredAt", at));
        f->ev[f->n - 1].message_key = keys[i];
        add(f, "ClaimPaid", "payments", t0 + 2000, json_pack("{s:s}", "occurredAt", at));
        f->ev[f->n - 1].message_key = keys[i];
        char policy[16];
        snprintf(policy, sizeof policy, "P-%d", i);
        add(f, "PremiumCollected", "payments", t0 + 500,
            json_pack("{s:s, s:s}", "policyId", policy, "occurredAt", at));
    }
}

START_TEST(the_message_key_joins_and_unrelated_types_are_set_aside)
{
    fixture_t f = {0};
    char keys[30][16];
    claims(&f, keys);
    json_t *report = analyse(&f);
    const json_t *draft = json_object_get(report, "draft");
    /* the message key joins filed, assessed and paid: 2 joins per claim */
    const json_t *key = json_object_get(report, "key");
    ck_assert_msg(json_is_object(key), "key: %s", json_dumps(key, JSON_ENCODE_ANY));
    ck_assert_str_eq(json_string_value(json_object_get(key, "from")), "message_key");
    const json_t *best = json_array_get(json_object_get(report, "keys"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(best, "from")), "message_key");
    ck_assert_ptr_null(json_object_get(best, "pointer"));
    ck_assert_int_eq(json_integer_value(json_object_get(best, "joins")), 60);
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(draft, "key"), "from")),
                     "message_key");
    /* PremiumCollected shares no claim: set aside, noted, not drafted */
    ck_assert_ptr_null(json_object_get(json_object_get(draft, "events"), "PremiumCollected"));
    ck_assert(undecided_says(report, "PremiumCollected (30 events) shares no value"));
    ck_assert_str_eq(transition(draft, "claim_filed", "ClaimAssessed"), "claim_assessed");
    ck_assert_str_eq(transition(draft, "claim_assessed", "ClaimPaid"), "claim_paid");
    expect_loads(report);
    json_decref(report);
    fixture_free(&f);
}
END_TEST

START_TEST(a_field_that_joins_types_outranks_one_in_every_event)
{
    fixture_t f = {0};
    char keys[30][16];
    claims(&f, keys);
    for (size_t i = 0; i < f.n; i++)
        f.ev[i].message_key = NULL; /* now only the payload says */
    json_t *report = analyse(&f);
    const json_t *draft = json_object_get(report, "draft");
    /* /occurredAt is in every event and joins a few; /claimId joins
     * filed and assessed of every claim */
    ck_assert_str_eq(json_string_value(json_object_get(report, "key")), "/claimId");
    const json_t *keys_j = json_object_get(report, "keys");
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(keys_j, 0), "pointer")),
                     "/claimId");
    ck_assert_str_eq(transition(draft, "claim_filed", "ClaimAssessed"), "claim_assessed");
    /* ClaimPaid carries no claim id: never in a trace, so not drafted */
    ck_assert_ptr_null(json_object_get(json_object_get(draft, "events"), "ClaimPaid"));
    expect_loads(report);
    json_decref(report);
    fixture_free(&f);
}
END_TEST

START_TEST(a_type_that_carries_the_key_elsewhere_gets_its_own_key)
{
    fixture_t f = {0};
    char keys[30][16];
    claims(&f, keys);
    /* Only payments are keyed by the message key: the payload's claimId
     * keys the others. */
    for (size_t i = 0; i < f.n; i++) {
        if (strcmp(f.ev[i].type, "ClaimPaid") != 0)
            f.ev[i].message_key = NULL;
    }
    json_t *report = analyse(&f);
    const json_t *draft = json_object_get(report, "draft");
    ck_assert_str_eq(json_string_value(json_object_get(draft, "key")), "/claimId");
    const json_t *paid = json_object_get(json_object_get(draft, "events"), "ClaimPaid");
    ck_assert_ptr_nonnull(paid);
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(paid, "key"), "from")),
                     "message_key");
    ck_assert_str_eq(transition(draft, "claim_assessed", "ClaimPaid"), "claim_paid");
    ck_assert(undecided_says(report, "ClaimPaid: 30 of its 30 events carry the key as the Kafka "
                                     "message key"));
    expect_loads(report);
    json_decref(report);
    fixture_free(&f);
}
END_TEST

START_TEST(the_options_name_the_key_and_the_envelope)
{
    fixture_t f = {0};
    orders(&f, false);
    json_t *envelope = json_pack("{s:s, s:{s:s, s:s}}", "id", "/eventId", "time", "pointer", "/at",
                                 "format", "rfc3339");
    discover_options_t opts = {
        .process = "orders_seen", .key = "/customer", .envelope = envelope, .kafka_time = true};
    json_t *report = NULL;
    char errstr[512];
    ck_assert_int_eq(discover_analyse(f.ev, f.n, &opts, &report, errstr, sizeof errstr),
                     ERR_INVALID); /* the customer is on OrderPlaced only: nothing follows */
    opts.key = "/nowhere";
    ck_assert_int_eq(discover_analyse(f.ev, f.n, &opts, &report, errstr, sizeof errstr),
                     ERR_INVALID);
    ck_assert_msg(tl_contains(errstr, "no event carries the key /nowhere"), "%s", errstr);
    opts.key = "/order_id";
    ck_assert_int_eq(discover_analyse(f.ev, f.n, &opts, &report, errstr, sizeof errstr), ERR_OK);
    const json_t *draft = json_object_get(report, "draft");
    ck_assert_str_eq(json_string_value(json_object_get(draft, "key")), "/order_id");
    ck_assert(json_equal(json_object_get(draft, "envelope"), envelope));
    ck_assert(undecided_says(report, "by their Kafka timestamps"));
    expect_loads(report);
    json_decref(report);
    json_decref(envelope);
    fixture_free(&f);
}
END_TEST

START_TEST(state_names_are_valid_names)
{
    char buf[64];
    ck_assert_str_eq(discover_state_name("OrderPlaced", buf, sizeof buf), "order_placed");
    ck_assert_str_eq(discover_state_name("com.example.order.placed", buf, sizeof buf),
                     "com_example_order_placed");
    ck_assert_str_eq(discover_state_name("order-placed", buf, sizeof buf), "order_placed");
    ck_assert_str_eq(discover_state_name("2fa_sent", buf, sizeof buf), "s_2fa_sent");
    ck_assert_str_eq(discover_state_name("Étape", buf, sizeof buf), "tape");
    ck_assert_str_eq(discover_state_name("!!!", buf, sizeof buf), "s");
    char longer[200];
    memset(longer, 'a', sizeof longer - 1);
    longer[sizeof longer - 1] = '\0';
    ck_assert_uint_eq(strlen(discover_state_name(longer, buf, sizeof buf)), 63);
}
END_TEST

START_TEST(percentile_is_percentile_disc)
{
    const int64_t v[] = {10, 20, 30, 40};
    ck_assert_int_eq(discover_percentile(v, 4, 0.5), 20);
    ck_assert_int_eq(discover_percentile(v, 4, 0.51), 30);
    ck_assert_int_eq(discover_percentile(v, 4, 0.99), 40);
    ck_assert_int_eq(discover_percentile(v, 4, 0), 10);
    ck_assert_int_eq(discover_percentile(v, 1, 0.99), 10);
}
END_TEST

Suite *discover_suite(void)
{
    Suite *s = suite_create("discover");
    TCase *tc = tcase_create("discover");
    tcase_add_test(tc, recovers_key_start_and_transitions);
    tcase_add_test(tc, draft_passes_the_validator_and_is_marked);
    tcase_add_test(tc, step_latencies_and_suggested_deadline);
    tcase_add_test(tc, too_few_exits_get_a_fallback_deadline_and_a_note);
    tcase_add_test(tc, integer_keys_join_as_decimal_text);
    tcase_add_test(tc, repeats_of_an_id_and_late_arrivals_are_ordered_by_time);
    tcase_add_test(tc, nothing_correlated_is_refused_with_a_reason);
    tcase_add_test(tc, the_message_key_joins_and_unrelated_types_are_set_aside);
    tcase_add_test(tc, a_field_that_joins_types_outranks_one_in_every_event);
    tcase_add_test(tc, a_type_that_carries_the_key_elsewhere_gets_its_own_key);
    tcase_add_test(tc, the_options_name_the_key_and_the_envelope);
    tcase_add_test(tc, state_names_are_valid_names);
    tcase_add_test(tc, percentile_is_percentile_disc);
    suite_add_tcase(s, tc);
    return s;
}
