/*
 * test_active_engine - the rules of active mode and leases in the pure
 * engine: the command on entering a state, re-sends with backoff, on_timeout
 * into compensation, attempts counted from the re-send, the page that says
 * what was tried (and what reached the broker), leases claimed, renewed,
 * expired and handed off within retry.max, fencing tokens (only the current
 * one; older stale, newer forged), and an operator's re-send and move.
 */
#include "common/sha256.h"
#include "formats/decode.h"
#include "engine/engine.h"
#include "manager/commands/cmdqueue.h"
#include "testlib.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIN (60 * 1000LL)
#define T0  1795000000000LL

static def_t *def;
static engine_instance_t inst;
static json_t *payloads[16];
static size_t n_payloads;

static void setup(void)
{
    def = tl_def_load("tests/data/definitions/valid/active_lease.json");
    engine_instance_init(&inst);
    n_payloads = 0;
}

static void teardown(void)
{
    engine_instance_clear(&inst);
    for (size_t i = 0; i < n_payloads; i++)
        json_decref(payloads[i]);
    def_free(def);
}

static engine_result_t apply_tok(const char *name, const char *id, int64_t time_ms,
                                 const char *json, int64_t token)
{
    long idx = def_find_event(def, name);
    ck_assert_msg(idx >= 0, "no event %s", name);
    json_t *data = json_loads(json, 0, NULL);
    ck_assert_ptr_nonnull(data);
    payloads[n_payloads++] = data;
    engine_event_t ev = {idx, id, time_ms, data, token};
    return engine_apply(def, &inst, &ev, false);
}

static engine_result_t apply(const char *name, const char *id, int64_t time_ms)
{
    return apply_tok(name, id, time_ms, "{\"order_id\":\"O1\",\"total\":42.5}", 0);
}

static const char *state_name(long state)
{
    return state >= 0 ? def->states[state].name : "(none)";
}

START_TEST(entering_a_state_with_a_command_sends_it)
{
    engine_result_t r = apply("OrderPlaced", "e1", T0);
    ck_assert_int_eq(r.outcome, ENGINE_STARTED);
    ck_assert(r.command.send);
    ck_assert_str_eq(state_name(r.command.state), "reserving");
    ck_assert_int_eq(r.command.step, 1);
    ck_assert_int_eq(r.command.attempt, 0);
    ck_assert_int_eq(r.command.token, 1);
    ck_assert_int_eq(inst.token, 1);

    r = apply("StockReserved", "e2", T0 + MIN);
    ck_assert_int_eq(r.outcome, ENGINE_ADVANCED);
    ck_assert(r.command.send);
    ck_assert_str_eq(state_name(r.command.state), "picking");
    ck_assert_int_eq(r.command.step, 2);
    ck_assert_int_eq(r.command.attempt, 0);
    ck_assert_int_eq(r.command.token, 2);
}
END_TEST

/* A shadow version (an instance started before promotion keeps it) sends
 * nothing and pages at the deadline, as shadow mode always has. */
START_TEST(shadow_version_sends_nothing_and_pages)
{
    def->mode = DEF_MODE_SHADOW;
    engine_result_t r = apply("OrderPlaced", "e1", T0);
    ck_assert(!r.command.send);
    ck_assert_int_eq(inst.token, 0);
    engine_due_t d = engine_judge_due(def, &inst, T0 + 10 * MIN, 0, T0 + 10 * MIN);
    ck_assert_uint_eq(d.n, 1);
    ck_assert_int_eq(d.actions[0].kind, ENGINE_DUE_DEADLINE);
    ck_assert_str_eq(d.actions[0].detail, "");
    ck_assert_str_eq(state_name(inst.state), "reserving");
    ck_assert(inst.overdue);
}
END_TEST

START_TEST(backoff_doubles_and_is_capped)
{
    long s = def_find_state(def, "reserving"); /* 1m, capped at 5m */
    ck_assert_int_eq(engine_retry_backoff(def, s, 1), 1 * MIN);
    ck_assert_int_eq(engine_retry_backoff(def, s, 2), 2 * MIN);
    ck_assert_int_eq(engine_retry_backoff(def, s, 3), 4 * MIN);
    ck_assert_int_eq(engine_retry_backoff(def, s, 4), 5 * MIN);
    ck_assert_int_eq(engine_retry_backoff(def, s, 40), 5 * MIN);
    ck_assert_int_eq(engine_retry_backoff(def, s, 0), 0);
    ck_assert_int_eq(engine_retry_backoff(def, def_find_state(def, "picking"), 1), 0);
    /* Without retry.max_backoff the doubling stops at the longest duration
     * a definition may state, however many attempts. */
    int64_t cap = def->states[s].retry_max_backoff_ms;
    def->states[s].retry_max_backoff_ms = 0;
    ck_assert_int_eq(engine_retry_backoff(def, s, 10), 512 * MIN);
    ck_assert_int_eq(engine_retry_backoff(def, s, 1000), DEF_MAX_DURATION_MS);
    ck_assert_int_eq(engine_retry_backoff(def, s, 2147483647), DEF_MAX_DURATION_MS);
    def->states[s].retry_max_backoff_ms = cap;
}
END_TEST

/* reserving: 10m, retry max 2 with backoff 1m: each missed deadline waits
 * the backoff, then re-sends; after the last attempt on_timeout enters
 * refunding, which sends its own command; refunding (no retry, no
 * on_timeout) then pages saying what was tried. */
START_TEST(retries_then_on_timeout_then_page)
{
    apply("OrderPlaced", "e1", T0);

    engine_due_t d = engine_judge_due(def, &inst, T0 + 10 * MIN - 1, 0, T0 + 10 * MIN - 1);
    ck_assert_uint_eq(d.n, 0); /* the watermark has not reached the deadline */

    /* The deadline passes: the re-send waits out the backoff (1m). */
    d = engine_judge_due(def, &inst, T0 + 10 * MIN, 0, T0 + 10 * MIN);
    ck_assert_uint_eq(d.n, 0);
    ck_assert(inst.resend_pending);
    ck_assert(!inst.overdue);
    ck_assert_int_eq(inst.deadline_ms, T0 + 11 * MIN);
    ck_assert_int_eq(d.next_ms, T0 + 11 * MIN);
    ck_assert_int_eq(inst.token, 1);

    d = engine_judge_due(def, &inst, T0 + 11 * MIN, 0, T0 + 11 * MIN);
    ck_assert_uint_eq(d.n, 1);
    ck_assert_int_eq(d.actions[0].kind, ENGINE_DUE_RESEND);
    ck_assert(d.actions[0].command.send);
    ck_assert_int_eq(d.actions[0].command.step, 1);
    ck_assert_int_eq(d.actions[0].command.attempt, 1);
    ck_assert_int_eq(d.actions[0].command.token, 2);
    ck_assert_int_eq(d.actions[0].deadline_ms, T0 + 10 * MIN);
    ck_assert(!inst.resend_pending);
    /* The new attempt has the whole deadline again, from its send. */
    ck_assert_int_eq(inst.deadline_ms, T0 + 21 * MIN);
    ck_assert_msg(strstr(d.actions[0].detail, "ReserveStock sent 1 time over 10m, no "
                                              "StockReserved or StockUnavailable; re-sent "
                                              "(attempt 1) after a backoff of 1m") != NULL,
                  "%s", d.actions[0].detail);

    /* Second: the backoff doubles (2m). */
    d = engine_judge_due(def, &inst, T0 + 21 * MIN, 0, T0 + 21 * MIN);
    ck_assert_uint_eq(d.n, 0);
    ck_assert_int_eq(inst.deadline_ms, T0 + 23 * MIN);
    d = engine_judge_due(def, &inst, T0 + 23 * MIN, 0, T0 + 23 * MIN);
    ck_assert_uint_eq(d.n, 1);
    ck_assert_int_eq(d.actions[0].kind, ENGINE_DUE_RESEND);
    ck_assert_int_eq(d.actions[0].command.attempt, 2);
    ck_assert_int_eq(d.actions[0].command.token, 3);
    ck_assert_int_eq(inst.deadline_ms, T0 + 33 * MIN);

    /* The last attempt's deadline: on_timeout, at once. */
    int64_t third = inst.deadline_ms;
    d = engine_judge_due(def, &inst, third, 0, third);
    ck_assert_uint_eq(d.n, 1);
    ck_assert_int_eq(d.actions[0].kind, ENGINE_DUE_TIMEOUT);
    ck_assert_str_eq(state_name(d.actions[0].from_state), "reserving");
    ck_assert_str_eq(state_name(d.actions[0].to_state), "refunding");
    ck_assert_msg(strstr(d.actions[0].detail,
                         "ReserveStock sent 3 times over 33m, no StockReserved or "
                         "StockUnavailable; took on_timeout") != NULL,
                  "%s", d.actions[0].detail);
    /* The compensation state's own command: a new step. */
    ck_assert(d.actions[0].command.send);
    ck_assert_str_eq(state_name(d.actions[0].command.state), "refunding");
    ck_assert_int_eq(d.actions[0].command.step, 2);
    ck_assert_int_eq(d.actions[0].command.attempt, 0);
    ck_assert_int_eq(d.actions[0].command.token, 4);
    ck_assert_str_eq(state_name(inst.state), "refunding");
    ck_assert_int_eq(inst.state_entered_ms, third);
    ck_assert_int_eq(inst.deadline_ms, third + 30 * MIN);

    /* The compensation state times out: the page, saying what was tried. */
    d = engine_judge_due(def, &inst, third + 30 * MIN, 0, third + 30 * MIN);
    ck_assert_uint_eq(d.n, 1);
    ck_assert_int_eq(d.actions[0].kind, ENGINE_DUE_DEADLINE);
    ck_assert(!d.actions[0].command.send);
    ck_assert_str_eq(d.actions[0].detail, "Refund sent 1 time over 30m, no Refunded");
    ck_assert(inst.overdue);
    engine_alert_text_t words = {0};
    json_t *details = engine_due_alert(def, "O1", &inst, &d.actions[0], &words);
    ck_assert_msg(
        strstr(words.summary, "Refund sent 1 time over 30m, no Refunded; owner payments") != NULL,
        "%s", words.summary);
    json_decref(details);
    engine_alert_text_clear(&words);
}
END_TEST

/* A reply during the backoff moves the instance: nothing is re-sent. */
START_TEST(reply_during_the_backoff_cancels_the_resend)
{
    apply("OrderPlaced", "e1", T0);
    engine_due_t d = engine_judge_due(def, &inst, T0 + 10 * MIN, 0, T0 + 10 * MIN);
    ck_assert_uint_eq(d.n, 0);
    ck_assert(inst.resend_pending);
    engine_result_t r = apply_tok("StockReserved", "e2", T0 + 10 * MIN + 30000, "{}", 1);
    ck_assert_int_eq(r.outcome, ENGINE_ADVANCED);
    ck_assert_str_eq(state_name(r.command.state), "picking"); /* the next step's command */
    ck_assert(!inst.resend_pending);
    d = engine_judge_due(def, &inst, T0 + 11 * MIN, 0, T0 + 11 * MIN);
    ck_assert_uint_eq(d.n, 0);
    ck_assert_int_eq(inst.token, 2);
}
END_TEST

/* Without on_timeout, the page comes only once the retries are spent. */
START_TEST(page_only_when_retries_are_exhausted)
{
    def->states[def_find_state(def, "reserving")].on_timeout = -1;
    apply("OrderPlaced", "e1", T0);
    int kinds[3], n = 0;
    for (int i = 0; i < 5; i++) {
        engine_due_t d = engine_judge_due(def, &inst, inst.deadline_ms, 0, inst.deadline_ms);
        if (d.n == 0)
            continue; /* a backoff */
        ck_assert_uint_eq(d.n, 1);
        ck_assert_int_lt(n, 3);
        kinds[n++] = d.actions[0].kind;
        if (n == 3)
            ck_assert_msg(strstr(d.actions[0].detail, "ReserveStock sent 3 times over 33m") != NULL,
                          "%s", d.actions[0].detail);
    }
    ck_assert_int_eq(n, 3);
    ck_assert_int_eq(kinds[0], ENGINE_DUE_RESEND);
    ck_assert_int_eq(kinds[1], ENGINE_DUE_RESEND);
    ck_assert_int_eq(kinds[2], ENGINE_DUE_DEADLINE);
    ck_assert_str_eq(state_name(inst.state), "reserving");
    ck_assert(inst.overdue);
    ck_assert_int_eq(inst.token, 3);
}
END_TEST

static void to_picking(void)
{
    apply("OrderPlaced", "e1", T0);
    apply("StockReserved", "e2", T0 + MIN); /* picking: 1h, lease 10m; token 2 */
}

START_TEST(lease_claim_and_renewals_push_the_deadline_never_past_the_state)
{
    to_picking();
    engine_result_t r =
        apply_tok("PickStarted", "p1", T0 + 2 * MIN, "{\"worker_id\":\"picker-7\"}", 2);
    ck_assert_int_eq(r.outcome, ENGINE_CLAIMED);
    ck_assert_str_eq(state_name(inst.state), "picking");
    ck_assert_str_eq(inst.lease_holder, "picker-7");
    ck_assert_int_eq(inst.lease_expires_ms, T0 + 12 * MIN);
    ck_assert_int_eq(engine_next_deadline(def, &inst), T0 + 12 * MIN);

    r = apply_tok("PickHeartbeat", "h1", T0 + 9 * MIN, "{}", 2);
    ck_assert_int_eq(r.outcome, ENGINE_RENEWED);
    ck_assert_int_eq(inst.lease_expires_ms, T0 + 19 * MIN);
    /* Nothing is due while the lease runs, though the claim's lease passed. */
    engine_due_t d = engine_judge_due(def, &inst, T0 + 15 * MIN, 0, T0 + 15 * MIN);
    ck_assert_uint_eq(d.n, 0);

    /* A renewal near the state's deadline stops at it (the hard limit). */
    r = apply_tok("PickHeartbeat", "h2", T0 + 58 * MIN, "{}", 0);
    ck_assert_int_eq(r.outcome, ENGINE_RENEWED);
    ck_assert_int_eq(inst.lease_expires_ms, T0 + 61 * MIN);
    ck_assert_int_eq(inst.deadline_ms, T0 + 61 * MIN);
}
END_TEST

START_TEST(lease_expiry_hands_off_in_active_mode)
{
    def->states[def_find_state(def, "picking")].retry_max = 1; /* a hand-off is an attempt */
    to_picking();
    apply_tok("PickStarted", "p1", T0 + 2 * MIN, "{\"worker_id\":\"picker-7\"}", 2);
    engine_due_t d = engine_judge_due(def, &inst, T0 + 14 * MIN, 0, T0 + 14 * MIN);
    ck_assert_uint_eq(d.n, 1);
    ck_assert_int_eq(d.actions[0].kind, ENGINE_DUE_HANDOFF);
    ck_assert(d.actions[0].command.send);
    ck_assert_int_eq(d.actions[0].command.step, 2);
    ck_assert_int_eq(d.actions[0].command.attempt, 1);
    ck_assert_int_eq(d.actions[0].command.token, 3);
    ck_assert_msg(strstr(d.actions[0].detail, "held by picker-7, last heartbeat 12m ago, lease "
                                              "10m: PickOrder re-sent with token 3") != NULL,
                  "%s", d.actions[0].detail);
    ck_assert_ptr_null(inst.lease_holder);
    ck_assert_int_eq(inst.lease_expires_ms, ENGINE_NO_DEADLINE);
    ck_assert_int_eq(engine_next_deadline(def, &inst), T0 + 61 * MIN);

    /* The zombie's late reply carries token 2: stale, nothing moves. */
    engine_result_t r = apply_tok("Picked", "z1", T0 + 15 * MIN, "{}", 2);
    ck_assert_int_eq(r.outcome, ENGINE_STALE);
    ck_assert_str_eq(state_name(inst.state), "picking");
    ck_assert_msg(strstr(r.detail, "token 2, older than the instance's 3") != NULL, "%s", r.detail);
    r = apply_tok("PickHeartbeat", "z2", T0 + 15 * MIN, "{}", 2);
    ck_assert_int_eq(r.outcome, ENGINE_STALE);
    ck_assert_int_eq(inst.lease_expires_ms, ENGINE_NO_DEADLINE);

    /* The new holder's reply (token 3), and one without a token, are judged. */
    r = apply_tok("Picked", "n1", T0 + 20 * MIN, "{}", 3);
    ck_assert_int_eq(r.outcome, ENGINE_ADVANCED);
    ck_assert_str_eq(state_name(inst.state), "done");
}
END_TEST

/* steward retry: attempt + 1, the next token, the deadline from now, the
 * lease and a pending backoff over; refused with a reason, the instance
 * untouched, in shadow mode and once finished. */
START_TEST(operator_resend_is_a_new_attempt_and_token)
{
    to_picking();
    apply_tok("PickStarted", "p1", T0 + 2 * MIN, "{\"worker_id\":\"picker-7\"}", 2);
    inst.resend_pending = true;
    engine_command_t cmd;
    char detail[256];
    ck_assert(engine_operator_resend(def, &inst, T0 + 5 * MIN, &cmd, detail, sizeof detail));
    ck_assert(cmd.send);
    ck_assert_str_eq(state_name(cmd.state), "picking");
    ck_assert_int_eq(cmd.step, 2);
    ck_assert_int_eq(cmd.attempt, 1);
    ck_assert_int_eq(cmd.token, 3);
    ck_assert_int_eq(inst.token, 3);
    ck_assert_int_eq(inst.deadline_ms, T0 + 65 * MIN);
    ck_assert(!inst.resend_pending && !inst.overdue);
    ck_assert_ptr_null(inst.lease_holder);
    ck_assert_str_eq(detail, "PickOrder re-sent by an operator (attempt 1, token 3)");
    char a[65], b[65];
    engine_command_id(def->process, "O1", 2, 0, a);
    engine_command_id(def->process, "O1", cmd.step, cmd.attempt, b);
    ck_assert_str_ne(a, b);
    /* The old holder's reply is stale now. */
    engine_result_t r = apply_tok("Picked", "z1", T0 + 6 * MIN, "{}", 2);
    ck_assert_int_eq(r.outcome, ENGINE_STALE);

    def->mode = DEF_MODE_SHADOW;
    ck_assert(!engine_operator_resend(def, &inst, T0 + 7 * MIN, &cmd, detail, sizeof detail));
    ck_assert(!cmd.send);
    ck_assert_msg(strstr(detail, "shadow mode") != NULL, "%s", detail);
    ck_assert_int_eq(inst.token, 3);
    ck_assert_int_eq(inst.attempt, 1);
    def->mode = DEF_MODE_ACTIVE;

    apply_tok("Picked", "n1", T0 + 8 * MIN, "{}", 3);
    ck_assert_str_eq(state_name(inst.state), "done");
    ck_assert(!engine_operator_resend(def, &inst, T0 + 9 * MIN, &cmd, detail, sizeof detail));
    ck_assert_msg(strstr(detail, "already finished") != NULL, "%s", detail);
}
END_TEST

/* steward move: the state is entered as an event enters it, now: a new
 * step, attempt 0, the deadline from now, the lease and a pending re-send
 * over, and in active mode the state's command with the next token. */
START_TEST(operator_move_enters_the_state_and_sends_its_command)
{
    to_picking();
    apply_tok("PickStarted", "p1", T0 + 2 * MIN, "{\"worker_id\":\"picker-7\"}", 2);
    inst.resend_pending = true;
    inst.attempt = 1;
    engine_command_t cmd;
    char detail[256];
    long refunding = def_find_state(def, "refunding");
    ck_assert(
        engine_operator_move(def, &inst, refunding, T0 + 5 * MIN, &cmd, detail, sizeof detail));
    ck_assert_str_eq(state_name(inst.state), "refunding");
    ck_assert_int_eq(inst.step, 3);
    ck_assert_int_eq(inst.attempt, 0);
    ck_assert_int_eq(inst.state_entered_ms, T0 + 5 * MIN);
    ck_assert_int_eq(inst.deadline_ms, T0 + 35 * MIN);
    ck_assert(!inst.resend_pending && !inst.overdue);
    ck_assert_ptr_null(inst.lease_holder);
    ck_assert(cmd.send);
    ck_assert_str_eq(state_name(cmd.state), "refunding");
    ck_assert_int_eq(cmd.step, 3);
    ck_assert_int_eq(cmd.attempt, 0);
    ck_assert_int_eq(cmd.token, 3);
    ck_assert_str_eq(detail, "Refund sent on entry (step 3, token 3)");

    /* Shadow mode: the same move, nothing sent. */
    def->mode = DEF_MODE_SHADOW;
    ck_assert(engine_operator_move(def, &inst, def_find_state(def, "picking"), T0 + 7 * MIN, &cmd,
                                   detail, sizeof detail));
    ck_assert_str_eq(state_name(inst.state), "picking");
    ck_assert_int_eq(inst.step, 4);
    ck_assert(!cmd.send);
    ck_assert_str_eq(detail, "");
    ck_assert_int_eq(inst.token, 3);
    def->mode = DEF_MODE_ACTIVE;

    /* Entry never runs back: a state entered by a later event time than
     * the clock keeps that time. */
    inst.state_entered_ms = T0 + 20 * MIN;
    ck_assert(
        engine_operator_move(def, &inst, refunding, T0 + 8 * MIN, &cmd, detail, sizeof detail));
    ck_assert_int_eq(inst.state_entered_ms, T0 + 20 * MIN);
    ck_assert_int_eq(inst.deadline_ms, T0 + 50 * MIN);

    /* Not into a terminal state (close does that), not once finished. */
    ck_assert(!engine_operator_move(def, &inst, def_find_state(def, "done"), T0 + 9 * MIN, &cmd,
                                    detail, sizeof detail));
    ck_assert_msg(strstr(detail, "not a non-terminal state") != NULL, "%s", detail);
    ck_assert_str_eq(state_name(inst.state), "refunding");
    ck_assert(!cmd.send);
    apply("Refunded", "f1", T0 + 30 * MIN);
    ck_assert_str_eq(state_name(inst.state), "cancelled");
    ck_assert(
        !engine_operator_move(def, &inst, refunding, T0 + 31 * MIN, &cmd, detail, sizeof detail));
    ck_assert_msg(strstr(detail, "already finished") != NULL, "%s", detail);
}
END_TEST

START_TEST(lease_expiry_alerts_in_shadow_mode)
{
    def->mode = DEF_MODE_SHADOW;
    to_picking();
    apply_tok("PickStarted", "p1", T0 + 2 * MIN, "{\"worker_id\":\"picker-7\"}", 0);
    engine_due_t d = engine_judge_due(def, &inst, T0 + 24 * MIN, 0, T0 + 24 * MIN);
    ck_assert_uint_eq(d.n, 1);
    ck_assert_int_eq(d.actions[0].kind, ENGINE_DUE_LEASE_EXPIRED);
    ck_assert(!d.actions[0].command.send);
    ck_assert_str_eq(d.actions[0].detail, "held by picker-7, last heartbeat 22m ago, lease 10m");
    engine_alert_text_t words = {0};
    json_t *details = engine_due_alert(def, "O1", &inst, &d.actions[0], &words);
    ck_assert_msg(strstr(words.summary, "the lease on picking expired") != NULL &&
                      strstr(words.summary, "owner warehouse") != NULL,
                  "%s", words.summary);
    ck_assert_ptr_nonnull(words.identity);
    json_decref(details);
    engine_alert_text_clear(&words);
    /* Judged once. */
    d = engine_judge_due(def, &inst, T0 + 25 * MIN, 0, T0 + 25 * MIN);
    ck_assert_uint_eq(d.n, 0);
}
END_TEST

START_TEST(reply_without_token_and_leaving_a_leased_step)
{
    apply("OrderPlaced", "e1", T0);
    engine_result_t r = apply_tok("StockReserved", "e2", T0 + MIN, "{}", 0);
    ck_assert_int_eq(r.outcome, ENGINE_ADVANCED); /* no token: judged as before */
    ck_assert_str_eq(r.released, "");             /* nobody held reserving */
    apply("Picked", "e3", T0 + 2 * MIN);
    ck_assert_str_eq(state_name(inst.state), "done");
    r = apply("PickHeartbeat", "e4", T0 + 3 * MIN);
    ck_assert_int_eq(r.outcome, ENGINE_LATE);

    /* A claim of a step not entered yet (it came on another topic, ahead
     * of the event that moves the instance there) waits, and is replayed. */
    engine_instance_clear(&inst);
    apply("OrderPlaced", "f1", T0);
    r = apply_tok("PickStarted", "f2", T0 + MIN, "{\"worker_id\":\"picker-3\"}", 0);
    ck_assert_int_eq(r.outcome, ENGINE_PARKED);
    ck_assert_int_eq(inst.lease_expires_ms, ENGINE_NO_DEADLINE);
    apply("StockReserved", "f3", T0 + MIN);
    json_t *data = json_pack("{s:s}", "worker_id", "picker-3");
    engine_event_t ev = {def_find_event(def, "PickStarted"), "f2", T0 + MIN, data, 0};
    r = engine_replay(def, &inst, &ev);
    json_decref(data);
    ck_assert_int_eq(r.outcome, ENGINE_CLAIMED);
    ck_assert_str_eq(inst.lease_holder, "picker-3");

    /* Leaving the step releases the lease. */
    r = apply("Picked", "f4", T0 + 2 * MIN);
    ck_assert_int_eq(r.outcome, ENGINE_ADVANCED);
    ck_assert_str_eq(r.released, "picking released by picker-3");
    ck_assert_ptr_null(inst.lease_holder);

    /* A heartbeat of a step the instance left is stale. */
    engine_instance_clear(&inst);
    apply("OrderPlaced", "g1", T0);
    apply("StockUnavailable", "g2", T0 + MIN); /* refunding: picking is behind for good */
    r = apply("PickHeartbeat", "g3", T0 + 2 * MIN);
    ck_assert_int_eq(r.outcome, ENGINE_STALE);
}
END_TEST

START_TEST(command_id_is_the_sha256_of_its_identity)
{
    char id[65], want[65];
    engine_command_id("active_order", "O1", 2, 1, id);
    const char text[] = "active_order\x1fO1\x1f"
                        "2\x1f"
                        "1";
    sha256_hex(text, sizeof text - 1, want);
    ck_assert_str_eq(id, want);
    ck_assert_uint_eq(strlen(id), 64);
    char other[65];
    engine_command_id("active_order", "O1", 2, 2, other);
    ck_assert_str_ne(id, other);
}
END_TEST

/* Decode reads the token where the state accepting the event says. */
static int64_t token_of(const char *type, const char *value, const char *header)
{
    decode_header_t headers[1] = {{"ce_stewardtoken", header, header ? strlen(header) : 0}};
    decode_input_t in = {
        "picking", 0, 1, NULL, 0, value, strlen(value), headers, header ? 1 : 0, 1795000000000LL};
    decode_limits_t limits = {DECODE_DEFAULT_MAX_BYTES, DECODE_DEFAULT_MAX_DEPTH};
    decode_message_t msg;
    char detail[256];
    ck_assert_int_eq(decode_message(&in, &limits, &msg, detail, sizeof detail), DECODE_OK);
    decode_envelope_t env;
    long event = def_find_event(def, type);
    ck_assert_int_eq(decode_envelope(&msg, &in, def, (size_t) event, &env, detail, sizeof detail),
                     DECODE_OK);
    int64_t token = env.token;
    decode_envelope_clear(&env);
    decode_message_clear(&msg);
    return token;
}

START_TEST(decode_reads_the_token_where_the_state_says)
{
    /* reserving: pointer /steward_token; picking: header ce_stewardtoken */
    ck_assert_int_eq(token_of("StockReserved",
                              "{\"type\":\"StockReserved\",\"order_id\":\"O1\","
                              "\"steward_token\":7}",
                              NULL),
                     7);
    ck_assert_int_eq(token_of("StockReserved",
                              "{\"type\":\"StockReserved\",\"order_id\":\"O1\","
                              "\"steward_token\":\"12\"}",
                              NULL),
                     12);
    ck_assert_int_eq(token_of("StockReserved",
                              "{\"type\":\"StockReserved\",\"order_id\":\"O1\","
                              "\"steward_token\":\"x1\"}",
                              NULL),
                     0);
    ck_assert_int_eq(
        token_of("StockReserved", "{\"type\":\"StockReserved\",\"order_id\":\"O1\"}", NULL), 0);
    ck_assert_int_eq(
        token_of("PickHeartbeat", "{\"type\":\"PickHeartbeat\",\"order_id\":\"O1\"}", "5"), 5);
    ck_assert_int_eq(token_of("Picked",
                              "{\"type\":\"Picked\",\"order_id\":\"O1\","
                              "\"steward_token\":9}",
                              NULL),
                     0); /* picking reads the header, not the payload */
}
END_TEST

/* A command whose variable the instance never captured is not queued: a
 * command_failed alert names the variable instead. */
START_TEST(uncaptured_variable_queues_nothing_and_alerts)
{
    cmdq_t q = {0};
    alert_batch_t alerts = {0};
    json_t *vars = json_object(); /* total never captured */
    engine_command_t cmd = {true, def_find_state(def, "reserving"), 1, 0, 1};
    ck_assert(!cmdq_add(&q, &alerts, def, "O1", vars, &cmd, NULL));
    ck_assert_uint_eq(q.n, 0);
    ck_assert_uint_eq(q.failed, 1);
    ck_assert_uint_eq(alerts.o_kind.n, 1);
    ck_assert_msg(strstr(pgarr_text(&alerts.o_summary), "${vars.total} was never captured") != NULL,
                  "%s", pgarr_text(&alerts.o_summary));
    ck_assert_msg(strstr(pgarr_text(&alerts.o_kind), "command_failed") != NULL, "%s",
                  pgarr_text(&alerts.o_kind));

    json_object_set_new(vars, "total", json_real(42.5));
    ck_assert(cmdq_add(&q, &alerts, def, "O1", vars, &cmd, NULL));
    ck_assert_uint_eq(q.n, 1);
    ck_assert_msg(strstr(pgarr_text(&q.payload), "42.5") != NULL, "%s", pgarr_text(&q.payload));
    json_decref(vars);
    cmdq_clear(&q);
    alert_batch_clear(&alerts);
}
END_TEST

/* One-second scheduler passes at wall-clock `now0` + k s, the watermark
 * `ahead` ms past the clock, until on_timeout or `max_passes`: which pass
 * made each decision. */
typedef struct passes {
    int resend[4], n_resend, timeout, backoffs;
} passes_t;

static passes_t one_second_passes(int64_t now0, int64_t ahead, int max_passes)
{
    passes_t p = {.timeout = -1};
    for (int k = 0; k < max_passes && p.timeout < 0; k++) {
        int64_t now = now0 + k * 1000LL;
        bool pending = inst.resend_pending;
        engine_due_t d = engine_judge_due(def, &inst, now + ahead, 0, now);
        if (!pending && inst.resend_pending)
            p.backoffs++;
        for (size_t i = 0; i < d.n; i++) {
            if (d.actions[i].kind == ENGINE_DUE_RESEND && p.n_resend < 4)
                p.resend[p.n_resend++] = k;
            else if (d.actions[i].kind == ENGINE_DUE_TIMEOUT)
                p.timeout = k;
        }
    }
    return p;
}

/* The watermark jumps an hour past reserving's deadline (10m, retry max 2,
 * backoff 30s doubling): each attempt still gets its whole deadline from
 * its re-send, and on_timeout comes only after the last attempt's. */
START_TEST(attempts_count_from_the_resend_after_the_watermark_jumps)
{
    long reserving = def_find_state(def, "reserving");
    def->states[reserving].retry_backoff_ms = 30000;
    apply("OrderPlaced", "e1", T0);

    /* A catch-up: the clock and the watermark an hour past the deadline. */
    int64_t now0 = T0 + 70 * MIN;
    passes_t p = one_second_passes(now0, 0, 3000);
    ck_assert_int_eq(p.n_resend, 2);
    ck_assert_int_eq(p.backoffs, 2);
    ck_assert_int_eq(p.resend[0], 30);                /* the backoff, from the first pass */
    ck_assert_int_eq(p.resend[1], 30 + 600 + 60);     /* 10m from the re-send, then 1m */
    ck_assert_int_eq(p.timeout, 30 + 600 + 60 + 600); /* the last attempt's whole 10m */
    ck_assert_str_eq(state_name(inst.state), "refunding");
    ck_assert_int_eq(inst.state_entered_ms, now0 + p.timeout * 1000LL);
    ck_assert_int_eq(inst.deadline_ms, now0 + p.timeout * 1000LL + 30 * MIN);

    /* A watermark an hour ahead of the clock (a producer's clock runs
     * fast): the pass's time is the watermark's, so the attempts are as
     * far apart. */
    engine_instance_clear(&inst);
    apply("OrderPlaced", "f1", T0);
    p = one_second_passes(T0 + 10 * MIN, 60 * MIN, 3000);
    ck_assert_int_eq(p.n_resend, 2);
    ck_assert_int_eq(p.resend[0], 30);
    ck_assert_int_eq(p.resend[1], 30 + 600 + 60);
    ck_assert_int_eq(p.timeout, 30 + 600 + 60 + 600);

    /* Judged on time, nothing changes: sends at 0, 10m30s, 21m30s. */
    engine_instance_clear(&inst);
    apply("OrderPlaced", "g1", T0);
    p = one_second_passes(T0, 0, 3000);
    ck_assert_int_eq(p.resend[0], 10 * 60 + 30);
    ck_assert_int_eq(p.resend[1], 21 * 60 + 30);
    ck_assert_int_eq(p.timeout, 31 * 60 + 30);
}
END_TEST

/* A reply carrying a token of a step the instance left is stale, in any
 * state, and pages nobody (no `unexpected`): a late reply, and a duplicate
 * reply under a new event id, also into a state without a command. */
START_TEST(old_token_reply_after_the_step_was_left_is_stale)
{
    to_picking(); /* reserving took token 1, picking 2 */
    engine_result_t r = apply_tok("StockReserved", "late", T0 + 3 * MIN, "{}", 1);
    ck_assert_int_eq(r.outcome, ENGINE_STALE);
    ck_assert_str_eq(state_name(inst.state), "picking");
    ck_assert_msg(strstr(r.detail, "token 1, older than the instance's 2") != NULL, "%s", r.detail);
    r = apply_tok("StockUnavailable", "late2", T0 + 3 * MIN, "{}", 1);
    ck_assert_int_eq(r.outcome, ENGINE_STALE);
    ck_assert_int_eq(inst.token, 2);

    /* refunding without a command: entering it still takes a token. */
    long refunding = def_find_state(def, "refunding");
    def_command_t *command = def->states[refunding].command;
    def->states[refunding].command = NULL;
    engine_instance_clear(&inst);
    apply("OrderPlaced", "e1", T0);
    r = apply_tok("StockUnavailable", "reply-1", T0 + MIN, "{}", 1);
    ck_assert_int_eq(r.outcome, ENGINE_ADVANCED);
    ck_assert(!r.command.send);
    ck_assert_int_eq(inst.token, 2);
    r = apply_tok("StockUnavailable", "reply-1-again", T0 + MIN + 5, "{}", 1);
    def->states[refunding].command = command;
    ck_assert_int_eq(r.outcome, ENGINE_STALE);
    ck_assert_str_eq(state_name(inst.state), "refunding");

    /* After the instance finished, a copy of the reply that finished it. */
    engine_instance_clear(&inst);
    to_picking();
    r = apply_tok("Picked", "done-1", T0 + 5 * MIN, "{}", 2);
    ck_assert_int_eq(r.outcome, ENGINE_ADVANCED);
    r = apply_tok("Picked", "done-1-again", T0 + 5 * MIN, "{}", 2);
    ck_assert_int_eq(r.outcome, ENGINE_STALE);
    ck_assert_str_eq(state_name(inst.state), "done");
}
END_TEST

/* A token the instance was never given is refused as forged. */
START_TEST(token_newer_than_the_instance_is_forged)
{
    to_picking(); /* token 2 */
    engine_result_t r = apply_tok("Picked", "x", T0 + 3 * MIN, "{}", 99);
    ck_assert_int_eq(r.outcome, ENGINE_STALE);
    ck_assert_msg(strstr(r.detail, "token 99, newer than the instance's 2: forged") != NULL, "%s",
                  r.detail);
    ck_assert_str_eq(state_name(inst.state), "picking");
    r = apply_tok("PickStarted", "y", T0 + 3 * MIN, "{\"worker_id\":\"w\"}", 3);
    ck_assert_int_eq(r.outcome, ENGINE_STALE);
    ck_assert_ptr_null(inst.lease_holder);
    r = apply_tok("Picked", "z", T0 + 4 * MIN, "{}", 2);
    ck_assert_int_eq(r.outcome, ENGINE_ADVANCED);

    /* A shadow version issues no tokens and fences nothing. */
    def->mode = DEF_MODE_SHADOW;
    engine_instance_clear(&inst);
    apply("OrderPlaced", "s1", T0);
    r = apply_tok("StockReserved", "s2", T0 + MIN, "{}", 7);
    ck_assert_int_eq(r.outcome, ENGINE_ADVANCED);
}
END_TEST

/* steward move into a state without a command still takes a new token:
 * the old step's reply racing the move is stale, not unexpected. */
START_TEST(operator_move_without_a_command_changes_the_token)
{
    to_picking(); /* token 2 */
    long refunding = def_find_state(def, "refunding");
    def_command_t *command = def->states[refunding].command;
    def->states[refunding].command = NULL;
    engine_command_t cmd;
    char detail[256];
    bool moved =
        engine_operator_move(def, &inst, refunding, T0 + 5 * MIN, &cmd, detail, sizeof detail);
    def->states[refunding].command = command;
    ck_assert(moved);
    ck_assert(!cmd.send);
    ck_assert_int_eq(inst.token, 3);
    engine_result_t r = apply_tok("Picked", "racing", T0 + 5 * MIN + 10, "{}", 2);
    ck_assert_int_eq(r.outcome, ENGINE_STALE);
    ck_assert_str_eq(state_name(inst.state), "refunding");
}
END_TEST

/* Hand-offs count against retry.max: after the last, the lease's end is
 * the last attempt missed: the page (or on_timeout), no further hand-off. */
START_TEST(lease_handoffs_stop_at_retry_max)
{
    long picking = def_find_state(def, "picking");
    def->states[picking].retry_max = 1;
    to_picking();
    apply_tok("PickStarted", "p1", T0 + 2 * MIN, "{\"worker_id\":\"picker-7\"}", 2);
    engine_due_t d = engine_judge_due(def, &inst, T0 + 13 * MIN, 0, T0 + 13 * MIN);
    ck_assert_uint_eq(d.n, 1);
    ck_assert_int_eq(d.actions[0].kind, ENGINE_DUE_HANDOFF);
    ck_assert_int_eq(inst.attempt, 1);

    apply_tok("PickStarted", "p2", T0 + 14 * MIN, "{\"worker_id\":\"picker-8\"}", 3);
    d = engine_judge_due(def, &inst, T0 + 25 * MIN, 0, T0 + 25 * MIN);
    ck_assert_uint_eq(d.n, 1);
    ck_assert_int_eq(d.actions[0].kind, ENGINE_DUE_DEADLINE);
    ck_assert(!d.actions[0].command.send);
    ck_assert_int_eq(d.actions[0].deadline_ms, T0 + 24 * MIN);
    ck_assert_msg(strstr(d.actions[0].detail,
                         "PickOrder sent 2 times over 23m, no Picked; the lease "
                         "ran out, held by picker-8") != NULL,
                  "%s", d.actions[0].detail);
    ck_assert(inst.overdue);
    ck_assert_int_eq(inst.token, 3);
    ck_assert_int_eq(inst.attempt, 1);
    /* Paged once: the state's deadline has nothing more to say. */
    d = engine_judge_due(def, &inst, T0 + 2 * 60 * MIN, 0, T0 + 2 * 60 * MIN);
    ck_assert_uint_eq(d.n, 0);

    /* With on_timeout, the lease's end takes it. */
    def->states[picking].on_timeout = def_find_state(def, "refunding");
    def->states[picking].retry_max = 0;
    engine_instance_clear(&inst);
    to_picking();
    apply_tok("PickStarted", "q1", T0 + 2 * MIN, "{\"worker_id\":\"picker-7\"}", 2);
    d = engine_judge_due(def, &inst, T0 + 13 * MIN, 0, T0 + 13 * MIN);
    ck_assert_uint_eq(d.n, 1);
    ck_assert_int_eq(d.actions[0].kind, ENGINE_DUE_TIMEOUT);
    ck_assert_str_eq(state_name(inst.state), "refunding");
    ck_assert(d.actions[0].command.send);
    ck_assert_int_eq(d.actions[0].command.token, 3);
    ck_assert_int_eq(inst.state_entered_ms, T0 + 13 * MIN);
}
END_TEST

/* A claim on a step already judged overdue gets its whole lease from the
 * claim (not one that ended at the passed deadline), and its end alerts:
 * no hand-off after the page said the retries were spent. */
START_TEST(claim_on_an_overdue_step_gets_a_lease_from_the_claim)
{
    to_picking(); /* picking: 1h, no retry, no on_timeout */
    engine_due_t d = engine_judge_due(def, &inst, T0 + 61 * MIN, 0, T0 + 61 * MIN);
    ck_assert_uint_eq(d.n, 1);
    ck_assert_int_eq(d.actions[0].kind, ENGINE_DUE_DEADLINE);
    ck_assert(inst.overdue);

    engine_result_t r =
        apply_tok("PickStarted", "late-claim", T0 + 70 * MIN, "{\"worker_id\":\"picker-7\"}", 2);
    ck_assert_int_eq(r.outcome, ENGINE_CLAIMED);
    ck_assert_int_eq(inst.lease_expires_ms, T0 + 80 * MIN);
    d = engine_judge_due(def, &inst, T0 + 70 * MIN, 0, T0 + 70 * MIN);
    ck_assert_uint_eq(d.n, 0);
    d = engine_judge_due(def, &inst, T0 + 80 * MIN, 0, T0 + 80 * MIN);
    ck_assert_uint_eq(d.n, 1);
    ck_assert_int_eq(d.actions[0].kind, ENGINE_DUE_LEASE_EXPIRED);
    ck_assert(!d.actions[0].command.send);
    ck_assert_int_eq(inst.token, 2);

    /* Before its deadline is judged, a claim after it ends no earlier
     * than itself; the deadline rule judges the step. */
    engine_instance_clear(&inst);
    to_picking();
    apply_tok("PickStarted", "c", T0 + 62 * MIN, "{\"worker_id\":\"picker-7\"}", 2);
    ck_assert_int_eq(inst.lease_expires_ms, T0 + 62 * MIN);
    d = engine_judge_due(def, &inst, T0 + 62 * MIN, 0, T0 + 62 * MIN);
    ck_assert_uint_eq(d.n, 1);
    ck_assert_int_eq(d.actions[0].kind, ENGINE_DUE_DEADLINE);
}
END_TEST

/* The page says what reached the broker when the step's rows are counted;
 * unknown counts keep the engine's attempts. */
START_TEST(missed_step_words_take_the_queued_and_delivered_counts)
{
    long reserving = def_find_state(def, "reserving");
    def->states[reserving].on_timeout = -1;
    def->states[reserving].retry_max = 1;
    def->states[reserving].retry_backoff_ms = 0;
    apply("OrderPlaced", "e1", T0);
    engine_due_t d = engine_judge_due(def, &inst, T0 + 10 * MIN, 0, T0 + 10 * MIN);
    ck_assert_int_eq(d.actions[0].kind, ENGINE_DUE_RESEND);
    ck_assert_msg(strstr(d.actions[0].detail, "ReserveStock sent 1 time over 10m") != NULL, "%s",
                  d.actions[0].detail);

    struct {
        int queued, delivered;
        const char *words;
    } cases[] = {
        {2, 0,
         "ReserveStock queued 2, delivered 0: see dispatch_failed (over 20m, no "
         "StockReserved or StockUnavailable)"},
        {0, 0,
         "ReserveStock queued 0, delivered 0: see command_failed (over 20m, no "
         "StockReserved or StockUnavailable)"},
        {2, 1,
         "ReserveStock queued 2, delivered 1 over 20m, no StockReserved or "
         "StockUnavailable"},
        {2, 2, "ReserveStock sent 2 times over 20m, no StockReserved or StockUnavailable"},
        {-1, -1, "ReserveStock sent 2 times over 20m, no StockReserved or StockUnavailable"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        engine_instance_t copy = inst;
        copy.overdue = false;
        copy.sends_queued = cases[i].queued;
        copy.sends_delivered = cases[i].delivered;
        copy.vars = NULL;
        copy.lease_holder = NULL;
        d = engine_judge_due(def, &copy, T0 + 20 * MIN, 0, T0 + 20 * MIN);
        ck_assert_uint_eq(d.n, 1);
        ck_assert_int_eq(d.actions[0].kind, ENGINE_DUE_DEADLINE);
        ck_assert_str_eq(d.actions[0].detail, cases[i].words);
        engine_alert_text_t words = {0};
        json_t *details = engine_due_alert(def, "O1", &copy, &d.actions[0], &words);
        ck_assert_msg(strstr(words.summary, cases[i].words) != NULL, "%s", words.summary);
        json_decref(details);
        engine_alert_text_clear(&words);
    }
    /* Held by dispatch.paused: no dispatcher alert explains it, so the
     * words say so instead of pointing at dispatch_failed. */
    engine_instance_t held = inst;
    held.overdue = false;
    held.sends_queued = 2;
    held.sends_delivered = 0;
    held.sends_paused = true;
    held.vars = NULL;
    held.lease_holder = NULL;
    d = engine_judge_due(def, &held, T0 + 20 * MIN, 0, T0 + 20 * MIN);
    ck_assert_uint_eq(d.n, 1);
    ck_assert_str_eq(d.actions[0].detail,
                     "ReserveStock queued 2, delivered 0: dispatch is paused (dispatch.paused) "
                     "(over 20m, no StockReserved or StockUnavailable)");
}
END_TEST

Suite *active_engine_suite(void);
Suite *active_engine_suite(void)
{
    Suite *s = suite_create("active_engine");
    TCase *tc = tcase_create("active_engine");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, entering_a_state_with_a_command_sends_it);
    tcase_add_test(tc, shadow_version_sends_nothing_and_pages);
    tcase_add_test(tc, backoff_doubles_and_is_capped);
    tcase_add_test(tc, retries_then_on_timeout_then_page);
    tcase_add_test(tc, reply_during_the_backoff_cancels_the_resend);
    tcase_add_test(tc, page_only_when_retries_are_exhausted);
    tcase_add_test(tc, lease_claim_and_renewals_push_the_deadline_never_past_the_state);
    tcase_add_test(tc, lease_expiry_hands_off_in_active_mode);
    tcase_add_test(tc, operator_resend_is_a_new_attempt_and_token);
    tcase_add_test(tc, operator_move_enters_the_state_and_sends_its_command);
    tcase_add_test(tc, lease_expiry_alerts_in_shadow_mode);
    tcase_add_test(tc, reply_without_token_and_leaving_a_leased_step);
    tcase_add_test(tc, command_id_is_the_sha256_of_its_identity);
    tcase_add_test(tc, decode_reads_the_token_where_the_state_says);
    tcase_add_test(tc, uncaptured_variable_queues_nothing_and_alerts);
    tcase_add_test(tc, attempts_count_from_the_resend_after_the_watermark_jumps);
    tcase_add_test(tc, old_token_reply_after_the_step_was_left_is_stale);
    tcase_add_test(tc, token_newer_than_the_instance_is_forged);
    tcase_add_test(tc, operator_move_without_a_command_changes_the_token);
    tcase_add_test(tc, lease_handoffs_stop_at_retry_max);
    tcase_add_test(tc, claim_on_an_overdue_step_gets_a_lease_from_the_claim);
    tcase_add_test(tc, missed_step_words_take_the_queued_and_delivered_counts);
    suite_add_tcase(s, tc);
    return s;
}
