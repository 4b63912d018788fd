/*
 * test_engine_upgrade - an upgrade of an instance to a newer version in the
 * pure engine (steward upgrade): which mappings are refused before anything
 * moves, the new deadline counted from when the attempt began (a re-send
 * included), what a deadline judged missed becomes, what is due at once
 * and what the next pass then does, leases, the step and vars kept, a
 * terminal target, and a promotion with and without its current command.
 *
 * Both versions are tests/data/definitions/valid/active_lease.json, the
 * newer one changed in place: reserving 10m (retry 2, backoff 1m),
 * picking 1h with a 10m lease, refunding 30m.
 */
#include "engine/engine.h"
#include "testlib.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIN (60 * 1000LL)
#define T0  1795000000000LL

static def_t *v1, *v2;
static engine_instance_t inst;
static json_t *payload;

static void setup(void)
{
    v1 = tl_def_load("tests/data/definitions/valid/active_lease.json");
    v2 = tl_def_load("tests/data/definitions/valid/active_lease.json");
    v2->version = 2;
    engine_instance_init(&inst);
    payload = json_loads("{\"order_id\":\"O1\",\"total\":42.5}", 0, NULL);
}

static void teardown(void)
{
    engine_instance_clear(&inst);
    json_decref(payload);
    def_free(v1);
    def_free(v2);
}

static long state_of(const def_t *def, const char *name)
{
    long s = def_find_state(def, name);
    ck_assert_msg(s >= 0, "no state %s", name);
    return s;
}

static void set_deadline(def_t *def, const char *state, int64_t ms)
{
    def->states[state_of(def, state)].deadline_ms = ms;
}

/* Starts O1 on v1 at T0 (in reserving, step 1). */
static void start(void)
{
    engine_event_t ev = {def_find_event(v1, "OrderPlaced"), "e1", T0, payload, 0};
    engine_result_t r = engine_apply(v1, &inst, &ev, false);
    ck_assert_int_eq(r.outcome, ENGINE_STARTED);
}

static engine_upgrade_t upgrade(const char *to_state, bool send_current, int64_t at_ms)
{
    engine_upgrade_t up;
    ck_assert_msg(engine_operator_upgrade(v1, v2, &inst, state_of(v2, to_state), send_current,
                                          at_ms, at_ms, &up),
                  "upgrade: %s", up.detail);
    return up;
}

START_TEST(targets_are_checked_before_anything_moves)
{
    long targets[16];
    char why[512];
    ck_assert(engine_upgrade_targets(v1, v2, NULL, NULL, targets, why, sizeof why));
    ck_assert_int_eq(targets[state_of(v1, "picking")], state_of(v2, "picking"));
    ck_assert_int_eq(targets[state_of(v1, "done")], -1); /* terminal: nobody is in it */

    /* A state the newer version lacks: refused, naming it and the fix. */
    long picking = state_of(v2, "picking");
    free(v2->states[picking].name);
    v2->states[picking].name = strdup("packing");
    ck_assert(!engine_upgrade_targets(v1, v2, NULL, NULL, targets, why, sizeof why));
    ck_assert_msg(strstr(why, "no state picking") && strstr(why, "--map picking=STATE"), "%s", why);

    /* Mapped, it goes where the map says; left out by `only`, it needs none. */
    const char *from[] = {"picking"}, *to[] = {"packing"};
    engine_upgrade_map_t map = {from, to, 1, false};
    ck_assert(engine_upgrade_targets(v1, v2, &map, NULL, targets, why, sizeof why));
    ck_assert_int_eq(targets[state_of(v1, "picking")], state_of(v2, "packing"));
    bool only[16] = {false};
    only[state_of(v1, "reserving")] = true;
    ck_assert(engine_upgrade_targets(v1, v2, NULL, only, targets, why, sizeof why));
    ck_assert_int_eq(targets[state_of(v1, "picking")], -1);

    /* A map into a state the newer version lacks, or into a terminal one. */
    const char *nowhere[] = {"nowhere"};
    map.to = nowhere;
    ck_assert(!engine_upgrade_targets(v1, v2, &map, NULL, targets, why, sizeof why));
    ck_assert_msg(strstr(why, "--map picking=nowhere"), "%s", why);
    const char *done[] = {"done"};
    map.to = done;
    ck_assert(!engine_upgrade_targets(v1, v2, &map, NULL, targets, why, sizeof why));
    ck_assert_msg(strstr(why, "terminal") && strstr(why, "--allow-terminal"), "%s", why);
    map.allow_terminal = true;
    ck_assert(engine_upgrade_targets(v1, v2, &map, NULL, targets, why, sizeof why));
    ck_assert_int_eq(targets[state_of(v1, "picking")], state_of(v2, "done"));
}
END_TEST

START_TEST(a_deadline_fixed_in_the_newer_version_resolves_its_alert)
{
    start();
    json_object_set_new(inst.vars, "extra", json_string("kept"));
    v1->mode = v2->mode = DEF_MODE_SHADOW;
    inst.token = 0;
    engine_due_t d = engine_judge_due(v1, &inst, T0 + 11 * MIN, 0, T0 + 11 * MIN);
    ck_assert_int_eq(d.actions[0].kind, ENGINE_DUE_DEADLINE);
    ck_assert(inst.overdue);

    set_deadline(v2, "reserving", 60 * MIN);
    engine_upgrade_t up = upgrade("reserving", false, T0 + 12 * MIN);
    ck_assert_int_eq(up.deadline_before_ms, T0 + 10 * MIN);
    ck_assert_int_eq(up.deadline_after_ms, T0 + 60 * MIN); /* from the entry */
    ck_assert(up.resolve_deadline && !up.resolve_all && !up.due && !up.promoted);
    ck_assert_str_eq(up.status, "active");
    ck_assert(!inst.overdue);
    ck_assert_int_eq(inst.version, 2);
    ck_assert_int_eq(inst.step, 1);
    ck_assert_int_eq(inst.state_entered_ms, T0);
    ck_assert_str_eq(json_string_value(json_object_get(inst.vars, "extra")), "kept");
    ck_assert_int_eq(engine_next_deadline(v2, &inst), T0 + 60 * MIN);
    ck_assert_msg(strstr(up.detail, "from version 1 (reserving) to version 2 (reserving)") &&
                      strstr(up.detail, "deadline 10m -> 1h"),
                  "%s", up.detail);
}
END_TEST

START_TEST(a_shortened_deadline_already_passed_is_due_at_once)
{
    start();
    v1->mode = v2->mode = DEF_MODE_SHADOW;
    inst.token = 0;
    set_deadline(v2, "reserving", 2 * MIN);
    engine_upgrade_t up = upgrade("reserving", false, T0 + 5 * MIN);
    ck_assert_int_eq(up.deadline_after_ms, T0 + 2 * MIN);
    ck_assert(up.due && !up.resolve_deadline);
    ck_assert_int_eq(up.due_kind, ENGINE_DUE_DEADLINE); /* shadow: a page */
    ck_assert_int_eq(up.due_ms, T0 + 2 * MIN);
    ck_assert(!inst.overdue); /* judged by the scheduler's pass, not here */

    /* Not yet passed at the watermark: not due, whatever the clock says. */
    engine_instance_clear(&inst);
    start();
    inst.token = 0;
    ck_assert(engine_operator_upgrade(v1, v2, &inst, state_of(v2, "reserving"), false, T0 + MIN,
                                      T0 + 5 * MIN, &up));
    ck_assert(!up.due);

    /* A missed deadline that stays missed under the newer figure stays
     * judged: its alert open, nobody paged again. */
    engine_instance_clear(&inst);
    start();
    inst.token = 0;
    engine_judge_due(v1, &inst, T0 + 11 * MIN, 0, T0 + 11 * MIN);
    up = upgrade("reserving", false, T0 + 12 * MIN);
    ck_assert(inst.overdue && !up.resolve_deadline && !up.due);
}
END_TEST

START_TEST(an_active_step_counts_from_its_last_send)
{
    start();
    /* Missed at T0+10m: the backoff of 1m, then attempt 1 at T0+11m with a
     * deadline at T0+21m. */
    engine_judge_due(v1, &inst, T0 + 10 * MIN, 0, T0 + 10 * MIN);
    ck_assert(inst.resend_pending);
    engine_due_t d = engine_judge_due(v1, &inst, T0 + 11 * MIN, 0, T0 + 11 * MIN);
    ck_assert_int_eq(d.actions[0].kind, ENGINE_DUE_RESEND);
    ck_assert_int_eq(inst.deadline_ms, T0 + 21 * MIN);
    int64_t token = inst.token;

    set_deadline(v2, "reserving", 30 * MIN);
    engine_upgrade_t up = upgrade("reserving", false, T0 + 12 * MIN);
    ck_assert_int_eq(up.deadline_after_ms, T0 + 41 * MIN);
    ck_assert_int_eq(inst.attempt, 1);
    ck_assert_int_eq(inst.token, token);
    ck_assert(!up.command.send && !up.cancel_unsent && !up.due);

    /* Waiting out a backoff: the wait is over, and a deadline still
     * passed under the newer figure is judged again at once (a re-send
     * after its backoff). */
    engine_instance_clear(&inst);
    start();
    engine_judge_due(v1, &inst, T0 + 10 * MIN, 0, T0 + 10 * MIN);
    ck_assert(inst.resend_pending);
    set_deadline(v2, "reserving", 5 * MIN);
    up = upgrade("reserving", false, T0 + 10 * MIN + 1000);
    ck_assert(!inst.resend_pending);
    ck_assert_int_eq(up.deadline_after_ms, T0 + 5 * MIN);
    ck_assert(up.due);
    ck_assert_int_eq(up.due_kind, ENGINE_DUE_RESEND);
}
END_TEST

/* O1 in picking since T0+1m, claimed by picker-7 at T0+2m (until T0+12m). */
static void claimed_in_picking(json_t *claim)
{
    start();
    engine_event_t ev = {def_find_event(v1, "StockReserved"), "e2", T0 + MIN, payload, 0};
    engine_apply(v1, &inst, &ev, false);
    engine_event_t c = {def_find_event(v1, "PickStarted"), "e3", T0 + 2 * MIN, claim, 0};
    ck_assert_int_eq(engine_apply(v1, &inst, &c, false).outcome, ENGINE_CLAIMED);
    ck_assert_int_eq(inst.lease_expires_ms, T0 + 12 * MIN);
}

START_TEST(a_lease_runs_on_where_the_newer_state_declares_one)
{
    json_t *claim = json_loads("{\"order_id\":\"O1\",\"worker_id\":\"picker-7\"}", 0, NULL);
    claimed_in_picking(claim);
    long picking = state_of(v2, "picking");
    v2->states[picking].lease->duration_ms = 20 * MIN;
    upgrade("picking", false, T0 + 3 * MIN);
    ck_assert_str_eq(inst.lease_holder, "picker-7");
    ck_assert_int_eq(inst.lease_expires_ms, T0 + 22 * MIN);

    /* Capped by the state's deadline, as a renewal is. */
    engine_instance_clear(&inst);
    claimed_in_picking(claim);
    set_deadline(v2, "picking", 15 * MIN);
    upgrade("picking", false, T0 + 3 * MIN);
    ck_assert_int_eq(inst.lease_expires_ms, T0 + 16 * MIN);

    /* A state without a lease: it is over. */
    engine_instance_clear(&inst);
    claimed_in_picking(claim);
    def_lease_t *lease = v2->states[picking].lease;
    v2->states[picking].lease = NULL;
    upgrade("picking", false, T0 + 3 * MIN);
    v2->states[picking].lease = lease;
    ck_assert_ptr_null(inst.lease_holder);
    ck_assert_int_eq(inst.lease_expires_ms, ENGINE_NO_DEADLINE);
    json_decref(claim);
}
END_TEST

START_TEST(a_terminal_target_finishes_the_instance)
{
    start();
    engine_upgrade_t up = upgrade("cancelled", false, T0 + 5 * MIN);
    ck_assert_str_eq(up.status, "cancelled");
    ck_assert(up.resolve_all && up.cancel_unsent && !up.due && !up.command.send);
    ck_assert_int_eq(inst.step, 2);
    ck_assert_int_eq(inst.token, 2); /* an active entry: the closed step's reply is stale */
    ck_assert_int_eq(inst.deadline_ms, ENGINE_NO_DEADLINE);
    ck_assert_int_eq(engine_next_deadline(v2, &inst), ENGINE_NO_DEADLINE);
    ck_assert_msg(strstr(up.detail, "finished as cancelled"), "%s", up.detail);
}
END_TEST

START_TEST(a_promotion_sends_the_current_command_only_when_asked)
{
    v1->mode = DEF_MODE_SHADOW;
    start();
    ck_assert_int_eq(inst.token, 0);
    engine_upgrade_t up = upgrade("reserving", false, T0 + 5 * MIN);
    ck_assert(up.promoted && !up.command.send && !up.cancel_unsent);
    ck_assert_int_eq(inst.token, 0);
    ck_assert_int_eq(up.deadline_after_ms, T0 + 10 * MIN);
    ck_assert_msg(strstr(up.detail, "nothing sent now"), "%s", up.detail);
    /* The next state entered sends its own, with the next token. */
    engine_event_t ev = {def_find_event(v2, "StockReserved"), "e2", T0 + 6 * MIN, payload, 0};
    engine_result_t r = engine_apply(v2, &inst, &ev, false);
    ck_assert(r.command.send);
    ck_assert_int_eq(r.command.token, 1);
    ck_assert_int_eq(r.command.step, 2);

    engine_instance_clear(&inst);
    start();
    up = upgrade("reserving", true, T0 + 5 * MIN);
    ck_assert(up.promoted && up.command.send);
    ck_assert_int_eq(up.command.step, 1);
    ck_assert_int_eq(up.command.attempt, 0);
    ck_assert_int_eq(up.command.token, 1);
    ck_assert_int_eq(inst.token, 1);
    ck_assert_int_eq(up.deadline_after_ms, T0 + 15 * MIN); /* from the send */

    /* Back to shadow: what is unsent is cancelled, and nothing is sent. */
    def_t *v3 = tl_def_load("tests/data/definitions/valid/active_lease.json");
    v3->version = 3;
    v3->mode = DEF_MODE_SHADOW;
    ck_assert(engine_operator_upgrade(v2, v3, &inst, state_of(v3, "reserving"), true, T0 + 6 * MIN,
                                      T0 + 6 * MIN, &up));
    ck_assert(up.cancel_unsent && !up.promoted && !up.command.send);
    def_free(v3);
}
END_TEST

START_TEST(refused_when_finished_or_not_newer)
{
    engine_upgrade_t up;
    ck_assert(!engine_operator_upgrade(v1, v2, &inst, 0, false, T0, T0, &up));
    ck_assert_msg(strstr(up.detail, "does not exist"), "%s", up.detail);
    start();
    ck_assert(!engine_operator_upgrade(v2, v1, &inst, 0, false, T0, T0, &up));
    ck_assert_msg(strstr(up.detail, "not newer"), "%s", up.detail);
    ck_assert_int_eq(inst.version, 1);
    engine_event_t ev = {def_find_event(v1, "StockUnavailable"), "e2", T0 + MIN, payload, 0};
    engine_apply(v1, &inst, &ev, false);
    ev = (engine_event_t){def_find_event(v1, "Refunded"), "e3", T0 + 2 * MIN, payload, 0};
    engine_apply(v1, &inst, &ev, false);
    ck_assert(!engine_operator_upgrade(v1, v2, &inst, 0, false, T0, T0, &up));
    ck_assert_msg(strstr(up.detail, "already finished"), "%s", up.detail);
}
END_TEST

Suite *engine_upgrade_suite(void);
Suite *engine_upgrade_suite(void)
{
    Suite *s = suite_create("engine_upgrade");
    TCase *tc = tcase_create("engine_upgrade");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, targets_are_checked_before_anything_moves);
    tcase_add_test(tc, a_deadline_fixed_in_the_newer_version_resolves_its_alert);
    tcase_add_test(tc, a_shortened_deadline_already_passed_is_due_at_once);
    tcase_add_test(tc, an_active_step_counts_from_its_last_send);
    tcase_add_test(tc, a_lease_runs_on_where_the_newer_state_declares_one);
    tcase_add_test(tc, a_terminal_target_finishes_the_instance);
    tcase_add_test(tc, a_promotion_sends_the_current_command_only_when_asked);
    tcase_add_test(tc, refused_when_finished_or_not_newer);
    suite_add_tcase(s, tc);
    return s;
}
