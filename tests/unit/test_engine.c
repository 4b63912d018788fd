/*
 * test_engine - the pure state machine: every outcome, captures,
 * deadlines from event time, and the replay of parked events.
 */
#include "engine/engine.h"
#include "testlib.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

#define MIN  (60 * 1000LL)
#define HOUR (60 * MIN)
#define DAY  (24 * HOUR)
#define T0   1795000000000LL /* an event time, in ms */

static def_t *def;
static engine_instance_t inst;
static json_t *payloads[8];
static size_t n_payloads;

static void setup(void)
{
    def = tl_def_load("tests/data/definitions/engine_order.json");
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

/* An event of type `name` at `time_ms` with a JSON payload. */
static engine_event_t event(const char *name, const char *id, int64_t time_ms, const char *json)
{
    long idx = def_find_event(def, name);
    ck_assert_msg(idx >= 0, "no event %s", name);
    json_t *data = json_loads(json, 0, NULL);
    ck_assert_ptr_nonnull(data);
    payloads[n_payloads++] = data;
    return (engine_event_t){idx, id, time_ms, data};
}

static const char *state_name(long state)
{
    return state >= 0 ? def->states[state].name : "(none)";
}

static engine_result_t apply(const char *name, const char *id, int64_t time_ms)
{
    engine_event_t ev = event(name, id, time_ms,
                              "{\"order_id\":\"O1\",\"total\":42.5,"
                              "\"payment_id\":\"P9\",\"carrier\":\"DHL\"}");
    return engine_apply(def, &inst, &ev, false);
}

START_TEST(start_creates_the_instance_with_deadlines_and_captures)
{
    engine_result_t r = apply("OrderPlaced", "e1", T0);

    ck_assert_int_eq(r.outcome, ENGINE_STARTED);
    ck_assert_int_eq(r.from_state, -1);
    ck_assert_str_eq(state_name(r.to_state), "awaiting_payment");
    ck_assert(inst.exists);
    ck_assert_int_eq(inst.version, 1);
    ck_assert_str_eq(state_name(inst.state), "awaiting_payment");
    ck_assert_int_eq(inst.started_ms, T0);
    ck_assert_int_eq(inst.state_entered_ms, T0);
    ck_assert_int_eq(inst.deadline_ms, T0 + 15 * MIN);
    ck_assert_int_eq(inst.process_deadline_ms, T0 + 10 * DAY);
    ck_assert_int_eq(engine_next_deadline(def, &inst), T0 + 15 * MIN);
    ck_assert(json_real_value(json_object_get(inst.vars, "total")) == 42.5);
    ck_assert_str_eq(engine_status(def, inst.state), "active");
}
END_TEST

START_TEST(transition_advances_captures_and_restarts_the_deadline)
{
    apply("OrderPlaced", "e1", T0);
    engine_result_t r = apply("PaymentCaptured", "e2", T0 + 5 * MIN);

    ck_assert_int_eq(r.outcome, ENGINE_ADVANCED);
    ck_assert_str_eq(state_name(r.from_state), "awaiting_payment");
    ck_assert_str_eq(state_name(r.to_state), "awaiting_stock");
    ck_assert_int_eq(inst.state_entered_ms, T0 + 5 * MIN);
    ck_assert_int_eq(inst.deadline_ms, T0 + 5 * MIN + HOUR);
    ck_assert_str_eq(json_string_value(json_object_get(inst.vars, "payment_id")), "P9");
    ck_assert_int_eq(inst.events_applied, 2);
}
END_TEST

START_TEST(seen_event_is_a_duplicate_and_changes_nothing)
{
    apply("OrderPlaced", "e1", T0);
    engine_event_t ev = event("PaymentCaptured", "e2", T0 + MIN, "{\"order_id\":\"O1\"}");
    engine_result_t r = engine_apply(def, &inst, &ev, true);

    ck_assert_int_eq(r.outcome, ENGINE_DUPLICATE);
    ck_assert_str_eq(state_name(inst.state), "awaiting_payment");
    ck_assert_int_eq(inst.events_applied, 1);
    ck_assert_msg(strstr(r.detail, "e2") != NULL, "detail: %s", r.detail);
}
END_TEST

START_TEST(later_step_first_is_parked_then_replayed)
{
    apply("OrderPlaced", "e1", T0);
    engine_event_t stock = event("StockReserved", "e3", T0 + 2 * MIN, "{\"order_id\":\"O1\"}");
    engine_result_t r = engine_apply(def, &inst, &stock, false);
    ck_assert_int_eq(r.outcome, ENGINE_PARKED);
    ck_assert_str_eq(state_name(inst.state), "awaiting_payment");
    ck_assert_msg(strstr(r.detail, "StockReserved") != NULL, "detail: %s", r.detail);

    apply("PaymentCaptured", "e2", T0 + MIN);
    r = engine_replay(def, &inst, &stock);
    ck_assert_int_eq(r.outcome, ENGINE_ADVANCED);
    ck_assert_str_eq(state_name(inst.state), "awaiting_dispatch");
    ck_assert_int_eq(inst.state_entered_ms, T0 + 2 * MIN);
}
END_TEST

START_TEST(event_before_its_instance_is_parked)
{
    engine_result_t r = apply("PaymentCaptured", "e2", T0);

    ck_assert_int_eq(r.outcome, ENGINE_PARKED);
    ck_assert(!inst.exists);
    ck_assert_int_eq(r.from_state, -1);
    ck_assert_msg(strstr(r.detail, "OrderPlaced") != NULL, "detail: %s", r.detail);
}
END_TEST

START_TEST(event_no_later_state_accepts_is_unexpected)
{
    apply("OrderPlaced", "e1", T0);
    apply("PaymentCaptured", "e2", T0 + MIN);
    apply("StockReserved", "e3", T0 + 2 * MIN);
    /* awaiting_dispatch: no state from here on takes a payment again */
    engine_result_t r = apply("PaymentCaptured", "e4", T0 + 3 * MIN);

    ck_assert_int_eq(r.outcome, ENGINE_UNEXPECTED);
    ck_assert_str_eq(state_name(inst.state), "awaiting_dispatch");
    ck_assert_msg(strstr(r.detail, "awaiting_dispatch") != NULL, "detail: %s", r.detail);
}
END_TEST

START_TEST(event_a_later_state_accepts_is_parked)
{
    apply("OrderPlaced", "e1", T0);
    apply("PaymentCaptured", "e2", T0 + MIN);
    /* awaiting_stock leads to refunding, which takes RefundIssued */
    engine_result_t r = apply("RefundIssued", "e5", T0 + 2 * MIN);
    ck_assert_int_eq(r.outcome, ENGINE_PARKED);
    ck_assert(engine_may_accept(def, def_find_state(def, "awaiting_stock"),
                                def_find_event(def, "RefundIssued")));
    ck_assert(!engine_may_accept(def, def_find_state(def, "awaiting_dispatch"),
                                 def_find_event(def, "RefundIssued")));
}
END_TEST

START_TEST(event_after_the_end_is_late)
{
    apply("OrderPlaced", "e1", T0);
    apply("PaymentDeclined", "e2", T0 + MIN);
    ck_assert_str_eq(engine_status(def, inst.state), "cancelled");
    ck_assert_int_eq(engine_next_deadline(def, &inst), ENGINE_NO_DEADLINE);

    engine_result_t r = apply("PaymentCaptured", "e3", T0 + 2 * MIN);
    ck_assert_int_eq(r.outcome, ENGINE_LATE);
    ck_assert_str_eq(state_name(inst.state), "cancelled");
}
END_TEST

START_TEST(second_start_event_never_resets)
{
    apply("OrderPlaced", "e1", T0);
    apply("PaymentCaptured", "e2", T0 + MIN);
    engine_result_t r = apply("OrderPlaced", "e9", T0 + 2 * MIN);

    ck_assert_int_eq(r.outcome, ENGINE_UNEXPECTED);
    ck_assert_str_eq(state_name(inst.state), "awaiting_stock");
    ck_assert_int_eq(inst.started_ms, T0);
    ck_assert_msg(strstr(r.detail, "second OrderPlaced") != NULL, "detail: %s", r.detail);
}
END_TEST

START_TEST(time_in_a_state_never_runs_back)
{
    apply("OrderPlaced", "e1", T0);
    /* The payment event carries an older time than the order (clock skew). */
    apply("PaymentCaptured", "e2", T0 - 5 * MIN);
    ck_assert_int_eq(inst.state_entered_ms, T0);
    ck_assert_int_eq(inst.deadline_ms, T0 + HOUR);
}
END_TEST

START_TEST(next_deadline_is_the_earlier_unjudged_one)
{
    apply("OrderPlaced", "e1", T0);
    apply("PaymentCaptured", "e2", T0 + MIN);
    apply("StockReserved", "e3", T0 + 2 * MIN);
    /* awaiting_dispatch: 2d, process 10d */
    ck_assert_int_eq(engine_next_deadline(def, &inst), T0 + 2 * MIN + 2 * DAY);
    inst.overdue = true; /* the state's deadline was judged: the process one is next */
    ck_assert_int_eq(engine_next_deadline(def, &inst), T0 + 10 * DAY);
}
END_TEST

START_TEST(late_step_is_judged_from_event_time_without_the_scheduler)
{
    apply("OrderPlaced", "e1", T0);
    /* awaiting_payment: 15m. The scheduler has not judged it (not overdue). */
    ck_assert(!inst.overdue);
    engine_result_t r = apply("PaymentCaptured", "e2", T0 + 15 * MIN + 2000);

    ck_assert_int_eq(r.outcome, ENGINE_ADVANCED);
    ck_assert_int_eq(r.late_by_ms, 2000);
    ck_assert_msg(strstr(r.detail, "arrived 2s after the deadline of awaiting_payment") != NULL,
                  "detail: %s", r.detail);
    ck_assert_str_eq(state_name(inst.state), "awaiting_stock");
}
END_TEST

START_TEST(step_on_time_or_at_the_deadline_is_not_late)
{
    apply("OrderPlaced", "e1", T0);
    engine_result_t r = apply("PaymentCaptured", "e2", T0 + 15 * MIN);
    ck_assert_int_eq(r.outcome, ENGINE_ADVANCED);
    ck_assert_int_eq(r.late_by_ms, 0);
    ck_assert_str_eq(r.detail, "");
    r = apply("StockReserved", "e3", T0 + 16 * MIN);
    ck_assert_int_eq(r.late_by_ms, 0);
}
END_TEST

START_TEST(late_is_the_same_whether_or_not_judged_overdue)
{
    apply("OrderPlaced", "e1", T0);
    inst.overdue = true; /* the scheduler got there first */
    engine_result_t r = apply("PaymentCaptured", "e2", T0 + 20 * MIN);
    ck_assert_int_eq(r.late_by_ms, 5 * MIN);
}
END_TEST

START_TEST(terminal_step_after_the_process_deadline_is_late)
{
    apply("OrderPlaced", "e1", T0);
    apply("PaymentCaptured", "e2", T0 + MIN);
    apply("StockReserved", "e3", T0 + 2 * MIN);
    /* Entered awaiting_dispatch at T0+2m (deadline 2d); the process's is 10d
     * from T0. Dispatched 11 days in: later than both; the larger counts. */
    inst.deadline_ms = T0 + 10 * DAY + HOUR; /* state deadline just after the process's */
    engine_result_t r = apply("ShipmentDispatched", "e4", T0 + 11 * DAY);
    ck_assert_int_eq(r.outcome, ENGINE_ADVANCED);
    ck_assert_int_eq(r.late_by_ms, DAY);
    ck_assert_msg(strstr(r.detail, "after the deadline of the process") != NULL, "detail: %s",
                  r.detail);
}
END_TEST

START_TEST(deadline_lateness_is_the_state_part_alone)
{
    apply("OrderPlaced", "e1", T0);
    apply("PaymentCaptured", "e2", T0 + MIN);
    apply("StockReserved", "e3", T0 + 2 * MIN);
    /* The state's deadline passed a day before the process's did: the step
     * is late by the larger, its deadline alert by its own. */
    inst.deadline_ms = T0 + 9 * DAY;
    engine_result_t r = apply("ShipmentDispatched", "e4", T0 + 11 * DAY);
    ck_assert_int_eq(r.late_by_ms, 2 * DAY);
    ck_assert_int_eq(r.deadline_late_by_ms, 2 * DAY);
    /* The other way round: only the process's was missed. */
    engine_instance_clear(&inst);
    engine_instance_init(&inst);
    apply("OrderPlaced", "f1", T0);
    apply("PaymentCaptured", "f2", T0 + MIN);
    apply("StockReserved", "f3", T0 + 9 * DAY + 23 * HOUR);
    r = apply("ShipmentDispatched", "f4", T0 + 10 * DAY + HOUR);
    ck_assert_int_eq(r.late_by_ms, HOUR);
    ck_assert_int_eq(r.deadline_late_by_ms, 0);
}
END_TEST

START_TEST(operator_close_enters_the_terminal_state_as_an_event_would)
{
    apply("OrderPlaced", "e1", T0);
    apply("PaymentCaptured", "e2", T0 + MIN);
    int step = inst.step;
    const char *status = NULL;
    char detail[256];
    long cancelled = def_find_state(def, "cancelled");
    /* Entered at an event time ahead of the clock: entry never runs back. */
    ck_assert(engine_operator_close(def, &inst, cancelled, T0, &status, detail, sizeof detail));
    ck_assert_str_eq(status, "cancelled");
    ck_assert_int_eq(inst.state, cancelled);
    ck_assert_int_eq(inst.step, step + 1);
    ck_assert_int_eq(inst.state_entered_ms, T0 + MIN);
    ck_assert_int_eq(inst.deadline_ms, ENGINE_NO_DEADLINE);
    ck_assert_int_eq(engine_next_deadline(def, &inst), ENGINE_NO_DEADLINE);
    /* Finished: nothing more to close; not a terminal state: refused. */
    ck_assert(!engine_operator_close(def, &inst, cancelled, T0, &status, detail, sizeof detail));
    ck_assert_msg(strstr(detail, "already finished") != NULL, "detail: %s", detail);
    engine_instance_clear(&inst);
    engine_instance_init(&inst);
    apply("OrderPlaced", "f1", T0);
    ck_assert(!engine_operator_close(def, &inst, def_find_state(def, "refunding"), T0, &status,
                                     detail, sizeof detail));
    ck_assert_msg(strstr(detail, "not a terminal state") != NULL, "detail: %s", detail);
    ck_assert_str_eq(state_name(inst.state), "awaiting_payment");
}
END_TEST

START_TEST(standing_is_judged_against_the_watermark)
{
    /* The clock is past the deadline but the watermark is not: not
     * overdue, time still left. */
    engine_standing_t s = engine_standing(T0, false, T0 - 5 * MIN);
    ck_assert_int_eq(s.overdue_ms, 0);
    ck_assert_int_eq(s.to_deadline_ms, 5 * MIN);
    /* Past it, within the grace, not yet judged: no overdue figure. */
    s = engine_standing(T0, false, T0 + MIN);
    ck_assert_int_eq(s.overdue_ms, 0);
    ck_assert_int_eq(s.to_deadline_ms, -MIN);
    s = engine_standing(T0, true, T0 + 3 * MIN);
    ck_assert_int_eq(s.overdue_ms, 3 * MIN);
    s = engine_standing(T0, true, ENGINE_NO_DEADLINE);
    ck_assert_int_eq(s.overdue_ms, ENGINE_NO_DEADLINE);
    ck_assert_int_eq(s.to_deadline_ms, ENGINE_NO_DEADLINE);
    s = engine_standing(ENGINE_NO_DEADLINE, false, T0);
    ck_assert_int_eq(s.to_deadline_ms, ENGINE_NO_DEADLINE);
}
END_TEST

START_TEST(lateness_saturates_instead_of_overflowing)
{
    apply("OrderPlaced", "e1", T0);
    inst.deadline_ms = INT64_MIN + 1;
    /* To a terminal state, so no new deadline is computed from the time. */
    engine_result_t r = apply("PaymentDeclined", "e2", INT64_MAX - 1);
    ck_assert_int_eq(r.late_by_ms, INT64_MAX);
}
END_TEST

START_TEST(missing_capture_is_noted_not_fatal)
{
    engine_event_t ev = event("OrderPlaced", "e1", T0, "{\"order_id\":\"O1\"}");
    engine_result_t r = engine_apply(def, &inst, &ev, false);

    ck_assert_int_eq(r.outcome, ENGINE_STARTED);
    ck_assert_ptr_null(json_object_get(inst.vars, "total"));
    ck_assert_msg(strstr(r.detail, "capture total: nothing at /total") != NULL, "detail: %s",
                  r.detail);
}
END_TEST

START_TEST(outcome_names_match_the_schema)
{
    const char *expected[] = {"started", "advanced",  "duplicate",     "parked",     "unexpected",
                              "late",    "violation", "timeout",       "retried",    "stale",
                              "claimed", "renewed",   "lease_expired", "handed_off", "released"};
    for (int i = 0; i < ENGINE_N_OUTCOMES; i++)
        ck_assert_str_eq(engine_outcome_name((engine_outcome_t) i), expected[i]);
}
END_TEST

/* A time that slipped past decode's range cannot make the deadline sums
 * overflow (undefined behaviour, which UBSan in the test build aborts on). */
START_TEST(deadlines_saturate_instead_of_overflowing)
{
    engine_result_t r = apply("OrderPlaced", "e1", INT64_MAX - 1000);
    ck_assert_int_eq(r.outcome, ENGINE_STARTED);
    ck_assert_int_eq(inst.deadline_ms, INT64_MAX);
    ck_assert_int_eq(inst.process_deadline_ms, INT64_MAX);
    ck_assert_int_eq(engine_next_deadline(def, &inst), INT64_MAX);
}
END_TEST

/* Deadlines are judged against the watermark less the grace, once each. */
START_TEST(deadline_is_due_against_the_watermark_and_grace)
{
    apply("OrderPlaced", "e1", T0); /* awaiting_payment: 15m */
    engine_due_t d =
        engine_judge_due(def, &inst, T0 + 15 * MIN + 30000, 60000, T0 + 15 * MIN + 30000);
    ck_assert_uint_eq(d.n, 0); /* inside the grace */
    ck_assert(!inst.overdue);
    ck_assert_int_eq(d.next_ms, T0 + 15 * MIN);

    d = engine_judge_due(def, &inst, T0 + 16 * MIN, 60000,
                         T0 + 16 * MIN); /* at deadline + grace: due */
    ck_assert_uint_eq(d.n, 1);
    ck_assert_int_eq(d.actions[0].kind, ENGINE_DUE_DEADLINE);
    ck_assert_int_eq(d.actions[0].deadline_ms, T0 + 15 * MIN);
    ck_assert_int_eq(d.actions[0].since_ms, T0);
    ck_assert_int_eq(d.actions[0].overdue_ms, MIN);
    ck_assert(inst.overdue);
    ck_assert_int_eq(d.next_ms, T0 + 10 * DAY); /* the process deadline is next */

    ck_assert_int_eq(engine_due_bound(T0 + 16 * MIN, 60000), T0 + 15 * MIN);
    d = engine_judge_due(def, &inst, T0 + 20 * MIN, 0, T0 + 20 * MIN); /* judged once only */
    ck_assert_uint_eq(d.n, 0);
}
END_TEST

START_TEST(process_deadline_is_due_beside_the_state_deadline)
{
    apply("OrderPlaced", "e1", T0);
    engine_due_t d = engine_judge_due(def, &inst, T0 + 11 * DAY, 0, T0 + 11 * DAY);
    ck_assert_uint_eq(d.n, 2);
    ck_assert_int_eq(d.actions[0].kind, ENGINE_DUE_DEADLINE);
    ck_assert_int_eq(d.actions[1].kind, ENGINE_DUE_PROCESS_DEADLINE);
    ck_assert_int_eq(d.actions[1].deadline_ms, T0 + 10 * DAY);
    ck_assert_int_eq(d.actions[1].since_ms, T0);
    ck_assert(inst.overdue && inst.process_overdue);
    ck_assert_int_eq(d.next_ms, ENGINE_NO_DEADLINE);

    engine_alert_text_t text;
    json_t *details = engine_due_alert(def, "O1", &inst, &d.actions[1], &text);
    ck_assert_ptr_nonnull(details);
    ck_assert_ptr_nonnull(strstr(text.summary, "engine_order O1 not finished"));
    ck_assert_ptr_nonnull(strstr(text.summary, "PaymentCaptured or PaymentDeclined"));
    ck_assert_str_eq(text.owner, "fulfilment");
    ck_assert_int_eq(json_integer_value(json_object_get(details, "overdue_ms")), DAY);
    ck_assert_str_eq(text.identity, "steward:process_deadline:engine_order:O1:1795000000000");
    engine_alert_text_clear(&text);
    json_decref(details);

    details = engine_due_alert(def, "O1", &inst, &d.actions[0], &text);
    ck_assert_str_eq(text.owner, "payments");
    ck_assert_ptr_nonnull(strstr(text.identity, "steward:deadline:engine_order:O1:"
                                                "awaiting_payment:"));
    engine_alert_text_clear(&text);
    json_decref(details);
}
END_TEST

START_TEST(finished_or_absent_instance_has_nothing_due)
{
    engine_due_t d = engine_judge_due(def, &inst, T0 + 100 * DAY, 0, T0 + 100 * DAY);
    ck_assert_uint_eq(d.n, 0);
    apply("OrderPlaced", "e1", T0);
    apply("PaymentDeclined", "e2", T0 + MIN); /* cancelled */
    d = engine_judge_due(def, &inst, T0 + 100 * DAY, 0, T0 + 100 * DAY);
    ck_assert_uint_eq(d.n, 0);
    ck_assert_int_eq(d.next_ms, ENGINE_NO_DEADLINE);
}
END_TEST

/* A deadline measured from a reordered step's entry, never from its
 * earlier event time: the entry does not run back. */
START_TEST(reordered_step_deadline_runs_from_the_entry)
{
    apply("OrderPlaced", "e1", T0);
    apply("PaymentCaptured", "e2", T0 + 10 * MIN); /* awaiting_stock: 1h */
    apply("StockReserved", "e3", T0 + 5 * MIN);    /* earlier time: enters at +10m */
    ck_assert_int_eq(inst.state_entered_ms, T0 + 10 * MIN);
    engine_due_t d =
        engine_judge_due(def, &inst, T0 + 10 * MIN + 2 * DAY - 1, 0, T0 + 10 * MIN + 2 * DAY - 1);
    ck_assert_uint_eq(d.n, 0);
    d = engine_judge_due(def, &inst, T0 + 10 * MIN + 2 * DAY, 0, T0 + 10 * MIN + 2 * DAY);
    ck_assert_uint_eq(d.n, 1);
}
END_TEST

START_TEST(time_in_state_never_runs_back)
{
    ck_assert_int_eq(engine_entered_at(ENGINE_NO_DEADLINE, T0), T0);
    ck_assert_int_eq(engine_entered_at(T0, T0 + MIN), T0 + MIN);
    ck_assert_int_eq(engine_entered_at(T0 + 70 * MIN, T0 + 10 * MIN), T0 + 70 * MIN);
    ck_assert_int_eq(engine_time_in_state(T0, T0 + 10 * MIN), 10 * MIN);
    /* Left on an event whose time lies before the entry: zero, not negative. */
    ck_assert_int_eq(engine_time_in_state(T0 + 70 * MIN, T0 + 10 * MIN), 0);
}
END_TEST

START_TEST(undeclared_event_is_unexpected_with_reason)
{
    engine_result_t r = engine_undeclared(def, &inst, "Mystery");
    ck_assert_int_eq(r.outcome, ENGINE_UNEXPECTED);
    ck_assert_int_eq(r.from_state, -1);
    ck_assert_str_eq(r.detail, "version 1 of engine_order does not declare Mystery");
    apply("OrderPlaced", "e1", T0);
    r = engine_undeclared(def, &inst, "Mystery");
    ck_assert_int_eq(r.from_state, inst.state);
    ck_assert_int_eq(r.to_state, inst.state);
}
END_TEST

START_TEST(parked_event_expires_once_the_watermark_passes_its_window)
{
    int64_t expires = engine_park_expires_at(def, T0);
    ck_assert_int_eq(expires, T0 + 2 * MIN);
    engine_result_t r = engine_judge_parked("StockReserved", "awaiting_payment", expires, expires);
    ck_assert_int_eq(r.outcome, ENGINE_PARKED); /* at the end: still waiting */
    r = engine_judge_parked("StockReserved", "awaiting_payment", expires, expires + 1);
    ck_assert_int_eq(r.outcome, ENGINE_VIOLATION);
    ck_assert_str_eq(r.detail, "StockReserved waited past its reorder window in awaiting_payment");
    r = engine_judge_parked("PaymentCaptured", NULL, expires, expires + 1);
    ck_assert_int_eq(r.outcome, ENGINE_VIOLATION);
    ck_assert_str_eq(r.detail, "the instance did not start within the reorder window");
}
END_TEST

START_TEST(sequence_alert_names_the_event_and_its_owner)
{
    engine_alert_text_t text;
    json_t *details = engine_sequence_alert(
        def, "engine_order", "O1", "awaiting_payment", "RefundIssued", "e9",
        "RefundIssued waited past its reorder window in awaiting_payment", &text);
    ck_assert_str_eq(text.summary, "engine_order O1 out of sequence in awaiting_payment: "
                                   "RefundIssued waited past its reorder window in "
                                   "awaiting_payment (RefundIssued); owner payments");
    ck_assert_str_eq(text.identity, "steward:sequence:engine_order:O1:e9");
    ck_assert_str_eq(text.owner, "payments");
    ck_assert_str_eq(json_string_value(json_object_get(details, "event_id")), "e9");
    engine_alert_text_clear(&text);
    json_decref(details);

    /* No instance, and a version that does not load: the default owner. */
    details = engine_sequence_alert(NULL, "p", "K", NULL, "T", "e1", "why", &text);
    ck_assert_str_eq(text.summary, "p K out of sequence: why (T); owner default");
    ck_assert_ptr_null(text.state);
    engine_alert_text_clear(&text);
    json_decref(details);
}
END_TEST

/* A duplicated event, parked once, judged once: the second copy is a
 * duplicate and does not park again. */
START_TEST(duplicated_parked_event_is_judged_once)
{
    apply("OrderPlaced", "e1", T0);
    engine_event_t stock = event("StockReserved", "e3", T0 + 2 * MIN, "{\"order_id\":\"O1\"}");
    ck_assert_int_eq(engine_apply(def, &inst, &stock, false).outcome, ENGINE_PARKED);
    ck_assert_int_eq(engine_apply(def, &inst, &stock, true).outcome, ENGINE_DUPLICATE);
    apply("PaymentCaptured", "e2", T0 + 3 * MIN);
    ck_assert_int_eq(engine_replay(def, &inst, &stock).outcome, ENGINE_ADVANCED);
    ck_assert_int_eq(inst.state_entered_ms, T0 + 3 * MIN); /* not back to +2m */
}
END_TEST

Suite *engine_suite(void)
{
    Suite *s = suite_create("engine");
    TCase *tc = tcase_create("engine");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, start_creates_the_instance_with_deadlines_and_captures);
    tcase_add_test(tc, transition_advances_captures_and_restarts_the_deadline);
    tcase_add_test(tc, seen_event_is_a_duplicate_and_changes_nothing);
    tcase_add_test(tc, later_step_first_is_parked_then_replayed);
    tcase_add_test(tc, event_before_its_instance_is_parked);
    tcase_add_test(tc, event_no_later_state_accepts_is_unexpected);
    tcase_add_test(tc, event_a_later_state_accepts_is_parked);
    tcase_add_test(tc, event_after_the_end_is_late);
    tcase_add_test(tc, second_start_event_never_resets);
    tcase_add_test(tc, time_in_a_state_never_runs_back);
    tcase_add_test(tc, next_deadline_is_the_earlier_unjudged_one);
    tcase_add_test(tc, late_step_is_judged_from_event_time_without_the_scheduler);
    tcase_add_test(tc, step_on_time_or_at_the_deadline_is_not_late);
    tcase_add_test(tc, late_is_the_same_whether_or_not_judged_overdue);
    tcase_add_test(tc, terminal_step_after_the_process_deadline_is_late);
    tcase_add_test(tc, lateness_saturates_instead_of_overflowing);
    tcase_add_test(tc, deadline_lateness_is_the_state_part_alone);
    tcase_add_test(tc, operator_close_enters_the_terminal_state_as_an_event_would);
    tcase_add_test(tc, standing_is_judged_against_the_watermark);
    tcase_add_test(tc, missing_capture_is_noted_not_fatal);
    tcase_add_test(tc, outcome_names_match_the_schema);
    tcase_add_test(tc, deadlines_saturate_instead_of_overflowing);
    tcase_add_test(tc, deadline_is_due_against_the_watermark_and_grace);
    tcase_add_test(tc, process_deadline_is_due_beside_the_state_deadline);
    tcase_add_test(tc, finished_or_absent_instance_has_nothing_due);
    tcase_add_test(tc, reordered_step_deadline_runs_from_the_entry);
    tcase_add_test(tc, time_in_state_never_runs_back);
    tcase_add_test(tc, undeclared_event_is_unexpected_with_reason);
    tcase_add_test(tc, parked_event_expires_once_the_watermark_passes_its_window);
    tcase_add_test(tc, duplicated_parked_event_is_judged_once);
    tcase_add_test(tc, sequence_alert_names_the_event_and_its_owner);
    suite_add_tcase(s, tc);
    return s;
}
